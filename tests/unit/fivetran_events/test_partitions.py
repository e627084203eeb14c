"""Which periods a successful sync completes (fivetran_events.partitions), pure.

Days are January 2026 in UTC; a sync is written by its start and end as ISO text.
"""

from __future__ import annotations

import pytest

from fivetran_events import Completion, Criterion
from fivetran_events.partitions import (
    completed,
    completed_by,
    completed_each,
    default_cap,
    key_start_ms,
)
from fivetran_events.timeutil import parse_iso, to_ms

STARTED_AFTER = Criterion.STARTED_AFTER


def ms(text: str) -> int:
    return to_ms(parse_iso(text))


def ok(ended: str, started: str | None = None, sid: str = "s") -> Completion:
    return Completion(
        sid, "SUCCESSFUL", ms(ended), True, started_ms=ms(started) if started else None
    )


def days(*dates: str) -> tuple[str, ...]:
    return tuple(f"2026-01-{d}T00:00:00" for d in dates)


class TestFirstSuccess:
    def test_completes_only_the_last_day_ending_before_it(self) -> None:
        """With no earlier success, only the day that ended last counts: nothing is known
        of the days before the history began."""
        assert completed_by(ok("2026-01-15T06:30:00Z"), None, "day").keys == days("14")

    def test_an_end_exactly_at_midnight_completes_the_day_before(self) -> None:
        """A sync ending at 00:00 counts for 00:00: the day that ends there is complete."""
        assert completed_by(ok("2026-01-15T00:00:00Z"), None, "day").keys == days("14")

    def test_hour_grain(self) -> None:
        assert completed_by(ok("2026-01-15T06:30:00Z"), None, "hour").keys == (
            "2026-01-15T05:00:00",
        )


class TestAfterAPreviousSuccess:
    def test_same_period_completes_nothing_new(self) -> None:
        """Two syncs inside one day: the second completes no day."""
        got = completed_by(ok("2026-01-15T09:00:00Z"), ok("2026-01-15T06:00:00Z"), "day")
        assert got.keys == ()

    def test_next_day_completes_one(self) -> None:
        got = completed_by(ok("2026-01-16T01:00:00Z"), ok("2026-01-15T06:00:00Z"), "day")
        assert got.keys == days("15")

    def test_a_gap_completes_every_day_of_it_oldest_first(self) -> None:
        """Last success Jan 10, next Jan 14 (failures between do not count): Jan 10 to 13."""
        got = completed_by(ok("2026-01-14T08:00:00Z"), ok("2026-01-10T08:00:00Z"), "day")
        assert got.keys == days("10", "11", "12", "13")
        assert got.skipped == 0

    def test_previous_at_midnight_already_completed_that_day(self) -> None:
        """A previous success ending at 00:00 Jan 12 completed Jan 11; the next completes
        Jan 12 only."""
        got = completed_by(ok("2026-01-13T00:00:00Z"), ok("2026-01-12T00:00:00Z"), "day")
        assert got.keys == days("12")

    def test_hours_across_midnight(self) -> None:
        got = completed_by(ok("2026-01-16T01:10:00Z"), ok("2026-01-15T22:50:00Z"), "hour")
        assert got.keys == ("2026-01-15T22:00:00", "2026-01-15T23:00:00", "2026-01-16T00:00:00")


class TestStartedAfter:
    def test_counts_from_the_start(self) -> None:
        """Started 23:50 Jan 15, ended 00:20 Jan 16: under ended_after it completes Jan 15,
        under started_after it counts only for 23:50, so not for Jan 15's end."""
        prev = ok("2026-01-15T06:00:00Z", "2026-01-15T05:00:00Z")
        late = ok("2026-01-16T00:20:00Z", "2026-01-15T23:50:00Z")
        assert completed_by(late, prev, "day").keys == days("15")
        assert completed_by(late, prev, "day", STARTED_AFTER).keys == ()

    def test_next_sync_then_completes_the_day(self) -> None:
        prev = ok("2026-01-16T00:20:00Z", "2026-01-15T23:50:00Z")
        nxt = ok("2026-01-16T01:20:00Z", "2026-01-16T01:00:00Z")
        assert completed_by(nxt, prev, "day", STARTED_AFTER).keys == days("15")

    def test_no_recorded_start_counts_for_nothing(self) -> None:
        assert completed_by(ok("2026-01-16T01:00:00Z"), None, "day", STARTED_AFTER).keys == ()


class TestKeys:
    def test_keys_are_utc_and_never_shift_with_daylight_saving(self) -> None:
        """Europe's clocks moved on 2026-03-29 at 01:00 UTC; UTC hours run on regardless."""
        got = completed_by(ok("2026-03-29T03:30:00Z"), ok("2026-03-28T23:30:00Z"), "hour")
        assert got.keys == (
            "2026-03-28T23:00:00",
            "2026-03-29T00:00:00",
            "2026-03-29T01:00:00",
            "2026-03-29T02:00:00",
        )

    def test_an_end_with_an_offset_is_read_in_utc(self) -> None:
        """01:30+02:00 is 23:30 UTC the day before."""
        assert completed_by(ok("2026-01-16T01:30:00+02:00"), None, "day").keys == days("14")

    def test_a_key_gives_back_its_periods_start(self) -> None:
        assert key_start_ms("2026-01-14T05:00:00") == ms("2026-01-14T05:00:00Z")


class TestCap:
    def test_default_is_31_days_worth(self) -> None:
        assert default_cap("day") == 31
        assert default_cap("hour") == 31 * 24

    def test_keeps_the_newest_and_reports_the_rest(self) -> None:
        """A connector paused from Dec 1 to Jan 15 completes 45 days; 31 are posted, the
        14 oldest are reported with their range."""
        got = completed_by(ok("2026-01-15T08:00:00Z"), ok("2025-12-01T08:00:00Z"), "day")
        assert len(got.keys) == 31
        assert got.keys[0] == "2025-12-15T00:00:00"
        assert got.keys[-1] == "2026-01-14T00:00:00"
        assert got.skipped == 14
        assert (got.skipped_from, got.skipped_to) == ("2025-12-01T00:00:00", "2025-12-14T00:00:00")

    def test_a_given_cap(self) -> None:
        got = completed(ms("2026-01-15T08:00:00Z"), ms("2026-01-10T08:00:00Z"), "day", cap=2)
        assert got.keys == days("13", "14")
        assert got.skipped == 3

    @pytest.mark.parametrize("cap", [0, 1])
    def test_nothing_is_lost_silently(self, cap: int) -> None:
        got = completed(ms("2026-01-15T08:00:00Z"), ms("2026-01-10T08:00:00Z"), "day", cap=cap)
        assert len(got.keys) + got.skipped == 5


class TestEach:
    def test_each_success_after_the_one_before_it_uncapped(self) -> None:
        """The view's listing: a history's successes in turn, with no cap (what they
        completed, not what one sync posts)."""
        got = completed_each(
            [ok("2026-01-10T06:00:00Z", sid="a"), ok("2026-03-01T06:00:00Z", sid="b")],
            None,
            "day",
        )
        assert got[0].keys == days("09")
        assert len(got[1].keys) == 50 and got[1].skipped == 0
        assert got[1].keys[0] == "2026-01-10T00:00:00"
