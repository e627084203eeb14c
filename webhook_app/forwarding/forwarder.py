"""The worker's view of forwarding: one object with a store, a recorder, senders, a queue.

A delivery's record carries its kind (``DeliveryKind``), and the forwarder holds one
sender per kind: ``asset.AssetSender`` (Airflow's asset events),
``tables.TablesSender`` (a sync's table-level delivery, expanded into asset deliveries)
and ``lineage.LineageSender`` (OpenLineage run events). An attempt takes the delivery's
lock (a lease: a dead worker's lock expires), tidies a delivery that is gone or final,
waits (not due) until the sender's ``not_before``, and hands the delivery to its sender,
which records what happened through the ``Recorder``. The sweeper (sweeper.py) queues
the attempts.

A worker pool's processes share Airflow's asset ids through Redis (``RedisAssetIds``):
without it each process's first delivery to a URI (and each one's again when its cache
runs out) asks Airflow for the id; with it one lookup serves the pool for the cache
period (``AirflowClient.asset_cache_seconds``).
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Iterable
from typing import Protocol

import redis
from redis.exceptions import LockError
from rq import Queue

from fivetran_events import Settings
from fivetran_events.deliveries import FINAL, Delivery, DeliveryKind
from fivetran_events.fivetran_api import FivetranClient
from fivetran_events.keys import asset_id_key, delivery_lock_key
from fivetran_events.timeutil import now_ms

from .. import metrics
from ..airflow_client import AirflowClient
from ..airflow_errors import AirflowError
from . import replay as _replay
from .asset import AssetSender
from .enqueue import Enqueuer
from .recorder import AttemptOutcome, AttemptResult, Recorder
from .store import DeliveryStore
from .sweeper import SWEEP_BATCH, Sweeper
from .tables import TablesSender

log = logging.getLogger(__name__)

#: What a worker without a kind's sender says when it meets a delivery of that kind.
NO_SENDER = {
    DeliveryKind.ASSET: "forwarding needs FIVETRAN_EVENTS_AIRFLOW_URL",
    DeliveryKind.TABLES: "forwarding needs FIVETRAN_EVENTS_AIRFLOW_URL",
    DeliveryKind.LINEAGE: "an OpenLineage delivery, but this worker sends no lineage: set "
    "OPENLINEAGE_URL (or FIVETRAN_EVENTS_LINEAGE=on with an openlineage.yml)",
}


class Sender(Protocol):
    """Attempts the deliveries of one kind, recording the outcome with a ``Recorder``."""

    def not_before(self, d: Delivery) -> int | None:
        """The earliest time ``d`` may be attempted (a backoff; None: now)."""

    def send(self, d: Delivery) -> AttemptResult:
        """Make ``d``'s attempt (the forwarder holds its lease); return what happened."""


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


class Forwarder:
    """Make forwarding attempts, sweep due deliveries, replay.

    It has a delivery store, a recorder of state changes, an enqueuer (to create
    deliveries), the RQ queue its sweeper fills, and a sender per kind it can attempt:
    asset and table-level deliveries with an Airflow client (None: replay and listings
    only, or lineage alone; ``fivetran``: where table lists are refreshed, None: cached
    only), lineage ones with what ``lineage`` builds from the recorder (None: lineage
    off). The recorder's clock and jitter and the sweeper's clock are read at each call,
    so a test can swap them.
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
        lineage: Callable[[Recorder], Sender] | None = None,
    ) -> None:
        self.settings = settings
        self.store = store
        self.enqueuer = enqueuer
        self.queue = queue
        self.airflow = airflow
        self.fivetran = fivetran
        self.redis = store.client
        self.recorder = Recorder(settings, store, clock, rng)
        self.lease_ms = self.recorder.lease_ms
        self.sweeper = Sweeper(settings, queue, self.lease_ms, clock)
        self.senders: dict[DeliveryKind, Sender] = {}
        if airflow is not None:
            if airflow.shared_assets is None:
                # The pool's processes find each other's asset ids (RedisAssetIds).
                airflow.shared_assets = RedisAssetIds(self.redis, settings.key_prefix)
            self.senders[DeliveryKind.ASSET] = AssetSender(self.recorder, airflow)
            self.senders[DeliveryKind.TABLES] = TablesSender(
                self.recorder, airflow, enqueuer, self.sweeper, fivetran
            )
        if lineage is not None:
            self.senders[DeliveryKind.LINEAGE] = lineage(self.recorder)

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
        """Make one attempt at delivery ``did`` under its lease; return what happened."""
        lock = self.redis.lock(
            delivery_lock_key(self.settings.key_prefix, did),
            timeout=self.lease_ms / 1000,
            blocking=False,
        )
        if not lock.acquire():
            metrics.FORWARD_OUTCOMES.labels(outcome="busy").inc()
            return AttemptResult(did, AttemptOutcome.BUSY)
        started = time.perf_counter()
        try:
            d = self.store.get(did)
            if d is None or d.state in FINAL or d.get("event_id"):
                return self.recorder.already_done(did, d)
            sender = self.senders.get(d.kind)
            if sender is None:
                raise RuntimeError(NO_SENDER[d.kind])
            wait_until = sender.not_before(d)
            if wait_until is not None and self.recorder.clock() < wait_until:
                return self.recorder.not_due(d, wait_until)
            return sender.send(d)
        finally:
            metrics.FORWARD_REQUEST_SECONDS.observe(time.perf_counter() - started)
            try:
                lock.release()
            except LockError:  # the lease ran out; whoever holds it now goes on
                log.warning("delivery %s: lease expired during the attempt", did)

    def sweep(self, now: int | None = None, limit: int = SWEEP_BATCH) -> int:
        """Queue every due delivery (``Sweeper.sweep``)."""
        return self.sweeper.sweep(now, limit)

    def replay(self, ids: Iterable[str]) -> list[str]:
        """Replay deliveries that were not delivered (replay.py)."""
        return _replay.replay(self.enqueuer, ids, self.recorder.clock)

    def forward_since(self, since_ms: int) -> tuple[list[str], list[str], int]:
        """Forward every success that ended at or after ``since_ms`` (replay.py)."""
        return _replay.forward_since(self.enqueuer, since_ms, self.recorder.clock)

    def deliveries_of_sync(self, sync_id: str, connector_id: str | None = None) -> list[str]:
        return _replay.deliveries_of_sync(self.store, sync_id, connector_id)
