//! Simulated workers. Each speaks the worker protocol (register, long poll
//! with `held`, heartbeat, result) over the faulty network and, per task,
//! may behave honestly or — during the safety phase, with the sampled
//! probabilities — run slowly, crash (losing everything), pause past the
//! session timeout and then report with its old token, report twice, fail,
//! or return output that violates the task contract. Side effects go
//! through the payment model, deduplicated by idempotency key.

use crate::check::{self, durability::Fact, tokens::Report};
use crate::world::{Actor, Ev, World};
use orbit_core::engine::{Outcome, Request, Response, Task};
use orbit_core::history::{ErrorInfo, Millis};
use serde_json::{json, Value};
use std::collections::BTreeMap;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Up,
    Down,
    Paused,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Control {
    Register,
    Poll,
    Heartbeat,
    Unregister,
}

#[derive(Debug, Clone)]
struct Held {
    task: Task,
    outcome: Option<Outcome>,
    double_report: bool,
    pause: bool,
}

/// One simulated worker process.
#[derive(Debug, Clone)]
pub(crate) struct Worker {
    id: String,
    life: u64,
    state: State,
    session: Option<String>,
    held: BTreeMap<String, Held>,
    control: Option<(u64, Control)>,
    results: BTreeMap<u64, String>,
    /// Results waiting to ride on the next poll (a carrying worker).
    carry: Vec<(String, Outcome)>,
    last_heartbeat: Millis,
    next_req: u64,
    /// Shutting down gracefully: no new polls; unregister once nothing is
    /// held.
    draining: bool,
}

impl Worker {
    pub(crate) fn new(id: String) -> Worker {
        Worker {
            id,
            life: 0,
            state: State::Up,
            session: None,
            held: BTreeMap::new(),
            control: None,
            results: BTreeMap::new(),
            carry: Vec::new(),
            last_heartbeat: 0,
            next_req: 0,
            draining: false,
        }
    }
}

/// The output an honest worker computes for a task.
fn output_for(task: &Task) -> Value {
    let tag: String = task
        .idempotency_key
        .chars()
        .filter(|c| c.is_ascii_alphanumeric())
        .take(24)
        .collect();
    match &*task.task_name {
        "work.step" => json!({"n": task.input.get("n").cloned().unwrap_or(json!(0))}),
        "pay.charge" => json!({"tx": format!("tx-{tag}")}),
        "pay.refund" => json!({"refund": format!("rf-{tag}")}),
        "stock.reserve" => json!({"res": format!("res-{tag}")}),
        "ship.create" => json!({"tracking": format!("trk-{tag}")}),
        _ => json!({}),
    }
}

impl World {
    fn worker_request(&mut self, w: usize, request: Request, timeout: Millis) -> u64 {
        let req = self.next_worker_req(w);
        self.send(Actor::Worker(w), req, request, timeout);
        req
    }

    fn next_worker_req(&mut self, w: usize) -> u64 {
        let wk = &mut self.workers[w];
        wk.next_req += 1;
        wk.next_req
    }

    /// Whether worker `w` sends its results on its next poll.
    fn carries(&self, w: usize) -> bool {
        w >= self.cfg.workers.saturating_sub(self.cfg.carrying_workers)
    }

    fn wake_worker(&mut self, w: usize, delay: Millis) {
        let life = self.workers[w].life;
        self.at(delay, Ev::WorkerWake { w, life });
    }

