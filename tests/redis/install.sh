#!/usr/bin/env bash
# Debian's redis-server for the tests and the benchmark that run a real Redis (each starts its
# own, on a free port with a temporary directory: the package's own service is not used).
# Installed with apt only when it is missing; the tests call this themselves, so `cargo test`
# on a fresh machine needs nothing else.
set -euo pipefail
if command -v redis-server >/dev/null 2>&1; then
    exit 0
fi
sudo=""
[ "$(id -u)" -ne 0 ] && sudo=sudo
echo "installing Debian's redis-server for the tests that run a real Redis" >&2
$sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null
$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends redis-server >/dev/null
command -v redis-server >/dev/null
