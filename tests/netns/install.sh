#!/usr/bin/env bash
# iproute2 (`ip`) for the partition tests (tests/ops/partition.rs), which make network namespaces
# and veth pairs of their own. Installed with apt only when it is missing; the tests call this
# themselves. They also need root: without it they say so and fail.
set -euo pipefail
if command -v ip >/dev/null 2>&1 || [ -x /usr/sbin/ip ] || [ -x /sbin/ip ]; then
    exit 0
fi
sudo=""
[ "$(id -u)" -ne 0 ] && sudo=sudo
echo "installing Debian's iproute2 for the partition tests" >&2
$sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null
$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends iproute2 >/dev/null
command -v ip >/dev/null || [ -x /usr/sbin/ip ]
