"""The webhook's forwarding jobs: queued with RQ's own API once the record script ran.

Real redis-server; RQ reads the jobs back with its own ``Job.fetch`` and ``Queue``, and
RQ's worker runs them against the Airflow 2 stand-in. That every delivery reaches
Airflow end to end is shown by the forwarding tests (``test_forwarding_worker.py``,
``test_forward_edges.py``); these show the jobs themselves, and that a crash between
the script and the enqueue loses no delivery.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
import redis
from rq import Queue
from rq.job import Job, JobStatus

from fivetran_events import HistoryWriter, Settings, WriteStatus
from fivetran_events.keys import due_key
from fivetran_events.timeutil import to_ms
from fivetran_events.uris import UriMap
from testkit.airflow2_standin import Airflow2StandIn
from testkit.forward_support import (
    CID,
    URI,
    run_worker,
)
from testkit.support import at, ev
from webhook_app.forwarding.enqueue import (
    FAILURE_TTL,
    FORWARD_JOB,
    RESULT_TTL,
    Enqueuer,
    delivery_store,
    forward_job_id,
)
from webhook_app.forwarding.worker import DeliveryState, Forwarder

pytestmark = pytest.mark.timeout(60)

#: A queue name with quotes, a backslash, brackets and non-ASCII.
QUEUE = "q'\\\"]]\u00e9\n"


def _enqueuer(settings: Settings, client: redis.Redis) -> Enqueuer:
    queue = Queue(settings.queue_name, connection=client)
    return Enqueuer(settings, delivery_store(settings, client), queue, UriMap())


def _record(settings: Settings, client: redis.Redis, enq: Enqueuer, sync_id: str) -> str:
    """Record a successful sync_end with ``enq`` adding its delivery; return the job id."""
    event = ev(sync_id=sync_id, created=at(3))
    writer = HistoryWriter(client, settings.key_prefix, settings.retention_ms)
    assert writer.record(event, on_success=enq, now=to_ms(at(4))).status is WriteStatus.RECORDED
    (uri,) = enq.uri_map.uris(event.connector_id, event.connector_name, None, None)
    return forward_job_id(enq.store.id_of(event, uri))


class TestJobs:
    def test_rq_reads_it_back_queued_in_order(
        self, settings: Settings, client: redis.Redis
    ) -> None:
        """RQ's Queue lists the jobs in the order written and Job.fetch rebuilds the call."""
        enq = _enqueuer(settings, client)
        first, second = (_record(settings, client, enq, s) for s in ("sync-1", "sync-2"))
        queue = Queue(settings.queue_name, connection=client)
        assert queue.job_ids == [first, second]
        assert [q.name for q in Queue.all(connection=client)] == [settings.queue_name]
        job = Job.fetch(second, connection=client)
        did = job.kwargs["delivery"]
        assert job.func_name == FORWARD_JOB and did.split(":")[1] == "sync-2"
        assert job.get_status() is JobStatus.QUEUED and job.origin == settings.queue_name
        assert job.description == f"forward {did}" and job.timeout == enq.lease_ms // 1000
        assert enq.store.get(did) is not None and enq.store.get(did).get("job") == second  # type: ignore[union-attr]

    def test_the_job_keeps_its_result_briefly_and_never_expires_unrun(
        self, settings: Settings, client: redis.Redis
    ) -> None:
        """Result and failure TTLs as set; no ttl: a job that expired before it ran would
        leave its delivery waiting for the sweeper."""
        enq = _enqueuer(settings, client)
        job = Job.fetch(_record(settings, client, enq, "sync-1"), connection=client)
        assert (job.result_ttl, job.failure_ttl, job.ttl) == (RESULT_TTL, FAILURE_TTL, None)
        assert client.ttl(job.key) == -1

    def test_unusual_values_reach_the_job_unchanged(
        self, settings: Settings, client: redis.Redis
    ) -> None:
        """A queue name with quotes, backslashes and non-ASCII comes back byte for byte."""
        settings = settings.model_copy(update={"queue_name": QUEUE})
        enq = _enqueuer(settings, client)
        job_id = _record(settings, client, enq, "sync-1")
        assert Job.fetch(job_id, connection=client).origin == QUEUE

    def test_a_duplicate_queues_nothing(self, settings: Settings, client: redis.Redis) -> None:
        """A redelivery writes nothing in the script, and so queues no job either."""
        enq = _enqueuer(settings, client)
        _record(settings, client, enq, "sync-1")
        writer = HistoryWriter(client, settings.key_prefix, settings.retention_ms)
        again = writer.record(ev(sync_id="sync-1", created=at(3)), on_success=enq)
        assert again.status is WriteStatus.DUPLICATE
        assert Queue(settings.queue_name, connection=client).count == 1

    def test_two_round_trips_a_success(
        self, settings: Settings, client: redis.Redis, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """The record script, then every job of the sync in one MULTI."""
        enq = _enqueuer(settings, client)
        _record(settings, client, enq, "warm")  # connect; Redis learns the script
        sends: list[Any] = []
        real = redis.connection.AbstractConnection.send_packed_command

        def counting(self: Any, command: Any, check_health: bool = True) -> Any:
            sends.append(command)
            return real(self, command, check_health)  # type: ignore[no-untyped-call]

        monkeypatch.setattr(redis.connection.AbstractConnection, "send_packed_command", counting)
        _record(settings, client, enq, "sync-1")
        assert len(sends) == 2


class TestCrashBetweenScriptAndEnqueue:
    def test_the_sweeper_queues_it_and_it_is_delivered_once(
        self, fw: Forwarder, standin: Airflow2StandIn, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """The script wrote history and delivery, the process died before queuing the job:
        the delivery is due at its lease's end, the sweeper queues it then, a real worker
        delivers it, and a second job of the same delivery posts nothing more."""
        monkeypatch.setattr(Enqueuer, "recorded", lambda self, event: None)  # the crash
        writer = HistoryWriter(fw.redis, fw.settings.key_prefix, fw.settings.retention_ms)
        event = ev(connector_id=CID, sync_id="s1", created=at(3))
        now = int(time.time() * 1000)
        assert writer.record(event, on_success=fw.enqueuer).status is WriteStatus.RECORDED
        did = fw.store.id_of(event, URI)
        assert fw.enqueuer.queue.count == 0
        d = fw.store.get(did)
        assert d is not None and d.state is DeliveryState.PENDING
        due = fw.redis.zscore(due_key(fw.settings.key_prefix), did)
        assert due is not None and now <= due <= now + fw.lease_ms + 1_000

        assert fw.sweep(now=int(due) - 1) == 0  # not due before its lease's end
        assert fw.sweep(now=int(due)) == 1
        assert fw.sweep(now=int(due)) == 0  # its job is queued: not a second one
        run_worker(fw)
        d = fw.store.get(did)
        assert d is not None and d.state is DeliveryState.DELIVERED
        assert len(standin.posts) == 1

        fw.enqueuer.enqueue_job(did, None, forward_job_id(did))  # the same job, again
        run_worker(fw)
        d = fw.store.get(did)
        assert d is not None and d.state is DeliveryState.DELIVERED
        assert len(standin.posts) == 1
