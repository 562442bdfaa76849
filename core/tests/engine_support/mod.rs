//! A deterministic world for engine tests (quinn `Pair` style): a counting
//! id source, an in-memory store that commits batches (or fails them on
//! demand), a driver loop that executes every effect, and a clock stepped
//! to the earliest wake-up, bounded so that a livelock fails the test.

#![allow(clippy::unwrap_used, dead_code)]

use orbit_core::engine::{
    Batch, CountingIds, DefinitionRecord, Effect, IdempotencyRecord, Outcome, Request, RequestId,
    Response, Start, StorageResult, StoredExecution, Task,
};
use orbit_core::history::{logs, ErrorInfo, Event, Millis, Projection};
use orbit_core::{Config, Engine, Input, Source};
use serde_json::{json, Value};
use std::collections::{BTreeMap, VecDeque};

/// Start of every test's clock (an arbitrary real date).
pub const T0: Millis = 1_700_000_000_000;

/// What the fake store answers to the next batches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Commit.
    Ok,
    /// Refuse, apply nothing.
    Unavailable,
    /// Apply, but answer `Ambiguous`.
    AmbiguousApplied,
    /// Do not apply, answer `Ambiguous`.
    AmbiguousLost,
    /// Refuse: another node owns every execution in the batch.
    Fenced,
    /// Keep the batch in flight until [`World::release`] answers it (a slow
    /// commit).
    Hold,
}

/// The in-memory store.
#[derive(Default, Clone)]
pub struct Store {
    pub histories: BTreeMap<String, Vec<Event>>,
    pub definitions: Vec<DefinitionRecord>,
    pub idempotency: BTreeMap<String, IdempotencyRecord>,
}

impl Store {
    fn apply(&mut self, batch: &Batch) -> StorageResult {
        let mut stale = Vec::new();
        for a in &batch.executions {
            let last = self
                .histories
                .get(&a.execution_id)
                .and_then(|h| h.last())
                .map_or(0, |e| e.seq);
            if last != a.expected_last_seq {
                stale.push(a.execution_id.clone());
            }
            for (i, e) in a.events.iter().enumerate() {
                assert_eq!(e.seq, a.expected_last_seq + 1 + i as u64, "contiguous seq");
            }
        }
        if !stale.is_empty() {
            return StorageResult::Conflict {
                message: "sequence mismatch".into(),
                fenced: vec![],
                stale,
            };
        }
        for a in &batch.executions {
            self.histories
                .entry(a.execution_id.clone())
                .or_default()
                .extend(a.events.iter().cloned());
        }
        for d in &batch.definitions {
            if !self
                .definitions
                .iter()
                .any(|x| x.definition_hash == d.definition_hash)
            {
                self.definitions.push(d.clone());
            }
        }
        for r in &batch.idempotency {
            self.idempotency.insert(r.key.clone(), r.clone());
        }
        StorageResult::Ok
    }
}

/// The test world.
pub struct World {
    pub engine: Engine,
    pub config: Config,
    pub now: Millis,
    pub store: Store,
    pub mode: Mode,
    pub replies: BTreeMap<RequestId, Response>,
    pub wake: Option<Millis>,
    pub next_request: RequestId,
    pub appends: usize,
    /// When set, the driver checks time only on this grid (every 100 ms in
    /// production), so wake-ups are rounded up to it.
    pub grid: Option<Millis>,
    /// How long each write takes: the clock moves on by this much before
    /// the store's answer is fed back.
    pub latency: Millis,
    /// Batches written in [`Mode::Hold`], not answered yet (oldest first).
    pub held: VecDeque<Batch>,
    /// Loads executed ([`Effect::Load`]).
    pub loads: usize,
    /// Loads fail (`Input::LoadFailed`): the store cannot be read.
    pub reads_fail: bool,
    /// Every batch handed to the store, in order.
    pub written: Vec<Batch>,
    /// Shared-mode effects (sends, claims, inbox outcomes, definition
    /// reads), for the test to look at and answer.
    pub shared: Vec<Effect>,
}

