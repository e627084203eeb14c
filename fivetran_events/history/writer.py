"""The history writer: one event, deduplicated, recorded by one script in one round trip.

The dedup mark, the history write, the change notification and what the caller adds for
a successful sync (the webhook app adds its deliveries) are one Lua script
(``_lua.record_script``): Redis runs it as one step, so they are written
together, and a redelivery writes nothing. Nothing follows the script: the webhook
app's deliveries are made due in it, and its workers queue their RQ jobs.

``record_many`` (and ``load``) write many events at once with exactly what ``record``
leaves, for imports, benchmarks and tests: each event goes through the same script,
pipelined, so the layout has one implementation. What they skip is what only a live
delivery needs: the change notification and a caller's chunk.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from enum import Enum
from functools import lru_cache
from typing import Any, Protocol

import redis
from redis.commands.core import Script
from redis.typing import EncodableT

from ..keys import ConnectorKeys, connectors_key, last_test_event_key
from ..model import Event, EventKind, check_not_future, lifecycle_name
from ..timeutil import iso, now_ms
from ._lua import RECORD_NUMKEYS, record_script
from .codec import completion_parts

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


class OnSuccess(Protocol):
    """What a caller adds to a successful sync_end's write, in the same script.

    ``lua`` is a chunk of Lua run after the history write (never for a duplicate); it
    reads its keys from ``KEYS[k0 + 1]`` on and its arguments from ``ARGV[a0 + 1]`` on.
    Calling the object returns those keys and arguments for one event. The webhook app's
    creates the deliveries, due now, and wakes the sweepers that queue their RQ jobs
    (webhook_app/forwarding/enqueue.py).

    An object whose ``every_sync`` attribute is true is called for every sync_start and
    sync_end, not only for successes (the webhook app's, when it sends OpenLineage runs:
    a start and a failure are transitions too); it returns no keys for an event it has
    nothing to add for.
    """

    @property
    def lua(self) -> str: ...

    def __call__(self, event: Event) -> tuple[Sequence[str], Sequence[EncodableT]]: ...


#: The events an ``every_sync`` OnSuccess is called for.
SYNC_KINDS = (EventKind.SYNC_START, EventKind.SYNC_END)


def wants_every_sync(on_success: OnSuccess) -> bool:
    """Whether ``on_success`` adds to every sync event's write, not only a success's."""
    return bool(getattr(on_success, "every_sync", False))


class HistoryWriter:
    """Record Fivetran events into the history, idempotently and atomically."""

    def __init__(
        self, client: redis.Redis, prefix: str, retention_ms: int, trim_every: int = TRIM_EVERY
    ) -> None:
        self.client = client
        self.prefix = prefix
        self.retention_ms = retention_ms
        self.trim_every = trim_every
        #: The record script with each caller's chunk, sent by its SHA (redis-py's
        #: ``Script`` sends the text once when Redis does not have it: NOSCRIPT means
        #: nothing ran, so that is the same write).
        self._scripts: dict[str, Script] = {}

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
        if event.kind is EventKind.SAMPLE:
            return WriteResult(
                WriteStatus.IGNORED,
                f"a sample '{event.event}' of Fivetran's webhook test: the webhook works "
                "(nothing recorded)",
            )
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
        keys, channel = history_keys(self.prefix, event.connector_id)
        args = script_args(keys, event, cutoff, self.trim_every)
        extra_keys: Sequence[str] = ()
        extra_args: Sequence[EncodableT] = ()
        chunk = ""
        if on_success is not None:
            chunk = on_success.lua
            if event.is_success or (event.kind in SYNC_KINDS and wants_every_sync(on_success)):
                extra_keys, extra_args = on_success(event)
        script = self._scripts.get(chunk)
        if script is None:
            script = self._scripts[chunk] = self.client.register_script(record_script(chunk))
        recorded = script(
            keys=[*args[:RECORD_NUMKEYS], *extra_keys],
            args=[*args[RECORD_NUMKEYS:], channel, event.event, *extra_args],
        )
        if not recorded:
            return WriteResult(WriteStatus.DUPLICATE)
        return WriteResult(WriteStatus.RECORDED)


#: The history's keys in the record script, in its order (ConnectorKeys' property names),
#: then the connectors hash: RECORD_NUMKEYS in all.
WRITE_KEYS = ("seen", "starts", "running", "ok", "fail", "other", "okstart", "resyncs")


#: The longest ``setup_reason`` kept: it is shown to people, and lives in the connectors
#: hash for as long as the connector.
SETUP_REASON_MAX = 1024


def lifecycle_meta(event: Event) -> dict[str, str]:
    """Return the connector metadata a lifecycle event or a sync_start sets, with its time.

    A sync_start's time is kept because a paused or deleted connector starts no sync:
    one that starts after the pause means the connector is back, also when its
    ``resume_connector`` is late or lost (``decision.Lifecycle``).
    """
    at = iso(event.created_ms) or ""
    if event.kind is EventKind.SYNC_START:
        return {"started_at": at}
    change = event.lifecycle
    if change is None:
        return {}
    group, value = change
    if group == "state":
        return {"state": value, "state_at": at, "state_event": lifecycle_name(event.event)}
    if group == "setup":
        out = {"setup": value, "setup_at": at}
        if value == "broken" and event.reason:
            out["setup_reason"] = event.reason[:SETUP_REASON_MAX]
        return out
    return {"change": value, "change_at": at}


def trims(event: Event, every: int) -> bool:
    """Whether ``event``'s write is one of the one in ``every`` that also trims.

    The dedup id is a uniform hash: it picks them, no RNG needed, and a redelivery of
    the event picks the same.
    """
    return int(event.dedup_id[:8], 16) % every == 0


@lru_cache(maxsize=4096)
def history_keys(prefix: str, connector_id: str) -> tuple[tuple[str, ...], str]:
    """Return a connector's keys in the record script (``WRITE_KEYS``, then the connectors
    hash) and its change channel; the same strings for every delivery, so made once."""
    keys = ConnectorKeys(prefix, connector_id)
    return (*(getattr(keys, name) for name in WRITE_KEYS), connectors_key(prefix)), keys.channel


def script_args(keys: Sequence[str], event: Event, cutoff: int, trim_every: int) -> list[Any]:
    """Return the history's keys (``history_keys``) and arguments for ``event`` in the
    record script (without the notification's channel and message; the bulk loader sends
    the same)."""
    t = event.created_ms
    head, suffix, outcome, kind = "", "", "", "other"
    if event.kind is EventKind.SYNC_START:
        kind = "start"
        head = completion_parts(event.sync_id or "", "", None, None)[0]
        suffix = event.source  # the script tells a start from another source by it
    elif event.kind is EventKind.SYNC_END:
        kind = "end"
        head, suffix = completion_parts(
            event.sync_id or "",
            event.status or "",
            event.reason,
            event.task_type,
            event.rescheduled_at_ms,
            event.source,
        )
        outcome = "ok" if event.is_success else "fail" if event.is_failure else ""
    elif event.kind is EventKind.LIFECYCLE:
        kind = "lifecycle"  # the script writes only the connector's metadata
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
        | lifecycle_meta(event)
    )
    trim = trims(event, trim_every)
    return [
        *keys,
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


#: Events per pipelined round trip.
BATCH = 2000
#: A chunk of the record script that answers 2 when the history already held the event
#: (``known`` in _lua.WRITE: the same start or end recorded before, its dedup mark gone),
#: before any chunk of the caller's runs: an import counts it as already known and
#: forwards nothing for it.
KNOWN_CHUNK = "if known then return 2 end\n"
_STATUS = {0: WriteStatus.DUPLICATE, 1: WriteStatus.RECORDED, 2: WriteStatus.DUPLICATE}


def load(
    client: redis.Redis,
    prefix: str,
    events: Iterable[Event],
    retention_ms: int,
    now: int | None = None,
    trim_every: int = TRIM_EVERY,
) -> int:
    """Write ``events`` in order as ``record`` would at ``now``; return how many were written.

    Events ``record`` would ignore (test events, unknown kinds, older than the retention)
    are skipped the same way; the caller checks clock skew if it cares.
    """
    results = record_many(client, prefix, events, retention_ms, now, trim_every)
    return sum(1 for _, status in results if status is not WriteStatus.IGNORED)


def record_many(
    client: redis.Redis,
    prefix: str,
    events: Iterable[Event],
    retention_ms: int,
    now: int | None = None,
    trim_every: int = TRIM_EVERY,
    on_success: OnSuccess | None = None,
    batch: int = BATCH,
) -> Iterator[tuple[Event, WriteStatus]]:
    """Write ``events`` in order, ``batch`` to a round trip; yield each with what became of it.

    RECORDED: the history took it. DUPLICATE: it held it already (its dedup mark, the
    same start or end, or another source's copy of it: _lua.SAME_SYNC_WINDOW_MS).
    IGNORED: ``record`` would ignore it (not a sync or lifecycle event, older than the
    retention). ``on_success`` is the webhook's hook (its chunk creates a success's
    deliveries, due now, and wakes the sweepers): only what is recorded is forwarded.
    """
    chunk = KNOWN_CHUNK + (on_success.lua if on_success is not None else "")
    script = client.register_script(record_script(chunk))
    cutoff = (now_ms() if now is None else now) - retention_ms
    pipe = client.pipeline(transaction=False)
    pending: list[Event] = []

    def flush() -> Iterator[tuple[Event, WriteStatus]]:
        replies = pipe.execute()
        for event, reply in zip(pending, replies, strict=True):
            yield event, _STATUS[int(reply)]
        pending.clear()

    for event in events:
        if event.kind in (EventKind.OTHER, EventKind.TEST, EventKind.SAMPLE) or (
            event.created_ms < cutoff
        ):
            yield event, WriteStatus.IGNORED
            continue
        args = script_args(history_keys(prefix, event.connector_id)[0], event, cutoff, trim_every)
        extra_keys: Sequence[str] = ()
        extra_args: Sequence[EncodableT] = ()
        if on_success is not None and event.is_success:
            extra_keys, extra_args = on_success(event)
        # No notification: an empty channel.
        script(
            keys=[*args[:RECORD_NUMKEYS], *extra_keys],
            args=[*args[RECORD_NUMKEYS:], "", "", *extra_args],
            client=pipe,
        )
        pending.append(event)
        if len(pending) >= batch:
            yield from flush()
    if pending:
        yield from flush()
