"""The trigger on real Redis, run on an asyncio loop as the triggerer runs it.

A change published by the webhook write wakes it at once; with the publish lost it
still decides within one re-check interval; thousands share one subscription.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from datetime import datetime
from pathlib import Path
from typing import Any, cast

import pytest
import redis

from fivetran_events import HistoryWriter, parse_event
from fivetran_events.freshness import Schedule
from fivetran_events.history.writer import record_schedules
from fivetran_events.timeutil import now_ms, to_ms
from testkit.support import at, encode, lose_change_messages, payload
from testkit.trigger_waits import FirstWaits

TARGET = at(10)
ENDED = at(11)


def trigger(connector_id: str, target=TARGET, **kwargs: Any):  # type: ignore[no-untyped-def]
    from airflow_plugin.triggers.decision import FivetranSyncDecisionTrigger

    return FivetranSyncDecisionTrigger(connector_id, to_ms(target), **kwargs)


async def first_event(t: Any) -> dict[str, Any]:
    async for ev in t.run():
        return cast("dict[str, Any]", ev.payload)
    raise AssertionError("the trigger ended without an event")


def record(
    writer: HistoryWriter,
    connector_id: str,
    ended: datetime = ENDED,
    status: str = "SUCCESSFUL",
    sync_id: str = "s1",
) -> None:
    writer.record(
        parse_event(
            encode(payload("sync_end", connector_id, ended, sync_id=sync_id, status=status))
        )
    )


def pattern_subscribers(client: redis.Redis, after_id: int) -> int:
    """Clients newer than ``after_id`` holding a PSUBSCRIBE: this test's, not those of
    an Airflow's watchers on the same Redis (``PUBSUB NUMPAT`` counts a shared pattern
    once, whoever holds it)."""
    return sum(1 for c in client.client_list() if int(c["id"]) > after_id and int(c["psub"]) > 0)


async def subscribed(client: redis.Redis, n: int = 1) -> None:
    """Wait until the shared listener's PSUBSCRIBE is active."""
    for _ in range(200):
        if client.execute_command("PUBSUB", "NUMPAT") >= n:
            return
        await asyncio.sleep(0.02)
    raise AssertionError("the trigger never subscribed")


def run_async(body: Callable[[], Awaitable[Any]]) -> Any:
    return asyncio.run(asyncio.wait_for(body(), 60))


class TestSerialization:
    def test_round_trip(self, dagtest_airflow: Path) -> None:
        """serialize() names the class by its dotted path and rebuilds an equal trigger."""
        from airflow.sdk._shared.module_loading import import_string

        t = trigger(
            "c1", always_wait_when_syncing=True, criterion="started_after", recheck_interval=5
        )
        path, kwargs = t.serialize()
        assert path == "airflow_plugin.triggers.decision.FivetranSyncDecisionTrigger"
        assert import_string(path)(**kwargs).serialize() == (path, kwargs)


