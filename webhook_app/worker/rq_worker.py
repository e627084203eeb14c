"""The RQ worker and the forwarding job it runs.

``ForwardingWorker`` hands its one Forwarder to each job, so its cached JWT and asset ids
live as long as the worker, with no module-level state. A job that is not ours
(``queue.refusal``) is logged and marked failed unrun, and the worker goes on.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import redis
from rq import Queue, SimpleWorker
from rq.exceptions import StopRequested
from rq.job import Job, JobStatus, get_current_job

from fivetran_events import load_settings
from fivetran_events.http import backoff
from fivetran_events.redis_url import eviction_risk

from .. import logs
from ..forwarding.forwarder import Forwarder
from ..forwarding.sweeper import FAILURE_TTL
from .build import build_forwarder
from .queue import SERIALIZER, DataJob, refusal

log = logging.getLogger(__name__)

#: Seconds between the first two looks at a Redis the work loop lost; doubled up to the max.
REDIS_RETRY_S = 1.0
REDIS_RETRY_MAX_S = 30.0


class ForwardingJob(DataJob):
    """An RQ job that carries, in memory only, the Forwarder of the worker running it."""

    #: Set by ``ForwardingWorker`` before the job runs; never saved to Redis.
    forwarder: Forwarder | None = None


class ForwardingWorker(SimpleWorker):
    job_class = ForwardingJob

    def __init__(self, forwarder: Forwarder, name: str | None = None) -> None:
        super().__init__(
            [forwarder.queue], connection=forwarder.redis, name=name, serializer=SERIALIZER
        )
        self.forwarder = forwarder
        self.stop_signalled = False

    def handle_warm_shutdown_request(self) -> None:
        self.stop_signalled = True
        super().handle_warm_shutdown_request()  # type: ignore[no-untyped-call]

    def work_until_stopped(self, burst: bool = False, with_scheduler: bool = False) -> bool:
        """Run RQ's work loop until told to stop, and again after it quit on Redis: RQ's
        loop quits on ``redis.TimeoutError`` (a Redis that stopped answering)."""
        worked = False
        while True:
            try:
                worked = self.work(burst=burst, with_scheduler=with_scheduler) or worked
            except redis.RedisError:  # its teardown could not reach Redis either
                log.warning("worker %s: left Redis without deregistering", self.name)
            if burst or self.stop_signalled:
                return worked
            log.warning("worker %s: its work loop ended; starting it again", self.name)
            try:
                self._wait_for_redis()
            except StopRequested:  # RQ's handler, on a signal while no job runs
                return worked
            if self.stop_signalled:
                return worked

    def _wait_for_redis(self) -> None:
        """Return once Redis answers (or a stop was signalled), this worker deregistered."""
        attempt = 0
        while not self.stop_signalled:
            attempt += 1
            time.sleep(backoff(attempt, REDIS_RETRY_S, REDIS_RETRY_MAX_S))
            try:
                # Else RQ refuses this name as an active worker's when it registers again.
                self.register_death()  # type: ignore[no-untyped-call]
                return
            except redis.RedisError as exc:
                log.warning("worker %s: Redis still unavailable: %s", self.name, exc)

    def execute_job(self, job: Job, queue: Queue) -> None:
        reason = refusal(job)
        if reason is not None:
            self.refuse(job, queue, reason)
            return
        if isinstance(job, ForwardingJob):
            job.forwarder = self.forwarder
        super().execute_job(job, queue)

    def refuse(self, job: Job, queue: Queue, reason: str) -> None:
        """Mark a job that is not ours failed, unrun: its callbacks, webhooks, retries and
        dependents untouched, and its record kept (as a failed attempt's) to be read."""
        log.error(
            "worker %s: refused job %s from queue %s, which did not run: %s",
            self.name,
            job.id,
            queue.name,
            reason,
        )
        with self.connection.pipeline() as pipe:
            job.set_status(JobStatus.FAILED, pipeline=pipe)
            pipe.lrem(queue.intermediate_queue_key, 1, job.id)
            queue.failed_job_registry.add(
                job, ttl=FAILURE_TTL, exc_string=f"refused: {reason}", pipeline=pipe
            )
            pipe.execute()


def check_eviction(client: redis.Redis) -> None:
    """Log an error at start when Redis may evict what it holds (``maxmemory-policy`` not
    ``noeviction``): not a refusal, a managed Redis may not let us change it. A warning when
    Redis will not say (INFO and CONFIG refused) or cannot be reached (the worker waits)."""
    try:
        risk = eviction_risk(client)
    except redis.RedisError as exc:
        log.warning(
            "cannot read Redis's maxmemory-policy (%s): make sure it is noeviction, or "
            "deliveries, leases and jobs may vanish when memory runs short",
            exc,
        )
        return
    if risk is not None:
        log.error("%s", risk)


def job_forwarder() -> Forwarder:
    job = get_current_job()
    if isinstance(job, ForwardingJob) and job.forwarder is not None:
        return job.forwarder
    return build_forwarder(load_settings())


def forward_sync(delivery: str) -> dict[str, Any]:
    """Make one attempt at a delivery; every line it logs names the delivery."""
    connector_id, sync_id, _ = [*delivery.split(":", 2), "", ""][:3]
    with logs.bound(delivery_id=delivery, connector_id=connector_id, sync_id=sync_id):
        return job_forwarder().attempt(delivery).to_dict()
