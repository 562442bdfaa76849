//! Shared cluster mode (`--cluster --cluster-mode shared`) inside the
//! engine: what a node does that a single server does not.
//!
//! - **Ownership.** The engine holds the executions this node owns, each
//!   with its epoch ([`Exec::epoch`]); every append carries it and the
//!   store refuses it once the execution moved (`fenced:`, given up). An
//!   execution this node creates is its own at epoch 1; others arrive by
//!   [`Input::Adopt`] (a takeover, or its own taken back).
//! - **Commands for other owners.** A signal, cancellation or result for
//!   an execution the engine does not hold goes to its owner's inbox
//!   ([`Effect::Send`]) and is answered once stored there: a result with
//!   `{"accepted": true}`, a signal with its seq once the owner recorded it
//!   ([`Effect::FindSignal`]; `null` after ten seconds). When the store has
//!   no running owner for it (finished, or unknown) the command runs here
//!   on what the store holds, as on one server.
//! - **The inbox.** Entries addressed to this node come in as
//!   [`Input::Inbox`] and run as the engine's own requests (ids with
//!   [`INBOX_REQUESTS`] set). Each entry is deleted in the batch that
//!   records what it caused, or, when it causes nothing, in a batch of its
//!   own; [`Effect::InboxDone`] tells the node which entries are done.
//! - **The queue in the database.** Batches write the task-queue row of
//!   every unit that joins or leaves the queue. Polls never hand out from
//!   memory: each claims rows ([`Effect::Claim`]); the claim writes a
//!   `dispatch` entry to the owner, which records `StepDispatched` when it
//!   applies it ([`Request::Dispatched`]).
//! - **Workers on other nodes.** The owner follows the sessions holding
//!   its deliveries through their contact in the database
//!   ([`Input::SessionContacts`]); the node that handed a task out tells
//!   the owner when its worker may not have it ([`Request::Lost`]).

use super::batch::{ConsumedEntry, StoredExecution};
use super::effect::{Effect, Response, Task};
use super::input::{Outcome, Request, RequestId};
use super::state::{ParkedPoll, Session};
use super::txn::Txn;
use super::Engine;
use crate::history::{ErrorInfo, EventKind, Millis, Projection, UnitState};
use crate::store::shared::{Claimed, Dispatch, Entry, Kind, Poll, Sent, SessionContact};
use crate::store::QueueOp;
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};

/// Identifies an [`Effect::Send`] in [`Input::Sent`].
pub type SendId = u64;

/// Identifies an [`Effect::Claim`] in [`Input::Claimed`].
pub type ClaimId = u64;

/// Request ids with this bit set are the engine's own: an inbox entry
/// applied as a request (the entry's id in the low bits). Drivers number
/// their requests below it.
pub const INBOX_REQUESTS: RequestId = 1 << 63;

/// The most queue rows one claim transaction takes for a poll: a poll for
/// more tasks claims again once these are in.
const CLAIM_BATCH: u32 = 32;

/// The reason recorded when a worker never listed a task handed to it.
fn not_received(worker: &str) -> String {
    format!("worker `{worker}` did not receive the task")
}

/// The reason recorded when a worker's session went silent.
fn stopped(worker: &str) -> String {
    format!("worker `{worker}` stopped responding")
}

/// The reason recorded when a live session stopped listing a task.
fn no_longer_listed(worker: &str) -> String {
    format!("worker `{worker}` no longer lists the task")
}

fn accepted() -> Response {
    Response::ok(200, json!({"accepted": true}))
}

/// A poll being served by claims, one task per claim.
struct Claiming {
    request: RequestId,
    session: String,
    max: u32,
    wait_ms: u64,
    /// How many rows the claim in flight asked for (one token each).
    asked: u32,
    tasks: Vec<Task>,
    /// A parked poll claiming again (it stays in `Work::polls`).
    parked: bool,
    /// The session's worker, as of the claim (the session may end while
    /// the claim is in flight).
    worker: String,
}

/// A task this node handed out by a claim, until its result went to the
/// owner or its worker is known not to have it.
struct Handed {
    execution_id: String,
    session: String,
    worker_id: String,
    at: Millis,
    /// Listed by the worker in a poll or heartbeat.
    confirmed: bool,
    /// Why the owner must record the attempt as uncertain (sent, or to
    /// send again after a failed send).
    lost: Option<String>,
    /// A send of `lost` is in flight.
    sending: bool,
}

/// What a send was for.
enum Sending {
    /// A command; answer `request` once stored.
    Command(RequestId, Request),
    /// Telling the owner a delivery is lost (the token).
    Lost(String),
}

/// A worker session polling another node that holds deliveries of
/// executions owned here.
pub(super) struct RemoteSession {
    /// Its tokens.
    pub tokens: BTreeSet<String>,
    /// Its last contact as the database saw it (or the hand-out).
    pub last_contact: Millis,
}

/// The engine's shared-mode state.
#[derive(Default)]
pub(super) struct Shared {
    next: u64,
    sends: BTreeMap<SendId, Sending>,
    /// Requests answered here after the store said nobody owns their
    /// execution (until answered).
    local: BTreeSet<RequestId>,
    claims: BTreeMap<ClaimId, Claiming>,
    /// Parked polls with a claim in flight.
    claiming: BTreeSet<RequestId>,
    handed: BTreeMap<String, Handed>,
    /// Inbox requests in the engine, with their entry's execution.
    entries: BTreeMap<RequestId, String>,
    /// Inbox requests whose entry's deletion committed.
    consumed: BTreeSet<RequestId>,
    /// Executions read for entries addressed here that memory lacks.
    reading: BTreeSet<String>,
    /// A commit queued tasks: parked polls claim at once.
    enqueued: bool,
    /// Requests waiting for the store's definitions (and those that ran
    /// again after them: they do not ask twice).
    awaiting_definitions: Vec<(RequestId, Request)>,
    definitions_read: BTreeSet<RequestId>,
    /// Adopted executions whose definition is not registered here yet.
    unadopted: Vec<(StoredExecution, u64)>,
    /// Forwarded signals waiting for their seq, by watch id.
    signals: BTreeMap<u64, SignalWait>,
    /// The reclaim after the start (or the last drop) is over
    /// ([`Input::Reclaimed`]): every execution of this node's own is held
    /// again, or being adopted once its definition is read.
    reclaimed: bool,
    /// Tokens whose result this node refused as unknown, with when: their
    /// worker dropped the task, so a poll or heartbeat that still lists
    /// one (sent before the refusal reached it) does not vouch for it.
    refused: BTreeMap<String, Millis>,
    /// When a session of this node last listed each delivery it holds (or
    /// was handed it).
    listed: BTreeMap<String, Millis>,
}

