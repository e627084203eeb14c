"""Airflow 3.4's ``AssetAndTimeSchedule`` beside our paths: bench.backfill's fourth column.

A DAG on ``AssetAndTimeSchedule(timetable=@daily, assets=[the connector's asset])``
gets a scheduled run only when the asset has events queued for it since its previous
run, and that run consumes them (Airflow's ``_collect_gated_asset_events``). Measured on
the Airflow that bench.backfill runs (3.4 or later; ``available()`` says):

1. data in place: the DAG is added once every sync of the catch-up is recorded and
   forwarded (as a new DAG meets a connector that synced all along); its catch-up runs
   over a window as long as our backfill took;
2. syncs arriving hourly: one new sync at a time, as an hourly connector delivers them,
   each waited on until the gated DAG has run once more, until its catch-up is done: the
   syncs it needed (each an hour of a real connector's schedule);
3. a late event: a sync that ended two hours before the latest interval's end is
   delivered after it (a worker outage, a reconcile, an import), so its asset event
   carries the POST's time. The gated DAG runs that interval, and any as-of check on the
   event's timestamp passes it; our sensor, reading the sync's end, does not.
"""

from __future__ import annotations

import time
from datetime import date, datetime, timedelta, timezone
from typing import Any

import requests

from bench.partitions import CONNECTOR, post
from bench.sensor import wait
from testkit.support import SECRET

GATED = "backfill_gated"
LATE_CONNECTOR = "late_conn"
LATE_GATED, LATE_OURS = "late_gated", "late_ours"
#: How long our sensor waits in the late case before it fails (poke mode).
LATE_SENSOR_TIMEOUT_S = 40
_COMMON = """
from datetime import datetime, timezone

from airflow.sdk import DAG, Asset, AssetAndTimeSchedule, CronDataIntervalTimetable, task


def gated(connector):
    return AssetAndTimeSchedule(
        timetable=CronDataIntervalTimetable("@daily", timezone="UTC"),
        assets=[Asset(f"fivetran://connector/{{connector}}")],
    )


def start(text):
    return datetime.fromisoformat(text).replace(tzinfo=timezone.utc)


@task
def noop() -> None:  # the same task as the other paths' DAGs
    pass
"""
GATED_DAG = (
    _COMMON
    + """
with DAG("{dag_id}", schedule=gated("{connector}"), start_date=start("{start}"),
         catchup=True, max_active_runs={runs}):
    noop()
"""
)
LATE_DAGS = (
    _COMMON
    + """
from airflow_plugin.sensors import FivetranDateTimeSensor

with DAG("{gated}", schedule=gated("{connector}"), start_date=start("{start}"),
         catchup=False):
    noop()

with DAG("{ours}", schedule=CronDataIntervalTimetable("@daily", timezone="UTC"),
         start_date=start("{start}"), catchup=False):
    FivetranDateTimeSensor(task_id="wait", connector_id="{connector}", mode="poke",
                           poke_interval=5, timeout={timeout}) >> noop()
"""
)


def available() -> bool:
    """Whether this Airflow has ``AssetAndTimeSchedule`` (3.4 and later)."""
    import airflow.sdk

    return hasattr(airflow.sdk, "AssetAndTimeSchedule")


def _runs(airflow: Any, dag_id: str, days: list[date]) -> list[tuple[Any, ...]]:
    """The DAG's scheduled runs whose interval starts on one of ``days``, with state."""
    keys = [datetime(d.year, d.month, d.day, tzinfo=timezone.utc) for d in days]
    return list(
        airflow.query(
            "select run_id, state from dag_run where dag_id=%s and data_interval_start = any(%s)",
            dag_id,
            keys,
        )
    )


def _done(airflow: Any, dag_id: str, days: list[date]) -> int:
    return sum(1 for _, state in _runs(airflow, dag_id, days) if state == "success")


def data_in_place(airflow: Any, days: list[date], runs: int, window_s: float) -> dict[str, float]:
    """Scenario 1: add the gated DAG; its runs of ``days`` completed within ``window_s``."""
    dag = GATED_DAG.format(dag_id=GATED, connector=CONNECTOR, start=days[0], runs=runs)
    airflow.add_dag("bench_gated.py", dag)
    airflow.wait_for_parsed(GATED, timeout=300)
    t = time.monotonic()
    deadline = t + window_s
    while time.monotonic() < deadline and _done(airflow, GATED, days) < len(days):
        time.sleep(1.0)
    return {"runs": _done(airflow, GATED, days), "syncs": 0, "wall": time.monotonic() - t}


def hourly(
    airflow: Any, url: str, api: Any, days: list[date], slot: Any, session: requests.Session
) -> dict[str, float]:
    """Scenario 2: one new sync at a time until the gated catch-up of ``days`` is done."""
    calls, t = api.total_calls, time.monotonic()
    syncs = 0
    while (done := _done(airflow, GATED, days)) < len(days) and syncs < 2 * len(days):
        post(url, f"hourly{syncs}", datetime.now(timezone.utc), session, SECRET)
        syncs += 1
        wait(
            f"{GATED}'s run after sync {syncs}",
            lambda d=done: _done(airflow, GATED, days) > d or None,  # type: ignore[misc]
            120,
            0.5,
        )
    return {
        "runs": _done(airflow, GATED, days),
        "syncs": syncs,
        "slot": slot(airflow, GATED),
        "calls": api.total_calls - calls,
        "wall": time.monotonic() - t,
    }


def late_event(airflow: Any, url: str, session: requests.Session) -> dict[str, Any]:
    """Scenario 3: a sync ended two hours before the interval's end, delivered after it."""
    target = datetime.now(timezone.utc).replace(hour=0, minute=0, second=0, microsecond=0)
    interval = [target.date() - timedelta(days=1)]
    ended = target - timedelta(hours=2)
    dags = LATE_DAGS.format(
        gated=LATE_GATED,
        ours=LATE_OURS,
        connector=LATE_CONNECTOR,
        start=target.date() - timedelta(days=2),
        timeout=LATE_SENSOR_TIMEOUT_S,
    )
    airflow.add_dag("bench_gated_late.py", dags)
    airflow.wait_for_parsed(LATE_GATED, LATE_OURS, timeout=300)
    # The sensor's run of the latest interval starts now and waits: nothing synced yet.
    post(url, "late-1", ended, session, SECRET, connector=LATE_CONNECTOR)
    wait(f"{LATE_GATED}'s run", lambda: _done(airflow, LATE_GATED, interval) or None, 180, 1.0)
    events = airflow.asset_events(f"fivetran://connector/{LATE_CONNECTOR}")
    stamp = datetime.fromisoformat(str(events[-1]["timestamp"]).replace("Z", "+00:00"))

    def ours_ended() -> str | None:
        states = [s for _, s in _runs(airflow, LATE_OURS, interval)]
        return states[0] if states and states[0] in ("success", "failed") else None

    ours = wait(f"{LATE_OURS}'s run", ours_ended, LATE_SENSOR_TIMEOUT_S + 120, 1.0)
    return {
        "target": target,
        "sync_end": ended,
        "event_timestamp": stamp,
        "extra": events[-1]["extra"],
        "gated": "success",
        "timestamp_check": "passes" if stamp >= target else "fails",
        "ours": ours,
    }
