#!/usr/bin/env bash
# Make the secret files deploy/compose.yaml reads, once: a file already there is kept.
#   bash deploy/compose-secrets.sh [FOLDER]      (default: deploy/secrets)
# The folder is owner-only; its files are readable (Compose mounts them as they are, and
# the containers' users are not this one). The Redis URLs carry the two Redis users'
# passwords (`fivetran-events redis acl`); people log in to Airflow as admin with the
# password in airflow_admin_password.
set -euo pipefail
dir="${1:-$(dirname "$0")/secrets}"
mkdir -p "$dir"
chmod 700 "$dir"
cd "$dir"
umask 022
new() { # FILE BYTES: random hex, unless FILE exists
  [ -s "$1" ] || openssl rand -hex "$2" | tr -d '\n' >"$1"
}
new webhook_secrets 24
new api_tokens 24
new airflow_password 16        # the worker's Airflow user, fivetran-events
new airflow_admin_password 16  # people's Airflow user, admin
new airflow_jwt_secret 48
new postgres_password 16
new redis_app_password 24      # Redis user fivetran-events (the app and workers)
new redis_airflow_password 24  # Redis user fivetran-events-airflow (Airflow's side)
[ -s redis_url ] ||
  printf 'redis://fivetran-events:%s@redis:6379/0' "$(cat redis_app_password)" >redis_url
# Airflow's connection to the history, read by its local file secrets backend.
[ -s airflow_connections.json ] ||
  printf '{"fivetran_events_redis": "redis://fivetran-events-airflow:%s@redis:6379/0"}\n' \
    "$(cat redis_airflow_password)" >airflow_connections.json
echo "secrets in $dir: $(ls | tr '\n' ' ')"
