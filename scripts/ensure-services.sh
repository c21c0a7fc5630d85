#!/usr/bin/env bash
# Make sure what the test suite talks to is there: PostgreSQL on 127.0.0.1:5432 and Chromium.
set -euo pipefail

if ! pg_isready -q -h 127.0.0.1 -p 5432 2>/dev/null; then
  if command -v pg_ctlcluster >/dev/null 2>&1; then
    pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -n 1)" main start || true
  fi
  for _ in $(seq 1 60); do pg_isready -q -h 127.0.0.1 -p 5432 && break; sleep 0.5; done
fi
pg_isready -h 127.0.0.1 -p 5432 || echo "warning: PostgreSQL is not reachable on 127.0.0.1:5432" >&2

# Debian packages the tests use: Chromium for browser tests, docker-compose to validate the
# compose file (no Docker engine runs here), nginx for the scale-out test's reverse proxy.
missing=()
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
command -v docker-compose >/dev/null 2>&1 || missing+=(docker-compose)
command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ] || missing+=(nginx)
if [ "${#missing[@]}" -gt 0 ]; then
  if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
    apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}"
  else
    echo "warning: missing Debian packages: ${missing[*]}; their tests will fail" >&2
  fi
fi
