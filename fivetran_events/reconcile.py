"""Reconcile the history against Fivetran's REST API: completions the webhook never delivered.

Each connection's ``succeeded_at``/``failed_at`` is compared with the history's newest end
of that outcome; only where the history lacks it is the sync history read, from that end on
(so an older missed sync is recovered too). Where that endpoint answers 404 or 403, or lists
no sync near the time, the completion is recorded with a derived sync id. The record script
takes an end from another source within codec.SAME_SYNC_WINDOW_MS as the same one, so a
second run records nothing. Gaps older than ``HISTORY_LOOKBACK_MS`` are the LOG import's.
Each connection's schedule and setup state is kept with its connector (``freshness.Schedule``).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

import redis

from .exceptions import FivetranAuthFailed, FivetranNotFound
from .freshness import Schedule
from .history.codec import SAME_SYNC_WINDOW_MS
from .history.reader import HistoryReader
from .history.writer import OnSuccess, WriteStatus, record_many, record_schedules
from .keys import reconcile_key
from .model import (
    SOURCE_RECONCILED,
    Event,
    EventKind,
    derived_sync_id,
    is_derived_sync_id,
    is_valid_id,
)
from .text import as_text
from .timeutil import from_ms, iso, now_ms, to_ms

if TYPE_CHECKING:  # the web process reads the outcome without loading an HTTP client
    from .decision import Completion
    from .fivetran_api import FivetranClient
    from .fivetran_records import Connection, SyncRecord, Webhook

log = logging.getLogger(__name__)

#: After a day of missed runs /readyz says "never ran".
OUTCOME_TTL_S = 24 * 3600
#: How far back a connection's sync history is read at most: four of its 7-day windows.
HISTORY_LOOKBACK_MS = 28 * 24 * 3600 * 1000
#: The longest failure reason kept, as a webhook delivery's (model._Data).
MAX_REASON = 8192


def _end(
    c: Connection, at: datetime, status: str, sync_id: str | None = None, reason: str | None = None
) -> Event:
    """A reconciled ``sync_end`` of ``c`` (a derived sync id when Fivetran names none)."""
    return Event(
        kind=EventKind.SYNC_END,
        event="sync_end",
        created=at,
        connector_id=c.id,
        connector_type=c.service,
        group_id=c.group_id,
        sync_id=sync_id or derived_sync_id(c.id, to_ms(at)),
        status=status,
        reason=reason[:MAX_REASON] if reason else None,
        source=SOURCE_RECONCILED,
    )


def completions_of(connections: Iterable[Connection]) -> Iterator[Event]:
    """The completions Fivetran reports, as reconciled ``sync_end`` events."""
    for c in connections:
        if not is_valid_id(c.id) or c.id.startswith("_"):
            continue
        ends: list[tuple[datetime, str]] = [
            (at, status)
            for at, status in ((c.succeeded_at, "SUCCESSFUL"), (c.failed_at, "FAILURE"))
            if at is not None
        ]
        yield from (_end(c, at, status) for at, status in sorted(ends))


def schedule_of(c: Connection, seen_at: str | None) -> Schedule:
    """The schedule and setup state Fivetran's connection list reports for ``c``."""
    return Schedule(
        sync_frequency=c.sync_frequency,
        daily_sync_time=c.daily_sync_time,
        schedule_type=c.schedule_type,
        paused=c.paused,
        setup_state=c.setup_state,
        seen_at=seen_at,
    )


@dataclass
class Outcome:
    started_ms: int
    finished_ms: int = 0
    connections: int = 0
    recorded: list[Event] = field(default_factory=list)
    known: int = 0
    #: Older than the retention, or dated in the future.
    skipped: int = 0
    #: Connections whose sync history was read (their reported completion was new).
    sync_histories: int = 0
    inactive_webhooks: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "started_at": iso(self.started_ms),
            "finished_at": iso(self.finished_ms),
            "connections": self.connections,
            "recorded": len(self.recorded),
            "known": self.known,
            "skipped": self.skipped,
            "sync_histories": self.sync_histories,
            "reconciled": [
                {
                    "connector_id": e.connector_id,
                    "sync_id": e.sync_id,
                    "status": e.status,
                    "ended_at": iso(e.created_ms),
                }
                for e in self.recorded
            ],
            "inactive_webhooks": self.inactive_webhooks,
        }


def _webhook_dict(w: Webhook) -> dict[str, Any]:
    return {"id": w.id, "type": w.type, "group_id": w.group_id, "url": w.url}


def record_completions(
    client: redis.Redis,
    prefix: str,
    retention_ms: int,
    max_clock_skew_ms: int,
    events: Sequence[Event],
    outcome: Outcome,
    on_success: OnSuccess | None = None,
    now: int | None = None,
) -> Outcome:

    now = now_ms() if now is None else now
    dated = [e for e in events if e.created_ms - now <= max_clock_skew_ms]
    outcome.skipped += len(events) - len(dated)
    for event, status in record_many(
        client, prefix, dated, retention_ms, now=now, on_success=on_success
    ):
        if status is WriteStatus.RECORDED:
            outcome.recorded.append(event)
        elif status is WriteStatus.DUPLICATE:
            outcome.known += 1
        else:
            outcome.skipped += 1
    return outcome


