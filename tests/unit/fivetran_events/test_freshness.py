"""When a connector is due by its own schedule (fivetran_events.freshness), pure."""

from __future__ import annotations

from pathlib import Path

import pytest

from fivetran_events.decision import Lifecycle
from fivetran_events.exceptions import ConfigurationError
from fivetran_events.freshness import Freshness, Schedule, due_ms
from fivetran_events.history.reader import ConnectorRecord
from fivetran_events.timeutil import iso, parse_iso, to_ms

MIN = 60_000
HOUR = 60 * MIN


def at(text: str) -> int:
    return to_ms(parse_iso(text))


LAST = at("2026-03-10T05:20:00Z")


class TestDueBySchedule:
    def test_hourly_is_due_an_hour_and_fifteen_minutes_after_its_last_success(self) -> None:
        """Grace by default: max(15 min, 60/4 = 15 min)."""
        assert due_ms(Schedule(sync_frequency=60), LAST) == LAST + HOUR + 15 * MIN

    def test_every_15_minutes_gets_the_15_minute_floor_of_grace(self) -> None:
        assert due_ms(Schedule(sync_frequency=15), LAST) == LAST + 30 * MIN

    def test_a_long_frequency_gets_a_quarter_of_it_as_grace(self) -> None:
        assert due_ms(Schedule(sync_frequency=360), LAST) == LAST + 6 * HOUR + 90 * MIN

    def test_daily_without_a_time_is_due_a_day_and_six_hours_later(self) -> None:
        assert due_ms(Schedule(sync_frequency=1440), LAST) == LAST + 30 * HOUR

    def test_daily_with_a_time_is_due_after_the_next_such_time(self) -> None:
        """Last success 05:20: the 03:00 sync of the next day, plus 6 h of grace."""
        sched = Schedule(sync_frequency=1440, daily_sync_time="03:00")
        assert iso(due_ms(sched, LAST)) == "2026-03-11T09:00:00.000Z"

    def test_daily_with_a_time_later_that_day_is_due_the_same_day(self) -> None:
        sched = Schedule(sync_frequency=1440, daily_sync_time="22:30")
        assert iso(due_ms(sched, LAST)) == "2026-03-11T04:30:00.000Z"

    def test_a_success_exactly_at_the_daily_time_waits_for_the_next_day(self) -> None:
        sched = Schedule(sync_frequency=1440, daily_sync_time="05:20")
        assert iso(due_ms(sched, LAST)) == "2026-03-11T11:20:00.000Z"

    def test_the_grace_setting_replaces_the_default(self) -> None:
        assert due_ms(Schedule(sync_frequency=60), LAST, grace_s=120) == LAST + HOUR + 2 * MIN
        assert due_ms(Schedule(sync_frequency=60), LAST, grace_s=0) == LAST + HOUR


class TestNeverDue:
    def test_manual_connectors_are_never_overdue_by_schedule(self) -> None:
        assert due_ms(Schedule(sync_frequency=60, schedule_type="manual"), LAST) is None

    def test_paused_connectors_are_never_overdue(self) -> None:
        assert due_ms(Schedule(sync_frequency=60, paused=True), LAST) is None
        assert due_ms(Schedule(sync_frequency=60), LAST, objective_s=60, stopped=True) is None

    def test_without_a_schedule_or_a_success_there_is_no_due_time(self) -> None:
        assert due_ms(None, LAST) is None
        assert due_ms(Schedule(sync_frequency=60), None) is None


class TestExplicitObjective:
    def test_an_explicit_objective_overrides_fivetrans_schedule(self) -> None:
        """Seconds since the last success, no grace added; a manual connector too."""
        assert due_ms(Schedule(sync_frequency=60), LAST, objective_s=7200) == LAST + 2 * HOUR
        manual = Schedule(sync_frequency=60, schedule_type="manual")
        assert due_ms(manual, LAST, objective_s=600, grace_s=60) == LAST + 10 * MIN
        assert due_ms(None, LAST, objective_s=600) == LAST + 10 * MIN

    def test_describe_says_how_late(self) -> None:
        fresh = Freshness(objectives={"c": 600})
        late = fresh.describe(ConnectorRecord("c"), LAST, LAST + 10 * MIN + 90_000)
        assert late == {"due_at": iso(LAST + 10 * MIN), "overdue": True, "overdue_seconds": 90}
        on_time = fresh.describe(ConnectorRecord("c"), LAST, LAST + MIN)
        assert on_time["overdue"] is False and on_time["overdue_seconds"] == 0
        assert fresh.describe(ConnectorRecord("other"), LAST, LAST)["overdue_seconds"] is None
        paused = ConnectorRecord("c", lifecycle=Lifecycle(state="paused"))
        assert fresh.describe(paused, LAST, LAST + HOUR)["overdue"] is False

    def test_objectives_file_is_read_like_the_uri_map(self, tmp_path: Path) -> None:
        path = tmp_path / "objectives.toml"
        path.write_text("[connectors]\nassimilate_seem = 7200\nother = 90.5\n")
        assert Freshness.load(30, str(path)) == Freshness(
            30, {"assimilate_seem": 7200, "other": 90.5}
        )

    @pytest.mark.parametrize(
        "body", ["[connectors]\nc = 'soon'\n", "[connectors]\nc = -1\n", "c = 1\n"]
    )
    def test_a_bad_objectives_file_names_the_setting(self, tmp_path: Path, body: str) -> None:
        path = tmp_path / "objectives.toml"
        path.write_text(body)
        with pytest.raises(ConfigurationError, match="FRESHNESS_OBJECTIVES_FILE"):
            Freshness.load(None, str(path))


class TestScheduleRecord:
    def test_a_stored_schedule_reads_back_and_odd_values_are_dropped(self) -> None:
        sched = Schedule(60, "03:00", "auto", False, "connected", "2026-03-10T05:20:00.000Z")
        assert Schedule.from_meta(sched.to_dict()) == sched
        odd = Schedule.from_meta({"sync_frequency": "60", "daily_sync_time": "25:00", "paused": 1})
        assert odd == Schedule()
        assert Schedule.from_meta(None) is None
