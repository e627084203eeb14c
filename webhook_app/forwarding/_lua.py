"""The Lua scripts of the delivery store and the sweeper (one command each)."""

from __future__ import annotations

# Create a delivery record unless it exists (a second success under one sync id must not
# reset a delivered record), name the RQ job queued for it, index it, and make it due. One
# command instead of ~20 keeps the webhook's transaction short: it runs inside the history
# write's MULTI. A new record enters the pending index; the state indexes drop entries
# older than the retention, whose records have expired. KEYS: record, sync's set, listing,
# due set, then the state indexes (states.INDEXED order, pending first). ARGV: id, ttl s,
# received ms, due ms, listing cutoff ms, job id, then field/value pairs.
CREATE = """
if redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('HSET', KEYS[1], unpack(ARGV, 7))
  redis.call('ZADD', KEYS[5], ARGV[3], ARGV[1])
end
redis.call('HSET', KEYS[1], 'job', ARGV[6])
redis.call('EXPIRE', KEYS[1], ARGV[2])
redis.call('SADD', KEYS[2], ARGV[1])
redis.call('EXPIRE', KEYS[2], ARGV[2])
redis.call('ZADD', KEYS[3], 'NX', ARGV[3], ARGV[1])
for i = 3, 8 do
  if i ~= 4 then
    redis.call('ZREMRANGEBYSCORE', KEYS[i], '-inf', '(' .. ARGV[5])
  end
end
redis.call('ZADD', KEYS[4], 'NX', ARGV[4], ARGV[1])
return 1
"""

# Queue ``id`` when it is due (score <= now), unless the RQ job last queued for it is still
# waiting in the queue; either way push its due time to the lease's end. One step, so two
# sweepers never both take the same delivery and a backlog never holds two jobs of one
# delivery. KEYS: due set, record. ARGV: id, now, new due, RQ job key prefix, new job id.
CLAIM = """
local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not score or tonumber(score) > tonumber(ARGV[2]) then
  return 0
end
redis.call('ZADD', KEYS[1], ARGV[3], ARGV[1])
local job = redis.call('HGET', KEYS[2], 'job')
if job and redis.call('HGET', ARGV[4] .. job, 'status') == 'queued' then
  return 0
end
if redis.call('EXISTS', KEYS[2]) == 1 then
  redis.call('HSET', KEYS[2], 'job', ARGV[5])
end
return 1
"""

# Make a sync's set of delivery ids live as long as its longest-lived record: the syncs
# listing joins on it, and a record that expired is simply not listed. KEYS: the set, then
# its records. Returns the set's new time to live in ms (0: every record is gone).
SET_EXPIRY = """
local longest = 0
for i = 2, #KEYS do
  local ttl = redis.call('PTTL', KEYS[i])
  if ttl > longest then longest = ttl end
end
if longest > 0 then
  redis.call('PEXPIRE', KEYS[1], longest)
end
return longest
"""
