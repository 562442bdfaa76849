#!/usr/bin/env bash
# The web console's browser tests (server/ui/tests): builds the `orbit`
# binary, makes sure Debian's Chromium is installed, keeps a venv with the
# pinned test dependencies, and runs pytest + Playwright against real
# `orbit server` processes. Screenshots of every page are written to
# target/console-screenshots in the repository (CI artifacts), wherever
# CARGO_TARGET_DIR puts the build.
set -euo pipefail
cd "$(dirname "$0")/.."

export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target}"

if [ ! -x /usr/bin/chromium ]; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
fi

venv="${ORBIT_CONSOLE_VENV:-$HOME/.cache/orbit-ci-venv-console}"
requirements=server/ui/tests/requirements.txt
if [ ! -x "$venv/bin/python" ] || ! cmp -s "$requirements" "$venv/requirements.txt"; then
    rm -rf "$venv"
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q --disable-pip-version-check -r "$requirements"
    cp "$requirements" "$venv/requirements.txt"
fi

cargo build -q -p orbit-server --bin orbit

export ORBIT_BIN="$CARGO_TARGET_DIR/debug/orbit"
export CONSOLE_SCREENSHOTS="$PWD/target/console-screenshots"
rm -rf "$CONSOLE_SCREENSHOTS"
cd server/ui/tests
"$venv/bin/python" -m pytest -q -p no:cacheprovider
echo "console screenshots: $CONSOLE_SCREENSHOTS"

# ORBIT_CONSOLE_DOCS=1 refreshes the book's screenshots from this run.
if [ "${ORBIT_CONSOLE_DOCS:-}" = 1 ]; then
    for name in executions execution-compensated signal-confirm execution-running \
        definition workers signin reader-execution; do
        cp "$CONSOLE_SCREENSHOTS/$name.png" ../../../docs/src/guide/console/
    done
fi