/// The request an inbox entry asks for (`None`: nothing to apply).
fn entry_request(e: &Entry) -> Option<Request> {
    let text = |k: &str| e.body.get(k).and_then(Value::as_str).map(str::to_owned);
    let execution_id = e.execution_id.clone();
    match e.kind {
        Kind::Signal => Some(Request::Signal {
            execution_id,
            name: text("name")?,
            payload: e.body.get("payload").cloned().unwrap_or(Value::Null),
            idempotency: None,
        }),
        Kind::Cancel => Some(Request::Cancel {
            execution_id,
            reason: text("reason"),
            idempotency: None,
        }),
        Kind::Result => {
            let token = text("token")?;
            if let Some(reason) = text("lost") {
                return Some(Request::Lost { token, reason });
            }
            let outcome = match e.body.get("error") {
                Some(err) => Outcome::Error(serde_json::from_value::<ErrorInfo>(err.clone()).ok()?),
                None => Outcome::Output(e.body.get("output").cloned().unwrap_or(Value::Null)),
            };
            let patterns = e
                .body
                .get("patterns")
                .and_then(|p| serde_json::from_value::<Vec<String>>(p.clone()).ok());
            Some(Request::Result {
                token,
                outcome,
                patterns,
            })
        }
        Kind::Dispatch => Some(Request::Dispatched {
            execution_id,
            dispatch: serde_json::from_value(e.body.clone()).ok()?,
        }),
        // An idempotent start records nothing: it was answered from the
        // stored execution where it arrived.
        Kind::Start => None,
    }
}

/// How long a signal sent to another member's inbox waits for its owner to
/// record it before it is answered `"seq": null` (seed `003_…`).
pub const SIGNAL_SEQ_WAIT_MS: Millis = 10_000;

/// A forwarded signal waiting for its owner to record it.
struct SignalWait {
    request: RequestId,
    signal: Request,
    entry: i64,
    owner: String,
    until: Millis,
    /// A look is in flight.
    looking: bool,
}

/// The body of a `result` entry.
fn result_body(token: &str, outcome: &Outcome, patterns: &Option<Vec<String>>) -> Value {
    let mut body = json!({"token": token});
    match outcome {
        Outcome::Output(v) => body["output"] = v.clone(),
        Outcome::Error(e) => body["error"] = json!(e),
    }
    if let Some(p) = patterns {
        body["patterns"] = json!(p);
    }
    body
}

impl Engine {
    /// True in shared cluster mode.
    pub(super) fn is_shared(&self) -> bool {
        self.config.node_id.is_some()
    }

    /// The epoch an append of `exec_id` carries: the one this node owns it
    /// at, 1 for an execution it creates now, and 0 (refused by the store)
    /// for one held read-only; the term's epoch in leader mode; `None` on
    /// one server.
    pub(super) fn epoch_for(&self, exec_id: &str) -> Option<u64> {
        if self.config.node_id.is_none() {
            return self.config.epoch;
        }
        Some(match self.executions.get(exec_id) {
            Some(e) => e.epoch.unwrap_or(0),
            None => 1,
        })
    }

    /// Whether this node holds `exec_id` as its owner (shared mode).
    pub(super) fn owns(&self, exec_id: &str) -> bool {
        self.executions
            .get(exec_id)
            .is_some_and(|e| e.epoch.is_some())
    }

    /// Whether a command from a client or worker naming `exec_id` goes to
    /// its owner's inbox: shared mode, not held here, and not already
    /// turned back by the store.
    pub(super) fn elsewhere(&self, id: RequestId, exec_id: &str) -> bool {
        self.is_shared()
            && id & INBOX_REQUESTS == 0
            && !self.shared.local.contains(&id)
            && !self.executions.contains_key(exec_id)
    }

    /// Stores `request` in the inbox of `exec_id`'s owner; it is answered
    /// when the store says so ([`Engine::sent`]).
    pub(super) fn forward(&mut self, id: RequestId, request: Request, exec_id: &str) {
        let (kind, body) = match &request {
            Request::Signal { name, payload, .. } => {
                (Kind::Signal, json!({"name": name, "payload": payload}))
            }
            Request::Cancel { reason, .. } => (Kind::Cancel, json!({"reason": reason})),
            Request::Result {
                token,
                outcome,
                patterns,
            } => (Kind::Result, result_body(token, outcome, patterns)),
            _ => return self.reply(id, Response::error(500, "INTERNAL", "not forwardable")),
        };
        self.send(Sending::Command(id, request), exec_id, kind, body);
    }

    fn send(&mut self, what: Sending, exec_id: &str, kind: Kind, body: Value) {
        self.shared.next += 1;
        let send = self.shared.next;
        self.shared.sends.insert(send, what);
        self.out.push(Effect::Send {
            send,
            execution_id: exec_id.to_string(),
            kind,
            body,
        });
    }

    /// A send's answer.
    pub(super) fn sent(&mut self, send: SendId, result: Result<Sent, String>) {
        match self.shared.sends.remove(&send) {
            Some(Sending::Command(id, request)) => self.command_sent(id, request, result),
            Some(Sending::Lost(token)) => {
                let stored = matches!(result, Ok(Sent::Queued { .. }));
                let gone = matches!(result, Ok(Sent::Finished { .. } | Sent::Missing));
                if stored || gone {
                    self.shared.handed.remove(&token);
                } else if let Some(h) = self.shared.handed.get_mut(&token) {
                    // Sent again at the next tick.
                    h.sending = false;
                }
            }
            None => {}
        }
    }

