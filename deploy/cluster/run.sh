#!/usr/bin/env bash
# Two hearth nodes on one PostgreSQL and one Redis, behind HAProxy, on this machine: clients use
# ws://localhost:7000. Needs Debian's postgresql, redis-server and haproxy
# (apt-get install postgresql redis-server haproxy). Everything it writes is in a temporary
# directory, removed at the end; Ctrl-C stops it all.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$here/../.."
for tool in redis-server haproxy; do
    command -v "$tool" >/dev/null || { echo "run.sh needs $tool (apt-get install postgresql redis-server haproxy)" >&2; exit 1; }
done
pgbin="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)"
[ -x "$pgbin/initdb" ] || { echo "run.sh needs PostgreSQL (apt-get install postgresql)" >&2; exit 1; }
cargo build --release --quiet --bin hearth --manifest-path "$root/Cargo.toml"
hearth="$root/target/release/hearth"
work="$(mktemp -d)"
chmod 755 "$work"
token="${HEARTH_ADMIN__TOKEN:-$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')}"
relay_key="${HEARTH_RELAY__SECRET_KEY:-$(od -An -N32 -tx1 /dev/urandom | tr -d ' \n')}"
trap 'kill $(jobs -p) 2>/dev/null; wait; rm -rf "$work"' EXIT
# PostgreSQL refuses to run as root: as root, the package's postgres user runs it.
as_pg=()
if [ "$(id -u)" -eq 0 ]; then
    as_pg=(runuser -u postgres --)
    mkdir "$work/pg" && chown postgres: "$work/pg"
else
    mkdir "$work/pg"
fi
"${as_pg[@]}" "$pgbin/initdb" -A trust -U hearth -E UTF8 --locale=C -D "$work/pg/data" >"$work/initdb.log"
"${as_pg[@]}" "$pgbin/postgres" -D "$work/pg/data" -p 6391 -k "$work/pg" -c listen_addresses=127.0.0.1 \
    >"$work/postgres.log" 2>&1 &
until "$pgbin/pg_isready" -q -h 127.0.0.1 -p 6391; do sleep 0.2; done
"$pgbin/createdb" -h 127.0.0.1 -p 6391 -U hearth hearth
redis-server --port 6390 --bind 127.0.0.1 --dir "$work" --save "" --appendonly no >"$work/redis.log" &
for node in a b; do
    HEARTH_ADMIN__TOKEN="$token" HEARTH_RELAY__SECRET_KEY="$relay_key" HEARTH_STORAGE__DATA_DIR="$work/data-$node" \
        "$hearth" --config "$here/node-$node.toml" 2>"$work/node-$node.log" &
done
haproxy -f "$here/haproxy.cfg" -db &
sleep 1
echo "relay:      ws://localhost:7000 (NIP-11 and REST at http://localhost:7000)"
echo "admin page: http://localhost:7000/admin/  token: $token"
echo "logs:       $work/node-a.log $work/node-b.log $work/postgres.log"
wait
