"""Bounded reads of the sync history for the "Fivetran syncs" view.

A page costs the same for ten syncs as for a year of hourly ones: nothing walks a history
(a page of connectors, at most ``MAX_SYNCS`` syncs and ``MAX_DAYS`` decisions, ``LIMIT``-ed).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import date, datetime, time, timedelta

from fivetran_events import (
    Completion,
    Criterion,
    Decision,
    HistoryReader,
    RunningSync,
    as_text,
)
from fivetran_events.decision import Lifecycle
from fivetran_events.deliveries import BY_ATTENTION, Field
from fivetran_events.keys import delivery_key, sync_deliveries_key
from fivetran_events.model import FAILURE_STATUSES, RESCHEDULED
from fivetran_events.partitions import Completed, Grain, completed_each
from fivetran_events.timeutil import UTC, now_ms, parse_iso, to_ms

#: The most connectors one list page shows.
MAX_CONNECTORS = 500
#: The most syncs the timeline draws for one range (the newest are kept).
MAX_SYNCS = 500
#: The most days a calendar decides: a year of backfill and some.
MAX_DAYS = 400
#: Forwarding states, the one that needs attention first.
FORWARDING_ORDER = tuple(s.value for s in BY_ATTENTION)


@dataclass(frozen=True)
class ConnectorRow:
    """One line of the list: what a person scans to find a connector in trouble."""

    connector_id: str
    name: str | None
    type: str | None
    last_success: Completion | None
    last_failure: Completion | None
    running: RunningSync | None
    #: The states of the last success's deliveries to Airflow: state -> count.
    forwarding: dict[str, int] = field(default_factory=dict)
    #: Paused, deleted, broken: what Fivetran's lifecycle events say of it now.
    lifecycle: Lifecycle = field(default_factory=Lifecycle)
    #: Seconds past its due time (0: on time; None: no objective), freshness.Freshness.
    overdue_seconds: int | None = None

    @property
    def forwarding_state(self) -> str | None:
        """The state that needs attention first, or None when nothing was forwarded."""
        return next((s for s in FORWARDING_ORDER if self.forwarding.get(s)), None)


def connector_page(
    reader: HistoryReader, offset: int, limit: int, now: int | None = None
) -> tuple[list[ConnectorRow], int]:
    """Return one page of connectors, sorted by id, and how many there are in all."""
    ids = reader.connector_ids()
    page = ids[offset : offset + limit]
    newest = reader.newest_of(page, now)
    forwarding = _forwarding(reader, page, [ok for _, (ok, _, _) in newest])
    clock = now_ms() if now is None else now
    rows = [
        ConnectorRow(
            rec.connector_id,
            rec.name,
            rec.type,
            *last,
            fwd,
            rec.lifecycle,
            reader.freshness.describe(rec, last[0].ended_ms if last[0] else None, clock)[
                "overdue_seconds"
            ],
        )
        for (rec, last), fwd in zip(newest, forwarding, strict=True)
    ]
    return rows, len(ids)


def _forwarding(
    reader: HistoryReader, page: list[str], successes: list[Completion | None]
) -> list[dict[str, int]]:
    """Count the delivery states of each connector's newest success (two round trips)."""
    with_success = [
        (i, cid, ok) for i, (cid, ok) in enumerate(zip(page, successes, strict=True)) if ok
    ]
    pipe = reader.client.pipeline(transaction=False)
    for _, cid, ok in with_success:
        # A sync has one delivery per dataset URI of its connector: a handful.
        pipe.smembers(sync_deliveries_key(reader.prefix, cid, ok.sync_id))
    members = pipe.execute() if with_success else []
    pipe = reader.client.pipeline(transaction=False)
    owners = []
    for (i, _, _), ids in zip(with_success, members, strict=True):
        for did in sorted(as_text(d) for d in ids):
            pipe.hget(delivery_key(reader.prefix, did), Field.STATE)
            owners.append(i)
    counts: list[dict[str, int]] = [{} for _ in page]
    for i, state in zip(owners, pipe.execute() if owners else [], strict=True):
        if state is not None:  # an expired record: nothing to show
            name = as_text(state)
            counts[i][name] = counts[i].get(name, 0) + 1
    return counts


