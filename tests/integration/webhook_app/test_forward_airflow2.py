"""Forwarding through the webhook, the queue and the worker, against Airflow 2's v1 API.

Real redis-server, the real Flask app and RQ's worker; Airflow 2.9-2.11 is a stand-in
with its request and response shapes (testkit/airflow2_standin.py). The delivery logic
(states, retries, exactly once) is the same for Airflow 3, which test_forward_airflow3.py
runs against the real thing.
"""

from __future__ import annotations

import json
import logging
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from rq import Queue

from fivetran_events import Settings
from fivetran_events.deliveries import Delivery, DeliveryKind, DeliveryState, SyncRef, extra_for
from fivetran_events.keys import delivery_id, due_key
from testkit.airflow2_standin import BASIC_AUTH, SESSION_AUTH, Airflow2StandIn
from testkit.forward_support import (
    CID,
    URI,
    forwarder,
    post_event,
    run_worker,
    syncs,
)
from testkit.support import at
from webhook_app.airflow_auth import PasswordLogin
from webhook_app.airflow_client import AirflowClient
from webhook_app.exceptions import AirflowRejected
from webhook_app.forwarding.asset import AssetSender
from webhook_app.forwarding.forwarder import Forwarder
from webhook_app.forwarding.recorder import backoff_seconds
from webhook_app.forwarding.replay import Replayer

pytestmark = pytest.mark.timeout(60)


class Clock:
    """A settable clock in epoch ms, for retry schedules without sleeping.

    It starts a second ahead of the wall clock, so a delivery the webhook creates (due at
    its receipt, by the wall clock) is due by it.
    """

    def __init__(self, fw: Forwarder) -> None:
        import time

        self.now = int(time.time() * 1000) + 1_000
        fw.recorder.clock = fw.sweeper.clock = self
        fw.recorder.rng = lambda: 0.5

    def __call__(self) -> int:
        return self.now


def settles_at(fw: Forwarder, d: Delivery) -> int | None:
    """When an earlier POST of ``d`` can no longer land (the asset sender's answer)."""
    sender = fw.senders[DeliveryKind.ASSET]
    assert isinstance(sender, AssetSender)
    return sender.settles_at(d)


def state_of(fw: Forwarder, sync_id: str, uri: str = URI) -> Any:
    d = fw.store.get(delivery_id(CID, sync_id, uri))
    assert d is not None
    return d


