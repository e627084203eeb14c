"""The Lua script of the history write (history/writer.py sends it): Redis runs it as one atomic
step, so nothing needs WATCH, MULTI or a retry, and what the write reads (a redelivery? has
this sync ended? which attempt does this start belong to?) is read when it runs."""

from __future__ import annotations

from .codec import SAME_SYNC_WINDOW_MS

#: How many completions of each set a late ``sync_start`` looks through for its own
#: sync's end (one or two in practice: one connector's syncs do not overlap).
LATE_START_SCAN = 64


# Members are history/codec.py's (token "," delta suffix); the script only writes the delta.
# Writes are idempotent on content, also without the dedup mark: an end already recorded (same
# token and suffix at the same score) is not added again, a start already known changes
# nothing. Scores go back to Redis as its own strings: a Lua number would have 14 digits.
#
# KEYS: seen starts running ok fail other okstart resyncs connectors.
# ARGV: kind t dedup sync_id prefix suffix outcome connector meta cutoff recent_cutoff
def _compact(script: str) -> str:
    """Drop comment lines and indentation: the text goes to Redis with every EVAL."""
    lines = (line.strip() for line in script.splitlines())
    return "\n".join(line for line in lines if line and not line.startswith("--"))


WRITE = f"""
-- Connector fields that go by their own time (the first of each group), not the event's.
local TIMED_GROUPS = {{{{'state_at', 'state', 'state_event'}},
  {{'setup_at', 'setup', 'setup_reason'}}, {{'change_at', 'change'}}, {{'started_at'}}}}
local t = tonumber(ARGV[2])
local sid, p, suffix = ARGV[4], ARGV[5], ARGV[6]
local plen = #p
-- The event's source letter (codec.py; '' for the webhook) and the rest of its suffix.
local src, body = string.match(suffix, '^([A-Z]?)(.*)$')
-- 'same' when this exact start or end is recorded already (it then changes nothing),
-- 'other' when another source's copy of it is (nothing is written: a duplicate).
local known = false
local function window(lo, hi) return string.format('%d', lo), string.format('%d', hi) end

local function b36(n)
  local s = ''
  repeat
    local r = n % 36
    s = string.sub('0123456789abcdefghijklmnopqrstuvwxyz', r + 1, r + 1) .. s
    n = (n - r) / 36
  until n == 0
  return s
end
-- A member's parts after the token: the duration, an '@end' tag (only on a member that
-- would otherwise equal another completion of the same sync), the rest.
local function split(m)
  return string.match(string.sub(m, plen + 1), '^([0-9a-z]*)(@?[0-9a-z]*)(.*)$')
end

if ARGV[1] == 'start' then
  -- The sync's first end at or after this start: if there is one, this start belongs
  -- to an attempt that has ended; otherwise a new attempt runs (also a retry's).
  local best, key, score, raw
  for i = 4, 6 do
    local rows = redis.call('ZRANGEBYSCORE', KEYS[i], ARGV[2], '+inf', 'WITHSCORES',
                            'LIMIT', 0, {LATE_START_SCAN})
    for j = 1, #rows, 2 do
      if string.sub(rows[j], 1, plen) == p then
        local s = tonumber(rows[j + 1])
        if (not best) or s < score then best, key, score, raw = rows[j], KEYS[i], s, rows[j + 1] end
        break
      end
    end
  end
  if not best then
    -- A running sync's entry says not where it came from: an imported start near it is
    -- the same start (the import never moves the webhook's); a delivered one keeps the
    -- rule of a retry's start (the later wins).
    local r = tonumber(redis.call('ZSCORE', KEYS[3], sid) or -1)
    if r == t then
      known = 'same'
    elseif r >= 0 and src ~= '' and math.abs(r - t) <= {SAME_SYNC_WINDOW_MS} then
      known = 'other'
    else
      redis.call('ZADD', KEYS[3], 'GT', ARGV[2], sid)
    end
  else
    local d, tag, tail = split(best)
    local was = d ~= '' and score - tonumber(d, 36)
    if was == t then
      known = 'same'
    elseif was and string.match(tail, '^[A-Z]?') ~= src
        and math.abs(was - t) <= {SAME_SYNC_WINDOW_MS} then
      known = 'other'
    elseif not was or was < t then
      local n = p .. b36(score - t) .. tag .. tail
      redis.call('ZREM', key, best)
      redis.call('ZADD', key, raw, n)
      if key == KEYS[4] then
        redis.call('ZREM', KEYS[7], best)
        redis.call('ZADD', KEYS[7], ARGV[2], n)
      end
    end
  end
  -- The sync's earliest start, which a late end looks for: not another source's copy.
  if known ~= 'other' then redis.call('ZADD', KEYS[2], 'LT', ARGV[2], sid) end
elseif ARGV[1] == 'end' then
  local key = KEYS[6]
  if ARGV[7] == 'ok' then key = KEYS[4] elseif ARGV[7] == 'fail' then key = KEYS[5] end
  -- The same end: same sync, status and details at the same time, or another source's
  -- copy dated within the window.
  local lo, hi = window(t - {SAME_SYNC_WINDOW_MS}, t + {SAME_SYNC_WINDOW_MS})
  local near = redis.call('ZRANGEBYSCORE', key, lo, hi, 'WITHSCORES', 'LIMIT', 0,
                          {LATE_START_SCAN})
  for j = 1, #near, 2 do
    if string.sub(near[j], 1, plen) == p then
      local _, _, tail = split(near[j])
      local msrc, mbody = string.match(tail, '^([A-Z]?)(.*)$')
      if mbody == body then
        if msrc ~= src then known = known or 'other'
        elseif tonumber(near[j + 1]) == t then known = 'same' end
      end
    elseif src == 'R' or string.find(near[j], '^[^,]*,[0-9a-z]*@?[0-9a-z]*R') then
      -- A reconciled end (Fivetran's REST API: a time and a status, no sync id or
      -- details) is the same completion as any other source's end in its set within
      -- the window, whatever that one's sync id.
      local msrc = string.match(near[j], '^[^,]*,[0-9a-z]*@?[0-9a-z]*([A-Z]?)')
      if msrc ~= src then known = known or 'other' end
    end
  end
  if known == 'other' then
    -- Another source's record holds this end (a reconciled one has another sync id):
    -- the attempt this end closes is not running any more.
    local b = redis.call('ZSCORE', KEYS[3], sid)
    if b and tonumber(b) <= t then redis.call('ZREM', KEYS[3], sid) end
  elseif not known then
    -- The attempt's start: the running one if it began by now, else the first recorded
    -- (earlier than the true one at worst, which makes started_after stricter, never looser).
    local b = redis.call('ZSCORE', KEYS[3], sid)
    if b and tonumber(b) <= t then
      redis.call('ZREM', KEYS[3], sid)
    elseif string.sub(sid, 1, 1) == '~' then
      -- An end without a sync id: its start, if one came, has another derived id. The
      -- newest derived start by this end is its start; every derived start by then ended.
      b = false
      local open = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', ARGV[2], 'WITHSCORES')
      for j = 1, #open, 2 do
        -- A reconciled end takes any open start by it: one connector's syncs never overlap.
        if string.sub(open[j], 1, 1) == '~' or src == 'R' then
          b = open[j + 1]
          redis.call('ZREM', KEYS[3], open[j])
        end
      end
    else
      b = redis.call('ZSCORE', KEYS[2], sid)
      if b and tonumber(b) > t then b = false end
    end
    local d = ''
    if b then d = b36(t - tonumber(b)) end
    local m = p .. d .. suffix
    -- Another end of this sync with the same duration (two successes without a start):
    -- tag this one with its end, so neither replaces the other.
    if redis.call('ZSCORE', key, m) then m = p .. d .. '@' .. b36(t) .. suffix end
    redis.call('ZADD', key, ARGV[2], m)
    if b and key == KEYS[4] then redis.call('ZADD', KEYS[7], b, m) end
  end
elseif ARGV[1] == 'resync' then
  redis.call('ZADD', KEYS[8], ARGV[2], ARGV[5])
end
if known == 'other' then return 0 end

-- Connector metadata only moves forward: an older event fills what is missing and
-- nothing else; a newer one replaces what it carries (an absent name blanks nothing).
-- Each timed group (the lifecycle's state, setup and change, the latest sync_start)
-- goes by its own time instead, as a whole: a late resume_connector older than the
-- newest sync but newer than the pause wins.
local meta = cjson.decode(ARGV[9])
local raw = redis.call('HGET', KEYS[9], ARGV[8])
if raw then
  local old = cjson.decode(raw)
  local newer = meta
  local fill = old
  if type(old.last_event_at) == 'string' and old.last_event_at > meta.last_event_at then
    newer, fill = old, meta
  end
  local kept = {{}}
  for i, g in ipairs(TIMED_GROUPS) do
    local a = g[1]
    local win = newer
    if type(fill[a]) == 'string' and (type(newer[a]) ~= 'string' or fill[a] > newer[a]) then
      win = fill
    end
    kept[i] = {{}}
    for _, f in ipairs(g) do kept[i][f] = win[f] end
  end
  for k, v in pairs(fill) do
    if v ~= cjson.null and (newer[k] == nil or newer[k] == cjson.null) then newer[k] = v end
  end
  for i, g in ipairs(TIMED_GROUPS) do
    for _, f in ipairs(g) do newer[f] = kept[i][f] end
  end
  meta = newer
end
redis.call('HSET', KEYS[9], ARGV[8], cjson.encode(meta))

if ARGV[10] ~= '' then
  for _, i in ipairs({{3, 4, 5, 6, 7, 8}}) do
    redis.call('ZREMRANGEBYSCORE', KEYS[i], '-inf', '(' .. ARGV[10])
  end
  for i = 1, 2 do redis.call('ZREMRANGEBYSCORE', KEYS[i], '-inf', '(' .. ARGV[11]) end
end
"""

