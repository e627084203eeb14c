#!/usr/bin/env bash
#   deploy/stack.sh up | down | status
# The local stack: Redis (private, AOF), the webhook app, a forwarding worker and a real
# Airflow (api-server, scheduler, dag-processor, triggerer) with the plugin and the
# example DAGs, all on 127.0.0.1, in the background.
# Configuration: FIVETRAN_EVENTS_REDIS_URL (use that Redis instead of a private one),
# FTE_WEBHOOK_PORT (8000), FTE_AIRFLOW_PORT (8080), FTE_REDIS_PORT (6390),
# FTE_STATE_DIR (.local).
set -euo pipefail
cd "$(dirname "$0")/.."
root="$(pwd)"
state="${FTE_STATE_DIR:-$root/.local}"
webhook_port="${FTE_WEBHOOK_PORT:-8000}"
redis_port="${FTE_REDIS_PORT:-6390}"
airflow_port="${FTE_AIRFLOW_PORT:-8080}"
mkdir -p "$state"

t0=$SECONDS
steps=7 step_no=0
# Every line says how long `up` has run, so a slow first run shows where the time goes.
say() { printf '[%3ss] ==> %s\n' "$(( SECONDS - t0 ))" "$*"; }
step() { step_no=$(( step_no + 1 )); say "($step_no/$steps) $*"; }
die() { printf '[%3ss] error: %s\n' "$(( SECONDS - t0 ))" "$*" >&2; exit 1; }

fail_log() { # message logfile  (the last lines of the log that failed, and where it is)
  printf '[%3ss] error: %s\n' "$(( SECONDS - t0 ))" "$1" >&2
  if [ -s "$2" ]; then
    printf -- '--- the last 25 lines of %s:\n' "$2" >&2
    tail -n 25 "$2" >&2
    printf -- '--- the whole log: %s\n' "$2" >&2
  else
    printf 'its log, %s, is empty\n' "$2" >&2
  fi
  exit 1
}

starttime() { # pid -> the kernel's start time of that process (field 22 of /proc/PID/stat)
  [ -r "/proc/$1/stat" ] && sed 's/.*) //' "/proc/$1/stat" | cut -d' ' -f20
}

# A PID file names a process of ours only while that very process runs: files we write
# hold "PID STARTTIME" (a reused PID has another start time; Airflow and RQ rename their
# processes, so the command line cannot tell). Redis writes its own file: match its name.
ours() { # pidfile pattern
  local pid start
  [ -f "$1" ] || return 1
  read -r pid start <"$1" || true
  [ -n "$pid" ] && [ -r "/proc/$pid/stat" ] || return 1
  if [ -n "$start" ]; then
    [ "$(starttime "$pid")" = "$start" ]
  else
    tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q -- "$2"
  fi
}

stop_one() { # name pidfile pattern
  if ours "$2" "$3"; then
    local pid start; read -r pid start <"$2" || true
    say "stopping $1 (pid $pid)"
    # Processes we started with setsid lead their own group: stop the group (Airflow's
    # components and gunicorn have children). Redis daemonizes itself: stop the PID.
    local target="$pid"
    [ "$(ps -o pgid= -p "$pid" | tr -d ' ')" = "$pid" ] && target="-$pid"
    kill -TERM -- "$target" 2>/dev/null || true
    for _ in $(seq 1 200); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$pid" 2>/dev/null && kill -KILL -- "$target" 2>/dev/null || true
  fi
  rm -f "$2"
}

