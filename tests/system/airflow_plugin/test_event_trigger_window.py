"""The watcher's place in the history, on the suite's real Redis, without Airflow's services.

Fivetran delivers out of order and retries a delivery for up to 24 hours, and a retried
sync id can succeed twice. These tests drive ``FivetranSyncWatcherTrigger`` the way the
triggerer's shared-stream manager does (wakes in, events out, ``advance()`` once the
events are persisted) with a stand-in for Airflow's asset state store, and check that
every recorded success becomes exactly one event: late ones too, a sync id only once,
across restarts, when Airflow reports a wake failed, with a state that stays small.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import datetime, timedelta
from typing import Any

import redis.asyncio as aioredis

from fivetran_events import HistoryWriter, parse_event
from fivetran_events.timeutil import iso, to_ms
from testkit.support import UTC, encode, payload

CONNECTOR = "late_c"
KEY = f"fivetran_events.position:{CONNECTOR}"


class StateStore:
    """Stand-in for the triggerer's asset state store of one watched asset (JSON values)."""

    def __init__(self) -> None:
        self.values: dict[str, str] = {}
        self._by_name: dict[str, Any] = {}
        self._by_uri: dict[str, Any] = {}

    def _single_accessor(self) -> StateStore:
        return self

    async def aget(self, key: str, default: Any = None) -> Any:
        raw = self.values.get(key)
        return default if raw is None else json.loads(raw)

    async def aset(self, key: str, value: Any) -> None:
        self.values[key] = json.dumps(value)  # Airflow keeps JSON text: nothing else survives

    def state(self) -> dict[str, Any]:
        return dict(json.loads(self.values[KEY]))


def hours_ago(h: float) -> datetime:
    return datetime.now(UTC) - timedelta(hours=h)


def record(writer: HistoryWriter, sync_id: str, ended: datetime) -> None:
    """Record a success as the webhook does (the history's own write path)."""
    body = payload("sync_end", CONNECTOR, ended, sync_id=sync_id, status="SUCCESSFUL")
    assert writer.record(parse_event(encode(body))).status.value == "recorded"


class Watcher:
    """One trigger instance over a state store: a triggerer process's view of a watcher."""

    def __init__(self, store: StateStore, client: Any, **kwargs: Any) -> None:
        from airflow_plugin.triggers.watcher import FivetranSyncWatcherTrigger

        self.trigger = FivetranSyncWatcherTrigger(connector_id=CONNECTOR, **kwargs)
        # What the triggerer injects before run(); the stand-in has the accessor calls used.
        self.trigger.asset_state_store = store  # type: ignore[assignment]
        self.client = client
        self.pending: list[Any] = []  # wakes not advanced yet, oldest first

    async def wake(self, persisted: bool | None = True) -> list[str]:
        """One wake for this connector: the sync ids sent. ``advance()`` at once as Airflow
        does once the events are persisted (True) or failed (False), or not yet (None:
        ``advance`` later, or never, as when the triggerer is killed)."""
        from airflow_plugin.triggers.watcher import Wake

        wake = Wake(CONNECTOR, self.client, "test:")

        async def stream() -> AsyncIterator[Wake]:
            yield wake

        sent = [e.payload["sync_id"] async for e in self.trigger.filter_shared_stream(stream())]
        self.pending.append(wake)
        if persisted is not None:
            await self.advance(persisted)
        return sent

    async def advance(self, *persisted: bool) -> None:
        """Advance the oldest pending wakes in order: persisted (acked) or failed."""
        from airflow.triggers.shared_stream import AdvanceItem, AdvanceOutcome

        from airflow_plugin.triggers.watcher import HistoryWakeProducer

        items = [
            AdvanceItem(self.pending.pop(0), AdvanceOutcome(acked=int(ok), failed=int(not ok)))
            for ok in persisted
        ]
        await HistoryWakeProducer("unused", 30.0).advance(items)


def run(body: Callable[[Any], Awaitable[None]], redis_url: str) -> None:
    async def main() -> None:
        client = aioredis.Redis.from_url(redis_url)
        try:
            await asyncio.wait_for(body(client), 60)
        finally:
            await client.aclose()

    asyncio.run(main())


