#!/usr/bin/env bash
# .venv-airflow-next: the project as `make test` installs it, but on the newest Airflow 3.4
# the registry serves (pre-releases too, until a final is out), beside the locked 3.3 of
# .venv. Everything else keeps its pin from requirements/lock.txt: only the pins of
# Airflow's own distributions are left out of the constraints, so pip resolves those.
# No --pre: a specifier that names a pre-release admits them for that package only
# (PEP 440), and Airflow's pins of its core and task SDK name them exactly.
#   deploy/venv-airflow-next.sh EXTRAS   (make test-airflow-next runs it first)
set -euo pipefail
cd "$(dirname "$0")/.."
venv=.venv-airflow-next
constraints="$venv.constraints.txt"
if [ ! -f "$constraints" ] || [ requirements/lock.txt -nt "$constraints" ]; then
  grep -v -E '^(apache-airflow|apache-airflow-core|apache-airflow-task-sdk)==' \
    requirements/lock.txt >"$constraints"
fi
VENV="$venv" LOCK="$constraints" REQUIRE="${AIRFLOW_NEXT:-apache-airflow>=3.4.0b1,<3.5}" \
  bash deploy/venv.sh "${1:?the extras, as make test installs them}"
"$venv/bin/python" -c 'import airflow; print(f"==> Airflow {airflow.__version__} in .venv-airflow-next")'
