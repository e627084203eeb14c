"""The history writer: one event, deduplicated, recorded by one script in one round trip.

The dedup mark, history write, change notification and the caller's deliveries are one Lua
script (``record_many`` pipelines it): a crash keeps all or nothing, a redelivery writes nothing.
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

from ..freshness import Schedule
from ..keys import ConnectorKeys, connectors_key, last_test_event_key
from ..model import UNCHECKED_KINDS, Event, EventKind, check_not_future, lifecycle_name
from ..timeutil import iso, now_ms
from ._lua import RECORD_NUMKEYS, record_script
from .codec import completion_parts, end_parts

#: One write in this many also trims the connector's sets to the retention window:
#: maintenance, not correctness (older events are refused on arrival).
TRIM_EVERY = 16
#: How long ``seen`` and ``starts`` keep an entry behind the newest event: Fivetran's 24 h of
#: retries plus a sync's duration (24 h by default), and a day to spare; measured in event
#: time, so a history written with past dates keeps what it needs.
RECENT_MS = 3 * 24 * 3600 * 1000


class WriteStatus(str, Enum):
    RECORDED = "recorded"
    DUPLICATE = "duplicate"
    IGNORED = "ignored"


@dataclass(frozen=True)
class WriteResult:
    status: WriteStatus
    reason: str | None = None


class OnSuccess(Protocol):
    """What a caller adds to a successful sync_end's write, in the same script: ``lua`` runs
    after the history write (never for a duplicate), its keys from ``KEYS[k0 + 1]`` and
    arguments from ``ARGV[a0 + 1]`` on, which calling it returns; with ``every_sync`` it is
    called for every sync_start and sync_end."""

    @property
    def lua(self) -> str: ...

    def __call__(self, event: Event) -> tuple[Sequence[str], Sequence[EncodableT]]: ...


SYNC_KINDS = (EventKind.SYNC_START, EventKind.SYNC_END)


def wants_every_sync(on_success: OnSuccess) -> bool:
    return bool(getattr(on_success, "every_sync", False))


class HistoryWriter:
    def __init__(
        self, client: redis.Redis, prefix: str, retention_ms: int, trim_every: int = TRIM_EVERY
    ) -> None:
        self.client = client
        self.prefix = prefix
        self.retention_ms = retention_ms
        self.trim_every = trim_every
        #: The record script with each caller's chunk (a NOSCRIPT answer means nothing
        #: ran, so ``Script``'s resend is the same write).
        self._scripts: dict[str, Script] = {}

    def record(
        self,
        event: Event,
        on_success: OnSuccess | None = None,
        now: int | None = None,
        max_clock_skew_ms: int | None = None,
    ) -> WriteResult:
        """Record ``event``; return whether it was new, a duplicate, or ignored."""
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
        return WriteResult(_STATUS[int(recorded)])


#: The record script's answers: 0 a redelivery inside the dedup window, 2 an event the
#: history held already (its dedup mark gone), neither of which runs the caller's chunk.
_STATUS = {0: WriteStatus.DUPLICATE, 1: WriteStatus.RECORDED, 2: WriteStatus.DUPLICATE}

#: The history's keys in the record script's order (then the connectors hash).
WRITE_KEYS = ("seen", "starts", "running", "ok", "fail", "other", "okstart", "resyncs")
#: The longest ``setup_reason`` kept in the connectors hash.
SETUP_REASON_MAX = 1024


def lifecycle_meta(event: Event) -> dict[str, str]:
    """Return the connector metadata a lifecycle event or a sync_start sets."""
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
    """Whether ``event``'s write is one of the one in ``every`` that also trims (picked
    by its dedup id, a uniform hash: a redelivery picks the same)."""
    return int(event.dedup_id[:8], 16) % every == 0


@lru_cache(maxsize=4096)
def history_keys(prefix: str, connector_id: str) -> tuple[tuple[str, ...], str]:
    """Return a connector's keys in the record script and its change channel."""
    keys = ConnectorKeys(prefix, connector_id)
    return (*(getattr(keys, name) for name in WRITE_KEYS), connectors_key(prefix)), keys.channel


def script_args(keys: Sequence[str], event: Event, cutoff: int, trim_every: int) -> list[Any]:
    """Return the record script's keys and arguments for ``event``."""
    t = event.created_ms
    head, suffix, outcome, kind = "", "", "", "other"
    if event.kind is EventKind.SYNC_START:
        kind = "start"
        head = completion_parts(event.sync_id or "", "", None, None)[0]
        suffix = event.source  # the script tells a start from another source by it
    elif event.kind is EventKind.SYNC_END:
        kind = "end"
        head, suffix = end_parts(event)
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
    """Write ``events`` in order, ``batch`` a round trip; yield each with its outcome (DUPLICATE:
    also another source's copy); only what is recorded goes through ``on_success``."""
    chunk = on_success.lua if on_success is not None else ""
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
        if event.kind in UNCHECKED_KINDS or event.created_ms < cutoff:
            yield event, WriteStatus.IGNORED
            continue
        args = script_args(history_keys(prefix, event.connector_id)[0], event, cutoff, trim_every)
        extra_keys: Sequence[str] = ()
        extra_args: Sequence[EncodableT] = ()
        if on_success is not None and event.is_success:
            extra_keys, extra_args = on_success(event)
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


# KEYS: connectors. ARGV: connector id, schedule JSON, pairwise. A connector without a
# record is left out: its first event or reconciled completion makes one.
_SCHEDULES = """
local n = 0
for i = 1, #ARGV, 2 do
  local raw = redis.call('HGET', KEYS[1], ARGV[i])
  if raw then
    local meta = cjson.decode(raw)
    meta.schedule = cjson.decode(ARGV[i + 1])
    redis.call('HSET', KEYS[1], ARGV[i], cjson.encode(meta))
    n = n + 1
  end
end
return n
"""


def record_schedules(client: redis.Redis, prefix: str, schedules: dict[str, Schedule]) -> int:
    """Keep each recorded connector's schedule with its record, in one script (the
    record script merges a record field by field, so the schedule stays)."""
    args = [v for cid, s in schedules.items() for v in (cid, json.dumps(s.to_dict()))]
    if not args:
        return 0
    return int(client.register_script(_SCHEDULES)(keys=[connectors_key(prefix)], args=args))
