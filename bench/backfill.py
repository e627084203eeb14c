"""A 30-day backfill's cost: partitioned asset runs against two sensors' backfills.

One real Airflow 3 (``bench.sync.beside_astronomer``: its own redis-server, the real
webhook server and, with forwarding on at ``FIVETRAN_EVENTS_PARTITION_GRAIN=day``, a
``fivetran-events worker``), one Fivetran stand-in (testkit/fivetran_api.py, which
counts every API call). N+1 signed ``sync_end`` deliveries of connector ``part_a``,
one a day, the last a minute ago, go through the real webhook: each completes one day.
Then three ways to get a daily DAG run per completed day, one after the other:

1. partitioned: ``daily_part_a`` (testkit/airflow_dags/fivetran_partitions.py,
   ``PartitionedAssetTimetable`` with ``StartOfDayMapper``) runs once per day key the
   worker forwards; its runs for the N oldest days are counted;
2. ours: a backfill (``POST /api/v2/backfills``) of those N days of a @daily DAG whose
   deferrable ``FivetranDateTimeSensor`` (the history in Redis) precedes the same no-op;
3. astronomer's: the same backfill with ``fivetran_provider_async``'s deferrable
   ``FivetranSensor`` (``completed_after_time="{{ data_interval_end }}"``, the stand-in
   reporting a success a minute ago), pointed at the stand-in as bench.sync does.

For each it prints the worker-slot seconds (Airflow's ``task_instance`` rows: the sum of
end - start over the runs' task instances, see ``slot_seconds``), the Fivetran API calls
(the stand-in's counter over the phase) and the wall time, and the ratios against the
partitioned path. The data is all there before each backfill (a catch-up backfill), so
both sensors pass at their first check; none defers.

    python -m bench.backfill [--days N] [--max-active-runs M]   (about 3 minutes)
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Iterable
from datetime import date, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import requests
from airflow import __version__ as AIRFLOW_VERSION

from bench import gated
from bench.partitions import CONNECTOR, PARTITIONED, post
from bench.sensor import wait
from bench.sync import API_SECRET, KEY, beside_astronomer
from testkit.fivetran_api import FivetranStandIn
from testkit.support import SECRET

OURS, THEIRS = "backfill_ours", "backfill_theirs"
SENSOR_DAGS = """
from datetime import datetime, timezone

from airflow.sdk import DAG, task
from airflow.timetables.interval import CronDataIntervalTimetable
from fivetran_provider_async.sensors import FivetranSensor

from airflow_plugin.sensors import FivetranDateTimeSensor

ARGS = dict(
    schedule=CronDataIntervalTimetable("@daily", timezone="UTC"),
    start_date=datetime.fromisoformat("{start}").replace(tzinfo=timezone.utc),
    catchup=False,
    max_active_runs={runs},
)


@task
def noop() -> None:  # the same task as the partitioned DAG's
    pass


with DAG("{ours}", **ARGS):
    FivetranDateTimeSensor(
        task_id="wait", connector_id="{connector}", deferrable=True, timeout=600
    ) >> noop()

with DAG("{theirs}", **ARGS):
    FivetranSensor(
        task_id="wait", connector_id="{connector}", deferrable=True, timeout=600,
        completed_after_time="{{{{ data_interval_end }}}}", poke_interval=5,
    ) >> noop()
