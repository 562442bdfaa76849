// ORBIT's `orbit bench` chain workload as a Restate service.
//
// One invocation of `chain/run` is one execution: three steps run one after
// another, each a `ctx.run` whose result the next step takes as input, and the
// output is the last step's result -- the same shape as ORBIT's BenchChain3
// (`step sN { worker "bench.step" with { n: s(N-1).n } }`, each task answering
// `{"n": n + 1}`). The SDK does not resolve a `ctx.run` until restate-server
// has acknowledged its journal entry, so each step is durable in Restate's log
// before the next one starts, as each ORBIT step is committed before the next
// one is handed out.
//
// Usage: node dist/service.js [port]   (listens on 127.0.0.1 only, HTTP/2 h2c)
import "./polyfill";
import * as http2 from "node:http2";
import * as restate from "@restatedev/restate-sdk";

type N = { n: number };

const step = (input: N): N => ({ n: input.n + 1 });

const chain = restate.service({
  name: "chain",
  handlers: {
    run: async (ctx: restate.Context, input: N): Promise<N> => {
      const s1 = await ctx.run("s1", () => step({ n: input.n }));
      const s2 = await ctx.run("s2", () => step(s1));
      const s3 = await ctx.run("s3", () => step(s2));
      return s3;
    },
  },
});

const port = Number(process.argv[2] ?? 9080);
const server = http2.createServer(
  restate.createEndpointHandler({ services: [chain] }),
);
server.listen(port, "127.0.0.1", () => {
  console.error(`chain service listening on 127.0.0.1:${port}`);
});
for (const sig of ["SIGTERM", "SIGINT"] as const) {
  process.on(sig, () => server.close(() => process.exit(0)));
}
