"""The decision contract on in-memory histories: the seed calendars, the flags.

The same contract read from Redis, against a brute-force reference:
tests/integration/fivetran_events/test_decision_reference.py.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from fivetran_events import (
    Completion,
    Facts,
    Outcome,
    RunningSync,
    decide,
)
from fivetran_events.decision import Lifecycle
from fivetran_events.timeutil import iso, to_ms
from testkit.calendars import CALENDARS, SCENARIO_A, SCENARIO_B
from testkit.support import at, facts_from_history


def completions(scenario: str) -> list[Completion]:
    rows = SCENARIO_A if scenario == "A" else SCENARIO_B
    return [Completion(sid, st_, to_ms(t), st_ == "SUCCESSFUL") for sid, t, st_ in rows]


class TestSeedCalendarsPure:
    @pytest.mark.parametrize(("scenario", "propagate"), list(CALENDARS))
    def test_calendar(self, scenario: str, propagate: bool) -> None:
        """decide() over the in-memory history gives the seed's calendar day by day."""
        got = {}
        for day in range(1, 16):
            facts = facts_from_history(completions(scenario), {}, None, at(day))
            got[day] = decide(facts, at(day), propagate_failures_forward=propagate).outcome.value
        assert got == CALENDARS[(scenario, propagate)]

    def test_fail_names_the_sync_and_reason(self) -> None:
        facts = facts_from_history(
            [Completion("x1", "FAILURE_WITH_TASK", to_ms(at(3)), False, reason="quota")],
            {},
            None,
            at(2),
        )
        d = decide(facts)
        assert d.outcome is Outcome.FAIL
        when = iso(at(3))
        assert when is not None
        assert "x1" in d.reason and "quota" in d.reason and when in d.reason


class TestFlags:
    def test_always_wait_when_syncing(self) -> None:
        """A running sync makes it WAIT even when a success already counts."""
        facts = facts_from_history(completions("B"), {}, RunningSync("r", to_ms(at(14))), at(5))
        assert decide(facts).outcome is Outcome.SUCCESS
        assert decide(facts, always_wait_when_syncing=True).outcome is Outcome.WAIT

    def test_started_after_refuses_a_sync_that_started_before(self) -> None:
        """A success that ended after the target but started before it does not count."""
        ok = Completion("s", "SUCCESSFUL", to_ms(at(10, 1)), True)
        facts = facts_from_history([ok], {"s": to_ms(at(9, 23))}, None, at(10))
        assert decide(facts, criterion="ended_after").outcome is Outcome.SUCCESS
        assert decide(facts, criterion="started_after").outcome is Outcome.WAIT

    def test_end_exactly_at_target_counts(self) -> None:
        """'At or after' includes the target instant itself."""
        facts = facts_from_history(
            [Completion("s", "SUCCESSFUL", to_ms(at(5)), True)], {}, None, at(5)
        )
        assert decide(facts).outcome is Outcome.SUCCESS

    def test_bad_criterion(self) -> None:
        with pytest.raises(ValueError, match="criterion must be one of"):
            decide(Facts(target_ms=0), criterion="whenever")


def broken_facts(target: int, **meta: object) -> Facts:
    """A success on day 1, then the connector's record as ``meta`` says."""
    ok = Completion("s1", "SUCCESSFUL", to_ms(at(1)), True)
    facts = facts_from_history([ok], {}, None, at(target))
    return replace(facts, lifecycle=Lifecycle.from_meta(meta))


FAILED = {"setup": "broken", "setup_at": iso(at(2)), "setup_reason": "password rejected"}


class TestBroken:
    def test_a_connection_failure_fails_a_target_nothing_counts_for(self) -> None:
        d = decide(broken_facts(3, **FAILED))
        assert d.outcome is Outcome.FAIL
        assert "connection_failure (password rejected)" in d.reason
        assert str(iso(at(2))) in d.reason and "wait_when_broken" in d.reason

    def test_wait_when_broken_keeps_waiting(self) -> None:
        assert decide(broken_facts(3, **FAILED), wait_when_broken=True).outcome is Outcome.WAIT

    def test_a_past_target_a_success_counts_for_still_passes(self) -> None:
        assert decide(broken_facts(1, **FAILED)).outcome is Outcome.SUCCESS

    def test_connection_successful_after_the_failure_waits(self) -> None:
        """The record keeps the newest setup event: connected."""
        fixed = {"setup": "connected", "setup_at": iso(at(2, 5))}
        assert decide(broken_facts(3, **fixed)).outcome is Outcome.WAIT

    def test_a_sync_start_after_the_failure_waits(self) -> None:
        d = decide(broken_facts(3, **FAILED, started_at=iso(at(2, 1))))
        assert d.outcome is Outcome.WAIT

    def test_a_running_sync_is_not_failed(self) -> None:
        facts = replace(broken_facts(3, **FAILED), running=RunningSync("r", to_ms(at(2, 1))))
        assert decide(facts).outcome is Outcome.WAIT

    def test_reconciles_setup_state_broken_fails_naming_fivetrans_list(self) -> None:
        seen = {"setup_state": "broken", "seen_at": iso(at(2, 3))}
        d = decide(broken_facts(3, schedule=seen))
        assert d.outcome is Outcome.FAIL
        assert "setup_state broken in Fivetran's connection list" in d.reason
        assert str(iso(at(2, 3))) in d.reason

    def test_reconcile_seeing_it_connected_after_the_failure_waits(self) -> None:
        seen = {"setup_state": "connected", "seen_at": iso(at(2, 3))}
        assert decide(broken_facts(3, **FAILED, schedule=seen)).outcome is Outcome.WAIT
        older = {"setup_state": "connected", "seen_at": iso(at(1, 3))}
        assert decide(broken_facts(3, **FAILED, schedule=older)).outcome is Outcome.FAIL
