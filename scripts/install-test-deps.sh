#!/usr/bin/env bash
# Installs what the test suite needs on a fresh machine: the package with its test extra,
# and Chromium for the browser test of the HTML report. Tests do not need torch (it is only
# for recording fixtures: the `capture` extra).
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m pip install -q -e ".[test,docs]"
if ! command -v chromium >/dev/null 2>&1 || ! command -v chromedriver >/dev/null 2>&1; then
    if [ "$(id -u)" = "0" ]; then
        (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver) >/dev/null
    else
        sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null
    fi
fi