"""
TI_ROWS = (
    "select ti.start_date, ti.end_date, ti.next_method, ti.state from task_instance ti "
    "join dag_run dr on dr.dag_id = ti.dag_id and dr.run_id = ti.run_id "
    "where ti.dag_id = %s and {where}"
)


def slot_seconds(rows: Iterable[tuple[Any, Any, Any]]) -> float:
    """The worker-slot seconds of finished task instances: the sum of end - start.

    ``rows``: (start_date, end_date, next_method) from ``task_instance``, dates as Airflow
    stores them. A task instance that deferred (``next_method`` set) held no slot while
    deferred, which its one start..end does not show: refused, as an unfinished one is.
    """
    total = 0.0
    for start, end, next_method in rows:
        if start is None or end is None:
            raise ValueError(f"a task instance has not finished: {start} .. {end}")
        if next_method:
            raise ValueError(f"a task instance deferred ({next_method}): its slot time is unknown")
        begun, ended = (datetime.fromisoformat(str(t)) for t in (start, end))
        total += (ended - begun).total_seconds()
    return total


def _rows(airflow: Any, dag_id: str, where: str, *params: object) -> list[tuple[Any, ...]]:
    return list(airflow.query(TI_ROWS.format(where=where), dag_id, *params))


def _all_done(airflow: Any, dag_id: str, where: str, want: int, *params: object) -> Any:
    """The runs' task instances once ``want`` of them ended in success (None before)."""
    airflow._check_alive(f"{dag_id}'s runs ran")
    rows = _rows(airflow, dag_id, where, *params)
    failed = [r for r in rows if r[3] in ("failed", "upstream_failed")]
    if failed:
        raise SystemExit(f"{dag_id}: {len(failed)} task(s) failed:\n{airflow.logs('scheduler')}")
    done = [r[:3] for r in rows if r[3] == "success"]
    return done if len(done) >= want else None


def _cost(
    airflow: Any,
    api: FivetranStandIn,
    since: tuple[int, float],
    dag_id: str,
    where: str,
    want: int,
    *params: object,
) -> dict[str, float]:
    """Once ``want`` task instances succeeded: their worker-slot seconds, and the API calls
    and wall time since ``since`` (the stand-in's counter, ``time.monotonic()``)."""
    rows = wait(
        f"{want} task instances of {dag_id}",
        lambda: _all_done(airflow, dag_id, where, want, *params),
        120 + 5.0 * want,
        1.0,
    )
    return {
        "slot": slot_seconds(rows),
        "calls": api.total_calls - since[0],
        "wall": time.monotonic() - since[1],
    }


def partitioned(airflow: Any, url: str, api: FivetranStandIn, days: list[date]) -> dict[str, float]:
    """Phase 1: the syncs through the webhook; ``daily_part_a``'s runs for ``days``."""
    calls, t = api.total_calls, time.monotonic()
    session = requests.Session()
    now = datetime.now(timezone.utc) - timedelta(minutes=1)
    for i in range(len(days), -1, -1):  # oldest first; each completes the day before it
        post(url, f"bf{i}", now - timedelta(days=i), session, SECRET)
    keys = [d.isoformat() for d in days]  # StartOfDayMapper's run keys
    return _cost(
        airflow, api, (calls, t), PARTITIONED, "dr.partition_key = any(%s)", len(days), keys
    )


def backfill(
    airflow: Any, api: FivetranStandIn, dag_id: str, days: list[date], runs: int
) -> dict[str, float]:
    """Phases 2 and 3: one backfill of ``days``; its task instances and API calls."""
    calls, t = api.total_calls, time.monotonic()
    resp = airflow.request(
        "POST",
        "/api/v2/backfills",
        json={
            "dag_id": dag_id,
            "from_date": f"{days[0].isoformat()}T00:00:00+00:00",
            "to_date": f"{days[-1].isoformat()}T00:00:00+00:00",
            "max_active_runs": runs,
        },
    )
    if resp.status_code != 200:
        raise SystemExit(f"backfill refused: {resp.status_code} {resp.text[:300]}")
    where = "dr.run_id like 'backfill__%%'"
    want = 2 * len(days)  # the sensor and the no-op
    return _cost(airflow, api, (calls, t), dag_id, where, want)


