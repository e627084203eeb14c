"""The worker's view of forwarding: one object with a store, a recorder, senders, a queue.

It holds one sender per delivery kind. An attempt takes the delivery's lease (a dead
worker's lock expires) and hands the delivery to its sender.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Protocol

import redis
from redis.exceptions import LockError, WatchError
from rq import Queue

from fivetran_events import ConfigurationError, Event, HistoryReader, Settings, as_text
from fivetran_events.decision import Criterion
from fivetran_events.deliveries import FINAL, Delivery, DeliveryKind, DeliveryState, SyncRef
from fivetran_events.fivetran_api import FivetranClient
from fivetran_events.keys import (
    asset_id_key,
    deliveries_key,
    delivery_lock_key,
    due_key,
    sweep_wake_key,
    undelivered_key,
)
from fivetran_events.model import EventKind
from fivetran_events.partitions import completed_by, key_start_ms
from fivetran_events.timeutil import from_ms, iso, now_ms

from .. import metrics
from ..airflow_client import AirflowClient, AirflowError
from .asset import AssetSender
from .enqueue import Enqueuer, record_ttl_ms, target_id
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


@dataclass
class PartitionReplay:
    """What ``replay --partitions`` queued: ids created and replayed, how many were
    delivered already, and each connector's keys."""

    created: list[str] = field(default_factory=list)
    replayed: list[str] = field(default_factory=list)
    delivered: int = 0
    keys: dict[str, list[str]] = field(default_factory=dict)


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
    """Make forwarding attempts, sweep due deliveries, replay. Without ``airflow``: replay
    and listings only, or lineage alone; without ``fivetran``: cached table lists only."""

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
        partitioner = None
        if settings.partition_grain is not None:
            partitioner = Partitioner(self.recorder, airflow, enqueuer)
        #: With FIVETRAN_EVENTS_PARTITION_GRAIN (``replay --partitions`` uses it too).
        self.partitioner = partitioner
        if airflow is not None:
            if airflow.shared_assets is None:
                # The pool's processes find each other's asset ids (RedisAssetIds).
                airflow.shared_assets = RedisAssetIds(self.redis, settings.key_prefix)
            self.senders[DeliveryKind.ASSET] = AssetSender(self.recorder, airflow)
            if partitioner is not None:
                self.senders[DeliveryKind.PARTITIONS] = PartitionsSender(partitioner, self.sweeper)
            self.senders[DeliveryKind.TABLES] = TablesSender(
                self.recorder, airflow, enqueuer, self.sweeper, fivetran, partitioner
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
        """Refuse to start with FIVETRAN_EVENTS_PARTITION_GRAIN against an Airflow older than
        3.2 (ConfigurationError naming its version); an unreachable one is only logged, and
        the first partitions delivery asks again."""
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
        return self.sweeper.sweep(now, limit)

    def replay(self, ids: Iterable[str]) -> list[str]:
        """Give given-up (or stuck) deliveries a new retry window, due now (``replay``)."""
        return [did for did in ids if self._replay_one(did)]

    def _replay_one(self, did: str) -> bool:
        """Reset ``did`` unless Airflow has its event: WATCHed before it is read, so a
        worker recording the event in between aborts the write, and the read is made again."""
        key = self.store.key(did)
        prefix = self.settings.key_prefix
        with self.redis.pipeline(transaction=True) as pipe:
            while True:
                try:
                    pipe.watch(key)
                    d = self.store.get(did)
                    if d is None or d.state is DeliveryState.DELIVERED or d.get("event_id"):
                        return False
                    now = self.recorder.clock()
                    pipe.multi()
                    pipe.hset(
                        key,
                        mapping={
                            "state": DeliveryState.PENDING.value,
                            "window_ms": str(now),
                            "reason": f"replayed at {iso(now)}",
                            "updated_ms": str(now),
                        },
                    )
                    pipe.hdel(key, "next_attempt_ms")
                    pipe.zrem(undelivered_key(prefix), did)
                    # Due now; the sweeper claims it unless its last job is still queued.
                    pipe.zadd(due_key(prefix), {did: now})
                    # A new window: listed as new, and its record (and its sync's set)
                    # lives a whole window again.
                    pipe.zadd(deliveries_key(prefix), {did: now})
                    fresh = Delivery(did, {**d.fields, "window_ms": str(now)})
                    self.store.expire(pipe, fresh, record_ttl_ms(self.settings))
                    self.store.index_state(pipe, fresh, DeliveryState.PENDING)
                    # Wake a sweeper; the list keeps one element however many replays.
                    pipe.rpush(sweep_wake_key(prefix), 1)
                    pipe.ltrim(sweep_wake_key(prefix), 0, 0)
                    pipe.execute()
                    return True
                except WatchError:
                    continue

    def forward_since(self, since_ms: int) -> tuple[list[str], list[str], int]:
        """Forward every success that ended at or after ``since_ms`` (``replay --since``):
        create missing deliveries (recorded while forwarding was off), replay undelivered
        ones. Returns (created, replayed, already delivered)."""
        enq = self.enqueuer
        now = self.recorder.clock()
        created: list[str] = []
        existing: list[str] = []
        reader = HistoryReader(
            self.redis, self.settings.key_prefix, self.settings.max_sync_duration_ms
        )
        for rec in reader.connector_records():
            for c in reader.successes_since(rec.connector_id, since_ms):
                event = Event(
                    kind=EventKind.SYNC_END,
                    event="sync_end",
                    created=from_ms(c.ended_ms),
                    connector_id=rec.connector_id,
                    connector_name=rec.name,
                    connector_type=rec.type,
                    group_id=rec.group,
                    sync_id=c.sync_id,
                    status=c.status,
                )
                for target in enq.targets(event):
                    did = self.store.id_of(event, target[0])
                    if self.redis.exists(self.store.key(did)):
                        existing.append(did)
                        continue
                    created.append(enq.create(event, target, now))
        replayed = self.replay(existing)
        return created, replayed, len(existing) - len(replayed)

    def forward_partitions_since(self, since_ms: int) -> PartitionReplay:
        """Create the partitioned deliveries of every period starting at or after
        ``since_ms`` that a success since then completed, on each connector's assets
        (``replay --partitions``); replay given-up ones, leave delivered ones. One key per
        period and URI at most: each period is completed by one success, so no cap."""
        p = self.partitioner
        s = self.settings
        assert p is not None and s.partition_grain is not None
        out = PartitionReplay()
        reader = HistoryReader(self.redis, s.key_prefix, s.max_sync_duration_ms)
        criterion = Criterion(s.partition_criterion)
        existing: list[str] = []
        for rec in reader.connector_records():
            cid = rec.connector_id
            if s.asset_granularity == "table":
                continue  # a table's assets are known to the worker's expansion only
            uris = self.enqueuer.uri_map.uris(cid, rec.name, rec.type, rec.group)
            previous = reader.last_success(cid, f"({since_ms}")
            for c in reader.successes_since(cid, since_ms):
                done = completed_by(c, previous, s.partition_grain, criterion, cap=1 << 31)
                previous = c
                keys = tuple(k for k in done.keys if key_start_ms(k) >= since_ms)
                sync = SyncRef.from_record(rec, c.sync_id, c.ended_ms)
                with self.redis.pipeline(transaction=True) as pipe:
                    for k in keys:
                        ids = {target_id(sync, u, k): u for u in uris}
                        have = [i for i in ids if self.redis.exists(self.store.key(i))]
                        existing += have
                        missing = [u for i, u in ids.items() if i not in have]
                        out.created += p.create(pipe, sync, (k,), missing) if missing else []
                    pipe.execute()
                if keys:
                    out.keys.setdefault(cid, []).extend(keys)
        out.replayed = self.replay(existing)
        out.delivered = len(existing) - len(out.replayed)
        return out

    def deliveries_of_sync(self, sync_id: str, connector_id: str | None = None) -> list[str]:
        """Return the delivery ids of ``sync_id`` (of any connector unless one is named)."""
        ids = [as_text(m) for m in self.redis.zrange(deliveries_key(self.store.prefix), 0, -1)]
        return [
            i
            for i in ids
            if i.split(":")[1] == sync_id
            and (connector_id is None or i.split(":")[0] == connector_id)
        ]
