#!/usr/bin/env bash
# Checks the server against its own OpenAPI document with schemathesis
# (`--checks all`): a fresh `orbit server` on a temporary SQLite file and a
# free port, once without auth and once with `--auth` (admin token). Any
# failure fails the script. Settings the schema cannot carry are in
# ./schemathesis.toml.
#
#   ST_SEED=7 ST_EXAMPLES=200 bash .ci/schemathesis.sh   # another seed, more examples
set -euo pipefail
cd "$(dirname "$0")/.."

export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/orbit-ci-target}"
SCHEMATHESIS_VERSION="4.32.5"
SEED="${ST_SEED:-20261201}"
EXAMPLES="${ST_EXAMPLES:-40}"

VENV="${ORBIT_CI_VENV:-$CARGO_TARGET_DIR/venv-ci}"
if [ ! -x "$VENV/bin/python" ]; then
    python3 -m venv "$VENV"
fi
if ! "$VENV/bin/schemathesis" --version 2>/dev/null | grep -q "$SCHEMATHESIS_VERSION"; then
    "$VENV/bin/pip" install --quiet --disable-pip-version-check "schemathesis==$SCHEMATHESIS_VERSION"
fi

cargo build --quiet -p orbit-server --bin orbit
ORBIT="$CARGO_TARGET_DIR/debug/orbit"

WORK="$(mktemp -d)"
SERVER_PID=""
cleanup() {
    if [ -n "$SERVER_PID" ]; then kill "$SERVER_PID" 2>/dev/null || true; wait "$SERVER_PID" 2>/dev/null || true; fi
    rm -rf "$WORK"
}
trap cleanup EXIT

free_port() {
    "$VENV/bin/python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# run NAME [server flags...] -- [schemathesis flags...]
run() {
    local name="$1"; shift
    local server_args=() st_args=()
    while [ "$#" -gt 0 ] && [ "$1" != "--" ]; do server_args+=("$1"); shift; done
    [ "$#" -gt 0 ] && shift
    st_args=("$@")
    local port; port="$(free_port)"
    mkdir -p "$WORK/$name"
    "$ORBIT" server --db "sqlite://$WORK/$name/orbit.db" --listen "127.0.0.1:$port" \
        ${server_args[@]+"${server_args[@]}"} >"$WORK/$name/server.log" 2>&1 &
    SERVER_PID=$!
    for _ in $(seq 1 100); do
        if "$VENV/bin/python" -c "import urllib.request,sys; urllib.request.urlopen('http://127.0.0.1:$port/readyz', timeout=1)" 2>/dev/null; then break; fi
        sleep 0.1
    done
    echo "schemathesis ($name): seed $SEED, $EXAMPLES examples per operation"
    local rc=0
    "$VENV/bin/schemathesis" --config-file schemathesis.toml --no-color \
        run "http://127.0.0.1:$port/v1/openapi.json" \
        --checks all --seed "$SEED" --max-examples "$EXAMPLES" \
        --generation-database none \
        ${st_args[@]+"${st_args[@]}"} || rc=$?
    kill "$SERVER_PID" 2>/dev/null || true
    wait "$SERVER_PID" 2>/dev/null || true
    SERVER_PID=""
    if [ "$rc" -ne 0 ]; then
        echo "schemathesis ($name) failed; server log:" >&2
        tail -n 40 "$WORK/$name/server.log" >&2
        exit "$rc"
    fi
}

run open

TOKEN="schemathesis-admin-token"
cat >"$WORK/auth.toml" <<EOF
[[tokens]]
name = "schemathesis"
role = "admin"
sha256 = "$("$ORBIT" auth hash-token "$TOKEN")"
EOF
run auth --auth "$WORK/auth.toml" -- -H "Authorization: Bearer $TOKEN"
