//! The storage contract both drivers commit through: a transaction as data
//! ([`Transaction`]), the outcomes a commit can have ([`StorageError`]), the
//! [`Storage`] trait the backends implement (SQLite and PostgreSQL in
//! `orbit-io-tokio`, the simulated store in `orbit-io-sim`), the one rule
//! that decides when an append conflicts ([`conflict`]), the conformance
//! suite every backend passes ([`contract`]), and the translation between
//! the engine's batches and these records ([`convert`]). The calls of
//! shared cluster mode beyond commits (membership, takeover, inbox, queue
//! claims, worker contact) are the [`shared::Store`] trait.
//!
//! The trait is async (through `async-trait`) but this module runs nothing:
//! it names no executor and performs no I/O.

pub mod conflict;
pub mod contract;
pub mod convert;
pub mod page;
mod records;
pub mod shared;

pub use conflict::{check, check_appends, check_claims, Claim, Owner};
pub use page::ListPage;
pub use records::{
    Append, Consumed, DefinitionRecord, ExecutionRow, Fence, IdempotencyRecord, ListFilter,
    QueueOp, StoredExecution, Transaction, Writer,
};

use crate::history::Event;
use async_trait::async_trait;

/// Why a commit (or a read) did not succeed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StorageError {
    /// Nothing was applied; retrying later may work.
    #[error("storage unavailable: {0}")]
    Unavailable(String),
    /// Nothing was applied: an append's expected `seq` was stale, or its
    /// writer's epoch was fenced out by a newer owner.
    #[error("conflict: fenced {fenced:?}, stale {stale:?}")]
    Conflict {
        /// Executions whose owner epoch is newer than the writer's.
        fenced: Vec<String>,
        /// Executions whose last committed `seq` differs from the expected one.
        stale: Vec<String>,
    },
    /// The outcome is unknown (e.g. the connection failed during COMMIT): the
    /// transaction may or may not be durable. It is over, though: every
    /// later call of the same store sees its final outcome — it never lands
    /// after a read that did not see it (PostgreSQL settles it before its
    /// next call; SQLite rolls back in process; the simulated store decides
    /// at once). The engine's reload after `Ambiguous` relies on this.
    #[error("commit outcome unknown: {0}")]
    Ambiguous(String),
}

/// A transaction to be built by the store that commits it
/// ([`Storage::commit_signalling`]).
pub type MakeTransaction = Box<dyn FnOnce() -> Transaction + Send>;

