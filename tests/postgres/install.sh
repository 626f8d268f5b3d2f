#!/usr/bin/env bash
# Debian's PostgreSQL for the tests that run a real one (each test process starts its own
# servers, on free ports with temporary directories: the package's own cluster is not used).
# Installed with apt only when its programs are missing; the tests call this themselves.
set -euo pipefail
if [ -n "${HEARTH_PG_BIN:-}" ]; then
    exit 0
fi
if command -v pg_config >/dev/null 2>&1 && [ -x "$(pg_config --bindir)/initdb" ]; then
    exit 0
fi
if ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
    exit 0
fi
sudo=""
[ "$(id -u)" -ne 0 ] && sudo=sudo
echo "installing Debian's postgresql for the tests that run a real PostgreSQL" >&2
$sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null
$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends postgresql >/dev/null
ls /usr/lib/postgresql/*/bin/initdb >/dev/null
