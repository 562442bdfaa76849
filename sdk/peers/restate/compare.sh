#!/usr/bin/env bash
# ORBIT against Restate, side by side, on the same workload in one run.
#
#   ORBIT=/path/to/orbit bash sdk/peers/restate/compare.sh
#
# Workload on both sides: an execution is a chain of 3 durable task steps,
# each taking the previous step's output; N executions in all, C in flight.
#   ORBIT:   orbit bench --executions N --concurrency C --steps 3 --json
#            (in-process server, a fresh SQLite file, 4 SDK worker sessions
#            polling over HTTP; see docs/src/benchmarks.md)
#   Restate: restate-server (fresh data directory in a temp dir), the
#            TypeScript service in src/service.ts (3 ctx.run per invocation),
#            and src/driver.ts calling POST /chain/run with C in flight.
# Rounds alternate ORBIT, Restate, ORBIT, Restate, ... and the table shows
# the median of the rounds' steps/s for each, every round's value, and the
# ratio of the medians. Durability: see restate.toml (Restate fsyncs its log
# before acknowledging, by default; ORBIT fsyncs before every acknowledgement).
#
# Knobs (environment): ORBIT (default target/release/orbit of this repo),
# N (10000), C (200), ROUNDS (3), NICE (5: every benchmark process runs
# under nice), KEEP_JSON (a directory to keep each run's JSON in). Restate's
# ports are fixed (restate.toml): 8080 ingress, 9070 admin, 5122 node, and
# 9080 for the service; all on 127.0.0.1.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../../.." && pwd)"
ORBIT="${ORBIT:-$REPO/target/release/orbit}"
N="${N:-10000}"
C="${C:-200}"
ROUNDS="${ROUNDS:-3}"
NICE="${NICE:-5}"
SERVICE_PORT=9080

[ -x "$ORBIT" ] || { echo "no orbit binary at $ORBIT (set ORBIT=...)" >&2; exit 2; }
# Absolute: the rounds run from this directory, not the caller's.
ORBIT="$(cd "$(dirname "$ORBIT")" && pwd)/$(basename "$ORBIT")"

cd "$HERE"
# Install exactly what package-lock.json pins. --ignore-scripts: no install
# scripts run (one dependency ships a telemetry postinstall).
echo "== npm ci" >&2
SCARF_ANALYTICS=false DO_NOT_TRACK=1 npm ci --ignore-scripts --no-audit --no-fund >&2
npx tsc -p . >&2
RESTATE_BIN="$HERE/node_modules/@restatedev/restate-server-linux-x64/bin/restate-server"
[ -x "$RESTATE_BIN" ] || { echo "no restate-server binary at $RESTATE_BIN (linux-x64 only)" >&2; exit 2; }

WORK="$(mktemp -d "${TMPDIR:-/tmp}/orbit-vs-restate.XXXXXX")"
RS_PID=""; SVC_PID=""
stop_restate() {
  for p in $SVC_PID $RS_PID; do kill "$p" 2>/dev/null || true; done
  for p in $SVC_PID $RS_PID; do
    for _ in $(seq 100); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$p" 2>/dev/null || true
  done
  RS_PID=""; SVC_PID=""
}
cleanup() { stop_restate; rm -rf "$WORK"; }
trap cleanup EXIT

run_orbit() { # $1 = output file
  # exit code 1 = some executions did not complete: the round is reported
  # (and left out of the median), the run goes on.
  nice -n "$NICE" "$ORBIT" bench --executions "$N" --concurrency "$C" --steps 3 --json --quiet > "$1" \
    || echo "orbit bench exited with $? (see the table's warnings)" >&2
}

