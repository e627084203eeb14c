#!/usr/bin/env bash
# Install what the tests use beyond Python packages: redis-server, nginx (only for
# `nginx -t` on deploy/nginx.conf), kubectl from Debian's kubernetes-client (only
# `kubectl kustomize`, which needs no cluster), promtool from Debian's prometheus (only for
# `promtool check rules` / `test rules` on deploy/prometheus/; no server is started),
# Debian's postgresql (`fivetran-events import --from-db`'s tests start their own server on
# a free loopback port, testkit/own_postgres.py; the package's own cluster is not started),
# chromium (the browser test of the Airflow UI view drives it through Playwright; no
# browser is downloaded), systemd (only `systemd-analyze security --offline=yes` on the
# units; nothing runs under it) and a Dockerfile linter from npm.
set -euo pipefail
cd "$(dirname "$0")/.."
bash deploy/ensure-redis.sh

apt_install() { # command package why
  if command -v "$1" >/dev/null 2>&1 || [ -x "/usr/sbin/$1" ] || [ -x "/usr/bin/$1" ]; then
    return 0
  fi
  echo "==> installing Debian's $2 ($3; it is not started)"
  if [ "$(id -u)" = 0 ]; then
    # Keep the package's scripts from starting a server.
    printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d
    trap 'rm -f /usr/sbin/policy-rc.d' EXIT
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$2" >/dev/null
    rm -f /usr/sbin/policy-rc.d
    trap - EXIT
  else
    echo "error: $1 is needed for the deploy tests (apt-get install $2)" >&2
    exit 1
  fi
}

apt_install nginx nginx-light "config checks only"
apt_install promtool prometheus "promtool for the alert rules' tests"
apt_install chromium chromium "the UI view's browser test, headless"
apt_install kubectl kubernetes-client "kubectl kustomize renders deploy/kubernetes/ for its tests"
apt_install systemd-analyze systemd "systemd-analyze security --offline rates deploy/'s units"
# Debian keeps PostgreSQL's server programs off PATH, under /usr/lib/postgresql/VERSION/bin.
if ! compgen -G "/usr/lib/postgresql/*/bin/postgres" >/dev/null; then
  apt_install postgres postgresql "the import's tests: a server of their own"
fi
if [ ! -x .venv/node/node_modules/.bin/dockerfilelint ]; then
  command -v npm >/dev/null || { echo "error: npm is needed for the Dockerfile linter" >&2; exit 1; }
  echo "==> installing dockerfilelint (npm) into .venv/node"
  mkdir -p .venv/node
  npm install --silent --no-audit --no-fund --prefix .venv/node dockerfilelint@1.8.0 >/dev/null
fi
