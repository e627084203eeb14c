"""Forwarding to a real Airflow 3 (testkit/airflow_harness.py): end to end and under faults.

Each test uses its own sync ids; Airflow lives for the session, Redis is flushed after
each test. Every wait is bounded.
"""

from __future__ import annotations

import json
import os
import signal
import uuid
from pathlib import Path
from typing import Any

import pytest
import requests
from click.testing import CliRunner

from fivetran_events import Settings
from fivetran_events.deliveries import DeliveryState
from fivetran_events.keys import delivery_id
from testkit.airflow_harness import AirflowServer
from testkit.forward_support import post_event, present_token, run_worker, syncs
from testkit.processes import poll_until
from testkit.support import payload, signed
from testkit.worker_process import WorkerProcess, worker_env
from webhook_app.airflow_client import AirflowClient
from webhook_app.cli import main
from webhook_app.exceptions import AssetNotFound
from webhook_app.forwarding.forwarder import Forwarder

from .forwarding import events_of, start_worker, unread_bytes, uri, wait_state

# Includes starting Airflow (bounded by FTE_AIRFLOW_START_TIMEOUT) for the first test.
pytestmark = pytest.mark.timeout(480)


class TestClient:
    def test_exact_uri_lookup(self, airflow3: AirflowServer) -> None:
        """uri_pattern is a substring match; the client picks the exact URI."""
        airflow3.wait_for_asset(uri("e2e_conn"))
        airflow3.wait_for_asset(uri("e2e"))
        c = AirflowClient(airflow3.url, airflow3.username, airflow3.password)
        assert c.version() == "3"
        assert c.asset_id(uri("e2e")) == airflow3.asset_id(uri("e2e"))
        assert c.asset_id(uri("e2e_conn")) == airflow3.asset_id(uri("e2e_conn"))
        assert c.asset_id(uri("e2e")) != c.asset_id(uri("e2e_conn"))
        with pytest.raises(AssetNotFound, match="no DAG"):
            c.asset_id(uri("nobody_uses_this"))

    def test_token_cached_and_renewed_after_401(self, airflow3: AirflowServer) -> None:
        """One token serves many calls; an expired one gets a 401, a new token, and succeeds."""
        airflow3.wait_for_asset(uri("e2e"))
        c = AirflowClient(airflow3.url, airflow3.username, airflow3.password, api_version="3")
        assert c.known(uri("e2e")) and c.known(uri("e2e"))
        assert c.tokens_fetched == 1
        expired = airflow3.expired_token()
        assert (
            requests.get(
                f"{airflow3.url}/api/v2/assets",
                timeout=10,
                headers={"Authorization": f"Bearer {expired}"},
            ).status_code
            == 401
        )
        present_token(c, expired)
        sid = f"tok-{uuid.uuid4()}"
        ev = c.post_event(uri("e2e"), {"sync_id": sid})
        assert c.tokens_fetched == 2
        assert [e["id"] for e in events_of(airflow3, "e2e", sid)] == [ev.id]