load_secrets() { # file NAME=BYTES...  (made once, owner-only; then exported)
  local f="$1" spec; shift
  if [ ! -f "$f" ]; then
    (
      umask 077
      for spec in "$@"; do
        printf '%s=%s\n' "${spec%%=*}" \
          "$(.venv/bin/python -c "import secrets; print(secrets.token_hex(${spec#*=}))")"
      done >"$f"
    )
  fi
  set -a; . "$f"; set +a
}

secrets() {
  load_secrets "$state/secrets.env" FIVETRAN_EVENTS_WEBHOOK_SECRETS=24 FIVETRAN_EVENTS_API_TOKENS=24
}

alive() { # pidfile: the process we started runs (and is not a zombie)
  local pid start
  ours "$1" "" || return 1
  read -r pid start <"$1" || true
  [ "$(sed 's/.*) //' "/proc/$pid/stat" 2>/dev/null | cut -d' ' -f1)" != Z ]
}

wait_http() { # what url seconds component...  (each component: $state/NAME.pid and .log)
  local what="$1" url="$2" limit="$3" start=$SECONDS next=5 c; shift 3
  say "waiting for $what at $url (up to ${limit}s)"
  while ! curl -fsS --max-time 2 -o /dev/null "$url" 2>/dev/null; do
    for c in "$@"; do
      alive "$state/$c.pid" || fail_log "$c exited while waiting for $what" "$state/$c.log"
    done
    if [ $(( SECONDS - start )) -ge "$limit" ]; then
      fail_log "$what did not answer within ${limit}s" "$state/$1.log"
    fi
    if [ $(( SECONDS - start )) -ge "$next" ]; then
      say "  still waiting for $what: $(( SECONDS - start ))s"
      next=$(( next + 5 ))
    fi
    sleep 0.2
  done
  say "$what answers after $(( SECONDS - start ))s"
}

run_logged() { # what logfile command...  (progress every 10 s; the log's tail on failure)
  local what="$1" log="$2" start=$SECONDS next=10 pid; shift 2
  "$@" >"$log" 2>&1 &
  pid=$!
  while kill -0 "$pid" 2>/dev/null; do
    if [ $(( SECONDS - start )) -ge "$next" ]; then
      say "  still $what: $(( SECONDS - start ))s"
      next=$(( next + 10 ))
    fi
    sleep 0.5
  done
  wait "$pid" || fail_log "$what failed" "$log"
  say "$what: done in $(( SECONDS - start ))s"
}

start_bg() { # name pidfile logfile command...  (own session, so the group can be stopped)
  local name="$1" pidfile="$2" log="$3"; shift 3
  say "starting $name"
  setsid nohup "$@" >"$log" 2>&1 < /dev/null &
  local pid=$!
  echo "$pid $(starttime "$pid")" >"$pidfile"
}

airflow_env() {
  local home="$state/airflow"
  mkdir -p "$home" "$state/warehouse"
  load_secrets "$home/secrets.env" FTE_AIRFLOW_PASSWORD=12 AIRFLOW__API_AUTH__JWT_SECRET=32
  printf '{"admin": "%s"}' "$FTE_AIRFLOW_PASSWORD" >"$home/passwords.json"
  export AIRFLOW_HOME="$home"
  export AIRFLOW__CORE__DAGS_FOLDER="$root/examples/dags"
  export AIRFLOW__CORE__LOAD_EXAMPLES=False
  export AIRFLOW__CORE__EXECUTOR=LocalExecutor
  export AIRFLOW__CORE__PARALLELISM=4
  export AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION=False
  export AIRFLOW__DATABASE__SQL_ALCHEMY_CONN="sqlite:///$home/airflow.db"
  export AIRFLOW__CORE__AUTH_MANAGER=airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager
  export AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS=admin:admin
  export AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE="$home/passwords.json"
  export AIRFLOW__API__HOST=127.0.0.1
  export AIRFLOW__API__PORT="$airflow_port"
  export AIRFLOW__API__BASE_URL="http://127.0.0.1:$airflow_port"
  export AIRFLOW__CORE__EXECUTION_API_SERVER_URL="http://127.0.0.1:$airflow_port/execution/"
  export AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL=5
  export AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC=2
  # The example SQL pipeline's warehouse (SQLite) and the sensor's history (Redis).
  export AIRFLOW_CONN_WAREHOUSE="{\"conn_type\": \"sqlite\", \"host\": \"$state/warehouse/warehouse.db\"}"
  case "$FIVETRAN_EVENTS_REDIS_URL" in
    *+sentinel://*) # not a URI Airflow can split: the connection takes it in its extra
      export AIRFLOW_CONN_FIVETRAN_EVENTS_REDIS="{\"conn_type\": \"fivetran_events\", \"extra\": {\"url\": \"$FIVETRAN_EVENTS_REDIS_URL\"}}" ;;
    *) export AIRFLOW_CONN_FIVETRAN_EVENTS_REDIS="$FIVETRAN_EVENTS_REDIS_URL" ;;
  esac
  export FIVETRAN_EVENTS_AIRFLOW_URL="http://127.0.0.1:$airflow_port"
  export FIVETRAN_EVENTS_AIRFLOW_USERNAME=admin
  export FIVETRAN_EVENTS_AIRFLOW_PASSWORD="$FTE_AIRFLOW_PASSWORD"
}

seed_warehouse() {
  .venv/bin/python - "$state/warehouse/fivetran_demo.db" <<'PY'
import sqlite3, sys
with sqlite3.connect(sys.argv[1]) as c:
    c.execute("CREATE TABLE IF NOT EXISTS orders (id INTEGER PRIMARY KEY, day TEXT, amount REAL)")
    c.executemany("INSERT OR IGNORE INTO orders VALUES (?, ?, ?)",
                  [(1, "2026-01-01", 10.0), (2, "2026-01-01", 5.5), (3, "2026-01-02", 7.0)])
PY
}

up() {
  command -v curl >/dev/null || die "curl is needed to check the stack's health"
  step "installing the server and Airflow into .venv (a minute or two the first time)"
  run_logged "installing" "$state/install.log" bash deploy/venv.sh server,airflow,sql
  secrets
  step "Redis"
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
  airflow_env
  step "the webhook app"
  export PROMETHEUS_MULTIPROC_DIR="$state/metrics"
  if ours "$state/webhook.pid" gunicorn; then
    say "webhook app already running on 127.0.0.1:$webhook_port"
  else
    rm -rf "$PROMETHEUS_MULTIPROC_DIR"; mkdir -p "$PROMETHEUS_MULTIPROC_DIR"
    start_bg "the webhook app on 127.0.0.1:$webhook_port" "$state/webhook.pid" "$state/webhook.log" \
      .venv/bin/fivetran-events serve --host 127.0.0.1 --port "$webhook_port"
  fi
  wait_http "the webhook app" "http://127.0.0.1:$webhook_port/readyz" 30 webhook
  step "the forwarding worker"
  if ours "$state/worker.pid" "fivetran-events worker"; then
    say "the forwarding worker already runs"
  else
    # A pool of 4 (docs/forwarding.md): one slow answer holds up one delivery.
    start_bg "a forwarding worker pool (4 processes)" "$state/worker.pid" "$state/worker.log" \
      .venv/bin/fivetran-events worker --concurrency 4
  fi
  step "Airflow's database (SQLite in $AIRFLOW_HOME)"
  if [ ! -f "$AIRFLOW_HOME/airflow.db" ] || [ pyproject.toml -nt "$AIRFLOW_HOME/airflow.db" ]; then
    run_logged "migrating Airflow's database" "$state/airflow-migrate.log" \
      .venv/bin/airflow db migrate
  else
    say "up to date"
  fi
  seed_warehouse
  step "Airflow's api-server, scheduler, dag-processor and triggerer"
  for c in api-server scheduler dag-processor triggerer; do
    if ours "$state/airflow-$c.pid" "airflow $c"; then say "Airflow $c already runs"; continue; fi
    case "$c" in
      api-server) args=(api-server --host 127.0.0.1 --port "$airflow_port") ;;
      scheduler|triggerer) args=("$c" --skip-serve-logs) ;;
      *) args=("$c") ;;
    esac
    start_bg "Airflow $c" "$state/airflow-$c.pid" "$state/airflow-$c.log" .venv/bin/airflow "${args[@]}"
  done
  wait_http "Airflow's API server" "http://127.0.0.1:$airflow_port/api/v2/monitor/health" 180 \
    airflow-api-server airflow-scheduler airflow-dag-processor airflow-triggerer
  # Everything a shell needs to talk to the stack (the manual's examples source it).
  ( umask 077; {
    printf 'FIVETRAN_EVENTS_REDIS_URL=%s\n' "$FIVETRAN_EVENTS_REDIS_URL"
    printf 'FIVETRAN_EVENTS_WEBHOOK_SECRETS=%s\n' "$FIVETRAN_EVENTS_WEBHOOK_SECRETS"
    printf 'FIVETRAN_EVENTS_API_TOKENS=%s\n' "$FIVETRAN_EVENTS_API_TOKENS"
    printf 'FIVETRAN_EVENTS_AIRFLOW_URL=%s\n' "$FIVETRAN_EVENTS_AIRFLOW_URL"
    printf 'FIVETRAN_EVENTS_AIRFLOW_USERNAME=%s\n' "$FIVETRAN_EVENTS_AIRFLOW_USERNAME"
    printf 'FIVETRAN_EVENTS_AIRFLOW_PASSWORD=%s\n' "$FIVETRAN_EVENTS_AIRFLOW_PASSWORD"
  } >"$state/env" )
  step "a demo sync_end, through the worker, to an asset-scheduled DAG run"
  FTE_WEBHOOK_URL="http://127.0.0.1:$webhook_port" FTE_UP_STARTED=$(( SECONDS - t0 )) \
    .venv/bin/python deploy/stack_demo.py ||
    fail_log "the demo sync did not reach Airflow (other logs: $state/*.log)" "$state/worker.log"
  body='{"event":"sync_end","created":"'"$(date -u +%Y-%m-%dT%H:%M:%S.000Z)"'","connector_type":"postgres","connector_id":"demo_connector","connector_name":"fivetran_demo","sync_id":"demo-'"$(date +%s)"'","destination_group_id":"demo_group","data":{"status":"SUCCESSFUL"}}'
  sig="$(printf '%s' "$body" | .venv/bin/python -c 'import sys,hmac,hashlib,os; print(hmac.new(os.environ["FIVETRAN_EVENTS_WEBHOOK_SECRETS"].split(",")[0].encode(), sys.stdin.buffer.read(), hashlib.sha256).hexdigest().upper())')"
  cat <<MSG

