"""Which sync answers a sync request (fivetran_events.sync_request), pure.

Times are seconds on a small clock (``ms(n)``); a request asked at ``ASK`` must end on
the first sync that started at or after it, never on one that started before.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from fivetran_events import Completion, Facts, RunningSync
from fivetran_events.decision import Lifecycle
from fivetran_events.model import is_derived_sync_id
from fivetran_events.sync_request import Step, answer, answer_from_connection
from testkit.support import facts_from_history

ASK = 100_000


def ms(seconds: float) -> int:
    return int(seconds * 1000)


def done(sid: str, start: float | None, end: float, status: str = "SUCCESSFUL") -> Completion:
    return Completion(
        sid,
        status,
        ms(end),
        status == "SUCCESSFUL",
        reason=None if status in ("SUCCESSFUL", "RESCHEDULED", "CANCELED") else "boom",
        started_ms=None if start is None else ms(start),
    )


def facts(
    *ends: Completion,
    running: tuple[str, float] | None = None,
    target: int = ASK,
    lifecycle: Lifecycle | None = None,
) -> Facts:
    run = RunningSync(running[0], ms(running[1])) if running else None
    return facts_from_history(ends, {}, run, target, lifecycle)


def step(f: Facts, now: float = 200, **kwargs: object) -> Step:
    return answer(f, now_ms=ms(now), **kwargs).step  # type: ignore[arg-type]


class TestOneRequest:
    def test_a_sync_started_after_the_request_answers_it(self) -> None:
        """Its success succeeds the task, naming that sync."""
        got = answer(facts(done("s1", 101, 130)), now_ms=ms(140))
        assert got.step is Step.SUCCESS
        assert got.sync is not None and got.sync.sync_id == "s1"

    def test_its_failure_fails_the_request_with_the_reason(self) -> None:
        got = answer(facts(done("s1", 101, 130, "FAILURE_WITH_TASK")), now_ms=ms(140))
        assert got.step is Step.FAIL
        assert "FAILURE_WITH_TASK: boom" in got.reason

    def test_nothing_yet_waits(self) -> None:
        assert step(facts(), now=101) is Step.WAIT
        assert step(facts(running=("s1", 101))) is Step.WAIT

    def test_a_success_before_the_request_does_not_answer_it(self) -> None:
        """Neither one that ended before nor one that started before and ended after."""
        assert step(facts(done("s0", 10, 50)), now=101) is Step.WAIT
        assert step(facts(done("s0", 90, 110), running=("s1", 111))) is Step.WAIT

    def test_a_failure_before_the_request_is_not_propagated(self) -> None:
        assert step(facts(done("s0", 10, 50, "FAILURE")), now=101) is Step.WAIT

    def test_a_paused_connector_fails_the_request(self) -> None:
        paused = Lifecycle(state="paused", state_at_ms=ms(105), state_event="pause_connector")
        got = answer(facts(lifecycle=paused), now_ms=ms(110))
        assert got.step is Step.FAIL and "paused" in got.reason

    def test_a_connector_broken_after_the_request_fails_it_unless_wait_when_broken(self) -> None:
        broken = Lifecycle(setup="broken", setup_at_ms=ms(105), setup_reason="bad key")
        got = answer(facts(lifecycle=broken), now_ms=ms(110))
        assert got.step is Step.FAIL and "bad key" in got.reason
        assert step(facts(lifecycle=broken), wait_when_broken=True) is Step.WAIT

    def test_a_breakage_recorded_before_the_request_is_older_news(self) -> None:
        """The operator asked only once Fivetran's connection said it was not broken."""
        broken = Lifecycle(setup="broken", setup_at_ms=ms(90), setup_reason="bad key")
        assert step(facts(lifecycle=broken)) is Step.WAIT

    def test_rescheduled_waits_until_rescheduled_at_then_asks_again(self) -> None:
        """Fivetran runs a manual connection's rescheduled sync only when asked."""
        r = Completion(
            "s1", "RESCHEDULED", ms(120), False, started_ms=ms(101), rescheduled_at_ms=ms(300)
        )
        early = answer(facts(r), now_ms=ms(200))
        assert early.step is Step.WAIT and early.decision.recheck_at_ms == ms(300)
        assert step(facts(r), now=300) is Step.ASK_AGAIN
        assert step(facts(r, running=("s1", 300)), now=301) is Step.WAIT

    def test_rescheduled_without_a_time_uses_reschedule_wait(self) -> None:
        r = done("s1", 101, 120, "RESCHEDULED")
        assert step(facts(r), now=125, reschedule_wait_ms=ms(10)) is Step.WAIT
        assert step(facts(r), now=130, reschedule_wait_ms=ms(10)) is Step.ASK_AGAIN


class TestRunningWhenAsked:
    def test_without_force_the_running_syncs_end_asks_again(self) -> None:
        """The sync that ran when asked ended (either way): ask again, never succeed."""
        for status in ("SUCCESSFUL", "FAILURE", "CANCELED"):
            f = facts(done("s0", 90, 110, status))
            assert step(f) is Step.ASK_AGAIN, status

    def test_an_end_whose_start_is_unknown_counts_as_earlier(self) -> None:
        assert step(facts(done("s0", None, 110))) is Step.ASK_AGAIN

    def test_with_force_the_stopped_syncs_end_waits_for_the_new_one(self) -> None:
        f = facts(done("s0", 90, 101, "CANCELED"))
        assert step(f, force=True) is Step.WAIT

    def test_a_sync_running_after_the_earlier_end_is_waited_for_from_its_start(self) -> None:
        """Its failure then fails the request, not hidden by the earlier failure."""
        f = facts(done("s0", 90, 110, "FAILURE"), running=("s1", 111))
        got = answer(f, now_ms=ms(120))
        assert got.step is Step.WAIT and got.retarget_ms == ms(111)
        moved = facts(
            done("s0", 90, 110, "FAILURE"), done("s1", 111, 140, "FAILURE"), target=ms(111)
        )
        assert step(moved, asked_ms=ASK) is Step.FAIL

    def test_still_running_earlier_sync_is_waited_for(self) -> None:
        assert step(facts(running=("s0", 90))) is Step.WAIT


