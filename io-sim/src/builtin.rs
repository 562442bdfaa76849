//! The built-in HTTP task (`orbit.http`) in the simulated world: the
//! server's in-process executor, modelled as production runs it
//! (`orbit_io_tokio::builtin`) — a built-in session that long-polls for as
//! many `orbit.*` units as its pool has room for, lists what it runs in
//! every poll and heartbeat, and reports each outcome with the token: a
//! result, or `BuiltinUncertain` when the request was sent but no answer
//! came back. Its calls never cross the network (no loss, no delay), and it
//! dies with the server: on a crash its requests are forgotten, even those
//! whose effect the endpoint already applied.
//!
//! The endpoint is the world's idempotent external service
//! ([`crate::payment::Payments`]): a request that reaches it applies its
//! effect once per `Idempotency-Key`. While faults are on, an attempt
//! cannot connect (`HTTP_CONNECTION_FAILED`), is refused with
//! `HTTP_503`, or loses its answer after the effect (uncertain), each with
//! a fixed probability; in the liveness phase every request succeeds.
//!
//! Invariants: every delivery carries its unit's key and input (invariant
//! 6, as for workers, and the endpoint sees one key per unit); `orbit.*`
//! units are dispatched to the built-in executor only, and the seed's
//! restart reason appears on built-in units only (4); and a built-in
//! delivery in flight when the server crashed is next followed, for its
//! unit, by `StepAttemptUncertain` with the seed's reason (4).

use crate::check::{self, Invariant, Violation};
use crate::world::{Actor, Ev, World};
use orbit_core::builtin::{is_reserved, RESTART_REASON, WORKER_ID};
use orbit_core::engine::{Outcome, Request, Response, Task};
use orbit_core::history::{ErrorInfo, Event, EventKind, Millis};
use serde_json::json;
use std::collections::BTreeMap;

/// Requests in flight at most (`--http-concurrency`).
const CONCURRENCY: usize = 4;
/// Probability that an attempt cannot connect (nothing sent).
const CONNECT_FAIL_PROBABILITY: f64 = 0.1;
/// Probability that the endpoint answers 503 without applying the effect.
const SERVER_ERROR_PROBABILITY: f64 = 0.15;
/// Probability that the effect is applied but the answer is lost.
const LOST_ANSWER_PROBABILITY: f64 = 0.15;
/// Upper bound of a request's duration, in ms.
const LATENCY_MS_MAX: Millis = 3000;
/// How long one poll of the executor waits at most, in ms.
const POLL_WAIT_MS: u64 = 1000;

/// Events of the built-in executor. `inc` is the server incarnation the
/// executor belonged to; events of a dead one are dropped.
#[derive(Debug, Clone)]
pub(crate) enum BuiltinEv {
    /// A call into the server (in process).
    Call {
        inc: u64,
        req: u64,
        request: Request,
    },
    /// The server's answer to a call.
    Answer {
        inc: u64,
        req: u64,
        response: Response,
    },
    /// A request finished.
    Done { inc: u64, token: String },
    /// Time to heartbeat.
    Beat { inc: u64 },
}

#[derive(Debug, Clone)]
enum Call {
    Register,
    Poll,
    Heartbeat,
    Report(String),
}

/// What the endpoint did with one attempt.
#[derive(Debug, Clone)]
enum Verdict {
    Report(Outcome),
    Uncertain(String),
}

/// The executor's state (reset at every server boot).
#[derive(Default)]
pub(crate) struct Builtin {
    /// Whether the scenario runs `orbit.http` units.
    pub enabled: bool,
    inc: u64,
    session: Option<String>,
    next_req: u64,
    calls: BTreeMap<u64, Call>,
    running: BTreeMap<String, (Task, Verdict)>,
    polling: bool,
    /// Built-in deliveries in flight in the store when the server crashed:
    /// (execution, unit, seq of their `StepDispatched`).
    lost: Vec<(String, String, u64)>,
}

