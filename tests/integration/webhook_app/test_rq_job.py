"""The web side writes each forwarding job as RQ's own ``Queue.enqueue`` would.

Real redis-server; RQ reads the jobs back with its own ``Job.fetch`` and ``Queue``. That
a real worker runs them is shown end to end by the forwarding tests
(``test_forwarding_worker.py``, ``test_forward_edges.py``).
"""

from __future__ import annotations

import pickle
import zlib

import pytest
import redis
from rq import Queue
from rq.job import Job, JobStatus
from rq.utils import utcparse

from fivetran_events import HistoryWriter, Settings
from fivetran_events.timeutil import to_ms
from fivetran_events.urimap import UriMap
from testkit.support import at, ev
from webhook_app.forwarding.enqueue import FORWARD_JOB, Enqueuer
from webhook_app.forwarding.record import forward_job_id
from webhook_app.forwarding.rq_job import JobWriter

pytestmark = pytest.mark.timeout(60)

#: A queue name a Lua literal must escape: quotes, a backslash, brackets, non-ASCII.
QUEUE = "q'\\\"]]\u00e9\n"
#: Fields stamped with the time of the write, by RQ and by us alike.
STAMPS = ("created_at", "enqueued_at")


def _enqueuer(settings: Settings, client: redis.Redis) -> Enqueuer:
    return Enqueuer(settings, client, Queue(settings.queue_name, connection=client), UriMap())


def _record(settings: Settings, client: redis.Redis, enq: Enqueuer, sync_id: str) -> str:
    """Record a successful sync_end with ``enq`` adding its delivery; return the job id."""
    event = ev(sync_id=sync_id, created=at(3))
    writer = HistoryWriter(client, settings.key_prefix, settings.retention_ms)
    writer.record(event, on_success=enq, now=to_ms(at(4)))
    (uri,) = enq.uri_map.uris(event.connector_id, event.connector_name, None, None)
    return forward_job_id(enq.store.id_of(event, uri))


class TestJobFormat:
    def test_the_hash_is_the_one_queue_enqueue_writes(
        self, settings: Settings, client: redis.Redis
    ) -> None:
        """Field for field, the same hash as RQ's enqueue of the same call: the pickled
        call, description, origin, timeouts, TTLs and status; only the stamps differ."""
        enq = _enqueuer(settings, client)
        by_us_id = _record(settings, client, enq, "sync-1")
        did = Job.fetch(by_us_id, connection=client).kwargs["delivery"]
        enq.enqueue_job(did, None, "fwd-by-rq")
        by_rq: dict[bytes, bytes] = client.hgetall(Job.key_for("fwd-by-rq"))  # type: ignore[assignment]
        by_us: dict[bytes, bytes] = client.hgetall(Job.key_for(by_us_id))  # type: ignore[assignment]
        assert by_rq and set(by_us) == set(by_rq)
        for stamp in STAMPS:
            utcparse(by_us.pop(stamp.encode()).decode())
            by_rq.pop(stamp.encode())
        # The same call, as a zlib stream of one stored block (rq_job.compress).
        data = zlib.decompress(by_us.pop(b"data"))
        assert data == zlib.decompress(by_rq.pop(b"data"))
        assert pickle.loads(data) == (FORWARD_JOB, None, (), {"delivery": did})
        assert by_us == by_rq

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

    def test_unusual_values_reach_the_job_unchanged(
        self, settings: Settings, client: redis.Redis
    ) -> None:
        """The unchanging fields are written into the script's text: a queue name with
        quotes, backslashes and non-ASCII comes back byte for byte."""
        settings = settings.model_copy(update={"queue_name": QUEUE})
        enq = _enqueuer(settings, client)
        job_id = _record(settings, client, enq, "sync-1")
        assert Job.fetch(job_id, connection=client).origin == QUEUE

    def test_a_ttl_is_refused(self, client: redis.Redis) -> None:
        """A job that could expire before it runs would strand its delivery: no ttl."""
        queue = Queue("ttl-queue", connection=client)
        with pytest.raises(ValueError, match="no ttl"):
            JobWriter(queue, FORWARD_JOB, "delivery", describe="forward {}", ttl=600)
