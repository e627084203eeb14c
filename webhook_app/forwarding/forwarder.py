"""The worker's view of forwarding: one object with a store, a recorder, senders, a queue.

It holds a sender per delivery kind; an attempt takes the delivery's lease (a dead worker's
lock expires) and hands it to its sender."""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from typing import Protocol

import redis
from redis.exceptions import LockError
from rq import Queue

from fivetran_events import ConfigurationError, Settings
from fivetran_events.deliveries import FINAL, Delivery, DeliveryKind, Field
from fivetran_events.fivetran_api import FivetranClient
from fivetran_events.keys import asset_id_key, delivery_lock_key
from fivetran_events.timeutil import now_ms

from .. import metrics
from ..airflow_client import AirflowClient
from ..exceptions import AirflowError
from .asset import AssetSender
from .enqueue import Enqueuer
from .partitions import Partitioner, PartitionsSender
from .recorder import AttemptOutcome, AttemptResult, Recorder
from .store import DeliveryStore
from .sweeper import SWEEP_BATCH, Sweeper
from .tables import TablesSender

log = logging.getLogger(__name__)

#: What a worker without a kind's sender says when it meets a delivery of that kind.
NO_SENDER = {
    DeliveryKind.ASSET: "forwarding needs FIVETRAN_EVENTS_AIRFLOW_URL",
    DeliveryKind.TABLES: "forwarding needs FIVETRAN_EVENTS_AIRFLOW_URL",
    DeliveryKind.PARTITIONS: "a partitions delivery, but this worker has no "
    "FIVETRAN_EVENTS_AIRFLOW_URL or FIVETRAN_EVENTS_PARTITION_GRAIN",
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
    """``airflow_client.SharedAssetIds`` in Redis: one lookup serves a worker pool."""

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
    """Make forwarding attempts and sweep due deliveries. Without ``airflow``: listings and
    replay only, or lineage alone; without ``fivetran``: cached table lists only."""

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
        self.lease_ms = store.lifetimes.lease_ms
        self.sweeper = Sweeper(settings, store, queue, clock)
        self.senders: dict[DeliveryKind, Sender] = {}
        partitioner = None
        if settings.partition_grain is not None:
            partitioner = Partitioner(self.recorder, airflow, enqueuer)
        #: With FIVETRAN_EVENTS_PARTITION_GRAIN (``replay --partitions`` uses it too).
        self.partitioner = partitioner
        if airflow is not None:
            if airflow.shared_assets is None:
                airflow.shared_assets = RedisAssetIds(self.redis, settings.key_prefix)
            self.senders[DeliveryKind.ASSET] = AssetSender(self.recorder, airflow)
            if partitioner is not None:
                self.senders[DeliveryKind.PARTITIONS] = PartitionsSender(partitioner, self.sweeper)
            self.senders[DeliveryKind.TABLES] = TablesSender(
                self.recorder, airflow, self.sweeper, fivetran, partitioner
            )
        if lineage is not None:
            self.senders[DeliveryKind.LINEAGE] = lineage(self.recorder)

    def warm_up(self) -> bool:
        """Fetch Airflow's version and a token as a worker starts (a failure is only logged)."""
        if self.airflow is None:
            return False
        try:
            self.airflow.warm_up()
        except AirflowError as exc:
            log.warning("could not reach Airflow yet (the first attempt will try again): %s", exc)
            return False
        return True

    def check_partitions(self) -> None:
        """Refuse to start with FIVETRAN_EVENTS_PARTITION_GRAIN against an Airflow before 3.2
        (naming its version); an unreachable one is logged, the first partitions delivery asks."""
        if self.partitioner is None or self.airflow is None:
            return
        try:
            refusal = self.partitioner.refused()
        except AirflowError as exc:
            log.warning("could not ask Airflow's version yet: %s", exc)
            return
        if refusal is not None:
            raise ConfigurationError(refusal)

    def attempt(self, did: str) -> AttemptResult:
        """Make one attempt at delivery ``did`` under its lease."""
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
            if d is None or d.state in FINAL or d.get(Field.EVENT_ID):
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
        return self.sweeper.sweep(now, limit)