class TestWakeUps:
    def test_decided_at_once(self, dagtest_airflow: Path, writer: HistoryWriter) -> None:
        """A decision already in the history fires without waiting."""
        record(writer, "c1", at(12), "FAILURE", "f1")
        ev = run_async(lambda: first_event(trigger("c1")))
        assert ev["status"] == "fail" and "f1" in ev["message"]
        assert ev["decision"]["sync"]["sync_id"] == "f1"

    def test_publish_wakes_within_a_second(
        self,
        dagtest_airflow: Path,
        client: redis.Redis,
        writer: HistoryWriter,
        first_waits: FirstWaits,
    ) -> None:
        """A sync recorded while deferred releases the trigger in well under a second."""

        async def body() -> float:
            task = asyncio.create_task(first_event(trigger("c1", recheck_interval=60)))
            await subscribed(client)
            await first_waits.of("c1")
            assert not task.done()
            t0 = time.monotonic()
            record(writer, "c1")
            ev = await task
            assert ev["status"] == "success" and ev["decision"]["sync"]["sync_id"] == "s1"
            return time.monotonic() - t0

        assert run_async(body) < 1.0

    def test_lost_publish_costs_one_interval(
        self,
        dagtest_airflow: Path,
        client: redis.Redis,
        writer: HistoryWriter,
        monkeypatch: pytest.MonkeyPatch,
        first_waits: FirstWaits,
    ) -> None:
        """With the publish lost, the re-check finds the sync within one interval."""
        lose_change_messages(monkeypatch)

        async def body() -> float:
            task = asyncio.create_task(first_event(trigger("c1", recheck_interval=1.5)))
            await subscribed(client)
            await first_waits.of("c1")  # else the first read may find the sync itself
            t0 = time.monotonic()
            record(writer, "c1")
            await asyncio.sleep(0.5)
            assert not task.done(), "nothing was published, yet it woke early"
            ev = await task
            assert ev["status"] == "success"
            return time.monotonic() - t0

        assert run_async(body) < 1.5 + 0.5

    def test_listener_reconnects_and_rechecks(
        self,
        dagtest_airflow: Path,
        client: redis.Redis,
        writer: HistoryWriter,
        monkeypatch: pytest.MonkeyPatch,
        first_waits: FirstWaits,
    ) -> None:
        """When Redis drops the subscription, the hub resubscribes and re-checks everyone."""
        lose_change_messages(monkeypatch)

        async def body() -> None:
            task = asyncio.create_task(first_event(trigger("c1", recheck_interval=60)))
            await subscribed(client)
            await first_waits.of("c1")
            record(writer, "c1")  # not published: only the reconnect can find it
            client.client_kill_filter(_type="pubsub")
            ev = await asyncio.wait_for(task, 5)
            assert ev["status"] == "success"

        run_async(body)


class TestHeldAfterTheDeferral:
    """Airflow 3.2-3.3 fails a task resumed before its scheduler read the executor's
    report of the exit on defer(), which lags up to ``[workers] min_heartbeat_interval``
    (apache/airflow#72716): a decision is held until ``min_deferral`` after the deferral."""

    def test_a_decision_soon_after_the_deferral_waits_for_min_deferral(
        self, dagtest_airflow: Path, writer: HistoryWriter
    ) -> None:
        record(writer, "c_held")

        async def fired_after(deferred_ms: int) -> tuple[float, dict[str, Any]]:
            start = time.monotonic()
            ev = await first_event(trigger("c_held", deferred_ms=deferred_ms, min_deferral=1.5))
            return time.monotonic() - start, ev

        run_async(lambda: fired_after(0))  # the first trigger of a session starts slowly
        # A task that deferred longer ago than min_deferral is answered at once.
        at_once, ev = run_async(lambda: fired_after(now_ms() - 10_000))
        assert ev["status"] == "success" and at_once < 1.4, (at_once, ev)
        held, ev = run_async(lambda: fired_after(now_ms()))
        assert ev["status"] == "success" and 1.4 <= held < 5, (held, ev)

    def test_the_sensor_defers_with_its_time_and_a_10_s_min_deferral(
        self, dagtest_airflow: Path
    ) -> None:
        from airflow.sdk.exceptions import TaskDeferred

        from airflow_plugin.sensors import FivetranDateTimeSensor

        s = FivetranDateTimeSensor(
            task_id="s", connector_id="c_nothing", target_time=TARGET, deferrable=True
        )
        before = now_ms()
        with pytest.raises(TaskDeferred) as deferred:
            s.execute({})
        t = deferred.value.trigger
        assert before <= t.deferred_ms <= now_ms() and t.min_deferral == 10.0
        assert {"deferred_ms", "min_deferral"} <= set(t.serialize()[1])


class TestScale:
    def test_thousands_share_one_subscription(
        self,
        dagtest_airflow: Path,
        client: redis.Redis,
        writer: HistoryWriter,
        first_waits: FirstWaits,
    ) -> None:
        """2,000 deferred triggers hold one PSUBSCRIBE and a bounded pool; one wakes alone."""
        from airflow_plugin.triggers._wakeups import POOL_SIZE

        n = 2000

        async def body() -> None:
            # Clients of earlier tests of this process may still be connected: count ours.
            before = len(client.client_list())
            newest = max(int(c["id"]) for c in client.client_list())
            tasks = {
                i: asyncio.create_task(first_event(trigger(f"c{i % 500}", recheck_interval=600)))
                for i in range(n)
            }
            await subscribed(client)
            await first_waits.total(n)  # every trigger did its first read and now waits
            assert pattern_subscribers(client, newest) == 1
            added = len(client.client_list()) - before
            assert added <= POOL_SIZE + 1, added  # the hub's pool and its listener
            t0 = time.monotonic()
            record(writer, "c7")
            woken = [tasks[i] for i in range(7, n, 500)]
            await asyncio.wait_for(asyncio.gather(*woken), 5)
            assert time.monotonic() - t0 < 1.0
            await asyncio.sleep(0.2)
            assert sum(t.done() for t in tasks.values()) == len(woken)
            for t in tasks.values():
                t.cancel()
            await asyncio.gather(*tasks.values(), return_exceptions=True)
            for _ in range(500):  # the hub closes its listener once the last trigger left
                if pattern_subscribers(client, newest) == 0:
                    break
                await asyncio.sleep(0.02)
            assert pattern_subscribers(client, newest) == 0, "the hub did not close"

        run_async(body)