class TestLateDeliveries:
    def test_a_success_recorded_after_a_later_ended_one_is_sent_once(
        self, redis_url: str, writer: HistoryWriter
    ) -> None:
        """A Fivetran retry hours late (ended before the position) still becomes one
        event, and later wakes do not send it again."""
        store = StateStore()

        async def body(client: Any) -> None:
            w = Watcher(store, client, start=iso(to_ms(hours_ago(5))))
            assert await w.wake() == []
            record(writer, "newer", hours_ago(1))
            assert await w.wake() == ["newer"]
            record(writer, "late", hours_ago(3))  # ended before "newer", delivered after
            assert await w.wake() == ["late"]
            assert await w.wake() == []
            assert store.state()["sync_id"] == "newer"  # the position did not move back

        run(body, redis_url)

    def test_only_successes_inside_the_lookback_window_are_sent_late(
        self, redis_url: str, writer: HistoryWriter
    ) -> None:
        """The default window is 25 hours before the position (Fivetran retries for 24):
        a late success just inside it is sent, one just outside is not."""
        store = StateStore()

        async def body(client: Any) -> None:
            w = Watcher(store, client, start=iso(to_ms(hours_ago(60))))
            record(writer, "position", hours_ago(1))
            assert await w.wake() == ["position"]
            record(writer, "inside", hours_ago(1 + 24 + 55 / 60))
            record(writer, "outside", hours_ago(1 + 25 + 5 / 60))
            assert await w.wake() == ["inside"]
            assert await w.wake() == []

        run(body, redis_url)

    def test_the_window_is_a_trigger_argument(self, redis_url: str, writer: HistoryWriter) -> None:
        """``lookback`` (seconds) narrows the window: 2 hours sends a success 90 minutes
        before the position and not one 3 hours before."""
        store = StateStore()

        async def body(client: Any) -> None:
            w = Watcher(store, client, start=iso(to_ms(hours_ago(10))), lookback=7200)
            record(writer, "position", hours_ago(1))
            assert await w.wake() == ["position"]
            record(writer, "in", hours_ago(2.5))
            record(writer, "out", hours_ago(4))
            assert await w.wake() == ["in"]

        run(body, redis_url)

    def test_a_first_start_sends_nothing_recorded_before_it_but_late_ones_after(
        self, redis_url: str, writer: HistoryWriter
    ) -> None:
        """``start="now"`` replays nothing already recorded, yet a success that ended
        before the start and is delivered after it is sent."""
        store = StateStore()

        async def body(client: Any) -> None:
            record(writer, "before_start", hours_ago(2))
            w = Watcher(store, client)
            assert await w.wake() == []
            record(writer, "late_after_start", hours_ago(3))
            assert await w.wake() == ["late_after_start"]
            assert await w.wake() == []

        run(body, redis_url)


class TestRetriedSyncIds:
    def test_a_second_success_under_one_sync_id_is_not_sent_again(
        self, redis_url: str, writer: HistoryWriter
    ) -> None:
        """Two successful ends of one retried sync: one event, as the REST path sends one
        per sync id, whether the second comes in a later wake or in the same one."""
        store = StateStore()

        async def body(client: Any) -> None:
            w = Watcher(store, client, start=iso(to_ms(hours_ago(6))))
            record(writer, "retried", hours_ago(5))
            assert await w.wake() == ["retried"]
            record(writer, "retried", hours_ago(4))
            assert await w.wake() == []
            record(writer, "both", hours_ago(3))
            record(writer, "both", hours_ago(2))
            assert await w.wake() == ["both"]
            assert await w.wake() == []

        run(body, redis_url)

    def test_a_sync_id_stays_known_while_any_of_its_successes_is_in_the_window(
        self, redis_url: str, writer: HistoryWriter
    ) -> None:
        """Once the first success of a retried sync leaves the window, its second (still
        inside) must not make it new again."""
        store = StateStore()

        async def body(client: Any) -> None:
            w = Watcher(store, client, start=iso(to_ms(hours_ago(10))), lookback=3600)
            record(writer, "retried", hours_ago(5))
            assert await w.wake() == ["retried"]
            record(writer, "retried", hours_ago(3))
            assert await w.wake() == []
            record(writer, "next", hours_ago(2.5))  # the window now begins 3.5 hours ago
            assert await w.wake() == ["next"]
            assert await Watcher(store, client, lookback=3600).wake() == []

        run(body, redis_url)


class TestRestarts:
    def test_a_new_trigger_on_the_same_store_sends_nothing_twice(
        self, redis_url: str, writer: HistoryWriter
    ) -> None:
        """A triggerer restart (a new instance, the state store kept) sends neither the
        successes already persisted nor a late one, and still sends a new late one."""
        store = StateStore()

        async def body(client: Any) -> None:
            start = iso(to_ms(hours_ago(8)))
            w = Watcher(store, client, start=start)
            record(writer, "a", hours_ago(4))
            record(writer, "b", hours_ago(2))
            assert await w.wake() == ["a", "b"]
            record(writer, "late", hours_ago(3))
            assert await w.wake() == ["late"]
            assert await Watcher(store, client, start=start).wake() == []
            record(writer, "late2", hours_ago(5))
            assert await Watcher(store, client, start=start).wake() == ["late2"]
            assert await Watcher(store, client, start=start).wake() == []

        run(body, redis_url)

    def test_a_late_event_not_yet_persisted_comes_again_after_a_restart(
        self, redis_url: str, writer: HistoryWriter
    ) -> None:
        """Ack ordering holds for late successes: the state is stored only once Airflow
        persisted the events, so a triggerer killed before that sends them again."""
        store = StateStore()

        async def body(client: Any) -> None:
            w = Watcher(store, client, start=iso(to_ms(hours_ago(8))))
            record(writer, "a", hours_ago(2))
            assert await w.wake() == ["a"]
            record(writer, "late", hours_ago(3))
            assert await w.wake(persisted=None) == ["late"]
            assert await Watcher(store, client).wake() == ["late"]
            assert await Watcher(store, client).wake() == []

        run(body, redis_url)


