"""Forwarding's promises at the edges, against the Airflow 2 stand-in and a real Redis.

Forwarding off creates nothing; turning it on forwards the past only when asked
(``replay --since``); backoff and Retry-After hold whatever jobs the queue holds; a POST
whose outcome is unknown is never repeated before it can no longer land; replay never
resets a delivered delivery, however it interleaves with a worker. Clock-dependent checks
run under freezegun; the real-Airflow versions are in test_forward_faults.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
import redis
from click.testing import CliRunner
from freezegun import freeze_time
from rq import Queue

from fivetran_events import HistoryReader, Settings
from fivetran_events.deliveries import DeliveryState
from fivetran_events.keys import delivery_id, queue_name
from testkit.airflow2_standin import Airflow2StandIn
from testkit.forward_support import (
    CID,
    URI,
    forward_job_id,
    forwarder,
    post_event,
    run_worker,
)
from testkit.processes import poll_until
from testkit.support import at
from testkit.worker_process import WorkerProcess, worker_env
from webhook_app import create_app
from webhook_app.cli import main
from webhook_app.forwarding.forwarder import Forwarder
from webhook_app.forwarding.replay import Replayer
from webhook_app.forwarding.sweeper import queue_jobs
from webhook_app.worker.rq_worker import ForwardingWorker

pytestmark = pytest.mark.timeout(90)

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=timezone.utc)


def delivery(fw: Forwarder, sync_id: str) -> Any:
    d = fw.store.get(delivery_id(CID, sync_id, URI))
    assert d is not None, f"no delivery for {sync_id}"
    return d


def events_of(standin: Airflow2StandIn, sync_id: str) -> list[dict[str, Any]]:
    return [e for e in standin.events if e["extra"].get("sync_id") == sync_id]


def forwarding_keys(client: redis.Redis) -> list[bytes]:
    return sorted(client.scan_iter("test:fwd:*")) + sorted(client.scan_iter("rq:job:*"))


class TestForwardingOff:
    @pytest.fixture
    def off(self, settings: Settings) -> Iterator[Any]:
        """The web app with FIVETRAN_EVENTS_AIRFLOW_URL unset."""
        app = create_app(settings.model_copy(update={"airflow_url": None}))
        with app.test_client() as c:
            yield c

    def test_no_deliveries_and_no_jobs(
        self, off: Any, client: redis.Redis, reader: HistoryReader
    ) -> None:
        """Unset Airflow URL: successes are recorded, but no delivery and no RQ job exist."""
        for i in range(3):
            assert post_event(off, sync_id=f"s{i}", created=at(3, i))["status"] == "recorded"
        assert len(reader.syncs(CID)) == 3
        assert Queue(queue_name("test:"), connection=client).count == 0
        assert forwarding_keys(client) == []

    def test_turning_it_on_forwards_the_past_only_when_asked(
        self, off: Any, http: Any, fw: Forwarder, standin: Airflow2StandIn
    ) -> None:
        """Successes from while it was off stay put until ``replay --since`` queues them."""
        post_event(off, sync_id="old", created=at(2))
        post_event(off, sync_id="recent", created=at(4))
        post_event(off, sync_id="failed", created=at(4, 1), status="FAILURE")
        post_event(http, sync_id="live", created=at(5))  # forwarding is on from here
        run_worker(fw)
        assert [e["extra"]["sync_id"] for e in standin.events] == ["live"]
        env = worker_env(fw.settings)
        out = CliRunner().invoke(main, ["replay", "--since", "2026-01-03T00:00:00"], env=env)
        assert out.exit_code == 0, out.output
        assert "queued 1 new and 0 replayed delivery" in out.output
        assert "1 already delivered" in out.output
        run_worker(fw)
        assert sorted(e["extra"]["sync_id"] for e in standin.events) == [
            "live",
            "recent",
        ]
        assert delivery(fw, "recent").state is DeliveryState.DELIVERED
        again = CliRunner().invoke(main, ["replay", "--since", "2026-01-01"], env=env)
        assert again.exit_code == 0 and "queued 1 new" in again.output  # only "old" is new
        run_worker(fw)
        assert sorted(e["extra"]["sync_id"] for e in standin.events) == [
            "live",
            "old",
            "recent",
        ]

    @pytest.mark.parametrize("since", ["yesterday", "2026-13-01", ""])
    def test_bad_since_changes_nothing(
        self, off: Any, fw: Forwarder, client: redis.Redis, since: str
    ) -> None:
        post_event(off, sync_id="s1", created=at(2))
        out = CliRunner().invoke(main, ["replay", "--since", since], env=worker_env(fw.settings))
        assert out.exit_code == 2 and "--since" in out.output
        assert forwarding_keys(client) == []

    def test_since_needs_forwarding_on(self, off: Any, fw: Forwarder, client: redis.Redis) -> None:
        post_event(off, sync_id="s1", created=at(2))
        env = {k: v for k, v in worker_env(fw.settings).items() if "AIRFLOW" not in k}
        out = CliRunner().invoke(main, ["replay", "--since", "2026-01-01"], env=env)
        # forwarding off is a settings error: usage (2), not a failure (1)
        assert out.exit_code == 2 and "FIVETRAN_EVENTS_AIRFLOW_URL" in out.output
        assert forwarding_keys(client) == []


class TestBackoffHolds:
    def test_due_times_and_early_jobs(
        self, http: Any, fw: Forwarder, standin: Airflow2StandIn
    ) -> None:
        """Retry-After 30 s: due at +30 s exactly; a job that runs earlier posts nothing."""
        fw.recorder.rng = lambda: 0.5
        with freeze_time(T0) as clock:
            standin.faults.append((503, {"Retry-After": "30"}))
            post_event(http, sync_id="s1")
            run_worker(fw)
            d = delivery(fw, "s1")
            assert d.state is DeliveryState.RETRYING
            assert d.ms("next_attempt_ms") == int((T0 + timedelta(seconds=30)).timestamp() * 1000)
            clock.tick(10)
            post_event(http, sync_id="s1", created=at(9))  # a second success: still +30 s
            assert fw.sweep() == 0
            did = d.id
            queue_jobs(
                fw.queue, [(did, forward_job_id(fw.settings.key_prefix, did, "early"))], fw.lease_ms
            )
            ForwardingWorker(fw).work(burst=True, with_scheduler=False)  # that job, no sweep
            assert standin.posts == []  # (the 503 was answered before the body was read)
            assert delivery(fw, "s1").state is DeliveryState.RETRYING
            clock.tick(19)
            assert fw.sweep() == 0
            clock.tick(1)
            assert fw.sweep() == 1
            run_worker(fw)
        assert delivery(fw, "s1").state is DeliveryState.DELIVERED
        assert len(events_of(standin, "s1")) == 1

    def test_sweeper_never_queues_a_second_job(self, http: Any, fw: Forwarder) -> None:
        """No worker for longer than a lease: the delivery keeps its one queued job."""
        with freeze_time(T0) as clock:
            post_event(http, sync_id="s1")
            assert fw.sweep() == 1 and fw.queue.count == 1
            for _ in range(3):
                clock.tick(fw.lease_ms / 1000 + 1)
                assert fw.sweep() == 0
            assert fw.queue.count == 1

    @pytest.mark.parametrize("status", [429, 503])
    @pytest.mark.parametrize(
        "value",
        ["1e22", "1e999", "Infinity", "99999999999999999999", "Fri, 31 Dec 9999 23:59:59 GMT"],
    )
    def test_absurd_retry_after_is_capped(
        self,
        http: Any,
        fw: Forwarder,
        standin: Airflow2StandIn,
        value: str,
        status: int,
    ) -> None:
        """An infinite or enormous Retry-After: retried after
        FIVETRAN_EVENTS_MAX_RETRY_AFTER_SECONDS (an hour), not at the 48 h window's end."""
        with freeze_time(T0):
            standin.faults.append((status, {"Retry-After": value}))
            post_event(http, sync_id="s1")
            run_worker(fw)
            d = delivery(fw, "s1")
            assert d.state is DeliveryState.RETRYING, d.fields
            assert d.ms("next_attempt_ms") == d.ms("updated_ms") + 3_600_000
        assert fw.queue.failed_job_registry.count == 0


