//! The engine's own cost per task step, without HTTP or storage (run with
//! `cargo test --release -p orbit-core --test engine_throughput -- --ignored
//! --nocapture`, or under `valgrind --tool=callgrind` for instruction
//! counts): executions of a 3-step chain driven the way the production
//! driver drives them — every request of a round is handled, the round's
//! batches are answered as one group commit, and the workers' next polls
//! and results make the next round.

#![allow(clippy::unwrap_used)]
// A measurement reads the wall clock; the engine under test never does.
#![allow(clippy::disallowed_methods)]

use orbit_core::engine::{Body, DefinitionRecord, Outcome, RequestId, Start};
use orbit_core::{compile, Config, Effect, Engine, Input, Request, Source, StorageResult};
use serde_json::json;
use std::time::Instant;

// The allocator the `orbit` binary ships with, linked in the same way (as
// the process's `malloc`, behind Rust's default allocator): the engine's
// cost is measured as it runs in production.
use mimalloc as _;

const CHAIN: &str = r#"
task "bench.step" version "1.0.0" {
    input  { n: Int }
    output { n: Int }
}
workflow Chain version "1.0.0" {
    input { n: Int }
    step s1 { worker "bench.step" with { n: input.n } }
    step s2 { worker "bench.step" with { n: s1.n } }
    step s3 { worker "bench.step" with { n: s2.n } }
    output { n: s3.n }
}
"#;

/// Ids shaped like the server's (random version-4 UUIDs, which differ from
/// one another in their first characters), yet the same on every run. A
/// counter's ids share their first 30 characters, and every look-up by
/// token would compare those first: a cost the server does not pay.
fn uuid_like() -> impl FnMut() -> String + Send {
    let mut state: u64 = 0;
    move || {
        let mut next = || {
            // splitmix64
            state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^ (z >> 31)
        };
        let (a, b) = (next(), next());
        format!(
            "{:08x}-{:04x}-4{:03x}-{:04x}-{:012x}",
            a >> 32,
            (a >> 16) & 0xffff,
            a & 0xfff,
            0x8000 | ((b >> 48) & 0x3fff),
            b & 0xffff_ffff_ffff
        )
    }
}

/// A driver without storage: appends are acknowledged a round later, all
/// at once, like one group commit.
struct Rig {
    engine: Engine,
    now: u64,
    next_request: RequestId,
    replies: Vec<(RequestId, Body)>,
    appended: Vec<u64>,
    commits: usize,
}

impl Rig {
    fn new() -> Rig {
        Rig {
            engine: Engine::new(Config::default(), Box::new(uuid_like())),
            now: 1_700_000_000_000,
            next_request: 0,
            replies: Vec::new(),
            appended: Vec::new(),
            commits: 0,
        }
    }

    fn send(&mut self, request: Request) -> RequestId {
        self.next_request += 1;
        let id = self.next_request;
        let effects = self.engine.handle(self.now, Input::Request { id, request });
        self.collect(effects);
        id
    }

    fn collect(&mut self, effects: Vec<Effect>) {
        let mut loads = Vec::new();
        for effect in effects {
            match effect {
                Effect::Append(batch) => self.appended.push(batch.id),
                Effect::Reply { request, response } => self.replies.push((request, response.body)),
                Effect::Load {
                    load, executions, ..
                } => loads.push((load, executions)),
                _ => {}
            }
        }
        // Every start names a new id: the store has none of them.
        for (load, executions) in loads {
            let executions = executions
                .into_iter()
                .map(|execution_id| orbit_core::engine::StoredExecution {
                    execution_id,
                    events: Vec::new(),
                })
                .collect();
            let effects = self.engine.handle(
                self.now,
                Input::Loaded {
                    load,
                    executions,
                    idempotency: Vec::new(),
                },
            );
            self.collect(effects);
        }
    }

    /// Acknowledges every batch written so far, as one commit.
    fn commit(&mut self) {
        self.commits += 1;
        self.now += 1;
        for batch in std::mem::take(&mut self.appended) {
            let effects = self.engine.handle(
                self.now,
                Input::Stored {
                    batch,
                    result: StorageResult::Ok,
                },
            );
            self.collect(effects);
        }
    }
}

/// Runs `executions` chains, `concurrency` at a time; returns the number of
/// commits it took.
fn run(executions: usize, concurrency: usize) -> usize {
    let mut rig = Rig::new();
    let compiled = compile(
        &[Source {
            name: "chain.orbit".into(),
            text: CHAIN.into(),
        }],
        &|_, _| None,
    );
    assert!(compiled.is_ok(), "{:?}", compiled.diagnostics);
    let definitions = compiled
        .definitions
        .into_iter()
        .map(|d| DefinitionRecord {
            workflow: d.workflow,
            definition_hash: d.hash,
            source: CHAIN.into(),
            registered_at: 0,
        })
        .collect();
    rig.send(Request::Deploy {
        definitions,
        idempotency: None,
    });
    rig.commit();
    let session = {
        let id = rig.send(Request::RegisterWorker {
            worker_id: "bench".into(),
            task_patterns: vec!["bench.*".into()],
            max_tasks: Some(256),
        });
        let (_, body) = rig.replies.iter().find(|(r, _)| *r == id).unwrap();
        body["session_id"].as_str().unwrap().to_string()
    };
    rig.replies.clear();
    let start = |rig: &mut Rig, i: usize| {
        rig.send(Request::Start(Start {
            workflow: "Chain".into(),
            version: None,
            input: json!({"n": i}),
            execution_id: Some(format!("exec-{i:06}")),
            idempotency: None,
            traceparent: None,
        }));
    };
    let mut started = 0;
    while started < concurrency.min(executions) {
        start(&mut rig, started);
        started += 1;
    }
    let mut completed = 0;
    let mut poll: Option<RequestId> = None;
    while completed < executions {
        if poll.is_none() {
            poll = Some(rig.send(Request::Poll {
                session_id: session.clone(),
                max_tasks: Some(256),
                wait_ms: 60_000,
                held: vec![],
            }));
        }
        rig.commit();
        for (request, body) in std::mem::take(&mut rig.replies) {
            if Some(request) == poll {
                poll = None;
                // A hand-out stays typed until the HTTP edge serializes it:
                // read it the way a worker reads the tasks it was given.
                for task in body.as_tasks().unwrap_or_default() {
                    let n = task.input["n"].as_i64().unwrap();
                    rig.send(Request::Result {
                        token: task.token.clone(),
                        outcome: Outcome::Output(json!({"n": n + 1})),
                        patterns: None,
                    });
                    if task.step_id == "s3" {
                        completed += 1;
                        if started < executions {
                            start(&mut rig, started);
                            started += 1;
                        }
                    }
                }
            } else {
                assert_eq!(body.get("error"), None, "{body}");
            }
        }
    }
    rig.commit();
    rig.commits
}

#[test]
fn chains_complete() {
    run(50, 20);
}

#[test]
#[ignore = "a measurement: run in release with --ignored --nocapture"]
fn engine_cost_per_step() {
    let executions = std::env::var("EXECUTIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_000);
    let concurrency = 200;
    let started = Instant::now();
    let commits = run(executions, concurrency);
    let elapsed = started.elapsed();
    let steps = executions * 3;
    println!(
        "{executions} executions x 3 steps, {concurrency} concurrent: {:.2?} in all, \
         {:.1} µs of engine time per step, {commits} commits",
        elapsed,
        elapsed.as_secs_f64() * 1e6 / steps as f64
    );
}