run_restate() { # $1 = output file
  local data="$WORK/restate-data"
  rm -rf "$data"; mkdir -p "$data"
  nice -n "$NICE" "$RESTATE_BIN" --config-file "$HERE/restate.toml" --base-dir "$data" --no-logo \
    > "$WORK/restate-server.log" 2>&1 &
  RS_PID=$!
  nice -n "$NICE" node "$HERE/dist/service.js" "$SERVICE_PORT" > "$WORK/service.log" 2>&1 &
  SVC_PID=$!
  # The driver waits for the admin API, registers the service, warms up once
  # (not measured), then runs the load.
  if ! nice -n "$NICE" node "$HERE/dist/driver.js" --executions "$N" --concurrency "$C" \
      --service-uri "http://127.0.0.1:$SERVICE_PORT" > "$1" 2> "$WORK/driver.log"; then
    echo "restate run failed; last lines of its logs:" >&2
    tail -5 "$WORK/driver.log" "$WORK/restate-server.log" "$WORK/service.log" >&2
  fi
  stop_restate
  rm -rf "$data"
}

for r in $(seq "$ROUNDS"); do
  echo "== round $r/$ROUNDS: ORBIT (N=$N, C=$C)" >&2
  run_orbit "$WORK/orbit-$r.json"
  echo "   $(node -e 'const j=require(process.argv[1]);console.log(`${j.steps_per_s} steps/s, p50 ${j.execution_latency_ms.p50} ms, ${j.completed}/${j.executions} completed`)' "$WORK/orbit-$r.json")" >&2
  echo "== round $r/$ROUNDS: Restate (N=$N, C=$C)" >&2
  run_restate "$WORK/restate-$r.json"
  echo "   $(node -e 'const j=require(process.argv[1]);console.log(`${j.steps_per_s} steps/s, p50 ${j.execution_latency_ms.p50} ms, ${j.completed}/${j.executions} completed`)' "$WORK/restate-$r.json")" >&2
done

if [ -n "${KEEP_JSON:-}" ]; then mkdir -p "$KEEP_JSON"; cp "$WORK"/*.json "$KEEP_JSON"/; fi

node - "$WORK" "$ROUNDS" "$N" "$C" "$("$ORBIT" --version 2>/dev/null || echo orbit)" "$("$RESTATE_BIN" --version)" <<'JS'
const [dir, rounds, n, c, orbitVersion, restateVersion] = process.argv.slice(2);
const load = (side) => Array.from({ length: Number(rounds) }, (_, i) => {
  try { return require(`${dir}/${side}-${i + 1}.json`); } catch { return null; }
});
const median = (xs) => { const s = xs.filter((x) => x != null).sort((a, b) => a - b);
  if (!s.length) return NaN; const m = s.length >> 1; return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2; };
const fmt = (x) => Number.isFinite(x) ? Math.round(x).toLocaleString("en-US") : "n/a";
const fmtMs = (x) => Number.isFinite(x) ? x.toFixed(1) : "n/a";
const rows = [["ORBIT (SQLite)", load("orbit")], ["Restate", load("restate")]].map(([name, runs]) => {
  const sps = runs.map((j) => j && j.completed === j.executions ? j.steps_per_s : null);
  const p50 = runs.map((j) => j ? j.execution_latency_ms.p50 : null);
  const p99 = runs.map((j) => j ? j.execution_latency_ms.p99 : null);
  return { name, sps, med: median(sps), p50: median(p50), p99: median(p99),
    incomplete: runs.filter((j) => !j || j.completed !== j.executions).length };
});
console.log(`\n${orbitVersion} vs ${restateVersion}; ${n} executions x 3 steps, ${c} in flight, ${rounds} rounds\n`);
console.log("| | steps/s (median) | each round | execution p50 / p99 ms (medians) |");
console.log("| --- | ---: | --- | ---: |");
for (const r of rows) console.log(`| ${r.name} | ${fmt(r.med)} | ${r.sps.map(fmt).join(" · ")} | ${fmtMs(r.p50)} / ${fmtMs(r.p99)} |`);
console.log(`\nratio ORBIT/Restate (medians of steps/s): ${(rows[0].med / rows[1].med).toFixed(2)}x`);
for (const r of rows) if (r.incomplete) console.log(`warning: ${r.name}: ${r.incomplete} round(s) did not complete every execution (left out)`);
JS
