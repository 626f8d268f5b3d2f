#!/usr/bin/env bash
# The admin page's browser tests: Debian's Chromium (installed with apt when it is missing; the
# npm registry's browsers cannot be downloaded here), @playwright/test and @axe-core/playwright
# from package-lock.json, against the debug build of this checkout. .ci/run calls this before
# `cargo test`. Screenshots of every view land in admin-ui/tests/screenshots/ (git-ignored).
set -euo pipefail
cd "$(dirname "$0")/../.."
chromium=$(bash tests/chromium.sh)
cargo build --locked --quiet --bin hearth
cd admin-ui/tests
PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm ci --no-audit --no-fund --loglevel=error
HEARTH_CHROMIUM="$chromium" npx playwright test