    pub(crate) fn worker_wake(&mut self, w: usize, life: u64) {
        let wk = &self.workers[w];
        if wk.life != life || wk.state != State::Up || wk.control.is_some() {
            return;
        }
        let held: Vec<String> = wk.held.keys().cloned().collect();
        let heartbeat_due =
            !held.is_empty() && self.now >= wk.last_heartbeat + self.cfg.session_timeout_ms / 3;
        let (request, kind, timeout) = match wk.session.clone() {
            Some(session_id) if wk.draining && held.is_empty() => (
                Request::Unregister { session_id },
                Control::Unregister,
                1000,
            ),
            None => (
                Request::RegisterWorker {
                    worker_id: wk.id.clone(),
                    task_patterns: vec!["*".into()],
                    max_tasks: Some(2),
                },
                Control::Register,
                1000,
            ),
            Some(session_id) if heartbeat_due => (
                Request::Heartbeat { session_id, held },
                Control::Heartbeat,
                1000,
            ),
            Some(session_id) if wk.draining => {
                // Finishing what it holds: heartbeats only, no new work.
                if !heartbeat_due {
                    let life = wk.life;
                    self.at(200, Ev::WorkerWake { w, life });
                    return;
                }
                (
                    Request::Heartbeat { session_id, held },
                    Control::Heartbeat,
                    1000,
                )
            }
            Some(session_id) => {
                let wait_ms = 1000;
                (
                    Request::Poll {
                        session_id,
                        max_tasks: Some(self.rng.between(1, 2) as u32),
                        wait_ms,
                        held,
                    },
                    Control::Poll,
                    wait_ms + 1000,
                )
            }
        };
        if kind == Control::Heartbeat {
            self.workers[w].last_heartbeat = self.now;
        }
        let carried = std::mem::take(&mut self.workers[w].carry);
        if kind != Control::Poll {
            for (token, outcome) in carried {
                self.send_result(w, &token, outcome);
            }
        } else if !carried.is_empty() {
            // The results and the poll in one message, handled as one.
            let mut requests = Vec::with_capacity(carried.len() + 1);
            for (token, outcome) in carried {
                let req = self.next_worker_req(w);
                self.workers[w].results.insert(req, token.clone());
                let request = Request::Result {
                    token,
                    outcome,
                    patterns: None,
                };
                requests.push((req, request, 2000));
            }
            let req = self.next_worker_req(w);
            requests.push((req, request, timeout));
            self.workers[w].control = Some((req, kind));
            return self.send_together(Actor::Worker(w), requests);
        }
        let req = self.worker_request(w, request, timeout);
        self.workers[w].control = Some((req, kind));
    }

    pub(crate) fn worker_response(&mut self, w: usize, req: u64, response: Response) {
        if self.workers[w].state != State::Up {
            return; // a dead or paused process reads nothing
        }
        if let Some(token) = self.workers[w].results.remove(&req) {
            return self.result_answered(w, &token, response);
        }
        let Some((expected, kind)) = self.workers[w].control else {
            return;
        };
        if expected != req {
            return;
        }
        self.workers[w].control = None;
        if kind == Control::Unregister {
            // Gone (or already expired): come back later as a new session.
            let wk = &mut self.workers[w];
            wk.session = None;
            wk.draining = false;
            let back = self.rng.between(100, 3000);
            return self.wake_worker(w, back);
        }
        if response.error_code() == Some("UNKNOWN_SESSION") {
            self.workers[w].session = None;
            return self.wake_worker(w, 0);
        }
        if response.status != 200 {
            let backoff = self.rng.between(100, 1000);
            return self.wake_worker(w, backoff);
        }
        match kind {
            Control::Unregister => {}
            Control::Register => {
                self.workers[w].session = response
                    .body
                    .get("session_id")
                    .and_then(|s| s.as_str())
                    .map(str::to_owned);
            }
            Control::Heartbeat => {
                let cancel: Vec<String> = response
                    .body
                    .get("cancel")
                    .and_then(|c| c.as_array())
                    .map(|a| {
                        a.iter()
                            .filter_map(|t| t.as_str().map(str::to_owned))
                            .collect()
                    })
                    .unwrap_or_default();
                for token in cancel {
                    self.cancelled(w, &token);
                }
            }
            Control::Poll => {
                let tasks: Vec<Task> = response
                    .body
                    .get("tasks")
                    .and_then(|t| serde_json::from_value(t.clone()).ok())
                    .unwrap_or_default();
                for task in tasks {
                    self.received(w, task);
                }
            }
        }
        let delay = self.rng.between(0, 50);
        self.wake_worker(w, delay);
    }

    pub(crate) fn worker_timeout(&mut self, w: usize, req: u64) {
        if self.workers[w].state != State::Up {
            return;
        }
        if let Some(token) = self.workers[w].results.remove(&req) {
            // No answer: retry the report (the SDKs retry until answered).
            if self.workers[w].held.contains_key(&token) {
                let backoff = self.rng.between(100, 1000);
                self.report_later(w, &token, backoff);
            }
            return;
        }
        if self.workers[w].control.is_some_and(|(r, _)| r == req) {
            self.workers[w].control = None;
            self.hang_up(Actor::Worker(w), req);
            let backoff = self.rng.between(50, 500);
            self.wake_worker(w, backoff);
        }
    }

