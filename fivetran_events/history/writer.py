"""The history writer: one event, deduplicated, recorded in one checked transaction.

The dedup mark, the history write, the change notification and whatever the caller adds
(the webhook app adds its deliveries and RQ jobs) commit together or not at all.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Any

import redis
from redis.client import Pipeline

from .._history_lua import CHECK, WRITE
from ..exceptions import HistoryBusy
from ..keys import ConnectorKeys, connectors_key, last_test_event_key
from ..model import Event, EventKind, check_not_future
from ..timeutil import iso, now_ms
from .codec import completion_parts
from .transaction import TransactionOutcome, execute_checked

#: Optimistic-lock retries before a write gives up (contention is per connector).
MAX_WATCH_RETRIES = 64
#: One write in this many also trims the connector's sets to the retention window.
#: Trimming is maintenance, not correctness (older events are refused on arrival), and
#: doing it on every write costs the webhook eight extra commands.
TRIM_EVERY = 16
#: How long the short-lived sets (``seen``, ``starts``) keep an entry behind the newest
#: event trimming them. Fivetran retries a delivery for 24 hours, so a dedup mark or the
#: start a late ``sync_end`` looks for matters that long after its event, plus a sync's
#: duration (24 hours by default): three days cover both with a day to spare. Measured by
#: the event's own time, not the wall clock, so that a history written with past dates
#: keeps what it needs. ``running`` is not among them: its end removes a sync's entry, so
#: it holds only syncs that are running or were lost, and how long a sync may run is the
#: reader's setting (a sensor may allow days), not the writer's.
RECENT_MS = 3 * 24 * 3600 * 1000


class WriteStatus(str, Enum):
    """What ``HistoryWriter.record`` did with an event."""

    RECORDED = "recorded"
    DUPLICATE = "duplicate"
    IGNORED = "ignored"


@dataclass(frozen=True)
class WriteResult:
    status: WriteStatus
    reason: str | None = None


#: Called inside the MULTI block of a successful sync_end, so that what it queues commits
#: with the history write (the webhook app enqueues its forwarding job here).
OnSuccess = Callable[[Pipeline, Event], None]


class HistoryWriter:
    """Record Fivetran events into the history, idempotently and atomically."""

    def __init__(
        self, client: redis.Redis, prefix: str, retention_ms: int, trim_every: int = TRIM_EVERY
    ) -> None:
        self.client = client
        self.prefix = prefix
        self.retention_ms = retention_ms
        self.trim_every = trim_every

    def record(
        self,
        event: Event,
        on_success: OnSuccess | None = None,
        now: int | None = None,
        max_clock_skew_ms: int | None = None,
    ) -> WriteResult:
        """Record ``event``; return whether it was new, a duplicate, or ignored.

        With ``max_clock_skew_ms``, an event dated further than that ahead of ``now``
        raises InvalidPayload before anything is written: one success from the future
        would otherwise count for every target until then.
        """
        if event.kind is EventKind.OTHER:
            return WriteResult(WriteStatus.IGNORED, f"event '{event.event}' is not used")
        if event.kind is EventKind.TEST:
            self.client.set(
                last_test_event_key(self.prefix),
                json.dumps(
                    {"received_at": iso(now or now_ms()), "connector_id": event.connector_id}
                ),
            )
            return WriteResult(WriteStatus.IGNORED, "test_event received: the webhook works")
        now = now_ms() if now is None else now
        if max_clock_skew_ms is not None:
            check_not_future(event, now, max_clock_skew_ms)
        cutoff = now - self.retention_ms
        if event.created_ms < cutoff:
            return WriteResult(WriteStatus.IGNORED, "event is older than the history retention")
        keys = ConnectorKeys(self.prefix, event.connector_id)
        check = ("EVAL", CHECK, 2, keys.seen, keys.guard, event.dedup_id)
        with self.client.pipeline(transaction=True) as pipe:
            for _ in range(MAX_WATCH_RETRIES):
                pipe.multi()
                self._write(pipe, keys, event, cutoff)
                if on_success is not None and event.is_success:
                    on_success(pipe, event)
                outcome = execute_checked(pipe, (keys.seen, keys.guard), check)
                if outcome is TransactionOutcome.DUPLICATE:
                    return WriteResult(WriteStatus.DUPLICATE)
                if outcome is TransactionOutcome.COMMITTED:
                    return WriteResult(WriteStatus.RECORDED)
                pipe.reset()  # a concurrent write to the connector: build it again
        raise HistoryBusy(f"connector {event.connector_id}: too many concurrent writes")

    def _write(self, pipe: Pipeline, keys: ConnectorKeys, event: Event, cutoff: int) -> None:
        """Queue the event's history write (one EVAL, trimming now and then) and its publish."""
        pipe.eval(
            WRITE, WRITE_NUMKEYS, *script_args(self.prefix, keys, event, cutoff, self.trim_every)
        )
        pipe.publish(keys.channel, event.event)  # wakes deferred sensors of the connector


#: The keys WRITE takes, in its order (the names of ConnectorKeys' properties).
WRITE_KEYS = ("seen", "starts", "running", "ok", "fail", "other", "okstart", "resyncs")
WRITE_NUMKEYS = len(WRITE_KEYS) + 1  # and the connectors hash


def script_args(
    prefix: str, keys: ConnectorKeys, event: Event, cutoff: int, trim_every: int
) -> list[Any]:
    """Return WRITE's keys and arguments for ``event`` (the bulk loader sends the same)."""
    t = event.created_ms
    head, suffix, outcome, kind = "", "", "", "other"
    if event.kind is EventKind.SYNC_START:
        kind = "start"
        head = completion_parts(event.sync_id or "", "", None, None)[0]
    elif event.kind is EventKind.SYNC_END:
        kind = "end"
        head, suffix = completion_parts(
            event.sync_id or "", event.status or "", event.reason, event.task_type
        )
        outcome = "ok" if event.is_success else "fail" if event.is_failure else ""
    elif event.kind is EventKind.RESYNC:
        kind = "resync"
        body: dict[str, Any] = {"e": event.event, "t": t}
        if event.tables:
            body["tables"] = list(event.tables)
        head = json.dumps(body, separators=(",", ":"))  # the resync's member
    # Absent fields are left out, so the script keeps what an earlier event said.
    meta = json.dumps(
        {
            k: v
            for k, v in (
                ("name", event.connector_name),
                ("type", event.connector_type),
                ("group", event.group_id),
                ("last_event_at", iso(t)),
            )
            if v is not None
        }
    )
    # The dedup id is a uniform hash: use it to pick which writes trim, no RNG needed.
    trim = int(event.dedup_id[:8], 16) % trim_every == 0
    return [
        *(getattr(keys, name) for name in WRITE_KEYS),
        connectors_key(prefix),
        kind,
        t,
        event.dedup_id,
        event.sync_id or "",
        head,
        suffix,
        outcome,
        event.connector_id,
        meta,
        str(cutoff) if trim else "",
        str(t - RECENT_MS),
    ]
