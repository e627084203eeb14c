"""Helpers to drive the plugin in dag.test() against the session's migrated Airflow.

The Airflow environment itself (AIRFLOW_HOME, the SQLite database) is set in
testkit/airflow_env.py, before anything imports Airflow.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from fivetran_events import Settings
from testkit.support import conn_uri
from testkit.trigger_waits import FirstWaits


@pytest.fixture
def redis_conn(redis_url: str, settings: Settings, monkeypatch: pytest.MonkeyPatch) -> str:
    """Point the default connection ``fivetran_events_redis`` at the suite's Redis."""
    uri = conn_uri(redis_url, settings.key_prefix)
    monkeypatch.setenv("AIRFLOW_CONN_FIVETRAN_EVENTS_REDIS", uri)
    return uri


@pytest.fixture
def dagtest_airflow(airflow_db: Path, redis_conn: str) -> Iterator[Path]:
    """Everything a dag.test() of the plugin needs: migrated DB and the Redis connection."""
    yield airflow_db


@pytest.fixture
def first_waits(monkeypatch: pytest.MonkeyPatch) -> FirstWaits:
    """Which decision triggers are waiting (testkit/trigger_waits.py)."""
    waits = FirstWaits()
    waits.install(monkeypatch)
    return waits


# A redis-server of a test's own, to stop and start again (tests/system/airflow_plugin/outage.py).
from .outage import own_redis  # noqa: E402, F401
