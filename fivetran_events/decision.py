"""The decision the sensor makes, as a pure function of history facts and a target.

The contract (docs/internals.md, "The decision"; docs/decision.md for users):

1. ``always_wait_when_syncing`` and a sync is running now: WAIT.
2. A successful sync ended (``started_after``: also started) at or after the target: SUCCESS.
3. Else a failed sync ended at or after the target: FAIL.
4. Else a connector paused or deleted as of now, no sync running: FAIL (no sync will
   come), unless ``wait_when_paused``; likewise a broken one (``connection_failure`` or
   reconcile's ``setup_state: broken``, no sync started since), unless ``wait_when_broken``.
5. Else the latest end is RESCHEDULED: WAIT, and look again at its ``rescheduledAt``.
6. Else nothing ended at or after the target: FAIL with ``propagate_failures_forward``
   and a failure as the latest completion before it; otherwise WAIT (so too under
   ``started_after`` when a success ended after the target without counting).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import Enum
from typing import Any, TypedDict

from .freshness import Freshness, Record, Schedule, late_text
from .model import FAILURE_STATUSES, RESCHEDULED, SOURCE_NAMES, is_derived_sync_id
from .timeutil import iso, parse_iso, to_ms, to_utc


class Outcome(str, Enum):
    SUCCESS = "success"
    FAIL = "fail"
    WAIT = "wait"


class Criterion(str, Enum):
    ENDED_AFTER = "ended_after"
    STARTED_AFTER = "started_after"


#: ``decide``'s arguments besides the facts, as every caller names them.
FLAGS = (
    "criterion",
    "propagate_failures_forward",
    "always_wait_when_syncing",
    "wait_when_paused",
    "wait_when_broken",
)


class Flags(TypedDict, total=False):
    propagate_failures_forward: bool
    always_wait_when_syncing: bool
    wait_when_paused: bool
    wait_when_broken: bool


def parse_criterion(value: str | Criterion) -> Criterion:
    try:
        return Criterion(value)
    except ValueError:
        names = ", ".join(c.value for c in Criterion)
        raise ValueError(f"criterion must be one of {names}, not {value!r}") from None


@dataclass(frozen=True)
class Completion:
    """One ``sync_end``: a success, a failure, or an end that completes nothing."""

    sync_id: str
    status: str
    ended_ms: int
    succeeded: bool
    reason: str | None = None
    task_type: str | None = None
    started_ms: int | None = None
    rescheduled_at_ms: int | None = None
    #: model.SOURCE_*: "" for a webhook delivery.
    source: str = ""

    @property
    def failed(self) -> bool:
        return not self.succeeded and self.status in FAILURE_STATUSES

    @property
    def derived(self) -> bool:
        return is_derived_sync_id(self.sync_id)

    def order_key(self) -> tuple[int, int]:
        """Order completions by end time; on a tie the success counts as the later one."""
        return (self.ended_ms, 1 if self.succeeded else 0)

    def to_dict(self) -> dict[str, Any]:
        out = {
            "sync_id": self.sync_id,
            "sync_id_derived": self.derived,
            "status": self.status,
            "started_at": iso(self.started_ms),
            "ended_at": iso(self.ended_ms),
            "reason": self.reason,
            "task_type": self.task_type,
            "rescheduled_at": iso(self.rescheduled_at_ms),
        }
        if self.source:  # only when not delivered by the webhook: "imported", "reconciled"
            out["source"] = SOURCE_NAMES.get(self.source, self.source)
        return out


@dataclass(frozen=True)
class RunningSync:
    """A sync that started and has not ended (within the maximum sync duration)."""

    sync_id: str
    started_ms: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "sync_id": self.sync_id,
            "sync_id_derived": is_derived_sync_id(self.sync_id),
            "status": "RUNNING",
            "started_at": iso(self.started_ms),
            "ended_at": None,
            "reason": None,
            "task_type": None,
            "rescheduled_at": None,
        }


STOPPED_STATES = frozenset({"paused", "deleted"})
#: The setup reason of a connector broken by reconcile's reading, not by a webhook event.
BROKEN_BY_API = "setup_state broken in Fivetran's connection list"


@dataclass(frozen=True)
class Lifecycle:
    """What the lifecycle events say of a connector now (``model.LIFECYCLE_EVENTS``)."""

    state: str | None = None
    state_at_ms: int | None = None
    state_event: str | None = None
    setup: str | None = None
    setup_at_ms: int | None = None
    setup_reason: str | None = None

    @property
    def stopped(self) -> bool:
        return self.state in STOPPED_STATES

    @property
    def broken(self) -> bool:
        return self.setup == "broken"

    @classmethod
    def from_meta(cls, meta: Mapping[str, Any]) -> Lifecycle:
        """Read a connector's stored metadata. A paused or deleted connector starts no sync, so
        a later ``sync_start`` means active again (``resume_connector`` may be late or lost)."""
        state, state_at, event = meta.get("state"), meta.get("state_at"), meta.get("state_event")
        started = meta.get("started_at")
        if state in STOPPED_STATES and started is not None and (state_at or "") < started:
            state, state_at, event = "active", started, "sync_start"
        setup, setup_at, reason = meta.get("setup"), meta.get("setup_at"), meta.get("setup_reason")
        # Fivetran's connection list, read by reconcile (freshness.Schedule) after the
        # newest setup event.
        seen = meta.get("schedule")
        listed, seen_at = (
            (seen.get("setup_state"), seen.get("seen_at"))
            if isinstance(seen, dict)
            else (None, None)
        )
        if isinstance(listed, str) and listed != setup and (setup_at or "") < str(seen_at or ""):
            why = BROKEN_BY_API if listed == "broken" else None
            setup, setup_at, reason = listed, seen_at, why
        if setup == "broken" and started is not None and (setup_at or "") < started:
            setup, setup_at, reason = "connected", started, None  # a sync started since
        return cls(
            state=state,
            state_at_ms=_ms_or_none(state_at),
            state_event=event,
            setup=setup,
            setup_at_ms=_ms_or_none(setup_at),
            setup_reason=reason,
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "state": self.state or "active",
            "state_at": iso(self.state_at_ms),
            "state_event": self.state_event,
            "setup": self.setup,
            "setup_at": iso(self.setup_at_ms),
            "setup_reason": self.setup_reason,
        }


@dataclass(frozen=True)
class Facts:
    """What the decision needs to know about one connector for one target;
    ``successes_from_target`` holds one that started at or after it whenever one exists."""

    target_ms: int
    successes_from_target: tuple[Completion, ...] = ()
    first_failure_from_target: Completion | None = None
    latest_before_target: Completion | None = None
    running: RunningSync | None = None
    latest_other: Completion | None = None
    lifecycle: Lifecycle | None = None
    #: For ``fail_when_overdue_after``: the newest success before the target, the schedule.
    latest_success_before_target: Completion | None = None
    schedule: Schedule | None = None


@dataclass(frozen=True)
class Decision:
    """The outcome, the deciding sync and a reason; ``recheck_at_ms``: when to look again."""

    outcome: Outcome
    reason: str
    target_ms: int
    sync: Completion | RunningSync | None = field(default=None)
    recheck_at_ms: int | None = None

    @classmethod
    def from_dict(cls, body: Mapping[str, Any]) -> Decision:
        """Rebuild a decision from ``to_dict`` (a trigger's event carries it)."""
        raw = body.get("sync")
        sync: Completion | RunningSync | None = None
        if raw is not None:
            started = _ms_or_none(raw.get("started_at"))
            if raw["status"] == "RUNNING":
                assert started is not None
                sync = RunningSync(raw["sync_id"], started)
            else:
                sync = Completion(
                    sync_id=raw["sync_id"],
                    status=raw["status"],
                    ended_ms=to_ms(parse_iso(raw["ended_at"])),
                    succeeded=raw["status"] == "SUCCESSFUL",
                    reason=raw.get("reason"),
                    task_type=raw.get("task_type"),
                    started_ms=started,
                    rescheduled_at_ms=_ms_or_none(raw.get("rescheduled_at")),
                )
        target = to_ms(parse_iso(body["target"]))
        recheck = _ms_or_none(body.get("recheck_at"))
        return cls(Outcome(body["decision"]), body["reason"], target, sync, recheck)

    def to_dict(self) -> dict[str, Any]:
        return {
            "decision": self.outcome.value,
            "reason": self.reason,
            "sync": self.sync.to_dict() if self.sync is not None else None,
            "target": iso(self.target_ms),
            "recheck_at": iso(self.recheck_at_ms),
        }


def counting_success(facts: Facts, criterion: Criterion) -> Completion | None:
    for c in facts.successes_from_target:
        if criterion is Criterion.ENDED_AFTER:
            return c
        if c.started_ms is not None and c.started_ms >= facts.target_ms:
            return c
    return None


def decide(
    facts: Facts,
    target: datetime | int | None = None,
    *,
    propagate_failures_forward: bool = True,
    always_wait_when_syncing: bool = False,
    criterion: Criterion | str = Criterion.ENDED_AFTER,
    wait_when_paused: bool = False,
    wait_when_broken: bool = False,
) -> Decision:
    """Decide SUCCESS, FAIL or WAIT for ``facts`` fetched at ``target``."""
    target_ms = facts.target_ms
    if target is not None:
        given = target if isinstance(target, int) else to_ms(to_utc(target))
        if given != target_ms:
            raise ValueError("facts were fetched for another target")
    crit = parse_criterion(criterion)
    when = iso(target_ms)

    if always_wait_when_syncing and facts.running is not None:
        run = facts.running
        return Decision(
            Outcome.WAIT,
            f"sync {run.sync_id} is running (started "
            f"{iso(run.started_ms)}) and always_wait_when_syncing is set",
            target_ms,
            run,
        )
    success = counting_success(facts, crit)
    if success is not None:
        how = "ended" if crit is Criterion.ENDED_AFTER else "started and ended"
        return Decision(
            Outcome.SUCCESS,
            f"sync {success.sync_id} {how} at or after {when} (ended {iso(success.ended_ms)})",
            target_ms,
            success,
        )
    failure = facts.first_failure_from_target
    if failure is not None:
        return Decision(
            Outcome.FAIL,
            f"sync {failure.sync_id} failed at "
            f"{iso(failure.ended_ms)}, at or after {when}"
            f"{_because(failure)}",
            target_ms,
            failure,
        )
    life = facts.lifecycle
    if life is not None and life.stopped and facts.running is None and not wait_when_paused:
        since = f" at {iso(life.state_at_ms)}" if life.state_at_ms is not None else ""
        return Decision(
            Outcome.FAIL,
            f"the connector was {life.state}{since} and no sync counts for {when}, so none "
            "will come (set wait_when_paused to keep waiting)",
            target_ms,
            None,
        )
    if life is not None and life.broken and facts.running is None and not wait_when_broken:
        why = life.setup_reason or ""
        if why != BROKEN_BY_API:
            why = f"connection_failure ({why})" if why else "connection_failure"
        return Decision(
            Outcome.FAIL,
            f"the connector is broken: {why} at {iso(life.setup_at_ms)}, and no sync counts "
            f"for {when} (set wait_when_broken to keep waiting)",
            target_ms,
            None,
        )
    rescheduled = _rescheduled_last(facts)
    if rescheduled is not None:
        again = rescheduled.rescheduled_at_ms
        return Decision(
            Outcome.WAIT,
            f"sync {rescheduled.sync_id} was RESCHEDULED at {iso(rescheduled.ended_ms)}; "
            + (
                f"Fivetran runs it again at {iso(again)} (rescheduledAt)"
                if again is not None
                else "Fivetran gave no rescheduledAt"
            ),
            target_ms,
            rescheduled,
            recheck_at_ms=again,
        )
    if facts.successes_from_target:
        # started_after only: a success ended after the target but started before it. A
        # sync did complete after the target, so a failure before it is not propagated.
        return Decision(
            Outcome.WAIT, f"no successful sync started at or after {when} yet", target_ms, None
        )
    latest = facts.latest_before_target
    if propagate_failures_forward and latest is not None and latest.failed:
        return Decision(
            Outcome.FAIL,
            f"the latest sync before {when}, {latest.sync_id}, "
            f"failed at {iso(latest.ended_ms)}{_because(latest)} and "
            "propagate_failures_forward is set",
            target_ms,
            latest,
        )
    return Decision(Outcome.WAIT, f"no sync has completed at or after {when} yet", target_ms, None)


def overdue_fail(
    decision: Decision,
    facts: Facts,
    rec: Record,
    freshness: Freshness,
    after_s: float | None,
    now: int,
) -> Decision:
    """Turn a WAIT into a FAIL when the connector is more than ``after_s`` past its due
    time (``fail_when_overdue_after``), naming how late it is; not while a sync runs."""
    if decision.outcome is not Outcome.WAIT or after_s is None or facts.running is not None:
        return decision
    ends = (
        c.ended_ms for c in (facts.latest_success_before_target, *facts.successes_from_target) if c
    )
    last = max(ends, default=None)
    due = freshness.due_ms(rec, last)
    late = None if due is None else now - due
    if late is None or late <= after_s * 1000:
        return decision
    return Decision(
        Outcome.FAIL,
        f"the connector is overdue by {late_text(late // 1000)} (due at {iso(due)}, its last "
        f"success ended {iso(last)}), more than fail_when_overdue_after={after_s:g} s; "
        f"before that: {decision.reason}",
        decision.target_ms,
        None,
    )


def _rescheduled_last(facts: Facts) -> Completion | None:
    """The connector's latest end, when it is RESCHEDULED."""
    other = facts.latest_other
    if other is None or other.status != RESCHEDULED:
        return None
    known = [c for c in (facts.latest_before_target, *facts.successes_from_target) if c]
    if any(c.ended_ms >= other.ended_ms for c in known):
        return None
    return other


def _ms_or_none(text: str | None) -> int | None:
    return None if text is None else to_ms(parse_iso(text))


def _because(c: Completion) -> str:
    return f" ({c.status}: {c.reason})" if c.reason else f" ({c.status})"
