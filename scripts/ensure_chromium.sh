#!/usr/bin/env bash
# The /ui browser tests (tests/ui/test_browser_*.py) drive the system Chromium through Playwright
# (Playwright's own browser download cannot reach its host here). `make test` runs this first:
# it installs the Debian package `chromium` when it is missing and apt-get can be run (root, or
# passwordless sudo); otherwise it says so and the browser tests skip with that reason.
set -uo pipefail
if [ -n "${DPICL_CHROMIUM:-}" ] || command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1; then
  exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "ensure_chromium: no chromium and no apt-get; the /ui browser tests will be skipped" >&2
  exit 0
fi
SUDO=""
if [ "$(id -u)" != "0" ]; then
  if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then SUDO="sudo -n"; else
    echo "ensure_chromium: not root; install it with 'apt-get install -y chromium' (the /ui browser tests skip until then)" >&2
    exit 0
  fi
fi
echo "ensure_chromium: installing the Debian package chromium for the /ui browser tests" >&2
$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium >/dev/null \
  || echo "ensure_chromium: apt-get install chromium failed; the /ui browser tests will be skipped" >&2
exit 0
