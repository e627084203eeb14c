"""A migrated Airflow (own AIRFLOW_HOME, SQLite) for the DAG factory's dag.test() runs.

Airflow reads its configuration when first imported, so the environment is set here,
at collection, before any test module imports Airflow.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

_HOME = Path(tempfile.mkdtemp(prefix="fte-airflow-"))
os.environ.update({
    "AIRFLOW_HOME": str(_HOME),
    "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{_HOME}/airflow.db",
    "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
    "AIRFLOW__LOGGING__LOGGING_LEVEL": "WARNING",
})


@pytest.fixture(scope="session")
def airflow_db() -> Path:
    """Run ``airflow db migrate`` once per session; return AIRFLOW_HOME."""
    subprocess.run([sys.executable, "-m", "airflow", "db", "migrate"], check=True,
                   env=dict(os.environ), timeout=300, stdout=subprocess.DEVNULL)
    return _HOME