class TestUnknownOutcome:
    def test_late_commit_gets_one_event(
        self, http: Any, fw: Forwarder, standin: Airflow2StandIn, tmp_path: Path
    ) -> None:
        """Airflow commits the first POST 2.5 s after receiving it; the client gave up at
        1 s. The retry waits until a lookup can be trusted: one event, not two."""
        standin.first_commit_delay = 2.5
        # Airflow here may commit up to 1.5 s after the client's 1 s timeout; 2 s covers it.
        worker = WorkerProcess(
            fw.settings,
            tmp_path,
            airflow_timeout_seconds=1,
            forward_backoff_seconds=0.1,
            forward_backoff_max_seconds=0.2,
            forward_unknown_outcome_seconds=2,
        )
        try:
            post_event(http, sync_id="s1")
            poll_until(
                lambda: (
                    delivery(fw, "s1").state is DeliveryState.DELIVERED and standin.uncommitted == 0
                ),
                "s1 delivered and the late commit done",
                30,
                details=worker.log,
            )
        finally:
            worker.stop()
        d = delivery(fw, "s1")
        print(
            f"late commit: {len(standin.posts)} POSTs, "
            f"{len(events_of(standin, 's1'))} events "
            f"for (s1, {URI}), delivery {d.state.value}, recovered={d.get('recovered')}"
        )
        assert d.state is DeliveryState.DELIVERED, worker.log()
        assert len(events_of(standin, "s1")) == 1
        assert len(standin.posts) == 1 and d.get("recovered") == "1"

    def test_a_restarted_worker_honours_the_mark(
        self, http: Any, settings: Settings, standin: Airflow2StandIn
    ) -> None:
        """The open POST is durable: a new worker process does not post before it settles."""
        fw = forwarder(
            settings,
            standin.url,
            standin.username,
            standin.password,
            airflow_timeout_seconds=0.5,
        )
        standin.answer_delay = 1.0
        with freeze_time(T0, tick=True):
            post_event(http, sync_id="s1")
            run_worker(fw)
        d = delivery(fw, "s1")
        assert d.state is DeliveryState.RETRYING and d.get("unknown_ms")
        assert d.ms("next_attempt_ms") >= d.ms("unknown_ms") + 120_000
        standin.answer_delay = 0.0
        restarted = forwarder(
            settings,
            standin.url,
            standin.username,
            standin.password,
        )
        with freeze_time(T0 + timedelta(seconds=60)):
            assert restarted.attempt(d.id).outcome == "not due"
        with freeze_time(T0 + timedelta(seconds=125)):
            assert restarted.attempt(d.id).outcome == "recovered"
        assert len(standin.posts) == 1 and len(events_of(standin, "s1")) == 1


