#!/usr/bin/env bash
# The local stack: Redis (private, AOF) and the webhook app on 127.0.0.1, in the background.
#   deploy/stack.sh up | down | status
# Configuration: FIVETRAN_EVENTS_REDIS_URL (use that Redis instead of a private one),
# FTE_WEBHOOK_PORT (8000), FTE_REDIS_PORT (6390), FTE_STATE_DIR (.local).
set -euo pipefail
cd "$(dirname "$0")/.."
root="$(pwd)"
state="${FTE_STATE_DIR:-$root/.local}"
webhook_port="${FTE_WEBHOOK_PORT:-8000}"
redis_port="${FTE_REDIS_PORT:-6390}"
mkdir -p "$state"

say() { printf '==> %s\n' "$*"; }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }

# A PID file names a process of ours only while that process still runs our command.
ours() { # pidfile pattern
  local pid
  [ -f "$1" ] || return 1
  pid="$(cat "$1")"
  [ -n "$pid" ] && [ -r "/proc/$pid/cmdline" ] && tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q -- "$2"
}

stop_one() { # name pidfile pattern
  if ours "$2" "$3"; then
    local pid; pid="$(cat "$2")"
    say "stopping $1 (pid $pid)"
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$pid" 2>/dev/null && kill -KILL "$pid" 2>/dev/null || true
  fi
  rm -f "$2"
}

secrets() {
  local f="$state/secrets.env"
  if [ ! -f "$f" ]; then
    umask 077
    printf 'FIVETRAN_EVENTS_WEBHOOK_SECRETS=%s\nFIVETRAN_EVENTS_API_TOKENS=%s\n' \
      "$(.venv/bin/python -c 'import secrets; print(secrets.token_hex(24))')" \
      "$(.venv/bin/python -c 'import secrets; print(secrets.token_hex(24))')" >"$f"
  fi
  set -a; . "$f"; set +a
}

wait_http() { # url seconds
  for _ in $(seq 1 $(( $2 * 10 ))); do
    curl -fsS -o /dev/null "$1" 2>/dev/null && return 0
    sleep 0.1
  done
  return 1
}

up() {
  command -v curl >/dev/null || die "curl is needed to check the stack's health"
  bash deploy/venv.sh server
  secrets
  if [ -n "${FIVETRAN_EVENTS_REDIS_URL:-}" ]; then
    say "using Redis at $FIVETRAN_EVENTS_REDIS_URL"
  else
    export FIVETRAN_EVENTS_REDIS_URL="redis://127.0.0.1:$redis_port/0"
    if ours "$state/redis.pid" redis-server; then
      say "Redis already running on 127.0.0.1:$redis_port"
    else
      bash deploy/ensure-redis.sh
      mkdir -p "$state/redis"
      say "starting Redis on 127.0.0.1:$redis_port (append-only, data in $state/redis)"
      redis-server --bind 127.0.0.1 --port "$redis_port" --dir "$state/redis" \
        --appendonly yes --appendfsync everysec --daemonize yes \
        --pidfile "$state/redis.pid" --logfile "$state/redis.log" >/dev/null
      for _ in $(seq 1 50); do [ -s "$state/redis.pid" ] && break; sleep 0.1; done
    fi
  fi
  printf 'FIVETRAN_EVENTS_REDIS_URL=%s\n' "$FIVETRAN_EVENTS_REDIS_URL" >"$state/redis.env"
  if ours "$state/webhook.pid" gunicorn; then
    say "webhook app already running on 127.0.0.1:$webhook_port"
  else
    say "starting the webhook app on 127.0.0.1:$webhook_port"
    export PROMETHEUS_MULTIPROC_DIR="$state/metrics"
    rm -rf "$PROMETHEUS_MULTIPROC_DIR"; mkdir -p "$PROMETHEUS_MULTIPROC_DIR"
    nohup .venv/bin/fivetran-events serve --host 127.0.0.1 --port "$webhook_port" \
      >"$state/webhook.log" 2>&1 &
    echo $! >"$state/webhook.pid"
  fi
  say "waiting for http://127.0.0.1:$webhook_port/readyz"
  wait_http "http://127.0.0.1:$webhook_port/readyz" 30 ||
    die "the webhook app did not become ready; see $state/webhook.log"
  body='{"event":"sync_end","created":"'"$(date -u +%Y-%m-%dT%H:%M:%S.000Z)"'","connector_type":"postgres","connector_id":"demo_connector","connector_name":"demo","sync_id":"demo-'"$(date +%s)"'","destination_group_id":"demo_group","data":{"status":"SUCCESSFUL"}}'
  sig="$(printf '%s' "$body" | .venv/bin/python -c 'import sys,hmac,hashlib,os; print(hmac.new(os.environ["FIVETRAN_EVENTS_WEBHOOK_SECRETS"].split(",")[0].encode(), sys.stdin.buffer.read(), hashlib.sha256).hexdigest().upper())')"
  cat <<MSG

The stack is up.
  webhook:   http://127.0.0.1:$webhook_port/webhooks/fivetran
  read API:  http://127.0.0.1:$webhook_port/api/connectors   (Authorization: Bearer \$FIVETRAN_EVENTS_API_TOKENS)
  health:    http://127.0.0.1:$webhook_port/readyz    metrics: http://127.0.0.1:$webhook_port/metrics
  Redis:     $FIVETRAN_EVENTS_REDIS_URL
  secrets:   $state/secrets.env   logs: $state/*.log

Send a signed sync_end, as Fivetran would:
  curl -sS -X POST http://127.0.0.1:$webhook_port/webhooks/fivetran \\
    -H 'Content-Type: application/json' \\
    -H 'X-Fivetran-Signature-256: $sig' \\
    -d '$body'
Then look at it:
  curl -sS -H "Authorization: Bearer $FIVETRAN_EVENTS_API_TOKENS" http://127.0.0.1:$webhook_port/api/connectors/demo_connector/syncs
Stop everything with: make down
MSG
}

down() {
  stop_one "the webhook app" "$state/webhook.pid" gunicorn
  stop_one "Redis" "$state/redis.pid" redis-server
  say "stopped (data kept in $state/redis)"
}

status() {
  ours "$state/webhook.pid" gunicorn && echo "webhook app: running (pid $(cat "$state/webhook.pid"))" || echo "webhook app: stopped"
  ours "$state/redis.pid" redis-server && echo "Redis: running (pid $(cat "$state/redis.pid"))" || echo "Redis: not ours or stopped"
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  status) status ;;
  *) echo "usage: $0 up|down|status" >&2; exit 2 ;;
esac