    fn command_sent(&mut self, id: RequestId, request: Request, result: Result<Sent, String>) {
        match result {
            Err(message) => self.reply(id, Response::error(503, "STORAGE_ERROR", message)),
            Ok(Sent::Queued { id: entry, owner }) => {
                if let Request::Signal { .. } = &request {
                    // Answered with its seq once the owner recorded it.
                    return self.watch_signal(id, request, entry, owner.node_id);
                }
                let (response, scope) = match &request {
                    Request::Result { token, .. } => {
                        self.shared.handed.remove(token);
                        (accepted(), None)
                    }
                    Request::Signal { idempotency, .. } => {
                        (Response::ok(200, json!({"seq": null})), idempotency.clone())
                    }
                    Request::Cancel {
                        execution_id,
                        idempotency,
                        ..
                    } => (
                        Response::ok(
                            202,
                            json!({"execution_id": execution_id, "cancel_requested": true}),
                        ),
                        idempotency.clone(),
                    ),
                    _ => return,
                };
                let mut txn = Txn::default();
                self.record(&mut txn, &scope, &response);
                txn.reply(id, response, None);
                self.submit(txn);
            }
            Ok(Sent::Finished { .. } | Sent::Missing) => {
                // Nobody runs it: answered here from what the store holds.
                self.shared.local.insert(id);
                self.request(id, request);
            }
        }
    }

    fn watch_signal(&mut self, id: RequestId, signal: Request, entry: i64, owner: String) {
        self.shared.next += 1;
        let watch = self.shared.next;
        self.shared.signals.insert(
            watch,
            SignalWait {
                request: id,
                signal,
                entry,
                owner,
                until: self.now + SIGNAL_SEQ_WAIT_MS,
                looking: false,
            },
        );
        self.look_for_signal(watch);
    }

    fn look_for_signal(&mut self, watch: u64) {
        let Some(w) = self.shared.signals.get_mut(&watch) else {
            return;
        };
        let Request::Signal {
            execution_id,
            name,
            payload,
            ..
        } = &w.signal
        else {
            return;
        };
        w.looking = true;
        self.out.push(Effect::FindSignal {
            watch,
            owner: w.owner.clone(),
            entry: w.entry,
            execution_id: execution_id.clone(),
            name: name.clone(),
            payload: payload.clone(),
        });
    }

    /// What a look for a forwarded signal found: its seq once recorded
    /// (`None`: not yet, or the look failed).
    pub(super) fn signal_found(&mut self, watch: u64, seq: Option<u64>) {
        let Some(w) = self.shared.signals.get_mut(&watch) else {
            return;
        };
        w.looking = false;
        if seq.is_none() && self.now < w.until {
            return; // looked at again at the next tick
        }
        let Some(w) = self.shared.signals.remove(&watch) else {
            return;
        };
        let Request::Signal { idempotency, .. } = &w.signal else {
            return;
        };
        let response = Response::ok(200, json!({ "seq": seq }));
        let mut txn = Txn::default();
        self.record(&mut txn, idempotency, &response);
        txn.reply(w.request, response, None);
        self.submit(txn);
    }

    /// At a tick: forwarded signals not found yet look again (or give up
    /// with `"seq": null` after [`SIGNAL_SEQ_WAIT_MS`]).
    fn signals_tick(&mut self) {
        let now = self.now;
        let due: Vec<(u64, bool)> = self
            .shared
            .signals
            .iter()
            .filter(|(_, w)| !w.looking)
            .map(|(watch, w)| (*watch, now >= w.until))
            .collect();
        for (watch, expired) in due {
            if expired {
                self.signal_found(watch, None);
            } else {
                self.look_for_signal(watch);
            }
        }
    }

    /// Entries of this node's inbox, in order.
    pub(super) fn inbox(&mut self, entries: Vec<Entry>) {
        for e in entries {
            let id = INBOX_REQUESTS | (e.id as u64);
            if self.shared.entries.contains_key(&id) {
                continue;
            }
            let held = self.executions.get(&e.execution_id);
            let usable = held.is_some_and(|x| x.epoch.is_some() || x.proj.status.is_terminal());
            if !usable {
                // Addressed here but not in memory: an adoption under way,
                // or a finished execution forgotten. Read it; the entry
                // comes again with the next read of the inbox.
                if held.is_none() && self.shared.reading.insert(e.execution_id.clone()) {
                    self.ask_load(vec![e.execution_id.clone()], Vec::new(), None);
                }
                self.out.push(Effect::InboxDone {
                    entry: e.id,
                    applied: false,
                });
                continue;
            }
            // Entries of one execution apply in order: one behind a batch
            // in flight (the dispatch before it, say) waits for it.
            let behind = held.is_some_and(|x| x.blocked() || !x.waiting.is_empty());
            if !behind && self.earlier_entry_pending(&e) {
                // The entry before it is still being applied, by a batch of
                // a copy given up since (taken back at a newer epoch): this
                // one comes again with the next read (seed 0x43f: a result
                // judged before its dispatch, then deleted).
                self.out.push(Effect::InboxDone {
                    entry: e.id,
                    applied: false,
                });
                continue;
            }
            self.shared.entries.insert(id, e.execution_id.clone());
            match entry_request(&e) {
                Some(request) if behind => self.park_behind(&e.execution_id, id, request),
                Some(request) => self.request(id, request),
                None => self.reply(id, Response::ok(200, json!({}))),
            }
        }
    }

