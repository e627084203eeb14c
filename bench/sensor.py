"""Benchmark the history sensor; print figures and ratios.

One module, one section per subcommand (``python -m bench.sensor [COMMAND] [options]``):

``local`` (the default: ``history`` then ``provider``), on 127.0.0.1 with a redis-server
of its own (testkit/own_redis.py) and a stand-in of Fivetran's API:

``history``
    1. Decision latency (history read + decide) with 10^2 and 10^6 syncs in a
       connector's history, and their ratio (the goal is near 1: every query is
       O(log n)); then the same under ``criterion="started_after"`` for the sync and the
       async reader, with and without recorded starts (``sync_start`` not subscribed),
       bounded in time. The cases are sampled interleaved (``_sample``), so drift hits
       each alike. 2. The time to decide a 10-year @daily backfill (3,650 targets).
``provider``
    3. Side by side on the seed scenarios with ``airflow-provider-fivetran-async``'s
       ``FivetranSensor`` against a stand-in of Fivetran's connector endpoint serving the
       same history: Fivetran API calls per backfill (3a), and sync-to-success latency of
       a deferred wait, our trigger (woken by the webhook's publish) against the
       provider's (polling every ``--provider-poke`` seconds) (3b).

On a real Airflow 3 (``testkit/airflow_harness.py``: SQLite, LocalExecutor) with its own
redis-server and webhook server, run when asked:

``scale`` (or ``--scale``)
    4. N deferred ``FivetranDateTimeSensor`` tasks (one mapped task, one connector each)
       held by the real triggerer: the time Airflow takes to defer them all, the Redis
       pattern subscriptions and connections they hold, the triggerer's CPU and the Redis
       commands it sends while nothing happens (against the same triggerer idle with no
       trigger), then a signed ``sync_end`` for a sample of connectors through the real
       webhook server: webhook ack -> trigger fired (the ``fired_at`` the trigger puts in
       its event) and ack -> sensor task finished, and that no other sensor woke.
``backfill-cost`` (or ``--backfill-cost``)
    5. A sensor task's duration against no-op tasks' in one backfill (Airflow's REST
       API) of a @daily DAG whose tasks run one after another, one run at a time, so a
       task's duration is its own, not that of whichever tasks shared the two cores with
       it. Its tasks: the deferrable sensor passing at once (a success after every run's
       data_interval_end) as it comes and with ``do_xcom_push=False``; a no-op
       PythonOperator; a no-op returning a value of the sensor's size (the XCom push is
       Airflow's API call, not the sensor's work); and a no-op that only looks up the
       sensor's Airflow connection: what any task using a connection pays Airflow (in a
       task process each masked field of it is a request to the supervisor), so the last
       ratio is the sensor's own cost. Prints the median and p90 task duration of each,
       and the ratios.

``--quick`` makes each smaller (10^5 syncs instead of 10^6; fewer sensors and runs).
Everything is stopped by PID and every wait is bounded.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import re
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import redis
import requests

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from testkit.own_redis import own_redis  # noqa: E402 (after the path insertion)
from testkit.support import conn_uri, pattern_listeners, payload, signed  # noqa: E402

if TYPE_CHECKING:
    from testkit.airflow_harness import AirflowServer

K = TypeVar("K")
T = TypeVar("T")
UTC = timezone.utc
PREFIX = "bench:"
#: LocalExecutor's parallelism in sections 4 and 5: each deferral needs its task to start
#: once in a task process; more than a few at once only queue on 2 cores.
PARALLELISM = 4


def pct(values: list[float], q: float) -> float:
    return sorted(values)[min(len(values) - 1, int(q * len(values)))]


def wait(what: str, check: Callable[[], T | None], timeout: float, interval: float = 0.5) -> T:
    """Poll ``check()`` until truthy; exit the benchmark with ``what`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got:
            return got
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(interval)


def _sample(
    cases: dict[K, tuple[Any, int, int]], samples: int, budget_s: float
) -> dict[K, list[float]]:
    """Time each case's ``decide_once(target)`` on random targets in its ``(lo, hi)``.

    The cases take turns, one decision each, in an order that rotates every round, for
    at most ``samples`` rounds or ``budget_s`` seconds: whatever drifts meanwhile (the
    shared machine's load, the client's garbage collection, Redis after a load) hits
    every case alike. Sampled one case after the other, the big history's 3,000
    decisions came last, right after its own load of 10^6 syncs, and its p99 (x1.62 the
    small one's) measured that moment, not the history's size.
    """
    rng = random.Random(7)
    keys = list(cases)
    lat: dict[K, list[float]] = {k: [] for k in keys}
    deadline = time.perf_counter() + budget_s
    for i in range(samples):
        if time.perf_counter() >= deadline:
            break
        for key in keys[i % len(keys) :] + keys[: i % len(keys)]:
            decide_once, lo, hi = cases[key]
            target = rng.randint(lo, hi)
            t = time.perf_counter()
            decide_once(target)
            lat[key].append((time.perf_counter() - t) * 1e6)
    return lat


# 1 and 2: the history's reads and decisions (``history``).


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
    from bench._history import load as load_many
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

    load_many(client, PREFIX, events(), retention_ms=t0 + n * dt, now=t0 + n * dt)


def bench_latency(client: redis.Redis, big: int, samples: int = 5000) -> None:
    from fivetran_events import HistoryReader, decide

    reader = HistoryReader(client, PREFIX, 24 * 3600 * 1000)
    start = datetime(2020, 1, 1, tzinfo=UTC)
    step = timedelta(minutes=5)
    loads, cases = {}, {}
    for n in (100, big):
        t = time.perf_counter()
        bulk_history(client, f"n{n}", n, start, step)
        loads[n] = time.perf_counter() - t
        lo, hi = int(start.timestamp() * 1000), int((start + step * n).timestamp() * 1000)
        cases[n] = (lambda target, c=f"n{n}": decide(reader.facts(c, target)), lo, hi)
    lat = _sample(cases, samples, float("inf"))
    print(
        "1. decision latency (HistoryReader.facts + decide, one connector, "
        f"{samples} random targets each, interleaved, real redis-server on 127.0.0.1)"
    )
    for n in cases:
        print(
            f"   {n:>9,} syncs: median {statistics.median(lat[n]):7.1f} us   "
            f"p99 {pct(lat[n], 0.99):7.1f} us   (history loaded in {loads[n]:.1f} s)"
        )
    print(
        f"   ratio {big:,} / 100 syncs: median "
        f"x{statistics.median(lat[big]) / statistics.median(lat[100]):.2f}, "
        f"p99 x{pct(lat[big], 0.99) / pct(lat[100], 0.99):.2f}"
    )


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
    every = {
        (kind, n, with_starts): (
            lambda target, f=facts, c=f"sa{n}{with_starts:d}": decide(
                f(c, target), criterion="started_after"
            ),
            lo,
            lo + n * int(step.total_seconds() * 1000),
        )
        for kind, facts in fetch.items()
        for n, with_starts in cases
    }
    try:
        results = _sample(every, samples, budget_s * len(every))
    finally:
        loop.run_until_complete(aclient.aclose())
        loop.close()
    print(
        f"1b. started_after latency (facts + decide, interleaved, up to {samples} random "
        f"targets per case or {budget_s * len(every):g} s in all)"
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


# 3: side by side with astronomer's FivetranSensor (``provider``).


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

    from airflow_plugin.triggers.decision import FivetranSyncDecisionTrigger
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
                    trig: Any = FivetranSyncDecisionTrigger(cid, to_ms(now), recheck_interval=60)
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


# 4: deferred sensors at scale on a real Airflow 3 (``scale``).


SCALE_DAG = """
from airflow.sdk import DAG
from airflow_plugin.sensors import FivetranDateTimeSensor

with DAG("bench_scale", schedule=None, catchup=False, max_active_tasks={n}) as dag:
    FivetranDateTimeSensor.partial(
        task_id="wait", deferrable=True, target_time="{target}", recheck_interval={recheck},
        timeout=7200,
    ).expand(connector_id=[f"scale_{{i}}" for i in range({n})])
"""


@contextmanager
def airflow_with_redis(
    work: Path, capacity: int, **env: str
) -> Iterator[tuple[AirflowServer, str]]:
    """A redis-server and a real Airflow reading the history from it; both stopped after.

    ``env``: more environment for Airflow's components (connections, ``PYTHONPATH``).
    """
    from testkit.airflow_harness import AirflowServer

    with own_redis(work / "redis") as server, ExitStack() as stack:
        airflow = AirflowServer(
            home=work / "airflow",
            triggerer_capacity=capacity,
            extra_env={
                "AIRFLOW_CONN_FIVETRAN_EVENTS_REDIS": conn_uri(server.url, PREFIX),
                "AIRFLOW__CORE__PARALLELISM": str(PARALLELISM),
                **env,
            },
        )
        stack.callback(airflow.stop)
        t = time.monotonic()
        airflow.prepare()
        airflow.start()
        print(f"   (Airflow 3 started in {time.monotonic() - t:.0f} s)")
        yield airflow, server.url


def idle_cost(airflow: AirflowServer, client: redis.Redis, seconds: float) -> tuple[float, float]:
    """The triggerer's CPU % and the Redis commands/s sent while nothing happens."""
    cmds0 = int(client.info("stats")["total_commands_processed"])
    cpu0, t0 = airflow.cpu_seconds("triggerer"), time.monotonic()
    time.sleep(seconds)
    cpu1, t1 = airflow.cpu_seconds("triggerer"), time.monotonic()
    cmds1 = int(client.info("stats")["total_commands_processed"])
    # The first INFO counts itself; neither counts the other reading's.
    return 100 * (cpu1 - cpu0) / (t1 - t0), (cmds1 - cmds0 - 1) / (t1 - t0)


def _deferred_with_triggerer(airflow: AirflowServer) -> int:
    ((count,),) = airflow.query(
        'select count(*) from task_instance ti join "trigger" t on t.id = ti.trigger_id '
        "where ti.dag_id='bench_scale' and ti.state='deferred' and t.triggerer_id is not null"
    )
    return int(count)


def _settled(client: redis.Redis, quiet_s: float = 3.0) -> bool:
    """True once Redis has seen no more than a trickle of commands for ``quiet_s``."""
    before = int(client.info("stats")["total_commands_processed"])
    time.sleep(quiet_s)
    return int(client.info("stats")["total_commands_processed"]) - before < 20


_FIRED = re.compile(r'"fired_at"\s*:\s*([0-9.eE+]+)')


def scale(work: Path, n: int, sample: int, idle_s: float, recheck: float) -> None:
    """Section 4 (see the module docstring)."""
    from testkit.servers import webhook_server

    with airflow_with_redis(work, capacity=n + 100) as (airflow, url):
        client = redis.Redis.from_url(url)
        cpu_empty, cmds_empty = idle_cost(airflow, client, idle_s)
        target = datetime.now(UTC).replace(microsecond=0)
        airflow.add_dag(
            "bench_scale.py", SCALE_DAG.format(n=n, target=target.isoformat(), recheck=recheck)
        )
        airflow.wait_for_parsed("bench_scale", timeout=300)
        t = time.monotonic()
        airflow.trigger("bench_scale", "scale")
        wait(
            f"{n} sensors deferred in the triggerer",
            lambda: _deferred_with_triggerer(airflow) >= n,
            timeout=max(300.0, 3.0 * n),
            interval=2.0,
        )
        took = time.monotonic() - t
        wait("the triggers' first reads to end", lambda: _settled(client), timeout=120, interval=0)
        listeners = pattern_listeners(client)
        numpat = int(client.execute_command("PUBSUB", "NUMPAT"))
        connections = len(client.client_list()) - 1  # not this benchmark's own
        cpu_full, cmds_full = idle_cost(airflow, client, idle_s)
        print(
            f"4. {n} deferred sensors on the real triggerer (capacity {n + 100}, "
            f"recheck_interval {recheck:g} s, LocalExecutor parallelism {PARALLELISM})"
        )
        print(
            f"   deferring all {n} took {took:.0f} s ({took / n * 1e3:.0f} ms per task: "
            "Airflow starts each task once in a task process)"
        )
        print(
            f"   Redis: {listeners} connection(s) with a pattern subscription, PUBSUB NUMPAT "
            f"{numpat}, {connections} client connection(s) in all"
        )
        print(
            f"   triggerer idle over {idle_s:g} s: CPU {cpu_empty:.1f} % with no trigger, "
            f"{cpu_full:.1f} % with {n} (x{cpu_full / max(cpu_empty, 0.01):.2f}); Redis "
            f"commands/s {cmds_empty:.1f} vs {cmds_full:.1f} (re-checks: {n} every "
            f"{recheck:g} s = {n / recheck:.1f} decisions/s)"
        )
        with webhook_server(
            url, work, FIVETRAN_EVENTS_KEY_PREFIX=PREFIX, FIVETRAN_EVENTS_AIRFLOW_URL=""
        ) as (base, _proc):
            wake_up(airflow, base, n, sample)


def wake_up(airflow: AirflowServer, base: str, n: int, sample: int) -> None:
    """Send a signed sync_end for ``sample`` connectors; time each trigger and task."""
    rng = random.Random(5)
    chosen = sorted(rng.sample(range(n), sample))
    session = requests.Session()
    sent: dict[int, tuple[float, float]] = {}
    for i in chosen:
        raw, headers = signed(
            payload("sync_end", f"scale_{i}", datetime.now(UTC), sync_id=f"scale-sync-{i}")
        )
        t_send = time.time()
        resp = session.post(base + "/webhooks/fivetran", data=raw, headers=headers, timeout=10)
        sent[i] = (t_send, time.time())
        if resp.status_code != 200:
            raise SystemExit(f"the webhook answered {resp.status_code}: {resp.text[:200]}")
        time.sleep(0.1)
    fired: dict[int, float] = {}
    done: dict[int, float] = {}
    marks = ",".join(str(i) for i in chosen)

    def all_done() -> bool:
        # next_kwargs holds the trigger's event from its firing until the task ends.
        for idx, state, kwargs, end in airflow.query(
            "select map_index, state, next_kwargs, end_date from task_instance where "
            f"dag_id='bench_scale' and map_index in ({marks})"
        ):
            if idx not in fired and kwargs and (m := _FIRED.search(str(kwargs))):
                fired[idx] = float(m.group(1))
            if state == "success" and end and idx not in done:
                done[idx] = datetime.fromisoformat(str(end)).replace(tzinfo=UTC).timestamp()
        return len(done) == len(chosen)

    wait("the sampled sensors to finish", all_done, timeout=120 + 2.0 * sample, interval=0.02)
    ((still,),) = airflow.query(
        "select count(*) from task_instance where dag_id='bench_scale' and state='deferred'"
    )
    ack_fired = [(fired[i] - sent[i][1]) * 1e3 for i in chosen if i in fired]
    send_fired = [(fired[i] - sent[i][0]) * 1e3 for i in chosen if i in fired]
    ack_done = [(done[i] - sent[i][1]) * 1e3 for i in chosen]
    print(f"   wake-up of {sample} sampled sensors (signed sync_end through the webhook server):")
    if ack_fired:
        print(
            f"     POST sent -> trigger fired: median {statistics.median(send_fired):6.1f} ms"
            f"  p99 {pct(send_fired, 0.99):6.1f} ms  max {max(send_fired):6.1f} ms"
        )
        print(
            f"     webhook ack -> trigger fired: median {statistics.median(ack_fired):6.1f} ms"
            f"  p99 {pct(ack_fired, 0.99):6.1f} ms  max {max(ack_fired):6.1f} ms"
            f"  ({len(ack_fired)} of {sample} events read before the task ended)"
        )
    print(
        f"     webhook ack -> sensor task success (scheduler, executor, task process): "
        f"median {statistics.median(ack_done) / 1e3:.1f} s  p99 {pct(ack_done, 0.99) / 1e3:.1f} s"
    )
    print(f"     sensors still deferred: {still} of {n - sample} not sent an event")


# 5: a sensor task's cost in a backfill on a real Airflow 3 (``backfill-cost``).


BACKFILL_DAG = """
from datetime import datetime, timezone

from airflow.providers.standard.operators.python import PythonOperator
from airflow.sdk import DAG, BaseHook
from airflow.timetables.interval import CronDataIntervalTimetable
from airflow_plugin.sensors import FivetranDateTimeSensor


def nothing():
    return None


def like_the_sensor():
    # What the sensor returns on success (the deciding sync), so its XCom costs the same.
    return {"sync_id": "bf0", "status": "SUCCESSFUL", "time": "2026-10-02T01:00:00.000Z",
            "reason": None, "connector_id": "bf_conn", "target": "2026-10-02T00:00:00.000Z"}


def lookup_only():
    # Airflow's lookup of the sensor's connection, as the sensor's hook makes it.
    BaseHook.get_connection("fivetran_events_redis")


# One task at a time (a chain, one run at a time): each duration is the task's own, not
# who shared the two cores with it. Each compared pair is adjacent in the chain.
with DAG("bench_backfill_cost", schedule=CronDataIntervalTimetable("@daily", timezone="UTC"),
         start_date=datetime(2026, 1, 1, tzinfo=timezone.utc), catchup=False,
         max_active_runs=1) as dag:
    (
        PythonOperator(task_id="noop_conn", python_callable=lookup_only)
        >> PythonOperator(task_id="noop", python_callable=nothing)
        >> FivetranDateTimeSensor(task_id="sensor_no_xcom", connector_id="bf_conn",
                                  deferrable=True, timeout=600, do_xcom_push=False)
        >> PythonOperator(task_id="noop_xcom", python_callable=like_the_sensor)
        >> FivetranDateTimeSensor(task_id="sensor", connector_id="bf_conn", deferrable=True,
                                  timeout=600)
    )
"""
#: The backfill's tasks, as printed: the sensor variants and the no-ops they compare with.
BACKFILL_TASKS = {
    "sensor": "sensor (default: returns the sync)",
    "sensor_no_xcom": "sensor, do_xcom_push=False",
    "noop": "no-op",
    "noop_xcom": "no-op returning the sensor's XCom",
    "noop_conn": "no-op looking up the connection",
}
#: Which ratio answers which question: (task, the task it is compared with).
BACKFILL_RATIOS = (
    ("sensor_no_xcom", "noop"),
    ("sensor", "noop_xcom"),
    ("sensor", "noop"),
    ("noop_conn", "noop"),
    ("sensor_no_xcom", "noop_conn"),
)


def task_instances(airflow: AirflowServer, dag_id: str) -> list[dict[str, Any]]:
    """Return every task instance of ``dag_id``, page by page (the API caps a page at 100)."""
    out: list[dict[str, Any]] = []
    while True:
        page = airflow.get(
            f"/api/v2/dags/{dag_id}/dagRuns/~/taskInstances",
            params={"limit": 100, "offset": len(out), "order_by": "id"},
        ).json()
        out.extend(page["task_instances"])
        if not page["task_instances"] or len(out) >= page["total_entries"]:
            return out


def backfill_cost(work: Path, runs: int) -> None:
    """Section 5 (see the module docstring)."""
    from fivetran_events import HistoryWriter, parse_event
    from testkit.support import encode

    first = datetime(2026, 10, 1, tzinfo=UTC)
    with airflow_with_redis(work, capacity=1000) as (airflow, url):
        writer = HistoryWriter(redis.Redis.from_url(url), PREFIX, 800 * 86_400_000)
        for d in range(runs + 2):
            ended = first + timedelta(days=d, hours=1)
            writer.record(parse_event(encode(payload("sync_end", "bf_conn", ended, f"bf{d}"))))
        airflow.add_dag("bench_backfill_cost.py", BACKFILL_DAG)
        airflow.wait_for_parsed("bench_backfill_cost", timeout=300)
        t = time.monotonic()
        resp = airflow.request(
            "POST",
            "/api/v2/backfills",
            json={
                "dag_id": "bench_backfill_cost",
                "from_date": first.isoformat(),
                "to_date": (first + timedelta(days=runs - 1)).isoformat(),
                "max_active_runs": 1,
            },
        )
        if resp.status_code != 200:
            raise SystemExit(f"backfill refused: {resp.status_code} {resp.text[:300]}")

        def finished() -> list[tuple[Any, ...]]:
            # A component that died (the scheduler can, on a dag_run StaleDataError under
            # SQLite) ends the benchmark at once with its log, not at the timeout.
            airflow._check_alive("the backfill ran")
            rows = airflow.query(
                "select state from dag_run where dag_id='bench_backfill_cost' "
                "and state in ('success', 'failed')"
            )
            return rows if len(rows) >= runs else []

        states = wait(f"{runs} backfill runs", finished, timeout=60 + 20.0 * runs, interval=1.0)
        took = time.monotonic() - t
        tis = task_instances(airflow, "bench_backfill_cost")
    # run id -> task id -> duration: a task's run-mates ran under the same load.
    by_run: dict[str, dict[str, float]] = {}
    for ti in tis:
        # Only the backfill's runs: catchup=False still schedules the latest interval.
        if ti["state"] == "success" and ti["dag_run_id"].startswith("backfill__"):
            start = datetime.fromisoformat(ti["start_date"])
            end = datetime.fromisoformat(ti["end_date"])
            by_run.setdefault(ti["dag_run_id"], {})[ti["task_id"]] = (end - start).total_seconds()
    ok = sum(1 for (s,) in states if s == "success")
    print(
        f"5. backfill of {runs} @daily runs (REST POST /api/v2/backfills, one run and one "
        f"task at a time): {ok} succeeded in {took:.0f} s"
    )
    for task_id, label in BACKFILL_TASKS.items():
        values = [run[task_id] for run in by_run.values() if task_id in run]
        print(
            f"   {label:<34} task duration: median {statistics.median(values):.3f} s  "
            f"p90 {pct(values, 0.9):.3f} s  ({len(values)} tasks)"
        )
    for task_id, other in BACKFILL_RATIOS:
        s = [run[task_id] for run in by_run.values() if task_id in run]
        o = [run[other] for run in by_run.values() if other in run]
        # The same ratio within each run, whose median the load of the moment moves less.
        paired = [
            run[task_id] / run[other] for run in by_run.values() if {task_id, other} <= set(run)
        ]
        print(
            f"   ratio {task_id} / {other}: median "
            f"x{statistics.median(s) / statistics.median(o):.3f}  "
            f"p90 x{pct(s, 0.9) / pct(o, 0.9):.3f}  "
            f"per run: median x{statistics.median(paired):.3f}"
        )
    print("   (goal: the sensor within x1.05 of the no-op it stands for)")


# The command line.

#: The subcommands, each with what it runs; ``local`` is the default.
COMMANDS = {
    "local": "1-3 on 127.0.0.1 (history, then provider)",
    "history": "1-2: decision latency at 10^2 and 10^6 syncs, a 10-year backfill",
    "provider": "3: side by side with airflow-provider-fivetran-async's FivetranSensor",
    "scale": "4: deferred sensors at scale on a real Airflow 3",
    "backfill-cost": "5: a sensor task's duration against a no-op's in one backfill",
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Parse the command line; ``args.commands`` lists what to run, in order.

    ``--scale`` and ``--backfill-cost`` are the older spellings of the two subcommands;
    both may be given at once (the backfill then runs first, as it always did).
    """
    parser = argparse.ArgumentParser(
        description=(__doc__ or "").splitlines()[0],
        epilog="commands: " + "; ".join(f"{k}: {v}" for k, v in COMMANDS.items()),
    )
    parser.add_argument("command", nargs="?", choices=list(COMMANDS), help="(default: local)")
    parser.add_argument("--quick", action="store_true", help="make every section smaller")
    local = parser.add_argument_group("history and provider (1-3)")
    local.add_argument("--trials", type=int, default=5, help="3b: syncs timed per trigger")
    local.add_argument(
        "--provider-poke",
        type=float,
        default=4.0,
        help="the provider trigger's poll interval in s (its default: 4)",
    )
    real = parser.add_argument_group("on a real Airflow 3 (4-5)")
    real.add_argument("--scale", action="store_true", help="the same as the scale command")
    real.add_argument(
        "--backfill-cost", action="store_true", help="the same as the backfill-cost command"
    )
    real.add_argument("--sensors", type=int, help="deferred sensors (1000; --quick 100)")
    real.add_argument("--sample", type=int, help="connectors sent a sync_end (50; --quick 20)")
    real.add_argument("--idle", type=float, help="seconds of idle CPU sampling (30; --quick 10)")
    real.add_argument(
        "--recheck", type=float, help="the sensors' recheck_interval in s (their default)"
    )
    real.add_argument("--runs", type=int, help="backfill runs (24; --quick 8)")
    args = parser.parse_args(argv)
    chosen = {args.command} - {None}
    chosen |= {"backfill-cost"} if args.backfill_cost else set()
    chosen |= {"scale"} if args.scale else set()
    if "local" in chosen or not chosen:
        chosen = (chosen - {"local"}) | {"history", "provider"}
    args.commands = [c for c in ("history", "provider", "backfill-cost", "scale") if c in chosen]
    return args


def run_local(args: argparse.Namespace) -> None:
    """Sections 1-3 (those chosen) on a redis-server of their own and Airflow's defaults."""
    from urllib.parse import quote

    big = 10**5 if args.quick else 10**6
    with tempfile.TemporaryDirectory(prefix="fte-bench-") as tmp:
        work = Path(tmp)
        os.environ.setdefault("AIRFLOW_HOME", str(work / "airflow"))
        os.environ["AIRFLOW__CORE__LOAD_EXAMPLES"] = "False"
        os.environ["AIRFLOW__LOGGING__LOGGING_LEVEL"] = "WARNING"
        with own_redis(work / "redis") as server:  # no AOF: 10^6 syncs load faster
            url = server.url
            os.environ["AIRFLOW_CONN_FIVETRAN_EVENTS_REDIS"] = f"{url}?key_prefix={quote(PREFIX)}"
            os.environ["AIRFLOW_CONN_FIVETRAN_DEFAULT"] = "fivetran://key:secret@"
            if "history" in args.commands:
                client = redis.Redis.from_url(url)
                bench_latency(client, big)
                bench_started_after(client, url, big)
                bench_backfill(client)
            if "provider" in args.commands:
                seed_calendar_calls(url, PREFIX)
                asyncio.run(deferred_latency(url, PREFIX, args.trials, args.provider_poke))


def run_real(args: argparse.Namespace) -> None:
    """Sections 4 and 5 (those chosen), each on an Airflow and a redis-server of its own."""
    from airflow_plugin.triggers.decision import DEFAULT_RECHECK_INTERVAL

    quick = bool(args.quick)
    if "backfill-cost" in args.commands:
        with tempfile.TemporaryDirectory(prefix="fte-bench-") as work:
            backfill_cost(Path(work), args.runs or (8 if quick else 24))
    if "scale" in args.commands:
        n = args.sensors or (100 if quick else 1000)
        with tempfile.TemporaryDirectory(prefix="fte-bench-") as work:
            scale(
                Path(work),
                n,
                min(n, args.sample or (20 if quick else 50)),
                args.idle or (10.0 if quick else 30.0),
                args.recheck or DEFAULT_RECHECK_INTERVAL,
            )


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if {"history", "provider"} & set(args.commands):
        run_local(args)
    run_real(args)


if __name__ == "__main__":
    main()
