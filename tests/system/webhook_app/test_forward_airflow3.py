"""Forwarding to a real Airflow 3 (tests/airflow_harness.py): end to end and under faults.

Each test uses its own sync ids; Airflow lives for the session, Redis is flushed after
each test. Every wait is bounded.
"""

from __future__ import annotations

import json
import os
import signal
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from click.testing import CliRunner

from fivetran_events import Settings
from fivetran_events.keys import delivery_id
from testkit.airflow_harness import AirflowServer
from testkit.forward_support import forwarder, post_event, run_worker, syncs
from testkit.support import payload, signed
from testkit.worker_process import WorkerProcess, worker_env
from webhook_app.airflow_client import AirflowClient, AssetNotFound
from webhook_app.cli import main
from webhook_app.forward import DeliveryState, Forwarder

# Includes starting Airflow (bounded by FTE_AIRFLOW_START_TIMEOUT) for the first test.
pytestmark = [pytest.mark.airflow, pytest.mark.redis, pytest.mark.timeout(480)]


def uri(connector_id: str) -> str:
    return f"fivetran://connector/{connector_id}"


@pytest.fixture
def af_settings(settings: Settings, airflow: AirflowServer) -> Settings:
    return Settings(
        **{
            **{k: getattr(settings, k) for k in Settings.model_fields},
            "airflow_url": airflow.url,
            "airflow_username": airflow.username,
            "airflow_password": airflow.password,
        }
    )


@pytest.fixture
def fw(af_settings: Settings, airflow: AirflowServer) -> Forwarder:
    return forwarder(af_settings, airflow.url, airflow.username, airflow.password)


@pytest.fixture
def workers(af_settings: Settings, tmp_path: Path) -> Iterator[list[WorkerProcess]]:
    """Start workers with ``workers.append(start())``; all are stopped by PID afterwards."""
    started: list[WorkerProcess] = []
    yield started
    for w in started:
        w.stop()


def start_worker(
    af_settings: Settings, tmp_path: Path, name: str = "worker", **extra: Any
) -> WorkerProcess:
    extra = {"forward_backoff_max_seconds": 2, **extra}
    return WorkerProcess(af_settings, tmp_path, name, **extra)


def events_of(airflow: AirflowServer, connector_id: str, sync_id: str) -> list[dict[str, Any]]:
    return [
        e
        for e in airflow.asset_events(uri(connector_id))
        if (e.get("extra") or {}).get("sync_id") == sync_id
    ]


def wait_state(
    fw: Forwarder,
    connector_id: str,
    sync_id: str,
    state: DeliveryState,
    timeout: float = 60.0,
    worker: WorkerProcess | None = None,
) -> Any:
    did = delivery_id(connector_id, sync_id, uri(connector_id))
    deadline = time.monotonic() + timeout
    d = None
    while time.monotonic() < deadline:
        d = fw.store.get(did)
        if d is not None and d.state is state:
            return d
        time.sleep(0.1)
    raise AssertionError(
        f"delivery still {d and d.fields} after {timeout}s\n" + (worker.log() if worker else "")
    )


class TestClient:
    def test_exact_uri_lookup(self, airflow: AirflowServer) -> None:
        """uri_pattern is a substring match; the client picks the exact URI."""
        airflow.wait_for_asset(uri("e2e_conn"))
        airflow.wait_for_asset(uri("e2e"))
        c = AirflowClient(airflow.url, airflow.username, airflow.password)
        assert c.version() == "3"
        assert c.asset_id(uri("e2e")) == airflow.asset_id(uri("e2e"))
        assert c.asset_id(uri("e2e_conn")) == airflow.asset_id(uri("e2e_conn"))
        assert c.asset_id(uri("e2e")) != c.asset_id(uri("e2e_conn"))
        with pytest.raises(AssetNotFound, match="no DAG"):
            c.asset_id(uri("nobody_uses_this"))

    def test_token_cached_and_renewed_after_401(self, airflow: AirflowServer) -> None:
        """One token serves many calls; an expired one gets a 401, a new token, and succeeds."""
        airflow.wait_for_asset(uri("e2e"))
        c = AirflowClient(airflow.url, airflow.username, airflow.password, api_version="3")
        assert c.known(uri("e2e")) and c.known(uri("e2e"))
        assert c.tokens_fetched == 1
        expired = airflow.expired_token()
        assert (
            requests.get(
                f"{airflow.url}/api/v2/assets",
                timeout=10,
                headers={"Authorization": f"Bearer {expired}"},
            ).status_code
            == 401
        )
        c.set_token(expired)
        sid = f"tok-{uuid.uuid4()}"
        ev = c.post_event(uri("e2e"), {"sync_id": sid})
        assert c.tokens_fetched == 2
        assert [e["id"] for e in events_of(airflow, "e2e", sid)] == [ev.id]