    /// A batch of `exec_id` failed, and with it any inbox entry it applied:
    /// that entry comes again with the next read of the inbox, so the later
    /// entries parked behind the batch go back too, to be applied after it
    /// in order. Applied now, a result would overtake the dispatch before
    /// it and be taken for one of a task never handed out (seed 0xd6).
    pub(super) fn release_parked_entries(&mut self, exec_id: &str) {
        let Some(e) = self.executions.get_mut(exec_id) else {
            return;
        };
        if !e.waiting.iter().any(|(id, _)| id & INBOX_REQUESTS != 0) {
            return;
        }
        let (entries, others): (std::collections::VecDeque<_>, _) = std::mem::take(&mut e.waiting)
            .into_iter()
            .partition(|(id, _)| id & INBOX_REQUESTS != 0);
        e.waiting = others;
        for (id, _) in entries {
            self.reply(
                id,
                Response::error(
                    503,
                    "STORAGE_ERROR",
                    "an earlier inbox entry of this execution is applied again first",
                ),
            );
        }
    }

    /// Whether an entry of `e`'s execution that came before it is still
    /// being applied.
    fn earlier_entry_pending(&self, e: &Entry) -> bool {
        self.shared.entries.iter().any(|(request, exec_id)| {
            *exec_id == e.execution_id && ((request & !INBOX_REQUESTS) as i64) < e.id
        })
    }

    /// A read asked for by [`Engine::inbox`] came back.
    pub(super) fn read_for_inbox(&mut self, exec_id: &str) {
        self.shared.reading.remove(exec_id);
    }

    /// The epoch an entry of `exec_id` is consumed with: the owner's, or,
    /// for a finished execution held read-only, any (an entry of a
    /// finished execution asks nothing of it: whoever the row names as
    /// owner deletes it).
    fn consume_epoch(&self, exec_id: &str) -> Option<u64> {
        let e = self.executions.get(exec_id)?;
        e.epoch
            .or_else(|| e.proj.status.is_terminal().then_some(u64::MAX))
    }

    /// Adds to `txn` the inbox entries whose requests it answers.
    pub(super) fn consume_replied(&mut self, txn: &mut Txn) {
        if !self.is_shared() {
            return;
        }
        for r in &txn.replies {
            if r.request & INBOX_REQUESTS == 0 {
                continue;
            }
            let entry = (r.request & !INBOX_REQUESTS) as i64;
            if txn.consumed.iter().any(|c| c.entry == entry) {
                continue;
            }
            let Some(exec_id) = self.shared.entries.get(&r.request) else {
                continue;
            };
            let Some(epoch) = self.consume_epoch(exec_id) else {
                continue;
            };
            if self.planted(super::Bug::InboxEntryKept) {
                continue;
            }
            txn.consumed.push(ConsumedEntry {
                entry,
                execution_id: exec_id.clone(),
                epoch,
            });
        }
    }

    /// A batch consuming these entries committed.
    pub(super) fn entries_committed(&mut self, consumed: &[ConsumedEntry]) {
        for c in consumed {
            self.shared.consumed.insert(INBOX_REQUESTS | c.entry as u64);
        }
    }

    /// Turns the answers to inbox requests into [`Effect::InboxDone`]: an
    /// entry whose deletion committed is applied; one that failed (`503`)
    /// is fed again later; one answered without a write is deleted by a
    /// batch of its own first.
    pub(super) fn settle_inbox_replies(&mut self) {
        if !self.is_shared() {
            return;
        }
        loop {
            let mut again = Vec::new();
            let out = std::mem::take(&mut self.out);
            let mut kept = Vec::with_capacity(out.len());
            for effect in out {
                let Effect::Reply { request, response } = effect else {
                    kept.push(effect);
                    continue;
                };
                self.shared.local.remove(&request);
                self.shared.definitions_read.remove(&request);
                if request & INBOX_REQUESTS == 0 {
                    kept.push(Effect::Reply { request, response });
                    continue;
                }
                let entry = (request & !INBOX_REQUESTS) as i64;
                if self.shared.consumed.remove(&request) {
                    self.shared.entries.remove(&request);
                    kept.push(Effect::InboxDone {
                        entry,
                        applied: true,
                    });
                } else if response.status == 503 {
                    self.shared.entries.remove(&request);
                    kept.push(Effect::InboxDone {
                        entry,
                        applied: false,
                    });
                } else {
                    again.push((request, response));
                }
            }
            self.out = kept;
            if again.is_empty() {
                return;
            }
            for (request, response) in again {
                let mut txn = Txn::default();
                txn.reply(request, response, None);
                self.consume_replied(&mut txn);
                if txn.consumed.is_empty() {
                    self.shared.entries.remove(&request);
                    self.out.push(Effect::InboxDone {
                        entry: (request & !INBOX_REQUESTS) as i64,
                        applied: false,
                    });
                    continue;
                }
                self.submit(txn);
            }
        }
    }

    /// The queue rows a draft changes: units that joined the queue are
    /// enqueued (with the task as a poll hands it out, token aside), those
    /// that left it removed; an execution that ended leaves nothing queued.
    pub(super) fn queue_ops(&self, exec_id: &str, d: &super::txn::Draft) -> Vec<QueueOp> {
        let before = self.executions.get(exec_id).map(|e| &e.proj);
        let queued = |p: &Projection, unit: &str| {
            p.units
                .get(unit)
                .is_some_and(|u| matches!(u.state, UnitState::Queued { .. }))
        };
        let ended = d.proj.status.is_terminal();
        let mut ops = Vec::new();
        for unit in super::storage::units_touched(&d.sent) {
            let was = before.is_some_and(|p| queued(p, unit));
            let is = !ended && queued(&d.proj, unit);
            let attempt = |p: &Projection| p.units.get(unit).map(|u| u.attempt);
            let requeued = was && is && before.and_then(attempt) != attempt(&d.proj);
            if was && (!is || requeued) {
                ops.push(QueueOp::Remove {
                    execution_id: exec_id.to_string(),
                    unit: unit.to_string(),
                });
            }
            if is && (!was || requeued) {
                if let Some(task) = super::worker::task_of(&d.proj, exec_id, unit, String::new()) {
                    ops.push(QueueOp::Enqueue {
                        execution_id: exec_id.to_string(),
                        unit: unit.to_string(),
                        task: task.task_name.to_string(),
                        enqueued_at: self.now,
                        body: serde_json::to_value(&task).unwrap_or(Value::Null),
                    });
                }
            }
        }
        if ended {
            if let Some(p) = before {
                for (unit, u) in p.units.iter() {
                    let touched = ops
                        .iter()
                        .any(|op| matches!(op, QueueOp::Remove { unit: x, .. } if **x == **unit));
                    if matches!(u.state, UnitState::Queued { .. }) && !touched {
                        ops.push(QueueOp::Remove {
                            execution_id: exec_id.to_string(),
                            unit: unit.to_string(),
                        });
                    }
                }
            }
        }
        ops
    }

