"""The history's key layout v1, frozen: its write script, its reads, and a bulk fixture.

v1 is the layout of release 0.1 (per connector ``{p}c:{c}:{ok,okstart,fail,ends,ended,
starts,running,resyncs,seen}``). The package itself has moved on, so the migration's
tests need v1 as it was: the WRITE script and the member encoding are copied
from 0.1 (``fivetran_events/history/_lua.py``, ``history/codec.py``) and the reads from
its ``history/queries.py``, building the same ``Facts``, so that
``fivetran_events.decision.decide`` gives the decision a 0.1 sensor gave. Nothing here
imports ``fivetran_events.history`` or ``fivetran_events.keys``: only the stable
``decision``, ``model`` and ``timeutil``.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import redis

from fivetran_events.decision import Completion, Facts, RunningSync
from fivetran_events.model import Event, EventKind
from fivetran_events.timeutil import from_ms, iso

#: The per-connector sets of v1, in the order the WRITE script takes them (seen first).
V1_SETS = ("seen", "starts", "running", "ends", "ok", "fail", "ended", "resyncs", "okstart")


def v1_key(prefix: str, connector_id: str, suffix: str) -> str:
    return f"{prefix}c:{connector_id}:{suffix}"


def v1_connectors_key(prefix: str) -> str:
    return f"{prefix}connectors"


# 0.1's WRITE from history/_lua.py, line for line but for its comments and the retention
# trim (a fixture is younger than any retention); LATE_START_SCAN = 64 written out.
WRITE_V1 = """
local t = tonumber(ARGV[2])
local sid = ARGV[4]
redis.call('ZADD', KEYS[1], ARGV[2], ARGV[3])

local function bare(m) return (string.gsub(m, '^{"b":%-?%d+,', '{', 1)) end
local function with_start(m, b) return '{"b":' .. b .. ',' .. string.sub(bare(m), 2) end
local function replace(key, old, new, score)
  redis.call('ZREM', key, old)
  redis.call('ZADD', key, score, new)
end

if ARGV[1] == 'start' then
  redis.call('ZADD', KEYS[2], 'LT', ARGV[2], sid)
  local last_end = redis.call('ZSCORE', KEYS[7], sid)
  if (not last_end) or t > tonumber(last_end) then
    redis.call('ZADD', KEYS[3], 'GT', ARGV[2], sid)
  else
    local rows = redis.call('ZRANGEBYSCORE', KEYS[4], ARGV[2], last_end,
                            'LIMIT', 0, 64)
    for _, m in ipairs(rows) do
      local c = cjson.decode(m)
      if c.s == sid then
        if (not c.b) or c.b < t then
          local ended = redis.call('ZSCORE', KEYS[4], m)
          local n = with_start(m, ARGV[2])
          replace(KEYS[4], m, n, ended)
          if redis.call('ZSCORE', KEYS[5], m) then
            replace(KEYS[5], m, n, ended)
            redis.call('ZREM', KEYS[9], m)
            redis.call('ZADD', KEYS[9], ARGV[2], n)
          elseif redis.call('ZSCORE', KEYS[6], m) then
            replace(KEYS[6], m, n, ended)
          end
        end
        break
      end
    end
  end
elseif ARGV[1] == 'end' then
  local known = false
  for _, m in ipairs(redis.call('ZRANGEBYSCORE', KEYS[4], ARGV[2], ARGV[2])) do
    if bare(m) == ARGV[5] then known = true end
  end
  if not known then
    local b = redis.call('ZSCORE', KEYS[3], sid)
    if b and tonumber(b) <= t then
      redis.call('ZREM', KEYS[3], sid)
    else
      b = redis.call('ZSCORE', KEYS[2], sid)
      if b and tonumber(b) > t then b = false end
    end
    local m = ARGV[5]
    if b then m = with_start(m, b) end
    redis.call('ZADD', KEYS[4], ARGV[2], m)
    if ARGV[6] == 'ok' then
      redis.call('ZADD', KEYS[5], ARGV[2], m)
      if b then redis.call('ZADD', KEYS[9], b, m) end
    elseif ARGV[6] == 'fail' then
      redis.call('ZADD', KEYS[6], ARGV[2], m)
    end
    redis.call('ZADD', KEYS[7], 'GT', ARGV[2], sid)
  end
elseif ARGV[1] == 'resync' then
  redis.call('ZADD', KEYS[8], ARGV[2], ARGV[5])
end

local meta = cjson.decode(ARGV[8])
local raw = redis.call('HGET', KEYS[10], ARGV[7])
if raw then
  local old = cjson.decode(raw)
  local newer = meta
  local fill = old
  if type(old.last_event_at) == 'string' and old.last_event_at > meta.last_event_at then
    newer, fill = old, meta
  end
  for k, v in pairs(fill) do
    if v ~= cjson.null and (newer[k] == nil or newer[k] == cjson.null) then newer[k] = v end
  end
  meta = newer