class TestEndToEnd:
    def test_sync_end_reaches_an_asset_scheduled_dag(
        self,
        http: Any,
        airflow: AirflowServer,
        af_settings: Settings,
        fw: Forwarder,
        workers: list[WorkerProcess],
        tmp_path: Path,
    ) -> None:
        """Signed sync_end -> webhook -> worker -> asset event with extra -> DAG run sees it."""
        cid = "e2e_conn"
        airflow.wait_for_asset(uri(cid))
        workers.append(start_worker(af_settings, tmp_path))
        sid = f"e2e-{uuid.uuid4()}"
        post_event(http, event="sync_start", connector_id=cid, sync_id=sid)
        body = payload(connector_id=cid, sync_id=sid)
        raw, headers = signed(body)
        assert http.post("/webhooks/fivetran", data=raw, headers=headers).status_code == 200
        d = wait_state(fw, cid, sid, DeliveryState.DELIVERED, worker=workers[0])
        events = events_of(airflow, cid, sid)
        assert len(events) == 1
        extra = events[0]["extra"]
        assert extra["connector_id"] == cid and extra["status"] == "SUCCESSFUL"
        assert extra["connector_name"] == "ftar_pg"
        assert extra["group_id"] == "inappropriate_implode"
        assert extra["started_at"] and extra["ended_at"] and extra["full_refresh"] is False
        assert int(d.fields["event_id"]) == events[0]["id"]
        view = syncs(http, cid)
        assert view[0]["forwarding"][0]["airflow_event_id"] == events[0]["id"]

        def dag_saw_it() -> bool:
            out = airflow.output_dir / cid
            return any(
                sid == e["extra"].get("sync_id")
                for f in (out.glob("*.json") if out.exists() else [])
                for e in json.loads(f.read_text())["events"]
            )

        airflow.wait_for(f"consume_{cid} to see {sid}", dag_saw_it, timeout=120)

        # Fivetran redelivers the same webhook: a duplicate, still one event.
        assert (
            http.post("/webhooks/fivetran", data=raw, headers=headers).get_json()["status"]
            == "duplicate"
        )
        time.sleep(1.0)
        assert len(events_of(airflow, cid, sid)) == 1

    def test_unknown_dataset_then_replay(
        self,
        http: Any,
        airflow: AirflowServer,
        fw: Forwarder,
        tmp_path: Path,
        af_settings: Settings,
    ) -> None:
        """No DAG uses the URI: undelivered, saying so; once a DAG uses it, replay delivers."""
        cid = f"late{uuid.uuid4().hex[:8]}"
        sid = f"late-{uuid.uuid4()}"
        post_event(http, connector_id=cid, sync_id=sid)
        run_worker(fw)
        d = wait_state(fw, cid, sid, DeliveryState.UNDELIVERED, timeout=5)
        assert "no DAG" in d.fields["reason"] and uri(cid) in d.fields["reason"]
        env = worker_env(af_settings)
        listed = CliRunner().invoke(main, ["deliveries", "--state", "undelivered"], env=env)
        assert listed.exit_code == 0 and sid in listed.output and "no DAG" in listed.output
        check = CliRunner().invoke(main, ["datasets", "check"], env=env)
        assert check.exit_code == 1 and "MISSING" in check.output and uri(cid) in check.output

        airflow.add_dag(
            f"{cid}.py",
            (
                "from airflow.sdk import DAG, Asset, task\n"
                f"with DAG(dag_id='consume_{cid}', schedule=[Asset('{uri(cid)}')]):\n"
                "    @task\n    def noop(): pass\n    noop()\n"
            ),
        )
        airflow.wait_for_asset(uri(cid))
        check = CliRunner().invoke(main, ["datasets", "check"], env=env)
        assert check.exit_code == 0, check.output
        replayed = CliRunner().invoke(main, ["replay", "--all-undelivered"], env=env)
        assert replayed.exit_code == 0 and "replayed 1 delivery" in replayed.output
        run_worker(fw)
        wait_state(fw, cid, sid, DeliveryState.DELIVERED, timeout=5)
        assert len(events_of(airflow, cid, sid)) == 1
        airflow.wait_for(
            f"a run of consume_{cid}", lambda: airflow.dag_runs(f"consume_{cid}"), timeout=90
        )


