//! Building a batch: drafts of executions (committed projection plus the
//! proposed events), the decider loop, and submission as an `Append`.
//! Nothing here touches committed memory: a draft is applied only when its
//! batch is `Ok`.

use super::batch::{
    Batch, ConsumedEntry, DefinitionRecord, ExecutionAppend, IdempotencyRecord, Summary,
};
use super::decide::{self, ChildView, Context};
use super::effect::{Effect, Response};
use super::input::{Request, RequestId};
use super::state::Exec;
use super::Engine;
use crate::history::{ErrorInfo, Event, EventKind, Name, Projection, Status};
use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;

/// Bound on decider rounds for one execution in one batch (a livelock
/// guard; real workflows need a handful).
const ROUNDS_MAX: usize = 100_000;

/// An execution's state inside a batch under construction.
#[derive(Clone)]
pub(crate) struct Draft {
    /// Committed projection with the proposed events applied.
    pub proj: Projection,
    /// Proposed events.
    pub events: Vec<Event>,
    /// The events once the batch is submitted (moved out of `events`,
    /// shared with the batch).
    pub sent: Arc<[Event]>,
    /// Last committed seq.
    pub base_seq: u64,
    /// The committed projection's status at `base_seq` (`None` for a new
    /// execution).
    pub base_status: Option<Status>,
    /// Pinned definition.
    pub def: Arc<DefinitionRecord>,
    /// The decider's last word on this draft, when it had nothing more to
    /// propose (see [`Settled`]).
    pub settled: Option<Settled>,
}

/// The decider found nothing to propose for a draft's projection: what
/// the decider would say again about the same projection once it is
/// committed, without running it.
///
/// The decider's answer depends on the projection, the definition, the
/// children it reads and the time. An answer with no events changes with
/// time only when something falls due, and then no later than its `wake`:
/// every time check (`now >= due`) that is false reports its `due` as a
/// wake-up candidate, and the wake is their minimum. So for the same
/// projection and definition, with no child to read, the answer at any
/// `now` before `wake` is the same empty one with the same `wake`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Settled {
    /// `last_seq` of the projection decided (every push raises it).
    pub seq: u64,
    /// The decider's wake-up.
    pub wake: Option<crate::history::Millis>,
}

impl Settled {
    /// The decision for the committed `p` at `now`, when this one still
    /// holds (the same projection, nothing due yet).
    pub fn decision(
        &self,
        p: &Projection,
        now: crate::history::Millis,
    ) -> Option<decide::Decision> {
        let holds = self.seq == p.last_seq && self.wake.is_none_or(|w| w > now);
        holds.then(|| decide::Decision {
            wake: self.wake,
            ..decide::Decision::default()
        })
    }
}

/// A reply that is sent once the batch commits.
pub(crate) struct PendingReply {
    /// The request.
    pub request: RequestId,
    /// The answer.
    pub response: Response,
    /// `(execution, seq)` whose presence in the store proves the request
    /// took effect (used after an ambiguous write).
    pub proof: Option<(String, u64)>,
}

/// A batch under construction, then in flight.
#[derive(Default)]
pub(crate) struct Txn {
    /// Drafts by execution id (boxed: a map node holds eleven, and most
    /// batches hold one).
    pub drafts: BTreeMap<String, Box<Draft>>,
    /// Definitions to register.
    pub definitions: Vec<DefinitionRecord>,
    /// Idempotency records.
    pub idempotency: Vec<IdempotencyRecord>,
    /// Replies after commit.
    pub replies: Vec<PendingReply>,
    /// Tokens handed to sessions by this batch: token -> session.
    pub deliveries: Vec<(String, Name)>,
    /// A deploy written again because an earlier write of it had an
    /// unknown outcome.
    pub unsettled: bool,
    /// After an unknown outcome: the proofs of `replies` the reload found
    /// in the store (see `Engine::note_proofs`).
    pub proved: BTreeSet<(String, u64)>,
    /// Starts that create a client-chosen id without reading the store
    /// first: (execution id, request). When the store already holds the
    /// id, the batch is a stale `Conflict`, and the start runs again once
    /// the execution is read back.
    pub unread_creates: Vec<(String, RequestId, Request)>,
    /// Shared cluster mode: inbox entries this batch consumes.
    pub consumed: Vec<ConsumedEntry>,
    /// Shared cluster mode: the batch puts tasks in the database's queue.
    pub enqueues: bool,
    /// Shared cluster mode: the epoch each execution was written at (a
    /// refusal fences that ownership only, not a newer one taken since).
    pub epochs: BTreeMap<String, u64>,
}

impl Txn {
    /// True when the batch would write nothing.
    pub fn is_empty(&self) -> bool {
        self.drafts
            .values()
            .all(|d| d.events.is_empty() && d.sent.is_empty())
            && self.definitions.is_empty()
            && self.idempotency.is_empty()
            && self.consumed.is_empty()
    }

    /// Adds a reply to send after commit.
    pub fn reply(&mut self, request: RequestId, response: Response, proof: Option<(String, u64)>) {
        self.replies.push(PendingReply {
            request,
            response,
            proof,
        });
    }
}

