//! Simulated clients: they start executions (with or without a
//! client-chosen id and an Idempotency-Key), send signals to executions
//! waiting for them, cancel some, and retry after lost responses and `503`s
//! whenever a retry is safe. Every answer that says something happened is
//! recorded as a fact for invariant 2, and idempotent starts must keep
//! answering with the same execution.

use crate::check::{durability::Fact, Invariant, Violation};
use crate::workload;
use crate::world::{Actor, Ev, World};
use orbit_core::engine::{IdempotencyScope, Request, Response, Start};
use orbit_core::history::Millis;
use serde_json::json;
use std::collections::BTreeMap;

#[derive(Debug, Clone)]
enum Kind {
    Start {
        workflow: &'static str,
        client_id: Option<String>,
        key: Option<String>,
    },
    Signal,
    Cancel,
}

#[derive(Debug, Clone)]
struct Op {
    kind: Kind,
    request: Request,
    label: String,
    /// Safe to resend after a lost response.
    retry_safe: bool,
    done: bool,
    sent: bool,
}

/// One simulated client.
#[derive(Debug, Clone)]
pub(crate) struct Client {
    id: String,
    ops: Vec<Op>,
    outstanding: BTreeMap<u64, usize>,
    next_req: u64,
    /// Idempotency-Key -> the execution it answered with.
    answered: BTreeMap<String, String>,
}

impl Client {
    pub(crate) fn new(id: String) -> Client {
        Client {
            id,
            ops: Vec::new(),
            outstanding: BTreeMap::new(),
            next_req: 0,
            answered: BTreeMap::new(),
        }
    }

    /// Labels of operations sent and not finished.
    pub(crate) fn open_ops(&self) -> Vec<String> {
        self.ops
            .iter()
            .filter(|o| !o.done)
            .map(|o| format!("{} {}", self.id, o.label))
            .collect()
    }
}

fn scope(client: &str, path: &str, key: &str, body: &serde_json::Value) -> IdempotencyScope {
    IdempotencyScope {
        key: format!("token:{client}|POST|{path}|{key}"),
        fingerprint: body.to_string(),
    }
}

impl World {
    /// Plans a client's starts over the safety phase.
    pub(crate) fn plan_client(&mut self, c: usize) {
        for i in 0..self.cfg.starts_per_client {
            let order = (c * 1000 + i) as u64;
            let (workflow, input) = workload::pick(self.cfg.scenario, &mut self.rng, order);
            let cid = self.clients[c].id.clone();
            let client_id = self
                .rng
                .chance(self.cfg.client_id_probability)
                .then(|| format!("{cid}-e{i}"));
            let key = self
                .rng
                .chance(self.cfg.idempotency_key_probability)
                .then(|| format!("start-{cid}-{i}"));
            let body = json!({"workflow": workflow, "input": input, "execution_id": client_id});
            let request = Request::Start(Start {
                workflow: workflow.to_owned(),
                version: None,
                input,
                execution_id: client_id.clone(),
                idempotency: key
                    .as_ref()
                    .map(|k| scope(&cid, "/v1/executions", k, &body)),
                traceparent: None,
            });
            let retry_safe = client_id.is_some() || key.is_some();
            let op = self.push_op(
                c,
                Op {
                    kind: Kind::Start {
                        workflow,
                        client_id,
                        key,
                    },
                    request,
                    label: format!("start #{i} {workflow}"),
                    retry_safe,
                    done: false,
                    sent: false,
                },
            );
            let at = self.rng.between(0, self.cfg.safety_ms * 4 / 5);
            self.at(at, Ev::ClientOp { c, op });
        }
    }

    fn push_op(&mut self, c: usize, op: Op) -> usize {
        self.clients[c].ops.push(op);
        self.clients[c].ops.len() - 1
    }

    pub(crate) fn client_op(&mut self, c: usize, op: usize) {
        let Some(o) = self.clients[c].ops.get_mut(op) else {
            return;
        };
        if o.done {
            return;
        }
        o.sent = true;
        let request = o.request.clone();
        let cl = &mut self.clients[c];
        cl.next_req += 1;
        let req = cl.next_req;
        cl.outstanding.insert(req, op);
        self.send(Actor::Client(c), req, request, 3000);
    }

    fn retry_op(&mut self, c: usize, op: usize) {
        let backoff = self.rng.between(200, 1500);
        self.at(backoff, Ev::ClientOp { c, op });
    }