@pytest.mark.slow
class TestFaults:
    def test_airflow_down_while_deliveries_arrive(
        self,
        http: Any,
        airflow: AirflowServer,
        af_settings: Settings,
        fw: Forwarder,
        workers: list[WorkerProcess],
        tmp_path: Path,
    ) -> None:
        """API server stopped, syncs arrive, API server back: each arrives once, none lost."""
        cid = "fault_conn"
        airflow.wait_for_asset(uri(cid))
        workers.append(start_worker(af_settings, tmp_path))
        airflow.stop_api()
        try:
            sids = [f"down-{i}-{uuid.uuid4()}" for i in range(4)]
            for sid in sids:
                post_event(http, connector_id=cid, sync_id=sid)
            for sid in sids:
                wait_state(fw, cid, sid, DeliveryState.RETRYING, timeout=30, worker=workers[0])
        finally:
            airflow.start_api()
        for sid in sids:
            wait_state(fw, cid, sid, DeliveryState.DELIVERED, timeout=90, worker=workers[0])
        for sid in sids:
            assert len(events_of(airflow, cid, sid)) == 1, sid

    def test_worker_killed_mid_delivery(
        self,
        http: Any,
        airflow: AirflowServer,
        af_settings: Settings,
        fw: Forwarder,
        workers: list[WorkerProcess],
        tmp_path: Path,
    ) -> None:
        """SIGKILL while the POST is in Airflow's hands: another worker ends with one event."""
        cid = "kill_conn"
        airflow.wait_for_asset(uri(cid))
        # The stopped API server commits the orphaned POST as soon as it runs again, so a
        # few seconds of margin after the dead attempt's lease cover it here.
        short = {
            "airflow_timeout_seconds": 2,
            "forward_lease_seconds": 5,
            "forward_unknown_outcome_seconds": 5,
        }
        first = start_worker(af_settings, tmp_path, "first", **short)
        workers.append(first)
        warm = f"warm-{uuid.uuid4()}"  # the worker gets its token and asset id first
        post_event(http, connector_id=cid, sync_id=warm)
        wait_state(fw, cid, warm, DeliveryState.DELIVERED, worker=first)

        api = airflow.procs["api-server"]
        os.killpg(api.pid, signal.SIGSTOP)  # Airflow accepts the POST but does not answer
        try:
            sid = f"kill-{uuid.uuid4()}"
            post_event(http, connector_id=cid, sync_id=sid)
            did = delivery_id(cid, sid, uri(cid))
            airflow.wait_for(
                "the in-flight mark",
                lambda: fw.redis.hget(fw.store.key(did), "inflight_ms"),
                timeout=20,
                interval=0.02,
            )
            time.sleep(0.3)  # the request is on its way
            first.kill()
        finally:
            os.killpg(api.pid, signal.SIGCONT)
        # Airflow now handles the orphaned POST (the event exists, unrecorded by us).
        time.sleep(2)
        landed = len(events_of(airflow, cid, sid))
        print(f"the killed worker's POST {'reached' if landed else 'never reached'} Airflow")
        second = start_worker(af_settings, tmp_path, "second", **short)
        workers.append(second)
        d = wait_state(fw, cid, sid, DeliveryState.DELIVERED, timeout=90, worker=second)
        assert len(events_of(airflow, cid, sid)) == 1
        if landed:  # the killed worker's POST reached Airflow: found, not posted again
            assert d.fields.get("recovered") == "1"