    fn received(&mut self, w: usize, task: Task) {
        // Events before effects: the dispatch is durable, with the unit's
        // key and input (invariants 2 and 6).
        self.told(Fact::Dispatched {
            execution: task.execution_id.to_string(),
            unit: task.step_id.clone(),
            token: task.token.clone(),
        });
        let events = self.store.events(&task.execution_id);
        if let Err(v) = check::keys::delivery(&task, &events) {
            self.fail(v);
        }
        self.mix_str(&task.token);
        if self.workers[w].held.contains_key(&task.token) {
            return;
        }
        let f = self.cfg.faults.clone();
        let faulty = self.faults_on;
        let life = self.workers[w].life;
        if faulty && self.rng.chance(f.worker_crash_probability) {
            let at = self.rng.between(0, 2000);
            self.at(at, Ev::WorkerCrash { w, life });
        }
        let pause = faulty && self.rng.chance(f.worker_pause_probability);
        let double_report = faulty && self.rng.chance(f.worker_double_report_probability);
        let duration = if faulty && self.rng.chance(f.worker_slow_probability) {
            self.stats.fault("worker_slow");
            self.rng.between(4000, 20_000)
        } else {
            self.rng.between(5, 400)
        };
        let token = task.token.clone();
        self.workers[w].held.insert(
            token.clone(),
            Held {
                task,
                outcome: None,
                double_report,
                pause,
            },
        );
        self.at(duration, Ev::WorkDone { w, life, token });
    }

    pub(crate) fn work_done(&mut self, w: usize, life: u64, token: &str) {
        let wk = &self.workers[w];
        if wk.life != life {
            return;
        }
        let Some(h) = wk.held.get(token) else {
            return;
        };
        if h.outcome.is_some() {
            return;
        }
        let task = h.task.clone();
        let pause = h.pause;
        let f = self.cfg.faults.clone();
        let faulty = self.faults_on;
        let outcome = if faulty && self.rng.chance(f.worker_fail_probability) {
            self.stats.fault("worker_failure");
            let retryable = self.rng.chance(0.7);
            Outcome::Error(ErrorInfo {
                code: if retryable { "TRANSIENT" } else { "DECLINED" }.into(),
                message: "simulated failure".into(),
                retryable,
            })
        } else {
            let output = if w < self.cfg.undeduplicated_workers {
                // This worker applies the effect every time it runs: the
                // payment model counts each key's effects.
                self.payments.perform_each(
                    &task.execution_id,
                    &task.step_id,
                    &task.idempotency_key,
                    output_for(&task),
                )
            } else {
                self.payments.perform(
                    &task.execution_id,
                    &task.step_id,
                    &task.idempotency_key,
                    || output_for(&task),
                )
            };
            if faulty && self.rng.chance(f.worker_contract_violation_probability) {
                self.stats.fault("worker_contract_violation");
                Outcome::Output(json!({"unexpected": true}))
            } else {
                Outcome::Output(output)
            }
        };
        if let Some(h) = self.workers[w].held.get_mut(token) {
            h.outcome = Some(outcome);
        }
        if pause && self.workers[w].state == State::Up {
            self.stats.fault("worker_pause");
            self.workers[w].state = State::Paused;
            let extra = self.rng.between(1000, 5000);
            let until = self.cfg.session_timeout_ms + extra;
            self.at(until, Ev::WorkerResume { w, life });
            return;
        }
        if self.workers[w].state == State::Up {
            self.report(w, token);
        }
        if self.faults_on && self.rng.chance(f.worker_unregister_probability) {
            let at = self.rng.between(0, 300);
            self.at(at, Ev::WorkerShutdown { w, life });
        }
    }

    /// A graceful shutdown, as the SDKs do it: drop the open poll (a task
    /// it was being handed is lost with it), finish and report what is
    /// held, then unregister.
    pub(crate) fn worker_shutdown(&mut self, w: usize, life: u64) {
        let wk = &self.workers[w];
        if wk.life != life || wk.state != State::Up || wk.draining || wk.session.is_none() {
            return;
        }
        self.stats.fault("worker_unregister");
        self.workers[w].draining = true;
        if let Some((req, Control::Poll)) = self.workers[w].control {
            self.workers[w].control = None;
            self.hang_up(Actor::Worker(w), req);
        }
        // No more polls: what waited for one is reported alone.
        for (token, outcome) in std::mem::take(&mut self.workers[w].carry) {
            self.send_result(w, &token, outcome);
        }
        self.wake_worker(w, 0);
    }

    fn report_later(&mut self, w: usize, token: &str, delay: Millis) {
        let life = self.workers[w].life;
        self.at(
            delay,
            Ev::Report {
                w,
                life,
                token: token.to_owned(),
            },
        );
    }

