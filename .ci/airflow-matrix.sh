#!/usr/bin/env bash
# Every supported Airflow, shown: each minor in a venv of its own (Python 3.11, uv, one
# shared download cache) gets apache-airflow first, then our wheel (.ci/package.sh, from a
# clean clone) with [airflow]: what that adds is listed and must hold no web-server or
# worker dependency, and the DAG factory must refuse to import without [sql]. Then [sql]
# and pytest go in, and the Airflow side's unit tests and an import-and-parse smoke test
# (.ci/airflow_smoke.py) run against the installed wheel, not the checkout.
# Prints one line per version; exits 1 if a supported version fails.
#   .ci/airflow-matrix.sh              every version below
#   .ci/airflow-matrix.sh 2.11 3.3     only these
# FTE_MATRIX_DIR keeps the venvs and logs there (default: a new /tmp/fte-matrix.* folder,
# removed when every version passed).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
uv="$root/.venv/bin/uv"
python=$("$root/.venv/bin/python" -c 'import sys; print(sys._base_executable)')
"$python" -c 'import sys; assert sys.version_info[:2] == (3, 11), sys.version' ||
  { echo "error: the matrix runs on Python 3.11 (.venv's); $python is not" >&2; exit 1; }
# The minors docs/compatibility.md lists; 3.4 is the newest the registry serves, a
# pre-release until 3.4.0 is out (--prerelease allow takes the final once it is).
SUPPORTED=(2.10 2.11 3.0 3.1 3.2 3.3 3.4)
if [ $# -gt 0 ]; then versions=("$@"); else versions=("${SUPPORTED[@]}"); fi
work="${FTE_MATRIX_DIR:-$(mktemp -d /tmp/fte-matrix.XXXXXX)}"
mkdir -p "$work"
# One cache for every venv (and run): each wheel is downloaded once.
export UV_CACHE_DIR="${UV_CACHE_DIR:-$HOME/.cache/uv}"
export UV_NO_PROGRESS=1

bash .ci/package.sh "$work/dist"
wheel=$(ls "$work"/dist/fivetran_events-*.whl)

# The tests to run, beside a link to the installed package (set per version), so they
# import the wheel's files: tests/ is a package, pytest puts $work/suite on sys.path.
suite="$work/suite"
rm -rf "$suite" && mkdir -p "$suite/tests/unit"
cp tests/__init__.py "$suite/tests/"
cp tests/unit/__init__.py tests/unit/conftest.py "$suite/tests/unit/"
cp -r tests/unit/airflow_plugin tests/unit/dag_factory "$suite/tests/unit/"
cp -r testkit "$suite/testkit"
printf '[pytest]\naddopts = -q -p no:cacheprovider\n' >"$suite/pytest.ini"

# Names (lowercase, - for _) that [airflow] must never add: the server's and the worker's.
FORBIDDEN='^(flask|werkzeug|gunicorn|rq|prometheus-client|spectree|structlog)$'

names() { "$uv" pip freeze --python "$1" | sed -E 's/[ =@].*//' | tr 'A-Z_' 'a-z-' | sort -u; }

one() {  # VERSION: install, check, test; its output goes to $work/VERSION.log
  local v=$1 venv="$work/venv-$1" home="$work/home-$1"
  local airflow=("apache-airflow==$v.*") pre=()
  [ "$v" != 3.4 ] || { airflow=("apache-airflow>=3.4.0a0,<3.5"); pre=(--prerelease allow); }
  # What Airflow's constraints files hold back where the newest release breaks that
  # Airflow (the files are on GitHub, which CI need not reach): cryptography 51 made
  # MultiFernet a class Airflow up to 3.1 cannot mark, so with a Fernet key every
  # connection lookup fails there. Users install with the constraints (docs/install.md).
  case $v in 2.* | 3.0 | 3.1) airflow+=("cryptography<51") ;; esac
  rm -rf "$venv" "$home" && mkdir -p "$home"
  "$uv" venv -q --python "$python" "$venv"
  local py="$venv/bin/python"
  "$uv" pip install -q --python "$py" "${pre[@]}" "${airflow[@]}"
  names "$py" >"$work/$v.before"
  "$uv" pip install -q --python "$py" "${pre[@]}" "$wheel[airflow]" "${airflow[@]}"
  names "$py" >"$work/$v.after"
  local added
  added=$(comm -13 "$work/$v.before" "$work/$v.after" | grep -vx 'fivetran-events' | tr '\n' ' ')
  echo "airflow $("$py" -c 'import airflow; print(airflow.__version__)'): [airflow] adds $(wc -w <<<"$added"): $added"
  if grep -Eq "$FORBIDDEN" <(tr ' ' '\n' <<<"$added"); then
    echo "FAIL: [airflow] adds a server or worker dependency"; return 1
  fi
  export AIRFLOW_HOME="$home" AIRFLOW__CORE__LOAD_EXAMPLES=False \
    AIRFLOW__DATABASE__SQL_ALCHEMY_CONN="sqlite:///$home/airflow.db" \
    AIRFLOW__CORE__DAGS_FOLDER="$home/dags" AIRFLOW__LOGGING__LOGGING_LEVEL=WARNING
  mkdir -p "$home/dags"
  local err
  if err=$("$py" -c 'import airflow_plugin.dag_factory' 2>&1) || ! grep -q "needs the \[sql\] extra" <<<"$err"; then
    echo "FAIL: the DAG factory imported without [sql], or not with the clear error: $err"; return 1
  fi
  "$uv" pip install -q --python "$py" "${pre[@]}" "$wheel[airflow,sql]" "${airflow[@]}" \
    pytest freezegun hypothesis
  ln -sfn "$("$py" -c 'import airflow_plugin, os; print(os.path.dirname(airflow_plugin.__file__))')" \
    "$suite/airflow_plugin"
  "$py" .ci/airflow_smoke.py "$root/examples"
  # Not the comparison with astronomer's provider: that is a test dependency's signatures
  # (make test runs it), not something of Airflow's.
  (cd "$suite" && "$py" -m pytest tests/unit/airflow_plugin tests/unit/dag_factory \
    -k "not TestAgainstTheInstalledPackage")
}

failed=0
summary=()
for v in "${versions[@]}"; do
  start=$SECONDS
  # A subshell outside any condition, so that set -e stops `one` at its first failure.
  set +e
  (set -e; one "$v") >"$work/$v.log" 2>&1
  rc=$?
  set -e
  if [ "$rc" = 0 ]; then result=pass; else result=FAIL; failed=1; fi
  line=$(printf 'airflow %-4s %-4s %4ds  %s' "$v" "$result" $((SECONDS - start)) \
    "$(grep -m1 -o '^airflow [^:]*: \[airflow\] adds [0-9]*' "$work/$v.log" || true)")
  echo "$line"; summary+=("$line")
  [ "$result" = pass ] || tail -n 25 "$work/$v.log" | sed 's/^/    /'
done
echo "==> Airflow matrix (logs: $work):"
printf '  %s\n' "${summary[@]}"
if [ "$failed" = 0 ] && [ -z "${FTE_MATRIX_DIR:-}" ]; then rm -rf "$work"; fi
exit "$failed"