impl World {
    pub fn new(config: Config) -> World {
        World {
            engine: Engine::new(config.clone(), Box::new(CountingIds::new(1))),
            config,
            now: T0,
            store: Store::default(),
            mode: Mode::Ok,
            replies: BTreeMap::new(),
            wake: None,
            next_request: 0,
            appends: 0,
            grid: None,
            latency: 0,
            held: VecDeque::new(),
            loads: 0,
            reads_fail: false,
            written: Vec::new(),
            shared: Vec::new(),
        }
    }

    /// A world with default settings.
    pub fn default_world() -> World {
        World::new(Config::default())
    }

    /// Feeds one input and executes every effect until quiet.
    pub fn feed(&mut self, input: Input) {
        let mut inputs = VecDeque::from([input]);
        let mut steps = 0;
        while let Some(input) = inputs.pop_front() {
            steps += 1;
            assert!(steps < 100_000, "driver loop did not quiesce (livelock?)");
            for effect in self.engine.handle(self.now, input) {
                match effect {
                    Effect::Append(batch) => {
                        self.appends += 1;
                        self.written.push(batch.clone());
                        if self.mode == Mode::Hold {
                            self.held.push_back(batch);
                            continue;
                        }
                        let result = self.answer(&batch, self.mode);
                        self.now += self.latency;
                        inputs.push_back(Input::Stored {
                            batch: batch.id,
                            result,
                        });
                    }
                    Effect::Reload { executions } => {
                        let executions = executions
                            .into_iter()
                            .map(|id| StoredExecution {
                                events: self.store.histories.get(&id).cloned().unwrap_or_default(),
                                execution_id: id,
                            })
                            .collect();
                        inputs.push_back(Input::Reloaded { executions });
                    }
                    Effect::Load {
                        load,
                        executions,
                        idempotency,
                    } => {
                        self.loads += 1;
                        if self.reads_fail {
                            inputs.push_back(Input::LoadFailed {
                                load,
                                message: "database unreachable".into(),
                            });
                            continue;
                        }
                        let executions = executions
                            .into_iter()
                            .map(|id| StoredExecution {
                                events: self.store.histories.get(&id).cloned().unwrap_or_default(),
                                execution_id: id,
                            })
                            .collect();
                        let now = self.now;
                        let idempotency = idempotency
                            .into_iter()
                            .map(|key| {
                                let record = self
                                    .store
                                    .idempotency
                                    .get(&key)
                                    .filter(|r| r.expires_at > now)
                                    .cloned();
                                (key, record)
                            })
                            .collect();
                        inputs.push_back(Input::Loaded {
                            load,
                            executions,
                            idempotency,
                        });
                    }
                    Effect::Reply { request, response } => {
                        assert!(
                            self.replies.insert(request, response).is_none(),
                            "request {request} answered twice"
                        );
                    }
                    Effect::WakeAt(t) => {
                        self.wake = Some(match self.grid {
                            Some(g) => T0 + (t.saturating_sub(T0)).div_ceil(g) * g,
                            None => t,
                        })
                    }
                    Effect::Committed { .. } => {}
                    other => self.shared.push(other),
                }
            }
        }
    }

    /// What the store does with `batch` in `mode`.
    fn answer(&mut self, batch: &Batch, mode: Mode) -> StorageResult {
        match mode {
            Mode::Hold => unreachable!("a held batch is answered by release"),
            Mode::Ok => self.store.apply(batch),
            Mode::Unavailable => StorageResult::Unavailable {
                message: "disk on fire".into(),
            },
            Mode::AmbiguousApplied => {
                self.store.apply(batch);
                StorageResult::Ambiguous {
                    message: "connection lost during COMMIT".into(),
                }
            }
            Mode::AmbiguousLost => StorageResult::Ambiguous {
                message: "connection lost during COMMIT".into(),
            },
            Mode::Fenced => StorageResult::Conflict {
                message: "fenced: epoch 7 owns these executions".into(),
                fenced: batch
                    .executions
                    .iter()
                    .map(|a| a.execution_id.clone())
                    .collect(),
                stale: vec![],
            },
        }
    }

