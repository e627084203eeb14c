"""Helpers to drive the plugin in dag.test() against the session's migrated Airflow.

The Airflow environment itself (AIRFLOW_HOME, the SQLite database) is set in
tests/airflow_env.py, before anything imports Airflow.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest

# The session's Airflow environment is set in tests/airflow_env.py (imported first by
# tests/conftest.py, before anything can import Airflow).
from ..airflow_env import AIRFLOW_ENV  # noqa: F401  (test_live.py imports it from here)


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
