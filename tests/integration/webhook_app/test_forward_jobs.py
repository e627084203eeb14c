"""The forwarding jobs: the webhook's script makes deliveries due now, a sweep queues them.

Real redis-server; RQ reads the jobs back with its own ``Job.fetch`` and ``Queue``, and
RQ's worker runs them against the Airflow 2 stand-in. That every delivery reaches
Airflow end to end is shown by the forwarding tests (``test_forwarding_worker.py``,
``test_forward_edges.py``); these show the jobs themselves, that the webhook queues none
(it wakes the sweepers), that a crash before a sweep queues the job loses no delivery,
and that sweepers queue one job per delivery however many run.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
import redis
from rq import Queue
from rq.job import Job, JobStatus

from fivetran_events import HistoryWriter, Settings, WriteStatus
from fivetran_events.deliveries import DeliveryState
from fivetran_events.keys import due_key, job_id_prefix, sweep_wake_key
from fivetran_events.timeutil import to_ms
from fivetran_events.uris import UriMap
from testkit.airflow2_standin import Airflow2StandIn
from testkit.forward_support import (
    CID,
    URI,
    forward_job_id,
    run_worker,
)
from testkit.processes import poll_until
from testkit.support import at, ev
from webhook_app.forwarding import sweeper as sweeper_module
from webhook_app.forwarding.enqueue import Enqueuer, sync_of
from webhook_app.forwarding.forwarder import Forwarder
from webhook_app.forwarding.store import delivery_store, target_id
from webhook_app.forwarding.sweeper import (
    FAILURE_TTL,
    FORWARD_JOB,
    RESULT_TTL,
    queue_jobs,
)
from webhook_app.worker.queue import SERIALIZER, forward_queue

pytestmark = pytest.mark.timeout(60)

#: A key prefix (so a queue name) with quotes, a backslash, brackets and non-ASCII.
PREFIX = "q'\\\"]]\u00e9:"


def _forwarder(settings: Settings, client: redis.Redis) -> Forwarder:
    """A Forwarder without Airflow: its enqueuer creates deliveries, its sweeps queue them."""
    store = delivery_store(settings, client)
    queue = forward_queue(settings, client)
    return Forwarder(settings, store, Enqueuer(settings, store, UriMap()), queue, None)


def _record(settings: Settings, client: redis.Redis, enq: Enqueuer, sync_id: str) -> str:
    """Record a successful sync_end with ``enq`` adding its delivery; return its id."""
    event = ev(sync_id=sync_id, created=at(3))
    writer = HistoryWriter(client, settings.key_prefix, settings.retention_ms)
    assert writer.record(event, on_success=enq, now=to_ms(at(4))).status is WriteStatus.RECORDED
    (uri,) = enq.uri_map.uris(event.connector_id, event.connector_name, None, None)
    return target_id(sync_of(event), uri)


def _wake(fw: Forwarder) -> list[bytes]:
    return fw.redis.lrange(sweep_wake_key(fw.settings.key_prefix), 0, -1)  # type: ignore[return-value]


class TestTheWebhookQueuesNoJob:
    def test_the_delivery_is_due_now_and_the_sweepers_woken(
        self, settings: Settings, client: redis.Redis
    ) -> None:
        """No RQ job after the script: the delivery is due at its receipt, the wake list
        holds one element however many deliveries came, and one sweep queues one job."""
        fw = _forwarder(settings, client)
        before = int(time.time() * 1000)
        dids = [_record(settings, client, fw.enqueuer, s) for s in ("sync-1", "sync-2")]
        assert fw.queue.count == 0
        for did in dids:
            d = fw.store.get(did)
            assert d is not None and d.state is DeliveryState.PENDING and d.get("job") is None
            due = client.zscore(due_key(settings.key_prefix), did)
            assert due is not None and due == d.ms("received_ms")
            assert before <= due <= int(time.time() * 1000)
        assert _wake(fw) == [b"1"]
        assert fw.sweep() == 2 and fw.queue.count == 2

    def test_one_round_trip_a_success(
        self, settings: Settings, client: redis.Redis, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """The record script is the webhook's whole write: nothing follows it."""
        enq = _forwarder(settings, client).enqueuer
        _record(settings, client, enq, "warm")  # connect; Redis learns the script
        sends: list[Any] = []
        real = redis.connection.AbstractConnection.send_packed_command

        def counting(self: Any, command: Any, check_health: bool = True) -> Any:
            sends.append(command)
            return real(self, command, check_health)  # type: ignore[no-untyped-call]

        monkeypatch.setattr(redis.connection.AbstractConnection, "send_packed_command", counting)
        _record(settings, client, enq, "sync-1")
        assert len(sends) == 1

    def test_a_duplicate_makes_nothing_due(self, settings: Settings, client: redis.Redis) -> None:
        """A redelivery writes nothing in the script: nothing due, no wake, no job."""
        fw = _forwarder(settings, client)
        _record(settings, client, fw.enqueuer, "sync-1")
        assert fw.sweep() == 1
        client.delete(sweep_wake_key(settings.key_prefix))  # a sweeper took the wake
        writer = HistoryWriter(client, settings.key_prefix, settings.retention_ms)
        again = writer.record(ev(sync_id="sync-1", created=at(3)), on_success=fw.enqueuer)
        assert again.status is WriteStatus.DUPLICATE
        assert _wake(fw) == [] and fw.sweep() == 0 and fw.queue.count == 1