# The whole write: the duplicate check, the history write, the change notification, then
# the caller's chunk for a successful sync. The first call adds the dedup id to ``seen``
# unless it is there: a redelivery returns 0 having written nothing. Past the dedup window
# (``seen`` is trimmed behind the newest event, the history is not), an event the history
# holds returns 2 before the caller's chunk: a replayed success of any age creates no
# delivery, while an old one the history lacks is recorded and forwarded once. A key of the
# wrong type fails that first call, before anything is written, and so does a Redis that
# refuses writes (OOM, a replica, a failed save, too few replicas: no "#!lua" flags line,
# so that Redis 6.2 runs the script too). The chunk's keys follow the history's nine and
# its arguments the history's thirteen: KEYS[k0 + 1], ARGV[a0 + 1], ...
#
# KEYS: seen starts running ok fail other okstart resyncs connectors, then the chunk's.
# ARGV: the history write's eleven (above), channel ('' publishes nothing), message, then
# the chunk's. Returns 1 when recorded, 0 for a duplicate, 2 for an event already held.
_RECORD = """
if redis.call('ZADD', KEYS[1], 'NX', ARGV[2], ARGV[3]) == 0 then return 0 end
{write}
if ARGV[12] ~= '' then redis.call('PUBLISH', ARGV[12], ARGV[13]) end
if known then return 2 end
do
local k0, a0 = {nkeys}, {nargs}
{chunk}
end
return 1
"""
#: The history's own keys and arguments in RECORD, before the caller's.
RECORD_NUMKEYS, RECORD_NUMARGS = 9, 13


def record_script(chunk: str = "") -> str:
    """Return the record script with ``chunk`` (Lua) run after the history write."""
    return _compact(
        _RECORD.format(write=WRITE, chunk=chunk, nkeys=RECORD_NUMKEYS, nargs=RECORD_NUMARGS)
    )
