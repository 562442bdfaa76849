#!/usr/bin/env bash
# The Python SDK (sdk/python): a venv with the SDK and its dev tools, the
# `orbit` binary, then ruff, mypy --strict and pytest against real servers.
set -euo pipefail
cd "$(dirname "$0")/.."

export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/orbit-ci-target}"
VENV="${ORBIT_CI_VENV:-$CARGO_TARGET_DIR/venv-ci}"
if [ ! -x "$VENV/bin/python" ]; then
    python3 -m venv "$VENV"
fi
"$VENV/bin/pip" install --quiet --disable-pip-version-check -e "sdk/python[dev]"

cargo build --quiet -p orbit-server --bin orbit
export ORBIT_BIN="$CARGO_TARGET_DIR/debug/orbit"

cd sdk/python
"$VENV/bin/ruff" check . ../../examples/python
"$VENV/bin/ruff" format --check . ../../examples/python
"$VENV/bin/mypy"
"$VENV/bin/pytest" -q -p no:cacheprovider