class TestEndToEnd:
    def test_sync_end_reaches_an_asset_scheduled_dag(
        self,
        http: Any,
        airflow3: AirflowServer,
        af_settings: Settings,
        fw: Forwarder,
        workers: list[WorkerProcess],
        tmp_path: Path,
    ) -> None:
        """Signed sync_end -> webhook -> worker -> asset event with extra -> DAG run sees it."""
        cid = "e2e_conn"
        airflow3.wait_for_asset(uri(cid))
        workers.append(start_worker(af_settings, tmp_path))
        sid = f"e2e-{uuid.uuid4()}"
        post_event(http, event="sync_start", connector_id=cid, sync_id=sid)
        body = payload(connector_id=cid, sync_id=sid)
        raw, headers = signed(body)
        assert http.post("/webhooks/fivetran", data=raw, headers=headers).status_code == 200
        d = wait_state(fw, cid, sid, DeliveryState.DELIVERED, worker=workers[0])
        events = events_of(airflow3, cid, sid)
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
            out = airflow3.output_dir / cid
            return any(
                sid == e["extra"].get("sync_id")
                for f in (out.glob("*.json") if out.exists() else [])
                for e in json.loads(f.read_text())["events"]
            )

        airflow3.wait_for(f"consume_{cid} to see {sid}", dag_saw_it, timeout=120)

        # Fivetran redelivers the same webhook: a duplicate, still one event. It commits
        # nothing (no job, no change to the delivery), so nothing can post again later.
        did = delivery_id(cid, sid, uri(cid))
        delivered = fw.store.get(did)
        assert delivered is not None
        assert (
            http.post("/webhooks/fivetran", data=raw, headers=headers).get_json()["status"]
            == "duplicate"
        )
        assert fw.store.get(did) == delivered
        assert len(events_of(airflow3, cid, sid)) == 1

    def test_unknown_dataset_then_replay(
        self,
        http: Any,
        airflow3: AirflowServer,
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

        airflow3.add_dag(
            f"{cid}.py",
            (
                "from airflow.sdk import DAG, Asset, task\n"
                f"with DAG(dag_id='consume_{cid}', schedule=[Asset('{uri(cid)}')]):\n"
                "    @task\n    def noop(): pass\n    noop()\n"
            ),
        )
        airflow3.wait_for_asset(uri(cid))
        check = CliRunner().invoke(main, ["datasets", "check"], env=env)
        assert check.exit_code == 0, check.output
        replayed = CliRunner().invoke(main, ["replay", "--all-undelivered"], env=env)
        assert replayed.exit_code == 0 and "replayed 1 delivery" in replayed.output
        run_worker(fw)
        wait_state(fw, cid, sid, DeliveryState.DELIVERED, timeout=5)
        assert len(events_of(airflow3, cid, sid)) == 1
        airflow3.wait_for(
            f"a run of consume_{cid}", lambda: airflow3.dag_runs(f"consume_{cid}"), timeout=90
        )


@pytest.mark.slow
class TestFaults:
    def test_airflow_down_while_deliveries_arrive(
        self,
        http: Any,
        airflow3: AirflowServer,
        af_settings: Settings,
        fw: Forwarder,
        workers: list[WorkerProcess],
        tmp_path: Path,
    ) -> None:
        """API server stopped, syncs arrive, API server back: each arrives once, none lost."""
        cid = "fault_conn"
        airflow3.wait_for_asset(uri(cid))
        workers.append(start_worker(af_settings, tmp_path))
        airflow3.stop_api()
        try:
            sids = [f"down-{i}-{uuid.uuid4()}" for i in range(4)]
            for sid in sids:
                post_event(http, connector_id=cid, sync_id=sid)
            for sid in sids:
                wait_state(fw, cid, sid, DeliveryState.RETRYING, timeout=30, worker=workers[0])
        finally:
            airflow3.start_api()
        for sid in sids:
            wait_state(fw, cid, sid, DeliveryState.DELIVERED, timeout=90, worker=workers[0])
        for sid in sids:
            assert len(events_of(airflow3, cid, sid)) == 1, sid

    def test_worker_killed_mid_delivery(
        self,
        http: Any,
        airflow3: AirflowServer,
        af_settings: Settings,
        fw: Forwarder,
        workers: list[WorkerProcess],
        tmp_path: Path,
    ) -> None:
        """SIGKILL while the POST is in Airflow's hands: another worker ends with one event."""
        cid = "kill_conn"
        airflow3.wait_for_asset(uri(cid))
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

        api = airflow3.procs["api-server"]
        os.killpg(api.pid, signal.SIGSTOP)  # Airflow accepts the POST but does not answer
        try:
            sid = f"kill-{uuid.uuid4()}"
            post_event(http, connector_id=cid, sync_id=sid)
            did = delivery_id(cid, sid, uri(cid))
            airflow3.wait_for(
                "the in-flight mark",
                lambda: fw.redis.hget(fw.store.key(did), "inflight_ms"),
                timeout=20,
                interval=0.02,
            )
            # Kill only once the POST sits in the stopped api-server's socket, so Airflow
            # surely handles it and the recovery below is always the one exercised.
            poll_until(
                lambda: unread_bytes(airflow3.port, first.pid),
                "the POST to reach the api-server's socket",
                timeout=20,
                interval=0.02,
            )
            first.kill()
        finally:
            os.killpg(api.pid, signal.SIGCONT)
        # Airflow now handles the orphaned POST (the event exists, unrecorded by us).
        airflow3.wait_for(
            "the orphaned POST's event", lambda: events_of(airflow3, cid, sid), timeout=60
        )
        second = start_worker(af_settings, tmp_path, "second", **short)
        workers.append(second)
        d = wait_state(fw, cid, sid, DeliveryState.DELIVERED, timeout=90, worker=second)
        assert len(events_of(airflow3, cid, sid)) == 1
        # The killed worker's POST reached Airflow: found, not posted again.
        assert d.fields.get("recovered") == "1"
