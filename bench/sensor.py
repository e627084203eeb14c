"""Benchmark the history sensor; print figures and ratios.

1. Decision latency (history read + decide) with 10^2 and 10^6 syncs in a connector's
   history, and their ratio (the goal is near 1: every query is O(log n)); then the
   same under ``criterion="started_after"`` for the sync and the async reader, with and
   without recorded starts (``sync_start`` not subscribed), each case bounded in time.
2. The time to decide a 10-year @daily backfill (3,650 targets).
3. Side by side on the seed scenarios with ``airflow-provider-fivetran-async``'s
   ``FivetranSensor`` against a stand-in of Fivetran's connector endpoint serving the
   same history: Fivetran API calls per backfill, and sync-to-success latency of a
   deferred wait (our trigger vs the provider's trigger).

Everything runs on 127.0.0.1: its own redis-server (stopped by PID at the end) and the
stand-in API. Run: ``python -m bench.sensor`` (``--quick`` loads 10^5 instead of 10^6).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import redis

UTC = timezone.utc
PREFIX = "bench:"
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench._servers import start_redis, stop_group  # noqa: E402 (after the path insertion)


def bulk_history(
    client: redis.Redis,
    connector_id: str,
    n: int,
    start: datetime,
    step: timedelta,
    starts: bool = True,
) -> None:
    """Load ``n`` completions (1 in 10 failed) through the history's bulk loader.

    Each sync started a minute before it ended; ``starts=False`` records no start, as
    when ``sync_start`` is not subscribed. The loader runs the write script itself, so
    the history is exactly what the webhook would have recorded.
    """
    from fivetran_events.history import bulk
    from fivetran_events.model import Event, EventKind

    t0 = int(start.timestamp() * 1000)
    dt = int(step.total_seconds() * 1000)

    def events() -> Any:
        for i in range(n):
            t = t0 + i * dt
            if starts:
                yield Event(
                    kind=EventKind.SYNC_START,
                    event="sync_start",
                    created=datetime.fromtimestamp((t - 60_000) / 1000, UTC),
                    connector_id=connector_id,
                    sync_id=f"s{i}",
                )
            yield Event(
                kind=EventKind.SYNC_END,
                event="sync_end",
                created=datetime.fromtimestamp(t / 1000, UTC),
                connector_id=connector_id,
                sync_id=f"s{i}",
                status="FAILURE" if i % 10 == 3 else "SUCCESSFUL",
            )

    bulk.load(client, PREFIX, events(), retention_ms=t0 + n * dt, now=t0 + n * dt)


def pct(values: list[float], q: float) -> float:
    return sorted(values)[min(len(values) - 1, int(q * len(values)))]


def bench_latency(client: redis.Redis, big: int, samples: int = 3000) -> None:
    from fivetran_events import HistoryReader, decide

    reader = HistoryReader(client, PREFIX, 24 * 3600 * 1000)
    start = datetime(2020, 1, 1, tzinfo=UTC)
    step = timedelta(minutes=5)
    rows = []
    for n in (100, big):
        t = time.perf_counter()
        bulk_history(client, f"n{n}", n, start, step)
        load = time.perf_counter() - t
        lo, hi = int(start.timestamp() * 1000), int((start + step * n).timestamp() * 1000)
        lat = _sample(
            lambda target, c=f"n{n}": decide(reader.facts(c, target)), lo, hi, samples, float("inf")
        )
        rows.append((n, statistics.median(lat), pct(lat, 0.99), load))
    print(
        "1. decision latency (HistoryReader.facts + decide, one connector, "
        f"{samples} random targets, real redis-server on 127.0.0.1)"
    )
    for n, med, p99, load in rows:
        print(
            f"   {n:>9,} syncs: median {med:7.1f} us   p99 {p99:7.1f} us"
            f"   (history loaded in {load:.1f} s)"
        )
    print(
        f"   ratio {rows[1][0]:,} / 100 syncs: median x{rows[1][1] / rows[0][1]:.2f}, "
        f"p99 x{rows[1][2] / rows[0][2]:.2f}"
    )


def _sample(decide_once: Any, lo: int, hi: int, samples: int, budget_s: float) -> list[float]:
    """Time ``decide_once(target)`` on random targets, for at most ``budget_s`` seconds."""
    rng = random.Random(7)
    lat: list[float] = []
    deadline = time.perf_counter() + budget_s
    while len(lat) < samples and time.perf_counter() < deadline:
        target = rng.randint(lo, hi)
        t = time.perf_counter()
        decide_once(target)
        lat.append((time.perf_counter() - t) * 1e6)
    return lat


def bench_started_after(
    client: redis.Redis, url: str, big: int, samples: int = 1000, budget_s: float = 15.0
) -> None:
    """started_after latency, sync and async reader, 10^2 vs ``big`` syncs, starts or not."""
    import redis.asyncio as aredis

    from fivetran_events import AsyncHistoryReader, HistoryReader, decide

    start, step = datetime(2020, 1, 1, tzinfo=UTC), timedelta(minutes=5)
    cases = [(n, with_starts) for with_starts in (True, False) for n in (100, big)]
    for n, with_starts in cases:
        bulk_history(client, f"sa{n}{with_starts:d}", n, start, step, starts=with_starts)
    lo = int(start.timestamp() * 1000)
    reader = HistoryReader(client, PREFIX, 24 * 3600 * 1000)
    # The async reader on an event loop of its own, driven one decision at a time.
    loop = asyncio.new_event_loop()
    aclient = aredis.Redis.from_url(url)
    areader = AsyncHistoryReader(aclient, PREFIX, 24 * 3600 * 1000)
    fetch = {
        "sync": lambda cid, target: reader.facts(cid, target, started_after=True),
        "async": lambda cid, target: loop.run_until_complete(
            areader.facts(cid, target, started_after=True)
        ),
    }
    results: dict[tuple[str, int, bool], list[float]] = {}
    try:
        for kind, facts in fetch.items():
            for n, with_starts in cases:
                cid, hi = f"sa{n}{with_starts:d}", lo + n * int(step.total_seconds() * 1000)
                results[kind, n, with_starts] = _sample(
                    lambda target, f=facts, c=cid: decide(f(c, target), criterion="started_after"),
                    lo,
                    hi,
                    samples,
                    budget_s,
                )
    finally:
        loop.run_until_complete(aclient.aclose())
        loop.close()
    print(
        f"1b. started_after latency (facts + decide, up to {samples} random targets or "
        f"{budget_s:g} s per case)"
    )
    for kind in ("sync", "async"):
        for n, with_starts in cases:
            lat = results[kind, n, with_starts]
            print(
                f"   {kind:>5} reader, {n:>9,} syncs, starts "
                f"{'recorded' if with_starts else 'not recorded':<12}: median "
                f"{statistics.median(lat):9.1f} us   p99 {pct(lat, 0.99):9.1f} us"
                f"   ({len(lat)} samples)"
            )
        med = {k[1:]: statistics.median(v) for k, v in results.items() if k[0] == kind}
        print(
            f"   {kind} ratio {big:,} / 100 syncs (median): starts recorded "
            f"x{med[big, True] / med[100, True]:.2f}, not recorded "
            f"x{med[big, False] / med[100, False]:.2f}; not recorded / recorded at "
            f"{big:,}: x{med[big, False] / med[big, True]:.2f}"
        )


def bench_backfill(client: redis.Redis) -> None:
    from fivetran_events import HistoryReader, decide

    reader = HistoryReader(client, PREFIX, 24 * 3600 * 1000)
    bulk_history(client, "decade", 3650, datetime(2016, 1, 1, 6, tzinfo=UTC), timedelta(days=1))
    targets = [
        int((datetime(2016, 1, 1, tzinfo=UTC) + timedelta(days=d)).timestamp() * 1000)
        for d in range(1, 3651)
    ]
    t = time.perf_counter()
    outcomes: dict[str, int] = {}
    for target in targets:
        d = decide(reader.facts("decade", target), propagate_failures_forward=True)
        outcomes[d.outcome.value] = outcomes.get(d.outcome.value, 0) + 1
    took = time.perf_counter() - t
    print(
        "2. 10-year @daily backfill: 3,650 targets decided in "
        f"{took:.2f} s ({took / 3650 * 1e3:.3f} ms per target); outcomes {outcomes}"
    )


def _outcome(poke: Any) -> str:
    try:
        return "success" if poke() else "wait"
    except Exception:
        return "fail"


def seed_calendar_calls(redis_url: str) -> None:
    """Poke each seed target once with each sensor; compare calendars and API calls."""
    from fivetran_provider_async.hooks import FivetranHook
    from fivetran_provider_async.sensors import FivetranSensor

    from airflow_plugin.sensors import FivetranDateTimeSensor
    from fivetran_events import HistoryWriter, parse_event
    from testkit.calendars import CALENDARS, SCENARIO_A, SCENARIO_B
    from testkit.fivetran_api import FivetranStandIn, serving
    from testkit.support import at, encode, payload

    writer = HistoryWriter(redis.Redis.from_url(redis_url), PREFIX, 10 * 365 * 86_400_000)
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


async def deferred_latency(redis_url: str, trials: int, provider_poke: float) -> None:
    """Time from a sync's end to each trigger's success event."""
    from fivetran_provider_async.hooks import FivetranHook
    from fivetran_provider_async.triggers import FivetranTrigger

    from airflow_plugin.triggers import FivetranSyncTrigger
    from fivetran_events import HistoryWriter, parse_event
    from fivetran_events.timeutil import to_ms
    from testkit.fivetran_api import FivetranStandIn, serving
    from testkit.support import encode, payload

    writer = HistoryWriter(redis.Redis.from_url(redis_url), PREFIX, 10 * 365 * 86_400_000)
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


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="10^5 syncs instead of 10^6")
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument(
        "--provider-poke",
        type=float,
        default=4.0,
        help="the provider trigger's poll interval in s (its default: 4)",
    )
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="fte-bench-"))
    os.environ.setdefault("AIRFLOW_HOME", str(work / "airflow"))
    os.environ["AIRFLOW__CORE__LOAD_EXAMPLES"] = "False"
    os.environ["AIRFLOW__LOGGING__LOGGING_LEVEL"] = "WARNING"
    proc, url = start_redis(work, appendonly=False)  # 10^6 syncs load faster
    try:
        from urllib.parse import quote

        os.environ["AIRFLOW_CONN_FIVETRAN_EVENTS_REDIS"] = f"{url}?key_prefix={quote(PREFIX)}"
        os.environ["AIRFLOW_CONN_FIVETRAN_DEFAULT"] = "fivetran://key:secret@"
        client = redis.Redis.from_url(url)
        bench_latency(client, 10**5 if args.quick else 10**6)
        bench_started_after(client, url, 10**5 if args.quick else 10**6)
        bench_backfill(client)
        seed_calendar_calls(url)
        asyncio.run(deferred_latency(url, args.trials, args.provider_poke))
    finally:
        stop_group(proc, timeout=10)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
