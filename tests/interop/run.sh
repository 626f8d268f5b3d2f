#!/usr/bin/env bash
# Interop with implementations we did not write. NIP-77: rust-nostr's nostr-sdk (its Python
# bindings, pinned, from PyPI, into a venv under target/) syncs with hearth both ways; see
# nostr_sdk_sync.py for exactly what is asserted. NIP-29: groups made with @welshman/util's room
# templates and read with nostr-tools' nip29 module (both pinned in js/package-lock.json, from
# the npm registry); see js/nip29.mjs. Blossom: blossom-client-sdk uploads, checks, lists,
# downloads, mirrors and deletes against hearth; see js/blossom.mjs. The DM inbox: nostr-tools'
# nip17/nip59 wrap real messages; see js/nip17.mjs. .ci/run calls this before
# `cargo test`.
set -euo pipefail
cd "$(dirname "$0")/../.."
NOSTR_SDK_VERSION=0.45.1

venv=target/interop-venv
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/pip" show nostr-sdk 2>/dev/null | grep -qx "Version: $NOSTR_SDK_VERSION"; then
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check "nostr-sdk==$NOSTR_SDK_VERSION"
fi

cargo build --locked --quiet --bin hearth
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
timeout 300 "$venv/bin/python" tests/interop/nostr_sdk_sync.py target/debug/hearth "$work"
(cd tests/interop/js && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
timeout 300 node tests/interop/js/nip29.mjs target/debug/hearth
timeout 300 node tests/interop/js/blossom.mjs target/debug/hearth
timeout 300 node tests/interop/js/nip17.mjs target/debug/hearth
