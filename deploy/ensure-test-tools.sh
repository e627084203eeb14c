#!/usr/bin/env bash
# Install what the tests use beyond Python packages: redis-server, nginx (only for
# `nginx -t` on deploy/nginx.conf; never started) and a Dockerfile linter from npm.
set -euo pipefail
cd "$(dirname "$0")/.."
bash deploy/ensure-redis.sh
if ! command -v nginx >/dev/null 2>&1 && [ ! -x /usr/sbin/nginx ]; then
  echo "==> installing Debian's nginx-light (config checks only; it is not started)"
  if [ "$(id -u)" = 0 ]; then
    # Keep the package's scripts from starting a server on port 80.
    printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nginx-light >/dev/null
    rm -f /usr/sbin/policy-rc.d
  else
    echo "error: nginx is needed for the deploy tests (apt-get install nginx-light)" >&2
    exit 1
  fi
fi
if [ ! -x .venv/node/node_modules/.bin/dockerfilelint ]; then
  command -v npm >/dev/null || { echo "error: npm is needed for the Dockerfile linter" >&2; exit 1; }
  echo "==> installing dockerfilelint (npm) into .venv/node"
  mkdir -p .venv/node
  npm install --silent --no-audit --no-fund --prefix .venv/node dockerfilelint@1.8.0 >/dev/null
fi
