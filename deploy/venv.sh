#!/usr/bin/env bash
# Create .venv (if missing) and install the project with the given extras, quietly, at
# the versions pinned in requirements/lock.txt (`make lock` refreshes it), so every
# machine, `make up`, CI and the Docker image run what the tests ran.
#   deploy/venv.sh server,dev
#   VENV=.venv310 PYTHON=/path/to/python3.10 LOCK=requirements/lock-py310.txt \
#     deploy/venv.sh server,airflow,dev     (make test-unit-py310)
# REQUIRE names one more requirement to install with it (deploy/venv-airflow-next.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
extras="${1:-server}"
python="${PYTHON:-python3}"
venv="${VENV:-.venv}"
if [ ! -x "$venv/bin/python" ]; then
  echo "==> creating $venv with $($python --version)"
  "$python" -m venv "$venv"
fi
stamp="$venv/.installed-$extras"
lock="${LOCK:-requirements/lock.txt}"
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ] || [ "$lock" -nt "$stamp" ]; then
  echo "==> installing fivetran-events[$extras] into $venv (a minute on a fresh machine)"
  log="$venv/pip-install.log"
  if ! { "$venv/bin/python" -m pip install --disable-pip-version-check -U pip &&
         "$venv/bin/python" -m pip install --disable-pip-version-check -c "$lock" -e ".[$extras]" \
           ${REQUIRE:+"$REQUIRE"}; } >"$log" 2>&1; then
    tail -n 30 "$log" >&2
    echo "error: installing fivetran-events[$extras] failed; the whole log is in $log" >&2
    exit 1
  fi
  touch "$stamp"
fi
