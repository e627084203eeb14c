"""The history watcher on the session's real Airflow 3.3: triggerer, scheduler, DAG runs.

A signed webhook records a success; Airflow's own triggerer (no REST call, no Airflow
user) turns it into one asset event carrying the REST forwarder's ``extra`` and the
asset-scheduled DAG runs. The triggerer SIGKILLed between two syncs, and the history's
Redis restarted between two syncs, each still give one event per sync, none twice.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest
import redis

from fivetran_events import Settings
from fivetran_events.deliveries import SyncRef, extra_for
from fivetran_events.keys import delivery_key, sync_deliveries_key
from testkit.airflow_harness import AirflowServer
from testkit.own_redis import OwnRedis, own_redis
from testkit.support import SECRET, TOKEN, pattern_listeners, payload, signed
from testkit.support import deliver as post

from .watchers import POLL, position_key, trigger_events, watch

pytestmark = pytest.mark.slow


def wait_sync_ids(
    airflow3: AirflowServer, connector: str, count: int, timeout: float = 120.0
) -> list[str]:
    def enough() -> list[dict[str, Any]] | None:
        events = trigger_events(airflow3, connector)
        return events if len(events) >= count else None

    events = airflow3.wait_for(f"{count} watcher events of {connector}", enough, timeout, 1.0)
    return [e["sync_id"] for e in events]


def settled_sync_ids(airflow3: AirflowServer, connector: str) -> list[str]:
    """The events' sync ids once two more ticks passed (a duplicate would have come)."""
    time.sleep(2 * POLL + 2)
    return [e["sync_id"] for e in trigger_events(airflow3, connector)]


def stored_sync_id(airflow3: AirflowServer, connector: str, sync_id: str) -> bool:
    return any(v.get("sync_id") == sync_id for v in airflow3.asset_state(position_key(connector)))


@pytest.fixture(scope="module")
def watchers(airflow3: AirflowServer, redis_proc: Any) -> Iterator[None]:
    watch(
        airflow3,
        "watchers_suite.py",
        [("watch_run", "fivetran_events_redis"), ("watch_kill", "fivetran_events_redis")],
    )
    yield
    # Retire the watchers: the session's triggerer would otherwise keep their subscription
    # on the suite's Redis, and later modules count subscriptions to know a sensor listens.
    airflow3.add_dag("watchers_suite.py", "")
    client = redis.Redis(host=redis_proc.host, port=redis_proc.port)
    airflow3.wait_for(
        "the retired watchers to unsubscribe", lambda: pattern_listeners(client) == 0, 180
    )


class TestWatcher:
    def test_success_becomes_one_event_with_the_rest_extra_and_a_dag_run(
        self, airflow3: AirflowServer, watchers: None, http: Any, client: redis.Redis
    ) -> None:
        """One success: one event from the triggerer, its payload the REST path's extra,
        and the asset-scheduled DAG runs."""
        sid = str(uuid.uuid4())
        posted = time.time()
        post(http, payload(connector_id="watch_run", sync_id=sid))
        assert wait_sync_ids(airflow3, "watch_run", 1) == [sid]
        runs = airflow3.wait_for(
            "a run of on_watch_run",
            lambda: [r for r in airflow3.dag_runs("on_watch_run") if r.get("start_date")],
            120,
        )
        # The REST path's extra: what Forwarder.build_extra builds for this delivery.
        (did,) = cast(set[bytes], client.smembers(sync_deliveries_key("test:", "watch_run", sid)))
        record = cast(dict[bytes, bytes], client.hgetall(delivery_key("test:", did.decode())))
        fields = {k.decode(): v.decode() for k, v in record.items()}
        rest_extra = extra_for(client, "test:", SyncRef.from_fields(fields))
        assert trigger_events(airflow3, "watch_run") == [rest_extra]
        assert rest_extra["connector_name"] == "ftar_pg" and rest_extra["sync_id"] == sid
        print(f"webhook -> DAG run started: {runs[0]['start_date']} (posted at {posted:.3f})")
        assert settled_sync_ids(airflow3, "watch_run") == [sid]

    def test_triggerer_killed_between_two_syncs_gives_each_one_event(
        self, airflow3: AirflowServer, watchers: None, http: Any
    ) -> None:
        """SIGKILL the triggerer after the first sync's event, record a second sync while it
        is down: after the restart the second comes once and the first never again."""
        first, second = str(uuid.uuid4()), str(uuid.uuid4())
        post(http, payload(connector_id="watch_kill", sync_id=first))
        assert wait_sync_ids(airflow3, "watch_kill", 1) == [first]
        airflow3.wait_for(
            "the first sync's position stored",
            lambda: stored_sync_id(airflow3, "watch_kill", first),
        )
        airflow3.kill_triggerer()
        try:
            post(http, payload(connector_id="watch_kill", sync_id=second))
        finally:
            airflow3.start_triggerer()
        # A new triggerer takes the watchers over once the killed one's heartbeat is stale.
        assert wait_sync_ids(airflow3, "watch_kill", 2, timeout=180) == [first, second]
        assert settled_sync_ids(airflow3, "watch_kill") == [first, second]


def post_until_recorded(app_client: Any, body: dict[str, Any], timeout: float = 30.0) -> None:
    """POST as Fivetran does: a 503 (Redis restarting) is retried until it is recorded."""
    raw, headers = signed(body)
    deadline = time.monotonic() + timeout
    while True:
        resp = app_client.post("/webhooks/fivetran", data=raw, headers=headers)
        if resp.status_code == 200 or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert resp.status_code == 200, resp.get_json()


def test_redis_restarted_between_two_syncs_gives_each_one_event(
    airflow3: AirflowServer, tmp_path: Path
) -> None:
    """The history's own Redis (AOF on) restarts between two syncs: the watcher
    re-subscribes, re-reads the durable history and sends each sync once."""
    from webhook_app import create_app

    with own_redis(tmp_path / "redis", "--appendonly", "yes", "--appendfsync", "always") as server:
        create_connection(airflow3, "fte_watch_redis", server, "w:")
        app = create_app(
            Settings(
                redis_url=server.url,
                webhook_secrets=[SECRET],
                api_tokens=[TOKEN],
                key_prefix="w:",
            )
        )
        watch(airflow3, "watchers_own_redis.py", [("watch_redis", "fte_watch_redis")])
        first, second = str(uuid.uuid4()), str(uuid.uuid4())
        with app.test_client() as http:
            post_until_recorded(http, payload(connector_id="watch_redis", sync_id=first))
            assert wait_sync_ids(airflow3, "watch_redis", 1) == [first]
            server.restart()
            post_until_recorded(http, payload(connector_id="watch_redis", sync_id=second))
        assert wait_sync_ids(airflow3, "watch_redis", 2) == [first, second]
        assert settled_sync_ids(airflow3, "watch_redis") == [first, second]
        airflow3.add_dag("watchers_own_redis.py", "")  # retire the watcher before Redis goes


def create_connection(airflow3: AirflowServer, conn_id: str, server: OwnRedis, prefix: str) -> None:
    resp = airflow3.request(
        "POST",
        "/api/v2/connections",
        json={
            "connection_id": conn_id,
            "conn_type": "redis",
            "host": "127.0.0.1",
            "port": server.port,
            "extra": json.dumps({"key_prefix": prefix}),
        },
    )
    assert resp.status_code in (201, 409), resp.text
