"""A brute-force reading of the decision contract, for checking the real one.

It looks at the whole history with list comprehensions; nothing clever, so it can be
trusted by reading it next to the contract in fivetran_events/decision.py's docstring.
"""

from __future__ import annotations

from dataclasses import dataclass

FAILURES = ("FAILURE", "FAILURE_WITH_TASK", "FAILED")


@dataclass(frozen=True)
class Sync:
    sync_id: str
    ended_ms: int
    status: str  # SUCCESSFUL, FAILED, ..., RESCHEDULED, CANCELED or one nobody knows


@dataclass(frozen=True)
class StateChange:
    """A lifecycle event that sets the connector's state (or a sync_start: ``started``)."""

    at_ms: int
    state: str  # active, paused, deleted; connected, broken (the setup); or started


SETUP = ("connected", "broken")


def _newest_is(changes: list[StateChange], group: list[str], values: tuple[str, ...]) -> bool:
    """Whether the newest change of ``group`` is one of ``values``, no sync started after."""
    mine = [c for c in changes if c.state in group]
    if not mine:
        return False
    latest = max(mine, key=lambda c: c.at_ms)
    started_after = any(c.state == "started" and c.at_ms > latest.at_ms for c in changes)
    return latest.state in values and not started_after


def stopped(changes: list[StateChange]) -> bool:
    """Whether the newest state is paused or deleted with no sync started after it."""
    return _newest_is(changes, ["active", "paused", "deleted"], ("paused", "deleted"))


def broken(changes: list[StateChange]) -> bool:
    """Whether the newest setup event is a connection_failure, no sync started after it."""
    return _newest_is(changes, list(SETUP), ("broken",))


def reference_decide(
    completions: list[Sync],
    starts: dict[str, int],
    running: bool,
    target_ms: int,
    propagate_failures_forward: bool,
    always_wait_when_syncing: bool,
    criterion: str,
    changes: list[StateChange] | None = None,
    wait_when_paused: bool = False,
    wait_when_broken: bool = False,
) -> str:
    if always_wait_when_syncing and running:
        return "wait"
    real = [c for c in completions if c.status == "SUCCESSFUL" or c.status in FAILURES]
    for c in real:
        if c.status == "SUCCESSFUL" and c.ended_ms >= target_ms:
            if criterion == "ended_after":
                return "success"
            start = starts.get(c.sync_id)
            if start is not None and start >= target_ms:
                return "success"
    if any(c.status != "SUCCESSFUL" and c.ended_ms >= target_ms for c in real):
        return "fail"
    if stopped(changes or []) and not running and not wait_when_paused:
        return "fail"
    if broken(changes or []) and not running and not wait_when_broken:
        return "fail"
    ends = sorted(completions, key=lambda c: (c.ended_ms, c in real))
    if ends and ends[-1].status == "RESCHEDULED":
        return "wait"  # the latest end is a reschedule: Fivetran runs the sync again
    if any(c.ended_ms >= target_ms for c in real):
        return "wait"  # rule 6 applies only when nothing ended at or after T
    before = [c for c in real if c.ended_ms < target_ms]
    if not before:
        return "wait"
    latest = max(before, key=lambda c: (c.ended_ms, c.status == "SUCCESSFUL"))
    if propagate_failures_forward and latest.status != "SUCCESSFUL":
        return "fail"
    return "wait"
