#!/usr/bin/env bash
# Make sure redis-server is installed (Debian's package), installing it when we can.
set -euo pipefail
if command -v redis-server >/dev/null 2>&1; then
  exit 0
fi
echo "==> redis-server is missing: installing Debian's redis-server package"
if [ "$(id -u)" = 0 ]; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null
elif command -v sudo >/dev/null 2>&1; then
  sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null
else
  echo "error: redis-server is not installed and this user cannot install it;" \
       "install it (apt-get install redis-server) or set FIVETRAN_EVENTS_REDIS_URL" >&2
  exit 1
fi
# Debian starts a system-wide redis on install; we never use it, and leave it as it is.
command -v redis-server >/dev/null
