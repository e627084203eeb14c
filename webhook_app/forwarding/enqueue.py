"""The web side of forwarding: create a sync's deliveries and queue their first attempts.

Runs in the webhook's process, inside the history write's MULTI. It names the job by its
dotted path and imports no HTTP client, so the web process never loads the worker side.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import redis
from redis.client import Pipeline
from rq import Queue

from fivetran_events import Event, Settings
from fivetran_events.timeutil import now_ms
from fivetran_events.urimap import UriMap

from .record import forward_job_id
from .rq_job import JobWriter
from .store import DeliveryStore

#: The dotted path of the job; a string, so the web process never imports the worker side.
FORWARD_JOB = "webhook_app.jobs.forward_sync"
#: How long RQ keeps a finished attempt's job and result: the delivery record holds the
#: outcome, so only long enough to look at one (``rq info``) while it is fresh.
RESULT_TTL = 300
#: How long RQ keeps a failed attempt's job and traceback (a bug of ours) to read it.
FAILURE_TTL = 3 * 86_400


def lease_ms(settings: Settings) -> int:
    """Return how long one attempt may hold a delivery.

    A lease outlives the longest attempt: a token, an asset lookup, an event lookup and
    the POST, each up to a connect and a read timeout, a 401 doubling one. RQ stops a job
    at the lease's end (job_timeout), so no request of an attempt is sent after its lease.
    """
    return int(max(settings.forward_lease_seconds, 12 * settings.airflow_timeout_seconds) * 1000)


def keep_delivered_ms(settings: Settings) -> int:
    """Return how long a delivered record stays after Airflow took its event."""
    return int(settings.forward_keep_delivered_hours * 3_600_000)


def record_ttl_ms(settings: Settings) -> int:
    """Return how long a record not delivered lives after its retry window opened.

    The retry window, then the keep time, so an operator sees a given-up delivery that
    long; plus the last attempt's lease and unknown-outcome margin, so a delivery made at
    the window's end is recorded before its record could expire. The listing's indexes
    are trimmed at this age too: every record older has expired.
    """
    window = settings.forward_retry_hours * 3_600_000
    last = lease_ms(settings) + settings.forward_unknown_outcome_seconds * 1000
    return int(window + last) + keep_delivered_ms(settings)


class Enqueuer:
    """Create deliveries and queue their RQ jobs; shared by the web process and the worker."""

    def __init__(
        self,
        settings: Settings,
        client: redis.Redis,
        queue: Queue,
        uri_map: UriMap,
        *,
        clock: Callable[[], int] = now_ms,
    ) -> None:
        self.settings = settings
        self.redis = client
        self.queue = queue
        self.uri_map = uri_map
        self.store = DeliveryStore(client, settings.key_prefix, record_ttl_ms(settings) // 1000)
        self.clock = clock
        self.lease_ms = lease_ms(settings)
        # The web side's jobs, written as Queue.enqueue writes them at a fraction of the
        # cost (rq_job.py); the worker side's few re-queues go through enqueue_job.
        self.jobs = JobWriter(queue, FORWARD_JOB, "delivery", **self._job_options())

    def enqueue(self, pipe: Pipeline, event: Event, received_ms: int | None = None) -> list[str]:
        """Create the deliveries of a successful sync and queue their first attempts.

        Runs inside the history write's MULTI block: all of it commits with the history
        or none of it does.
        """
        now = self.clock() if received_ms is None else received_ms
        ids = []
        for uri in self.uri_map.uris(
            event.connector_id, event.connector_name, event.connector_type, event.group_id
        ):
            did = self.store.id_of(event, uri)
            job = forward_job_id(did)
            self.store.create(pipe, event, uri, now, now + self.lease_ms, job, did=did)
            self.jobs.write(pipe, job, did)
            ids.append(did)
        return ids

    def _job_options(self) -> dict[str, Any]:
        """What every attempt's job is queued with (``Queue.enqueue``'s options)."""
        return {
            "result_ttl": RESULT_TTL,
            "failure_ttl": FAILURE_TTL,
            "job_timeout": int(self.lease_ms / 1000),
            "describe": "forward {}",
        }

    def enqueue_job(self, did: str, pipe: Pipeline | None, job_id: str) -> None:
        """Queue an attempt at ``did`` as RQ job ``job_id`` (in ``pipe`` when given)."""
        options = self._job_options()
        description = options.pop("describe").format(did)
        self.queue.enqueue(
            FORWARD_JOB,
            kwargs={"delivery": did},
            job_id=job_id,
            pipeline=pipe,
            description=description,
            **options,
        )
