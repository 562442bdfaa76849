//! The engine's state beside its executions, grouped by concern: the
//! definitions registry, the workers' side (sessions, queue, hand-outs,
//! parked calls), Idempotency-Keys being written, the batches in flight,
//! and admission.

use super::batch::{BatchId, DefinitionRecord};
use super::input::{Request, RequestId};
use super::keyed::{id_map, IdMap};
use super::queue::{Place, TaskQueue};
use super::state::{ParkedPoll, Session, TokenRef};
use super::txn::Txn;
use crate::history::{Millis, Name};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;

/// Registered definitions, and the deploys being written.
#[derive(Default)]
pub(super) struct Registry {
    /// By (name, version).
    pub by_name: BTreeMap<(String, String), Arc<DefinitionRecord>>,
    /// By definition hash (children are pinned by hash).
    pub by_hash: BTreeMap<String, Arc<DefinitionRecord>>,
    /// (name, version) → hash of definitions in a batch in flight.
    pub deploying: BTreeMap<(String, String), String>,
    /// Deploys waiting for the one in flight.
    pub waiting: VecDeque<(RequestId, Request)>,
    /// A deploy whose write had an unknown outcome, to be written again at
    /// the next tick (see `storage.rs`).
    pub unsettled: Option<Txn>,
}

/// The workers' side: sessions, the task queue, tokens handed out, and
/// the polls and waits parked until something happens.
#[derive(Default)]
pub(super) struct Work {
    /// Live worker sessions by id.
    pub sessions: BTreeMap<Name, Session>,
    /// Tokens of attempts in flight (hashed: looked up on every poll,
    /// result and listing; the loops over all of them do not depend on
    /// their order).
    pub tokens: IdMap<TokenRef>,
    /// Hand-outs no worker has confirmed yet (listed in a poll or a
    /// heartbeat), fresh or recovered from the store, by the time they were
    /// handed out or recovered: one still unconfirmed a session timeout
    /// later never arrived.
    pub unconfirmed: BTreeSet<(Millis, Name)>,
    /// Tokens whose attempt became uncertain, with the reason, waiting to
    /// be recorded.
    pub orphans: BTreeMap<String, String>,
    /// Tokens handed to a session in a batch still in flight, whose session
    /// ended meanwhile, with the reason their attempt becomes uncertain.
    pub lost_handouts: BTreeMap<String, String>,
    /// The task queue, oldest first and by task name.
    pub queue: TaskQueue,
    /// Execution → unit → its place in the queue (an execution's map
    /// stays, empty or not, until its index entries are removed). Hashed:
    /// only ever looked up by execution, never walked.
    pub queued: IdMap<BTreeMap<Name, Place>>,
    /// Long polls parked until tasks are handed to them or their deadline.
    pub polls: BTreeMap<RequestId, ParkedPoll>,
    /// `wait` calls parked until their execution ends or their deadline.
    pub waits: super::waits::Waits,
    /// Shared cluster mode: sessions of other nodes holding deliveries of
    /// executions owned here, by session.
    pub remote: BTreeMap<String, super::shared::RemoteSession>,
}

impl Work {
    /// Nothing yet; the id-keyed tables hashed with `seed`.
    pub fn new(seed: u64) -> Work {
        Work {
            tokens: id_map(seed),
            queued: id_map(seed),
            waits: super::waits::Waits::new(seed),
            ..Work::default()
        }
    }

    /// The queue place of `unit` of `exec_id`, when it is queued.
    pub fn place_of(&self, exec_id: &str, unit: &str) -> Option<Place> {
        self.queued.get(exec_id)?.get(unit).copied()
    }

    /// A batch of `exec_id` did not commit: the units it handed out may
    /// be taken again (every queued unit of the execution is put back).
    pub fn put_back(&mut self, exec_id: &str) {
        if let Some(units) = self.queued.get(exec_id) {
            for place in units.values() {
                self.queue.put_back(place);
            }
        }
    }
}

/// Idempotency-Keys whose record is in a batch in flight.
#[derive(Default)]
pub(super) struct Keys {
    /// Key → the batch writing its record.
    pub inflight: BTreeMap<String, BatchId>,
    /// Requests with a key in flight, run once its batch is decided.
    pub waiting: BTreeMap<String, Vec<(RequestId, Request)>>,
}

/// The batches handed to the driver and not yet answered.
#[derive(Default)]
pub(super) struct Writes {
    /// The last batch id given out.
    pub next: BatchId,
    /// Batches in flight, by id.
    pub batches: BTreeMap<BatchId, Txn>,
    /// Batches answered `Ambiguous`, settled by the reload under way.
    pub reloads: Vec<Txn>,
    /// While requests that arrived together are handled: the one batch
    /// they all write into (see `together`).
    pub open: Option<Txn>,
    /// Shared mode: starts of an execution given up while a batch of it
    /// was in flight, waiting for that batch (see `Engine::start`).
    pub after: BTreeMap<BatchId, Vec<(RequestId, Request)>>,
    /// Ids whose create was refused because the store holds them, until
    /// their reload is back: a read in the form of a write, so the stored
    /// execution comes in as a load brings one, with no re-decide asked
    /// for at the next tick.
    pub read_back: BTreeSet<String>,
}

/// Admission: executions waiting for a slot under their workflow's cap,
/// and those holding one.
#[derive(Default)]
pub(super) struct Admission {
    /// (created at, execution) waiting for a slot, oldest first.
    pub pending: BTreeSet<(Millis, String)>,
    /// Execution → the workflow whose slot it holds.
    pub active: BTreeMap<String, String>,
    /// A slot was freed or a write failed: try to admit at the next tick.
    pub needed: bool,
}