/// A durable store of definitions, histories and execution projections.
///
/// Implementations: `SqliteStore` and `PostgresStore` (in `orbit-io-tokio`)
/// and the simulation's `SimStore`; all pass the same [`contract`] suite and
/// decide conflicts with [`check`].
#[async_trait]
pub trait Storage: Send + Sync {
    /// Applies `tx` atomically: every part of it, or nothing.
    async fn commit(&self, tx: &Transaction) -> Result<(), StorageError>;
    /// [`Storage::commit`] of the transaction `make` builds, built where
    /// the store writes it (SQLite: on its commit thread, so the caller's
    /// thread, which runs the engine, spends no time building and encoding
    /// rows). `written` is called once the transaction holds none of the
    /// store's write resources any more and waits only to be durable
    /// (SQLite: its frames are in the WAL, the sync is to come); a store
    /// whose commits are durable when written never calls it.
    async fn commit_signalling(
        &self,
        make: MakeTransaction,
        written: &(dyn Fn() + Send + Sync),
    ) -> Result<(), StorageError> {
        let _ = written;
        self.commit(&make()).await
    }
    /// Every registered definition, oldest first.
    async fn load_definitions(&self) -> Result<Vec<DefinitionRecord>, StorageError>;
    /// Every non-terminal execution with its full history (for recovery).
    async fn load_active(&self) -> Result<Vec<StoredExecution>, StorageError>;
    /// Every execution, terminal ones included, with its full history,
    /// oldest first.
    async fn load_all(&self) -> Result<Vec<StoredExecution>, StorageError>;
    /// Every idempotency record still live at `now`.
    async fn idempotency_records(&self, now: u64) -> Result<Vec<IdempotencyRecord>, StorageError>;
    /// How many executions have each status.
    async fn count_by_status(&self) -> Result<Vec<(String, u64)>, StorageError>;
    /// One execution with its full history, if it exists.
    async fn load_execution(&self, id: &str) -> Result<Option<StoredExecution>, StorageError>;
    /// One execution's projection, if it exists.
    async fn execution(&self, id: &str) -> Result<Option<ExecutionRow>, StorageError>;
    /// Events of one execution with `seq > after_seq`, in order, at most `limit`.
    async fn history(
        &self,
        id: &str,
        after_seq: u64,
        limit: u32,
    ) -> Result<Vec<Event>, StorageError>;
    /// Executions matching `filter`, newest first.
    async fn list_executions(&self, filter: &ListFilter)
        -> Result<Vec<ExecutionRow>, StorageError>;
    /// The live idempotency record for `(scope, key)` at time `now`.
    async fn idempotency(
        &self,
        scope: &str,
        key: &str,
        now: u64,
    ) -> Result<Option<IdempotencyRecord>, StorageError>;
    /// The task-queue rows, oldest first.
    async fn queue(&self) -> Result<Vec<QueueOp>, StorageError>;
    /// Checks that the store answers.
    async fn ping(&self) -> Result<(), StorageError>;
    /// Deletes idempotency records expired at `now` (a background chore;
    /// expired records are already ignored by every read). Returns how many
    /// went. The default keeps them.
    async fn purge_idempotency(&self, now: u64) -> Result<u64, StorageError> {
        let _ = now;
        Ok(0)
    }
    /// Checks that the store could take a write now (for `/readyz`). The
    /// default only pings; backends override it with a real write check.
    async fn check_writable(&self) -> Result<(), StorageError> {
        self.ping().await
    }
    /// A page of `GET /v1/executions`: rows matching `page`, newest first.
    /// The backends answer it from one index whatever the filters; the
    /// default filters [`Storage::list_executions`] pages in memory.
    async fn list_page(&self, page: &ListPage) -> Result<Vec<ExecutionRow>, StorageError> {
        page::filtered(self, page).await
    }
    /// Retention: deletes up to `limit` finished top-level executions whose
    /// last event is older than `finished_before`, each together with its
    /// descendants (`<id>.…`), their histories and queue rows — only when
    /// every one of them is finished. Returns how many executions went
    /// (descendants included); fewer than `limit` roots means none is left.
    /// The default deletes nothing.
    async fn purge_finished(
        &self,
        finished_before: u64,
        limit: u32,
    ) -> Result<Purged, StorageError> {
        let _ = (finished_before, limit);
        Ok(Purged::default())
    }
}

/// What one retention round deleted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Purged {
    /// Finished top-level executions old enough that were looked at.
    pub scanned: u64,
    /// Top-level executions deleted.
    pub roots: u64,
    /// Executions deleted in all (children included).
    pub executions: u64,
}

/// The refusal of a shared-mode write whose member is not live: every
/// execution the transaction names is fenced.
pub fn writer_not_live(tx: &Transaction) -> StorageError {
    let mut fenced: Vec<String> = tx
        .appends
        .iter()
        .map(|a| a.execution_id.clone())
        .chain(tx.inbox_consumed.iter().map(|c| c.execution_id.clone()))
        .collect();
    fenced.sort();
    fenced.dedup();
    StorageError::Conflict {
        fenced,
        stale: Vec::new(),
    }
}

/// The refusal of a shared-mode transaction whose Idempotency-Key record
/// another member wrote first (still live): the executions it appends are
/// named stale, nothing applied. The request is answered
/// `503 STORAGE_ERROR`; retried, it finds the other member's record and
/// replays its answer.
pub fn key_taken(tx: &Transaction) -> StorageError {
    let mut stale: Vec<String> = tx.appends.iter().map(|a| a.execution_id.clone()).collect();
    stale.sort();
    stale.dedup();
    StorageError::Conflict {
        fenced: Vec::new(),
        stale,
    }
}

/// Whether an execution status is terminal.
pub fn is_terminal(status: &str) -> bool {
    matches!(status, "completed" | "failed" | "cancelled")
}