impl Builtin {
    /// The executor's state before the first boot; `enabled` when the
    /// scenario runs built-in units.
    pub fn new(enabled: bool) -> Builtin {
        Builtin {
            enabled,
            ..Builtin::default()
        }
    }
}

impl World {
    /// A new executor for the server incarnation that just booted.
    pub(crate) fn builtin_boot(&mut self, inc: u64) {
        if !self.builtin.enabled {
            return;
        }
        let lost = std::mem::take(&mut self.builtin.lost);
        self.builtin = Builtin {
            enabled: true,
            inc,
            lost,
            ..Builtin::default()
        };
        self.builtin_call(Call::Register, register());
        let beat = (self.cfg.session_timeout_ms / 3).max(100);
        self.at(beat, Ev::Builtin(BuiltinEv::Beat { inc }));
    }

    fn builtin_call(&mut self, call: Call, request: Request) {
        let b = &mut self.builtin;
        b.next_req += 1;
        let req = b.next_req;
        b.calls.insert(req, call);
        let inc = b.inc;
        self.at(0, Ev::Builtin(BuiltinEv::Call { inc, req, request }));
    }

    /// An answer of the server to the executor (in process: immediate).
    pub(crate) fn builtin_answer(&mut self, req: u64, response: Response) {
        if let Some(inc) = self.server().map(|s| s.inc) {
            self.at(0, Ev::Builtin(BuiltinEv::Answer { inc, req, response }));
        }
    }

    pub(crate) fn builtin_event(&mut self, ev: BuiltinEv) {
        let live = |w: &World, inc: u64| {
            w.builtin.enabled && w.builtin.inc == inc && w.server().is_some_and(|s| s.inc == inc)
        };
        match ev {
            BuiltinEv::Call { inc, req, request } => {
                if live(self, inc) {
                    self.deliver_to_server(Actor::Builtin, req, request);
                }
            }
            BuiltinEv::Answer { inc, req, response } => {
                if live(self, inc) {
                    self.builtin_answered(req, response);
                }
            }
            BuiltinEv::Done { inc, token } => {
                if live(self, inc) {
                    self.builtin_done(&token);
                }
            }
            BuiltinEv::Beat { inc } => {
                if !live(self, inc) {
                    return;
                }
                let b = &self.builtin;
                if let (Some(session), false, false) =
                    (b.session.clone(), b.polling, b.running.is_empty())
                {
                    let held = b.running.keys().cloned().collect();
                    self.builtin_call(
                        Call::Heartbeat,
                        Request::Heartbeat {
                            session_id: session,
                            held,
                        },
                    );
                }
                let beat = (self.cfg.session_timeout_ms / 3).max(100);
                self.at(beat, Ev::Builtin(BuiltinEv::Beat { inc }));
            }
        }
    }

    fn builtin_poll(&mut self) {
        let b = &self.builtin;
        let free = CONCURRENCY.saturating_sub(b.running.len());
        let Some(session) = b.session.clone() else {
            return;
        };
        if b.polling || free == 0 {
            return;
        }
        let held = b.running.keys().cloned().collect();
        self.builtin.polling = true;
        self.builtin_call(
            Call::Poll,
            Request::Poll {
                session_id: session,
                max_tasks: Some(free as u32),
                wait_ms: POLL_WAIT_MS,
                held,
            },
        );
    }

    fn builtin_answered(&mut self, req: u64, response: Response) {
        let Some(call) = self.builtin.calls.remove(&req) else {
            return;
        };
        match call {
            Call::Register => match response.body.get("session_id").and_then(|s| s.as_str()) {
                Some(id) => {
                    self.builtin.session = Some(id.to_owned());
                    self.builtin_poll();
                }
                None => self.builtin_call(Call::Register, register()),
            },
            Call::Poll => {
                self.builtin.polling = false;
                if response.status == 404 {
                    self.builtin.session = None;
                    return self.builtin_call(Call::Register, register());
                }
                let tasks: Vec<Task> = response
                    .body
                    .get("tasks")
                    .and_then(|t| serde_json::from_value(t.clone()).ok())
                    .unwrap_or_default();
                for task in tasks {
                    self.builtin_start(task);
                }
                self.builtin_poll();
            }
            Call::Heartbeat => {
                if response.status == 404 {
                    self.builtin.session = None;
                    self.builtin_call(Call::Register, register());
                }
            }
            Call::Report(token) => {
                if response.status == 200 {
                    self.builtin.running.remove(&token);
                    self.builtin_poll();
                } else {
                    // Storage trouble or no session: try again shortly.
                    let inc = self.builtin.inc;
                    self.at(100, Ev::Builtin(BuiltinEv::Done { inc, token }));
                }
            }
        }
    }

