"""The Lua scripts of the delivery store and the sweeper (one command each)."""

from __future__ import annotations

from fivetran_events.deliveries import DeliveryState

# Create each delivery of a sync unless it exists (a second success under one sync id
# must not reset a delivered record), name the RQ job to be queued for it, index it and
# make it due: the lease's end, so that if its job is never queued (a crash right after
# this script) the sweeper queues one then. A chunk of the history's record script (the
# webhook's one script per delivery, fivetran_events/history/_lua.py), or a script of its
# own (CREATE) for a replay; the caller queues the jobs with RQ's Queue.enqueue once it
# has run. A new record enters the pending index; the listing and the state indexes drop
# entries older than the retention, whose records have expired (on one sync in
# TRIM_EVERY: trimming is maintenance, and five more commands a delivery). What every
# delivery of the sync shares is passed once.
# KEYS: the sync's set, listing, due set, the state indexes (deliveries.INDEXED order, pending
# first); then per delivery: its record.
# ARGV: ttl s, received ms, due ms, listing cutoff ms ('' trims nothing), connector id,
# sync id, name, type, group, status, ended ms; then per delivery: id, uri, job id.
_CREATE = """
local K, A = k0, a0
local ttl, received = ARGV[A + 1], ARGV[A + 2]
local k, a = K + 7, A + 11
if k < #KEYS and ARGV[A + 4] ~= '' then
  for i = 2, 7 do
    if i ~= 3 then redis.call('ZREMRANGEBYSCORE', KEYS[K + i], '-inf', '(' .. ARGV[A + 4]) end
  end
end
while k < #KEYS do
  local rec, id, job = KEYS[k + 1], ARGV[a + 1], ARGV[a + 3]
  if redis.call('EXISTS', rec) == 0 then
    redis.call('HSET', rec, 'connector_id', ARGV[A + 5], 'sync_id', ARGV[A + 6],
      'uri', ARGV[a + 2], 'connector_name', ARGV[A + 7], 'connector_type', ARGV[A + 8],
      'group_id', ARGV[A + 9], 'status', ARGV[A + 10], 'ended_ms', ARGV[A + 11],
      'received_ms', received, 'window_ms', received, 'updated_ms', received,
      'state', '{pending}', 'attempts', '0', 'job', job)
    redis.call('ZADD', KEYS[K + 4], received, id)
  else
    redis.call('HSET', rec, 'job', job)
  end
  redis.call('EXPIRE', rec, ttl)
  redis.call('SADD', KEYS[K + 1], id)
  redis.call('ZADD', KEYS[K + 2], 'NX', received, id)
  redis.call('ZADD', KEYS[K + 3], 'NX', ARGV[A + 3], id)
  k, a = k + 1, a + 3
end
if k > K + 7 then redis.call('EXPIRE', KEYS[K + 1], ttl) end
"""
CREATE_CHUNK = _CREATE.replace("{pending}", DeliveryState.PENDING.value)
#: CREATE_CHUNK as a script of its own: its keys and arguments start at 1.
CREATE = "local k0, a0 = 0, 0\n" + CREATE_CHUNK + "return 1\n"


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
