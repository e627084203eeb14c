"""Section 3 of ``bench/sensor.py``: side by side with astronomer's ``FivetranSensor``.

3a. The seed scenarios, one poke per target with each sensor, ours reading the history
    and the provider's calling a stand-in of Fivetran's connector endpoint that serves
    the same history: does each give the seed's calendar, and how many API calls.
3b. Sync-to-success latency of a deferred wait: our trigger (woken by the webhook's
    publish) against the provider's (polling every ``provider_poke`` seconds).
"""

from __future__ import annotations

import asyncio
import random
import statistics
import time
from datetime import datetime, timedelta, timezone
from typing import Any

import redis

UTC = timezone.utc


def _outcome(poke: Any) -> str:
    try:
        return "success" if poke() else "wait"
    except Exception:
        return "fail"


def seed_calendar_calls(redis_url: str, prefix: str) -> None:
    """Poke each seed target once with each sensor; compare calendars and API calls."""
    from fivetran_provider_async.hooks import FivetranHook
    from fivetran_provider_async.sensors import FivetranSensor

    from airflow_plugin.sensors import FivetranDateTimeSensor
    from fivetran_events import HistoryWriter, parse_event
    from testkit.calendars import CALENDARS, SCENARIO_A, SCENARIO_B
    from testkit.fivetran_api import FivetranStandIn, serving
    from testkit.support import at, encode, payload

    writer = HistoryWriter(redis.Redis.from_url(redis_url), prefix, 10 * 365 * 86_400_000)
    api = FivetranStandIn()
    print("3a. seed January backfill, 15 targets, one poke each (poke mode):")
    print(
        "    scenario/propagate  | ours: seed calendar?  API calls "
        "| provider FivetranSensor: seed calendar?  API calls"
    )
    with serving(api):
        FivetranHook.api_protocol, FivetranHook.api_host = api.base
        for (scenario, propagate), expected in CALENDARS.items():
            cid = f"seed_{scenario}_{propagate}".lower()
            rows = SCENARIO_A if scenario == "A" else SCENARIO_B
            for sid, ended, status in rows:
                writer.record(
                    parse_event(encode(payload("sync_end", cid, ended, sync_id=sid, status=status)))
                )
            api.connector(
                cid,
                succeeded_at=max(e for _, e, s in rows if s == "SUCCESSFUL"),
                failed_at=max(e for _, e, s in rows if s != "SUCCESSFUL"),
            )
            ours, theirs = {}, {}
            before = api.total_calls
            for day in expected:
                sensor = FivetranDateTimeSensor(
                    task_id=f"o{day}", connector_id=cid, propagate_failures_forward=propagate
                )
                ours[day] = _outcome(lambda s=sensor, d=day: s.poke({"data_interval_end": at(d)}))
            our_calls = api.total_calls - before
            before = api.total_calls
            for day in expected:
                provider_sensor = FivetranSensor(
                    task_id=f"p{day}",
                    connector_id=cid,
                    completed_after_time=at(day).isoformat(),
                    propagate_failures_forward=propagate,
                    deferrable=False,
                )
                theirs[day] = _outcome(lambda s=provider_sensor: s.poke({}))
            their_calls = api.total_calls - before
            print(
                f"    {scenario} / {propagate!s:<5}           | {ours == expected!s:<21} "
                f"{our_calls:>9} | {theirs == expected!s:<39} {their_calls:>9}"
            )
    print(
        "    every further poke of a waiting target: ours reads Redis (0 API calls), the "
        "provider calls GET /v1/connectors/{id}"
    )


_CLOCK = (time.time(), time.perf_counter())


def _perf_at(when: datetime) -> float:
    return _CLOCK[1] + (when.timestamp() - _CLOCK[0])


async def deferred_latency(redis_url: str, prefix: str, trials: int, provider_poke: float) -> None:
    """Time from a sync's end to each trigger's success event."""
    from fivetran_provider_async.hooks import FivetranHook
    from fivetran_provider_async.triggers import FivetranTrigger

    from airflow_plugin.triggers import FivetranSyncTrigger
    from fivetran_events import HistoryWriter, parse_event
    from fivetran_events.timeutil import to_ms
    from testkit.fivetran_api import FivetranStandIn, serving
    from testkit.support import encode, payload

    writer = HistoryWriter(redis.Redis.from_url(redis_url), prefix, 10 * 365 * 86_400_000)
    api = FivetranStandIn()
    ours: list[float] = []
    theirs: list[float] = []
    rng = random.Random(11)
    with serving(api):
        FivetranHook.api_protocol, FivetranHook.api_host = api.base
        for i in range(trials):
            for who, samples in (("ours", ours), ("provider", theirs)):
                cid = f"lat_{who}_{i}"
                now = datetime.now(UTC)
                api.connector(cid, succeeded_at=now - timedelta(hours=1))
                if who == "ours":
                    trig: Any = FivetranSyncTrigger(cid, to_ms(now), recheck_interval=60)
                else:
                    trig = FivetranTrigger(
                        task_id="t",
                        connector_id=cid,
                        fivetran_conn_id="fivetran_default",
                        previous_completed_at=None,
                        xcom=now.isoformat(),
                        poke_interval=provider_poke,
                    )
                gen = trig.run()
                task = asyncio.ensure_future(gen.__anext__())
                # the sync ends at a random phase of the provider's polling
                await asyncio.sleep(1.0 + rng.random() * provider_poke)
                ended = datetime.now(UTC)
                api.finish_sync(cid, ended)  # what Fivetran's API reports from now on
                writer.record(
                    parse_event(
                        encode(
                            payload(  # the webhook Fivetran sends
                                "sync_end", cid, ended, sync_id=f"sync-{who}-{i}"
                            )
                        )
                    )
                )
                event = await task
                samples.append(time.perf_counter() - _perf_at(ended))
                assert event.payload["status"] == "success", event.payload
                await gen.aclose()
    calls = api.calls["GET /v1/connectors/{id}"]
    print(
        f"3b. sync-to-success latency of a deferred wait ({trials} syncs each; "
        f"the provider's trigger polls every {provider_poke:g} s):"
    )
    print(
        f"    ours (pub/sub wake-up):   median {statistics.median(ours) * 1e3:8.1f} ms   "
        f"max {max(ours) * 1e3:8.1f} ms   Fivetran API calls 0"
    )
    print(
        f"    provider FivetranTrigger: median {statistics.median(theirs) * 1e3:8.1f} ms   "
        f"max {max(theirs) * 1e3:8.1f} ms   Fivetran API calls {calls}"
    )
    print(
        "    ratio provider/ours (median): "
        f"x{statistics.median(theirs) / statistics.median(ours):.0f}"
    )
