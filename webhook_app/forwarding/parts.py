"""What the worker side of forwarding works with: the web side's parts plus Airflow."""

from __future__ import annotations

import random
from collections.abc import Callable

import redis
from rq import Queue

from fivetran_events import Settings
from fivetran_events.timeutil import now_ms
from fivetran_events.urimap import UriMap

from ..airflow_client import AirflowClient
from .enqueue import Enqueuer, keep_delivered_ms, record_ttl_ms


class WorkerParts(Enqueuer):
    """The Redis client, queue, store, Airflow client, clock and jitter of one worker.

    The modules of the worker side (``attempt``, ``sweep``, ``replay``) are functions
    of these parts; ``worker.Forwarder`` gathers them behind methods. The clock and the
    jitter are read at each call, so a test can swap them.
    """

    def __init__(
        self,
        settings: Settings,
        client: redis.Redis,
        airflow: AirflowClient | None,
        queue: Queue,
        uri_map: UriMap,
        *,
        clock: Callable[[], int] = now_ms,
        rng: Callable[[], float] = random.random,
    ) -> None:
        super().__init__(settings, client, queue, uri_map, clock=clock)
        self.airflow = airflow
        self.rng = rng
        self.margin_ms = int(settings.forward_unknown_outcome_seconds * 1000)
        self.keep_ms = keep_delivered_ms(settings)
        self.record_ttl_ms = record_ttl_ms(settings)

    @property
    def job_prefix(self) -> str:
        """The key prefix of RQ's job hashes (the sweeper reads a queued job's status)."""
        return str(self.queue.job_class.redis_job_namespace_prefix)
