"""A brute-force reading of the decision contract, for checking the real one.

It looks at the whole history with list comprehensions; nothing clever, so it can be
trusted by reading it next to the contract in fivetran_events/decision.py's docstring.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Sync:
    sync_id: str
    ended_ms: int
    status: str  # SUCCESSFUL, FAILED, ... or RESCHEDULED


def reference_decide(
    completions: list[Sync],
    starts: dict[str, int],
    running: bool,
    target_ms: int,
    propagate_failures_forward: bool,
    always_wait_when_syncing: bool,
    criterion: str,
) -> str:
    if always_wait_when_syncing and running:
        return "wait"
    real = [c for c in completions if c.status != "RESCHEDULED"]
    for c in real:
        if c.status == "SUCCESSFUL" and c.ended_ms >= target_ms:
            if criterion == "ended_after":
                return "success"
            start = starts.get(c.sync_id)
            if start is not None and start >= target_ms:
                return "success"
    if any(c.status != "SUCCESSFUL" and c.ended_ms >= target_ms for c in real):
        return "fail"
    if any(c.ended_ms >= target_ms for c in real):
        return "wait"  # rule 4 applies only when nothing ended at or after T
    before = [c for c in real if c.ended_ms < target_ms]
    if not before:
        return "wait"
    latest = max(before, key=lambda c: (c.ended_ms, c.status == "SUCCESSFUL"))
    if propagate_failures_forward and latest.status != "SUCCESSFUL":
        return "fail"
    return "wait"