class TestReplayIsAtomic:
    def test_worker_delivers_between_replays_read_and_write(
        self, http: Any, fw: Forwarder, standin: Airflow2StandIn
    ) -> None:
        """Forced interleaving: replay reads 'retrying', a worker then delivers, replay
        writes. The delivery keeps Airflow's event id; one event in all."""
        with freeze_time(T0) as clock:
            standin.faults.append((503, {}))
            post_event(http, sync_id="s1")
            run_worker(fw)
            d = delivery(fw, "s1")
            assert d.state is DeliveryState.RETRYING
            clock.tick((d.ms("next_attempt_ms") - d.ms("updated_ms") + 1) / 1000)
            store = fw.store
            reads = {"n": 0}

            def after_read(original: Any) -> Any:
                def read(*args: Any, **kwargs: Any) -> Any:
                    value = original(*args, **kwargs)
                    reads["n"] += 1
                    if reads["n"] == 1:  # the worker's attempt lands right after replay read
                        assert fw.attempt(d.id).outcome == "delivered"
                    return value

                return read

            with pytest.MonkeyPatch.context() as mp:
                mp.setattr(store, "get", after_read(store.get))
                mp.setattr(store, "many", after_read(store.many))
                Replayer.of(fw).replay([d.id])
            run_worker(fw)
        d = delivery(fw, "s1")
        assert reads["n"] >= 1
        assert d.state is DeliveryState.DELIVERED and d.get("event_id") == "1"
        assert len(events_of(standin, "s1")) == 1
