#!/usr/bin/env bash
# Garage, the self-hosted S3-compatible object store, for the tests of `media.store = "s3"`
# (each test starts its own on free ports with a temporary directory). Built once per machine
# from crates.io into ~/.cache/hearth-tools (or $HEARTH_TOOLS) and kept there: a fresh machine
# pays the build once (about 7 minutes on 2 cores). SQLite metadata only (no LMDB, K2V or
# metrics) and no optimisation: a test moves a few megabytes (measured beside other builds: 12
# minutes at opt-level 1, 7 unoptimised). Prints the binary's path.
set -euo pipefail
version=2.5.0
root="${HEARTH_TOOLS:-$HOME/.cache/hearth-tools}/garage-$version"
bin="$root/bin/garage"
if [ -x "$bin" ]; then
    echo "$bin"
    exit 0
fi
# --check: only say whether it is built.
[ "${1:-}" = "--check" ] && exit 1
echo "building Garage $version for the object-storage tests, once per machine, into $root" >&2
# One build at a time: several test processes may ask at once.
mkdir -p "$root"
exec 9>"$root.lock"
flock 9
if [ ! -x "$bin" ]; then
    CARGO_PROFILE_RELEASE_OPT_LEVEL=0 \
    CARGO_PROFILE_RELEASE_LTO=false \
    CARGO_PROFILE_RELEASE_CODEGEN_UNITS=256 \
    CARGO_PROFILE_RELEASE_DEBUG=0 \
    CARGO_PROFILE_RELEASE_STRIP=true \
    CARGO_INCREMENTAL=0 \
    CARGO_TARGET_DIR="$root/build" \
        cargo install garage --version "$version" --locked --quiet \
        --no-default-features --features sqlite,bundled-libs --root "$root" >&2
    rm -rf "$root/build"
fi
test -x "$bin"
echo "$bin"
