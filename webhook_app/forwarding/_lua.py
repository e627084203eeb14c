"""The Lua scripts of the delivery store (one command each)."""

from __future__ import annotations

from fivetran_events.deliveries import DeliveryState

# Create each delivery of a sync unless it exists (a second success under one sync id
# must not reset a delivered record), index it, make it due now (its receipt) and wake
# the sweepers: a worker's sweeper queues its RQ job (sweeper.py), so the webhook does no
# RQ work and a crash after this script loses nothing (the delivery stays due until a
# sweep queues it). An existing delivery keeps its due time; one no longer due (final)
# is made due, and its attempt renews its final expiry. The wake list holds at most one
# element (pushed only when empty), so it stays bounded while no worker runs. A chunk of
# the history's record script (the webhook's one script per delivery,
# fivetran_events/history/_lua.py), or a script of its own (CREATE) for ``replay
# --since``. A new record enters the pending index; the listing and the state indexes
# drop entries older than the retention, whose records have expired (on one sync in
# TRIM_EVERY: trimming is maintenance, and five more commands a delivery). What every
# delivery of the sync shares is passed once.
# KEYS: the sync's set, listing, due set, the state indexes (deliveries.INDEXED order,
# pending first), the wake list; then per delivery: its record.
# ARGV: ttl s, received ms, listing cutoff ms ('' trims nothing), connector id, sync id,
# name, type, group, status, ended ms; then per delivery: id, uri, kind
# (deliveries.DeliveryKind: which sender attempts it).
_CREATE = """
local K, A = k0, a0
local ttl, received = ARGV[A + 1], ARGV[A + 2]
local k, a = K + 8, A + 10
if k < #KEYS and ARGV[A + 3] ~= '' then
  for i = 2, 7 do
    if i ~= 3 then redis.call('ZREMRANGEBYSCORE', KEYS[K + i], '-inf', '(' .. ARGV[A + 3]) end
  end
end
while k < #KEYS do
  local rec, id = KEYS[k + 1], ARGV[a + 1]
  if redis.call('EXISTS', rec) == 0 then
    redis.call('HSET', rec, 'connector_id', ARGV[A + 4], 'sync_id', ARGV[A + 5],
      'uri', ARGV[a + 2], 'kind', ARGV[a + 3], 'connector_name', ARGV[A + 6],
      'connector_type', ARGV[A + 7], 'group_id', ARGV[A + 8], 'status', ARGV[A + 9],
      'ended_ms', ARGV[A + 10],
      'received_ms', received, 'window_ms', received, 'updated_ms', received,
      'state', '{pending}', 'attempts', '0')
    redis.call('ZADD', KEYS[K + 4], received, id)
  end
  redis.call('EXPIRE', rec, ttl)
  redis.call('SADD', KEYS[K + 1], id)
  redis.call('ZADD', KEYS[K + 2], 'NX', received, id)
  redis.call('ZADD', KEYS[K + 3], 'NX', received, id)
  k, a = k + 1, a + 3
end
if k > K + 8 then
  redis.call('EXPIRE', KEYS[K + 1], ttl)
  if redis.call('LLEN', KEYS[K + 8]) == 0 then redis.call('RPUSH', KEYS[K + 8], 1) end
end
"""
CREATE_CHUNK = _CREATE.replace("{pending}", DeliveryState.PENDING.value)
#: CREATE_CHUNK as a script of its own: its keys and arguments start at 1.
CREATE = "local k0, a0 = 0, 0\n" + CREATE_CHUNK + "return 1\n"


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
