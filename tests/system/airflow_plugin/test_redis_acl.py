"""The Airflow side works through Airflow's Redis user alone (``fivetran-events redis
acl``): the sensor's poke, the Astronomer-compatible sensor's kept target, the
deferrable sensor's trigger (woken by the app's change message) and the asset watcher.
In this process, on a redis-server of the test's own; no Airflow services. The user's
forbidden writes: tests/integration/webhook_app/test_redis_acl.py.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from fivetran_events import HistoryWriter, Settings, parse_event
from fivetran_events.timeutil import iso, to_ms
from testkit.own_redis import OwnRedis, own_redis
from testkit.redis_acl import airflow_url, app_url, apply_acl
from testkit.support import at, conn_uri, encode, payload

PREFIX = "acl:"
CONN_ID = "acl_redis"
CONNECTOR = "acl_c"


@pytest.fixture
def server(tmp_path: Path, airflow_db: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[OwnRedis]:
    """A redis-server with both users; the connection ``acl_redis`` as Airflow's user."""
    with own_redis(tmp_path / "redis") as srv:
        apply_acl(srv, PREFIX)
        monkeypatch.setenv(f"AIRFLOW_CONN_{CONN_ID.upper()}", conn_uri(airflow_url(srv), PREFIX))
        yield srv


def record(server: OwnRedis, sync_id: str, ended: Any, status: str = "SUCCESSFUL") -> None:
    """Record a sync end as the webhook does, through the app's user."""
    settings = Settings(redis_url=app_url(server), key_prefix=PREFIX)
    writer = HistoryWriter(settings.redis_client(), PREFIX, settings.retention_ms)
    body = payload("sync_end", CONNECTOR, ended, sync_id=sync_id, status=status)
    assert writer.record(parse_event(encode(body))).status.value == "recorded"


def test_the_sensor_pokes(server: OwnRedis) -> None:
    from airflow_plugin.sensors import FivetranDateTimeSensor

    sensor = FivetranDateTimeSensor(task_id="s", connector_id=CONNECTOR, redis_conn_id=CONN_ID)
    context: Any = {"data_interval_end": at(11)}
    assert sensor.poke(context).is_done is False
    record(server, "ok-12", at(12))
    done = sensor.poke(context)
    assert done.is_done and dict(done.xcom_value or {})["sync_id"] == "ok-12"


def test_the_astronomer_sensor_keeps_its_target(server: OwnRedis) -> None:
    """Its one write, the first try's target kept for retries (SET NX EX in MULTI)."""
    from airflow_plugin.astronomer import FivetranSensor

    record(server, "old", at(10, 6))
    context: Any = {"ti": SimpleNamespace(dag_id="d", run_id="r1", task_id="s", map_index=-1)}

    def sensor() -> Any:
        return FivetranSensor(
            task_id="s", deferrable=False, connector_id=CONNECTOR, redis_conn_id=CONN_ID
        )

    assert sensor()._target_ms(context) == to_ms(at(10, 6)) + 1
    record(server, "new", at(11, 6))
    assert sensor()._target_ms(context) == to_ms(at(10, 6)) + 1  # a retry keeps it
    assert sensor().poke(context).is_done is True


def test_the_deferred_trigger_is_woken_by_the_apps_change(server: OwnRedis) -> None:
    """It subscribes to the history's changes and reads the decision as Airflow's user."""
    from airflow_plugin.triggers.decision import FivetranSyncDecisionTrigger

    trigger = FivetranSyncDecisionTrigger(
        CONNECTOR, to_ms(at(11)), redis_conn_id=CONN_ID, recheck_interval=60
    )

    async def body() -> dict[str, Any]:
        async def first() -> dict[str, Any]:
            async for event in trigger.run():
                return dict(event.payload)
            raise AssertionError("the trigger ended without an event")

        task = asyncio.create_task(first())
        await asyncio.sleep(0)
        # The recheck is a minute away: only the change message can wake it in time.
        while not server.client().execute_command("PUBSUB", "NUMPAT"):
            await asyncio.sleep(0.05)
        record(server, "ok-12", at(12))
        return await asyncio.wait_for(task, 30)

    event = asyncio.run(asyncio.wait_for(body(), 60))
    assert event["status"] == "success", event
    assert event["decision"]["sync"]["sync_id"] == "ok-12"


def test_the_watcher_sends_a_success(server: OwnRedis) -> None:
    from airflow_plugin.triggers.watcher import FivetranSyncWatcherTrigger

    record(server, "ok-12", at(12))
    trigger = FivetranSyncWatcherTrigger(CONNECTOR, redis_conn_id=CONN_ID, start=str(iso(at(11))))

    async def first() -> dict[str, Any]:
        async for event in trigger.run():
            return dict(event.payload)
        raise AssertionError("the watcher ended without an event")

    event = asyncio.run(asyncio.wait_for(first(), 60))
    assert event["sync_id"] == "ok-12"


def test_the_sync_operator_records_nothing_and_goes_on(server: OwnRedis) -> None:
    """Recording a sync end read from Fivetran's API is the app's (reconcile): through
    Airflow's user the operator logs that it could not, and does not fail."""
    from airflow_plugin.operators.sync import FivetranSyncOperator
    from fivetran_events import Completion, Decision, Outcome

    op = FivetranSyncOperator(task_id="t", connector_id=CONNECTOR, redis_conn_id=CONN_ID)
    ended = to_ms(at(12))
    op._record(
        Decision(Outcome.SUCCESS, "read", ended, Completion("api-1", "SUCCESSFUL", ended, True))
    )
    assert server.client().keys(f"{PREFIX}*") == []
