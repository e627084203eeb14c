"""Airflow 3.3+ listens to the history itself: ``FivetranSyncEventTrigger``.

Use it in an ``AssetWatcher``::

    Asset(uri, watchers=[AssetWatcher(name="pg", trigger=FivetranSyncEventTrigger(
        connector_id="my_connector"))])

and the triggerer turns every successful sync recorded for the connector into one asset
event whose payload is the ``extra`` the REST forwarder posts (``fivetran_events.
asset_extra``), with no Airflow user, password or REST call.

How it keeps its place (docs/architecture.md, "The watcher", says why this way):

- The position is the last success turned into an event, ``(ended_ms, sync_id)``, kept
  in Airflow's asset state store. A trigger without one starts at ``start`` (default
  ``"now"``: a watcher added today does not replay years of history) and stores that at
  once, so syncs recorded while the triggerer was down are still after it.
- Every trigger of a triggerer that reads one Redis shares one poll (``shared_stream_key``)
  in the shared stream's ack mode: one ``PSUBSCRIBE`` on the history's change channels
  wakes the triggers of the connector named in the channel, and a tick every
  ``poll_interval`` seconds (and on every (re)connect) wakes them all. A woken trigger
  reads the successes after its position from the durable ``ok`` set, not from the
  message, so a lost message or an outage costs at most one tick.
- A trigger advances its stored position only in ``advance()``, which Airflow calls once
  the trigger events derived from a wake were persisted in its database. A triggerer
  killed before that sends them again after it restarts; one killed after, never.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any

import redis
import redis.asyncio as aioredis
from airflow.triggers.base import BaseEventTrigger, TriggerEvent
from airflow.triggers.shared_stream import (
    AdvanceItem,
    AdvanceOutcome,
    SharedStreamProducer,
)

from fivetran_events.asset_extra import SyncRef, aextra_for
from fivetran_events.history import decode_completion
from fivetran_events.keys import ConnectorKeys, changes_pattern, connectors_key
from fivetran_events.timeutil import now_ms, parse_iso, to_ms

from .hooks import DEFAULT_CONN_ID, FivetranEventsRedisHook

log = logging.getLogger(__name__)

#: Seconds between ticks that make every watcher re-read the history (a lost message).
DEFAULT_POLL_INTERVAL = 30.0
#: Seconds between attempts to re-subscribe after the poll lost Redis.
RECONNECT_DELAY = 1.0
#: Successes read per page; a wake keeps reading pages until it has caught up.
PAGE = 100
#: The asset state store key of a connector's position.
STATE_KEY = "fivetran_events.position:{connector_id}"

Position = tuple[int, str]


@dataclass(eq=False)
class Wake:
    """One raw event of the shared stream: "re-read the history" for one connector or all.

    It is also the broker payload handed back to ``advance()``: the watchers woken by it
    attach the position they reached, to be stored once Airflow persisted their events.
    """

    connector_id: str | None  # None: every watcher re-reads (a tick, a reconnect)
    client: Any  # the poll's redis.asyncio client; watchers read through its pool
    prefix: str
    commits: list[Callable[[], Awaitable[None]]] = field(default_factory=list)


class HistoryWakeProducer(SharedStreamProducer):
    """The shared poll: change messages and ticks in, wakes out; positions stored on advance."""

    def __init__(self, redis_conn_id: str, poll_interval: float) -> None:
        self.redis_conn_id = redis_conn_id
        self.poll_interval = poll_interval
        self.client: Any = None

    async def open_stream(self) -> AsyncIterator[tuple[Any, Any]]:
        cfg = await FivetranEventsRedisHook(self.redis_conn_id).aconfig()
        self.client = aioredis.Redis.from_url(cfg.url, **cfg.to_redis_kwargs())
        pattern = changes_pattern(cfg.key_prefix)
        channel_prefix = pattern[:-1]

        def wake(connector_id: str | None) -> tuple[Wake, Wake]:
            w = Wake(connector_id, self.client, cfg.key_prefix)
            return w, w

        while True:
            pubsub = self.client.pubsub(ignore_subscribe_messages=True)
            try:
                await pubsub.psubscribe(pattern)
                # What was published while nobody listened is lost: everyone re-reads.
                yield wake(None)
                next_tick = time.monotonic() + self.poll_interval
                while True:
                    wait = max(0.0, next_tick - time.monotonic())
                    msg = await pubsub.get_message(timeout=min(wait, 5.0))
                    if msg is not None and msg.get("type") == "pmessage":
                        channel = msg["channel"]
                        if isinstance(channel, bytes):
                            channel = channel.decode()
                        yield wake(channel[len(channel_prefix) :])
                    if time.monotonic() >= next_tick:
                        yield wake(None)
                        next_tick = time.monotonic() + self.poll_interval
            except (redis.RedisError, OSError) as exc:
                # Never raise: that would fail every watcher of the triggerer. The history
                # is durable, so after the reconnect's wake nothing is missed.
                log.warning("history watcher lost Redis (%s); re-subscribing", exc)
                await asyncio.sleep(RECONNECT_DELAY)
            finally:
                with contextlib.suppress(Exception):
                    await pubsub.aclose()

    async def advance(self, batch: Sequence[AdvanceItem]) -> None:
        for item in batch:
            wake: Wake = item.broker_payload
            if item.outcome.failed or item.outcome.rejected:
                # Which watcher failed is not told: store nobody's position for this wake
                # (a later wake's store covers the others; at worst an event comes twice).
                log.warning("a wake was not resolved by every watcher: %s", item.outcome)
                continue
            for commit in wake.commits:
                try:
                    await commit()
                except Exception:  # a later wake stores a later position anyway
                    log.exception("could not store a watcher's position")

    async def aclose(self) -> None:
        if self.client is not None:
            await self.client.aclose()


class FivetranSyncEventTrigger(BaseEventTrigger):
    """Turn each successful sync recorded for ``connector_id`` into one asset event.

    ``start``: where a watcher without a stored position begins, ``"now"`` or an ISO
    time (to replay the history since then, once). ``poll_interval``: seconds between
    re-reads when no change message arrives (a lost message costs at most that).
    """

    def __init__(
        self,
        connector_id: str,
        *,
        redis_conn_id: str = DEFAULT_CONN_ID,
        start: str = "now",
        poll_interval: float = DEFAULT_POLL_INTERVAL,
    ) -> None:
        super().__init__()
        if start != "now":
            parse_iso(start)  # refuse a bad start when the DAG is parsed, not later
        self.connector_id = connector_id
        self.redis_conn_id = redis_conn_id
        self.start = start
        self.poll_interval = float(poll_interval)
        self._position: Position | None = None

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            "airflow_plugin.event_triggers.FivetranSyncEventTrigger",
            {
                "connector_id": self.connector_id,
                "redis_conn_id": self.redis_conn_id,
                "start": self.start,
                "poll_interval": self.poll_interval,
            },
        )

    def shared_stream_key(self) -> Hashable | None:
        return ("fivetran_events.history", self.redis_conn_id, self.poll_interval)

    @classmethod
    def create_shared_stream_producer(cls, kwargs: dict[str, Any]) -> SharedStreamProducer:
        return HistoryWakeProducer(
            kwargs.get("redis_conn_id", DEFAULT_CONN_ID),
            float(kwargs.get("poll_interval", DEFAULT_POLL_INTERVAL)),
        )

    async def filter_shared_stream(
        self, shared_stream: AsyncIterator[Any]
    ) -> AsyncIterator[TriggerEvent]:
        async for wake in shared_stream:
            if wake.connector_id not in (None, self.connector_id):
                continue
            try:
                if self._position is None:
                    self._position = await self._load_position()
                found = await self._successes_after(wake, self._position)
            except (redis.RedisError, OSError) as exc:
                log.warning("watcher of %s cannot read the history: %s", self.connector_id, exc)
                continue  # the reconnect's wake (or the next tick) reads again
            for position, extra in found:
                yield TriggerEvent(extra)
                self._position = position
            if found:
                reached = self._position
                wake.commits.append(lambda p=reached: self._store(p))

    async def run(self) -> AsyncIterator[TriggerEvent]:
        """Watch without a shared stream (outside the triggerer's manager, e.g. a test).

        Positions are stored as soon as the events left the trigger, not once persisted.
        """
        producer = self.create_shared_stream_producer(self.serialize()[1])

        async def wakes() -> AsyncIterator[Any]:
            async for raw, payload in producer.open_stream():
                yield raw
                await producer.advance([AdvanceItem(payload, AdvanceOutcome(acked=1, failed=0))])

        try:
            async for event in self.filter_shared_stream(wakes()):
                yield event
        finally:
            await producer.aclose()

    # --- the position ------------------------------------------------------------------

    def _accessors(self) -> list[Any]:
        store = self.asset_state_store
        if store is None:
            return []
        try:
            store._single_accessor()
            return [store]
        except ValueError:  # one trigger watching several assets: keep it in each
            return [*store._by_name.values(), *store._by_uri.values()]

    async def _load_position(self) -> Position:
        key = STATE_KEY.format(connector_id=self.connector_id)
        stored = [await a.aget(key) for a in self._accessors()]
        found = [(int(v["ended_ms"]), str(v["sync_id"])) for v in stored if isinstance(v, dict)]
        if found:
            return min(found)
        # No position yet: begin at ``start`` and keep it at once, so that a restart
        # still begins there and not at a later "now".
        position = (now_ms() if self.start == "now" else to_ms(parse_iso(self.start)), "")
        await self._store(position)
        return position

    async def _store(self, position: Position) -> None:
        key = STATE_KEY.format(connector_id=self.connector_id)
        value = {"ended_ms": position[0], "sync_id": position[1]}
        for accessor in self._accessors():
            await accessor.aset(key, value)

    async def _successes_after(
        self, wake: Wake, position: Position
    ) -> list[tuple[Position, dict[str, Any]]]:
        """Read every success after ``position`` in (end, sync id) order, with its extra."""
        keys = ConnectorKeys(wake.prefix, self.connector_id)
        out: list[tuple[Position, dict[str, Any]]] = []
        meta: dict[str, Any] | None = None
        while True:
            rows = await wake.client.zrangebyscore(
                keys.ok, position[0], "+inf", start=0, num=PAGE, withscores=True
            )
            fresh = sorted(
                {
                    (c.ended_ms, c.sync_id)
                    for c in (decode_completion(m, s) for m, s in rows)
                    if (c.ended_ms, c.sync_id) > position
                }
            )
            if not fresh:
                return out
            if meta is None:
                raw = await wake.client.hget(connectors_key(wake.prefix), self.connector_id)
                meta = json.loads(raw) if raw else {}
            for ended, sync_id in fresh:
                ref = SyncRef.from_meta(self.connector_id, sync_id, ended, meta)
                out.append(((ended, sync_id), await aextra_for(wake.client, wake.prefix, ref)))
            position = fresh[-1]
            if len(rows) < PAGE:
                return out