class TestJobs:
    def test_rq_reads_it_back_queued_in_order(
        self, settings: Settings, client: redis.Redis
    ) -> None:
        """RQ's Queue lists the jobs in the order due and Job.fetch rebuilds the call."""
        fw = _forwarder(settings, client)
        dids = [_record(settings, client, fw.enqueuer, s) for s in ("sync-1", "sync-2")]
        now = int(time.time() * 1000)
        assert fw.sweep(now) == 2
        first, second = (forward_job_id(settings.key_prefix, did, now) for did in dids)
        assert fw.queue.job_ids == [first, second]
        assert [q.name for q in Queue.all(connection=client)] == [settings.queue_name]
        job = Job.fetch(second, connection=client, serializer=SERIALIZER)
        did = job.kwargs["delivery"]
        assert job.func_name == FORWARD_JOB and did == dids[1]
        assert job.get_status() is JobStatus.QUEUED and job.origin == settings.queue_name
        assert job.description == f"forward {did}" and job.timeout == fw.lease_ms // 1000
        assert fw.store.get(did) is not None and fw.store.get(did).get("job") == second  # type: ignore[union-attr]

    def test_the_job_keeps_its_result_briefly_and_never_expires_unrun(
        self, settings: Settings, client: redis.Redis
    ) -> None:
        """Result and failure TTLs as set; no ttl: a job that expired before it ran would
        leave its delivery waiting for the sweeper."""
        fw = _forwarder(settings, client)
        _record(settings, client, fw.enqueuer, "sync-1")
        assert fw.sweep() == 1
        job = Job.fetch(fw.queue.job_ids[0], connection=client, serializer=SERIALIZER)
        assert (job.result_ttl, job.failure_ttl, job.ttl) == (RESULT_TTL, FAILURE_TTL, None)
        assert client.ttl(job.key) == -1

    def test_unusual_values_reach_the_job_unchanged(
        self, settings: Settings, client: redis.Redis
    ) -> None:
        """A key prefix with quotes, backslashes and non-ASCII names the queue, which comes
        back byte for byte; the job's id stays one RQ takes."""
        settings = settings.model_copy(update={"key_prefix": PREFIX})
        fw = _forwarder(settings, client)
        _record(settings, client, fw.enqueuer, "sync-1")
        assert fw.sweep() == 1
        job = Job.fetch(fw.queue.job_ids[0], connection=client, serializer=SERIALIZER)
        assert job.origin == fw.queue.name == PREFIX + "forward"
        assert job.id.startswith(job_id_prefix(PREFIX)) and PREFIX not in job.id


