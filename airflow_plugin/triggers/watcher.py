"""Airflow 3.3+ listens to the history itself: ``FivetranSyncWatcherTrigger``.

In an ``AssetWatcher``::

    Asset(uri, watchers=[AssetWatcher(name="pg", trigger=FivetranSyncWatcherTrigger(
        connector_id="my_connector"))])

the triggerer turns every successful sync recorded for the connector into one asset event
whose payload is the ``extra`` the REST forwarder posts, with no REST call. docs/internals.md,
"The watcher (Airflow 3.3+)", gives the design and where it can send an event twice or
skip one.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any

import redis
from airflow import __version__ as AIRFLOW_VERSION

try:
    from airflow.triggers.base import BaseEventTrigger, TriggerEvent
    from airflow.triggers.shared_stream import (
        AdvanceItem,
        AdvanceOutcome,
        SharedStreamProducer,
    )
except ImportError as exc:  # asset watchers' shared streams came with Airflow 3.3
    raise ImportError(
        f"FivetranSyncWatcherTrigger needs Airflow 3.3+ (this is {AIRFLOW_VERSION}); "
        "use REST forwarding instead (docs/compatibility.md)"
    ) from exc

from fivetran_events.deliveries import SyncRef, aextra_for
from fivetran_events.history import AsyncHistoryReader, ConnectorRecord
from fivetran_events.redis_url import async_client_from_url
from fivetran_events.timeutil import now_ms, parse_iso, to_ms

from ..hooks import DEFAULT_CONN_ID, FivetranEventsRedisHook
from ._wakeups import changes

log = logging.getLogger(__name__)

#: Seconds between ticks that make every watcher re-read the history (a lost message).
DEFAULT_POLL_INTERVAL = 30.0
#: Successes read per page; a wake keeps reading pages until it has caught up.
PAGE = 100
#: The asset state store key of a connector's watcher state (named for the position).
STATE_KEY = "fivetran_events.position:{connector_id}"
#: Seconds before the position in which a late success is still sent: Fivetran retries
#: a delivery for up to 24 hours, plus an hour for clock skew and the webhook's own delay.
DEFAULT_LOOKBACK = 25 * 3600.0

Position = tuple[int, str]


@dataclass
class WatchState:
    """What a watcher has handled: each sync id in the window -> the newest end seen."""

    position: Position
    handled: dict[str, int]

    def note(self, ended_ms: int, sync_id: str) -> None:
        self.handled[sync_id] = max(ended_ms, self.handled.get(sync_id, ended_ms))
        self.position = max(self.position, (ended_ms, sync_id))

    def pruned(self, lookback_ms: int) -> WatchState:
        """Return a copy without the sync ids that ended before the window."""
        floor = self.position[0] - lookback_ms
        return WatchState(self.position, {s: e for s, e in self.handled.items() if e >= floor})

    def to_json(self) -> dict[str, Any]:
        return {
            "ended_ms": self.position[0],
            "sync_id": self.position[1],
            "handled": sorted([s, e] for s, e in self.handled.items()),
        }

    @classmethod
    def from_json(cls, value: dict[str, Any]) -> tuple[WatchState, bool]:
        """Return a stored state, and whether it has ``handled`` (older ones did not)."""
        position = (int(value["ended_ms"]), str(value["sync_id"]))
        handled = value.get("handled")
        return cls(position, {str(s): int(e) for s, e in handled or ()}), handled is not None


@dataclass(eq=False)
class Wake:
    """One event of the shared stream, "re-read the history", and its broker payload: each
    watcher that sent events for it attaches a ``settle(persisted)`` for ``advance()``."""

    connector_id: str | None  # None: every watcher re-reads (a tick, a reconnect)
    client: Any  # the poll's redis.asyncio client; watchers read through its pool
    prefix: str
    settles: list[Callable[[bool], Awaitable[None]]] = field(default_factory=list)

    @property
    def reader(self) -> AsyncHistoryReader:
        # A watcher asks for no running sync: no maximum sync duration.
        return AsyncHistoryReader(self.client, self.prefix, max_sync_duration_ms=0)


class HistoryWakeProducer(SharedStreamProducer):
    """The shared poll: change messages and ticks in, wakes out; watchers settled on advance."""

    def __init__(self, redis_conn_id: str, poll_interval: float) -> None:
        self.redis_conn_id = redis_conn_id
        self.poll_interval = poll_interval
        self.client: Any = None

    async def open_stream(self) -> AsyncIterator[tuple[Any, Any]]:
        cfg = await FivetranEventsRedisHook(self.redis_conn_id).aconfig()
        self.client = async_client_from_url(cfg.url, **cfg.to_redis_kwargs())
        async for change in changes(self.client, cfg.key_prefix, tick=self.poll_interval):
            if change.reason == "lost":
                # Never raise: that would fail every watcher of the triggerer. The history
                # is durable, so after the re-subscribe's wake nothing is missed.
                log.warning("history watcher lost Redis (%s); re-subscribing", change.error)
                continue
            # A message wakes its connector's watchers; a (re)subscribe or a tick, all.
            wake = Wake(change.connector_id, self.client, cfg.key_prefix)
            yield wake, wake

    async def advance(self, batch: Sequence[AdvanceItem]) -> None:
        for item in batch:
            wake: Wake = item.broker_payload
            # Which watcher failed is not told: every watcher that sent events for the
            # wake sends them again (Airflow's contract for a failed event: redeliver).
            persisted = not (item.outcome.failed or item.outcome.rejected)
            if not persisted:
                log.warning("a wake was not resolved by every watcher: %s", item.outcome)
            for settle in wake.settles:
                try:
                    await settle(persisted)
                except Exception:  # a later wake stores a later state anyway
                    log.exception("could not store a watcher's state")

    async def aclose(self) -> None:
        if self.client is not None:
            await self.client.aclose()


class FivetranSyncWatcherTrigger(BaseEventTrigger):
    """Turn each successful sync recorded for ``connector_id`` into one asset event.

    ``start``: where a watcher without a stored state begins, ``"now"`` or an ISO time.
    ``lookback``: seconds before the newest handled success in which a late one is sent.
    """

    def __init__(
        self,
        connector_id: str,
        *,
        redis_conn_id: str = DEFAULT_CONN_ID,
        start: str = "now",
        poll_interval: float = DEFAULT_POLL_INTERVAL,
        lookback: float = DEFAULT_LOOKBACK,
    ) -> None:
        super().__init__()  # type: ignore[no-untyped-call]  # BaseTrigger.__init__ is untyped
        if start != "now":
            parse_iso(start)  # refuse a bad start when the DAG is parsed, not later
        if not lookback >= 0:
            raise ValueError(f"lookback must be a number of seconds >= 0, got {lookback!r}")
        self.connector_id = connector_id
        self.redis_conn_id = redis_conn_id
        self.start = start
        self.poll_interval = float(poll_interval)
        self.lookback = float(lookback)
        #: What Airflow confirmed (and what was there when the watcher started): the state
        #: stored. Changed only between awaits, so a settle and a wake never interleave.
        self._state: WatchState | None = None
        #: Sent, not confirmed yet: sync id -> end. Not sent again, not stored.
        self._in_flight: dict[str, int] = {}
        #: In flight in a wake Airflow reported failed: sent again only from the next wake
        #: this watcher pulls. A watcher Airflow force-failed pulls its failure instead,
        #: so only its restart (reading the stored state) sends them, never both.
        self._failed: set[str] = set()

    @property
    def _lookback_ms(self) -> int:
        return int(self.lookback * 1000)

    def serialize(self) -> tuple[str, dict[str, Any]]:
        names = ("connector_id", "redis_conn_id", "start", "poll_interval", "lookback")
        return (
            "airflow_plugin.triggers.watcher.FivetranSyncWatcherTrigger",
            {n: getattr(self, n) for n in names},
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
            for sync_id in self._failed:
                self._in_flight.pop(sync_id, None)
            self._failed.clear()
            if wake.connector_id not in (None, self.connector_id):
                continue
            try:
                if self._state is None:
                    self._state = await self._load_state(wake)
                found = await self._unhandled(wake)
            except (redis.RedisError, OSError) as exc:
                log.warning("watcher of %s cannot read the history: %s", self.connector_id, exc)
                continue  # the reconnect's wake (or the next tick) reads again
            sent: list[Position] = []
            for (ended, sync_id), extra in found:
                yield TriggerEvent(extra)
                self._in_flight[sync_id] = ended
                sent.append((ended, sync_id))
            if sent:
                wake.settles.append(lambda persisted, s=tuple(sent): self._settle(s, persisted))

    async def _settle(self, sent: Sequence[Position], persisted: bool) -> None:
        """Store the events of one wake as handled, or send them again if Airflow did not
        confirm them (from the next wake: this one may still be read by a failed watcher)."""
        if not persisted:
            log.warning(
                "watcher of %s: Airflow did not confirm %d event(s); sending them again",
                self.connector_id,
                len(sent),
            )
            self._failed.update(sync_id for _, sync_id in sent)
            return
        for _, sync_id in sent:
            self._in_flight.pop(sync_id, None)
        assert self._state is not None  # loaded before anything was sent
        for ended, sync_id in sent:
            self._state.note(ended, sync_id)
        self._state = self._state.pruned(self._lookback_ms)
        await self._store(self._state)

    async def run(self) -> AsyncIterator[TriggerEvent]:
        """Watch without a shared stream (a test); events count as persisted once sent."""
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

    def _accessors(self) -> list[Any]:
        store = self.asset_state_store
        if store is None:
            return []
        try:
            store._single_accessor()
            return [store]
        except ValueError:  # one trigger watching several assets: keep it in each
            return [*store._by_name.values(), *store._by_uri.values()]

    async def _load_state(self, wake: Wake) -> WatchState:
        key = STATE_KEY.format(connector_id=self.connector_id)
        stored = [await a.aget(key) for a in self._accessors()]
        found = [WatchState.from_json(v) for v in stored if isinstance(v, dict)]
        if found:
            # Several assets: resume from the least advanced (at worst an event twice).
            state, complete = min(found, key=lambda f: f[0].position)
            if complete:
                return state
        else:
            start = now_ms() if self.start == "now" else to_ms(parse_iso(self.start))
            state = WatchState((start, ""), {})
        # No state yet, or a position stored before the handled set existed: what is
        # recorded up to the position now counts as handled (it was sent, or ended before
        # the watcher began), and that is kept at once, so a restart begins here too.
        async for ended, sync_id in self._window(wake, state.position[0] - self._lookback_ms):
            if (ended, sync_id) <= state.position:
                state.note(ended, sync_id)
        await self._store(state)
        return state

    async def _store(self, state: WatchState) -> None:
        key = STATE_KEY.format(connector_id=self.connector_id)
        value = state.to_json()
        for accessor in self._accessors():
            await accessor.aset(key, value)

    async def _window(self, wake: Wake, floor_ms: int) -> AsyncIterator[Position]:
        """Yield every success that ended at or after ``floor_ms``, a page at a time (a
        success recorded meanwhile shifts a row into the next page, never out of it)."""
        reader, offset = wake.reader, 0
        while True:
            rows = await reader.successes_page(self.connector_id, floor_ms, offset, PAGE)
            for c in rows:
                yield c.ended_ms, c.sync_id
            if len(rows) < PAGE:
                return
            offset += PAGE

    async def _unhandled(self, wake: Wake) -> list[tuple[Position, dict[str, Any]]]:
        """Read the successes of the window neither handled nor in flight, oldest first.

        A repeat of an id in flight waits for a later wake: noting it now would mark the
        id handled before Airflow confirmed it.
        """
        assert self._state is not None
        floor = self._state.position[0] - self._lookback_ms
        rows = sorted({r async for r in self._window(wake, floor)})
        # Decide with no await from here to the pruning: a settle moves sync ids from in
        # flight to the state between awaits, never in the middle of this.
        state = self._state
        chosen: dict[str, int] = {}
        for ended, sync_id in rows:
            if sync_id in state.handled:
                state.note(ended, sync_id)
            elif sync_id not in self._in_flight and sync_id not in chosen:
                chosen[sync_id] = ended
        self._state = state.pruned(self._lookback_ms)
        out: list[tuple[Position, dict[str, Any]]] = []
        record: ConnectorRecord | None = None
        for sync_id, ended in chosen.items():
            if record is None:
                record = await wake.reader.connector(self.connector_id) or ConnectorRecord(
                    self.connector_id
                )
            ref = SyncRef.from_record(record, sync_id, ended)
            out.append(((ended, sync_id), await aextra_for(wake.client, wake.prefix, ref)))
        return out
