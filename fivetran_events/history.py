"""The durable per-connector sync history in Redis: writer and reader.

Key names come from keys.py. Writes are optimistic transactions (WATCH, a duplicate
check, MULTI, EXEC, sent as one round trip): the dedup mark, the history write, the
change notification and whatever the caller adds (the webhook app adds its RQ job)
commit together or not at all.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any

import redis
from redis.client import EMPTY_RESPONSE, Pipeline

from ._history_lua import CHECK, WRITE
from .decision import Completion, Facts, RunningSync
from .exceptions import HistoryBusy
from .keys import ConnectorKeys, connectors_key, last_test_event_key
from .model import Event, EventKind, check_not_future
from .timeutil import iso, now_ms

#: Successes fetched by end time for one decision (the first counts under ended_after;
#: the others let started_after pick the earliest-ended of overlapping syncs).
SUCCESS_PAGE = 8
#: Optimistic-lock retries before a write gives up (contention is per connector).
MAX_WATCH_RETRIES = 64
#: One write in this many also trims the connector's sets to the retention window.
#: Trimming is maintenance, not correctness (older events are refused on arrival), and
#: doing it on every write costs the webhook nine extra commands.
TRIM_EVERY = 16


class WriteStatus(str, Enum):
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


def encode_completion(event: Event, started_ms: int | None = None) -> str:
    """Encode a sync_end as a sorted-set member (compact JSON, unique per delivery).

    Keys are sorted, so the attempt's start ``b`` comes first: the write script adds it
    to a member when the start is known (``started_ms`` is for bulk loaders).
    """
    body: dict[str, Any] = {"s": event.sync_id, "st": event.status, "t": event.created_ms}
    if started_ms is not None:
        body["b"] = started_ms
    if event.reason:
        body["r"] = event.reason
    if event.task_type:
        body["tt"] = event.task_type
    return json.dumps(body, separators=(",", ":"), sort_keys=True)


def decode_completion(member: str | bytes, score: float | None = None) -> Completion:
    """Decode a completion member: encode_completion's, plus the attempt's start ``b``.

    The end time is the member's own ``t`` (``score`` only for members without one), so
    a member read from the start-scored index decodes the same.
    """
    body = json.loads(member)
    status = body["st"]
    ended = body.get("t", score)
    if ended is None:
        raise ValueError("completion without an end time")
    started = body.get("b")
    return Completion(
        sync_id=body["s"],
        status=status,
        ended_ms=int(ended),
        succeeded=status == "SUCCESSFUL",
        reason=body.get("r"),
        task_type=body.get("tt"),
        started_ms=None if started is None else int(started),
    )


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
                if outcome is Outcome.DUPLICATE:
                    return WriteResult(WriteStatus.DUPLICATE)
                if outcome is Outcome.COMMITTED:
                    return WriteResult(WriteStatus.RECORDED)
                pipe.reset()  # a concurrent write to the connector: build it again
        raise HistoryBusy(f"connector {event.connector_id}: too many concurrent writes")

    def _write(self, pipe: Pipeline, keys: ConnectorKeys, event: Event, cutoff: int) -> None:
        """Queue the event's history write (one EVAL, trimming now and then) and its publish."""
        t = event.created_ms
        member, outcome, kind = "", "", "other"
        if event.kind is EventKind.SYNC_START:
            kind = "start"
        elif event.kind is EventKind.SYNC_END:
            kind, member = "end", encode_completion(event)
            outcome = "ok" if event.is_success else "fail" if event.is_failure else ""
        elif event.kind is EventKind.RESYNC:
            kind = "resync"
            body: dict[str, Any] = {"e": event.event, "t": t}
            if event.tables:
                body["tables"] = list(event.tables)
            member = json.dumps(body, separators=(",", ":"))
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
        trim = int(event.dedup_id[:8], 16) % self.trim_every == 0
        pipe.eval(
            WRITE,
            10,
            keys.seen,
            keys.starts,
            keys.running,
            keys.ends,
            keys.ok,
            keys.fail,
            keys.ended,
            keys.resyncs,
            keys.okstart,
            connectors_key(self.prefix),
            kind,
            t,
            event.dedup_id,
            event.sync_id or "",
            member,
            outcome,
            event.connector_id,
            meta,
            str(cutoff) if trim else "",
        )
        pipe.publish(keys.channel, event.event)  # wakes deferred sensors of the connector


class Outcome(Enum):
    COMMITTED = "committed"
    DUPLICATE = "duplicate"  # the check said so; nothing was written
    CONFLICT = "conflict"  # a watched key changed under us; nothing was written


