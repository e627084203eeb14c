"""Queue an RQ job with the writes ``Queue.enqueue`` makes, without building a ``Job``.

The webhook queues one job per success inside its MULTI. ``Queue.enqueue(pipeline=...)``
builds a ``Job`` object, resolves its options and serialises it on every call: about a
third of a delivery's Python time went there. This writes the same hash, queue entry and
queue registration from a template that RQ itself built once, filling in only what
differs per job (the delivery in the pickled call, the description, the timestamps), so
an RQ 2.x worker reads exactly what ``Queue.enqueue`` would have written
(``tests/integration/webhook_app/test_rq_job.py`` compares the two field by field).
"""

from __future__ import annotations

import zlib
from typing import Any

from redis.client import Pipeline
from redis.typing import EncodableT, FieldT
from rq import Queue
from rq.job import Job, JobStatus
from rq.utils import now, utcformat

#: zlib's smallest window (2**9 bytes) and memory level: a pickled call is ~130 bytes,
#: and ``zlib.compress``'s defaults allocate and clear ~256 KB per call (about 50 us here,
#: as long as the rest of the job). Any zlib stream reads back with ``zlib.decompress``,
#: which is how RQ reads ``data``.
_WBITS, _MEMLEVEL = 9, 1


def compress(data: bytes) -> bytes:
    """Return ``data`` as a zlib stream, as RQ stores a job's call, at a fraction of the cost."""
    packer = zlib.compressobj(6, zlib.DEFLATED, _WBITS, _MEMLEVEL)
    return packer.compress(data) + packer.flush()


class JobWriter:
    """Write queued RQ jobs of one function, one keyword argument and fixed options."""

    def __init__(
        self, queue: Queue, func: str, kwarg: str, *, describe: str, **options: Any
    ) -> None:
        """Let RQ build and render one job of this shape: the template of every other.

        ``describe`` formats the description from the argument (``"forward {}"``);
        ``options`` are ``Queue.enqueue``'s (``result_ttl``, ``failure_ttl``,
        ``job_timeout``).
        """
        self.queue = queue
        self.func = func
        self.kwarg = kwarg
        self.describe = describe
        timeout = options.pop("job_timeout", None)
        job = Job.create(
            func,
            kwargs={kwarg: ""},
            connection=queue.connection,
            serializer=queue.serializer,
            timeout=timeout,
            origin=queue.name,
            status=JobStatus.QUEUED,
            **options,
        )
        # What Queue._prepare_for_queue sets before saving.
        job.enqueued_at = now()
        if job.timeout is None:
            job.timeout = queue._default_timeout
        self.template: dict[FieldT, EncodableT] = job.to_dict()
        self.template["status"] = JobStatus.QUEUED.value
        # Queue.enqueue's job.cleanup(ttl): a positive ttl expires the job's keys.
        if job.ttl is not None and job.ttl <= 0:
            raise ValueError("JobWriter writes jobs that live: give a positive ttl or none")
        self.ttl = job.ttl

    def mapping(self, value: str) -> dict[FieldT, EncodableT]:
        """Return the job's hash for ``func(**{kwarg: value})``, stamped now."""
        fields = dict(self.template)
        call = (self.func, None, (), {self.kwarg: value})
        fields["data"] = compress(self.queue.serializer.dumps(call))
        fields["description"] = self.describe.format(value)
        fields["created_at"] = fields["enqueued_at"] = utcformat(now())
        return fields

    def write(self, pipe: Pipeline, job_id: str, value: str) -> None:
        """Queue the job ``job_id`` in ``pipe``: register the queue, save the job, push it."""
        pipe.sadd(self.queue.redis_queues_keys, self.queue.key)
        pipe.hset(Job.key_for(job_id), mapping=self.mapping(value))
        if self.ttl:
            named = Job(job_id, connection=self.queue.connection)  # RQ names its side keys
            for key in (named.key, named.dependents_key, named.dependencies_key):
                pipe.expire(key, self.ttl)
        pipe.rpush(self.queue.key, job_id)
