#!/bin/sh
# $BROWSER for `broker login` in tests: a real headless Chromium loads the sign-in URL ($1), follows every
# redirect (broker → emulator → broker → the CLI's loopback page) and writes the DOM it ends on to
# $CHROMIUM_DOM. Runs as root in CI, hence --no-sandbox.
exec chromium --headless --no-sandbox --disable-gpu --no-first-run --disable-extensions \
  --user-data-dir="${CHROMIUM_PROFILE:-/tmp/broker-chromium}" --dump-dom "$1" >"$CHROMIUM_DOM" 2>/dev/null
