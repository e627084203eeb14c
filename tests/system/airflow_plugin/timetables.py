"""A custom timetable for the tests: each run covers the day up to 06:00 UTC."""

from __future__ import annotations

from datetime import timedelta

from airflow.timetables.base import DagRunInfo, DataInterval, Timetable
from pendulum import DateTime


class SixAmTimetable(Timetable):
    """Runs at 06:00 UTC; the interval is the 24 hours before it."""

    description = "daily at 06:00 UTC"

    @staticmethod
    def _six(when: DateTime) -> DateTime:
        six = when.replace(hour=6, minute=0, second=0, microsecond=0)
        return six if six <= when else six - timedelta(days=1)

    def infer_manual_data_interval(self, *, run_after):  # type: ignore[no-untyped-def]
        end = self._six(run_after)
        return DataInterval(start=end - timedelta(days=1), end=end)

    def next_dagrun_info(self, *, last_automated_data_interval, restriction):  # type: ignore[no-untyped-def]
        if last_automated_data_interval is not None:
            end = last_automated_data_interval.end + timedelta(days=1)
        elif restriction.earliest is None:
            return None
        else:
            end = self._six(restriction.earliest) + timedelta(days=1)
        return DagRunInfo.interval(start=end - timedelta(days=1), end=end)
