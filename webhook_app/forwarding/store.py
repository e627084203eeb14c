"""Delivery records: one Redis hash per (successful sync, dataset URI), and their indexes.

``DeliveryStore`` owns the record: every write of a ``fwd:d:*`` hash, its indexes and due time
is a named transition, one MULTI or one script (``_lua.py``). Senders decide; the store writes::

    create ──▶ PENDING ──claim──▶ (RQ job) ──begin──▶ attempt
                 ▲                                     │ mark in flight ─ POST ─ mark unknown
                 │                 ┌───────────────────┼──────────────────┐
               replay          retry at ─▶ RETRYING  delivered ─▶      give up ─▶
                 │                 (due again)       DELIVERED         UNDELIVERED | FAILED
                 └──────────────────────────────────────────────────────────┘
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import redis
from redis.client import Pipeline
from redis.exceptions import WatchError
from redis.typing import EncodableT

from fivetran_events import Settings, as_text
from fivetran_events.deliveries import (
    FINAL,
    INDEXED,
    MARKS,
    Delivery,
    DeliveryKind,
    DeliveryState,
    Field,
    Lifetimes,
    SyncRef,
)
from fivetran_events.keys import (
    deliveries_key,
    delivery_id,
    delivery_key,
    delivery_state_key,
    due_key,
    job_id_prefix,
    sweep_wake_key,
    sync_deliveries_key,
    undelivered_key,
)
from fivetran_events.timeutil import iso

from ._lua import CLAIM_DUE, CREATE, CREATE_CHUNK, SET_EXPIRY

#: Where a delivery goes: its URI (or lineage target) and the kind of sender it needs.
Target = tuple[str, DeliveryKind]


def target_id(sync: SyncRef, uri: str, partition_key: str | None = None) -> str:
    """The id of ``sync``'s delivery to ``uri``, or of its partition there: a URI holds
    no space, so "uri key" names one (sync, key, URI) apart from the plain event."""
    target = uri if partition_key is None else f"{uri} {partition_key}"
    return delivery_id(sync.connector_id, sync.sync_id, target)


class DeliveryStore:
    """Read delivery records and make their transitions (key names from fivetran_events.keys)."""

    def __init__(self, client: redis.Redis, prefix: str, lifetimes: Lifetimes) -> None:
        self.client = client
        self.prefix = prefix
        self.lifetimes = lifetimes
        #: A new record's life (seconds): its whole retry window and keep time.
        self.retention_s = lifetimes.record_ttl_ms // 1000
        self.state_keys = [self.state_key(s) for s in INDEXED]
        self.due_key = due_key(prefix)
        self.wake_key = sweep_wake_key(prefix)
        self.shared_keys = [deliveries_key(prefix), self.due_key, *self.state_keys, self.wake_key]
        self._set_expiry = client.register_script(SET_EXPIRY)
        self._create = client.register_script(CREATE)
        self._claim = client.register_script(CLAIM_DUE)

    def key(self, did: str) -> str:
        return delivery_key(self.prefix, did)

    def state_key(self, state: DeliveryState) -> str:
        return delivery_state_key(self.prefix, state.value)

    # --- Creating and claiming -------------------------------------------------------

    #: The creation as a chunk of the history's record script (``Enqueuer.lua``).
    create_chunk = CREATE_CHUNK

    def creation(
        self,
        sync: SyncRef,
        targets: Sequence[Target],
        now: int,
        trim: bool = False,
        partition_key: str | None = None,
        extras: Mapping[str, str] | None = None,
        tables: Mapping[str, str] | None = None,
    ) -> tuple[list[str], list[EncodableT]]:
        """The keys and arguments creating ``sync``'s deliveries to ``targets`` (each kept if it
        exists; ``extras``, ``tables`` by URI); ``trim``: also trim the listing and indexes."""
        keys = [sync_deliveries_key(self.prefix, sync.connector_id, sync.sync_id)]
        keys += self.shared_keys
        args: list[EncodableT] = [
            self.retention_s,
            now,
            now - self.retention_s * 1000 if trim else "",
            sync.connector_id,
            sync.sync_id,
            sync.connector_name or "",
            sync.connector_type or "",
            sync.group_id or "",
            sync.status or "",
            sync.ended_ms,
        ]
        for uri, kind in targets:
            did = target_id(sync, uri, partition_key)
            keys.append(self.key(did))
            extra = (extras or {}).get(uri, "")
            args += [did, uri, kind.value, partition_key or "", extra, (tables or {}).get(uri, "")]
        return keys, args

    def create(
        self,
        sync: SyncRef,
        targets: Sequence[Target],
        now: int,
        pipe: Pipeline | None = None,
        *,
        partition_key: str | None = None,
        extras: Mapping[str, str] | None = None,
        tables: Mapping[str, str] | None = None,
    ) -> list[str]:
        """Create ``sync``'s deliveries, due now (in ``pipe`` if given); return their ids."""
        keys, args = self.creation(sync, targets, now, False, partition_key, extras, tables)
        self._create(keys=keys, args=args, client=pipe)
        return [target_id(sync, u, partition_key) for u, _ in targets]

    def claim(
        self, now: int, job_key_prefix: str, limit: int, queue: str, queue_key: str
    ) -> list[tuple[str, str]]:
        """Claim the deliveries due at ``now`` for new RQ jobs in ``queue`` (its list:
        ``queue_key``), unless their last job waits there still: (id, job id) pairs."""
        args: list[EncodableT] = [
            now,
            now + self.lifetimes.lease_ms,
            job_key_prefix,
            limit,
            self.key(""),
            job_id_prefix(self.prefix),
            queue,
            queue_key,
        ]
        claimed = [as_text(x) for x in self._claim(keys=[self.due_key], args=args)]
        return list(zip(claimed[::2], claimed[1::2], strict=True))

    # --- An attempt ------------------------------------------------------------------

    def begin(self, d: Delivery, extra: Any, now: int) -> None:
        """Count an attempt at ``d``, keep the ``extra`` it sends (every attempt sends the
        same), and make ``d`` due at the lease's end (should the worker die)."""
        key = self.key(d.id)
        with self.client.pipeline(transaction=True) as pipe:
            pipe.hincrby(key, Field.ATTEMPTS, 1)
            pipe.hsetnx(key, Field.FIRST_ATTEMPT_MS, str(now))
            pipe.hset(
                key,
                mapping={
                    Field.EXTRA: json.dumps(extra, sort_keys=True),
                    Field.UPDATED_MS: str(now),
                },
            )
            pipe.zadd(self.due_key, {d.id: now + self.lifetimes.lease_ms})
            pipe.execute()

    def attempts(self, d: Delivery) -> int:
        return int(self.client.hget(self.key(d.id), Field.ATTEMPTS) or 1)

    def due_at(self, did: str, at: int) -> None:
        """Make ``did`` due at ``at`` (an attempt that came too early leaves it so)."""
        self.client.zadd(self.due_key, {did: at})

    def mark_in_flight(self, d: Delivery, now: int, replicas: int = 0, timeout_ms: int = 0) -> int:
        """Write the in-flight mark before a POST; with ``replicas``, WAIT until that many
        hold it (or ``timeout_ms``) and return how many did."""
        key = self.key(d.id)
        # One connection; WAIT is not allowed in MULTI, so a MULTI only without it.
        with self.client.pipeline(transaction=replicas == 0) as pipe:
            pipe.hset(key, Field.INFLIGHT_MS, str(now))
            pipe.hdel(key, Field.UNKNOWN_MS)
            if replicas == 0:
                pipe.execute()
                return 0
            pipe.wait(replicas, timeout_ms)
            return int(pipe.execute()[-1])

    def mark_unknown(self, d: Delivery, now: int) -> None:
        """The POST's answer was lost at ``now``: it may still land until the margin is over."""
        self.client.hset(self.key(d.id), Field.UNKNOWN_MS, str(now))

    def clear_marks(self, d: Delivery) -> None:
        """No POST of ``d`` is open any more (none was sent, or a lookup proved it empty)."""
        self.client.hdel(self.key(d.id), *MARKS)

    def retry_at(self, d: Delivery, at: int, reason: str, now: int) -> None:
        """Make ``d`` RETRYING, due at ``at``, saying why."""
        with self.client.pipeline(transaction=True) as pipe:
            pipe.hset(
                self.key(d.id),
                mapping={
                    Field.STATE: DeliveryState.RETRYING.value,
                    Field.REASON: reason,
                    Field.NEXT_ATTEMPT_MS: str(at),
                    Field.UPDATED_MS: str(now),
                },
            )
            pipe.zadd(self.due_key, {d.id: at})
            self._index(pipe, d, DeliveryState.RETRYING)
            pipe.execute()

    def delivered(self, d: Delivery, fields: Mapping[str, str], now: int) -> None:
        """Record ``d`` DELIVERED with what the receiver answered (``fields``)."""
        drop = [Field.REASON, Field.NEXT_ATTEMPT_MS, *MARKS]
        self._finish(d, DeliveryState.DELIVERED, fields, drop, now)

    def give_up(
        self, d: Delivery, state: DeliveryState, reason: str, now: int, keep_marks: bool = False
    ) -> None:
        """Record ``d`` given up in ``state`` (undelivered or failed); keep the marks while
        an earlier POST's outcome is open (``keep_marks``)."""
        drop = [Field.NEXT_ATTEMPT_MS] + ([] if keep_marks else list(MARKS))
        self._finish(d, state, {Field.REASON: reason}, drop, now)

    def tidy(self, did: str, d: Delivery | None, now: int) -> None:
        """An attempt met a delivery gone or final: drop it from the due set and indexes, and
        give a final record (whose life a redelivery renewed) its final expiry again."""
        with self.client.pipeline(transaction=True) as pipe:
            if d is None:
                pipe.zrem(self.due_key, did)
                for s in INDEXED:
                    pipe.zrem(self.state_key(s), did)
            else:
                pipe.zrem(self.due_key, did)
                self._index(pipe, d, d.state)
                if d.state in FINAL:
                    self._expire(pipe, d, self.lifetimes.final_ttl_ms(d.state, d, now))
            pipe.execute()

    # --- Replay ----------------------------------------------------------------------

    def replay(self, did: str, now: int) -> bool:
        """Give ``did`` a new retry window, due now, unless Airflow has its event (False); WATCHed
        before the read, so a worker recording the event in between aborts it, then reads again."""
        key = self.key(did)
        with self.client.pipeline(transaction=True) as pipe:
            while True:
                try:
                    pipe.watch(key)
                    d = self.get(did)
                    if d is None or d.state is DeliveryState.DELIVERED or d.get(Field.EVENT_ID):
                        return False
                    pipe.multi()
                    pipe.hset(
                        key,
                        mapping={
                            Field.STATE: DeliveryState.PENDING.value,
                            Field.WINDOW_MS: str(now),
                            Field.REASON: f"replayed at {iso(now)}",
                            Field.UPDATED_MS: str(now),
                        },
                    )
                    pipe.hdel(key, Field.NEXT_ATTEMPT_MS)
                    pipe.zrem(undelivered_key(self.prefix), did)
                    pipe.zadd(self.due_key, {did: now})
                    # A new window: listed as new; its record and sync's set live a window again.
                    pipe.zadd(deliveries_key(self.prefix), {did: now})
                    fresh = Delivery(did, {**d.fields, Field.WINDOW_MS: str(now)})
                    self._expire(pipe, fresh, self.lifetimes.record_ttl_ms)
                    self._index(pipe, fresh, DeliveryState.PENDING)
                    # Wake a sweeper; the list keeps one element however many replays.
                    pipe.rpush(self.wake_key, 1)
                    pipe.ltrim(self.wake_key, 0, 0)
                    pipe.execute()
                    return True
                except WatchError:
                    continue

    # --- Reading ---------------------------------------------------------------------

    def exists(self, did: str) -> bool:
        return bool(self.client.exists(self.key(did)))

    def get(self, did: str) -> Delivery | None:
        raw = self.client.hgetall(self.key(did))
        return Delivery.from_reply(did, raw) if raw else None

    def many(self, ids: Iterable[str]) -> list[Delivery]:
        ids = list(ids)
        pipe = self.client.pipeline(transaction=False)
        for did in ids:
            pipe.hgetall(self.key(did))
        return [
            Delivery.from_reply(did, raw)
            for did, raw in zip(ids, pipe.execute(), strict=True)
            if raw
        ]

    def for_syncs(self, connector_id: str, sync_ids: Iterable[str]) -> dict[str, list[Delivery]]:
        """Return each sync's deliveries, sorted by URI (one round trip per batch)."""
        sync_ids = list(dict.fromkeys(sync_ids))
        pipe = self.client.pipeline(transaction=False)
        for sid in sync_ids:
            pipe.smembers(sync_deliveries_key(self.prefix, connector_id, sid))
        members = pipe.execute()
        ids = sorted({as_text(m) for ms in members for m in ms})
        by_id = {d.id: d for d in self.many(ids)}
        out: dict[str, list[Delivery]] = {}
        for sid, ms in zip(sync_ids, members, strict=True):
            found = [by_id[as_text(m)] for m in ms if as_text(m) in by_id]
            out[sid] = sorted(found, key=lambda d: d.uri)
        return out

    def recent(
        self, limit: int = 100, state: DeliveryState | None = None, scan_limit: int = 100_000
    ) -> list[Delivery]:
        """Return the newest deliveries (of one state), newest first."""
        if state in INDEXED:
            assert state is not None
            ids = [as_text(m) for m in self.client.zrevrange(self.state_key(state), 0, limit - 1)]
            return [d for d in self.many(ids) if d.state is state]
        out: list[Delivery] = []
        start = 0
        page = max(limit, 200)
        while len(out) < limit and start < scan_limit:
            ids = [
                as_text(m)
                for m in self.client.zrevrange(deliveries_key(self.prefix), start, start + page - 1)
            ]
            if not ids:
                break
            out += [d for d in self.many(ids) if state is None or d.state is state]
            start += page
        return out[:limit]

    def listed(self) -> list[str]:
        """Every listed delivery id, oldest first."""
        return [as_text(m) for m in self.client.zrange(deliveries_key(self.prefix), 0, -1)]

    def given_up(self) -> list[str]:
        return [as_text(m) for m in self.client.zrange(undelivered_key(self.prefix), 0, -1)]

    # --- Within a transition's MULTI -------------------------------------------------

    def _index(self, pipe: Pipeline, d: Delivery, state: DeliveryState) -> None:
        """Queue the index writes of ``d`` entering ``state``, scored by when its retry
        window opened: creation trims the indexes by that."""
        for s in INDEXED:
            if s is not state:
                pipe.zrem(self.state_key(s), d.id)
        if state in INDEXED:
            pipe.zadd(self.state_key(state), {d.id: d.window_ms})

    def _expire(self, pipe: Pipeline, d: Delivery, ttl_ms: int) -> None:
        """Queue ``d``'s record to expire in ``ttl_ms``, its sync's set with its last record
        (the set is read now; the expiries are written in the caller's MULTI)."""
        f = d.fields
        sync_key = sync_deliveries_key(self.prefix, f[Field.CONNECTOR_ID], f[Field.SYNC_ID])
        ids = sorted({as_text(m) for m in self.client.smembers(sync_key)} | {d.id})
        pipe.pexpire(self.key(d.id), max(1, ttl_ms))
        self._set_expiry(keys=[sync_key, *(self.key(i) for i in ids)], client=pipe)

    def _finish(
        self,
        d: Delivery,
        state: DeliveryState,
        fields: Mapping[str, str],
        drop: list[str],
        now: int,
    ) -> None:
        """Record a final ``state`` (record, due set, given-up set, index, expiry) in one MULTI."""
        key = self.key(d.id)
        given_up = undelivered_key(self.prefix)
        with self.client.pipeline(transaction=True) as pipe:
            mapping = {Field.STATE: state.value, **fields, Field.UPDATED_MS: str(now)}
            pipe.hset(key, mapping=mapping)  # type: ignore[arg-type]
            pipe.hdel(key, *drop)
            pipe.zrem(self.due_key, d.id)
            if state is DeliveryState.DELIVERED:
                pipe.zrem(given_up, d.id)
            else:
                pipe.zadd(given_up, {d.id: now})
                cutoff = now - self.lifetimes.record_ttl_ms
                pipe.zremrangebyscore(given_up, "-inf", f"({cutoff}")
            self._expire(pipe, d, self.lifetimes.final_ttl_ms(state, d, now))
            self._index(pipe, d, state)
            pipe.execute()


def delivery_store(settings: Settings, client: redis.Redis) -> DeliveryStore:
    return DeliveryStore(client, settings.key_prefix, Lifetimes.from_settings(settings))


def attach_forwarding(
    store: DeliveryStore, connector_id: str, rows: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """Add each successful sync's forwarding state per URI to the syncs listing's rows."""
    wanted = [r["sync_id"] for r in rows if r.get("status") == "SUCCESSFUL"]
    found = store.for_syncs(connector_id, wanted) if wanted else {}
    for r in rows:
        if r.get("status") == "SUCCESSFUL":
            r["forwarding"] = [
                {
                    k: v
                    for k, v in d.to_dict().items()
                    if k not in ("connector_id", "sync_id", "delivery_id")
                }
                for d in found.get(r["sync_id"], [])
            ]
    return rows
