//! The simulated store: an in-memory, crash-consistent implementation of
//! the core's [`Storage`] contract. A committed transaction is applied
//! atomically and survives every crash; a transaction that was in flight
//! when the server died either landed whole or not at all (the world
//! decides). Faults (unavailable, ambiguous, slow commits) are injected by
//! the world around [`SimStore::apply`]; the store itself is honest unless a
//! planted bug ([`StoreBug`]) is switched on for the "teeth" tests. The
//! calls of shared cluster mode (membership, takeover, inbox, claims) are
//! in [`shared`], with the same fault model ([`shared::Faulty`]).

use async_trait::async_trait;
use orbit_core::cluster::{check_leader, LeaseState};
use orbit_core::history::{Event, Millis};
use orbit_core::store::{
    check, is_terminal, DefinitionRecord, ExecutionRow, IdempotencyRecord, ListFilter, Owner,
    QueueOp, Storage, StorageError, StoredExecution, Transaction,
};
use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard};

pub mod shared;

/// Deliberate store bugs, for tests that prove the checkers have teeth.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum StoreBug {
    /// An honest store.
    #[default]
    None,
    /// A crash silently drops the most recent committed transaction (a
    /// write acknowledged before it was durable).
    LoseLastCommitOnCrash,
    /// Shared mode: a commit writes the events of the inbox entries it
    /// consumes but leaves the entries in the inbox (applied again later).
    KeepConsumedEntries,
    /// Shared mode: a takeover moves executions to the new owner without
    /// bumping their epoch (a paused owner that gets one back can write
    /// beside it).
    TakeOverKeepsEpoch,
    /// Shared mode: a claim answers the oldest queue row as claimed but
    /// applies nothing (the row stays queued, no `dispatch` entry reaches
    /// the owner): a task is handed out without its claim committed.
    ClaimNotApplied,
    /// Shared mode: a commit whose appends or consumed entries the epoch
    /// check fences is applied anyway (a paused owner that wakes up after
    /// a takeover writes beside the new owner).
    AcceptFencedWrites,
}

#[derive(Debug, Clone)]
struct Row {
    row: ExecutionRow,
    events: Vec<Event>,
    owner_node: String,
    owner_epoch: u64,
}

#[derive(Debug, Clone, Default)]
struct State {
    executions: BTreeMap<String, Row>,
    definitions: Vec<DefinitionRecord>,
    idempotency: BTreeMap<(String, String), IdempotencyRecord>,
    queue: BTreeMap<(String, String), QueueOp>,
    commits: u64,
    /// The `--cluster` leader lease row, judged by the database's clock.
    lease: LeaseState,
    /// Shared cluster mode: the inbox, node and worker contacts, and the
    /// database's clock.
    shared: shared::Tables,
}

/// The simulated durable store.
#[derive(Debug, Default)]
pub struct SimStore {
    state: Mutex<State>,
    before_last: Mutex<Option<State>>,
    bug: StoreBug,
}

impl SimStore {
    /// An empty, honest store.
    pub fn new() -> SimStore {
        SimStore::default()
    }