end
redis.call('HSET', KEYS[10], ARGV[7], cjson.encode(meta))
return 1
"""


def encode_member_v1(event: Event) -> str:
    """0.1's completion member: compact JSON with sorted keys (``b`` added by the script)."""
    body: dict[str, Any] = {"s": event.sync_id, "st": event.status, "t": event.created_ms}
    if event.reason:
        body["r"] = event.reason
    if event.task_type:
        body["tt"] = event.task_type
    return json.dumps(body, separators=(",", ":"), sort_keys=True)


def write_args_v1(prefix: str, event: Event) -> list[Any]:
    """The KEYS and ARGV of one event's v1 WRITE (0.1's writer, without the dedup check)."""
    member, outcome, kind = "", "", "other"
    if event.kind is EventKind.SYNC_START:
        kind = "start"
    elif event.kind is EventKind.SYNC_END:
        kind, member = "end", encode_member_v1(event)
        outcome = "ok" if event.is_success else "fail" if event.is_failure else ""
    elif event.kind is EventKind.RESYNC:
        kind = "resync"
        body: dict[str, Any] = {"e": event.event, "t": event.created_ms}
        if event.tables:
            body["tables"] = list(event.tables)
        member = json.dumps(body, separators=(",", ":"))
    meta = {
        k: v
        for k, v in (
            ("name", event.connector_name),
            ("type", event.connector_type),
            ("group", event.group_id),
            ("last_event_at", iso(event.created_ms)),
        )
        if v is not None
    }
    keys = [v1_key(prefix, event.connector_id, s) for s in V1_SETS]
    return [
        *keys,
        v1_connectors_key(prefix),
        kind,
        event.created_ms,
        event.dedup_id,
        event.sync_id or "",
        member,
        outcome,
        event.connector_id,
        json.dumps(meta),
    ]


def write_v1(client: redis.Redis, prefix: str, events: Sequence[Event], batch: int = 2000) -> None:
    """Write ``events`` in the v1 layout in this order, pipelined (EVALSHA, ``batch`` a trip).

    Each event is the script 0.1's webhook ran, so the keys hold what 0.1 wrote; the dedup
    check is left out (a fixture has no redeliveries) and nothing is published.
    """
    script = client.register_script(WRITE_V1)
    pipe = client.pipeline(transaction=False)
    for i, event in enumerate(events, 1):
        argv = write_args_v1(prefix, event)
        script(keys=argv[:10], args=argv[10:], client=pipe)
        if i % batch == 0:
            pipe.execute()
    pipe.execute()


# --- Reads: 0.1's queries.py, over the v1 keys ---------------------------------------

SUCCESS_PAGE = 8


def _completion(member: str | bytes, score: float | None = None) -> Completion:
    body = json.loads(member)
    ended = body.get("t", score)
    started = body.get("b")
    return Completion(
        sync_id=body["s"],
        status=body["st"],
        ended_ms=int(ended),
        succeeded=body["st"] == "SUCCESSFUL",
        reason=body.get("r"),
        task_type=body.get("tt"),
        started_ms=None if started is None else int(started),
    )


def facts_v1(
    client: redis.Redis,
    prefix: str,
    connector_id: str,
    target_ms: int,
    running_from_ms: int,
    started_after: bool,
) -> Facts:
    """What 0.1's ``HistoryReader.facts`` returned for ``target_ms`` (one round trip)."""

    def k(suffix: str) -> str:
        return v1_key(prefix, connector_id, suffix)

    pipe = client.pipeline(transaction=False)
    pipe.zrangebyscore(k("ok"), target_ms, "+inf", start=0, num=SUCCESS_PAGE, withscores=True)
    pipe.zrangebyscore(k("fail"), target_ms, "+inf", start=0, num=1, withscores=True)
    pipe.zrevrangebyscore(k("ok"), f"({target_ms}", "-inf", start=0, num=1, withscores=True)
    pipe.zrevrangebyscore(k("fail"), f"({target_ms}", "-inf", start=0, num=1, withscores=True)
    pipe.zrevrangebyscore(k("running"), "+inf", running_from_ms, start=0, num=1, withscores=True)
    if started_after:
        pipe.zrangebyscore(k("okstart"), target_ms, "+inf", start=0, num=1, withscores=True)
    results: list[Any] = pipe.execute()
    ok_rows, fail_rows, ok_before, fail_before, running_rows = results[:5]
    by_start = results[5] if started_after else []
    successes: dict[tuple[str, int], Completion] = {}
    for member, score in [*ok_rows, *by_start]:
        c = _completion(member, score)
        successes.setdefault((c.sync_id, c.ended_ms), c)
    before = [_completion(*rows[0]) for rows in (ok_before, fail_before) if rows]
    running = None
    if running_rows:
        sid = running_rows[0][0]
        running = RunningSync(
            sid.decode() if isinstance(sid, bytes) else sid, int(running_rows[0][1])
        )
    return Facts(
        target_ms=target_ms,
        successes_from_target=tuple(sorted(successes.values(), key=Completion.order_key)),
        first_failure_from_target=_completion(*fail_rows[0]) if fail_rows else None,
        latest_before_target=max(before, key=Completion.order_key, default=None),
        running=running,
    )


