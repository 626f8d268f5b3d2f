#!/usr/bin/env bash
# The HTTP API against its own OpenAPI document: schemathesis (pinned, from PyPI, into a venv
# under target/) runs every check with a fixed seed against a relay started here on an ephemeral
# port, a temporary data directory and the admin API on. What it may refuse is in
# schemathesis.toml, each refusal named. .ci/run calls this before `cargo test`.
set -euo pipefail
cd "$(dirname "$0")/../.."
SCHEMATHESIS_VERSION=4.32.5
EXAMPLES=${SCHEMATHESIS_EXAMPLES:-50}
SEED=${SCHEMATHESIS_SEED:-20261201}

venv=target/schemathesis-venv
if [ ! -x "$venv/bin/schemathesis" ] || [ "$("$venv/bin/schemathesis" --version)" != "schemathesis, version $SCHEMATHESIS_VERSION" ]; then
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check "schemathesis==$SCHEMATHESIS_VERSION"
fi

cargo build --locked --quiet --bin hearth
data=$(mktemp -d)
log="$data.log"
token=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
HEARTH_SERVER__BIND=127.0.0.1:0 HEARTH_STORAGE__DATA_DIR="$data" HEARTH_ADMIN__TOKEN="$token" \
    HEARTH_LIMITS__ENABLED=false target/debug/hearth >"$log" 2>&1 &
relay=$!
cleanup() {
    kill "$relay" 2>/dev/null || true
    wait "$relay" 2>/dev/null || true
    rm -rf "$data" "$log"
}
trap cleanup EXIT

addr=""
for _ in $(seq 1 100); do
    addr=$(sed -n 's/.*listening on \([0-9.:]*\).*/\1/p' "$log" | head -n 1)
    [ -n "$addr" ] && break
    if ! kill -0 "$relay" 2>/dev/null; then
        cat "$log"
        exit 1
    fi
    sleep 0.1
done
if [ -z "$addr" ]; then
    echo "the relay did not start:" >&2
    cat "$log" >&2
    exit 1
fi

cd tests/schemathesis
PYTHONPATH=. HEARTH_SCHEMATHESIS_TOKEN="$token" "../../$venv/bin/schemathesis" run \
    "http://$addr/api/v1/openapi.json" --checks all --max-examples "$EXAMPLES" --seed "$SEED" \
    --no-color
