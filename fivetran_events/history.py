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

from .decision import Completion, Facts, RunningSync
from .exceptions import HistoryBusy
from .keys import ConnectorKeys, connectors_key, last_test_event_key
from .model import Event, EventKind
from .timeutil import iso, now_ms

#: Successes fetched per page when looking for one that started after the target.
SUCCESS_PAGE = 8
#: Optimistic-lock retries before a write gives up (contention is per connector).
MAX_WATCH_RETRIES = 64
#: One write in this many also trims the connector's sets to the retention window.
#: Trimming is maintenance, not correctness (older events are refused on arrival), and
#: doing it on every write costs the webhook eight extra commands.
TRIM_EVERY = 16

# The history write of one event as a single command inside the MULTI (seven to fifteen
# commands otherwise: each costs the webhook a pack, a parse and a dispatch). EVAL, not
# EVALSHA: inside MULTI a NOSCRIPT error would fail this command alone while the rest
# commits. A sync_start whose sync_end came first is not marked running; that is read
# here, when the transaction runs, so it needs no WATCH.
# KEYS: seen starts running ends ok fail ended resyncs connectors.
# ARGV: kind t dedup sync_id member outcome connector meta cutoff
_WRITE = """
local t = ARGV[2]
redis.call('ZADD', KEYS[1], t, ARGV[3])
if ARGV[1] == 'start' then
  redis.call('ZADD', KEYS[2], 'LT', t, ARGV[4])
  if not redis.call('ZSCORE', KEYS[7], ARGV[4]) then redis.call('ZADD', KEYS[3], t, ARGV[4]) end
elseif ARGV[1] == 'end' then
  redis.call('ZADD', KEYS[4], t, ARGV[5])
  if ARGV[6] == 'ok' then redis.call('ZADD', KEYS[5], t, ARGV[5])
  elseif ARGV[6] == 'fail' then redis.call('ZADD', KEYS[6], t, ARGV[5]) end
  redis.call('ZADD', KEYS[7], 'GT', t, ARGV[4])
  redis.call('ZREM', KEYS[3], ARGV[4])
elseif ARGV[1] == 'resync' then
  redis.call('ZADD', KEYS[8], t, ARGV[5])
end
redis.call('HSET', KEYS[9], ARGV[7], ARGV[8])
if ARGV[9] ~= '' then
  for i = 1, 8 do redis.call('ZREMRANGEBYSCORE', KEYS[i], '-inf', '(' .. ARGV[9]) end
end
return 1
"""


# The duplicate check, sent between WATCH and MULTI in the same round trip as the whole
# transaction. A duplicate writes and deletes the guard key, which the transaction
# watches: Redis aborts an EXEC after any change to a watched key, the client's own
# included, so nothing of a duplicate commits. An error (say, a key of the wrong type)
# aborts it the same way and is returned. KEYS: seen guard. ARGV: dedup id.
_CHECK = """
local seen = redis.pcall('ZSCORE', KEYS[1], ARGV[1])
if not seen then return 0 end
redis.call('SET', KEYS[2], '1')
redis.call('DEL', KEYS[2])
if type(seen) == 'table' and seen.err then return seen end
return 1
"""


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


def encode_completion(event: Event) -> str:
    """Encode a sync_end as a sorted-set member (compact JSON, unique per delivery)."""
    body: dict[str, Any] = {"s": event.sync_id, "st": event.status, "t": event.created_ms}
    if event.reason:
        body["r"] = event.reason
    if event.task_type:
        body["tt"] = event.task_type
    return json.dumps(body, separators=(",", ":"), sort_keys=True)


def decode_completion(member: str | bytes, score: float) -> Completion:
    """Decode a sorted-set member written by encode_completion."""
    body = json.loads(member)
    status = body["st"]
    return Completion(sync_id=body["s"], status=status, ended_ms=int(score),
                      succeeded=status == "SUCCESSFUL", reason=body.get("r"),
                      task_type=body.get("tt"))