def measure(work: Path, n: int, runs: int) -> dict[str, Any]:
    api = FivetranStandIn(api_key=KEY, api_secret=API_SECRET)
    now = datetime.now(timezone.utc)
    # Astronomer's sensor passes when succeeded_at is after the run's data_interval_end.
    api.connector(CONNECTOR, succeeded_at=now, failed_at=now - timedelta(days=2 * n))
    today = (now - timedelta(minutes=1)).date()
    days = [today - timedelta(days=k) for k in range(n + 1, 1, -1)]  # the N oldest completed
    with beside_astronomer(work, api, partition_grain="day") as airflow:
        airflow.wait_for_parsed(PARTITIONED, timeout=300)
        airflow.wait_for_asset(f"fivetran://connector/{CONNECTOR}")
        source = SENSOR_DAGS.format(
            start=days[0].isoformat(), runs=runs, ours=OURS, theirs=THEIRS, connector=CONNECTOR
        )
        airflow.add_dag("bench_backfill_sensors.py", source)
        airflow.wait_for_parsed(OURS, THEIRS, timeout=300)
        # catchup=False still schedules the latest interval: astronomer's run of it polls
        # the stand-in, so it ends before any phase counts calls.
        latest = "dr.run_id not like 'backfill__%%'"
        wait("the latest interval's runs", lambda: _all_done(airflow, THEIRS, latest, 2), 300, 1.0)
        url = str(api.webhook_url).rsplit("/webhooks/", 1)[0]
        got: dict[str, Any] = {
            "partitioned": partitioned(airflow, url, api, days),
            "ours": backfill(airflow, api, OURS, days, runs),
            "astronomer": backfill(airflow, api, THEIRS, days, runs),
        }
        print(f"   ({got})", flush=True)
        for path in got.values():  # every run made, none needing a sync after the data's
            path.update(runs=len(days), syncs=0)
        if gated.available():
            session = requests.Session()
            window = got["ours"]["wall"]
            got["gated, data in place"] = gated.data_in_place(airflow, days, runs, window)
            got["gated, hourly syncs"] = gated.hourly(
                airflow,
                url,
                api,
                days,
                lambda a, d: slot_seconds(_all_done(a, d, "true", 0)),
                session,
            )
            print(
                f"   (gated: {got['gated, data in place']}, {got['gated, hourly syncs']})",
                flush=True,
            )
            got["late"] = gated.late_event(airflow, url, session)
        return got


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--max-active-runs", type=int, default=2, help="per backfill")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="fte-bench-backfill-") as tmp:
        got = measure(Path(tmp), args.days, args.max_active_runs)
    late = got.pop("late", None)
    base = got["partitioned"]
    print(
        f"\n{args.days}-day catch-up of a daily DAG on real Airflow {AIRFLOW_VERSION} "
        f"(backfills: max_active_runs {args.max_active_runs}):\n"
    )
    print(
        "| path | runs completed | new syncs needed | worker-slot s | x partitioned "
        "| Fivetran API calls | wall s |"
    )
    print("|---|---|---|---|---|---|---|")
    for name, r in got.items():
        slot = r.get("slot")
        cost = f"{slot:.1f} | x{slot / base['slot']:.2f}" if slot is not None else "- | -"
        calls = f"{r['calls']:.0f}" if "calls" in r else "0"
        print(
            f"| {name} | {r['runs']:.0f} of {args.days} | {r['syncs']:.0f} | {cost} "
            f"| {calls} | {r['wall']:.0f} |"
        )
    if not gated.available():
        print(f"\n(no AssetAndTimeSchedule on Airflow {AIRFLOW_VERSION}: 3.4 and later)")
    if late is not None:
        print(
            f"\nA late event: a sync ended at {late['sync_end']:%Y-%m-%d %H:%M} UTC, delivered "
            f"after the interval's end ({late['target']:%Y-%m-%d %H:%M}); its asset event's "
            f"timestamp {late['event_timestamp']:%Y-%m-%d %H:%M:%S} (the POST's). "
            f"AssetAndTimeSchedule's run of that interval: {late['gated']}; an as-of check on "
            f"the event's timestamp: {late['timestamp_check']}; our sensor's run: "
            f"{late['ours']}. The event's extra: {late['extra']}"
        )


if __name__ == "__main__":
    main()