class TestDelivery:
    def test_webhook_queues_a_pending_delivery(self, http: Any, fw: Forwarder) -> None:
        """A successful sync_end creates its delivery, due now, in the history's script;
        a sweep queues its one job."""
        post_event(http, sync_id="s1")
        d = state_of(fw, "s1")
        assert d.state is DeliveryState.PENDING
        assert fw.queue.count == 0 and fw.sweep() == 1 and fw.queue.count == 1
        job = fw.queue.jobs[0]
        assert job.kwargs == {"delivery": d.id}
        assert syncs(http, CID)[0]["forwarding"][0]["state"] == "pending"

    def test_failed_sync_is_not_forwarded(self, http: Any, fw: Forwarder) -> None:
        post_event(http, sync_id="s1", status="FAILURE")
        assert fw.sweep() == 0 and fw.queue.count == 0

    def test_delivered_with_extra(self, http: Any, fw: Forwarder, standin: Airflow2StandIn) -> None:
        """The worker posts one event with the sync's extra and records Airflow's id."""
        post_event(http, event="sync_start", sync_id="s1", created=at(10, 1))
        post_event(http, sync_id="s1", created=at(10, 2))
        run_worker(fw)
        assert len(standin.posts) == 1
        body = standin.posts[0]
        assert body["dataset_uri"] == URI
        assert body["extra"] == {
            "source": "fivetran-events",
            "connector_id": CID,
            "connector_name": "ftar_pg",
            "connector_type": "google_cloud_postgresql",
            "group_id": "inappropriate_implode",
            "sync_id": "s1",
            "status": "SUCCESSFUL",
            "started_at": "2026-01-10T01:00:00.000Z",
            "ended_at": "2026-01-10T02:00:00.000Z",
            "full_refresh": False,
        }
        d = state_of(fw, "s1")
        assert d.state is DeliveryState.DELIVERED
        view = syncs(http, CID)[0]["forwarding"]
        assert view == [
            {
                "uri": URI,
                "partition_key": None,
                "state": "delivered",
                "attempts": 1,
                "airflow_event_id": 1,
                "airflow_event_at": view[0]["airflow_event_at"],
                "reason": None,
                "received_at": view[0]["received_at"],
                "next_attempt_at": None,
                "updated_at": view[0]["updated_at"],
            }
        ]

    def test_retried_sync_sends_the_start_of_the_attempt_that_succeeded(
        self, http: Any, fw: Forwarder, standin: Airflow2StandIn
    ) -> None:
        """A sync id that failed and ran again: started_at is the second attempt's start."""
        post_event(http, event="sync_start", sync_id="s1", created=at(10, 1))
        post_event(http, sync_id="s1", status="FAILURE", created=at(10, 2))
        post_event(http, event="sync_start", sync_id="s1", created=at(10, 3))
        post_event(http, sync_id="s1", created=at(10, 4))
        run_worker(fw)
        assert len(standin.posts) == 1
        extra = standin.posts[0]["extra"]
        assert extra["started_at"] == "2026-01-10T03:00:00.000Z"
        assert extra["ended_at"] == "2026-01-10T04:00:00.000Z"

    def test_full_refresh_after_resyncs(
        self, http: Any, fw: Forwarder, standin: Airflow2StandIn
    ) -> None:
        """The first success after a resync says full_refresh (with tables for resync_table)."""
        post_event(http, sync_id="s0", created=at(9))
        post_event(http, event="resync_table", created=at(9, 12), tables=["public.orders"])
        post_event(http, sync_id="s1", created=at(10))
        post_event(http, event="resync_connector", created=at(10, 12))
        post_event(http, sync_id="s2", created=at(11))
        post_event(http, sync_id="s3", created=at(12))
        run_worker(fw)
        extras = {p["extra"]["sync_id"]: p["extra"] for p in standin.posts}
        assert extras["s0"]["full_refresh"] is False
        assert extras["s1"]["full_refresh"] is True
        assert extras["s1"]["full_refresh_tables"] == ["public.orders"]
        assert extras["s2"]["full_refresh"] is True
        assert "full_refresh_tables" not in extras["s2"]
        assert extras["s3"]["full_refresh"] is False

    def test_redelivered_webhook_gives_one_event(
        self, http: Any, fw: Forwarder, standin: Airflow2StandIn
    ) -> None:
        """Fivetran's redelivery of the same sync_end is a duplicate: one event."""
        body = {"sync_id": "s1", "created": at(10)}
        post_event(http, **body)
        run_worker(fw)
        assert post_event(http, **body)["status"] == "duplicate"
        run_worker(fw)
        assert len(standin.events) == 1

    def test_several_uris_each_delivered(
        self, http: Any, settings: Settings, standin: Airflow2StandIn, tmp_path: Any
    ) -> None:
        """A connector mapped to two URIs gets one delivery and one event per URI."""
        mapping = tmp_path / "map.toml"
        mapping.write_text(f'[connectors]\n{CID} = ["{URI}", "s3://lake/orders"]\n')
        standin.add_dataset("s3://lake/orders")
        from webhook_app import create_app

        app = create_app(settings.model_copy(update={"dataset_mapping_file": str(mapping)}))
        fw = forwarder(
            settings,
            standin.url,
            standin.username,
            standin.password,
            dataset_mapping_file=str(mapping),
        )
        with app.test_client() as c:
            post_event(c, sync_id="s1")
            run_worker(fw)
            states = {f["uri"]: f["state"] for f in syncs(c, CID)[0]["forwarding"]}
        assert states == {URI: "delivered", "s3://lake/orders": "delivered"}
        assert sorted(p["dataset_uri"] for p in standin.posts) == sorted([URI, "s3://lake/orders"])