class TestLifecycleAndReschedules:
    def test_pause_while_deferred_fails_it(
        self,
        dagtest_airflow: Path,
        client: redis.Redis,
        writer: HistoryWriter,
        first_waits: FirstWaits,
    ) -> None:
        """A pause_connector recorded while the trigger waits ends it with FAIL, at once;
        with wait_when_paused the same trigger keeps waiting."""

        async def body() -> None:
            stops = asyncio.create_task(first_event(trigger("c1", recheck_interval=60)))
            waits = asyncio.create_task(
                first_event(trigger("c1", recheck_interval=60, wait_when_paused=True))
            )
            await subscribed(client)
            await first_waits.of("c1", 2)
            writer.record(parse_event(encode(payload("pause_connector", "c1", at(12)))))
            ev = await asyncio.wait_for(stops, 2)
            assert ev["status"] == "fail" and "paused at 2026-01-12" in ev["message"]
            await asyncio.sleep(0.3)
            assert not waits.done()
            waits.cancel()
            await asyncio.gather(waits, return_exceptions=True)

        run_async(body)

    def test_fail_when_overdue_after_fails_a_wait_on_a_late_connector(
        self, dagtest_airflow: Path, client: redis.Redis, writer: HistoryWriter
    ) -> None:
        """Hourly and last synced on Jan 11: the trigger fails at its first look, naming
        how late; without the argument the same wait goes on."""
        record(writer, "c1", ENDED)
        record_schedules(client, "test:", {"c1": Schedule(sync_frequency=60, schedule_type="auto")})

        async def body() -> None:
            late = trigger("c1", target=at(12), recheck_interval=60, fail_when_overdue_after=3600)
            ev = await asyncio.wait_for(first_event(late), 10)
            assert ev["status"] == "fail" and "overdue by" in ev["message"], ev
            assert "due at 2026-01-11T01:15:00.000Z" in ev["message"]
            waits = asyncio.create_task(
                first_event(trigger("c1", target=at(12), recheck_interval=60))
            )
            await asyncio.sleep(1.0)
            assert not waits.done()
            waits.cancel()
            await asyncio.gather(waits, return_exceptions=True)

        run_async(body)

    def test_looks_again_at_rescheduled_at(
        self,
        dagtest_airflow: Path,
        client: redis.Redis,
        writer: HistoryWriter,
        monkeypatch: pytest.MonkeyPatch,
        first_waits: FirstWaits,
    ) -> None:
        """With change messages lost, a trigger whose decision waits for rescheduledAt reads
        again then, not after its (long) re-check interval."""
        from datetime import timedelta, timezone

        from fivetran_events.timeutil import iso

        lose_change_messages(monkeypatch)
        now = datetime.now(timezone.utc)
        record_body = payload(
            "sync_end",
            "c1",
            now - timedelta(seconds=5),
            sync_id="r1",
            status="RESCHEDULED",
            rescheduledAt=iso(now + timedelta(seconds=1.5)),
        )
        writer.record(parse_event(encode(record_body)))

        async def body() -> float:
            t = trigger("c1", target=now - timedelta(hours=1), recheck_interval=60)
            task = asyncio.create_task(first_event(t))
            await subscribed(client)
            await first_waits.of("c1")
            t0 = time.monotonic()
            record(writer, "c1", now - timedelta(seconds=1), sync_id="r1")  # not published
            ev = await asyncio.wait_for(task, 10)
            assert ev["status"] == "success"
            return time.monotonic() - t0

        assert run_async(body) < 5.0
