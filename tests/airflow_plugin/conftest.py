"""A migrated Airflow (SQLite, own AIRFLOW_HOME) for dag.test(), and helpers to drive it.

Airflow reads its configuration when ``airflow`` is first imported, so AIRFLOW_HOME and
the database URL are set here, at collection, before any test module imports Airflow.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest

_HOME = Path(tempfile.mkdtemp(prefix="fte-airflow-"))
(_HOME / "dags").mkdir()
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
    subprocess.run([sys.executable, "-m", "airflow", "db", "migrate"], check=True,
                   env={**os.environ, **AIRFLOW_ENV}, timeout=300,
                   stdout=subprocess.DEVNULL)
    return _HOME


def conn_uri(redis_url: str, prefix: str, **extra: str) -> str:
    """The ``AIRFLOW_CONN_...`` URI of the history's Redis with its key prefix."""
    query = "&".join(f"{k}={quote(str(v), safe='')}" for k, v in
                     {"key_prefix": prefix, **extra}.items())
    return f"{redis_url}?{query}"


@pytest.fixture
def redis_conn(redis_url: str, settings, monkeypatch: pytest.MonkeyPatch) -> str:  # type: ignore[no-untyped-def]
    """Point the default connection ``fivetran_events_redis`` at the suite's Redis."""
    uri = conn_uri(redis_url, settings.key_prefix)
    monkeypatch.setenv("AIRFLOW_CONN_FIVETRAN_EVENTS_REDIS", uri)
    return uri


@pytest.fixture
def af(airflow_db: Path, redis_conn: str) -> Iterator[Path]:
    """Everything a dag.test() of the plugin needs: migrated DB and the Redis connection."""
    yield airflow_db