class TestFailures:
    def test_unknown_dataset_is_undelivered_then_replayed(
        self, http: Any, fw: Forwarder, standin: Airflow2StandIn
    ) -> None:
        """404: recorded as undelivered with the reason; replay delivers once the DAG exists."""
        standin.datasets.clear()
        post_event(http, sync_id="s1")
        run_worker(fw)
        d = state_of(fw, "s1")
        assert d.state is DeliveryState.UNDELIVERED
        assert "404" in (d.get("reason") or "") and URI in (d.get("reason") or "")
        assert fw.store.given_up() == [d.id]
        assert fw.redis.zscore(due_key(fw.settings.key_prefix), d.id) is None
        standin.add_dataset(URI)
        assert Replayer.of(fw).replay(Replayer.of(fw).deliveries_of_sync("s1")) == [d.id]
        run_worker(fw)
        assert state_of(fw, "s1").state is DeliveryState.DELIVERED
        assert len(standin.events) == 1
        assert fw.store.given_up() == []

    def test_other_4xx_fails_with_the_body(
        self, http: Any, fw: Forwarder, standin: Airflow2StandIn
    ) -> None:
        standin.faults.append((400, {}))
        post_event(http, sync_id="s1")
        run_worker(fw)
        d = state_of(fw, "s1")
        assert d.state is DeliveryState.FAILED
        assert "400" in (d.get("reason") or "") and "injected fault" in (d.get("reason") or "")

    @pytest.mark.parametrize("status", [503, 429])
    def test_5xx_and_429_retry_after_retry_after(
        self, http: Any, fw: Forwarder, standin: Airflow2StandIn, status: int
    ) -> None:
        """503 or 429 with Retry-After: retrying, not before the asked time; then delivered."""
        clock = Clock(fw)
        standin.faults.append((status, {"Retry-After": "30"}))
        post_event(http, sync_id="s1")
        run_worker(fw)
        d = state_of(fw, "s1")
        assert d.state is DeliveryState.RETRYING
        assert str(status) in (d.get("reason") or "")
        assert d.ms("next_attempt_ms") == clock.now + 30_000
        clock.now += 29_000
        assert fw.sweep() == 0
        clock.now += 2_000
        assert fw.sweep() == 1
        assert fw.sweep() == 0  # claimed: a second sweeper does not queue it again
        run_worker(fw)
        assert state_of(fw, "s1").state is DeliveryState.DELIVERED
        assert len(standin.events) == 1

    def test_backoff_grows_with_jitter_and_is_capped(self, fw: Forwarder) -> None:
        low = [backoff_seconds(fw.settings, n, None, 0.0) for n in range(1, 14)]
        high = [backoff_seconds(fw.settings, n, None, 1.0) for n in range(1, 14)]
        assert low[0] == 0.5 and high[0] == 1.0
        assert high == sorted(high)
        assert max(high) == fw.settings.forward_backoff_max_seconds
        assert backoff_seconds(fw.settings, 1, 120.0, 1.0) == 120.0

    def test_connection_refused_retries_until_the_window_closes(
        self, http: Any, settings: Settings
    ) -> None:
        """Airflow down for longer than the retry window: undelivered, saying why."""
        fw = forwarder(
            settings,
            "http://127.0.0.1:9",
            "u",
            "p",
            airflow_api_version="2",
            forward_retry_hours=1.0,
            airflow_timeout_seconds=1.0,
        )
        clock = Clock(fw)
        post_event(http, sync_id="s1")
        for _ in range(40):
            run_worker(fw)
            d = state_of(fw, "s1")
            if d.state is not DeliveryState.RETRYING:
                break
            assert d.get("inflight_ms") is None  # refused: nothing can have been created
            clock.now = d.ms("next_attempt_ms") or clock.now
            fw.sweep()
        assert d.state is DeliveryState.UNDELIVERED
        assert "gave up after" in (d.get("reason") or "")
        assert int(d.fields["attempts"]) > 5

    def test_wrong_password_fails(
        self, http: Any, settings: Settings, standin: Airflow2StandIn
    ) -> None:
        fw = forwarder(settings, standin.url, standin.username, "wrong")
        post_event(http, sync_id="s1")
        run_worker(fw)
        d = state_of(fw, "s1")
        assert d.state is DeliveryState.FAILED and "401" in (d.get("reason") or "")
        assert "user 'admin' or the password is wrong" in (d.get("reason") or "")

    def test_stock_airflow_2_names_the_basic_auth_setting(
        self, http: Any, fw: Forwarder, standin: Airflow2StandIn, caplog: Any
    ) -> None:
        """Airflow 2 accepts only session auth unless told otherwise: the worker's log line
        says which setting lets it take ours."""
        standin.auth_backends = (SESSION_AUTH,)
        post_event(http, sync_id="s1")
        with caplog.at_level(logging.WARNING):
            run_worker(fw)
        assert state_of(fw, "s1").state is DeliveryState.FAILED
        setting = "[api] auth_backends includes airflow.api.auth.backend.basic_auth"
        assert any(setting in r.getMessage() and "s1" in r.getMessage() for r in caplog.records)


