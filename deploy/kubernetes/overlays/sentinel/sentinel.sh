#!/bin/sh
# This pod's Sentinel. Clients log in as the Redis users with the same passwords and may
# only ask where the primary is: no FAILOVER, SET, REMOVE or CONFIG from an app or a DAG.
set -eu
self="$(hostname).fivetran-events-redis.$POD_NAMESPACE.svc"
sha() { printf %s "$1" | sha256sum | cut -d' ' -f1; }
ask="-@all +auth +hello +ping +sentinel|get-master-addr-by-name +sentinel|masters"
ask="$ask +sentinel|master +sentinel|slaves +sentinel|replicas +sentinel|sentinels"
primary=$(sh /scripts/primary.sh)
{
  echo "bind 0.0.0.0"
  echo "port 26379"
  echo "dir /tmp"
  echo "sentinel resolve-hostnames yes"
  echo "sentinel announce-hostnames yes"
  echo "sentinel announce-ip $self"
  echo "sentinel monitor fte $primary 6379 2"
  echo "sentinel auth-pass fte $REDISCLI_AUTH"
  echo "sentinel sentinel-pass $REDISCLI_AUTH"
  echo "sentinel down-after-milliseconds fte 5000"
  echo "sentinel failover-timeout fte 60000"
  echo "user default on #$(sha "$REDISCLI_AUTH") ~* &* +@all"
  echo "user $APP_USER on #$(sha "$(cat /run/secrets/redis/fivetran_events_redis_app_password)") $ask"
  echo "user $AIRFLOW_USER on #$(sha "$(cat /run/secrets/redis/fivetran_events_redis_airflow_password)") $ask"
} > /run/sentinel/sentinel.conf
exec redis-server /run/sentinel/sentinel.conf --sentinel