    /// A batch that queued tasks committed: parked polls claim at once.
    pub(super) fn tasks_enqueued(&mut self) {
        self.shared.enqueued = true;
    }

    /// After an input: parked polls claim if a commit queued tasks.
    pub(super) fn claim_if_enqueued(&mut self) {
        if std::mem::take(&mut self.shared.enqueued) {
            self.claim_parked();
        }
    }

    /// Applies a `dispatch` entry: the unit is recorded as handed out
    /// with the claim's token, if it is still the one queued.
    pub(super) fn dispatched(&mut self, id: RequestId, exec_id: &str, dispatch: Dispatch) {
        let Some(e) = self.executions.get(exec_id) else {
            return self.reply(id, Response::ok(200, json!({})));
        };
        if e.blocked() {
            let request = Request::Dispatched {
                execution_id: exec_id.to_string(),
                dispatch,
            };
            return self.park_behind(exec_id, id, request);
        }
        if e.proj.status.is_terminal() || e.epoch.is_none() {
            return self.reply(id, Response::ok(200, json!({})));
        }
        let mut txn = Txn::default();
        if !self.draft(&mut txn, exec_id) {
            return self.reply(id, Response::ok(200, json!({})));
        }
        let attempt = txn
            .drafts
            .get(exec_id)
            .and_then(|d| d.proj.units.get(dispatch.unit.as_str()))
            .filter(|u| matches!(u.state, UnitState::Queued { .. }) && *u.task == *dispatch.task)
            .map(|u| u.attempt);
        let Some(attempt) = attempt else {
            // No longer queued (cancelled, or a later attempt's row): the
            // worker's result is judged like any unknown token's.
            return self.reply(id, Response::ok(200, json!({})));
        };
        let seq = self.push(
            &mut txn,
            exec_id,
            EventKind::StepDispatched {
                step: dispatch.unit.clone(),
                attempt,
                worker_id: dispatch.worker_id.clone(),
                token: dispatch.token.clone(),
            },
        );
        txn.deliveries
            .push((dispatch.token.clone(), dispatch.session.as_str().into()));
        self.settle(&mut txn, exec_id);
        txn.reply(
            id,
            Response::ok(200, json!({})),
            Some((exec_id.to_string(), seq)),
        );
        self.submit(txn);
    }

    /// A delivery recorded from a `dispatch` entry is held by `session`:
    /// one of this node's sessions, or one followed through its contact in
    /// the database. The claim confirmed it; the node that handed it out
    /// reports it lost if the worker never lists it.
    pub(super) fn handed_to(&mut self, token: &str, session_id: &str) {
        if self.work.sessions.contains_key(session_id) {
            self.listed(token);
            return self.attach(token, session_id, true);
        }
        let now = self.now;
        let Some(t) = self.work.tokens.get_mut(token) else {
            return;
        };
        t.session = Some(session_id.into());
        t.confirmed = true;
        self.work
            .remote
            .entry(session_id.to_string())
            .or_insert_with(|| RemoteSession {
                tokens: BTreeSet::new(),
                last_contact: now,
            })
            .tokens
            .insert(token.to_string());
    }

    /// Applies a `lost` entry: the delivery's attempt becomes uncertain.
    pub(super) fn lost(&mut self, id: RequestId, token: &str, reason: String) {
        if self.work.tokens.contains_key(token) {
            if let Some(t) = self.work.tokens.get_mut(token) {
                t.confirmed = true;
            }
            self.work.orphans.insert(token.to_string(), reason);
            self.process_orphans();
        }
        self.reply(id, accepted());
    }

    /// The sessions of other nodes holding this node's deliveries: the
    /// node reads their contact ([`Input::SessionContacts`]).
    pub fn remote_sessions(&self) -> Vec<String> {
        self.work.remote.keys().cloned().collect()
    }

    /// This node's worker sessions heard from at or after `since`: the node
    /// writes their contact for the owners of what they hold.
    pub fn sessions_seen_since(&self, since: Millis) -> Vec<String> {
        self.work
            .sessions
            .iter()
            .filter(|(_, s)| s.last_seen >= since)
            .map(|(id, _)| id.to_string())
            .collect()
    }

    /// The contacts the database holds for [`Engine::remote_sessions`].
    pub(super) fn session_contacts(&mut self, contacts: Vec<SessionContact>) {
        let now = self.now;
        for c in contacts {
            if let Some(r) = self.work.remote.get_mut(&c.session) {
                r.last_contact = r.last_contact.max(now.saturating_sub(c.silent_ms));
            }
        }
    }

    /// At a tick: remote sessions silent for a session timeout lose their
    /// deliveries; hand-outs of this node that their worker never listed,
    /// or whose session ended, are reported lost to their owners; parked
    /// polls claim again.
    pub(super) fn shared_tick(&mut self) {
        if !self.is_shared() {
            return;
        }
        let now = self.now;
        let timeout = self.config.session_timeout_ms;
        let silent: Vec<String> = self
            .work
            .remote
            .iter()
            .filter(|(_, r)| r.last_contact + timeout <= now)
            .map(|(s, _)| s.clone())
            .collect();
        for session in silent {
            let Some(r) = self.work.remote.remove(&session) else {
                continue;
            };
            for token in r.tokens {
                if let Some(t) = self.work.tokens.get(token.as_str()) {
                    if t.session.as_deref() == Some(session.as_str()) {
                        let reason = stopped(&t.worker_id);
                        self.work.orphans.insert(token, reason);
                    }
                }
            }
        }
        let mut report = Vec::new();
        for (token, h) in &mut self.shared.handed {
            if h.lost.is_none() {
                if !self.work.sessions.contains_key(h.session.as_str()) {
                    h.lost = Some(stopped(&h.worker_id));
                } else if !h.confirmed && h.at + timeout <= now {
                    h.lost = Some(not_received(&h.worker_id));
                }
            }
            if let (Some(reason), false) = (&h.lost, h.sending) {
                h.sending = true;
                report.push((token.clone(), h.execution_id.clone(), reason.clone()));
            }
        }
        for (token, exec_id, reason) in report {
            self.send(
                Sending::Lost(token.clone()),
                &exec_id,
                Kind::Result,
                json!({"token": token, "lost": reason}),
            );
        }
        // A listing sent before a refusal arrives well within a session
        // timeout; the session has expired by then otherwise.
        if !self.shared.refused.is_empty() {
            self.shared.refused.retain(|_, at| *at + timeout > now);
        }
        self.unlisted_tick(now, timeout);
        self.signals_tick();
        self.claim_parked();
    }

