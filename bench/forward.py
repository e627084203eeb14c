"""Benchmark: Fivetran webhook -> Airflow asset event -> DAG run, both paths, against polling.

Starts everything it measures on 127.0.0.1 and stops exactly those processes by PID
(bench/_forward_stack.py): a redis-server, the webhook server, ``fivetran-events worker``
(a pool of ``--concurrency`` processes, its default unless given) and a real Airflow 3 on
PostgreSQL with the LocalExecutor (testkit/airflow_harness.py, as the system tests run it),
which the worker reaches through a loopback proxy that can hold a POST
(testkit/delaying_proxy.py). After a warm-up (one delivery per connector, and Airflow
done running their DAGs: steady state) it sends N signed ``sync_end`` deliveries to
each of two connectors, a few seconds apart so each gets a DAG run of its own
(bench/_forward_measure.py): one connector's successes reach Airflow through the REST
worker, the other's through the watcher (``FivetranSyncWatcherTrigger`` in Airflow's own
triggerer, reading the same Redis; its REST deliveries go to a URI no DAG uses, so
nothing else posts to Airflow). It prints, side by side for both paths:

- webhook acknowledged -> asset event created (Airflow's own event timestamp): our part;
- webhook acknowledged -> the asset-scheduled DAG run started (Airflow's run start_date);
- what a sensor polling every 60 s (the Fivetran sensor's default ``poke_interval``)
  would need to notice the same syncs: the wait to its next poke, for every phase of the
  poke schedule against the delivery times (a uniform spread, in 100 ms steps).

Then the REST path once more, N deliveries with one slow answer among them: the proxy
holds the second one's POST for Airflow's timeout (the worker gives up on it, Airflow
commits it then, as with a slow database). Printed beside the clean run: ack -> event and
ack -> pickup of the other N-1 (steady state: the held delivery left out), and the held
one on a line of its own.

Usage: ``python -m bench.forward [-n 20] [--gap 3.0] [--concurrency N] [--keep-logs]``
(about 2 + 6 N / 60 minutes on 2 cores). The worker logs each delivery's phases
(prepare, mark, POST): ``--keep-logs`` keeps them, and Airflow's, to look at after.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._forward_measure import measure, percentile
from bench._forward_stack import AIRFLOW_SETUP, HOLD_S, forward_stack

POKE_INTERVAL_S = 60.0


def run(n: int, gap: float, concurrency: int | None, work: Path) -> dict[str, Any]:
    with forward_stack(work, concurrency) as stack:
        r = measure(stack, n, gap)
    # A sensor poking every 60 s notices a sync at its next poke. Over every phase of the
    # poke schedule (100 ms steps) the wait is spread uniformly over [0, 60 s).
    steps = int(POKE_INTERVAL_S * 10)
    r["poll"] = [((p / 10.0) - a) % POKE_INTERVAL_S for a in r["acks"] for p in range(steps)]
    return r


def line(label: str, xs: list[float], unit: str = "s") -> str:
    scale = 1000.0 if unit == "ms" else 1.0
    return (
        f"{label:58} p50 {percentile(xs, 0.5) * scale:8.1f} {unit}   "
        f"p99 {percentile(xs, 0.99) * scale:8.1f} {unit}   "
        f"max {max(xs) * scale:8.1f} {unit}"
    )


def report(r: dict[str, Any], concurrency: int | None) -> None:
    pool = f"--concurrency {concurrency}" if concurrency else "its default concurrency"
    print(
        f"forward benchmark: {r['n']} signed sync_end deliveries, real Redis, worker with "
        f"{pool}, {AIRFLOW_SETUP} on {os.cpu_count()} cores"
    )
    print(line("webhook ack -> Airflow asset event created (our part)", r["to_event"], "ms"))
    print(line("  of which: ack -> worker picks the job up", r["queued"], "ms"))
    print(line("  of which: job picked up -> Airflow created the event", r["attempt"], "ms"))
    held = f"one POST held {HOLD_S:g} s"
    print(line(f"{held}: ack -> asset event, the other {r['n'] - 1}", r["slow_to_event"], "ms"))
    print(line(f"{held}: ack -> pickup, the other {r['n'] - 1}", r["slow_queued"], "ms"))
    if r["held_to_event"] is not None:
        label = f"{held}: ack -> asset event of the held one"
        print(f"{label:58} {r['held_to_event'] * 1000:8.1f} ms")
    print(line("webhook ack -> asset-scheduled DAG run started", r["to_run"]))
    print(line("watcher: webhook ack -> asset event created", r["watch_to_event"], "ms"))
    print(line("watcher: webhook ack -> asset-scheduled DAG run started", r["watch_to_run"]))
    print(
        f"{'watcher p50 / REST worker p50 (webhook -> DAG run)':58} "
        f"{statistics.median(r['watch_to_run']) / statistics.median(r['to_run']):8.2f}x"
    )
    print(line("polling every 60 s (default poke_interval), same syncs", r["poll"]))
    print(
        f"{'polling p50 / push-to-DAG-run p50':58} "
        f"{statistics.median(r['poll']) / statistics.median(r['to_run']):8.1f}x"
    )
    if r["retried"]:
        print(
            f"note: {r['retried']} deliveries needed more than one attempt (Airflow answered "
            "5xx or timed out)"
        )
    if r["shared_runs"]:
        print(f"note: {r['shared_runs']} deliveries shared a DAG run with another")


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("-n", type=int, default=20, help="deliveries (default 20)")
    ap.add_argument(
        "--gap",
        type=float,
        default=3.0,
        help="seconds between deliveries (default 3: one DAG run each)",
    )
    ap.add_argument(
        "--concurrency",
        type=int,
        help="the worker's --concurrency (default: the worker's own default)",
    )
    ap.add_argument(
        "--keep-logs", action="store_true", help="keep the logs (worker, Airflow) and say where"
    )
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="fte-bench-"))
    try:
        r = run(args.n, args.gap, args.concurrency, work)
    except BaseException:
        print(f"the logs of this run stay in {work}", file=sys.stderr)
        raise
    report(r, args.concurrency)
    if args.keep_logs:
        print(f"logs: {work}")
    else:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
