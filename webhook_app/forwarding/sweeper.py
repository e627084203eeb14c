"""The sweeper: queue an RQ job for every delivery whose due time has come.

New deliveries, retries, lease expiries and unqueued claims are due times in one sorted
set, so no RQ scheduler is needed and a killed worker's delivery resumes.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import redis

from fivetran_events import Settings
from fivetran_events.timeutil import now_ms

from .store import DeliveryStore

if TYPE_CHECKING:
    from rq import Queue

log = logging.getLogger(__name__)

#: The job's dotted path: a string, so the web process never imports the worker side.
FORWARD_JOB = "webhook_app.worker.rq_worker.forward_sync"
#: How long RQ keeps a finished attempt's job: the delivery record holds the outcome.
RESULT_TTL = 300
#: How long RQ keeps a failed attempt's job and traceback (a bug of ours) to read it.
FAILURE_TTL = 3 * 86_400
#: Deliveries the sweeper queues per pass.
SWEEP_BATCH = 500


def queue_jobs(queue: Queue, jobs: Sequence[tuple[str, str]], lease_ms: int) -> None:
    """Queue an attempt for each (delivery id, RQ job id) of ``jobs``, in one MULTI (no
    ``ttl``: a job that expired before it ran would leave its delivery waiting)."""
    with queue.connection.pipeline(transaction=True) as pipe:
        for did, job_id in jobs:
            queue.enqueue(
                FORWARD_JOB,
                kwargs={"delivery": did},
                job_id=job_id,
                pipeline=pipe,
                description=f"forward {did}",
                result_ttl=RESULT_TTL,
                failure_ttl=FAILURE_TTL,
                job_timeout=lease_ms // 1000,
            )
        pipe.execute()


class Sweeper:
    """Claim due deliveries (the store's ``claim``), queue their jobs in ``queue``; wait to wake."""

    def __init__(
        self,
        settings: Settings,
        store: DeliveryStore,
        queue: Queue,
        clock: Callable[[], int] = now_ms,
    ) -> None:
        self.settings = settings
        self.store = store
        self.queue = queue
        self.redis: redis.Redis = queue.connection
        self.lease_ms = store.lifetimes.lease_ms
        self.clock = clock
        self.job_prefix = str(queue.job_class.redis_job_namespace_prefix)
        self.wake_key = store.wake_key

    def sweep(self, now: int | None = None, limit: int = SWEEP_BATCH) -> int:
        """Queue an attempt for every delivery due at ``now``; return how many."""
        now = self.clock() if now is None else now
        jobs = self.store.claim(now, self.job_prefix, limit, self.queue.name, self.queue.key)
        if jobs:
            queue_jobs(self.queue, jobs, self.lease_ms)
        return len(jobs)

    def sweep_backlog(self) -> int:
        """Sweep again while a sweep queues a full batch (a backlog); return how many."""
        batch = SWEEP_BATCH
        total = n = self.sweep(limit=batch)
        while n >= batch:
            n = self.sweep(limit=batch)
            total += n
        return total

    def wait_for_wake(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds (under the socket timeout) to be woken."""
        limit = self.settings.redis_timeout_seconds / 2
        return self.redis.blpop([self.wake_key], timeout=min(timeout, limit)) is not None

    def run(self, interval: float, stop: threading.Event) -> None:
        """Queue due deliveries until ``stop`` is set: when woken, and every ``interval``."""
        while not stop.is_set():
            try:
                self.wait_for_wake(interval)
                if not stop.is_set():
                    self.sweep_backlog()
            except Exception:  # keep sweeping through a Redis blip; the worker reports it too
                log.exception("sweeping due deliveries failed")
                stop.wait(interval)  # a Redis that refuses at once: not a busy loop
