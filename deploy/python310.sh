#!/usr/bin/env bash
# Print the path of a Python 3.10 interpreter (the oldest requires-python allows), for
# `make test-unit-py310`; exit 1 with a line on stderr when this machine has none.
# Looks at $PYTHON310, then `uv python find 3.10` (uv's own and the system's), then pyenv's.
set -euo pipefail
cd "$(dirname "$0")/.."
is310() { [ -n "$1" ] && "$1" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 10))' 2>/dev/null; }
uv=$(command -v .venv/bin/uv || command -v uv || true)
candidates=("${PYTHON310:-}")
if [ -n "$uv" ]; then candidates+=("$("$uv" python find --no-python-downloads 3.10 2>/dev/null || true)"); fi
candidates+=("${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.10*/bin/python)
candidates+=("$(command -v python3.10 || true)")
for py in "${candidates[@]}"; do
  if is310 "$py"; then
    echo "$py"
    exit 0
  fi
done
echo "no Python 3.10 here (set PYTHON310, or: uv python install 3.10)" >&2
exit 1