    /// A session of this node listed `token` now (or was handed it).
    pub(super) fn listed(&mut self, token: &str) {
        if self.is_shared() {
            self.shared.listed.insert(token.to_string(), self.now);
        }
    }

    /// Deliveries held by a session of this node that goes on calling but
    /// has not listed them for a session timeout: its worker no longer has
    /// them. A worker lists every task it holds in each poll and in a
    /// heartbeat at least every third of the timeout, so only one that
    /// dropped the task stays silent about it that long — after a result
    /// refused as unknown at another member, say, while a poll sent
    /// before that answer attached the delivery here (seed 0x11d2). The
    /// attempt becomes uncertain and is redelivered, as if the session
    /// had ended.
    fn unlisted_tick(&mut self, now: Millis, timeout: Millis) {
        let mut dropped = Vec::new();
        for (session_id, s) in &self.work.sessions {
            if s.builtin {
                continue;
            }
            for token in &s.tokens {
                let Some(t) = self.work.tokens.get(token) else {
                    continue;
                };
                if !t.confirmed || t.session.as_deref() != Some(&**session_id) {
                    continue;
                }
                let at = self
                    .shared
                    .listed
                    .get(&**token)
                    .copied()
                    .unwrap_or(t.dispatched_at);
                if at + timeout <= now && !self.work.orphans.contains_key(&**token) {
                    dropped.push((token.clone(), session_id.clone(), t.worker_id.clone()));
                }
            }
        }
        for (token, session_id, worker) in dropped {
            if let Some(s) = self.work.sessions.get_mut(&session_id) {
                s.tokens.remove(&token);
            }
            if let Some(t) = self.work.tokens.get_mut(&token) {
                t.session = None;
            }
            self.shared.listed.remove(&*token);
            self.work
                .orphans
                .insert(token.to_string(), no_longer_listed(&worker));
        }
        let tokens = &self.work.tokens;
        self.shared
            .listed
            .retain(|token, _| tokens.contains_key(token.as_str()));
    }

    /// Whether `token` was handed out by this member and is not known lost.
    pub(super) fn handed_here(&self, token: &str) -> bool {
        self.shared
            .handed
            .get(token)
            .is_some_and(|h| h.lost.is_none())
    }

    /// A worker listed `token` in a poll or heartbeat.
    pub(super) fn confirm_handed(&mut self, token: &str) {
        if let Some(h) = self.shared.handed.get_mut(token) {
            h.confirmed = true;
        }
    }

    /// The execution a result for `token` is to be sent to, when this node
    /// does not judge it itself: a task it handed out for an execution it
    /// does not hold, or whose `dispatch` entry it has not applied yet.
    pub(super) fn result_elsewhere(&self, id: RequestId, token: &str) -> Option<String> {
        if !self.is_shared() || id & INBOX_REQUESTS != 0 || self.shared.local.contains(&id) {
            return None;
        }
        let judged_here = self.work.tokens.get(token).is_some_and(|t| {
            self.executions
                .get(&t.execution_id)
                .is_some_and(|e| e.epoch.is_some())
        });
        if judged_here {
            return None;
        }
        self.shared
            .handed
            .get(token)
            .map(|h| h.execution_id.clone())
    }

    /// The task names a session takes, over every registered definition.
    fn task_names(&self, s: &Session) -> Vec<String> {
        let mut names = BTreeSet::new();
        for d in self.registry.by_hash.values() {
            for task in d.workflow.tasks.keys() {
                if s.takes(task) {
                    names.insert(task.clone());
                }
            }
        }
        names.into_iter().collect()
    }

    /// Serves a poll from the database's queue (shared mode).
    pub(super) fn claim_poll(&mut self, id: RequestId, session_id: &str, max: u32, wait_ms: u64) {
        self.next_claim(Claiming {
            request: id,
            session: session_id.to_string(),
            max,
            wait_ms,
            asked: 0,
            tasks: Vec::new(),
            parked: false,
            worker: String::new(),
        });
    }

    fn next_claim(&mut self, mut c: Claiming) {
        let Some(s) = self.work.sessions.get(c.session.as_str()) else {
            return self.claims_done(c);
        };
        c.worker = s.worker_id.to_string();
        let tasks = self.task_names(s);
        if tasks.is_empty() {
            return self.claims_done(c);
        }
        let worker_id = s.worker_id.clone();
        // What the poll still takes, in one transaction.
        c.asked = c
            .max
            .saturating_sub(c.tasks.len() as u32)
            .clamp(1, CLAIM_BATCH);
        let tokens = (0..c.asked).map(|_| self.ids.next_id()).collect();
        self.shared.next += 1;
        let claim = self.shared.next;
        let poll = Poll {
            node_id: self.config.node_id.clone().unwrap_or_default(),
            session: c.session.clone(),
            tokens,
            tasks,
            worker_id: worker_id.to_string(),
        };
        if c.parked {
            self.shared.claiming.insert(c.request);
        }
        self.shared.claims.insert(claim, c);
        self.out.push(Effect::Claim { claim, poll });
    }