/// What a parent's decider sees of a child.
pub(crate) fn child_view(p: &Projection) -> ChildView {
    ChildView {
        status: p.status,
        output: p.output.clone(),
        error: p.error.clone(),
        cancel_requested: p.cancel.is_some(),
    }
}

impl Engine {
    /// Adds `exec_id` to `txn` (cloning its committed state, or taking the
    /// open batch's draft of it). False when it is unknown or blocked by
    /// another batch.
    pub(crate) fn draft(&self, txn: &mut Txn, exec_id: &str) -> bool {
        if txn.drafts.contains_key(exec_id) || self.take_open_draft(txn, exec_id) {
            return true;
        }
        let Some(e) = self.executions.get(exec_id) else {
            return false;
        };
        if e.blocked() {
            return false;
        }
        txn.drafts.insert(
            exec_id.to_string(),
            Box::new(Draft {
                proj: e.proj.clone(),
                events: Vec::new(),
                sent: Arc::default(),
                base_seq: e.proj.last_seq,
                base_status: Some(e.proj.status),
                def: e.def.clone(),
                settled: None,
            }),
        );
        true
    }

    /// Adds a new execution to `txn`.
    pub(crate) fn draft_new(&self, txn: &mut Txn, exec_id: &str, def: Arc<DefinitionRecord>) {
        txn.drafts.insert(
            exec_id.to_string(),
            Box::new(Draft {
                proj: Projection::new(exec_id),
                events: Vec::new(),
                sent: Arc::default(),
                base_seq: 0,
                base_status: None,
                def,
                settled: None,
            }),
        );
    }

    /// Appends one event to a drafted execution; returns its seq.
    pub(crate) fn push(&self, txn: &mut Txn, exec_id: &str, kind: EventKind) -> u64 {
        let Some(d) = txn.drafts.get_mut(exec_id) else {
            return 0;
        };
        let event = Event {
            seq: d.proj.last_seq + 1,
            at: self.now,
            kind,
        };
        d.proj.apply(&event);
        d.events.push(event);
        d.settled = None;
        d.proj.last_seq
    }

    /// Runs the decider on drafted executions until nothing more is
    /// proposed (children it starts or cancels are drafted and settled too).
    pub(crate) fn settle(&mut self, txn: &mut Txn, exec_id: &str) {
        self.settle_from(txn, exec_id, None);
    }

    /// [`Engine::settle`], with `first` as the decider's first answer for
    /// `exec_id` when the caller already has it (for a draft just taken
    /// from the committed state, at this `now`).
    pub(crate) fn settle_from(
        &mut self,
        txn: &mut Txn,
        exec_id: &str,
        mut first: Option<decide::Decision>,
    ) {
        // Children started or cancelled here are settled after `exec_id`
        // (most settles have none: nothing is allocated for them).
        let mut todo: VecDeque<String> = VecDeque::new();
        let mut next = Some(Cow::Borrowed(exec_id));
        let mut rounds = 0;
        while let Some(id) = next.take().or_else(|| todo.pop_front().map(Cow::Owned)) {
            let id: &str = &id;
            loop {
                rounds += 1;
                if rounds > ROUNDS_MAX {
                    return;
                }
                let decision = if let Some(decision) = first.take() {
                    decision
                } else {
                    let Some(d) = txn.drafts.get(id) else { break };
                    let drafts = &txn.drafts;
                    let execs = &self.executions;
                    let children = |cid: &str| {
                        drafts
                            .get(cid)
                            .map(|c| child_view(&c.proj))
                            .or_else(|| execs.get(cid).map(|c| child_view(&c.proj)))
                    };
                    let cx = Context {
                        workflow: &d.def.workflow,
                        now: self.now,
                        children: &children,
                    };
                    decide::decide(&cx, &d.proj)
                };
                if decision.events.is_empty()
                    && decision.start_children.is_empty()
                    && decision.cancel_children.is_empty()
                {
                    if let Some(d) = txn.drafts.get_mut(id) {
                        // Without children the answer reads nothing but the
                        // projection, the definition and the time.
                        d.settled = d.proj.index.children.is_empty().then_some(Settled {
                            seq: d.proj.last_seq,
                            wake: decision.wake,
                        });
                    }
                    break;
                }
                let mut progressed = !decision.events.is_empty();
                for kind in decision.events {
                    self.push(txn, id, kind);
                }
                // Children join their parent's trace.
                let traceparent = if decision.start_children.is_empty() {
                    None
                } else {
                    txn.drafts.get(id).and_then(|d| d.proj.traceparent.clone())
                };
                for start in decision.start_children {
                    if self.executions.contains_key(&start.child_id)
                        || txn.drafts.contains_key(&start.child_id)
                    {
                        continue;
                    }
                    let Some(def) = self.registry.by_hash.get(&start.definition_hash).cloned()
                    else {
                        // Deploy refuses such definitions; a store that lost
                        // the child's definition must not leave the parent
                        // waiting forever.
                        self.push(
                            txn,
                            id,
                            EventKind::ChildFailed {
                                step: start.unit,
                                child_id: start.child_id,
                                error: ErrorInfo {
                                    code: "CHILD_NOT_REGISTERED".to_string(),
                                    message: format!(
                                        "no definition with hash {} is registered",
                                        start.definition_hash
                                    ),
                                    retryable: false,
                                },
                            },
                        );
                        progressed = true;
                        continue;
                    };
                    self.draft_new(txn, &start.child_id, def.clone());
                    self.push(
                        txn,
                        &start.child_id,
                        EventKind::WorkflowCreated {
                            workflow: def.workflow.name.clone(),
                            version: def.workflow.version.clone(),
                            definition_hash: def.definition_hash.clone(),
                            input: start.input,
                            parent: Some(id.to_owned()),
                            traceparent: traceparent.clone(),
                        },
                    );
                    self.push(txn, &start.child_id, EventKind::WorkflowStarted {});
                    todo.push_back(start.child_id);
                }
                for child in decision.cancel_children {
                    if !self.draft(txn, &child) {
                        // Busy child: try again shortly.
                        self.retry_soon(id);
                        continue;
                    }
                    let requested = txn
                        .drafts
                        .get(&child)
                        .is_some_and(|c| c.proj.cancel.is_some());
                    if !requested {
                        self.cancel_events(txn, &child, Some("parent cancelled".to_string()));
                        progressed = true;
                        todo.push_back(child);
                    }
                }
                if !progressed {
                    break;
                }
            }
        }
    }