def _synced(c: Connection, s: SyncRecord) -> Event | None:
    """A sync of the sync history as a reconciled ``sync_end`` (None: none to record)."""
    if s.ended_at is None or not s.sync_id or not is_valid_id(s.sync_id):
        return None
    if not s.status or len(s.status) > 64:
        return None
    return _end(c, s.ended_at, s.status, s.sync_id, s.reason)


def _outcome_of(e: Event) -> str:
    return "ok" if e.is_success else "fail" if e.is_failure else "other"


def _holds(newest: Completion | None, e: Event) -> bool:
    """Whether the history's newest end of ``e``'s outcome is ``e`` or later."""
    return newest is not None and newest.ended_ms >= e.created_ms - SAME_SYNC_WINDOW_MS


def _after(newest: Completion | None) -> int:
    """The time after which an end of ``newest``'s outcome is new to the history: past
    the window of a derived sync id's end, whose sync the history cannot name."""
    if newest is None:
        return -1
    return newest.ended_ms + (SAME_SYNC_WINDOW_MS if is_derived_sync_id(newest.sync_id) else 0)


def _from_history(
    c: Connection, reported: list[Event], history: Iterable[SyncRecord], after: dict[str, int]
) -> list[Event]:
    """The ends of ``history`` newer than the history's own of their outcome, and each
    reported completion that none of them stands for."""
    synced = [
        e
        for e in (_synced(c, s) for s in history)
        if e is not None and e.created_ms > after.get(_outcome_of(e), -1)
    ]
    missing = [
        r
        for r in reported
        if not any(
            _outcome_of(e) == _outcome_of(r)
            and abs(e.created_ms - r.created_ms) <= SAME_SYNC_WINDOW_MS
            for e in synced
        )
    ]
    return sorted(synced + missing, key=lambda e: e.created_ms)


def _completions(
    client: redis.Redis,
    fivetran: FivetranClient,
    prefix: str,
    connections: Sequence[Connection],
    earliest_ms: int,
    outcome: Outcome,
) -> list[Event]:
    """What to record: the reported completions and the syncs the history lacks."""
    reported = {c.id: list(completions_of([c])) for c in connections}
    ids = [cid for cid, ends in reported.items() if ends]
    newest = dict(zip(ids, HistoryReader(client, prefix, 0).newest_of(ids), strict=True))
    out: list[Event] = []
    for c in connections:
        ends = reported[c.id]
        if not ends:
            continue
        _, (ok, fail, _) = newest[c.id]
        held = {"ok": ok, "fail": fail}
        lacking = [e for e in ends if not _holds(held[_outcome_of(e)], e)]
        outcome.known += len(ends) - len(lacking)
        if not lacking:
            continue  # the common case: no call, nothing to write
        if all(e.created_ms < earliest_ms for e in lacking):
            out += lacking  # older than the lookback (or the retention): the import's
            continue
        after = {"ok": _after(ok), "fail": _after(fail)}
        held_since = min((v for v in after.values() if v >= 0), default=earliest_ms)
        since = max(earliest_ms, held_since - SAME_SYNC_WINDOW_MS)
        try:
            history = fivetran.sync_history(c.id, from_ms(since), from_ms(outcome.started_ms))
        except (FivetranNotFound, FivetranAuthFailed) as exc:
            if exc.status == 401:
                raise
            log.warning("%s: comparing the latest completions of %s only", exc, c.id)
            out += lacking
            continue
        outcome.sync_histories += 1
        out += _from_history(c, lacking, history, after)
    return out


def reconcile(
    client: redis.Redis,
    fivetran: FivetranClient,
    prefix: str,
    retention_ms: int,
    max_clock_skew_ms: int,
    on_success: OnSuccess | None = None,
) -> Outcome:
    """Record what the history lacks and store the outcome; Fivetran's errors come first."""
    outcome = Outcome(started_ms=now_ms())
    connections = fivetran.connections()
    webhooks = fivetran.webhooks()
    outcome.connections = len(connections)
    outcome.inactive_webhooks = [_webhook_dict(w) for w in webhooks if not w.active]
    earliest = outcome.started_ms - min(retention_ms, HISTORY_LOOKBACK_MS)
    events = _completions(client, fivetran, prefix, connections, earliest, outcome)
    record_completions(client, prefix, retention_ms, max_clock_skew_ms, events, outcome, on_success)
    seen = iso(outcome.started_ms)
    valid = (c for c in connections if is_valid_id(c.id) and not c.id.startswith("_"))
    record_schedules(client, prefix, {c.id: schedule_of(c, seen) for c in valid})
    outcome.finished_ms = now_ms()
    stored = {k: v for k, v in outcome.to_dict().items() if k != "reconciled"}
    client.set(reconcile_key(prefix), json.dumps(stored), ex=OUTCOME_TTL_S)
    return outcome


def last_outcome(client: redis.Redis, prefix: str) -> Mapping[str, Any] | None:
    raw = client.get(reconcile_key(prefix))
    if raw is None:
        return None
    try:
        value = json.loads(as_text(raw))
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def fivetran_side(client: redis.Redis, prefix: str) -> dict[str, Any] | None:
    """What /readyz and the connectors listings show of the last run (None: none)."""
    last = last_outcome(client, prefix)
    if last is None:
        return None
    hooks = last.get("inactive_webhooks")
    return {
        "reconciled_at": last.get("finished_at"),
        "inactive_webhooks": hooks if isinstance(hooks, list) else [],
    }