class TestSweepers:
    def test_two_sweepers_never_queue_two_jobs_of_one_delivery(
        self, settings: Settings, client: redis.Redis
    ) -> None:
        """Two workers' sweepers at the same moment, again and again: each due delivery
        gets one job (a claim moves it to the lease's end in the step that takes it)."""
        dids = [
            _record(settings, client, _forwarder(settings, client).enqueuer, f"sync-{i}")
            for i in range(40)
        ]
        sweepers = [_forwarder(settings, client) for _ in range(2)]
        now = int(time.time() * 1000)
        counts: list[int] = []
        start = threading.Barrier(2)

        def run(fw: Forwarder) -> None:
            start.wait()
            counts.extend(fw.sweep(now) for _ in range(5))

        threads = [threading.Thread(target=run, args=(fw,)) for fw in sweepers]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=30)
        jobs = [
            Job.fetch(j, connection=client, serializer=SERIALIZER)
            for j in sweepers[0].queue.job_ids
        ]
        assert sum(counts) == len(jobs) == len(dids)
        assert sorted(j.kwargs["delivery"] for j in jobs) == sorted(dids)

    def test_a_backlog_is_swept_in_batches_at_once(
        self, settings: Settings, client: redis.Redis, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """More due than a sweep takes (a worker starting after an outage): the sweeper
        sweeps again while a sweep fills its batch, instead of waiting an interval."""
        monkeypatch.setattr(sweeper_module, "SWEEP_BATCH", 2)
        fw = _forwarder(settings, client)
        for i in range(5):
            _record(settings, client, fw.enqueuer, f"sync-{i}")
        assert fw.sweeper.sweep_backlog() == 5 and fw.queue.count == 5

    def test_the_sweeper_wakes_at_once_on_a_new_delivery(
        self, settings: Settings, client: redis.Redis
    ) -> None:
        """A sweeper whose interval is long queues a new delivery as soon as it is
        created: the webhook's script woke it (its timeout, and so its wait, a minute)."""
        fw = _forwarder(settings.model_copy(update={"redis_timeout_seconds": 300}), client)
        stop = threading.Event()
        sweeper = threading.Thread(target=fw.sweeper.run, args=(60.0, stop), daemon=True)
        sweeper.start()
        try:
            _record(settings, client, fw.enqueuer, "sync-1")
            poll_until(lambda: fw.queue.count == 1, "the woken sweep", timeout=5)
        finally:
            stop.set()
            client.rpush(sweep_wake_key(settings.key_prefix), 1)  # end its wait now
            sweeper.join(timeout=10)
        assert not sweeper.is_alive()
        assert fw.queue.count == 1

    def test_a_redis_error_does_not_end_the_sweeper(
        self, settings: Settings, client: redis.Redis, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Its wait fails once (a Redis blip): the sweeper logs it, waits an interval and
        goes on, and queues the next delivery."""
        fw = _forwarder(settings, client)
        waits: list[float] = []
        real = fw.sweeper.wait_for_wake

        def flaky(timeout: float) -> bool:
            waits.append(timeout)
            if len(waits) == 1:
                raise redis.ConnectionError("a blip")
            return real(timeout)

        monkeypatch.setattr(fw.sweeper, "wait_for_wake", flaky)
        stop = threading.Event()
        sweeper = threading.Thread(target=fw.sweeper.run, args=(0.2, stop), daemon=True)
        sweeper.start()
        try:
            poll_until(lambda: len(waits) > 1, "a wait after the failed one", timeout=5)
            _record(settings, client, fw.enqueuer, "sync-1")
            poll_until(lambda: fw.queue.count == 1, "the sweep after the blip", timeout=5)
            assert sweeper.is_alive()
        finally:
            stop.set()
            sweeper.join(timeout=10)
        assert not sweeper.is_alive()


class TestCrashBeforeTheSweep:
    def test_a_later_sweep_queues_it_and_it_is_delivered_once(
        self, fw: Forwarder, standin: Airflow2StandIn
    ) -> None:
        """The script wrote history and delivery, and no sweeper ran (none was up, or it
        died): the delivery stays due, any later sweep queues it, a real worker delivers
        it, and a second job of the same delivery posts nothing more."""
        writer = HistoryWriter(fw.redis, fw.settings.key_prefix, fw.settings.retention_ms)
        event = ev(connector_id=CID, sync_id="s1", created=at(3))
        assert writer.record(event, on_success=fw.enqueuer).status is WriteStatus.RECORDED
        did = target_id(sync_of(event), URI)
        assert fw.queue.count == 0
        d = fw.store.get(did)
        assert d is not None and d.state is DeliveryState.PENDING
        due = fw.redis.zscore(due_key(fw.settings.key_prefix), did)
        assert due is not None and due == d.ms("received_ms")

        later = int(due) + 3_600_000  # an hour on: still due
        assert fw.sweep(now=later) == 1
        assert fw.sweep(now=later) == 0  # its job is queued: not a second one
        run_worker(fw)
        d = fw.store.get(did)
        assert d is not None and d.state is DeliveryState.DELIVERED
        assert len(standin.posts) == 1

        queue_jobs(
            fw.queue, [(did, forward_job_id(fw.settings.key_prefix, did))], fw.lease_ms
        )  # another job of it
        run_worker(fw)
        d = fw.store.get(did)
        assert d is not None and d.state is DeliveryState.DELIVERED
        assert len(standin.posts) == 1

    def test_a_crash_between_claim_and_enqueue_is_swept_at_the_leases_end(
        self, settings: Settings, client: redis.Redis, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A sweep claimed the delivery and died before queuing its job: the delivery is
        due at the lease's end, and the sweep then queues it (the job named was never
        queued, so it is not waiting)."""
        fw = _forwarder(settings, client)
        did = _record(settings, client, fw.enqueuer, "sync-1")
        now = int(time.time() * 1000)

        def crash(*args: Any) -> None:
            raise ConnectionError("died before queuing")

        with monkeypatch.context() as m:
            m.setattr(sweeper_module, "queue_jobs", crash)
            with pytest.raises(ConnectionError):
                fw.sweep(now)
        assert fw.queue.count == 0
        assert client.zscore(due_key(settings.key_prefix), did) == now + fw.lease_ms
        assert fw.sweep(now + fw.lease_ms - 1) == 0
        assert fw.sweep(now + fw.lease_ms) == 1 and fw.queue.count == 1

    def test_a_job_taken_from_the_queue_by_a_worker_that_died_holds_nothing(
        self, settings: Settings, client: redis.Redis
    ) -> None:
        """A worker took the job from the queue's list and died before starting it (a
        failover cut it off): the job is still marked queued but waits nowhere, so at the
        lease's end the sweep queues the delivery again instead of waiting for it."""
        fw = _forwarder(settings, client)
        _record(settings, client, fw.enqueuer, "sync-1")
        now = int(time.time() * 1000)
        assert fw.sweep(now) == 1 and fw.queue.count == 1
        assert fw.sweep(now + fw.lease_ms) == 0  # its job is in the list: it waits
        (job_id,) = fw.queue.job_ids
        client.lrem(fw.queue.key, 1, job_id)  # as a worker's BLMOVE did, its status unchanged
        job = fw.queue.fetch_job(job_id)
        assert job is not None and job.get_status(refresh=True) == "queued"
        assert fw.sweep(now + 2 * fw.lease_ms) == 1
        assert fw.queue.count == 1 and fw.queue.job_ids != [job_id]
