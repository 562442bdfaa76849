//! The batch format: what storage must write atomically, and what it answers.
//!
//! One [`Batch`] is one transaction: every [`ExecutionAppend`] (events with
//! the sequence check — and the epoch check in cluster modes — plus the new
//! projection [`Summary`]), every definition registration and every API
//! idempotency record, all or nothing. A driver may group several batches
//! into one transaction (group commit) but answers each with its own
//! [`StorageResult`].

use crate::history::{Event, Millis, Status, WorkflowError};
use crate::ir;
use serde::{Deserialize, Serialize};

/// Identifies a batch in [`super::Input::Stored`].
pub type BatchId = u64;

/// One atomic write.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Batch {
    /// Echo it in [`super::Input::Stored`].
    pub id: BatchId,
    /// Appends, at most one per execution.
    pub executions: Vec<ExecutionAppend>,
    /// Definitions to register (insert; an identical row already present is
    /// not an error).
    pub definitions: Vec<DefinitionRecord>,
    /// API idempotency records to insert (or replace, when expired).
    pub idempotency: Vec<IdempotencyRecord>,
    /// Shared cluster mode: the task-queue rows of units that joined or
    /// left the queue through these events (any node's poll claims them).
    pub queue: Vec<crate::store::QueueOp>,
    /// Shared cluster mode: inbox entries applied by this batch, deleted
    /// with the events they caused.
    pub consumed: Vec<ConsumedEntry>,
}

/// An inbox entry a batch consumes (shared cluster mode).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConsumedEntry {
    /// The entry's id.
    pub entry: i64,
    /// The execution it was for.
    pub execution_id: String,
    /// This node's epoch for that execution (judged like an append's).
    pub epoch: u64,
}

/// New events of one execution.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExecutionAppend {
    /// The execution.
    pub execution_id: String,
    /// The seq of the last event the engine knows as committed (0 for a new
    /// execution). Storage applies the batch only if its last stored seq is
    /// exactly this; otherwise the whole batch is a `Conflict` naming this
    /// execution as stale.
    pub expected_last_seq: u64,
    /// The execution's status at `expected_last_seq` (`None` for a new
    /// execution). Storage may use it to write a change of status in one
    /// statement; the conflict rule never depends on it.
    #[serde(default)]
    pub expected_status: Option<Status>,
    /// The writer's epoch (cluster shared mode); storage refuses the batch
    /// (`Conflict`, `fenced:`) when the execution's owner epoch differs.
    pub epoch: Option<u64>,
    /// The events, seq `expected_last_seq + 1 ..`, contiguous (shared
    /// with the engine, which announces them in `Effect::Committed` once
    /// they are durable).
    pub events: std::sync::Arc<[Event]>,
    /// The execution's projection after these events (replace the row).
    pub summary: Summary,
}

/// What `GET /v1/executions/{id}` and the list need without replaying the
/// history; stored next to the history and replaced by every append.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// Execution id.
    pub execution_id: std::sync::Arc<str>,
    /// Workflow name.
    pub workflow: std::sync::Arc<str>,
    /// Workflow version.
    pub version: std::sync::Arc<str>,
    /// Pinned definition hash.
    pub definition_hash: std::sync::Arc<str>,
    /// Parent execution, for a child.
    pub parent: Option<String>,
    /// Current status.
    pub status: Status,
    /// The input (shared with the projection: it never changes).
    pub input: std::sync::Arc<serde_json::Value>,
    /// The output, once completed.
    pub output: Option<serde_json::Value>,
    /// The error, once failed.
    pub error: Option<WorkflowError>,
    /// Time of `WorkflowCreated`.
    pub created_at: Millis,
    /// Time of the last event.
    pub updated_at: Millis,
    /// Seq of the last event.
    pub last_seq: u64,
}

/// A registered workflow definition.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DefinitionRecord {
    /// The compiled workflow (name and version inside).
    pub workflow: ir::Workflow,
    /// Its `definition_hash`.
    pub definition_hash: String,
    /// The source text it was compiled from (may be empty).
    pub source: String,
    /// When it was registered (set by the engine on deploy).
    pub registered_at: Millis,
}

/// A stored API response guarded by an `Idempotency-Key` (seed `002_…`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IdempotencyRecord {
    /// The scoped key ([`super::IdempotencyScope::key`]).
    pub key: String,
    /// The request fingerprint.
    pub fingerprint: String,
    /// The stored HTTP status.
    pub status: u16,
    /// The stored JSON body.
    pub body: serde_json::Value,
    /// When the record stops guarding the key.
    pub expires_at: Millis,
}

/// One execution as the store holds it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StoredExecution {
    /// Execution id.
    pub execution_id: String,
    /// Its whole history in seq order (empty: the store does not have it).
    pub events: Vec<Event>,
}

/// The answer of storage to one [`Batch`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum StorageResult {
    /// Durable.
    Ok,
    /// Nothing applied (the store could not be reached or refused).
    Unavailable {
        /// For the `STORAGE_ERROR` message.
        message: String,
    },
    /// Nothing applied: a sequence or epoch check failed.
    Conflict {
        /// Starts with `fenced:` when an epoch check failed.
        message: String,
        /// Executions this node no longer owns (given up).
        fenced: Vec<String>,
        /// Executions whose stored seq differs (reloaded).
        stale: Vec<String>,
    },
    /// May or may not have applied (e.g. the connection dropped during
    /// COMMIT).
    Ambiguous {
        /// For the log.
        message: String,
    },
}
