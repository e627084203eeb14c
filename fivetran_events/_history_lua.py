"""The Lua scripts of the history write (history/writer.py sends them; keys.py names the keys).

One event's whole history write is one script, so that it is one command inside the
webhook's MULTI (seven to fifteen commands otherwise: each costs the webhook a pack, a
parse and a dispatch), and so that what it reads (has this sync ended? which attempt
does this start belong to?) is read when the transaction runs, needing no WATCH. They
go out as EVAL, not EVALSHA: inside MULTI a NOSCRIPT error would fail that command
alone while the rest commits.
"""

from __future__ import annotations

#: How many completions a late ``sync_start`` looks through for its own sync's end
#: (those that ended while that attempt ran: one connector's syncs do not overlap, so
#: this is one or two in practice; the bound keeps a write's cost bounded whatever).
LATE_START_SCAN = 64

# A completion member is compact JSON with sorted keys (history/codec.py), so
# the start of the attempt, "b", is always its first key: adding or replacing it is a
# string operation, and no number goes through cjson's 14-digit formatting. Writes are
# idempotent on content, also when the dedup mark is gone: an end already recorded (the
# same member but for "b") is not added again, a start already known changes nothing.
#
# KEYS: seen starts running ends ok fail ended resyncs okstart connectors.
# ARGV: kind t dedup sync_id member outcome connector meta cutoff
WRITE = f"""
local t = tonumber(ARGV[2])
local sid = ARGV[4]
redis.call('ZADD', KEYS[1], ARGV[2], ARGV[3])

local function bare(m) return (string.gsub(m, '^{{"b":%-?%d+,', '{{', 1)) end
local function with_start(m, b) return '{{"b":' .. b .. ',' .. string.sub(bare(m), 2) end
local function replace(key, old, new, score)
  redis.call('ZREM', key, old)
  redis.call('ZADD', key, score, new)
end

if ARGV[1] == 'start' then
  redis.call('ZADD', KEYS[2], 'LT', ARGV[2], sid)
  local last_end = redis.call('ZSCORE', KEYS[7], sid)
  if (not last_end) or t > tonumber(last_end) then
    -- A new attempt: running (again, when a retry starts after a failed end).
    redis.call('ZADD', KEYS[3], 'GT', ARGV[2], sid)
  else
    -- That attempt has ended: its end is the sync's first end at or after this start.
    local rows = redis.call('ZRANGEBYSCORE', KEYS[4], ARGV[2], last_end,
                            'LIMIT', 0, {LATE_START_SCAN})
    for _, m in ipairs(rows) do
      local c = cjson.decode(m)
      if c.s == sid then
        if (not c.b) or c.b < t then
          -- Scores as Redis's own strings: a Lua number would go out with 14 digits.
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
    -- The attempt's start: the running one if it began by now, else the first recorded
    -- (earlier than the true one at worst, which makes started_after stricter, never looser).
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

-- Connector metadata only moves forward: an older event fills what is missing and
-- nothing else; a newer one replaces what it carries (an absent name blanks nothing).
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

if ARGV[9] ~= '' then
  for i = 1, 9 do redis.call('ZREMRANGEBYSCORE', KEYS[i], '-inf', '(' .. ARGV[9]) end
end
return 1
"""

# The duplicate check, sent between WATCH and MULTI in the same round trip as the whole
# transaction. A duplicate writes and deletes the guard key, which the transaction
# watches: Redis aborts an EXEC after any change to a watched key, the client's own
# included, so nothing of a duplicate commits. An error (say, a key of the wrong type)
# aborts it the same way and is returned. KEYS: seen guard. ARGV: dedup id.
CHECK = """
local seen = redis.pcall('ZSCORE', KEYS[1], ARGV[1])
if not seen then return 0 end
redis.call('SET', KEYS[2], '1')
redis.call('DEL', KEYS[2])
if type(seen) == 'table' and seen.err then return seen end
return 1
"""
