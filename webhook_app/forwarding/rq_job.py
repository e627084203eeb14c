"""Queue an RQ job with the writes ``Queue.enqueue`` makes, without building a ``Job``.

The webhook queues one job per success inside its one write script. ``Queue.enqueue``
builds a ``Job`` object, resolves its options and serialises it on every call: about a
third of a delivery's Python time went there. This makes the same hash, queue entry and
queue registration from a template that RQ itself built once, filling in only what
differs per job (the delivery in the pickled call, the description, the timestamps); the
delivery store's script writes them (``_lua.CREATE_CHUNK``), so an RQ 2.x worker reads
exactly what ``Queue.enqueue`` would have written
(``tests/integration/webhook_app/test_rq_job.py`` compares the two field by field).
"""

from __future__ import annotations

import zlib
from datetime import datetime, timezone
from typing import Any

from redis.typing import EncodableT, FieldT
from rq import Queue
from rq.job import Job, JobStatus
from rq.utils import now


def compress(data: bytes) -> bytes:
    """Return ``data`` as a zlib stream, as RQ stores a job's call, at a fraction of the cost.

    Level 0: stored (uncompressed) blocks with their Adler-32. A pickled call is ~150
    bytes, which deflate shrinks by a few dozen, and setting up a compressing deflate
    took as long as the rest of the job (``zlib.compress``'s default level and memory
    allocate and clear ~256 KB per call). RQ reads ``data`` with ``zlib.decompress``,
    which reads any valid stream.
    """
    return zlib.compress(data, 0)


class JobWriter:
    """Write queued RQ jobs of one function, one keyword argument and fixed options."""

    def __init__(
        self, queue: Queue, func: str, kwarg: str, *, describe: str, **options: Any
    ) -> None:
        """Let RQ build and render one job of this shape: the template of every other.

        ``describe`` formats the description from the argument (``"forward {}"``);
        ``options`` are ``Queue.enqueue``'s (``result_ttl``, ``failure_ttl``,
        ``job_timeout``). Not ``ttl``: a job that expires before it runs would leave a
        delivery waiting for the sweeper, and the script writes no expiry.
        """
        if "ttl" in options:
            raise ValueError("JobWriter writes jobs that live until they run: no ttl")
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

    #: The fields that differ per job; the others are the template's (``static_fields``).
    PER_JOB = ("data", "description", "created_at", "enqueued_at")

    @property
    def static_fields(self) -> list[str]:
        """The template's field/value strings that every job of this shape shares."""
        return [str(x) for k, v in self.template.items() if k not in self.PER_JOB for x in (k, v)]

    def per_job(self, value: str) -> tuple[bytes, str]:
        """Return the pickled and compressed call and the description for ``value``."""
        call = (self.func, None, (), {self.kwarg: value})
        return compress(self.queue.serializer.dumps(call)), self.describe.format(value)

    @staticmethod
    def stamp() -> str:
        """Return ``created_at`` and ``enqueued_at`` for a job queued now, as RQ writes them."""
        return utc_stamp(datetime.now(timezone.utc))


def utc_stamp(at: datetime) -> str:
    """Write an aware UTC time as ``rq.utils.utcformat`` does (``%Y-%m-%dT%H:%M:%S.%fZ``),
    through ``isoformat``, which takes half the time of ``strftime``."""
    return at.isoformat(timespec="microseconds")[:-6] + "Z"