    /// An empty store with a planted bug.
    pub fn with_bug(bug: StoreBug) -> SimStore {
        SimStore {
            bug,
            ..SimStore::default()
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Applies `tx` atomically, or returns `Conflict` (nothing applied) as
    /// the shared rule ([`check`]) decides.
    pub fn apply(&self, tx: &Transaction) -> Result<(), StorageError> {
        let mut s = self.lock();
        if let Some(w) = &tx.writer {
            let names = !(tx.appends.is_empty() && tx.inbox_consumed.is_empty());
            if names && !s.member_live(&w.node_id, w.timeout_ms) {
                return Err(orbit_core::store::writer_not_live(tx));
            }
        }
        let checked = check(
            &tx.appends,
            &tx.inbox_consumed,
            |id| {
                s.executions.get(id).map(|r| Owner {
                    last_seq: r.events.last().map_or(0, |e| e.seq),
                    node_id: &r.owner_node,
                    epoch: r.owner_epoch,
                })
            },
            |id| s.shared.inbox.get(&id).map(|e| e.execution_id.as_str()),
        );
        match checked {
            Err(StorageError::Conflict { fenced, stale })
                if self.bug == StoreBug::AcceptFencedWrites
                    && !fenced.is_empty()
                    && stale.is_empty() => {}
            other => other?,
        }
        if tx.writer.is_some() && !tx.appends.is_empty() {
            // Shared mode: a live record another member wrote first stays,
            // and this transaction is refused, nothing applied.
            let now = s.now();
            let taken = tx.idempotency.iter().any(|r| {
                s.idempotency
                    .get(&(r.scope.clone(), r.key.clone()))
                    .is_some_and(|old| old.expires_at > now)
            });
            if taken {
                return Err(orbit_core::store::key_taken(tx));
            }
        }
        if self.bug == StoreBug::LoseLastCommitOnCrash {
            *self.before_last.lock().unwrap_or_else(|e| e.into_inner()) = Some(s.clone());
        }
        for a in &tx.appends {
            let r = s
                .executions
                .entry(a.execution_id.clone())
                .or_insert_with(|| Row {
                    row: a.projection.clone(),
                    events: Vec::new(),
                    owner_node: String::new(),
                    owner_epoch: 0,
                });
            r.events.extend(a.events.iter().cloned());
            r.row = a.projection.clone();
            r.row.last_seq = r.events.last().map_or(0, |e| e.seq);
            if let Some(f) = &a.fence {
                r.owner_node = f.node_id.clone();
                r.owner_epoch = f.epoch;
            }
        }
        for d in &tx.definitions {
            if !s
                .definitions
                .iter()
                .any(|x| x.name == d.name && x.version == d.version)
            {
                s.definitions.push(d.clone());
            }
        }
        for r in &tx.idempotency {
            s.idempotency
                .insert((r.scope.clone(), r.key.clone()), r.clone());
        }
        for op in &tx.queue {
            match op {
                QueueOp::Enqueue {
                    execution_id, unit, ..
                } => {
                    s.queue
                        .insert((execution_id.clone(), unit.clone()), op.clone());
                }
                QueueOp::Remove { execution_id, unit } => {
                    s.queue.remove(&(execution_id.clone(), unit.clone()));
                }
            }
        }
        if self.bug != StoreBug::KeepConsumedEntries {
            for c in &tx.inbox_consumed {
                s.shared.inbox.remove(&c.id);
            }
        }
        s.commits += 1;
        Ok(())
    }

    /// Applies `tx` as the leader `node` of term `epoch` would: the lease
    /// row is checked in the same transaction (unless `fenced` is off, a
    /// planted bug), and a refusal applies nothing.
    pub fn apply_as_leader(
        &self,
        tx: &Transaction,
        node: &str,
        epoch: u64,
        fenced: bool,
    ) -> Result<(), StorageError> {
        if fenced {
            let lease = self.lock().lease.clone();
            check_leader(&lease.holder, lease.epoch, node, epoch)?;
        }
        self.apply(tx)
    }

    /// The lease row at the database's time `db_now`.
    pub fn lease(&self, db_now: Millis) -> LeaseState {
        LeaseState {
            db_now_ms: db_now,
            ..self.lock().lease.clone()
        }
    }

    /// Takes the lease for `node` with the next epoch, valid for `ttl_ms`
    /// from `db_now`, if it has expired as judged at `judged_at` (the
    /// database's `now` unless a planted bug substitutes the node's clock).
    /// Returns the new epoch, or `None` when it is held.
    pub fn lease_take(
        &self,
        node: &str,
        ttl_ms: Millis,
        db_now: Millis,
        judged_at: Millis,
    ) -> Option<u64> {
        let mut s = self.lock();
        if s.lease.expires_at_ms > judged_at {
            return None;
        }
        s.lease.holder = node.to_owned();
        s.lease.epoch += 1;
        s.lease.expires_at_ms = db_now + ttl_ms;
        Some(s.lease.epoch)
    }

    /// Extends `node`'s term `epoch` to `ttl_ms` from `db_now`; refused with
    /// the lease as it is when the lease moved on.
    pub fn lease_renew(
        &self,
        node: &str,
        epoch: u64,
        ttl_ms: Millis,
        db_now: Millis,
    ) -> Result<(), LeaseState> {
        let mut s = self.lock();
        if s.lease.holder == node && s.lease.epoch == epoch {
            s.lease.expires_at_ms = db_now + ttl_ms;
            Ok(())
        } else {
            Err(LeaseState {
                db_now_ms: db_now,
                ..s.lease.clone()
            })
        }
    }

    /// Ends `node`'s term `epoch` now (a clean hand-over).
    pub fn lease_release(&self, node: &str, epoch: u64, db_now: Millis) -> bool {
        let mut s = self.lock();
        if s.lease.holder == node && s.lease.epoch == epoch {
            s.lease.expires_at_ms = db_now;
            true
        } else {
            false
        }
    }

    /// The server process died: committed state stays (unless a bug is
    /// planted).
    pub fn crash(&self) {
        if self.bug == StoreBug::LoseLastCommitOnCrash {
            if let Some(prev) = self
                .before_last
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .take()
            {
                *self.lock() = prev;
            }
        }
    }

    /// Number of transactions committed so far.
    pub fn commits(&self) -> u64 {
        self.lock().commits
    }

    /// Every registered definition, oldest first.
    pub fn definitions(&self) -> Vec<DefinitionRecord> {
        self.lock().definitions.clone()
    }

    /// Every execution with its history, oldest first.
    pub fn all(&self) -> Vec<StoredExecution> {
        let s = self.lock();
        let mut v: Vec<StoredExecution> = s.executions.values().map(stored).collect();
        v.sort_by(|a, b| (a.row.created_at, &a.row.id).cmp(&(b.row.created_at, &b.row.id)));
        v
    }

    /// One execution's history (empty when unknown).
    pub fn events(&self, id: &str) -> Vec<Event> {
        self.lock()
            .executions
            .get(id)
            .map(|r| r.events.clone())
            .unwrap_or_default()
    }

    /// Calls `f` with every execution's row and history, without copying.
    pub fn for_each(&self, mut f: impl FnMut(&ExecutionRow, &[Event])) {
        let s = self.lock();
        for r in s.executions.values() {
            f(&r.row, &r.events);
        }
    }

    /// The live idempotency record of an engine key at `now` (the engine
    /// writes with an empty scope).
    pub fn live_record(&self, key: &str, now: u64) -> Option<IdempotencyRecord> {
        self.lock()
            .idempotency
            .get(&(String::new(), key.to_owned()))
            .filter(|r| r.expires_at > now)
            .cloned()
    }

    /// Live idempotency records at `now`.
    pub fn live_idempotency(&self, now: u64) -> Vec<IdempotencyRecord> {
        self.lock()
            .idempotency
            .values()
            .filter(|r| r.expires_at > now)
            .cloned()
            .collect()
    }
}

fn stored(r: &Row) -> StoredExecution {
    StoredExecution {
        row: r.row.clone(),
        events: r.events.clone(),
    }
}

#[async_trait]
impl Storage for SimStore {
    async fn commit(&self, tx: &Transaction) -> Result<(), StorageError> {
        self.apply(tx)
    }

    async fn load_definitions(&self) -> Result<Vec<DefinitionRecord>, StorageError> {
        Ok(self.definitions())
    }

    async fn load_active(&self) -> Result<Vec<StoredExecution>, StorageError> {
        Ok(self
            .all()
            .into_iter()
            .filter(|e| !is_terminal(&e.row.status))
            .collect())
    }

    async fn load_all(&self) -> Result<Vec<StoredExecution>, StorageError> {
        Ok(self.all())
    }

    async fn idempotency_records(&self, now: u64) -> Result<Vec<IdempotencyRecord>, StorageError> {
        Ok(self.live_idempotency(now))
    }

    async fn count_by_status(&self) -> Result<Vec<(String, u64)>, StorageError> {
        let mut counts: BTreeMap<String, u64> = BTreeMap::new();
        for r in self.lock().executions.values() {
            *counts.entry(r.row.status.clone()).or_default() += 1;
        }
        Ok(counts.into_iter().collect())
    }

    async fn load_execution(&self, id: &str) -> Result<Option<StoredExecution>, StorageError> {
        Ok(self.lock().executions.get(id).map(stored))
    }

    async fn execution(&self, id: &str) -> Result<Option<ExecutionRow>, StorageError> {
        Ok(self.lock().executions.get(id).map(|r| r.row.clone()))
    }

    async fn history(
        &self,
        id: &str,
        after_seq: u64,
        limit: u32,
    ) -> Result<Vec<Event>, StorageError> {
        Ok(self
            .lock()
            .executions
            .get(id)
            .map(|r| {
                r.events
                    .iter()
                    .filter(|e| e.seq > after_seq)
                    .take(limit as usize)
                    .cloned()
                    .collect()
            })
            .unwrap_or_default())
    }

    async fn list_executions(
        &self,
        filter: &ListFilter,
    ) -> Result<Vec<ExecutionRow>, StorageError> {
        let s = self.lock();
        let mut rows: Vec<&ExecutionRow> = s
            .executions
            .values()
            .map(|r| &r.row)
            .filter(|r| filter.status.as_ref().is_none_or(|st| &r.status == st))
            .filter(|r| filter.workflow.as_ref().is_none_or(|w| &r.workflow == w))
            .filter(|r| {
                filter.before.as_ref().is_none_or(|(at, id)| {
                    r.created_at < *at || (r.created_at == *at && &r.id < id)
                })
            })
            .collect();
        rows.sort_by(|a, b| (b.created_at, &b.id).cmp(&(a.created_at, &a.id)));
        Ok(rows
            .into_iter()
            .take(filter.limit as usize)
            .cloned()
            .collect())
    }

    async fn idempotency(
        &self,
        scope: &str,
        key: &str,
        now: u64,
    ) -> Result<Option<IdempotencyRecord>, StorageError> {
        Ok(self
            .lock()
            .idempotency
            .get(&(scope.to_owned(), key.to_owned()))
            .filter(|r| r.expires_at > now)
            .cloned())
    }

    async fn queue(&self) -> Result<Vec<QueueOp>, StorageError> {
        let s = self.lock();
        let mut ops: Vec<&QueueOp> = s.queue.values().collect();
        ops.sort_by_key(|op| match op {
            QueueOp::Enqueue {
                execution_id,
                unit,
                enqueued_at,
                ..
            } => (*enqueued_at, execution_id.clone(), unit.clone()),
            QueueOp::Remove { execution_id, unit } => (0, execution_id.clone(), unit.clone()),
        });
        Ok(ops.into_iter().cloned().collect())
    }

    async fn ping(&self) -> Result<(), StorageError> {
        Ok(())
    }
}