    pub(crate) fn client_timeout(&mut self, c: usize, req: u64) {
        let Some(op) = self.clients[c].outstanding.remove(&req) else {
            return;
        };
        self.hang_up(Actor::Client(c), req);
        let safe = self.clients[c].ops[op].retry_safe;
        if safe {
            self.retry_op(c, op);
        } else {
            // The answer was lost and a retry could duplicate: give up.
            self.clients[c].ops[op].done = true;
        }
    }

    pub(crate) fn client_response(&mut self, c: usize, req: u64, response: Response) {
        let Some(op) = self.clients[c].outstanding.remove(&req) else {
            return;
        };
        if self.clients[c].ops[op].done {
            return;
        }
        if response.status >= 500 {
            // STORAGE_ERROR: nothing took effect; retrying is safe.
            return self.retry_op(c, op);
        }
        self.clients[c].ops[op].done = true;
        let kind = self.clients[c].ops[op].kind.clone();
        let target = match &self.clients[c].ops[op].request {
            Request::Signal { execution_id, .. } | Request::Cancel { execution_id, .. } => {
                execution_id.clone()
            }
            _ => String::new(),
        };
        match kind {
            Kind::Start {
                workflow,
                client_id,
                key,
            } => {
                if response.error_code() == Some("UNKNOWN_WORKFLOW") {
                    // Every workflow a client starts was deployed (and
                    // acknowledged) before the run began.
                    return self.fail(Violation::new(
                        Invariant::NoLostCommits,
                        format!(
                            "a start of the deployed workflow {workflow} was answered {}",
                            response.body
                        ),
                    ));
                }
                let Some(exec) = response
                    .body
                    .get("execution_id")
                    .and_then(|e| e.as_str())
                    .map(str::to_owned)
                else {
                    return;
                };
                if let Some(id) = &client_id {
                    if *id != exec {
                        return self.fail(Violation::new(
                            Invariant::NoLostCommits,
                            format!("start with client id {id} answered with execution {exec}"),
                        ));
                    }
                }
                if let Some(k) = &key {
                    let first = self.clients[c]
                        .answered
                        .entry(k.clone())
                        .or_insert_with(|| exec.clone())
                        .clone();
                    if first != exec {
                        return self.fail(Violation::new(
                            Invariant::NoLostCommits,
                            format!(
                                "Idempotency-Key {k} answered with execution {first}, then {exec}"
                            ),
                        ));
                    }
                }
                self.told(Fact::Created {
                    execution: exec.clone(),
                });
                self.follow_up(c, workflow, &exec);
            }
            Kind::Signal => {
                if let Some(seq) = response.body.get("seq").and_then(|s| s.as_u64()) {
                    self.told(Fact::Signal {
                        execution: target,
                        name: "go".into(),
                        seq,
                    });
                }
            }
            Kind::Cancel => {
                if response.status == 202 {
                    self.told(Fact::CancelRequested { execution: target });
                }
            }
        }
    }

    /// After a start: signal executions that wait for one, cancel some.
    fn follow_up(&mut self, c: usize, workflow: &str, exec: &str) {
        let cid = self.clients[c].id.clone();
        let n = self.clients[c].ops.len();
        if workflow == "Waiting" {
            let body = json!({"payload": {"from": cid}});
            let key = self
                .rng
                .chance(self.cfg.idempotency_key_probability)
                .then(|| format!("signal-{cid}-{n}"));
            let path = format!("/v1/executions/{exec}/signals/go");
            let request = Request::Signal {
                execution_id: exec.to_owned(),
                name: "go".into(),
                payload: json!({"from": cid}),
                idempotency: key.as_ref().map(|k| scope(&cid, &path, k, &body)),
            };
            let op = self.push_op(
                c,
                Op {
                    kind: Kind::Signal,
                    request,
                    label: format!("signal go {exec}"),
                    retry_safe: true,
                    done: false,
                    sent: false,
                },
            );
            let delay: Millis = self.rng.between(0, 8000);
            self.at(delay, Ev::ClientOp { c, op });
        }
        if self.faults_on && self.rng.chance(self.cfg.faults.client_cancel_probability) {
            let request = Request::Cancel {
                execution_id: exec.to_owned(),
                reason: Some("simulated client".into()),
                idempotency: None,
            };
            let op = self.push_op(
                c,
                Op {
                    kind: Kind::Cancel,
                    request,
                    label: format!("cancel {exec}"),
                    retry_safe: true,
                    done: false,
                    sent: false,
                },
            );
            let delay: Millis = self.rng.between(0, 5000);
            self.at(delay, Ev::ClientOp { c, op });
        }
    }
}
