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

from fivetran_events import Settings
from fivetran_events.urimap import UriMap
from webhook_app.forwarding.enqueue import FORWARD_JOB, Enqueuer
from webhook_app.forwarding.rq_job import JobWriter

pytestmark = [pytest.mark.redis, pytest.mark.timeout(60)]

DID = "conn_a:sync-1:0123456789abcdef0123"
#: Fields stamped with the time of the write, by RQ and by us alike.
STAMPS = ("created_at", "enqueued_at")


def _enqueuer(settings: Settings, client: redis.Redis) -> Enqueuer:
    return Enqueuer(settings, client, Queue(settings.queue_name, connection=client), UriMap())


class TestJobFormat:
    def test_the_hash_is_the_one_queue_enqueue_writes(
        self, settings: Settings, client: redis.Redis
    ) -> None:
        """Field for field, the same hash as RQ's enqueue of the same call: the pickled
        call, description, origin, timeouts, TTLs and status; only the stamps differ."""
        enq = _enqueuer(settings, client)
        with client.pipeline(transaction=True) as pipe:
            enq.enqueue_job(DID, pipe, "fwd-by-rq")
            enq.jobs.write(pipe, "fwd-by-us", DID)
            pipe.execute()
        by_rq: dict[bytes, bytes] = client.hgetall(Job.key_for("fwd-by-rq"))  # type: ignore[assignment]
        by_us: dict[bytes, bytes] = client.hgetall(Job.key_for("fwd-by-us"))  # type: ignore[assignment]
        assert by_rq and set(by_us) == set(by_rq)
        for stamp in STAMPS:
            utcparse(by_us.pop(stamp.encode()).decode())
            by_rq.pop(stamp.encode())
        # The same call, compressed with a smaller zlib window (rq_job.compress).
        data = zlib.decompress(by_us.pop(b"data"))
        assert data == zlib.decompress(by_rq.pop(b"data"))
        assert pickle.loads(data) == (FORWARD_JOB, None, (), {"delivery": DID})
        assert by_us == by_rq

    def test_rq_reads_it_back_queued_in_order(
        self, settings: Settings, client: redis.Redis
    ) -> None:
        """RQ's Queue lists the jobs in the order written and Job.fetch rebuilds the call."""
        enq = _enqueuer(settings, client)
        with client.pipeline(transaction=True) as pipe:
            enq.jobs.write(pipe, "fwd-1", DID)
            enq.jobs.write(pipe, "fwd-2", DID + "x")
            pipe.execute()
        queue = Queue(settings.queue_name, connection=client)
        assert queue.job_ids == ["fwd-1", "fwd-2"]
        assert [q.name for q in Queue.all(connection=client)] == [settings.queue_name]
        job = Job.fetch("fwd-2", connection=client)
        assert job.func_name == FORWARD_JOB and job.kwargs == {"delivery": DID + "x"}
        assert job.get_status() is JobStatus.QUEUED and job.origin == settings.queue_name
        assert job.description == f"forward {DID}x" and job.timeout == enq.lease_ms // 1000

    def test_a_ttl_expires_the_job_as_rq_does(self, client: redis.Redis) -> None:
        """With a ttl (Queue.enqueue's ``ttl=``) the job's key expires as RQ's would."""
        queue = Queue("ttl-queue", connection=client)
        writer = JobWriter(queue, FORWARD_JOB, "delivery", describe="forward {}", ttl=600)
        with client.pipeline(transaction=True) as pipe:
            queue.enqueue(
                FORWARD_JOB, kwargs={"delivery": DID}, job_id="by-rq", ttl=600, pipeline=pipe
            )
            writer.write(pipe, "by-us", DID)
            pipe.execute()
        assert 590 <= client.ttl(Job.key_for("by-us")) <= 600
        assert abs(client.ttl(Job.key_for("by-us")) - client.ttl(Job.key_for("by-rq"))) <= 1
        assert queue.job_ids == ["by-rq", "by-us"]
