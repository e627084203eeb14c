"""The delivery store's Lua scripts (store.py sends them; nothing else does), each one step:
the creation inside the history's write script (one round trip), a claim, a set's expiry."""

from __future__ import annotations

from string import Template

from fivetran_events.deliveries import DeliveryState, Field

#: The record fields the scripts write, by name ($name in the templates below).
_NAMES = {name.lower(): value for name, value in vars(Field).items() if name.isupper()} | {
    "pending": DeliveryState.PENDING.value
}

# Create each delivery of a sync unless it exists (a second success under one sync id must
# not reset a delivered record), index it, make it due now and wake the sweepers. An existing
# delivery keeps its due time; a final one is made due, and its attempt renews its final
# expiry. A created one's partition key, extra and table are set only where the record has
# none. The wake list holds at most one element. The listing and the state indexes drop
# entries older than the retention when asked (one sync in TRIM_EVERY).
# KEYS: the sync's set, listing, due set, the state indexes (deliveries.INDEXED order,
# pending first), the wake list; then per delivery: its record.
# ARGV: ttl s, received ms, listing cutoff ms ('' trims nothing), connector id, sync id, name,
# type, group, status, ended ms; then per delivery: id, uri, kind (deliveries.DeliveryKind:
# which sender attempts it), partition key, extra, table ('' for none).
_CREATE = Template("""
local K, A = k0, a0
local ttl, received = ARGV[A + 1], ARGV[A + 2]
local k, a = K + 8, A + 10
if k < #KEYS and ARGV[A + 3] ~= '' then
  for i = 2, 7 do
    if i ~= 3 then redis.call('ZREMRANGEBYSCORE', KEYS[K + i], '-inf', '(' .. ARGV[A + 3]) end
  end
end
local optional = {'$partition_key', '$extra', '$table'}
while k < #KEYS do
  local rec, id = KEYS[k + 1], ARGV[a + 1]
  if redis.call('EXISTS', rec) == 0 then
    redis.call('HSET', rec, '$connector_id', ARGV[A + 4], '$sync_id', ARGV[A + 5],
      '$uri', ARGV[a + 2], '$kind', ARGV[a + 3], '$connector_name', ARGV[A + 6],
      '$connector_type', ARGV[A + 7], '$group_id', ARGV[A + 8], '$status', ARGV[A + 9],
      '$ended_ms', ARGV[A + 10],
      '$received_ms', received, '$window_ms', received, '$updated_ms', received,
      '$state', '$pending', '$attempts', '0')
    redis.call('ZADD', KEYS[K + 4], received, id)
  end
  for i = 1, 3 do
    if ARGV[a + 3 + i] ~= '' then redis.call('HSETNX', rec, optional[i], ARGV[a + 3 + i]) end
  end
  redis.call('EXPIRE', rec, ttl)
  redis.call('SADD', KEYS[K + 1], id)
  redis.call('ZADD', KEYS[K + 2], 'NX', received, id)
  redis.call('ZADD', KEYS[K + 3], 'NX', received, id)
  k, a = k + 1, a + 6
end
if k > K + 8 then
  redis.call('EXPIRE', KEYS[K + 1], ttl)
  if redis.call('LLEN', KEYS[K + 8]) == 0 then redis.call('RPUSH', KEYS[K + 8], 1) end
end
""")
#: The creation as a chunk of the history's record script (its keys and arguments
#: start after the history's: KEYS[k0 + 1], ARGV[a0 + 1]).
CREATE_CHUNK = _CREATE.substitute(_NAMES)
#: CREATE_CHUNK as a script of its own: its keys and arguments start at 1.
CREATE = "local k0, a0 = 0, 0\n" + CREATE_CHUNK + "return 1\n"

# Claim the deliveries due at ``now`` (at most ``limit``, oldest first) for new RQ jobs,
# skipping one whose last job (the record's job) still waits in this deployment's queue;
# either way its due time moves to the lease's end. One step, so two sweepers never take the
# same delivery. A claimed record names its new job (the prefix's job id prefix, ``fwd-``,
# its id's SHA-1); a crash before the sweeper queues it leaves it due at the lease's end. A
# job waiting in another queue (renamed by an upgrade) runs nowhere: not a reason to wait.
# KEYS: due set. ARGV: now, new due, RQ job key prefix, limit, delivery record key prefix,
# job id prefix, queue name, queue key. Returns id, job id, ... of the claimed deliveries.
# A job marked queued but no longer in the queue's list (a worker took it and died before
# starting it, across a failover) waits for nothing: it is queued again.
CLAIM_DUE = Template("""
local now = ARGV[1]
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, tonumber(ARGV[4]))
local out = {}
for _, id in ipairs(ids) do
  redis.call('ZADD', KEYS[1], ARGV[2], id)
  local rec = ARGV[5] .. id
  local job = redis.call('HGET', rec, '$job')
  local waiting = false
  if job then
    local st = redis.call('HMGET', ARGV[3] .. job, 'status', 'origin')
    waiting = st[1] == 'queued' and st[2] == ARGV[7]
      and redis.call('LPOS', ARGV[8], job) ~= false
  end
  if not waiting then
    local name = ARGV[6] .. 'fwd-' .. string.sub(redis.sha1hex(id), 1, 24) .. '-' .. now
    if redis.call('EXISTS', rec) == 1 then
      redis.call('HSET', rec, '$job', name)
    end
    out[#out + 1] = id
    out[#out + 1] = name
  end
end
return out
""").substitute(_NAMES)

# Make a sync's set of delivery ids live as long as its longest-lived record (the syncs
# listing joins on it). KEYS: the set, then its records. Returns the set's new TTL in ms.
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