    /// A delivery arrived: the request goes out now, and the endpoint
    /// decides what happens to it.
    fn builtin_start(&mut self, task: Task) {
        let events = self.store.events(&task.execution_id);
        if let Err(v) = check::keys::delivery(&task, &events) {
            return self.fail(v);
        }
        if !is_reserved(&task.task_name) {
            return self.fail(
                Violation::new(
                    Invariant::WellFormed,
                    format!(
                        "the built-in executor received the worker task `{}`",
                        task.task_name
                    ),
                )
                .in_execution(&task.execution_id, &events)
                .at_unit(&task.step_id),
            );
        }
        self.mix_str(&task.token);
        if self.builtin.running.contains_key(&task.token) {
            return;
        }
        let faulty = self.faults_on;
        let verdict = if faulty && self.rng.chance(CONNECT_FAIL_PROBABILITY) {
            failure("HTTP_CONNECTION_FAILED", true)
        } else if faulty && self.rng.chance(SERVER_ERROR_PROBABILITY) {
            failure("HTTP_503", true)
        } else {
            let key = task.idempotency_key.clone();
            let body = self.payments.perform(
                &task.execution_id,
                &task.step_id,
                &key,
                || json!({"receipt": format!("r-{key}")}),
            );
            if faulty && self.rng.chance(LOST_ANSWER_PROBABILITY) {
                Verdict::Uncertain(
                    "orbit.http: no response within 2s after the request was sent".to_owned(),
                )
            } else {
                Verdict::Report(Outcome::Output(
                    json!({"status": 200, "headers": {"content-type": "application/json"}, "body": body}),
                ))
            }
        };
        let token = task.token.clone();
        self.builtin.running.insert(token.clone(), (task, verdict));
        let latency = self.rng.between(1, LATENCY_MS_MAX);
        let inc = self.builtin.inc;
        self.at(latency, Ev::Builtin(BuiltinEv::Done { inc, token }));
    }

    fn builtin_done(&mut self, token: &str) {
        let Some((_, verdict)) = self.builtin.running.get(token).cloned() else {
            return;
        };
        let request = match verdict {
            Verdict::Report(outcome) => {
                let report = match &outcome {
                    Outcome::Output(_) => check::tokens::Report::Output,
                    Outcome::Error(e) => check::tokens::Report::Error(e.code.clone()),
                };
                self.reports
                    .entry(token.to_owned())
                    .or_default()
                    .push(report);
                Request::Result {
                    token: token.to_owned(),
                    outcome,
                    patterns: None,
                }
            }
            Verdict::Uncertain(reason) => {
                let Some(session_id) = self.builtin.session.clone() else {
                    let inc = self.builtin.inc;
                    let token = token.to_owned();
                    return self.at(100, Ev::Builtin(BuiltinEv::Done { inc, token }));
                };
                Request::BuiltinUncertain {
                    session_id,
                    token: token.to_owned(),
                    reason,
                }
            }
        };
        self.builtin_call(Call::Report(token.to_owned()), request);
    }

    /// The server crashed: remember the built-in deliveries the store holds
    /// in flight; each must be followed by the seed's restart reason.
    pub(crate) fn builtin_crashed(&mut self) {
        if !self.builtin.enabled {
            return;
        }
        let mut lost = Vec::new();
        self.store.for_each(|row, events| {
            for (unit, seq) in in_flight_builtin(events) {
                lost.push((row.id.clone(), unit, seq));
            }
        });
        self.builtin.lost.extend(lost);
    }