@dataclass(frozen=True)
class Bar:
    """One sync on the timeline: from its start (when known) to its end (None: running)."""

    sync_id: str
    status: str
    kind: str  # success, failure, rescheduled, other (CANCELED, unknown), running, stale
    start_ms: int | None
    end_ms: int | None
    reason: str | None = None
    #: Fivetran's data.taskType, and data.rescheduledAt of a RESCHEDULED end.
    task_type: str | None = None
    rescheduled_at_ms: int | None = None
    #: The delivery carried no sync_id: this one was derived from connector and time.
    derived: bool = False
    #: "imported" (Fivetran's LOG table), "reconciled" (its REST API), or None (webhook).
    source: str | None = None


def _kind(status: str) -> str:
    """Color a status: CANCELED and any status Fivetran adds are neither success nor failure."""
    if status == "SUCCESSFUL":
        return "success"
    if status in FAILURE_STATUSES:
        return "failure"
    if status in ("RUNNING", "STALE", RESCHEDULED):
        return status.lower()
    return "other"


def _ms(text: str | None) -> int | None:
    return None if text is None else to_ms(parse_iso(text))


def timeline(
    reader: HistoryReader,
    connector_id: str,
    since_ms: int,
    until_ms: int,
    now: int | None = None,
    limit: int = MAX_SYNCS,
) -> tuple[list[Bar], bool]:
    """Return the newest ``limit`` syncs that ended (or started) in the range, and if more did."""
    rows = reader.syncs(connector_id, since_ms, until_ms, limit=limit + 1, now=now)
    bars = [
        Bar(
            r["sync_id"],
            r["status"],
            _kind(r["status"]),
            _ms(r["started_at"]),
            _ms(r["ended_at"]),
            r.get("reason"),
            r.get("task_type"),
            _ms(r.get("rescheduled_at")),
            bool(r.get("sync_id_derived")),
            r.get("source"),
        )
        for r in rows[:limit]
    ]
    return bars, len(rows) > limit


def partitions(
    reader: HistoryReader,
    connector_id: str,
    since_ms: int,
    until_ms: int,
    grain: Grain,
    criterion: Criterion,
) -> dict[tuple[str, int], Completed]:
    """Return, per success in the range (sync id, end), the periods it completed."""
    previous, successes = reader.successes_between(connector_id, since_ms, until_ms, MAX_SYNCS)
    done = completed_each(successes, previous, grain, criterion)
    return {(c.sync_id, c.ended_ms): d for c, d in zip(successes, done, strict=True)}


@dataclass(frozen=True)
class Flags:
    """The sensor's decision flags, as the page was asked for them."""

    criterion: Criterion = Criterion.ENDED_AFTER
    propagate_failures_forward: bool = True
    always_wait_when_syncing: bool = False
    wait_when_paused: bool = False
    wait_when_broken: bool = False

    def as_params(self) -> dict[str, str]:
        """Return the flags as query parameters (the URL contract of airflow_plugin.ui)."""
        return {
            k: v.value if isinstance(v, Criterion) else str(v).lower()
            for k, v in asdict(self).items()
        }


def decide_at(
    reader: HistoryReader, connector_id: str, target_ms: int, flags: Flags, now: int | None = None
) -> Decision:
    """Decide as the sensor would for ``target_ms``: one round trip, O(log n) reads."""
    return reader.decide(connector_id, target_ms, now=now, **asdict(flags))


def day_targets(first: date, last: date) -> list[int]:
    """Return midnight UTC of each day from ``first`` to ``last``: a @daily DAG's targets."""
    days = (last - first).days + 1
    if days < 1 or days > MAX_DAYS:
        raise ValueError(f"the range must hold 1 to {MAX_DAYS} days, not {days}")
    start = datetime.combine(first, time(0), tzinfo=UTC)
    return [to_ms(start + timedelta(days=i)) for i in range(days)]


def calendar(
    reader: HistoryReader,
    connector_id: str,
    targets: list[int],
    flags: Flags,
    now: int | None = None,
) -> list[Decision]:
    """Decide each target (at most ``MAX_DAYS``), as a sensor with ``flags`` would."""
    if len(targets) > MAX_DAYS:
        raise ValueError(f"at most {MAX_DAYS} targets, not {len(targets)}")
    return [decide_at(reader, connector_id, t, flags, now) for t in targets]
