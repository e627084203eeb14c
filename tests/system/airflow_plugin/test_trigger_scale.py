"""Many triggers on one loop, as the triggerer runs them: cancelled they stop, idle they
re-check apart, fired they say when.

Real redis-server, real triggers; only the loop is the test's own.
"""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from typing import Any, cast

import pytest
import redis

from fivetran_events import HistoryWriter, parse_event
from fivetran_events.timeutil import to_ms
from testkit.support import at, encode, payload
from testkit.trigger_waits import FirstWaits

TARGET = at(1, month=6)


def trigger(connector_id: str, **kwargs: Any) -> Any:
    from airflow_plugin.triggers.decision import FivetranSyncDecisionTrigger

    return FivetranSyncDecisionTrigger(connector_id, to_ms(TARGET), **kwargs)


async def first_event(t: Any) -> dict[str, Any]:
    async for ev in t.run():
        return cast("dict[str, Any]", ev.payload)
    raise AssertionError("the trigger ended without an event")


class TestFiredAt:
    def test_event_says_when_the_trigger_fired(
        self, dagtest_airflow: Path, writer: HistoryWriter
    ) -> None:
        """The event carries the wall-clock time it fired, so a wake-up can be timed apart
        from the scheduler's pickup of the task (bench/sensor.py --scale)."""
        writer.record(parse_event(encode(payload("sync_end", "fired", at(2, month=6), "f1"))))
        before = time.time()
        event = asyncio.run(asyncio.wait_for(first_event(trigger("fired")), 30))
        after = time.time()
        assert event["status"] == "success"
        assert before <= event["fired_at"] <= after


@pytest.mark.slow
class TestCancel:
    def test_every_cancelled_trigger_stops_while_reads_are_under_way(
        self, dagtest_airflow: Path, client: redis.Redis
    ) -> None:
        """1,000 triggers re-checking every 0.5 s, cancelled at once: all end within 5 s.

        A cancel landing while a read is under way used to be lost now and then (a few in
        a thousand), and that trigger went on re-checking for ever; Airflow cancels once.
        Three rounds, as the loss is a matter of timing.
        """

        async def round_() -> int:
            tasks = [
                asyncio.create_task(first_event(trigger(f"c{i}", recheck_interval=0.5)))
                for i in range(1000)
            ]
            await asyncio.sleep(2.5)
            for t in tasks:
                t.cancel()
            _done, pending = await asyncio.wait(tasks, timeout=5)
            for t in pending:  # what the triggerer cannot do: cancel again
                t.cancel()
            if pending:
                await asyncio.wait(pending, timeout=5)
            return len(pending)

        async def body() -> list[int]:
            return [await round_() for _ in range(3)]

        assert asyncio.run(asyncio.wait_for(body(), 120)) == [0, 0, 0]
        assert client.execute_command("PUBSUB", "NUMPAT") == 0  # the hub closed


@pytest.mark.slow
class TestRecheckSpread:
    def test_triggers_woken_together_recheck_apart(
        self,
        dagtest_airflow: Path,
        client: redis.Redis,
        redis_url: str,
        first_waits: FirstWaits,
    ) -> None:
        """300 triggers woken together re-check spread over a quarter of their interval.

        In one burst, a real wake-up would queue behind hundreds of reads every interval
        (the hub wakes everyone together on each re-subscribe). Redis's MONITOR gives the
        time of every read: the first re-check round must span most of the jitter window.
        """
        interval, n = 4.0, 300
        stamps: list[float] = []
        stop = threading.Event()

        def monitor() -> None:
            with redis.Redis.from_url(redis_url).monitor() as m:
                for cmd in m.listen():
                    if stop.is_set():
                        return
                    if "ZRANGEBYSCORE" in cmd["command"].upper() and ":ok" in cmd["command"]:
                        stamps.append(float(cmd["time"]))

        watcher = threading.Thread(target=monitor, daemon=True)

        async def body() -> None:
            tasks = [
                asyncio.create_task(first_event(trigger(f"r{i}", recheck_interval=interval)))
                for i in range(n)
            ]
            await first_waits.total(n)  # the first reads are done
            watcher.start()
            await asyncio.sleep(0.5)
            start = time.time()
            client.client_kill_filter(_type="pubsub")  # the hub re-subscribes: wakes all
            await asyncio.sleep(interval + 3.0)
            stop.set()
            client.set("nudge-the-monitor", 1)
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            rechecks = sorted(s - start for s in stamps if 2.0 < s - start < interval + 2.8)
            assert len(rechecks) >= n, len(rechecks)  # every trigger re-checked once
            spread = rechecks[int(0.9 * len(rechecks))] - rechecks[int(0.1 * len(rechecks))]
            # in one burst the middle 80 % take the time of 240 reads (~0.1 s); spread
            # over a window of interval / 4 (1 s), 0.8 s
            assert spread > 0.4, spread

        asyncio.run(asyncio.wait_for(body(), 60))
        watcher.join(5)
