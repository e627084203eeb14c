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
# Installed already: an install newer than pyproject.toml and the lock whose extras include
# these (`make up` after `make install`); with REQUIRE, that exact install only. Installing
# again would reinstall the editable project, and while pip does, its metadata is missing for
# any process starting then (an Airflow beside the tests that run `make up` failed that way).
covered() {
  local s have want stamps=("$venv"/.installed-*)
  [ -z "${REQUIRE:-}" ] || stamps=("$stamp")
  for s in "${stamps[@]}"; do
    { [ -f "$s" ] && [ ! pyproject.toml -nt "$s" ] && [ ! "$lock" -nt "$s" ]; } || continue
    have=",${s##*/.installed-},"
    for want in ${extras//,/ }; do
      [[ "$have" == *",$want,"* ]] || continue 2
    done
    return 0
  done
  return 1
}
if covered; then
  exit 0
fi
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