    /// A claim's answer.
    pub(super) fn claimed(
        &mut self,
        claim: ClaimId,
        result: Result<Vec<Claimed>, crate::store::StorageError>,
    ) {
        let Some(mut c) = self.shared.claims.remove(&claim) else {
            return;
        };
        self.shared.claiming.remove(&c.request);
        match result {
            Ok(all) => {
                // Fewer rows than asked for: the queue has no more now.
                let more = all.len() as u32 >= c.asked;
                for got in all {
                    self.take_claimed(&mut c, got);
                }
                if more && (c.tasks.len() as u32) < c.max {
                    return self.next_claim(c);
                }
                self.claims_done(c);
            }
            Err(e) => {
                if let crate::store::StorageError::Ambiguous(_) = &e {
                    // The claim may have landed: a task handed to this
                    // session that it never got. Nobody here knows which
                    // execution it was; ending the session stops its
                    // contact, and the owner redelivers what it held once
                    // the contact is a session timeout old. The worker
                    // registers again.
                    self.end_session(&c.session, &stopped(&c.worker));
                }
                if c.tasks.is_empty() && !c.parked {
                    let message = e.to_string();
                    return self.reply(c.request, Response::error(503, "STORAGE_ERROR", message));
                }
                self.claims_done(c);
            }
        }
    }

    /// One row a claim took: the task joins the poll's answer.
    fn take_claimed(&mut self, c: &mut Claiming, got: Claimed) {
        let worker_id = c.worker.clone();
        let Claimed {
            execution_id,
            unit,
            task,
            token,
            mut body,
            entry,
            owner,
            ..
        } = got;
        body["token"] = json!(token);
        self.shared.handed.insert(
            token.clone(),
            Handed {
                execution_id: execution_id.clone(),
                session: c.session.clone(),
                worker_id: worker_id.clone(),
                at: self.now,
                confirmed: false,
                lost: None,
                sending: false,
            },
        );
        match serde_json::from_value::<Task>(body) {
            Ok(task) => c.tasks.push(task),
            // Unreadable, it cannot go out: its worker never gets it.
            Err(_) => self.lose(&token, not_received),
        }
        let dispatch = Dispatch {
            unit,
            task,
            token,
            session: c.session.clone(),
            node_id: owner.node_id.clone(),
            worker_id,
        };
        self.apply_own_dispatch(&execution_id, &owner, entry, &dispatch);
    }

    /// A claim whose `dispatch` entry went to this very node, at the epoch
    /// it owns the execution at: the entry is applied now instead of at
    /// the next read of the inbox (the read that finds it later skips it).
    fn apply_own_dispatch(
        &mut self,
        exec_id: &str,
        owner: &crate::store::Fence,
        entry: i64,
        dispatch: &Dispatch,
    ) {
        let me = self.config.node_id.as_deref();
        let ours = me == Some(owner.node_id.as_str())
            && self
                .executions
                .get(exec_id)
                .is_some_and(|e| e.epoch == Some(owner.epoch));
        if !ours {
            return;
        }
        let body = serde_json::to_value(dispatch).unwrap_or(Value::Null);
        self.inbox(vec![Entry {
            id: entry,
            execution_id: exec_id.to_string(),
            kind: Kind::Dispatch,
            body,
            created_at: self.now,
        }]);
    }

    /// Marks a hand-out of this node as lost (sent at the next tick), for
    /// `reason` of the worker it was handed to.
    fn lose(&mut self, token: &str, reason: fn(&str) -> String) {
        if let Some(h) = self.shared.handed.get_mut(token) {
            h.lost.get_or_insert_with(|| reason(&h.worker_id));
        }
    }

    /// A poll's claims are over: its tasks go out, or it parks (or stays
    /// parked), or it is answered empty.
    fn claims_done(&mut self, c: Claiming) {
        let still_parked = self.work.polls.contains_key(&c.request);
        if !c.tasks.is_empty() {
            if c.parked && !still_parked {
                // The poll ended (abandoned or expired) while it claimed:
                // its worker never gets these.
                for t in &c.tasks {
                    self.lose(&t.token, not_received);
                }
                return;
            }
            self.work.polls.remove(&c.request);
            let now = self.now;
            if let Some(s) = self.work.sessions.get_mut(c.session.as_str()) {
                s.last_seen = now;
            }
            return self.reply(c.request, Response::tasks(c.tasks));
        }
        if c.parked {
            return;
        }
        if c.wait_ms == 0 {
            return self.reply(c.request, Response::ok(200, json!({"tasks": []})));
        }
        let wait_ms = c.wait_ms.min(self.config.session_timeout_ms / 2).max(1);
        self.work.polls.insert(
            c.request,
            ParkedPoll {
                session_id: c.session.into(),
                max_tasks: c.max,
                deadline: self.now + wait_ms,
            },
        );
    }

    /// Parked polls without a claim in flight claim again.
    pub(super) fn claim_parked(&mut self) {
        let parked: Vec<(RequestId, String, u32)> = self
            .work
            .polls
            .iter()
            .filter(|(id, _)| !self.shared.claiming.contains(id))
            .map(|(id, p)| (*id, p.session_id.to_string(), p.max_tasks))
            .collect();
        for (request, session, max) in parked {
            self.next_claim(Claiming {
                request,
                session,
                max,
                wait_ms: 0,
                asked: 0,
                tasks: Vec::new(),
                parked: true,
                worker: String::new(),
            });
        }
    }

    /// Whether a parked poll has a claim in flight (it expires only once
    /// the claim is back, so a claimed task is never dropped).
    pub(super) fn poll_claiming(&self, id: RequestId) -> bool {
        self.shared.claiming.contains(&id)
    }

