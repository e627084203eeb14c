"""Trigger a sync and wait: ``FivetranSyncOperator`` against astronomer's ``FivetranOperator``.

Both run deferrable on a real Airflow 3 (``bench.sensor.airflow_with_redis``: a
redis-server of its own and Airflow's real components) against one Fivetran stand-in
(``testkit/fivetran_api.py``) that ends each sync ``--sync-seconds`` after it starts and
POSTs its signed ``sync_start``/``sync_end`` to the real webhook server (gunicorn), which
records them in the same Redis. Astronomer's hook is pointed at the stand-in by its
``api_protocol``/``api_host`` class attributes, set in every Airflow process by a
``sitecustomize`` on ``PYTHONPATH`` (its trigger runs in the triggerer, which never
reads the DAG file).

For each operator, ``--syncs`` DAG runs one after the other, each triggering one sync:

- Fivetran API calls per triggered sync (the stand-in counts every call);
- the time from the sync's end (the stand-in's clock) to the task's success
  (``task_instance.end_date``), p50 and p99;
- the same for ours with the webhook silenced (``silent``): the fallback reads the
  connection after ``--fallback-after`` seconds, then every ``poll_frequency``.

    python -m bench.sync [--syncs N] [--sync-seconds S] [--poll-frequency S]
                         [--fallback-after S] [--min-deferral S] [--scheduler-idle-sleep S]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench.sensor import PREFIX, airflow_with_redis, pct, wait
from fivetran_events.timeutil import parse_iso
from testkit.fivetran_api import FivetranStandIn, serving
from testkit.processes import stop_group
from testkit.servers import webhook_server
from testkit.support import SECRET

if TYPE_CHECKING:
    from testkit.airflow_harness import AirflowServer

KEY, API_SECRET = "bench-key", "bench-secret"

#: Points astronomer's FivetranHook (class attributes) at the stand-in, in every Python
#: process that imports it, without importing Airflow at start-up.
SITECUSTOMIZE = """
import importlib.abc, importlib.util, os, sys

_HOST = os.environ.get("FTE_BENCH_FIVETRAN_HOST")


