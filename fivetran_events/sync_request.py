"""Which sync answers a request to sync: the sync operator's decision, pure.

A request made at T ends on the first sync that *started* at or after T: one already
running holds rows from before T. Without ``force`` Fivetran starts nothing while a sync
runs, so the request is asked again once it ended (ASK_AGAIN); with ``force`` (or a
resync) the request's own sync follows, so it waits. With nothing recorded for
``fallback_after_ms`` the connection is read from Fivetran instead (FALL_BACK).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime
from enum import Enum

from .decision import Completion, Criterion, Decision, Facts, Outcome, decide
from .model import RESCHEDULED, derived_sync_id
from .timeutil import iso, to_ms


class Step(str, Enum):
    SUCCESS = "success"
    FAIL = "fail"
    WAIT = "wait"
    ASK_AGAIN = "ask_again"
    FALL_BACK = "fall_back"


@dataclass(frozen=True)
class Answer:
    """The next step, why, and the decision it rests on (its sync, its recheck time)."""

    step: Step
    reason: str
    decision: Decision
    #: WAIT: decide for this target from now on.
    retarget_ms: int | None = None

    @property
    def sync(self) -> Completion | None:
        sync = self.decision.sync
        return sync if isinstance(sync, Completion) else None


def _ours(c: Completion | None, asked_ms: int) -> bool:
    return c is not None and c.started_ms is not None and c.started_ms >= asked_ms


def earlier_end(facts: Facts) -> Completion | None:
    """The latest end at or after the target of a sync that started before it (or
    whose start is unknown): the one running when the request was made."""
    t = facts.target_ms
    ends = [*facts.successes_from_target, facts.first_failure_from_target, facts.latest_other]
    earlier = [c for c in ends if c is not None and c.ended_ms >= t and not _ours(c, t)]
    return max(earlier, key=Completion.order_key, default=None)


def answer(
    facts: Facts,
    *,
    force: bool = False,
    now_ms: int,
    asked_ms: int | None = None,
    fallback_after_ms: int | None = None,
    reschedule_wait_ms: int | None = None,
    wait_when_broken: bool = False,
) -> Answer:
    """Decide the next step of a request made at ``facts.target_ms``, last asked at
    ``asked_ms``. A RESCHEDULED sync of the request is asked again once its ``rescheduledAt``
    (or ``reschedule_wait_ms``) has passed with nothing running."""
    t = facts.target_ms
    # The operator asked only once Fivetran's connection said it was not broken: a
    # breakage recorded before the request is older news.
    life = facts.lifecycle
    stale = life is not None and life.broken and (life.setup_at_ms or 0) < t
    d = decide(
        facts,
        criterion=Criterion.STARTED_AFTER,
        propagate_failures_forward=False,
        wait_when_broken=wait_when_broken or stale,
    )
    if d.outcome is Outcome.SUCCESS:
        return Answer(Step.SUCCESS, d.reason, d)
    sync = d.sync if isinstance(d.sync, Completion) else None
    if d.outcome is Outcome.FAIL and (sync is None or _ours(sync, t)):
        return Answer(Step.FAIL, d.reason, d)
    running = facts.running
    running_ours = running is not None and running.started_ms >= t
    if sync is not None and sync.status == RESCHEDULED and _ours(sync, t) and running is None:
        due = d.recheck_at_ms
        if due is None and reschedule_wait_ms is not None:
            due = sync.ended_ms + reschedule_wait_ms
        if due is not None and now_ms >= due:
            # Fivetran runs a manual connection's rescheduled sync only when asked.
            return Answer(
                Step.ASK_AGAIN,
                f"sync {sync.sync_id} was RESCHEDULED to {iso(due)} and has not run again: "
                "asking again",
                d,
            )
        d = replace(d, recheck_at_ms=due)
    before = earlier_end(facts)
    if (
        before is not None
        and running is not None
        and running_ours
        and running.started_ms > before.ended_ms
    ):
        return Answer(
            Step.WAIT,
            f"sync {running.sync_id} started at {iso(running.started_ms)}, after the "
            f"earlier sync {before.sync_id} ended; waiting for it",
            Decision(Outcome.WAIT, d.reason, t, running),
            retarget_ms=running.started_ms,
        )
    if before is not None and running is None:
        if force:
            return Answer(
                Step.WAIT,
                f"sync {before.sync_id}, which started before the request, ended "
                f"{before.status} at {iso(before.ended_ms)}; the forced sync follows it",
                Decision(Outcome.WAIT, d.reason, t, before),
            )
        return Answer(
            Step.ASK_AGAIN,
            f"sync {before.sync_id} started before the request (Fivetran starts no second "
            f"sync while one runs) and ended {before.status} at {iso(before.ended_ms)}: "
            "asking again",
            Decision(Outcome.WAIT, d.reason, t, before),
        )
    nothing_ours = running is None and not any(
        _ours(c, t) for c in (*facts.successes_from_target, facts.latest_other)
    )
    since = t if asked_ms is None else asked_ms
    if (
        fallback_after_ms is not None
        and before is None
        and nothing_ours
        and now_ms - since >= fallback_after_ms
    ):
        return Answer(
            Step.FALL_BACK,
            f"nothing recorded for {(now_ms - since) / 1000:g} s since the request at "
            f"{iso(since)} (is the webhook delivered?): reading the connection from Fivetran",
            d,
        )
    return Answer(Step.WAIT, d.reason, d)


def answer_from_connection(
    *,
    asked_ms: int,
    succeeded_at: datetime | None,
    failed_at: datetime | None,
    syncing: bool,
    paused: bool,
    running_at_ask: bool,
    force: bool,
    connector_id: str,
    rescheduled: bool = False,
    rescheduled_for: datetime | None = None,
    reschedule_wait_ms: int | None = None,
    now_ms: int = 0,
) -> tuple[Step, str, Completion | None]:
    """Decide a request from Fivetran's connection fields (the fallback: no start times, so an
    end after a request without ``force`` while one ran may be that sync's: ask again). A
    manual connection ``rescheduled`` runs again only on request: asked again at
    ``rescheduled_for`` (or ``reschedule_wait_ms`` after the request, or at once)."""
    if paused:
        return Step.FAIL, f"connector {connector_id} was paused in Fivetran", None
    if syncing:
        return Step.WAIT, f"connector {connector_id} is syncing (Fivetran's sync_state)", None
    ends = [(to_ms(at), ok) for at, ok in ((succeeded_at, True), (failed_at, False)) if at]
    ended_ms, ok = max(ends, default=(None, False))
    if (ended_ms is None or ended_ms < asked_ms) and rescheduled:
        due = to_ms(rescheduled_for) if rescheduled_for else asked_ms + (reschedule_wait_ms or 0)
        if now_ms < due:
            return Step.WAIT, f"connector {connector_id} is rescheduled to {iso(due)}", None
        return (
            Step.ASK_AGAIN,
            f"connector {connector_id}'s sync was rescheduled to {iso(due)} and, the "
            "connection being manual, runs only when asked: asking again",
            None,
        )
    if ended_ms is None or ended_ms < asked_ms:
        return Step.WAIT, f"no sync of connector {connector_id} ended since {iso(asked_ms)}", None
    if running_at_ask and not force:
        return (
            Step.ASK_AGAIN,
            f"a sync ended at {iso(ended_ms)}, but one was running when the request was made: "
            "asking again",
            None,
        )
    how = "succeeded_at" if ok else "failed_at"
    completion = Completion(
        sync_id=derived_sync_id(connector_id, ended_ms),
        status="SUCCESSFUL" if ok else "FAILURE",
        ended_ms=ended_ms,
        succeeded=ok,
        reason=None if ok else "failed_at moved (read from Fivetran's API; no webhook recorded)",
    )
    return (
        Step.SUCCESS if ok else Step.FAIL,
        f"Fivetran's {how} is {iso(ended_ms)}, after the request at {iso(asked_ms)}",
        completion,
    )