    /// A report retry fired.
    pub(crate) fn report_again(&mut self, w: usize, life: u64, token: &str) {
        let wk = &self.workers[w];
        if wk.life == life && wk.state == State::Up && wk.held.contains_key(token) {
            self.report(w, token);
        }
    }

    /// Sends the result of `token` (and a second copy for a worker that
    /// reports twice).
    pub(crate) fn report(&mut self, w: usize, token: &str) {
        let Some(h) = self.workers[w].held.get(token) else {
            return;
        };
        let Some(outcome) = h.outcome.clone() else {
            return;
        };
        let copies = if h.double_report { 2 } else { 1 };
        if let Some(h) = self.workers[w].held.get_mut(token) {
            h.double_report = false;
        }
        let report = match &outcome {
            Outcome::Output(_) => Report::Output,
            Outcome::Error(e) => Report::Error(e.code.clone()),
        };
        self.reports
            .entry(token.to_owned())
            .or_default()
            .push(report);
        let wk = &self.workers[w];
        let carry = self.carries(w) && !wk.draining && wk.session.is_some();
        for _ in 0..copies {
            if carry {
                self.workers[w]
                    .carry
                    .push((token.to_owned(), outcome.clone()));
            } else {
                self.send_result(w, token, outcome.clone());
            }
        }
    }

    /// Sends one result with a call of its own.
    fn send_result(&mut self, w: usize, token: &str, outcome: Outcome) {
        let request = Request::Result {
            token: token.to_owned(),
            outcome,
            patterns: None,
        };
        let req = self.worker_request(w, request, 2000);
        self.workers[w].results.insert(req, token.to_owned());
    }

    fn result_answered(&mut self, w: usize, token: &str, response: Response) {
        if response.status != 200 {
            // 5xx: retry until the runtime answers.
            if self.workers[w].held.contains_key(token) {
                let backoff = self.rng.between(100, 1000);
                self.report_later(w, token, backoff);
            }
            return;
        }
        let accepted = response.body.get("accepted").and_then(|a| a.as_bool()) == Some(true);
        let Some(h) = self.workers[w].held.remove(token) else {
            return;
        };
        if accepted {
            let execution = h.task.execution_id.to_string();
            let unit = h.task.step_id.clone();
            let attempt = h.task.attempt;
            let token = token.to_owned();
            match h.outcome {
                Some(Outcome::Output(_)) => self.told(Fact::Succeeded {
                    execution,
                    unit,
                    attempt,
                    token,
                }),
                Some(Outcome::Error(_)) => self.told(Fact::AttemptFailed {
                    execution,
                    unit,
                    attempt,
                    token,
                }),
                None => {}
            }
        }
    }

    /// The server no longer wants `token`: report its output if the work
    /// completed, else `CANCELLED`.
    fn cancelled(&mut self, w: usize, token: &str) {
        let Some(h) = self.workers[w].held.get_mut(token) else {
            return;
        };
        if h.outcome.is_none() {
            h.outcome = Some(Outcome::Error(ErrorInfo {
                code: "CANCELLED".into(),
                message: "cancelled by the server".into(),
                retryable: false,
            }));
            self.report(w, token);
        }
    }

    pub(crate) fn worker_crash(&mut self, w: usize, life: u64) {
        let wk = &mut self.workers[w];
        if wk.life != life || wk.state == State::Down {
            return;
        }
        self.stats.fault("worker_crash");
        wk.life += 1;
        wk.state = State::Down;
        wk.session = None;
        wk.held.clear();
        wk.control = None;
        wk.results.clear();
        wk.carry.clear();
        let delay = self.rng.between(500, self.cfg.session_timeout_ms * 2);
        self.at(delay, Ev::WorkerRestart { w });
    }

    pub(crate) fn worker_restart(&mut self, w: usize) {
        if self.workers[w].state != State::Down {
            return;
        }
        self.workers[w].state = State::Up;
        self.wake_worker(w, 0);
    }

    pub(crate) fn worker_resume(&mut self, w: usize, life: u64) {
        let wk = &mut self.workers[w];
        if wk.life != life || wk.state != State::Paused {
            return;
        }
        wk.state = State::Up;
        // Everything outstanding before the pause timed out meanwhile.
        wk.control = None;
        wk.results.clear();
        for h in wk.held.values_mut() {
            h.pause = false;
        }
        let tokens: Vec<String> = wk
            .held
            .iter()
            .filter(|(_, h)| h.outcome.is_some())
            .map(|(t, _)| t.clone())
            .collect();
        for t in tokens {
            self.report(w, &t);
        }
        self.wake_worker(w, 0);
    }
}