    /// End of run: every delivery lost in a crash became uncertain with the
    /// seed's reason.
    pub(crate) fn builtin_final(&self) -> Result<(), Violation> {
        for (exec, unit, seq) in &self.builtin.lost {
            let events = self.store.events(exec);
            let next = events
                .iter()
                .filter(|e| e.seq > *seq)
                .find(|e| unit_of(&e.kind) == Some(unit.as_str()));
            let ok = match next.map(|e| &e.kind) {
                Some(EventKind::StepAttemptUncertain { reason, .. }) => reason == RESTART_REASON,
                _ => false,
            };
            if !ok {
                return Err(Violation::new(
                    Invariant::WellFormed,
                    format!(
                        "the built-in delivery #{seq} was running when the server crashed, but is not followed by StepAttemptUncertain reason={RESTART_REASON}"
                    ),
                )
                .in_execution(exec, &events)
                .at_unit(unit));
            }
        }
        Ok(())
    }
}

fn register() -> Request {
    Request::RegisterBuiltin {
        max_tasks: Some(CONCURRENCY as u32),
    }
}

fn failure(code: &str, retryable: bool) -> Verdict {
    Verdict::Report(Outcome::Error(ErrorInfo {
        code: code.to_owned(),
        message: "simulated".to_owned(),
        retryable,
    }))
}

/// The unit an event concerns, for unit-level events.
fn unit_of(kind: &EventKind) -> Option<&str> {
    match kind {
        EventKind::StepScheduled { step, .. }
        | EventKind::StepDispatched { step, .. }
        | EventKind::StepAttemptUncertain { step, .. }
        | EventKind::StepSucceeded { step, .. }
        | EventKind::StepAttemptFailed { step, .. }
        | EventKind::StepFailed { step, .. } => Some(step),
        _ => None,
    }
}

/// Built-in units whose latest unit event is a `StepDispatched`, with its seq.
fn in_flight_builtin(events: &[Event]) -> Vec<(String, u64)> {
    let mut builtin_units = std::collections::BTreeSet::new();
    let mut last: BTreeMap<&str, &Event> = BTreeMap::new();
    for e in events {
        if let EventKind::StepScheduled { step, task, .. } = &e.kind {
            if is_reserved(task) {
                builtin_units.insert(step.as_str());
            }
        }
        if let Some(u) = unit_of(&e.kind) {
            last.insert(u, e);
        }
    }
    last.into_iter()
        .filter(|(u, e)| {
            builtin_units.contains(u) && matches!(e.kind, EventKind::StepDispatched { .. })
        })
        .map(|(u, e)| (u.to_owned(), e.seq))
        .collect()
}

/// History check: `orbit.*` units are dispatched to the built-in executor
/// only, and the seed's restart reason is recorded on built-in units only.
pub fn check_history(id: &str, events: &[Event]) -> Result<(), Violation> {
    let mut builtin_units = std::collections::BTreeSet::new();
    for e in events {
        let bad = match &e.kind {
            EventKind::StepScheduled { step, task, .. } => {
                if is_reserved(task) {
                    builtin_units.insert(step.clone());
                }
                None
            }
            EventKind::StepDispatched {
                step, worker_id, ..
            } => {
                let builtin = builtin_units.contains(step);
                (builtin != (worker_id == WORKER_ID))
                    .then(|| format!("#{} dispatched {step} to `{worker_id}`", e.seq))
            }
            EventKind::StepAttemptUncertain { step, reason, .. } => {
                (reason == RESTART_REASON && !builtin_units.contains(step)).then(|| {
                    format!(
                        "#{} gives the built-in restart reason to the worker unit {step}",
                        e.seq
                    )
                })
            }
            _ => None,
        };
        if let Some(message) = bad {
            return Err(Violation::new(Invariant::WellFormed, message).in_execution(id, events));
        }
    }
    Ok(())
}
