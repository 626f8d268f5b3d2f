#!/usr/bin/env bash
# Debian's Chromium for the browser tests (the admin page's, the chat clients'): installed with apt
# when it is missing (the npm registry's browsers cannot be downloaded here). Prints its path
# (`HEARTH_CHROMIUM`, default /usr/bin/chromium).
set -euo pipefail
chromium=${HEARTH_CHROMIUM:-/usr/bin/chromium}
if [ ! -x "$chromium" ]; then
    sudo=""
    [ "$(id -u)" -ne 0 ] && sudo=sudo
    echo "installing Debian's chromium for the browser tests" >&2
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium >/dev/null
fi
echo "$chromium"
