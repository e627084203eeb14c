#!/bin/sh
# This pod's Redis: the primary, or a replica of the primary the sentinels name.
# Users: "default" is the administrator (replication, sentinels, probes; the
# fivetran-events-redis-acl Secret's admin_password), then the users that
# `fivetran-events redis acl --format acl-file` wrote to /run/redis-acl/fivetran-events.acl.
set -eu
self="$(hostname).fivetran-events-redis.$POD_NAMESPACE.svc"
hash=$(printf %s "$REDISCLI_AUTH" | sha256sum | cut -d' ' -f1)
{
  echo "user default on #$hash ~* &* +@all"
  cat /run/redis-acl/fivetran-events.acl
} > /run/redis-conf/users.acl
primary=$(sh /scripts/primary.sh)
{
  echo "bind 0.0.0.0"
  echo "port 6379"
  echo "dir /data"
  # Every acknowledged delivery survives a crash (at most a second's writes at risk).
  echo "appendonly yes"
  echo "appendfsync everysec"
  # Below the container's memory limit; never evict: evicted deliveries, leases or
  # history would be lost silently (/readyz answers 503 under any other policy).
  echo "maxmemory $REDIS_MAXMEMORY"
  echo "maxmemory-policy noeviction"
  echo "aclfile /run/redis-conf/users.acl"
  echo "masterauth $REDISCLI_AUTH"
  echo "replica-announce-ip $self"
  if [ "$primary" != "$self" ]; then
    echo "replicaof $primary 6379"
  fi
} > /run/redis-conf/redis.conf
exec redis-server /run/redis-conf/redis.conf