The stack is up.
  webhook:   http://127.0.0.1:$webhook_port/webhooks/fivetran
  read API:  http://127.0.0.1:$webhook_port/api/connectors   (Authorization: Bearer \$FIVETRAN_EVENTS_API_TOKENS)
  health:    http://127.0.0.1:$webhook_port/readyz    metrics: http://127.0.0.1:$webhook_port/metrics
  Airflow:   http://127.0.0.1:$airflow_port   user admin, password $FTE_AIRFLOW_PASSWORD
  Redis:     $FIVETRAN_EVENTS_REDIS_URL
  settings:  $state/env (for a shell: set -a; . $state/env; set +a)   logs: $state/*.log

Send a signed sync_end, as Fivetran would:
  curl -sS -X POST http://127.0.0.1:$webhook_port/webhooks/fivetran \\
    -H 'Content-Type: application/json' \\
    -H 'X-Fivetran-Signature-256: $sig' \\
    -d '$body'
Then look at it:
  curl -sS -H "Authorization: Bearer $FIVETRAN_EVENTS_API_TOKENS" http://127.0.0.1:$webhook_port/api/connectors/demo_connector/syncs
and at the DAG runs it started: http://127.0.0.1:$airflow_port/dags/fivetran_asset_consumer
Stop everything with: make down
MSG
}

down() {
  for c in api-server scheduler dag-processor triggerer; do
    stop_one "Airflow $c" "$state/airflow-$c.pid" "airflow $c"
  done
  stop_one "the forwarding worker" "$state/worker.pid" "fivetran-events worker"
  stop_one "the webhook app" "$state/webhook.pid" gunicorn
  stop_one "Redis" "$state/redis.pid" redis-server
  say "stopped (data kept in $state)"
}

status() {
  local name file pattern
  while read -r name file pattern; do
    if ours "$state/$file" "$pattern"; then echo "$name: running (pid $(cut -d' ' -f1 "$state/$file"))"
    else echo "$name: stopped"; fi
  done <<LIST
webhook webhook.pid gunicorn
worker worker.pid fivetran-events
redis redis.pid redis-server
airflow-api-server airflow-api-server.pid airflow
airflow-scheduler airflow-scheduler.pid airflow
airflow-dag-processor airflow-dag-processor.pid airflow
airflow-triggerer airflow-triggerer.pid airflow
LIST
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  status) status ;;
  *) echo "usage: $0 up|down|status" >&2; exit 2 ;;
esac