# --- A bulk fixture ---------------------------------------------------------------------

HOUR_MS = 3_600_000
FAILURES = (("FAILURE", None), ("FAILURE_WITH_TASK", "DBT_RUN"), ("FAILED", None))


@dataclass
class V1History:
    """What ``history_v1_fixture`` wrote: the events, and the times worth asking about."""

    events: list[Event] = field(default_factory=list)
    connectors: list[str] = field(default_factory=list)
    #: connector -> the ends and starts written (the decision's boundaries)
    boundaries: dict[str, list[int]] = field(default_factory=dict)
    syncs: int = 0
    first_ms: int = 0
    last_ms: int = 0


def event(kind: str, connector: str, t: int, sync_id: str | None = None, **more: Any) -> Event:
    """An Event as the webhook would parse it (metadata of a real capture)."""
    kinds = {"sync_start": EventKind.SYNC_START, "sync_end": EventKind.SYNC_END}
    return Event(
        kind=kinds.get(kind, EventKind.RESYNC),
        event=kind,
        created=from_ms(t),
        connector_id=connector,
        connector_name=f"{connector}_name",
        connector_type="google_cloud_postgresql",
        group_id="inappropriate_implode",
        sync_id=sync_id,
        **more,
    )


def _connector_events(
    rng: random.Random, connector: str, start_ms: int, syncs: int, running_at_end: bool
) -> Iterator[Event]:
    """One connector's syncs, roughly hourly, in the order the webhook received them.

    Mixed as production is: mostly successes; failures of each status with reasons;
    RESCHEDULED; retries (FAILED then SUCCESSFUL under one sync id, each attempt its
    own start); ends whose start was never delivered; starts delivered after their end;
    resyncs; a sync still running at the end, and an older one whose end was lost.
    """
    t = start_ms
    for n in range(syncs):
        sid = f"{connector}-s{n}"
        begin = t + rng.randrange(0, 600_000)
        end = begin + rng.randrange(60_000, 40 * 60_000)
        roll = rng.random()
        # The last sync still running (on every other connector), and one whose end was
        # lost: "running" until the maximum sync duration has passed.
        if (n == syncs - 1 and running_at_end) or n == syncs // 2:
            yield event("sync_start", connector, begin, sid)
        elif roll < 0.04:  # a retry: FAILED, then a new attempt that succeeds
            yield event("sync_start", connector, begin, sid)
            mid = begin + (end - begin) // 3
            yield event("sync_end", connector, mid, sid, status="FAILED", reason="timeout")
            yield event("sync_start", connector, mid + 1000, sid)
            yield event("sync_end", connector, end, sid, status="SUCCESSFUL")
        else:
            start_missing = roll < 0.10
            late_start = 0.10 <= roll < 0.14
            if roll < 0.24 and roll >= 0.14:
                status, task = FAILURES[n % 3]
                end_ev = event(
                    "sync_end",
                    connector,
                    end,
                    sid,
                    status=status,
                    reason=f"err {n}",
                    task_type=task,
                )
            elif 0.24 <= roll < 0.27:
                end_ev = event("sync_end", connector, end, sid, status="RESCHEDULED")
            else:
                end_ev = event("sync_end", connector, end, sid, status="SUCCESSFUL")
            start_ev = event("sync_start", connector, begin, sid)
            if late_start:
                yield end_ev
                yield start_ev
            else:
                if not start_missing:
                    yield start_ev
                yield end_ev
        if rng.random() < 0.01:
            kind = "resync_table" if n % 2 else "resync_connector"
            tables = ("public.orders",) if kind == "resync_table" else ()
            yield event(kind, connector, end + 5000, tables=tables)
        t += HOUR_MS


def history_v1_fixture(
    client: redis.Redis,
    prefix: str,
    connectors: int,
    syncs_per_connector: int,
    start_ms: int,
    seed: int = 7,
) -> V1History:
    """Write a v1 history of ``connectors`` x ``syncs_per_connector`` syncs from ``start_ms``."""
    rng = random.Random(seed)
    out = V1History(first_ms=start_ms)
    for c in range(connectors):
        connector = f"conn_{c:03d}"
        out.connectors.append(connector)
        evs = list(_connector_events(rng, connector, start_ms, syncs_per_connector, c % 2 == 0))
        out.events.extend(evs)
        out.boundaries[connector] = sorted({e.created_ms for e in evs})
        out.syncs += syncs_per_connector
    out.last_ms = max(e.created_ms for e in out.events)
    write_v1(client, prefix, out.events)
    return out