def execute_checked(pipe: Pipeline, watch: Sequence[str], check: tuple[Any, ...]) -> Outcome:
    """Run ``pipe``'s MULTI block unless ``check`` finds a duplicate, in one round trip.

    Sends WATCH ``watch``, ``check`` (a command that returns 1 for a duplicate after
    changing a watched key, 0 otherwise), MULTI, the queued commands and EXEC together.
    redis-py would send WATCH and each read after it as a round trip of its own, three
    per delivery; since Redis runs one connection's commands in order, sending them in
    one write is the same transaction. Raises the first error of the check or the
    block, like ``Pipeline.execute``. Leaves ``pipe`` holding its connection; reset it
    (or leave its ``with`` block) to return it.
    """
    if pipe.scripts:
        pipe.load_scripts()
    queued = [args for args, options in pipe.command_stack if EMPTY_RESPONSE not in options]
    commands = [("WATCH", *watch), check, ("MULTI",), *queued, ("EXEC",)]
    if pipe.connection is None:
        pipe.connection = pipe.connection_pool.get_connection()
    conn = pipe.connection
    packed = conn.pack_commands(commands)

    def attempt() -> tuple[Any, Any]:
        conn.send_packed_command(packed)
        # Read every reply before raising, so the connection never falls out of step.
        replies: list[Any] = []
        for _ in commands:
            try:
                replies.append(conn.read_response())
            except redis.ResponseError as exc:
                replies.append(exc)
        return replies[1], replies[-1]

    def failed(_: Exception) -> None:
        # Disconnecting drops the WATCH too, so the next attempt starts from scratch. If
        # the lost EXEC did commit, that attempt's check finds the duplicate.
        conn.disconnect()

    try:
        found, result = conn.retry.call_with_retry(attempt, failed)
    except BaseException:
        conn.disconnect()
        raise
    if isinstance(found, Exception):
        raise found
    if isinstance(result, Exception):  # EXECABORT: a command was refused when queued
        raise result
    if result is None:
        return Outcome.DUPLICATE if found == 1 else Outcome.CONFLICT
    for reply in result:
        if isinstance(reply, redis.ResponseError):
            raise reply
    return Outcome.COMMITTED


def facts_commands(
    pipe: Any,
    keys: ConnectorKeys,
    target_ms: int,
    running_from_ms: int,
    started_after: bool = False,
) -> None:
    """Queue the reads that make up Facts on a sync or async pipeline (5 or 6 commands).

    A running sync counts from ``running_from_ms`` on, inclusive: one that started
    exactly the maximum sync duration ago is still running.
    """
    pipe.zrangebyscore(keys.ok, target_ms, "+inf", start=0, num=SUCCESS_PAGE, withscores=True)
    pipe.zrangebyscore(keys.fail, target_ms, "+inf", start=0, num=1, withscores=True)
    pipe.zrevrangebyscore(keys.ok, f"({target_ms}", "-inf", start=0, num=1, withscores=True)
    pipe.zrevrangebyscore(keys.fail, f"({target_ms}", "-inf", start=0, num=1, withscores=True)
    pipe.zrevrangebyscore(keys.running, "+inf", running_from_ms, start=0, num=1, withscores=True)
    if started_after:
        # The first success that started at or after the target, from the start-scored
        # index: one O(log n) read however many successes started before the target.
        pipe.zrangebyscore(keys.okstart, target_ms, "+inf", start=0, num=1, withscores=True)


def _one(rows: Sequence[tuple[Any, float]]) -> Completion | None:
    return decode_completion(*rows[0]) if rows else None


