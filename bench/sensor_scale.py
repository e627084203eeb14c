"""The deferred sensor at scale, on a real Airflow 3 (``bench/sensor.py``).

4. ``--scale``: N deferred ``FivetranDateTimeSensor`` tasks (one mapped task, one
   connector each) held by the real triggerer: the time Airflow takes to defer them
   all, the Redis pattern subscriptions and connections they hold, the triggerer's CPU
   and the Redis commands it sends while nothing happens (against the same triggerer
   idle with no trigger), then a signed ``sync_end`` for a sample of connectors through
   the real webhook server: webhook ack -> trigger fired (the ``fired_at`` the trigger
   puts in its event) and ack -> sensor task finished, and that no other sensor woke.
5. ``--backfill-cost``: ``bench/sensor_backfill.py``.

Airflow runs on 127.0.0.1 (``testkit/airflow_harness.py``: SQLite, LocalExecutor) with
its own redis-server and webhook server; everything is stopped by PID, every wait is
bounded.
"""

from __future__ import annotations

import argparse
import random
import re
import statistics
import tempfile
import time
from datetime import datetime
from pathlib import Path

import redis
import requests

from bench._sensor_airflow import PARALLELISM, PREFIX, UTC, airflow_with_redis, pct, wait
from testkit.airflow_harness import AirflowServer
from testkit.support import pattern_listeners, payload, signed

SCALE_DAG = """
from airflow.sdk import DAG
from airflow_plugin.sensors import FivetranDateTimeSensor

with DAG("bench_scale", schedule=None, catchup=False, max_active_tasks={n}) as dag:
    FivetranDateTimeSensor.partial(
        task_id="wait", deferrable=True, target_time="{target}", recheck_interval={recheck},
        timeout=7200,
    ).expand(connector_id=[f"scale_{{i}}" for i in range({n})])
"""


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


def add_options(parser: argparse.ArgumentParser) -> None:
    """Add the options of sections 4 and 5 to ``bench/sensor.py``'s parser."""
    group = parser.add_argument_group("on a real Airflow 3 (bench/sensor_scale.py)")
    group.add_argument("--scale", action="store_true", help="4: deferred sensors at scale")
    group.add_argument(
        "--backfill-cost", action="store_true", help="5: sensor vs no-op task duration"
    )
    group.add_argument("--sensors", type=int, help="deferred sensors (1000; --quick 100)")
    group.add_argument("--sample", type=int, help="connectors sent a sync_end (50; --quick 20)")
    group.add_argument("--idle", type=float, help="seconds of idle CPU sampling (30; --quick 10)")
    group.add_argument(
        "--recheck", type=float, help="the sensors' recheck_interval in s (their default)"
    )
    group.add_argument("--runs", type=int, help="backfill runs (24; --quick 8)")


def run(args: argparse.Namespace) -> None:
    """Sections 4 and 5, each on an Airflow and a redis-server of its own."""
    from airflow_plugin.triggers import DEFAULT_RECHECK_INTERVAL

    quick = bool(args.quick)
    if args.backfill_cost:
        from bench.sensor_backfill import backfill_cost

        with tempfile.TemporaryDirectory(prefix="fte-bench-") as work:
            backfill_cost(Path(work), args.runs or (8 if quick else 24))
    if args.scale:
        n = args.sensors or (100 if quick else 1000)
        with tempfile.TemporaryDirectory(prefix="fte-bench-") as work:
            scale(
                Path(work),
                n,
                min(n, args.sample or (20 if quick else 50)),
                args.idle or (10.0 if quick else 30.0),
                args.recheck or DEFAULT_RECHECK_INTERVAL,
            )
