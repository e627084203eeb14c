"""The worker's view of forwarding: attempts, the sweeper and replay behind one object.

The sweeper queues an attempt for every delivery whose due time has come: new deliveries
(due at receipt: the webhook queues no job), retries, lease expiries and claims whose job
was never queued (a crash between a sweep's claim and its enqueue) are due times in one
sorted set, and the worker's sweeper thread queues whatever is due (never a second job
while one is queued), so no RQ scheduler is needed and a killed worker's delivery
resumes. The sweeper sweeps when woken (the webhook's script pushes the wake list, which
it waits on) and every sweep interval.

A worker pool's processes share Airflow's asset ids through Redis (``RedisAssetIds``):
without it each process's first delivery to a URI (and each one's again when its cache
runs out) asks Airflow for the id; with it one lookup serves the pool for the cache
period (``AirflowClient.asset_cache_seconds``).
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Iterable
from typing import Any

import redis
from rq import Queue

from fivetran_events import Settings, as_text
from fivetran_events.deliveries import DeliveryState
from fivetran_events.fivetran_api import FivetranClient
from fivetran_events.keys import asset_id_key, due_key, sweep_wake_key
from fivetran_events.timeutil import now_ms

from ..airflow_client import AirflowClient
from ..airflow_errors import AirflowError
from . import attempt as _attempt
from . import replay as _replay
from . import tables as _tables
from ._lua import CLAIM_DUE
from .attempt import AttemptResult
from .enqueue import Enqueuer, keep_delivered_ms, queue_jobs, record_ttl_ms
from .store import DeliveryStore

__all__ = ["AttemptResult", "DeliveryState", "Forwarder"]

log = logging.getLogger(__name__)

#: Deliveries the sweeper queues per pass.
SWEEP_BATCH = 500


class RedisAssetIds:
    """``airflow_client.SharedAssetIds`` in Redis: one string per URI, with an expiry."""

    def __init__(self, client: redis.Redis, prefix: str) -> None:
        self.redis = client
        self.prefix = prefix

    def get(self, uri: str) -> int | None:
        raw = self.redis.get(asset_id_key(self.prefix, uri))
        try:
            return int(raw) if raw is not None else None
        except ValueError:  # not ours to trust: look it up again
            return None

    def put(self, uri: str, asset_id: int, ttl_s: float) -> None:
        self.redis.set(asset_id_key(self.prefix, uri), str(asset_id), px=max(1, int(ttl_s * 1000)))

    def drop(self, uri: str) -> None:
        self.redis.delete(asset_id_key(self.prefix, uri))


def sweep(fw: Forwarder, now: int, limit: int = SWEEP_BATCH) -> int:
    """Queue an attempt for every delivery due at ``now``; return how many were queued.

    Two round trips: the claim script (``_lua.CLAIM_DUE``), then the claimed jobs in one
    MULTI.
    """
    claimed = [
        as_text(x)
        for x in fw.claim_script(
            keys=[due_key(fw.settings.key_prefix)],
            args=[now, now + fw.lease_ms, fw.job_prefix, limit, fw.store.key("")],
        )
    ]
    jobs = list(zip(claimed[::2], claimed[1::2], strict=True))
    if jobs:
        queue_jobs(fw.queue, jobs, fw.lease_ms)
    return len(jobs)


class Forwarder:
    """Make forwarding attempts, schedule retries, sweep due deliveries, replay.

    It has a delivery store, an enqueuer (to create deliveries), the RQ queue its sweeps
    fill, an Airflow client (None: replay and listings only, or lineage alone), an
    OpenLineage sender (None: lineage off) and a Fivetran client (for table-level
    deliveries; None: only cached table lists). The clock and the
    jitter are read at each call, so a test can swap them.
    """

    def __init__(
        self,
        settings: Settings,
        store: DeliveryStore,
        enqueuer: Enqueuer,
        queue: Queue,
        airflow: AirflowClient | None,
        *,
        fivetran: FivetranClient | None = None,
        clock: Callable[[], int] = now_ms,
        rng: Callable[[], float] = random.random,
        lineage: Any = None,
    ) -> None:
        """``lineage``: the OpenLineage sender (``forwarding/lineage.LineageSender``) that
        lineage deliveries go out with; None when lineage is off."""
        self.settings = settings
        self.store = store
        self.enqueuer = enqueuer
        self.queue = queue
        self.airflow = airflow
        self.lineage = lineage
        #: Fivetran's API, for table-level deliveries' table lists (None: cached only).
        self.fivetran = fivetran
        self.redis = store.client
        self.clock = clock
        self.rng = rng
        self.lease_ms = enqueuer.lease_ms
        self.margin_ms = int(settings.forward_unknown_outcome_seconds * 1000)
        self.keep_ms = keep_delivered_ms(settings)
        self.record_ttl_ms = record_ttl_ms(settings)
        self.claim_script = self.redis.register_script(CLAIM_DUE)
        #: The key prefix of RQ's job hashes (a claim reads the last job's status).
        self.job_prefix = str(queue.job_class.redis_job_namespace_prefix)
        self.wake_key = sweep_wake_key(settings.key_prefix)
        if airflow is not None and airflow.shared_assets is None:
            # The pool's processes find each other's asset ids (RedisAssetIds).
            airflow.shared_assets = RedisAssetIds(self.redis, settings.key_prefix)

    def warm_up(self) -> bool:
        """Fetch Airflow's version and a token now, so the first delivery does not wait.

        Called as a worker starts; a failure is only logged (the first attempt tries
        again and retries as usual). Return whether it succeeded.
        """
        if self.airflow is None:
            return False
        try:
            self.airflow.warm_up()
        except AirflowError as exc:
            log.warning("could not reach Airflow yet (the first attempt will try again): %s", exc)
            return False
        return True

    def attempt(self, did: str) -> AttemptResult:
        """Make one attempt at delivery ``did`` (attempt.py)."""
        return _attempt.attempt(self, did, _tables.expand)

    def sweep(self, now: int | None = None, limit: int = SWEEP_BATCH) -> int:
        """Queue every due delivery (``sweep``)."""
        return sweep(self, self.clock() if now is None else now, limit)

    def sweep_backlog(self) -> int:
        """Sweep again while a sweep queues a full batch (a backlog); return how many."""
        batch = SWEEP_BATCH
        total = n = self.sweep(limit=batch)
        while n >= batch:
            n = self.sweep(limit=batch)
            total += n
        return total

    def wait_for_wake(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for new due deliveries; return whether woken.

        One BLPOP of the wake list, which the webhook's script pushes (one element at
        most); its timeout stays under the client's socket timeout, which would otherwise
        end the wait with an error.
        """
        limit = self.settings.redis_timeout_seconds / 2
        return self.redis.blpop([self.wake_key], timeout=min(timeout, limit)) is not None

    def replay(self, ids: Iterable[str]) -> list[str]:
        """Replay deliveries that were not delivered (replay.py)."""
        return _replay.replay(self.enqueuer, ids, self.clock)

    def forward_since(self, since_ms: int) -> tuple[list[str], list[str], int]:
        """Forward every success that ended at or after ``since_ms`` (replay.py)."""
        return _replay.forward_since(self.enqueuer, since_ms, self.clock)

    def deliveries_of_sync(self, sync_id: str, connector_id: str | None = None) -> list[str]:
        return _replay.deliveries_of_sync(self.store, sync_id, connector_id)
