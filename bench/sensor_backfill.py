"""A sensor task's duration against no-op tasks' in one backfill, on a real Airflow 3.

A backfill (Airflow's REST API) of a @daily DAG whose tasks run one after another, one
run at a time, so a task's duration is its own, not that of whichever tasks shared the
two cores with it. Its tasks: the deferrable sensor passing at once (a success after
every run's data_interval_end) as it comes and with ``do_xcom_push=False``; a no-op
PythonOperator; a no-op returning a value of the sensor's size (the XCom push is
Airflow's API call, not the sensor's work); and a no-op that only looks up the sensor's
Airflow connection: what any task using a connection pays Airflow (in a task process
each masked field of it is a request to the supervisor), so the last ratio is the
sensor's own cost. Prints the median and p90 task duration of each, and the ratios.

Section 5 of ``bench/sensor.py`` (``--backfill-cost``); Airflow and its redis-server come
from ``bench/_sensor_airflow.py``'s ``airflow_with_redis``, stopped by PID after.
"""

from __future__ import annotations

import statistics
import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import redis

from bench._sensor_airflow import PREFIX, UTC, airflow_with_redis, pct, wait
from testkit.airflow_harness import AirflowServer
from testkit.support import payload

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
