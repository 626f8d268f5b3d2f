#!/usr/bin/env bash
# Garage, the self-hosted S3-compatible object store, for the tests of `media.store = "s3"`
# (each test starts its own on free ports with a temporary directory). Built once per machine
# from crates.io into ~/.cache/hearth-tools (or $HEARTH_TOOLS) and kept there: a fresh machine
# pays the build (minutes on 2 cores) once. SQLite metadata only (no LMDB, K2V or metrics) and
# a quick release profile, to keep that build short. Prints the binary's path.
set -euo pipefail
version=2.5.0
root="${HEARTH_TOOLS:-$HOME/.cache/hearth-tools}/garage-$version"
bin="$root/bin/garage"
if [ -x "$bin" ]; then
    echo "$bin"
    exit 0
fi
echo "building Garage $version for the object-storage tests, once per machine, into $root" >&2
# One build at a time: several test processes may ask at once.
mkdir -p "$root"
exec 9>"$root.lock"
flock 9
if [ ! -x "$bin" ]; then
    CARGO_PROFILE_RELEASE_OPT_LEVEL=1 \
    CARGO_PROFILE_RELEASE_LTO=false \
    CARGO_PROFILE_RELEASE_CODEGEN_UNITS=16 \
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
