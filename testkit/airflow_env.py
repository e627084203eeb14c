"""The test session's Airflow environment (own AIRFLOW_HOME, SQLite), set at import.

Airflow reads its configuration when ``airflow`` is first imported, so tests/conftest.py
imports this module before anything else: every in-process use of Airflow (dag.test(),
DagBag, the DAG factory) sees this home; it starts nothing, and the home is removed
when the test process exits. Its ``airflow_db`` fixture
(``airflow db migrate``) is registered in tests/system/conftest.py only. Real components
started by the harnesses get environments of their own.
"""

from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

_HOME = Path(tempfile.mkdtemp(prefix="fte-airflow-"))
(_HOME / "dags").mkdir()
_OWNER = os.getpid()


def _remove_home() -> None:
    # Only in the process that made it: a forked child exiting must not take it along.
    if os.getpid() == _OWNER:
        shutil.rmtree(_HOME, ignore_errors=True)


atexit.register(_remove_home)
AIRFLOW_ENV = {
    "AIRFLOW_HOME": str(_HOME),
    "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{_HOME}/airflow.db",
    "AIRFLOW__CORE__DAGS_FOLDER": str(_HOME / "dags"),
    "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
    "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
    "AIRFLOW__CORE__PARALLELISM": "2",
    "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
    "AIRFLOW__LOGGING__LOGGING_LEVEL": "WARNING",
    "AIRFLOW__SENSORS__DEFAULT_TIMEOUT": "3600",
}
os.environ.update(AIRFLOW_ENV)


@pytest.fixture(scope="session")
def airflow_db() -> Path:
    """Run ``airflow db migrate`` once per session; return AIRFLOW_HOME."""
    subprocess.run(
        [sys.executable, "-m", "airflow", "db", "migrate"],
        check=True,
        env={**os.environ, **AIRFLOW_ENV},
        timeout=300,
        stdout=subprocess.DEVNULL,
    )
    return _HOME
