"""OpenLineage end to end: signed webhooks to the real server, a real worker, the receiver.

Each test runs gunicorn (testkit/servers.py), a ``fivetran-events worker`` process and
the schema-validating receiver (testkit/openlineage_receiver.py) on loopback ports, with
no Airflow URL unless it says so: lineage alone is a supported set-up (the watcher path
sets only OPENLINEAGE_URL and runs the worker).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
import requests
from jsonschema import Draft202012Validator, FormatChecker
from referencing import Resource

from fivetran_events import Settings
from fivetran_events.deliveries import DeliveryState
from fivetran_events.keys import delivery_id
from testkit.fivetran_api import TEST_API_KEY, TEST_API_SECRET, FivetranStandIn
from testkit.openlineage_receiver import LineageReceiver, registry
from testkit.processes import poll_until
from testkit.servers import webhook_server
from testkit.support import WEBHOOK_PATH, payload, signed
from testkit.worker_process import WorkerProcess
from webhook_app.forwarding.lineage import FACET_SCHEMA_PATH, run_id
from webhook_app.forwarding.store import delivery_store

CONNECTOR = "assimilate_seem"
#: How long after the last expected event a test keeps watching for an extra one.
SETTLE_S = 1.5


@pytest.fixture
def receiver() -> Iterator[LineageReceiver]:
    with LineageReceiver() as r:
        yield r


def client_env(receiver: LineageReceiver, retries: int | None = None) -> dict[str, str]:
    """The OpenLineage client's own configuration: OPENLINEAGE_URL, or with ``retries``
    its dynamic transport variables (so the client's HTTP retries can be turned off and
    the outbox's backoff is what retries)."""
    if retries is None:
        return {"OPENLINEAGE_URL": receiver.url}
    return {
        "OPENLINEAGE__TRANSPORT__TYPE": "http",
        "OPENLINEAGE__TRANSPORT__URL": receiver.url,
        "OPENLINEAGE__TRANSPORT__TIMEOUT": "2",
        "OPENLINEAGE__TRANSPORT__RETRY": f'{{"total": {retries}}}',
    }


class Stack:
    """The webhook server and a worker, both configured for lineage."""

    def __init__(self, base: str, worker: WorkerProcess, settings: Settings) -> None:
        self.base = base
        self.worker = worker
        self.settings = settings

    def post(self, body: dict[str, Any]) -> dict[str, Any]:
        raw, headers = signed(body)
        resp = requests.post(self.base + WEBHOOK_PATH, data=raw, headers=headers, timeout=10)
        assert resp.status_code == 200, resp.text
        return resp.json()  # type: ignore[no-any-return]

    def delivery(self, sync_id: str, kind: str) -> Any:
        store = delivery_store(self.settings, redis.Redis.from_url(self.settings.redis_url))
        return store.get(delivery_id(CONNECTOR, sync_id, f"openlineage:{kind}"))


@pytest.fixture
def stack_factory(settings: Settings, redis_url: str, tmp_path: Path) -> Iterator[Any]:
    started: list[Any] = []

    def start(env: dict[str, str], airflow_url: str = "", public: bool = False) -> Stack:
        """``public``: the worker's FIVETRAN_EVENTS_PUBLIC_URL is the server's base URL."""
        server_env = {"FIVETRAN_EVENTS_AIRFLOW_URL": airflow_url, **env}
        server = webhook_server(redis_url, tmp_path, 1, None, **server_env)
        base, _ = server.__enter__()
        started.append(server)
        worker = WorkerProcess(
            settings,
            tmp_path,
            args=("--concurrency", "1"),
            environ={**env, "FIVETRAN_EVENTS_PUBLIC_URL": base} if public else env,
            airflow_url=airflow_url,
            forward_backoff_seconds="0.2",
            forward_backoff_max_seconds="1",
            # Airflow's credentials when it has an Airflow (nothing listens there).
            **({"airflow_username": "admin", "airflow_password": "x"} if airflow_url else {}),
        )
        started.append(worker)
        return Stack(base, worker, settings)

    yield start
    for thing in reversed(started):
        thing.__exit__(None, None, None)


def wait_events(receiver: LineageReceiver, n: int, stack: Stack, timeout: float = 30) -> None:
    poll_until(
        lambda: len(receiver.events) >= n,
        f"{n} OpenLineage events",
        timeout,
        details=lambda: (
            f"events {receiver.types()}, invalid {receiver.invalid}\n" + stack.worker.log()
        ),
    )
    time.sleep(SETTLE_S)  # an extra (duplicate) event would arrive meanwhile


def end_then_success(stack: Stack, receiver: LineageReceiver, status: str) -> str:
    """A sync_start, a sync_end with ``status``, then one SUCCESSFUL under the same sync
    id, each sent once the previous event arrived; return the sync id."""
    start = payload("sync_start", CONNECTOR)
    sync: str = start["sync_id"]
    stack.post(start)
    stack.post(payload("sync_end", CONNECTOR, sync_id=sync, status=status))
    wait_events(receiver, 2, stack)
    stack.post(payload("sync_end", CONNECTOR, sync_id=sync))
    wait_events(receiver, 3, stack)
    return sync


class TestRuns:
    def test_start_and_complete_exactly_once_without_airflow(
        self, receiver: LineageReceiver, stack_factory: Any
    ) -> None:
        """A signed sync_start and sync_end, each delivered twice, give START and COMPLETE once."""
        stack = stack_factory(client_env(receiver))
        start = payload("sync_start", CONNECTOR)
        sync = start["sync_id"]
        end = payload("sync_end", CONNECTOR, sync_id=sync)
        for body in (start, start, end, end):
            stack.post(body)
        wait_events(receiver, 2, stack)
        assert receiver.types() == ["START", "COMPLETE"]
        assert receiver.invalid == []
        assert {e["run"]["runId"] for e in receiver.events} == {run_id(CONNECTOR, sync)}
        job = receiver.events[1]["job"]
        assert (job["namespace"], job["name"]) == ("fivetran://inappropriate_implode", CONNECTOR)
        facet = receiver.events[1]["run"]["facets"]["fivetran_sync"]
        assert (facet["syncId"], facet["status"]) == (sync, "SUCCESSFUL")
        assert stack.delivery(sync, "COMPLETE").state is DeliveryState.DELIVERED

    def test_outputs_are_the_destinations_tables_read_from_fivetran(
        self, receiver: LineageReceiver, stack_factory: Any, api: FivetranStandIn
    ) -> None:
        """With a Fivetran key, the worker reads the connection's enabled tables and its
        destination once (then cached) and names them as outputs, as Airflow's SQL
        lineage names a Postgres table: a disabled table is no output."""
        api.connector(CONNECTOR, group_id="inappropriate_implode")
        api.tables(
            CONNECTOR,
            {"salesforce": ["account", "Lead"]},
            disabled={"salesforce": ["task"]},
            renamed={"salesforce.Lead": "lead"},
        )
        api.destination(
            "inappropriate_implode",
            "postgres_warehouse",
            host="wh.internal",
            port=5432,
            database="analytics",
        )
        fivetran = {
            "FIVETRAN_EVENTS_FIVETRAN_API_URL": api.url,
            "FIVETRAN_EVENTS_FIVETRAN_API_KEY": TEST_API_KEY,
            "FIVETRAN_EVENTS_FIVETRAN_API_SECRET": TEST_API_SECRET,
        }
        stack = stack_factory({**client_env(receiver), **fivetran})
        for _ in range(2):
            start = payload("sync_start", CONNECTOR)
            stack.post(start)
            stack.post(payload("sync_end", CONNECTOR, sync_id=start["sync_id"]))
        wait_events(receiver, 4, stack)
        assert receiver.types() == ["START", "COMPLETE", "START", "COMPLETE"]
        assert receiver.invalid == []
        for complete in (receiver.events[1], receiver.events[3]):
            outputs = {(o["namespace"], o["name"]) for o in complete["outputs"]}
            assert outputs == {
                ("postgres://wh.internal:5432", "analytics.salesforce.account"),
                ("postgres://wh.internal:5432", "analytics.salesforce.lead"),
            }
        # Read once, then from the cache: one schema read, one destination read.
        assert api.calls["GET /v1/connections/{id}/schemas"] == 1, api.calls
        assert api.calls["GET /v1/destinations/{id}"] == 1, api.calls

    def test_failure_is_fail_with_its_reason(
        self, receiver: LineageReceiver, stack_factory: Any
    ) -> None:
        """A FAILURE ends the run with FAIL, Fivetran's reason and the start time in its facet."""
        stack = stack_factory(client_env(receiver))
        start = payload("sync_start", CONNECTOR)
        stack.post(start)
        end = payload(
            "sync_end",
            CONNECTOR,
            sync_id=start["sync_id"],
            status="FAILURE_WITH_TASK",
            reason="permission denied for schema salesforce",
            taskType="reconnect",
        )
        stack.post(end)
        wait_events(receiver, 2, stack)
        assert receiver.types() == ["START", "FAIL"]
        assert receiver.invalid == []
        facet = receiver.events[1]["run"]["facets"]["fivetran_sync"]
        assert facet["failureReason"] == "permission denied for schema salesforce"
        assert facet["taskType"] == "reconnect"
        assert facet["startedAt"] == start["created"]

    def test_rescheduled_then_successful_stays_one_run(
        self, receiver: LineageReceiver, stack_factory: Any
    ) -> None:
        """RESCHEDULED is OTHER (the run stays open); the later success completes it."""
        sync = end_then_success(stack_factory(client_env(receiver)), receiver, "RESCHEDULED")
        assert receiver.types() == ["START", "OTHER", "COMPLETE"]
        assert {e["run"]["runId"] for e in receiver.events} == {run_id(CONNECTOR, sync)}
        assert receiver.invalid == []

    def test_failed_then_successful_ends_two_runs_the_second_a_child(
        self, receiver: LineageReceiver, stack_factory: Any
    ) -> None:
        """Fivetran's FAILED then SUCCESSFUL under one sync id: the FAIL ends the sync's
        run, and the COMPLETE is a run of its own whose parent facet names that run, so
        no run ends twice (the receiver refuses a second end)."""
        sync = end_then_success(stack_factory(client_env(receiver)), receiver, "FAILED")
        assert receiver.invalid == []
        assert receiver.types() == ["START", "FAIL", "COMPLETE"]
        first, _, complete = (e["run"] for e in receiver.events)
        assert first["runId"] == receiver.events[1]["run"]["runId"] == run_id(CONNECTOR, sync)
        assert complete["runId"] != first["runId"]
        parent = complete["facets"]["parent"]
        assert parent["run"]["runId"] == first["runId"]
        assert (parent["job"]["namespace"], parent["job"]["name"]) == (
            "fivetran://inappropriate_implode",
            CONNECTOR,
        )

    def test_no_sync_start_still_a_complete_run(
        self, receiver: LineageReceiver, stack_factory: Any
    ) -> None:
        """A lost sync_start: the COMPLETE alone is a whole run (a valid event)."""
        stack = stack_factory(client_env(receiver))
        stack.post(payload("sync_end", CONNECTOR))
        wait_events(receiver, 1, stack)
        assert receiver.types() == ["COMPLETE"]
        assert receiver.invalid == []

    def test_receiver_down_then_up_retries_exactly_once_in_order(
        self, receiver: LineageReceiver, stack_factory: Any
    ) -> None:
        """Refused connections retry with the outbox's backoff; then each event once,
        START first."""
        stack = stack_factory(client_env(receiver, retries=0))
        receiver.down()
        start = payload("sync_start", CONNECTOR)
        sync = start["sync_id"]
        stack.post(start)
        stack.post(payload("sync_end", CONNECTOR, sync_id=sync))
        poll_until(
            lambda: (
                (d := stack.delivery(sync, "START")) is not None
                and d.state is DeliveryState.RETRYING
                and int(d.get("attempts") or 0) >= 2
            ),
            "the START delivery retrying",
            30,
            details=stack.worker.log,
        )
        assert stack.delivery(sync, "COMPLETE").state is DeliveryState.PENDING  # waits for START
        receiver.up()
        wait_events(receiver, 2, stack)
        assert receiver.types() == ["START", "COMPLETE"]
        assert receiver.invalid == []

    def test_receiver_5xx_retries(self, receiver: LineageReceiver, stack_factory: Any) -> None:
        """A 503 answer is retried, not given up."""
        stack = stack_factory(client_env(receiver, retries=0))
        receiver.status = 503
        body = payload("sync_end", CONNECTOR)
        stack.post(body)
        poll_until(lambda: receiver.requests >= 2, "two tries", 30, details=stack.worker.log)
        receiver.status = None
        wait_events(receiver, 1, stack)
        assert receiver.types() == ["COMPLETE"]

    def test_receiver_4xx_is_failed_not_retried(
        self, receiver: LineageReceiver, stack_factory: Any
    ) -> None:
        """A 400 is the receiver's final word: the delivery is failed with its answer."""
        stack = stack_factory(client_env(receiver, retries=0))
        receiver.status = 400
        body = payload("sync_end", CONNECTOR)
        stack.post(body)
        poll_until(
            lambda: (
                (d := stack.delivery(body["sync_id"], "COMPLETE")) is not None
                and d.state is DeliveryState.FAILED
            ),
            "the delivery failed",
            30,
            details=stack.worker.log,
        )
        time.sleep(SETTLE_S)
        assert receiver.requests == 1
        assert "400" in (stack.delivery(body["sync_id"], "COMPLETE").get("reason") or "")

    def test_with_airflow_forwarding_too(
        self, receiver: LineageReceiver, stack_factory: Any
    ) -> None:
        """With an Airflow URL as well, a success also gets its dataset delivery."""
        stack = stack_factory(client_env(receiver), airflow_url="http://127.0.0.1:9")
        body = payload("sync_end", CONNECTOR)
        stack.post(body)
        wait_events(receiver, 1, stack)
        assert receiver.types() == ["COMPLETE"]
        store = delivery_store(stack.settings, redis.Redis.from_url(stack.settings.redis_url))
        uris = {d.uri for d in store.for_syncs(CONNECTOR, [body["sync_id"]])[body["sync_id"]]}
        assert uris == {"openlineage:COMPLETE", f"fivetran://connector/{CONNECTOR}"}

    def test_the_facets_schema_url_opens_on_the_webhook_server(
        self, receiver: LineageReceiver, stack_factory: Any
    ) -> None:
        """With FIVETRAN_EVENTS_PUBLIC_URL the facet's ``_schemaURL`` is under it, and the
        running webhook server answers it with the schema the facet validates against
        (the receiver, which has no schema by that URL, opened it there too)."""
        stack = stack_factory(client_env(receiver), public=True)
        start = payload("sync_start", CONNECTOR)
        stack.post(start)
        stack.post(payload("sync_end", CONNECTOR, sync_id=start["sync_id"], status="FAILURE"))
        wait_events(receiver, 2, stack)
        assert receiver.types() == ["START", "FAIL"] and receiver.invalid == []
        for event in receiver.events:
            facet = event["run"]["facets"]["fivetran_sync"]
            url, _, pointer = facet["_schemaURL"].partition("#")
            assert (url, pointer) == (stack.base + FACET_SCHEMA_PATH, "/$defs/FivetranSyncRunFacet")
            resp = requests.get(url, timeout=10)
            assert resp.status_code == 200, resp.text
            assert resp.headers["Content-Type"] == "application/schema+json"
            fetched = registry().with_resource(url, Resource.from_contents(resp.json()))
            validator = Draft202012Validator(
                {"$ref": facet["_schemaURL"]}, registry=fetched, format_checker=FormatChecker()
            )
            assert list(validator.iter_errors(facet)) == []
            assert not validator.is_valid({**facet, "syncId": 7})  # the fetched schema bites
