#!/usr/bin/env bash
# The chat clients' browser tests: the unmodified web builds in ../shared/clients/ (Flotilla;
# Chachi when its build is there) in Debian's Chromium (installed with apt when missing), driven
# by @playwright/test from package-lock.json, against the debug build of this checkout; the
# two-node test runs its own PostgreSQL and Redis (installed with apt when missing). .ci/run
# calls this. Screenshots of each step land in tests/clients/screenshots/ (git-ignored).
set -euo pipefail
cd "$(dirname "$0")/../.."
clients=$(cd .. && pwd)/shared/clients
if [ ! -d "$clients/flotilla/build" ]; then
    echo "the Flotilla build is missing at $clients/flotilla/build: the chat-client tests need it" >&2
    exit 1
fi
chromium=$(bash tests/chromium.sh)
bash tests/postgres/install.sh
bash tests/redis/install.sh
command -v openssl >/dev/null || { echo "openssl is needed for the TLS front's certificate" >&2; exit 1; }
cargo build --locked --quiet --bin hearth
cd tests/clients
PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm ci --no-audit --no-fund --loglevel=error
HEARTH_CHROMIUM="$chromium" npx playwright test