class TestFailedWakes:
    """Airflow fails a wake (ack timeout, queue overflow) when it did not confirm the events
    derived from it persisted, and expects them redelivered."""

    def test_a_later_persisted_wake_does_not_store_a_failed_wakes_sync(
        self, redis_url: str, writer: HistoryWriter
    ) -> None:
        """The lost event of a failed wake stays out of the stored state even when a later
        wake's events are persisted first, so the restarted watcher sends it."""
        store = StateStore()

        async def body(client: Any) -> None:
            w = Watcher(store, client, start=iso(to_ms(hours_ago(8))))
            record(writer, "lost", hours_ago(2))
            assert await w.wake(persisted=None) == ["lost"]
            record(writer, "kept", hours_ago(1))
            assert await w.wake(persisted=None) == ["kept"]
            await w.advance(False, True)  # in fan-out order: the failed one first
            assert {s for s, _ in store.state()["handled"]} == {"kept"}
            assert await Watcher(store, client).wake() == ["lost"]
            assert await Watcher(store, client).wake() == []

        run(body, redis_url)

    def test_a_live_watcher_sends_a_failed_wakes_syncs_again(
        self, redis_url: str, writer: HistoryWriter
    ) -> None:
        """A watcher still running after a failed wake sends its syncs again, once."""
        store = StateStore()

        async def body(client: Any) -> None:
            w = Watcher(store, client, start=iso(to_ms(hours_ago(8))))
            record(writer, "a", hours_ago(2))
            assert await w.wake(persisted=False) == ["a"]
            assert await w.wake() == ["a"]
            assert await w.wake() == []
            assert await Watcher(store, client).wake() == []

        run(body, redis_url)

    def test_a_watcher_failed_while_reading_a_wake_does_not_send_the_sync_again(
        self, redis_url: str, writer: HistoryWriter
    ) -> None:
        """Airflow force-fails a watcher and reports its lost wake failed while the watcher
        still reads the next wake: that watcher sends nothing more (its next pull is the
        failure), and its restart sends the sync once."""
        store = StateStore()

        async def body(client: Any) -> None:
            w = Watcher(store, client, start=iso(to_ms(hours_ago(8))))
            record(writer, "lost", hours_ago(2))
            assert await w.wake(persisted=None) == ["lost"]
            # Runs at the next wake's first Redis read, as Airflow's advance pump would.
            failing = asyncio.ensure_future(w.advance(False))
            assert await w.wake(persisted=None) == []
            assert failing.done()
            assert await Watcher(store, client).wake() == ["lost"]

        run(body, redis_url)

    def test_a_sync_in_flight_is_not_sent_again_nor_marked_by_its_repeat(
        self, redis_url: str, writer: HistoryWriter
    ) -> None:
        """Until Airflow answers, a sent sync is not sent again by the next wakes, and a
        second success of its sync id read meanwhile does not mark it handled."""
        store = StateStore()

        async def body(client: Any) -> None:
            w = Watcher(store, client, start=iso(to_ms(hours_ago(8))))
            record(writer, "retried", hours_ago(3))
            assert await w.wake(persisted=None) == ["retried"]
            second = hours_ago(2)
            record(writer, "retried", second)
            record(writer, "other", hours_ago(1))
            assert await w.wake(persisted=None) == ["other"]
            await w.advance(False, True)
            assert {s for s, _ in store.state()["handled"]} == {"other"}
            assert await w.wake() == ["retried"]  # its first success, as before
            assert await w.wake() == []  # reads the repeat of a handled id: its newest end
            assert w.trigger._state is not None
            assert w.trigger._state.handled["retried"] == to_ms(second)

        run(body, redis_url)


class TestStateSize:
    def test_the_state_of_an_hourly_connector_stays_within_the_window(
        self, redis_url: str, writer: HistoryWriter
    ) -> None:
        """Three days of hourly successes: every one is sent once, and the stored state
        keeps only the sync ids of the last 25 hours (about 1.5 KB)."""
        store = StateStore()

        async def body(client: Any) -> None:
            now = hours_ago(0)  # one base: the last 25 hours hold exactly 26 hourly ends
            w = Watcher(store, client, start=iso(to_ms(now - timedelta(hours=73))))
            ids = [str(uuid.uuid4()) for _ in range(72)]
            for h, sid in zip(range(72, 0, -1), ids, strict=True):
                record(writer, sid, now - timedelta(hours=h))
            assert await w.wake() == ids
            state = store.state()
            size = len(store.values[KEY])
            print(f"state of an hourly connector: {len(state['handled'])} sync ids, {size} bytes")
            assert {sid for sid, _ in state["handled"]} == set(ids[-26:])
            assert size < 2000

        run(body, redis_url)
