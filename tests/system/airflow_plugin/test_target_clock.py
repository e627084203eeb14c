"""A sensor's target is the same whatever the wall clock says when it runs or re-runs.

The same run is run twice under two frozen "nows" (freezegun, ticking so Airflow's own
timers move): a day after the target and years later. Target and decision must not
move, for each rule of ``airflow_plugin.targets``: ``data_interval_end`` (cron with
intervals), a run without a data interval (its ``run_after``), and Airflow 3's default
``CronTriggerTimetable`` (start == end == logical date).
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

from flask.testing import FlaskClient
from freezegun import freeze_time

from testkit.support import at

from .dagtest import daily_syncs, one_sensor_dag, result, run, sync, z

NOWS = (at(16), datetime(2031, 6, 1, 12, tzinfo=at(1).tzinfo))


def twice(
    dag: Any, logical: datetime | None, **kwargs: Any
) -> list[tuple[str, str | None, str | None]]:
    """Run the same run under each frozen now; return what each saw.

    Run once under the real clock first: Airflow builds some pydantic models on first
    use, and pydantic cannot build one while freezegun replaces ``datetime``.
    """
    seen = [result(run(dag, logical, **kwargs))]
    for now in NOWS:
        with freeze_time(now, tick=True):
            out = run(dag, logical, **kwargs)
        assert task_started(out["_run"]).date() == now.date()  # the frozen clock was used
        seen.append(result(out))
    return seen


def task_started(dag_run: Any) -> datetime:
    from airflow.utils.session import create_session

    with create_session() as session:
        (ti,) = dag_run.get_task_instances(session=session)
        return ti.start_date  # type: ignore[no-any-return]


class TestSameTargetWhateverTheClock:
    def test_data_interval_end(self, dagtest_airflow: Path, http: FlaskClient) -> None:
        """CronDataIntervalTimetable: the run at Jan 5 covers Jan 4 and targets its end."""
        from airflow.sdk import CronDataIntervalTimetable

        daily_syncs(http, range(1, 11))
        dag = one_sensor_dag("clock_interval", CronDataIntervalTimetable("@daily", timezone="UTC"))
        assert twice(dag, at(5)) == [("success", z(at(5)), "ok-5")] * 3

    def test_cron_trigger_timetable_start_equals_end(
        self, dagtest_airflow: Path, http: FlaskClient
    ) -> None:
        """ "@daily" (CronTriggerTimetable): end == logical date, so the target is Jan 12,
        and the failure that ended then decides, under either clock."""
        daily_syncs(http, range(1, 11))
        sync(http, "c1", at(12, 6), "FAILURE", sync_id="f-12")
        dag = one_sensor_dag("clock_trigger", "@daily")
        assert twice(dag, at(12)) == [("failed", None, None)] * 3
        assert (
            twice(one_sensor_dag("clock_trigger_ok", "@daily"), at(9))
            == [("success", z(at(9)), "ok-9")] * 3
        )

    def test_run_without_data_interval_uses_its_run_after(
        self, dagtest_airflow: Path, http: FlaskClient
    ) -> None:
        """No data interval: the run's run_after (Jan 7 12:00), not the time it runs."""
        daily_syncs(http, range(1, 11))
        dag = one_sensor_dag("clock_none", None)
        assert twice(dag, None, run_after=at(7, 12)) == [("success", z(at(7, 12)), "ok-8")] * 3