    /// Executions this node now owns, with their histories: recovered as
    /// after a restart. A copy in memory (an older claim of this node's)
    /// is dropped first.
    pub(super) fn adopt(&mut self, executions: Vec<(StoredExecution, u64)>) {
        let mut ids = Vec::new();
        for (stored, epoch) in executions {
            let id = stored.execution_id.clone();
            if self.executions.contains_key(&id) {
                self.give_up(&id, "fenced: this node took the execution back");
                self.give_up_uncreated_children(&id);
            }
            if stored.events.is_empty() {
                continue;
            }
            let hash = Projection::fold(&id, &stored.events).definition_hash;
            if !self.registry.by_hash.contains_key(&*hash) {
                // Deployed through another node: read the definitions, then
                // adopt it.
                self.ask_definitions();
                self.shared.unadopted.push((stored, epoch));
                continue;
            }
            if self.install(stored) {
                if let Some(e) = self.executions.get_mut(&id) {
                    e.epoch = Some(epoch);
                }
                ids.push(id);
            }
        }
        let in_flight = ids.iter().any(|id| {
            self.executions.get(id).is_some_and(|e| {
                e.proj
                    .tokens
                    .keys()
                    .any(|t| self.work.tokens.contains_key(t.as_ref()))
            })
        });
        if in_flight {
            // Deliveries of the old owner wait one session timeout for
            // their results (through the inbox) before they are redelivered.
            let until = self.now + self.config.session_timeout_ms;
            self.recovery_until = Some(self.recovery_until.map_or(until, |t| t.max(until)));
        }
        for id in &ids {
            self.refresh(id);
        }
        for id in &ids {
            self.retire(id);
        }
        self.load_missing_children();
        self.admission.needed = true;
    }

    /// The children of `parent` that memory holds but the store is not
    /// known to: written by a batch of the copy just given up (in flight,
    /// or answered `Ambiguous` and being read again). That batch was
    /// written at the old epoch, so it is fenced or landed before the
    /// take-back read the history; either way the history adopted says
    /// whether they exist, and kept, they would stand in for the children
    /// the adopted parent decides to start (seeds 0x4c, 0x1245).
    fn give_up_uncreated_children(&mut self, parent: &str) {
        let uncreated: Vec<String> = self
            .executions
            .children_of(parent)
            .filter(|(_, e)| e.proj.last_seq == 0)
            .map(|(id, _)| id.clone())
            .collect();
        for id in uncreated {
            self.give_up(&id, "fenced: this node took the execution back");
        }
    }

    /// Shared mode: a request names a workflow this node does not know,
    /// perhaps deployed through another node: it waits for the store's
    /// definitions (once). True when it waits.
    pub(super) fn definitions_first(&mut self, id: RequestId, request: &Request) -> bool {
        if !self.is_shared() || self.shared.definitions_read.remove(&id) {
            return false;
        }
        self.ask_definitions();
        self.shared.awaiting_definitions.push((id, request.clone()));
        true
    }

    fn ask_definitions(&mut self) {
        let asked =
            !self.shared.awaiting_definitions.is_empty() || !self.shared.unadopted.is_empty();
        if !asked {
            self.out.push(Effect::ReadDefinitions);
        }
    }

    /// The store's definitions: registered, then what waited for them
    /// runs again.
    pub(super) fn definitions_read(&mut self, definitions: Vec<super::batch::DefinitionRecord>) {
        for d in definitions {
            self.register(d);
        }
        let unadopted = std::mem::take(&mut self.shared.unadopted);
        if !unadopted.is_empty() {
            self.adopt(unadopted);
        }
        for (id, request) in std::mem::take(&mut self.shared.awaiting_definitions) {
            self.shared.definitions_read.insert(id);
            self.request(id, request);
        }
    }

    /// The reclaim after the start or the last drop is over.
    pub(super) fn reclaimed(&mut self) {
        self.shared.reclaimed = true;
    }

    /// Whether a token this node does not know may still turn out to be
    /// one of its own deliveries: in shared mode, before the reclaim after
    /// its start (or after a drop) has taken its executions back and
    /// adopted them. A restarted single server answers nothing before its
    /// recovery; a member answers, so a result it cannot judge yet gets a
    /// retryable answer, never the final `accepted: false` (seed 0x246b:
    /// the worker dropped the task, its next poll attached the delivery to
    /// its live session, and it was never redelivered).
    pub(super) fn may_know_later(&self, id: RequestId) -> bool {
        self.is_worker_call_here(id) && !(self.shared.reclaimed && self.shared.unadopted.is_empty())
    }

    /// Whether request `id` is a shared-mode member's own worker call (not
    /// an inbox entry applied here, nor a call of its own).
    fn is_worker_call_here(&self, id: RequestId) -> bool {
        self.is_shared() && id & INBOX_REQUESTS == 0 && !self.shared.local.contains(&id)
    }

    /// A result for `token` is refused as unknown (`accepted: false`, final):
    /// its worker drops the task. A member may come to hold the delivery
    /// afterwards — a takeover of a dead member's execution, or a reclaim
    /// — and a listing of the token the worker sent before it heard of the
    /// refusal must not attach it to the worker's live session, where it
    /// would never be found lost (seed 0x2b2836c6: `c0-e2`'s
    /// `compensate:charge`, refused at n2 just before n2 took `c0-e2` over
    /// from the dead n1, then listed by the worker's poll).
    pub(super) fn refused_unknown(&mut self, id: RequestId, token: &str) {
        if self.is_worker_call_here(id) {
            self.shared.refused.insert(token.to_string(), self.now);
        }
    }

    /// Whether a result for `token` was refused here as unknown lately.
    pub(super) fn refused_here(&self, token: &str) -> bool {
        self.shared.refused.contains_key(token)
    }

    /// Drops every execution this node owns (it lost the database for
    /// `--node-timeout`: another node may own them by now).
    pub(super) fn drop_owned(&mut self, reason: &str) {
        // Its own executions come back with the reclaim that follows.
        self.shared.reclaimed = false;
        // Waiting for definitions to be adopted: no longer this node's to
        // adopt (the reclaim after the drop takes back what still is).
        self.shared.unadopted.clear();
        let mut owned: Vec<String> = self
            .executions
            .iter()
            .filter(|(_, e)| e.epoch.is_some())
            .map(|(id, _)| id.to_string())
            .collect();
        owned.sort_unstable();
        for id in owned {
            self.give_up(&id, reason);
        }
    }
}