    /// Events cancelling a drafted execution (a pending one ends at once).
    pub(crate) fn cancel_events(
        &self,
        txn: &mut Txn,
        exec_id: &str,
        reason: Option<String>,
    ) -> u64 {
        let pending = txn
            .drafts
            .get(exec_id)
            .is_some_and(|d| d.proj.status == Status::Pending);
        let seq = self.push(txn, exec_id, EventKind::WorkflowCancelRequested { reason });
        if pending {
            return self.push(txn, exec_id, EventKind::WorkflowCancelled {});
        }
        seq
    }

    /// Emits the batch (or, when it writes nothing, its replies at once).
    pub(crate) fn submit(&mut self, txn: Txn) {
        let Some(mut txn) = self.join_open(txn) else {
            return;
        };
        if txn.is_empty() {
            for r in txn.replies {
                self.out.push(Effect::Reply {
                    request: r.request,
                    response: r.response,
                });
            }
            return;
        }
        self.hand_off(&mut txn);
        self.writes.next += 1;
        let id = self.writes.next;
        let mut executions = Vec::with_capacity(txn.drafts.len());
        let mut queue = Vec::new();
        let mut epochs = Vec::new();
        self.consume_replied(&mut txn);
        for (exec_id, d) in &mut txn.drafts {
            if !d.events.is_empty() {
                d.sent = std::mem::take(&mut d.events).into();
            }
            if d.sent.is_empty() {
                continue;
            }
            let epoch = self.epoch_for(exec_id);
            if self.is_shared() {
                queue.extend(self.queue_ops(exec_id, d));
                if let Some(e) = epoch {
                    epochs.push((exec_id.clone(), e));
                }
            }
            executions.push(ExecutionAppend {
                execution_id: exec_id.clone(),
                expected_last_seq: d.base_seq,
                expected_status: d.base_status,
                epoch,
                events: d.sent.clone(),
                summary: summary(&d.proj),
            });
            match self.executions.get_mut(exec_id) {
                Some(e) => e.busy = Some(id),
                None => {
                    self.executions.insert(Box::new(Exec {
                        proj: Projection::new(exec_id),
                        def: d.def.clone(),
                        busy: Some(id),
                        reloading: false,
                        waiting: VecDeque::new(),
                        wake: None,
                        active_at: self.now,
                        idle_watched: false,
                        epoch,
                    }));
                }
            }
        }
        for r in &txn.idempotency {
            self.keys.inflight.insert(r.key.clone(), id);
        }
        for d in &txn.definitions {
            self.registry.deploying.insert(
                (d.workflow.name.clone(), d.workflow.version.clone()),
                d.definition_hash.clone(),
            );
        }
        txn.epochs.extend(epochs);
        txn.enqueues = queue
            .iter()
            .any(|op| matches!(op, crate::store::QueueOp::Enqueue { .. }));
        self.out.push(Effect::Append(Batch {
            id,
            executions,
            definitions: txn.definitions.clone(),
            idempotency: txn.idempotency.clone(),
            queue,
            consumed: txn.consumed.clone(),
        }));
        self.writes.batches.insert(id, txn);
    }
}

/// The stored summary of a projection.
pub(crate) fn summary(p: &Projection) -> Summary {
    Summary {
        execution_id: p.execution_id.clone(),
        workflow: p.workflow.clone(),
        version: p.version.clone(),
        definition_hash: p.definition_hash.clone(),
        parent: p.parent.clone(),
        status: p.status,
        input: p.input.clone(),
        output: p.output.clone(),
        error: p.error.clone(),
        created_at: p.created_at,
        updated_at: p.updated_at,
        last_seq: p.last_seq,
    }
}