class HistoryWriter:
    """Record Fivetran events into the history, idempotently and atomically."""

    def __init__(self, client: redis.Redis, prefix: str, retention_ms: int,
                 trim_every: int = TRIM_EVERY) -> None:
        self.client = client
        self.prefix = prefix
        self.retention_ms = retention_ms
        self.trim_every = trim_every

    def record(self, event: Event, on_success: OnSuccess | None = None,
               now: int | None = None) -> WriteResult:
        """Record ``event``; return whether it was new, a duplicate, or ignored."""
        if event.kind is EventKind.OTHER:
            return WriteResult(WriteStatus.IGNORED, f"event '{event.event}' is not used")
        if event.kind is EventKind.TEST:
            self.client.set(last_test_event_key(self.prefix),
                            json.dumps({"received_at": iso(now or now_ms()),
                                        "connector_id": event.connector_id}))
            return WriteResult(WriteStatus.IGNORED, "test_event received: the webhook works")
        now = now_ms() if now is None else now
        cutoff = now - self.retention_ms
        if event.created_ms < cutoff:
            return WriteResult(WriteStatus.IGNORED,
                               "event is older than the history retention")
        keys = ConnectorKeys(self.prefix, event.connector_id)
        check = ("EVAL", _CHECK, 2, keys.seen, keys.guard, event.dedup_id)
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
        meta = json.dumps({"name": event.connector_name, "type": event.connector_type,
                           "group": event.group_id, "last_event_at": iso(t)})
        # The dedup id is a uniform hash: use it to pick which writes trim, no RNG needed.
        trim = int(event.dedup_id[:8], 16) % self.trim_every == 0
        pipe.eval(_WRITE, 9, keys.seen, keys.starts, keys.running, keys.ends, keys.ok,
                  keys.fail, keys.ended, keys.resyncs, connectors_key(self.prefix),
                  kind, t, event.dedup_id, event.sync_id or "", member, outcome,
                  event.connector_id, meta, str(cutoff) if trim else "")
        pipe.publish(keys.channel, event.event)  # wakes deferred sensors of the connector


class Outcome(Enum):
    COMMITTED = "committed"
    DUPLICATE = "duplicate"  # the check said so; nothing was written
    CONFLICT = "conflict"    # a watched key changed under us; nothing was written


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


def facts_commands(pipe: Any, keys: ConnectorKeys, target_ms: int, stale_before_ms: int,
                   success_offset: int = 0) -> None:
    """Queue the reads that make up Facts on a sync or async pipeline (5 commands)."""
    pipe.zrangebyscore(keys.ok, target_ms, "+inf", start=success_offset, num=SUCCESS_PAGE,
                       withscores=True)
    pipe.zrangebyscore(keys.fail, target_ms, "+inf", start=0, num=1, withscores=True)
    pipe.zrevrangebyscore(keys.ok, f"({target_ms}", "-inf", start=0, num=1, withscores=True)
    pipe.zrevrangebyscore(keys.fail, f"({target_ms}", "-inf", start=0, num=1, withscores=True)
    pipe.zrevrangebyscore(keys.running, "+inf", f"({stale_before_ms}", start=0, num=1,
                          withscores=True)


def _one(rows: Sequence[tuple[Any, float]]) -> Completion | None:
    return decode_completion(*rows[0]) if rows else None


