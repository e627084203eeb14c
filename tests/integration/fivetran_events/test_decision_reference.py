"""The decision contract read from Redis: the reader + decide() against a brute-force
reference on random histories written through the webhook path (real redis-server).

The same contract on in-memory histories: tests/unit/fivetran_events/test_decision.py.
"""

from __future__ import annotations

import uuid
from random import Random

import redis
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

from fivetran_events import (
    Completion,
    HistoryReader,
    HistoryWriter,
    Outcome,
    decide,
    parse_event,
)
from fivetran_events.timeutil import iso, to_ms
from testkit.reference import StateChange, Sync, reference_decide
from testkit.support import at, encode, facts_from_history, payload

# Times fall on whole hours so that ties (an end exactly at the target, a success and a
# failure ending together) come up often: the contract's edges live there.
HOUR = 3_600_000
DAY = 24 * HOUR
T0 = to_ms(at(1))


def test_tie_before_target_success_is_later(client: redis.Redis) -> None:
    """A success and a failure ending at the same instant: the success is the latest."""
    writer = HistoryWriter(client, "tie:", retention_ms=10**13)
    for sid, status in (("f", "FAILED"), ("s", "SUCCESSFUL")):
        writer.record(parse_event(encode(payload("sync_end", "c", at(3), sid, status))))
    facts = HistoryReader(client, "tie:", DAY).facts("c", to_ms(at(4)))
    assert facts.latest_before_target is not None
    assert facts.latest_before_target.sync_id == "s"
    assert decide(facts, propagate_failures_forward=True).outcome is Outcome.WAIT


def hours(lo: int, hi: int) -> st.SearchStrategy[int]:
    return st.integers(lo, hi).map(lambda h: h * HOUR)


statuses = st.sampled_from(
    [
        "SUCCESSFUL",
        "FAILURE",
        "FAILED",
        "FAILURE_WITH_TASK",
        "RESCHEDULED",
        "CANCELED",
        "SOMETHING_NEW",
    ]
)
STATE_EVENTS = {
    "active": "resume_connector",
    "paused": "pause_connector",
    "deleted": "delete_connection",
    "connected": "connection_successful",
    "broken": "connection_failure",
}


@st.composite
def state_changes(draw: st.DrawFn) -> list[StateChange]:
    """Lifecycle events at distinct times (a minute past the hour: never on a sync's)."""
    times = draw(st.lists(hours(0, 22 * 24), max_size=3, unique=True))
    return [StateChange(t + 60_000, draw(st.sampled_from(sorted(STATE_EVENTS)))) for t in times]


@st.composite
def histories(draw: st.DrawFn) -> tuple[list[Sync], dict[str, int], list[tuple[str, int]]]:
    n = draw(st.integers(0, 12))
    syncs: list[Sync] = []
    starts: dict[str, int] = {}
    for i in range(n):
        sid = f"s{i}"
        start = T0 + draw(hours(0, 20 * 24))
        if draw(st.booleans()):
            starts[sid] = start
        end = start + draw(hours(0, 24))
        syncs.append(Sync(sid, end, draw(statuses)))
        # A retried sync ends again under the same id, later: two ends of one sync at the
        # same instant have no order, in Fivetran or in the contract.
        if draw(st.integers(0, 5)) == 0:
            syncs.append(Sync(sid, end + draw(hours(1, 24)), draw(statuses)))
    running = [(f"r{i}", T0 + draw(hours(0, 22 * 24))) for i in range(draw(st.integers(0, 2)))]
    return syncs, starts, running


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    history=histories(),
    target_off=hours(-24, 23 * 24),
    propagate=st.booleans(),
    always_wait=st.booleans(),
    criterion=st.sampled_from(["ended_after", "started_after"]),
    now_off=hours(0, 25 * 24),
    changes=state_changes(),
    wait_when_paused=st.booleans(),
    wait_when_broken=st.booleans(),
    shuffle=st.randoms(use_true_random=False),
)
def test_matches_reference(
    client: redis.Redis,
    history: tuple[list[Sync], dict[str, int], list[tuple[str, int]]],
    target_off: int,
    propagate: bool,
    always_wait: bool,
    criterion: str,
    now_off: int,
    changes: list[StateChange],
    wait_when_paused: bool,
    wait_when_broken: bool,
    shuffle: Random,
) -> None:
    """On random histories written through the webhook path, with lifecycle events
    arriving in any order among them, decide() equals the reference."""
    syncs, starts, running = history
    prefix = f"h{uuid.uuid4().hex[:8]}:"
    max_dur = 2 * DAY
    # No trimming: the syncs are written out of time order across weeks, and a trim 72 h
    # behind a late event drops starts a retried sync's end would still take (by design:
    # real deliveries are never that far apart; test_history_edges.py covers trimming).
    writer = HistoryWriter(client, prefix, retention_ms=10**13, trim_every=2**40)
    reader = HistoryReader(client, prefix, max_sync_duration_ms=max_dur)
    bodies = [payload("sync_start", "conn", iso(start), sid) for sid, start in starts.items()]
    bodies += [payload("sync_end", "conn", iso(s.ended_ms), s.sync_id, s.status) for s in syncs]
    bodies += [payload("sync_start", "conn", iso(start), sid) for sid, start in running]
    # Lifecycle events arrive in any order, anywhere among the syncs' (a start that comes
    # after its sync's end is another matter: test_history_edges.py).
    for c in changes:
        body = payload(STATE_EVENTS[c.state], "conn", iso(c.at_ms))
        bodies.insert(shuffle.randint(0, len(bodies)), body)
    for body in bodies:
        writer.record(parse_event(encode(body)))
    started = [StateChange(t, "started") for t in [*starts.values(), *dict(running).values()]]
    now = T0 + now_off
    target = T0 + target_off
    # Exactly at the maximum duration a sync is still running (docs/configuration.md);
    # only longer is lost.
    is_running = any(now - max_dur <= start for _, start in running)
    facts = reader.facts("conn", target, now=now, started_after=criterion == "started_after")
    got = decide(
        facts,
        target,
        propagate_failures_forward=propagate,
        always_wait_when_syncing=always_wait,
        criterion=criterion,
        wait_when_paused=wait_when_paused,
        wait_when_broken=wait_when_broken,
    )
    want = reference_decide(
        syncs,
        {**starts, **dict(running)},
        is_running,
        target,
        propagate,
        always_wait,
        criterion,
        [*changes, *started],
        wait_when_paused,
        wait_when_broken,
    )
    note(f"{syncs=} {starts=} {running=} {changes=} {target=} {now=} {got=}")
    assert got.outcome.value == want
    # The in-memory builder agrees too.
    mem = facts_from_history(
        [Completion(s.sync_id, s.status, s.ended_ms, s.status == "SUCCESSFUL") for s in syncs],
        {**starts, **dict(running)},
        facts.running,
        target,
        facts.lifecycle,
    )
    assert (
        decide(
            mem,
            propagate_failures_forward=propagate,
            always_wait_when_syncing=always_wait,
            criterion=criterion,
            wait_when_paused=wait_when_paused,
            wait_when_broken=wait_when_broken,
        ).outcome.value
        == want
    )
    for key in client.scan_iter(f"{prefix}*"):
        client.delete(key)
