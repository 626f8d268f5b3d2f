#!/usr/bin/env bash
# Two hearth nodes, one Redis and HAProxy on this machine: clients use ws://localhost:7000.
# Needs Debian's redis-server and haproxy (apt-get install redis-server haproxy). Everything it
# writes is in a temporary directory, removed at the end; Ctrl-C stops it all.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$here/../.."
for tool in redis-server haproxy; do
    command -v "$tool" >/dev/null || { echo "run.sh needs $tool (apt-get install redis-server haproxy)" >&2; exit 1; }
done
cargo build --release --quiet --bin hearth --manifest-path "$root/Cargo.toml"
hearth="$root/target/release/hearth"
work="$(mktemp -d)"
token="${HEARTH_ADMIN__TOKEN:-$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')}"
trap 'kill $(jobs -p) 2>/dev/null; wait; rm -rf "$work"' EXIT
redis-server --port 6390 --bind 127.0.0.1 --dir "$work" --save "" --appendonly no >"$work/redis.log" &
for node in a b; do
    HEARTH_ADMIN__TOKEN="$token" HEARTH_STORAGE__DATA_DIR="$work/data-$node" \
        "$hearth" --config "$here/node-$node.toml" 2>"$work/node-$node.log" &
done
haproxy -f "$here/haproxy.cfg" -db &
sleep 1
echo "relay:      ws://localhost:7000 (NIP-11 and REST at http://localhost:7000)"
echo "admin page: http://localhost:7000/admin/  token: $token"
echo "logs:       $work/node-a.log $work/node-b.log"
wait