class TestExactlyOnce:
    def test_event_posted_before_a_crash_is_found_not_posted_again(
        self, http: Any, fw: Forwarder, standin: Airflow2StandIn
    ) -> None:
        """A worker died after the POST, before recording it: the retry finds the event."""
        clock = Clock(fw)
        post_event(http, sync_id="s1")
        d = state_of(fw, "s1")
        extra = extra_for(fw.redis, fw.settings.key_prefix, SyncRef.from_fields(d.fields))
        # What the dead attempt did: the in-flight mark, then the POST.
        fw.redis.hset(
            fw.store.key(d.id),
            mapping={"inflight_ms": str(fw.recorder.clock()), "extra": json.dumps(extra)},
        )
        assert fw.airflow is not None
        fw.airflow.post_event(URI, extra)
        clock.now = settles_at(fw, state_of(fw, "s1")) or 0  # its lease and margin are over
        run_worker(fw)
        d = state_of(fw, "s1")
        assert d.state is DeliveryState.DELIVERED
        assert d.get("event_id") == "1"
        assert len(standin.posts) == 1

    def test_timed_out_post_that_landed_is_not_posted_again(
        self, http: Any, settings: Settings, standin: Airflow2StandIn
    ) -> None:
        """The POST times out but Airflow created the event: the retry finds it."""
        fw = forwarder(
            settings,
            standin.url,
            standin.username,
            standin.password,
            airflow_timeout_seconds=0.5,
        )
        clock = Clock(fw)
        standin.answer_delay = 1.5
        post_event(http, sync_id="s1")
        run_worker(fw)
        d = state_of(fw, "s1")
        assert d.state is DeliveryState.RETRYING and "Timeout" in (d.get("reason") or "")
        assert d.get("inflight_ms") is not None
        standin.answer_delay = 0.0
        clock.now = (d.ms("next_attempt_ms") or 0) + 1
        assert fw.sweep() == 1
        run_worker(fw)
        d = state_of(fw, "s1")
        assert d.state is DeliveryState.DELIVERED and d.get("recovered") == "1"
        assert len(standin.posts) == 1 and len(standin.events) == 1

    def test_in_flight_mark_without_an_event_posts(
        self, http: Any, fw: Forwarder, standin: Airflow2StandIn
    ) -> None:
        """A worker died before its POST reached Airflow: the retry posts (once)."""
        clock = Clock(fw)
        post_event(http, sync_id="s1")
        d = state_of(fw, "s1")
        fw.redis.hset(fw.store.key(d.id), "inflight_ms", str(fw.recorder.clock()))
        clock.now = settles_at(fw, state_of(fw, "s1")) or 0
        run_worker(fw)
        assert state_of(fw, "s1").state is DeliveryState.DELIVERED
        assert len(standin.posts) == 1

    def test_lease_expiry_requeues_a_dead_workers_delivery(
        self, http: Any, fw: Forwarder, standin: Airflow2StandIn
    ) -> None:
        """A job lost with its worker is queued again once its lease runs out."""
        clock = Clock(fw)
        post_event(http, sync_id="s1")
        assert fw.sweep() == 1
        fw.queue.empty()  # type: ignore[no-untyped-call]  # the job died with its worker; rq leaves it untyped
        assert fw.sweep() == 0
        clock.now += fw.lease_ms + 60_000
        assert fw.sweep() == 1
        run_worker(fw)
        assert state_of(fw, "s1").state is DeliveryState.DELIVERED
        assert len(standin.events) == 1

    def test_replay_of_a_delivered_sync_posts_nothing(
        self, http: Any, fw: Forwarder, standin: Airflow2StandIn
    ) -> None:
        post_event(http, sync_id="s1")
        run_worker(fw)
        assert Replayer.of(fw).replay(Replayer.of(fw).deliveries_of_sync("s1")) == []
        run_worker(fw)
        assert len(standin.events) == 1

    def test_concurrent_attempt_is_refused(self, http: Any, fw: Forwarder) -> None:
        post_event(http, sync_id="s1")
        did = state_of(fw, "s1").id
        lock = fw.redis.lock(f"{fw.settings.key_prefix}fwd:lock:{did}", timeout=30)
        assert lock.acquire(blocking=False)
        assert fw.attempt(did).outcome == "busy"


