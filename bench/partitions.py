"""Benchmark: a sync's end to its partitioned DAG run, against the plain asset path's.

Starts on 127.0.0.1, and stops by PID, a redis-server, a real Airflow 3
(testkit/airflow_harness.py, whose DAG folder has testkit/airflow_dags/
fivetran_partitions.py), the webhook server and ``fivetran-events worker`` with
``FIVETRAN_EVENTS_PARTITION_GRAIN=day``. Connector ``part_a`` has two consumers on one
asset: ``plain_part_a`` (an asset schedule: a run per plain event) and ``daily_part_a``
(``PartitionedAssetTimetable`` with ``StartOfDayMapper``: a run per day key). After a
warm-up sync, N signed ``sync_end`` deliveries follow, ``--gap`` seconds apart, each
ending one day after the one before (in the past), so each completes exactly one day:
one plain event and one partitioned event per sync. It prints, for both DAGs, webhook
acknowledged -> the DAG run started (Airflow's run ``start_date``) and the ratio of the
medians, partitioned over plain (the goal: at most 1.10).

A sync's plain run is the run that consumed its plain event (Airflow's
``upstreamAssetEvents``). It also prints ack -> each asset event created (Airflow's event
timestamp; the partitioned event takes one more worker job, the expansion) and ack ->
each run created (its ``queued_at``), and in how many syncs both runs were made in one
scheduler loop but the partitioned one started a loop later (docs/partitions.md says why).

Usage: ``python -m bench.partitions [-n 10] [--gap 4.0] [--concurrency 2]`` (about 2 +
N * gap / 60 minutes on 2 cores).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from contextlib import ExitStack
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import requests

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._forward_measure import body, percentile, wait_until
from bench._forward_stack import SECRET, _spawn
from fivetran_events.model import SIGNATURE_HEADER, sign
from testkit.airflow_harness import AirflowServer
from testkit.own_redis import own_redis
from testkit.processes import stop_group
from testkit.servers import webhook_server
from testkit.support import conn_uri

CONNECTOR = "part_a"
PLAIN, PARTITIONED = "plain_part_a", "daily_part_a"


def post(
    url: str,
    sync_id: str,
    ended: datetime,
    session: requests.Session,
    secret: str = SECRET,
    connector: str = CONNECTOR,
) -> float:
    """POST one signed ``sync_end`` that ended at ``ended``; return when it was acked."""
    raw = body(sync_id, ended, connector)
    headers = {SIGNATURE_HEADER: sign(raw, secret), "Content-Type": "application/json"}
    session.post(f"{url}/webhooks/fivetran", data=raw, timeout=10, headers=headers)
    return time.time()


def runs(airflow: AirflowServer, dag_id: str) -> list[dict[str, Any]]:
    """The DAG's runs that started, oldest first."""
    found = [r for r in airflow.dag_runs(dag_id) if r.get("start_date")]
    return sorted(found, key=lambda r: str(r["start_date"]))


def stamp(text: Any) -> float:
    return datetime.fromisoformat(str(text).replace("Z", "+00:00")).timestamp()


def started(run: dict[str, Any]) -> float:
    return stamp(run["start_date"])