class TestTwoRequestsAtOnce:
    """Task A asks at 100, task B at 105; one connector runs one sync at a time."""

    B = ms(105)

    def test_both_asked_before_the_sync_started_both_end_on_it(self) -> None:
        history = [done("s1", 106, 130)]
        assert step(facts(*history)) is Step.SUCCESS
        assert step(facts(*history, target=self.B)) is Step.SUCCESS

    def test_the_second_asked_while_the_first_ran_asks_again_then_ends_on_its_own(self) -> None:
        s1 = done("s1", 101, 130)
        assert step(facts(s1)) is Step.SUCCESS
        assert step(facts(s1, target=self.B)) is Step.ASK_AGAIN
        asked_again = ms(131)
        s2 = done("s2", 132, 160)
        assert step(facts(s1, running=("s2", 132), target=asked_again)) is Step.WAIT
        got = answer(facts(s1, s2, target=asked_again), now_ms=ms(170))
        assert got.step is Step.SUCCESS and got.sync is not None and got.sync.sync_id == "s2"

    def test_with_force_the_second_stops_the_first_and_both_end_on_the_rerun(self) -> None:
        history = [done("s1", 101, 105, "CANCELED"), done("s2", 105.5, 140)]
        for target in (ASK, self.B):
            got = answer(facts(*history, target=target), now_ms=ms(150), force=True)
            assert got.step is Step.SUCCESS and got.sync is not None
            assert got.sync.sync_id == "s2"

    def test_no_request_ever_succeeds_on_a_sync_started_before_it(self) -> None:
        """Every history of up to three syncs around the request: SUCCESS only on a sync
        that started at or after it."""
        starts = (80, 99.999, 100, 120)
        for a in starts:
            for b in starts:
                if b <= a:
                    continue
                s = [done("a", a, b), done("b", b + 1, b + 10)]
                got = answer(facts(*s), now_ms=ms(500))
                if got.step is Step.SUCCESS:
                    assert got.sync is not None and got.sync.started_ms is not None
                    assert got.sync.started_ms >= ASK


def from_connection(
    ok: datetime | None, failed: datetime | None, **fields: Any
) -> tuple[Step, str, Completion | None]:
    """``answer_from_connection`` for a request asked at ``ASK``, idle and unpaused unless
    ``fields`` say otherwise."""
    given: dict[str, Any] = {"syncing": False, "paused": False, "running_at_ask": False}
    return answer_from_connection(
        asked_ms=ASK,
        succeeded_at=ok,
        failed_at=failed,
        force=False,
        connector_id="c1",
        **{**given, **fields},
    )


class TestFallback:
    def test_nothing_recorded_for_the_fallback_time_falls_back(self) -> None:
        assert step(facts(), now=100 + 599, fallback_after_ms=ms(600)) is Step.WAIT
        assert step(facts(), now=100 + 600, fallback_after_ms=ms(600)) is Step.FALL_BACK

    def test_a_recorded_start_of_the_request_holds_off_the_fallback(self) -> None:
        assert step(facts(running=("s1", 101)), now=900, fallback_after_ms=ms(600)) is Step.WAIT

    def test_the_connection_read_answers_with_a_marked_record(self) -> None:
        got = from_connection(datetime.fromtimestamp(130, tz=timezone.utc), None)
        assert got[0] is Step.SUCCESS and got[2] is not None
        assert got[2].ended_ms == ms(130) and is_derived_sync_id(got[2].sync_id)

    def test_the_connection_read_waits_asks_again_or_fails(self) -> None:
        before = datetime.fromtimestamp(90, tz=timezone.utc)
        after = datetime.fromtimestamp(130, tz=timezone.utc)

        def read(ok: datetime | None, failed: datetime | None, **fields: Any) -> Step:
            return from_connection(ok, failed, **fields)[0]

        assert read(before, None) is Step.WAIT
        assert read(after, None, syncing=True) is Step.WAIT
        assert read(after, None, running_at_ask=True) is Step.ASK_AGAIN
        assert read(before, after) is Step.FAIL
        assert read(None, None, paused=True) is Step.FAIL

    def test_a_rescheduled_manual_connection_is_asked_again_at_rescheduled_for(self) -> None:
        """Only a request runs a manual connection's rescheduled sync: ask again when due,
        not after execution_timeout (Fivetran's "Sync Connection Data")."""
        due = datetime.fromtimestamp(160, tz=timezone.utc)

        def read(now: float, *, rescheduled: bool = True, when: datetime | None = due) -> Step:
            return from_connection(
                datetime.fromtimestamp(90, tz=timezone.utc),
                None,
                rescheduled=rescheduled,
                rescheduled_for=when,
                reschedule_wait_ms=ms(30),
                now_ms=ms(now),
            )[0]

        assert read(159) is Step.WAIT
        assert read(160) is Step.ASK_AGAIN
        assert read(500, rescheduled=False) is Step.WAIT  # auto: Fivetran runs it itself
        assert read(129, when=None) is Step.WAIT  # no time given: reschedule_wait_time
        assert read(130, when=None) is Step.ASK_AGAIN