class TestClient:
    def test_detects_airflow_2(self, standin: Airflow2StandIn) -> None:
        c = AirflowClient(standin.url, standin.username, standin.password)
        assert c.version() == "2"

    def test_unknown_dataset_lookup(self, standin: Airflow2StandIn) -> None:
        c = AirflowClient(
            standin.url,
            standin.username,
            standin.password,
            api_version="2",
        )
        assert c.known(URI) and not c.known("fivetran://connector/nope")

    def test_find_event_matches_extra(self, standin: Airflow2StandIn) -> None:
        c = AirflowClient(standin.url, standin.username, standin.password)
        since = datetime.now(timezone.utc)
        c.post_event(URI, {"sync_id": "a"})
        ev = c.post_event(URI, {"sync_id": "b"})
        found = c.find_event(URI, since - timedelta(seconds=5), {"sync_id": "b"})
        assert found is not None and found.id == ev.id
        assert c.find_event(URI, since - timedelta(seconds=5), {"sync_id": "c"}) is None

    def test_rejects_bad_credentials(self, standin: Airflow2StandIn) -> None:
        c = AirflowClient(standin.url, standin.username, "nope", api_version="2")
        with pytest.raises(AirflowRejected, match=r"401.*user 'admin' or the password is wrong"):
            c.post_event(URI, {})

    @pytest.mark.parametrize("backends", [(SESSION_AUTH,), (BASIC_AUTH, SESSION_AUTH)])
    def test_refused_basic_auth_names_the_setting(
        self, standin: Airflow2StandIn, backends: tuple[str, ...]
    ) -> None:
        """Airflow 2's 401 is the same for a stock install (session auth only) and a wrong
        password: either way the error names the setting Airflow 2 needs."""
        standin.auth_backends = backends
        c = AirflowClient(standin.url, standin.username, standin.password)
        if BASIC_AUTH in backends:
            assert c.known(URI)
            c.login = PasswordLogin(standin.username, "nope")
        with pytest.raises(AirflowRejected, match="takes basic auth only if") as err:
            c.known(URI)
        assert err.value.status == 401
        assert "auth_backends includes airflow.api.auth.backend.basic_auth" in str(err.value)


def test_queue_name_is_the_settings(fw: Forwarder, settings: Settings) -> None:
    assert isinstance(fw.queue, Queue) and fw.queue.name == settings.queue_name


def test_non_json_answer_is_retried(http: Any, fw: Forwarder, standin: Airflow2StandIn) -> None:
    """A 200 that is not Airflow's JSON (a proxy page) is retried, not lost or failed."""
    standin.faults.append((200, {}))
    post_event(http, sync_id="s1")
    run_worker(fw)
    d = state_of(fw, "s1")
    assert d.state is DeliveryState.RETRYING
    assert "unexpected answer" in (d.get("reason") or "")