def measure(n: int, gap: float, concurrency: int, work: Path) -> dict[str, list[float]]:
    bin_dir = Path(sys.executable).parent
    with ExitStack() as stack:
        redis_server = stack.enter_context(own_redis(work / "redis"))
        redis_url = f"redis://127.0.0.1:{redis_server.port}/0"
        airflow = AirflowServer(
            home=work / "airflow",
            extra_env={"AIRFLOW_CONN_FIVETRAN_EVENTS_REDIS": conn_uri(redis_url, "fte:")},
        )
        stack.callback(airflow.stop)
        airflow.prepare()
        airflow.start()
        airflow.wait_for_parsed(PLAIN, PARTITIONED)
        airflow.wait_for_asset(f"fivetran://connector/{CONNECTOR}")
        ours: dict[str, Any] = {  # the webhook server and the worker alike
            "FIVETRAN_EVENTS_KEY_PREFIX": "fte:",
            "FIVETRAN_EVENTS_REDIS_URL": redis_url,
            "FIVETRAN_EVENTS_WEBHOOK_SECRETS": SECRET,
            "FIVETRAN_EVENTS_AIRFLOW_URL": airflow.url,
            "FIVETRAN_EVENTS_AIRFLOW_USERNAME": airflow.username,
            "FIVETRAN_EVENTS_AIRFLOW_PASSWORD": airflow.password,
            "FIVETRAN_EVENTS_PARTITION_GRAIN": "day",
            "PROMETHEUS_MULTIPROC_DIR": str(work / "metrics"),
        }
        url, _web = stack.enter_context(webhook_server(redis_url, work, **ours))
        env = {k: v for k, v in os.environ.items() if not k.startswith("FIVETRAN_EVENTS_")}
        env.update(ours)
        argv = [str(bin_dir / "fivetran-events"), "worker", "--concurrency", str(concurrency)]
        stack.callback(stop_group, _spawn(argv, env, work / "worker.log"))
        session = requests.Session()
        first = datetime.now(timezone.utc).replace(hour=6, minute=0, second=0, microsecond=0)
        first -= timedelta(days=n + 2)
        post(url, "warm-up", first, session)  # the history's first success: one day
        wait_until("the warm-up's runs", lambda: runs(airflow, PARTITIONED), 180, 0.5)
        wait_until("the warm-up's plain run", lambda: runs(airflow, PLAIN), 180, 0.5)
        acks: dict[str, float] = {}
        syncs: dict[str, str] = {}
        for i in range(1, n + 1):
            ended = first + timedelta(days=i)
            day = (ended - timedelta(days=1)).strftime("%Y-%m-%d")
            acks[day] = post(url, f"s{i}", ended, session)
            syncs[day] = f"s{i}"
            time.sleep(gap)  # paced: each plain event usually gets a DAG run of its own

        def all_keyed() -> dict[str, dict[str, Any]] | None:
            found = {r["partition_key"]: r for r in runs(airflow, PARTITIONED)}
            return found if all(k in found for k in acks) else None

        def all_events() -> dict[tuple[str, str | None], float] | None:
            found = {
                (str(e["extra"].get("sync_id")), e.get("partition_key")): stamp(e["timestamp"])
                for e in airflow.asset_events(f"fivetran://connector/{CONNECTOR}")
            }
            want = [(syncs[k], p) for k in acks for p in (None, f"{k}T00:00:00")]
            return found if all(w in found for w in want) else None

        created = wait_until("every asset event", all_events, 300, 1.0)

        def plain_runs() -> dict[str, dict[str, Any]] | None:
            """Each sync's plain run: the run that consumed its plain event (Airflow may
            put two in one run, and a run made before an event cannot have it)."""
            found: dict[str, dict[str, Any]] = {}
            for r in runs(airflow, PLAIN):
                path = f"/api/v2/dags/{PLAIN}/dagRuns/{r['dag_run_id']}/upstreamAssetEvents"
                for e in airflow.get(path).json().get("asset_events", []):
                    if e.get("partition_key") is None:  # it consumes keyed events too
                        found[str(e["extra"].get("sync_id"))] = r
            return found if all(syncs[k] in found for k in acks) else None

        keyed = wait_until("every partitioned run", all_keyed, 300, 1.0)
        by_sync = wait_until("a plain run for every plain event", plain_runs, 300, 1.0)
    plain_of = {k: by_sync[syncs[k]] for k in acks}
    return {
        "plain_event": [created[(syncs[k], None)] - a for k, a in acks.items()],
        "partition_event": [created[(syncs[k], f"{k}T00:00:00")] - a for k, a in acks.items()],
        "plain": [started(plain_of[k]) - a for k, a in acks.items()],
        "partitioned": [started(keyed[k]) - a for k, a in acks.items()],
        # Which scheduler loop made each run: Airflow stamps queued_at when it creates one.
        "plain_queued": [stamp(plain_of[k]["queued_at"]) - a for k, a in acks.items()],
        "partitioned_queued": [stamp(keyed[k]["queued_at"]) - a for k, a in acks.items()],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("-n", type=int, default=10)
    parser.add_argument("--gap", type=float, default=4.0)
    parser.add_argument("--concurrency", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="fte-bench-partitions-") as tmp:
        r = measure(args.n, args.gap, args.concurrency, Path(tmp))

    def line(label: str, xs: list[float]) -> str:
        return f"{label:44} p50 {percentile(xs, 0.5):6.2f} s   max {max(xs):6.2f} s"

    print(
        f"partitions benchmark: {args.n} syncs, one completed day each, real Airflow 3, "
        f"worker --concurrency {args.concurrency}"
    )
    print(line("ack -> plain asset event created", r["plain_event"]))
    print(line("ack -> partitioned asset event created", r["partition_event"]))
    print(line("ack -> plain asset DAG run started", r["plain"]))
    print(line("ack -> partitioned DAG run started", r["partitioned"]))
    print(line("ack -> plain DAG run created (queued_at)", r["plain_queued"]))
    print(line("ack -> partitioned DAG run created (queued_at)", r["partitioned_queued"]))
    # Airflow starts a queued run once its run_after <= the database's now(); a
    # partitioned run's run_after is its creation, a plain run's its event's arrival, so
    # of two runs made in one loop the partitioned one can start a loop later
    # (docs/partitions.md).
    made = [
        (abs(pq - q) < 0.2, p - s > 0.3)
        for pq, q, p, s in zip(
            r["partitioned_queued"], r["plain_queued"], r["partitioned"], r["plain"], strict=True
        )
    ]
    together = sum(one for one, _ in made)
    later = sum(one and late for one, late in made)
    print(
        f"runs made in one scheduler loop: {together} of {args.n} syncs; of those, the "
        f"partitioned run started a loop after the plain one: {later}"
    )
    ratio = statistics.median(r["partitioned"]) / statistics.median(r["plain"])
    print(f"ratio partitioned / plain (medians): x{ratio:.2f} (goal: at most x1.10)")


if __name__ == "__main__":
    main()
