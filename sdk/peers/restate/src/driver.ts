// Load driver for the Restate side of compare.sh: the same load shape as
// `orbit bench --workload chain`.
//
// It registers the chain service's endpoint with restate-server's admin API,
// then keeps `--concurrency` executions in flight: each of that many loops
// calls `POST {ingress}/chain/run` with `{"n": i}` and waits for the answer,
// which Restate's ingress sends once the invocation has finished (all three
// `ctx.run` steps journaled), then starts the next one, until `--executions`
// have run. It prints one JSON object on stdout: steps/s (3 steps per
// completed execution per second of wall time, first start to last
// completion), executions/s and the start -> completed latency percentiles.
//
// ORBIT's starters send two requests per execution (a start and a `wait`);
// Restate's ingress answers the call itself when the invocation ends, so here
// it is one request per execution.
import * as http from "node:http";

function arg(name: string, def: string): string {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 && i + 1 < process.argv.length ? process.argv[i + 1] : def;
}

const admin = arg("admin", "http://127.0.0.1:9070");
const ingress = new URL(arg("ingress", "http://127.0.0.1:8080"));
const serviceUri = arg("service-uri", "http://127.0.0.1:9080");
const executions = Number(arg("executions", "2000"));
const concurrency = Number(arg("concurrency", "200"));
const STEPS = 3;

const agent = new http.Agent({ keepAlive: true, maxSockets: concurrency + 8 });

function post(path: string, body: string): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = http.request(
      {
        host: ingress.hostname,
        port: ingress.port,
        path,
        method: "POST",
        agent,
        headers: { "content-type": "application/json", "content-length": Buffer.byteLength(body) },
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on("data", (c: Buffer) => chunks.push(c));
        res.on("end", () => resolve({ status: res.statusCode ?? 0, body: Buffer.concat(chunks).toString() }));
        res.on("error", reject);
      },
    );
    req.on("error", reject);
    req.end(body);
  });
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function register(): Promise<void> {
  const deadline = Date.now() + 60_000;
  for (;;) {
    try {
      const res = await fetch(`${admin}/deployments`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ uri: serviceUri, force: true }),
      });
      if (res.ok) return;
      if (Date.now() > deadline) throw new Error(`register: ${res.status} ${await res.text()}`);
    } catch (e) {
      if (Date.now() > deadline) throw e;
    }
    await sleep(200);
  }
}

async function warmUp(): Promise<void> {
  // The ingress learns the new service a moment after registration.
  const deadline = Date.now() + 60_000;
  for (;;) {
    try {
      const r = await post("/chain/run", JSON.stringify({ n: -3 }));
      if (r.status === 200 && JSON.parse(r.body).n === 0) return;
      if (Date.now() > deadline) throw new Error(`warm-up: ${r.status} ${r.body}`);
    } catch (e) {
      if (Date.now() > deadline) throw e;
    }
    await sleep(200);
  }
}

function pct(sorted: number[], p: number): number {
  if (sorted.length === 0) return 0;
  const i = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
  return Math.round(sorted[i] * 1000) / 1000;
}

async function main(): Promise<void> {
  await register();
  await warmUp();

  let next = 0;
  let completed = 0;
  let errors = 0;
  const latencies: number[] = [];
  let lastReport = Date.now();
  const t0 = process.hrtime.bigint();

  async function loop(): Promise<void> {
    for (;;) {
      const i = next++;
      if (i >= executions) return;
      const start = process.hrtime.bigint();
      try {
        const r = await post("/chain/run", JSON.stringify({ n: i }));
        if (r.status === 200 && JSON.parse(r.body).n === i + STEPS) {
          completed++;
          latencies.push(Number(process.hrtime.bigint() - start) / 1e6);
        } else {
          errors++;
          if (errors <= 5) console.error(`execution ${i}: ${r.status} ${r.body}`);
        }
      } catch (e) {
        errors++;
        if (errors <= 5) console.error(`execution ${i}: ${e}`);
      }
      if (Date.now() - lastReport >= 1000) {
        lastReport = Date.now();
        console.error(`restate: ${completed}/${executions} completed, ${errors} errors`);
      }
    }
  }

  await Promise.all(Array.from({ length: Math.min(concurrency, executions) }, loop));
  const elapsed = Number(process.hrtime.bigint() - t0) / 1e9;
  latencies.sort((a, b) => a - b);
  const out = {
    peer: "restate",
    executions,
    completed,
    errors,
    steps_per_workflow: STEPS,
    concurrency,
    elapsed_s: Math.round(elapsed * 1000) / 1000,
    steps_per_s: Math.round(((completed * STEPS) / elapsed) * 10) / 10,
    executions_per_s: Math.round((completed / elapsed) * 10) / 10,
    execution_latency_ms: {
      count: latencies.length,
      p50: pct(latencies, 50),
      p90: pct(latencies, 90),
      p99: pct(latencies, 99),
      max: pct(latencies, 100),
    },
  };
  console.log(JSON.stringify(out));
  agent.destroy();
  process.exit(completed === executions ? 0 : 1);
}

main().catch((e) => {
  console.error(e);
  process.exit(2);
});
