"""The test session's Airflow environment (own AIRFLOW_HOME, PostgreSQL), set at import.

Airflow reads its configuration when ``airflow`` is first imported, so tests/conftest.py
imports this module before anything else: every in-process use of Airflow (dag.test(),
DagBag, the DAG factory) sees this home; it starts nothing, and the home is removed
when the test process exits. Its metadata database is a PostgreSQL of the process's own,
as production runs Airflow (testkit/own_postgres.py): the port is chosen here, the server
started by the ``airflow_db`` fixture (with ``airflow db migrate``), which
tests/system/conftest.py alone registers; the faster tiers never touch the database. Real
components started by the harnesses get environments of their own.
"""

from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from .own_postgres import own_postgres, sqlalchemy_url
from .processes import free_port

_HOME = Path(tempfile.mkdtemp(prefix="fte-airflow-"))
(_HOME / "dags").mkdir()
_OWNER = os.getpid()
#: The port of the session's PostgreSQL, which ``airflow_db`` starts: Airflow reads its URL
#: when first imported, before any fixture runs.
_PG_PORT = free_port()
#: psycopg 3 for both engines: without the async URL Airflow derives one for asyncpg.
_PG_URL = sqlalchemy_url(_PG_PORT)


def _remove_home() -> None:
    # Only in the process that made it: a forked child exiting must not take it along.
    if os.getpid() == _OWNER:
        shutil.rmtree(_HOME, ignore_errors=True)


atexit.register(_remove_home)
AIRFLOW_ENV = {
    "AIRFLOW_HOME": str(_HOME),
    "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": _PG_URL,
    "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN_ASYNC": _PG_URL,
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
def airflow_db() -> Iterator[Path]:
    """Start the session's PostgreSQL and run ``airflow db migrate`` once; yield
    AIRFLOW_HOME. The server stops, by its PID, when the session ends."""
    with own_postgres(_PG_PORT):
        subprocess.run(
            [sys.executable, "-m", "airflow", "db", "migrate"],
            check=True,
            env={**os.environ, **AIRFLOW_ENV},
            timeout=300,
            stdout=subprocess.DEVNULL,
        )
        yield _HOME
        # Close the test process's pooled connections before the server goes, or its
        # shutdown reaches them as errors at exit.
        if "airflow.settings" in sys.modules:
            sys.modules["airflow.settings"].dispose_orm()
