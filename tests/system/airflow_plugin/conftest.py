"""Helpers to drive the plugin in dag.test() against the session's migrated Airflow.

The Airflow environment itself (AIRFLOW_HOME, the SQLite database) is set in
testkit/airflow_env.py, before anything imports Airflow.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from pytest_redis.executor import RedisExecutor

from fivetran_events import Settings
from testkit.airflow_harness import AirflowServer
from testkit.fivetran_api import FivetranStandIn, serving
from testkit.servers import webhook_server
from testkit.support import SECRET, conn_uri
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


# --- Fivetran's stand-in, its webhooks going to a real webhook server ------------------


@pytest.fixture(scope="module")
def history_url(redis_proc: RedisExecutor) -> str:
    return f"redis://{redis_proc.host}:{redis_proc.port}/0"


@pytest.fixture(scope="module")
def fivetran(
    history_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[FivetranStandIn]:
    """The stand-in, its webhooks going to a real webhook server on the suite's Redis."""
    tmp = tmp_path_factory.mktemp("sync-op")
    with (
        webhook_server(history_url, tmp, workers=1, FIVETRAN_EVENTS_AIRFLOW_URL="") as (base, _),
        serving(FivetranStandIn(sync_seconds=2.0)) as api,
    ):
        api.webhook_url, api.webhook_secret = f"{base}/webhooks/fivetran", SECRET
        yield api


@pytest.fixture
def api(fivetran: FivetranStandIn, history_url: str) -> Iterator[FivetranStandIn]:
    """The module's stand-in, reset for the test. After it, nothing the test started goes on
    sending webhooks, and what they and the test's tasks recorded in the suite's Redis goes
    too: its connectors would otherwise show up in a later test's history (no fixture of
    this module flushes it)."""
    fivetran.silent = False
    fivetran.sync_seconds = 2.0
    fivetran.calls.clear()
    yield fivetran
    fivetran.quiesce()
    redis.Redis.from_url(history_url).flushdb()
    fivetran.silent = fivetran.resync_conflict = False
    fivetran.next_status, fivetran.on_sync_end = "SUCCESSFUL", None


def fivetran_default(api: FivetranStandIn) -> dict[str, str]:
    """The stand-in as Airflow's ``fivetran_default`` connection."""
    return {"conn_type": "http", "host": api.url, "login": api.api_key, "password": api.api_secret}


@pytest.fixture
def conn(api: FivetranStandIn, monkeypatch: pytest.MonkeyPatch) -> FivetranStandIn:
    """The stand-in as ``fivetran_default`` for operators run in this process."""
    monkeypatch.setenv("AIRFLOW_CONN_FIVETRAN_DEFAULT", json.dumps(fivetran_default(api)))
    return api


@pytest.fixture(scope="module")
def fivetran_airflow(airflow3: AirflowServer, fivetran: FivetranStandIn) -> AirflowServer:
    """The session's Airflow with ``fivetran_default`` pointing at the stand-in."""
    body = {"connection_id": "fivetran_default", **fivetran_default(fivetran)}
    resp = airflow3.request("POST", "/api/v2/connections", json=body)
    if resp.status_code == 409:
        resp = airflow3.request("PATCH", "/api/v2/connections/fivetran_default", json=body)
    assert resp.status_code in (200, 201), resp.text
    return airflow3


# A redis-server of a test's own, to stop and start again (tests/system/airflow_plugin/outage.py).
from .outage import own_redis  # noqa: E402, F401
