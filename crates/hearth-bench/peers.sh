#!/usr/bin/env bash
# hearth beside the relays its users would pick instead, in one run on this machine: each relay
# started on a free port with a scratch directory, then the same workloads against each, one
# relay at a time (so none shares the cores with another):
#   - hearth-bench: ingest 4 x 256 of one pre-signed file, the query mix (2,000 queries), a
#     fan-out (200 subscribers x 200 events at 100/s), a chat (`hearth-bench chat`: 50 NIP-28
#     rooms of 200 messages, 500 members in 4 rooms each opening them at once, then 1,000
#     messages at 50/s timed to every member of their room);
#   - nostr-bench 0.4.0 (third party): `event` and `req`, 50 clients each, 20 s each;
#   - disk per event after hearth-bench's workloads, peak RSS (VmHWM) after everything.
# Relays: hearth on sled and on PostgreSQL (a server of the script's own, fsync on), and
# nostr-rs-relay, rnostr and chorus as ../shared/peers/build.sh builds them into
# $PEERS/bin (default ~/.cache/hearth-peers). Each relay runs with its defaults, with only what a
# benchmark needs raised (connections and subscriptions per IP, rate limits); see the book's
# performance chapter for what each one's OK means (not every relay syncs to disk before it).
#   crates/hearth-bench/peers.sh [EVENTS [RELAY…]]   EVENTS defaults to 200000, the relays to all
#                                            five; prints one JSON line a relay on stdout
#                                            (a workload that failed is null, its last error
#                                            line under "failures"), progress on stderr.
set -euo pipefail
cd "$(dirname "$0")/../.."
EVENTS=${1:-200000}
shift || true
ONLY=" ${*:-hearth-sled hearth-postgres nostr-rs-relay rnostr chorus} "
runs() { [[ $ONLY == *" $1 "* ]]; }
PEERS=${PEERS:-$HOME/.cache/hearth-peers}
BENCH=$PWD/target/release/hearth-bench
HEARTH=$PWD/target/release/hearth
[ -x "$BENCH" ] && [ -x "$HEARTH" ] || { echo "run cargo build --release first" >&2; exit 2; }
for b in nostr-bench nostr-rs-relay rnostr chorus; do
  [ -x "$PEERS/bin/$b" ] || { echo "$PEERS/bin/$b is missing: run ../shared/peers/build.sh" >&2; exit 2; }