class _PointAtStandIn(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != "fivetran_provider_async.hooks":
            return None
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(name)
        finally:
            sys.meta_path.insert(0, self)
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            module.FivetranHook.api_protocol = "http"
            module.FivetranHook.api_host = _HOST

        spec.loader.exec_module = exec_module
        return spec


if _HOST:
    sys.meta_path.insert(0, _PointAtStandIn())
"""

DAG_FILE = """
from datetime import datetime, timezone

from airflow.sdk import DAG
from fivetran_provider_async.operators import FivetranOperator

from airflow_plugin.operators.sync import FivetranSyncOperator

START = datetime(2026, 1, 1, tzinfo=timezone.utc)

with DAG("bench_sync_ours", schedule=None, start_date=START, catchup=False):
    FivetranSyncOperator(task_id="sync", connector_id="bench_ours", min_deferral={hold})

with DAG("bench_sync_theirs", schedule=None, start_date=START, catchup=False):
    FivetranOperator(task_id="sync", connector_id="bench_theirs", deferrable=True,
                     poll_frequency={poll})

with DAG("bench_sync_fallback", schedule=None, start_date=START, catchup=False):
    FivetranSyncOperator(task_id="sync", connector_id="bench_silent",
                         fallback_after={fallback}, poll_frequency={poll},
                         min_deferral={hold})
"""


@contextmanager
def beside_astronomer(
    work: Path, api: FivetranStandIn, partition_grain: str | None = None, **env: str
) -> Iterator[AirflowServer]:
    """A real Airflow 3 where astronomer's provider and ours both call ``api`` (served
    here) as ``fivetran_default``, and ``api``'s webhooks reach a real webhook server on
    the history Airflow reads. ``PYTHONPATH`` puts this tree's packages first.

    ``partition_grain``: forwarding on, to this Airflow, at this
    ``FIVETRAN_EVENTS_PARTITION_GRAIN`` (the webhook server's and a ``fivetran-events
    worker``'s, started here and stopped by PID); off if None.
    """
    site = work / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(SITECUSTOMIZE)
    with serving(api):
        conn = {"conn_type": "http", "host": api.url, "login": KEY, "password": API_SECRET}
        env = {
            "AIRFLOW_CONN_FIVETRAN_DEFAULT": json.dumps(conn),
            "FTE_BENCH_FIVETRAN_HOST": api.base[1],
            "PYTHONPATH": os.pathsep.join((str(site), str(Path(__file__).resolve().parents[1]))),
            **env,
        }
        with airflow_with_redis(work, 100, **env) as (airflow, redis_url), ExitStack() as stack:
            ours = {"FIVETRAN_EVENTS_AIRFLOW_URL": "", "FIVETRAN_EVENTS_KEY_PREFIX": PREFIX}
            if partition_grain is not None:
                ours.update(
                    FIVETRAN_EVENTS_AIRFLOW_URL=airflow.url,
                    FIVETRAN_EVENTS_AIRFLOW_USERNAME=airflow.username,
                    FIVETRAN_EVENTS_AIRFLOW_PASSWORD=airflow.password,
                    FIVETRAN_EVENTS_REDIS_URL=redis_url,
                    FIVETRAN_EVENTS_WEBHOOK_SECRETS=SECRET,
                    FIVETRAN_EVENTS_PARTITION_GRAIN=partition_grain,
                    PROMETHEUS_MULTIPROC_DIR=str(work),  # the webhook server's
                )
            base, _ = stack.enter_context(webhook_server(redis_url, work, 1, None, **ours))
            if partition_grain is not None:
                # Imported here: bench._forward_stack loads the Airflow harness, which
                # tests/unit (test_bench_dropin.py imports this module) must not.
                from bench._forward_stack import _spawn

                worker = [str(Path(sys.executable).parent / "fivetran-events"), "worker"]
                environ = {k: v for k, v in os.environ.items() if "FIVETRAN_EVENTS_" not in k}
                stack.callback(stop_group, _spawn(worker, {**environ, **ours}, work / "worker.log"))
            api.webhook_url, api.webhook_secret = f"{base}/webhooks/fivetran", SECRET
            yield airflow


#: The operator's log line saying when its trigger fired, after the sync's end.
WOKEN = re.compile(r"woken (\d+\.\d+) s after the sync ended")


def _task_log(airflow: Any, run_id: str) -> str:
    logs = sorted(airflow.home.rglob(f"run_id={run_id}/**/*.log"))
    return "".join(p.read_text(errors="replace")[-4000:] for p in logs)


#: What Airflow's scheduler logs when it fails a task on a stale executor event.
STALE = "finished with state success, but the task instance's state attribute is"


class LostByAirflow(Exception):
    """The task was failed by Airflow's scheduler on a stale executor event."""


def _end_date(airflow: Any, dag_id: str, run_id: str) -> datetime | None:
    rows = airflow.query(
        "select state, end_date from task_instance where dag_id=%s and run_id=%s", dag_id, run_id
    )
    if not rows or rows[0][0] not in ("success", "failed"):
        return None
    if rows[0][0] != "success":
        scheduler = (airflow.home / "scheduler.log").read_text(errors="replace")
        if any(run_id in line and STALE in line for line in scheduler.splitlines()):
            # Airflow's race, not the operator's: the stale success of the task's exit on
            # defer() is read after the trigger fired and the task was queued again
            # (apache/airflow#67287, #72716), and the task is failed.
            raise LostByAirflow(run_id)
        raise SystemExit(f"{dag_id} {run_id} failed:\n{_task_log(airflow, run_id)}")
    return parse_iso(str(rows[0][1]).replace(" ", "T"))


def measure(airflow: Any, api: FivetranStandIn, dag_id: str, syncs: int) -> dict[str, Any]:
    """Run ``dag_id`` ``syncs`` times, one after the other; calls and end-to-success.

    A run whose task Airflow failed on a stale executor event is run again (``lost``).
    """
    calls: list[int] = []
    latency: list[float] = []
    lost = 0
    woken: list[float] = []
    while len(calls) < syncs:
        before, started = api.total_calls, len(api.started)
        run_id = f"r{len(calls)}-{lost}"
        airflow.trigger(dag_id, run_id)

        def done(r: str = run_id) -> datetime | None:
            return _end_date(airflow, dag_id, r)

        try:
            ended_at = wait(f"{dag_id} {run_id}", done, 600, 0.1)
        except LostByAirflow:
            lost += 1
            if lost > syncs:
                raise
            continue
        calls.append(api.total_calls - before)
        woken += [float(w) for w in WOKEN.findall(_task_log(airflow, run_id))]
        (sync_id,) = [s[1] for s in api.started[started:]][-1:]
        sync_end = api.ended[sync_id][0]
        latency.append((ended_at - sync_end).total_seconds())
    return {"calls": calls, "latency": latency, "lost": lost, "woken": woken}


def row(name: str, got: dict[str, Any]) -> str:
    lat = got["latency"]
    return (
        f"| {name} | {statistics.mean(got['calls']):.1f} ({min(got['calls'])}-"
        f"{max(got['calls'])}) | {pct(lat, 0.5):.2f} | {pct(lat, 0.99):.2f} | {got['lost']} |"
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--syncs", type=int, default=8, help="DAG runs per operator")
    # Longer than the operator's default min_deferral (10 s), which a sync of minutes
    # never meets; a shorter sync measures the hold, not the wake-up.
    parser.add_argument("--sync-seconds", type=float, default=15.0)
    parser.add_argument("--poll-frequency", type=float, default=15.0, help="astronomer's 15")
    parser.add_argument("--fallback-after", type=float, default=10.0)
    parser.add_argument(
        "--min-deferral", type=float, default=10.0, help="ours: the hold after deferring"
    )
    parser.add_argument(
        "--scheduler-idle-sleep",
        type=float,
        default=1.0,
        help="Airflow's [scheduler] scheduler_idle_sleep_time (its default 1 s)",
    )
    args = parser.parse_args(argv)
    env = {
        # The operator's INFO line saying when its trigger fired.
        "AIRFLOW__LOGGING__LOGGING_LEVEL": "INFO",
        # An idle scheduler sleeps this long before it queues a resumed task.
        "AIRFLOW__SCHEDULER__SCHEDULER_IDLE_SLEEP_TIME": str(args.scheduler_idle_sleep),
    }
    with tempfile.TemporaryDirectory(prefix="fte-bench-sync-") as tmp:
        api = FivetranStandIn(sync_seconds=args.sync_seconds, api_key=KEY, api_secret=API_SECRET)
        # A connector that synced before: astronomer's operator cannot start on one
        # that never did (it parses the previous succeeded_at/failed_at).
        before = datetime.now(timezone.utc) - timedelta(days=1)
        for cid in ("bench_ours", "bench_theirs", "bench_silent"):
            api.connector(cid, succeeded_at=before, failed_at=before - timedelta(days=1))
        with beside_astronomer(Path(tmp), api, **env) as airflow:
            airflow.add_dag(
                "bench_sync.py",
                DAG_FILE.format(
                    poll=args.poll_frequency,
                    fallback=args.fallback_after,
                    hold=args.min_deferral,
                ),
            )
            airflow.wait_for_parsed("bench_sync_ours", "bench_sync_theirs")
            t = time.monotonic()
            theirs = measure(airflow, api, "bench_sync_theirs", args.syncs)
            ours = measure(airflow, api, "bench_sync_ours", args.syncs)
            api.silent = True
            fallback = measure(airflow, api, "bench_sync_fallback", args.syncs)
            took = time.monotonic() - t
    print(
        f"\nTrigger a sync and wait, {args.syncs} syncs each of {args.sync_seconds:g} s, "
        f"real Airflow 3, deferrable, scheduler_idle_sleep_time {args.scheduler_idle_sleep:g} s "
        f"({took:.0f} s):\n"
    )
    print(
        "| operator | Fivetran API calls per sync (range) | end to success p50 s | p99 s "
        "| runs failed by Airflow's stale-event race |"
    )
    print("|---|---|---|---|---|")
    print(row("ours, webhook (FivetranSyncOperator)", ours))
    print(row(f"astronomer FivetranOperator, poll_frequency={args.poll_frequency:g}", theirs))
    print(
        row(
            f"ours, webhook silenced (fallback after {args.fallback_after:g} s, "
            f"poll {args.poll_frequency:g} s)",
            fallback,
        )
    )
    if ours["woken"]:
        w = ours["woken"]
        print(
            f"\nours, the trigger's wake-up after the sync's end (the operator's log): "
            f"p50 {pct(w, 0.5) * 1e3:.0f} ms, p99 {pct(w, 0.99) * 1e3:.0f} ms; the rest of "
            "end-to-success is Airflow resuming the deferred task"
        )
    calls = statistics.mean(theirs["calls"]) / statistics.mean(ours["calls"])
    p50 = pct(theirs["latency"], 0.5) / max(pct(ours["latency"], 0.5), 1e-3)
    print(f"\nratio astronomer/ours: API calls x{calls:.1f}, end to success p50 x{p50:.1f}")


if __name__ == "__main__":
    main()