def _str(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


def facts_from_results(results: Sequence[Any], target_ms: int) -> Facts:
    """Build Facts from the replies of facts_commands."""
    ok_rows, fail_rows, ok_before, fail_before, running_rows = results[:5]
    by_start = results[5] if len(results) > 5 else []
    successes: dict[tuple[str, int], Completion] = {}
    for member, score in [*ok_rows, *by_start]:
        c = decode_completion(member, score)
        successes.setdefault((c.sync_id, c.ended_ms), c)
    latest = max(
        (c for c in (_one(ok_before), _one(fail_before)) if c is not None),
        key=Completion.order_key,
        default=None,
    )
    running = (
        RunningSync(_str(running_rows[0][0]), int(running_rows[0][1])) if running_rows else None
    )
    return Facts(
        target_ms=target_ms,
        successes_from_target=tuple(sorted(successes.values(), key=Completion.order_key)),
        first_failure_from_target=_one(fail_rows),
        latest_before_target=latest,
        running=running,
    )


def running_from(now: int | None, max_sync_duration_ms: int) -> int:
    """The earliest start of a sync still running at ``now`` (the wall clock if None).

    Inclusive: a sync that started exactly the maximum duration ago is still running;
    only one that has run longer is taken as lost.
    """
    return (now_ms() if now is None else now) - max_sync_duration_ms


class HistoryReader:
    """Answer the sensor's questions in O(log n) per question."""

    def __init__(self, client: redis.Redis, prefix: str, max_sync_duration_ms: int) -> None:
        self.client = client
        self.prefix = prefix
        self.max_sync_duration_ms = max_sync_duration_ms

    def keys(self, connector_id: str) -> ConnectorKeys:
        return ConnectorKeys(self.prefix, connector_id)

    def running_from(self, now: int | None) -> int:
        return running_from(now, self.max_sync_duration_ms)

    def facts(
        self, connector_id: str, target_ms: int, now: int | None = None, started_after: bool = False
    ) -> Facts:
        """Fetch what decide() needs for ``target_ms``: one round trip, O(log n) reads."""
        pipe = self.client.pipeline(transaction=False)
        facts_commands(
            pipe, self.keys(connector_id), target_ms, self.running_from(now), started_after
        )
        return facts_from_results(pipe.execute(), target_ms)

    def running(self, connector_id: str, now: int | None = None) -> RunningSync | None:
        """Return the newest running sync that is not stale, if any."""
        rows: Any = self.client.zrevrangebyscore(
            self.keys(connector_id).running,
            "+inf",
            self.running_from(now),
            start=0,
            num=1,
            withscores=True,
        )
        return RunningSync(_str(rows[0][0]), int(rows[0][1])) if rows else None

    def start_of(self, connector_id: str, sync_id: str) -> int | None:
        """Return the first recorded start (ms) of ``sync_id``, if any was recorded.

        A retried sync has several; each completion carries its own attempt's start.
        """
        score = self.client.zscore(self.keys(connector_id).starts, sync_id)
        return None if score is None else int(score)

    def syncs(
        self,
        connector_id: str,
        since_ms: int | None = None,
        until_ms: int | None = None,
        limit: int = 100,
        now: int | None = None,
    ) -> list[dict[str, Any]]:
        """List the connector's syncs, newest first: completions, and running ones on top."""
        keys = self.keys(connector_id)
        lo = "-inf" if since_ms is None else since_ms
        hi = "+inf" if until_ms is None else until_ms
        pipe = self.client.pipeline(transaction=False)
        pipe.zrevrangebyscore(keys.ends, hi, lo, start=0, num=limit, withscores=True)
        pipe.zrevrangebyscore(keys.running, hi, lo, start=0, num=limit, withscores=True)
        ends, running = pipe.execute()
        completions = [decode_completion(m, s) for m, s in ends]
        running_from = self.running_from(now)
        rows: list[tuple[int, dict[str, Any]]] = []
        for member, score in running:
            item = RunningSync(_str(member), int(score)).to_dict()
            if score < running_from:
                item["status"] = "STALE"
                item["reason"] = "no sync_end within the maximum sync duration"
            rows.append((int(score), item))
        rows += [(c.ended_ms, c.to_dict()) for c in completions]
        rows.sort(key=lambda r: r[0], reverse=True)
        return [item for _, item in rows[:limit]]

    def connectors(self, now: int | None = None) -> list[dict[str, Any]]:
        """List known connectors with their last success, last failure and running sync."""
        raw = {_str(k): v for k, v in self.client.hgetall(connectors_key(self.prefix)).items()}
        ids = sorted(raw)
        running_from = self.running_from(now)
        pipe = self.client.pipeline(transaction=False)
        for cid in ids:
            keys = self.keys(cid)
            pipe.zrevrange(keys.ok, 0, 0, withscores=True)
            pipe.zrevrange(keys.fail, 0, 0, withscores=True)
            pipe.zrevrangebyscore(
                keys.running, "+inf", running_from, start=0, num=1, withscores=True
            )
        replies = pipe.execute()
        out = []
        for i, cid in enumerate(ids):
            ok, fail, running = replies[3 * i : 3 * i + 3]
            meta = json.loads(raw[cid])
            out.append(
                {
                    "connector_id": cid,
                    "connector_name": meta.get("name"),
                    "connector_type": meta.get("type"),
                    "group_id": meta.get("group"),
                    "last_event_at": meta.get("last_event_at"),
                    "last_success": decode_completion(*ok[0]).to_dict() if ok else None,
                    "last_failure": decode_completion(*fail[0]).to_dict() if fail else None,
                    "running": (
                        RunningSync(_str(running[0][0]), int(running[0][1])).to_dict()
                        if running
                        else None
                    ),
                }
            )
        return out

    def known(self, connector_id: str) -> bool:
        """Return whether any event of ``connector_id`` was recorded."""
        return bool(self.client.hexists(connectors_key(self.prefix), connector_id))