done
work=$(mktemp -d /tmp/hearth-peers-run.XXXXXX)
chmod 755 "$work"  # the postgres user reaches its data directory through it
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  [ -n "${PGDATA_DIR:-}" ] && runuser -u postgres -- /usr/lib/postgresql/*/bin/pg_ctl -D "$PGDATA_DIR" -m immediate stop >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT
file=$work/events.jsonl
"$BENCH" gen --count "$EVENTS" --out "$file" >/dev/null

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_port() {
  for _ in $(seq 1 300); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; then return 0; fi
    sleep 0.1
  done
  echo "nothing listens on $1" >&2; return 1
}
# The last JSON line nostr-bench printed in 20 seconds of MODE (event, req) against URL.
nostr_bench() {
  local mode=$1 url=$2
  timeout -s INT 20 "$PEERS/bin/nostr-bench" "$mode" -c 50 -r 50 -t 2 --json "$url" 2>/dev/null | grep '^{' | tail -1 || true
}

# Runs every workload against the relay NAME (pid PID, URL, data in DIR; a fifth argument names
# a command that prints how many bytes it keeps elsewhere: hearth-postgres's database).
measure() {
  local name=$1 pid=$2 url=$3 dir=$4 elsewhere=${5:-}
  echo "== $name" >&2
  local ingest query fanout chat event req rss disk
  # A workload that fails is reported as null (its error in "failures"), and the others still run.
  local errs=$work/$name.stderr; mkdir -p "$errs"
  ingest=$("$BENCH" ingest --relay "$url" --file "$file" --conns 4 --inflight "${INFLIGHT:-256}" 2>"$errs/ingest" | tail -1 || true)
  query=$("$BENCH" query --relay "$url" --file "$file" --queries 2000 2>"$errs/query" | tail -1 || true)
  fanout=$("$BENCH" fanout --relay "$url" --subs 200 --events 200 --rate 100 2>"$errs/fanout" | tail -1 || true)
  # The disk the file's events take (and the fan-out's 200), before the chat and nostr-bench add
  # their own.
  disk=$(du -sk "$dir" | cut -f1)
  [ -n "$elsewhere" ] && disk=$((disk + $($elsewhere) / 1024))
  chat=$("$BENCH" chat --relay "$url" 2>"$errs/chat" | tail -1 || true)
  event=$(nostr_bench event "$url")
  req=$(nostr_bench req "$url")
  rss=$(awk '/VmHWM/ {print $2}' "/proc/$pid/status")
  python3 - "$name" "$EVENTS" "$rss" "$disk" "$errs" "$ingest" "$query" "$fanout" "$chat" "$event" "$req" <<'PY'
import json, sys
name, events, rss, disk, errs, *parts = sys.argv[1:]
def parse(text):
    try:
        return json.loads(text)
    except ValueError:
        return text or None
ingest, query, fanout, chat, event, req = map(parse, parts)
def rate(line):
    # nostr-bench's last report: its totals since the start.
    if not isinstance(line, dict):
        return line
    stats = line.get("message_stats", {})
    secs = line.get("elapsed", 0) / 1000
    return {"per_sec": round(stats.get("complete", 0) / secs) if secs else None,
            "errors": stats.get("error"), "avg_ms": stats.get("success_time", {}).get("avg")}
event, req = rate(event), rate(req)
# What a failed workload said last on stderr.
def last_line(workload):
    lines = open(f"{errs}/{workload}", errors="replace").read().strip().splitlines()
    return lines[-1] if lines else None
named = {"ingest": ingest, "query": query, "fanout": fanout, "chat": chat}
failures = {w: last_line(w) for w, got in named.items() if not isinstance(got, dict)}
print(json.dumps({"relay": name, "events": int(events), "peak_rss_mb": round(int(rss) / 1024, 1),
                  "disk_bytes_per_event": round(int(disk) * 1024 / int(events)),
                  "ingest": ingest, "query": query, "fanout": fanout, "chat": chat,
                  "nostr_bench_event": event, "nostr_bench_req": req, "failures": failures}))
PY
  kill "$pid"; wait "$pid" 2>/dev/null || true
}

quotas=(HEARTH_LIMITS__HUMAN__WS_EVENTS_PER_SEC=10000000 HEARTH_LIMITS__HUMAN__WS_REQS_PER_SEC=10000000
  HEARTH_LIMITS__AGENT__WS_REQS_PER_SEC=10000000 HEARTH_LIMITS__IP__WS_REQS_PER_SEC=10000000
  HEARTH_LIMITS__HUMAN__MESSAGES_PER_MIN=1000000000 HEARTH_LIMITS__HUMAN__API_CALLS_PER_MIN=1000000000
  HEARTH_LIMITS__AGENT__WS_EVENTS_PER_SEC=10000000 HEARTH_LIMITS__AGENT__MESSAGES_PER_MIN=1000000000
  HEARTH_LIMITS__AGENT__API_CALLS_PER_MIN=1000000000 HEARTH_LIMITS__IP__WS_EVENTS_PER_SEC=10000000
  HEARTH_LIMITS__IP__MESSAGES_PER_MIN=1000000000 HEARTH_LIMITS__IP__API_CALLS_PER_MIN=1000000000
  HEARTH_LIMITS__HANDLER_WAIT_MS=10000 HEARTH_LIMITATION__MAX_SUBSCRIPTIONS=20
  HEARTH_SERVER__MAX_CONNECTIONS_PER_IP=10000 HEARTH_SERVER__MAX_SUBSCRIPTIONS_PER_IP=1000000)

hearth() {
  local name=$1 elsewhere=$2; shift 2
  local port dir; port=$(free_port); dir=$work/$name; mkdir -p "$dir"
  env "${quotas[@]}" HEARTH_SERVER__BIND="127.0.0.1:$port" HEARTH_STORAGE__DATA_DIR="$dir" RUST_LOG=warn "$@" \
    "$HEARTH" >"$work/$name.log" 2>&1 &
  local pid=$!; pids+=("$pid"); wait_port "$port"
  measure "$name" "$pid" "ws://127.0.0.1:$port" "$dir" "$elsewhere"
}

runs hearth-sled && hearth hearth-sled ""

# hearth on PostgreSQL: a server of this run's own (fsync on, 512 MB of shared buffers, 8 GB of WAL
# between checkpoints, as the book's cluster chapter sets up a busy relay's).
if runs hearth-postgres; then
bin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
PGDATA_DIR=$work/pg/data; mkdir -p "$work/pg"; chown postgres "$work/pg"
runuser -u postgres -- "$bin/initdb" -A trust -U hearth -E UTF8 --locale=C -D "$PGDATA_DIR" >/dev/null
pgport=$(free_port)
runuser -u postgres -- "$bin/pg_ctl" -D "$PGDATA_DIR" -l "$work/pg/log" \
  -o "-p $pgport -k $work/pg -c shared_buffers=512MB -c max_wal_size=8GB -c fsync=on" start >/dev/null
wait_port "$pgport"
psql -h 127.0.0.1 -p "$pgport" -U hearth postgres -qc "CREATE DATABASE peers" >/dev/null
pgsize() { psql -h 127.0.0.1 -p "$pgport" -U hearth peers -Atc "SELECT pg_database_size('peers')"; }
hearth hearth-postgres pgsize HEARTH_STORAGE__BACKEND=postgres \
  HEARTH_STORAGE__POSTGRES_URL="postgres://hearth@127.0.0.1:$pgport/peers"
fi

# nostr-rs-relay: its defaults (SQLite, WAL, synchronous=NORMAL), no rate limits.
if runs nostr-rs-relay; then
port=$(free_port); dir=$work/nostr-rs-relay; mkdir -p "$dir"
cat >"$dir.toml" <<EOF
[info]
relay_url = "ws://127.0.0.1:$port/"
name = "nostr-rs-relay"
[database]
data_directory = "$dir"
[network]
address = "127.0.0.1"
port = $port
[limits]
max_event_bytes = 131072
EOF
RUST_LOG=warn "$PEERS/bin/nostr-rs-relay" -c "$dir.toml" >"$work/nostr-rs-relay.log" 2>&1 &
pid=$!; pids+=("$pid"); wait_port "$port"
measure nostr-rs-relay "$pid" "ws://127.0.0.1:$port" "$dir"
fi

# rnostr: its example configuration, with the data path, the port and the subscriptions raised.
if runs rnostr; then
port=$(free_port); dir=$work/rnostr; mkdir -p "$dir"
python3 - "$PEERS/bin/rnostr.example.toml" "$dir.toml" "$dir/data" "$port" <<'PY'
import re, sys
src, dst, data, port = sys.argv[1:]
text = open(src).read()
text = re.sub(r'(?m)^path = .*$', f'path = "{data}"', text, count=1)
text = re.sub(r'(?m)^port = .*$', f'port = {port}', text, count=1)
text = re.sub(r'(?m)^host = .*$', 'host = "127.0.0.1"', text, count=1)
text = re.sub(r'(?m)^max_subscriptions = .*$', 'max_subscriptions = 1000', text)
open(dst, 'w').write(text)
PY
RUST_LOG=warn "$PEERS/bin/rnostr" relay -c "$dir.toml" >"$work/rnostr.log" 2>&1 &
pid=$!; pids+=("$pid"); wait_port "$port"
measure rnostr "$pid" "ws://127.0.0.1:$port" "$dir"
fi

# chorus: open, scraping allowed, connections and throttling raised, logs at Warn. It drops a
# connection that publishes faster than it drains its broadcast ("channel lagged"), so its ingest
# keeps 16 in flight on each of the 4 connections, not 256.
if runs chorus; then
port=$(free_port); dir=$work/chorus; mkdir -p "$dir"
cat >"$dir.toml" <<EOF
data_directory = "$dir"
ip_address = "127.0.0.1"
port = $port
hostname = "localhost"
chorus_is_behind_a_proxy = false
use_tls = false
certchain_pem_path = "tls/fullchain.pem"
key_pem_path = "tls/privkey.pem"
name = "chorus"
open_relay = true
verify_events = true
allow_scraping = true
max_subscriptions = 1000
server_log_level = "Warn"
library_log_level = "Warn"
client_log_level = "Warn"
enable_ip_blocking = false
max_connections_per_ip = 10000
throttling_bytes_per_second = 1073741824
throttling_burst = 1073741824
EOF
"$PEERS/bin/chorus" "$dir.toml" >"$work/chorus.log" 2>&1 &
pid=$!; pids+=("$pid"); wait_port "$port"
INFLIGHT=16 measure chorus "$pid" "ws://127.0.0.1:$port" "$dir"
fi