    /// Answers the oldest held batch as `mode` says (the commit finishes
    /// now), then runs the engine until quiet. New batches are held while
    /// the world's mode is still [`Mode::Hold`].
    pub fn release(&mut self, mode: Mode) {
        let batch = self.held.pop_front().expect("a held batch");
        let result = self.answer(&batch, mode);
        self.feed(Input::Stored {
            batch: batch.id,
            result,
        });
    }

    /// Sends a request; returns its id (the reply may come later).
    pub fn send(&mut self, request: Request) -> RequestId {
        self.next_request += 1;
        let id = self.next_request;
        self.feed(Input::Request { id, request });
        id
    }

    /// Sends requests to be handled as one ([`Input::Requests`]); returns
    /// their ids, in order (the replies may come later).
    pub fn send_together(&mut self, requests: Vec<Request>) -> Vec<RequestId> {
        let requests: Vec<(RequestId, Request)> = requests
            .into_iter()
            .map(|r| {
                self.next_request += 1;
                (self.next_request, r)
            })
            .collect();
        let ids = requests.iter().map(|(id, _)| *id).collect();
        self.feed(Input::Requests { requests });
        ids
    }

    /// Sends a request that must be answered at once.
    pub fn call(&mut self, request: Request) -> Response {
        let id = self.send(request);
        self.replies
            .remove(&id)
            .unwrap_or_else(|| panic!("request {id} not answered"))
    }

    /// Moves the clock to `t`, ticking at every wake-up on the way.
    pub fn advance_to(&mut self, t: Millis) {
        let mut steps = 0;
        while let Some(w) = self.wake {
            if w > t {
                break;
            }
            steps += 1;
            if steps > 9_990 {
                eprintln!("stuck: now={} wake={w}", self.now);
            }
            assert!(steps < 10_000, "time does not advance (livelock?)");
            self.now = self.now.max(w);
            self.wake = None;
            self.feed(Input::Tick);
        }
        self.now = self.now.max(t);
        self.feed(Input::Tick);
    }

    /// Moves the clock by `ms`.
    pub fn advance(&mut self, ms: Millis) {
        self.advance_to(self.now + ms);
    }

    /// Sets the clock to `T0 + ms` (ticking on the way).
    pub fn at(&mut self, ms: Millis) {
        self.advance_to(T0 + ms);
    }