def _str(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


def facts_from_results(results: Sequence[Any], target_ms: int,
                       successes: Sequence[Completion]) -> Facts:
    """Build Facts from the replies of facts_commands (successes already carry starts)."""
    _, fail_rows, ok_before, fail_before, running_rows = results
    latest = max((c for c in (_one(ok_before), _one(fail_before)) if c is not None),
                 key=Completion.order_key, default=None)
    running = (RunningSync(_str(running_rows[0][0]), int(running_rows[0][1]))
               if running_rows else None)
    return Facts(target_ms=target_ms, successes_from_target=tuple(successes),
                 first_failure_from_target=_one(fail_rows), latest_before_target=latest,
                 running=running)


def attach_starts(completions: Sequence[Completion],
                  starts: Sequence[float | None]) -> list[Completion]:
    """Return ``completions`` with their start times filled from a ZMSCORE reply."""
    return [Completion(c.sync_id, c.status, c.ended_ms, c.succeeded, c.reason, c.task_type,
                       None if s is None else int(s))
            for c, s in zip(completions, starts, strict=True)]


def more_successes_needed(successes: Sequence[Completion], started_after: bool,
                          target_ms: int) -> bool:
    """Whether a reader must fetch another page of successes for ``started_after``.

    Only when every page so far came back full and none of its successes started at or
    after the target (at most one sync straddles the target when syncs do not overlap,
    so this is rare).
    """
    n = len(successes)
    return (started_after and n > 0 and n % SUCCESS_PAGE == 0
            and not any(c.started_ms is not None and c.started_ms >= target_ms
                        for c in successes))


class HistoryReader:
    """Answer the sensor's questions in O(log n) per question."""

    def __init__(self, client: redis.Redis, prefix: str, max_sync_duration_ms: int) -> None:
        self.client = client
        self.prefix = prefix
        self.max_sync_duration_ms = max_sync_duration_ms

    def keys(self, connector_id: str) -> ConnectorKeys:
        return ConnectorKeys(self.prefix, connector_id)

    def facts(self, connector_id: str, target_ms: int, now: int | None = None,
              started_after: bool = False) -> Facts:
        """Fetch what decide() needs for ``target_ms`` (two round trips, O(log n) each)."""
        keys = self.keys(connector_id)
        now = now_ms() if now is None else now
        pipe = self.client.pipeline(transaction=False)
        facts_commands(pipe, keys, target_ms, now - self.max_sync_duration_ms)
        results = pipe.execute()
        successes = self._with_starts(keys, [decode_completion(m, s) for m, s in results[0]])
        # started_after: the first successes may have started before the target (at most
        # one does when syncs do not overlap); page on until one qualifies.
        while more_successes_needed(successes, started_after, target_ms):
            rows: Any = self.client.zrangebyscore(keys.ok, target_ms, "+inf",
                                                  start=len(successes), num=SUCCESS_PAGE,
                                                  withscores=True)
            if not rows:
                break
            successes += self._with_starts(keys, [decode_completion(m, s) for m, s in rows])
        return facts_from_results(results, target_ms, successes)

    def _with_starts(self, keys: ConnectorKeys, page: list[Completion]) -> list[Completion]:
        if not page:
            return []
        starts = self.client.zmscore(keys.starts, [c.sync_id for c in page])
        return attach_starts(page, starts)

    def running(self, connector_id: str, now: int | None = None) -> RunningSync | None:
        """Return the newest running sync that is not stale, if any."""
        keys = self.keys(connector_id)
        now = now_ms() if now is None else now
        rows: Any = self.client.zrevrangebyscore(keys.running, "+inf",
                                            f"({now - self.max_sync_duration_ms}",
                                            start=0, num=1, withscores=True)
        return RunningSync(_str(rows[0][0]), int(rows[0][1])) if rows else None

    def start_of(self, connector_id: str, sync_id: str) -> int | None:
        """Return the start time (ms) of ``sync_id``, if its sync_start was recorded."""
        score = self.client.zscore(self.keys(connector_id).starts, sync_id)
        return None if score is None else int(score)

    def syncs(self, connector_id: str, since_ms: int | None = None, until_ms: int | None = None,
              limit: int = 100, now: int | None = None) -> list[dict[str, Any]]:
        """List the connector's syncs, newest first: completions, and running ones on top."""
        keys = self.keys(connector_id)
        lo = "-inf" if since_ms is None else since_ms
        hi = "+inf" if until_ms is None else until_ms
        pipe = self.client.pipeline(transaction=False)
        pipe.zrevrangebyscore(keys.ends, hi, lo, start=0, num=limit, withscores=True)
        pipe.zrevrangebyscore(keys.running, hi, lo, start=0, num=limit, withscores=True)
        ends, running = pipe.execute()
        completions = [decode_completion(m, s) for m, s in ends]
        completions = self._with_starts(keys, completions)
        stale_before = (now_ms() if now is None else now) - self.max_sync_duration_ms
        rows: list[tuple[int, dict[str, Any]]] = []
        for member, score in running:
            item = RunningSync(_str(member), int(score)).to_dict()
            if score <= stale_before:
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
        now = now_ms() if now is None else now
        pipe = self.client.pipeline(transaction=False)
        for cid in ids:
            keys = self.keys(cid)
            pipe.zrevrange(keys.ok, 0, 0, withscores=True)
            pipe.zrevrange(keys.fail, 0, 0, withscores=True)
            pipe.zrevrangebyscore(keys.running, "+inf", f"({now - self.max_sync_duration_ms}",
                                  start=0, num=1, withscores=True)
        replies = pipe.execute()
        out = []
        for i, cid in enumerate(ids):
            ok, fail, running = replies[3 * i: 3 * i + 3]
            meta = json.loads(raw[cid])
            out.append({
                "connector_id": cid,
                "connector_name": meta.get("name"),
                "connector_type": meta.get("type"),
                "group_id": meta.get("group"),
                "last_event_at": meta.get("last_event_at"),
                "last_success": decode_completion(*ok[0]).to_dict() if ok else None,
                "last_failure": decode_completion(*fail[0]).to_dict() if fail else None,
                "running": (RunningSync(_str(running[0][0]), int(running[0][1])).to_dict()
                            if running else None),
            })
        return out

    def known(self, connector_id: str) -> bool:
        """Return whether any event of ``connector_id`` was recorded."""
        return bool(self.client.hexists(connectors_key(self.prefix), connector_id))
