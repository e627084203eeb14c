#!/bin/sh
# Print the current primary's host name: what a sentinel says, or, when none answers
# (the very first start, or all pods restarting), pod 0's. Names are qualified with the
# namespace: Airflow's pods, in another namespace, connect to what the sentinels name.
set -u
svc=fivetran-events-redis
domain="$svc.$POD_NAMESPACE.svc"
for i in 0 1 2; do
  addr=$(timeout 3 redis-cli --no-auth-warning -h "$svc-$i.$domain" -p 26379 --raw \
    sentinel get-master-addr-by-name fte 2>/dev/null | head -n 1) || addr=
  if [ -n "$addr" ] && [ "${addr#ERR}" = "$addr" ] && [ "${addr#NOAUTH}" = "$addr" ]; then
    echo "$addr"
    exit 0
  fi
done
echo "$svc-0.$domain"