    /// Compiles and deploys `.orbit` source.
    pub fn deploy(&mut self, source: &str) -> Response {
        let compiled = orbit_core::compile(
            &[Source {
                name: "test.orbit".into(),
                text: source.into(),
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
                source: source.into(),
                registered_at: 0,
            })
            .collect();
        self.call(Request::Deploy {
            definitions,
            idempotency: None,
        })
    }

    /// Starts `workflow` with `input` under the client id `id`.
    pub fn start(&mut self, workflow: &str, id: &str, input: Value) -> Response {
        self.call(Request::Start(Start {
            workflow: workflow.into(),
            version: None,
            input,
            execution_id: Some(id.into()),
            idempotency: None,
            traceparent: None,
        }))
    }

    /// Registers a worker; returns its session id.
    pub fn register(&mut self, worker_id: &str, patterns: &[&str]) -> String {
        let r = self.call(Request::RegisterWorker {
            worker_id: worker_id.into(),
            task_patterns: patterns.iter().map(|p| p.to_string()).collect(),
            max_tasks: None,
        });
        r.body["session_id"].as_str().unwrap().to_string()
    }

    /// Polls once without waiting.
    pub fn poll(&mut self, session: &str, max: u32) -> Vec<Task> {
        self.poll_held(session, max, &[])
    }

    /// Polls once without waiting, listing held tokens.
    pub fn poll_held(&mut self, session: &str, max: u32, held: &[&str]) -> Vec<Task> {
        let r = self.call(Request::Poll {
            session_id: session.into(),
            max_tasks: Some(max),
            wait_ms: 0,
            held: held.iter().map(|t| t.to_string()).collect(),
        });
        assert_eq!(r.status, 200, "{:?}", r.body);
        serde_json::from_value(r.body["tasks"].clone()).unwrap()
    }

    /// Polls for exactly one task.
    pub fn take(&mut self, session: &str) -> Task {
        let mut tasks = self.poll(session, 1);
        assert_eq!(tasks.len(), 1, "expected one task");
        tasks.remove(0)
    }

    /// Heartbeat; returns the cancel list.
    pub fn heartbeat(&mut self, session: &str, held: &[&str]) -> Vec<String> {
        let r = self.call(Request::Heartbeat {
            session_id: session.into(),
            held: held.iter().map(|t| t.to_string()).collect(),
        });
        serde_json::from_value(r.body["cancel"].clone()).unwrap()
    }

    /// Reports a success.
    pub fn succeed(&mut self, token: &str, output: Value) -> Value {
        self.call(Request::Result {
            token: token.into(),
            outcome: Outcome::Output(output),
            patterns: None,
        })
        .body
        .into_json()
    }

    /// Reports a failure.
    pub fn fail(&mut self, token: &str, code: &str, retryable: bool) -> Value {
        self.call(Request::Result {
            token: token.into(),
            outcome: Outcome::Error(ErrorInfo {
                code: code.into(),
                message: String::new(),
                retryable,
            }),
            patterns: None,
        })
        .body
        .into_json()
    }

    /// The stored history in `orbit logs` format.
    pub fn logs(&self, execution_id: &str) -> String {
        let events = self
            .store
            .histories
            .get(execution_id)
            .cloned()
            .unwrap_or_default();
        logs::format_history(execution_id, &events)
    }

    /// The engine's view of the status; for an execution the engine no
    /// longer holds (finished and forgotten), the store's.
    pub fn status(&self, execution_id: &str) -> String {
        if let Some(p) = self.engine.projection(execution_id) {
            return p.status.as_str().to_string();
        }
        self.store
            .histories
            .get(execution_id)
            .map(|h| {
                Projection::fold(execution_id, h)
                    .status
                    .as_str()
                    .to_string()
            })
            .unwrap_or_default()
    }

    /// Restarts the engine from the store (a crash: memory lost).
    pub fn restart(&mut self) {
        self.engine = Engine::new(self.config.clone(), Box::new(CountingIds::new(2)));
        self.wake = None;
        // Like the production driver: work in progress only.
        let executions = self
            .store
            .histories
            .iter()
            .filter(|(id, events)| !Projection::fold(id, events.iter()).status.is_terminal())
            .map(|(id, events)| StoredExecution {
                execution_id: id.clone(),
                events: events.clone(),
            })
            .collect();
        self.feed(Input::Recover {
            definitions: self.store.definitions.clone(),
            executions,
            idempotency: Vec::new(),
        });
    }
}

/// `{"accepted": true}`.
pub fn accepted() -> Value {
    json!({"accepted": true})
}

/// Compares a history with the expected listing (leading/trailing blank
/// space of each line ignored).
#[track_caller]
pub fn assert_logs(actual: &str, expected: &str) {
    let clean = |s: &str| {
        s.lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .collect::<Vec<_>>()
            .join("\n")
    };
    let (a, e) = (clean(actual), clean(expected));
    assert!(
        a == e,
        "history differs\n--- expected\n{e}\n--- actual\n{a}\n"
    );
}
