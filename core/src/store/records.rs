//! The records storage reads and writes: a transaction as data, and the rows
//! it returns.

use crate::history::{Event, Millis};
use serde::{Deserialize, Serialize};

/// One atomic write. Either all of it becomes durable or none of it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Transaction {
    /// History appends, at most one per execution.
    pub appends: Vec<Append>,
    /// Definitions to register (identical re-registrations are skipped by the
    /// engine before they get here).
    pub definitions: Vec<DefinitionRecord>,
    /// API idempotency records to write (replacing an expired one).
    pub idempotency: Vec<IdempotencyRecord>,
    /// Task-queue row changes.
    pub queue: Vec<QueueOp>,
    /// Inbox entries consumed by the events of this transaction (shared
    /// cluster mode), deleted with them.
    pub inbox_consumed: Vec<Consumed>,
    /// Shared cluster mode: the writing member. The transaction is refused
    /// (`Conflict`, every execution it names fenced) unless the member is
    /// live by the database's clock, judged in the same transaction with
    /// its contact row locked: a takeover, which judges the member dead
    /// with the same row locked, and a write of that member never both
    /// pass, so a member never creates an execution a takeover then moves
    /// without the member noticing (its next beat finds it was silent).
    pub writer: Option<Writer>,
}

/// The writing member of a shared-mode transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Writer {
    /// Its node id.
    pub node_id: String,
    /// `--node-timeout`: live means heard from within this.
    pub timeout_ms: Millis,
}

impl Transaction {
    /// Whether the transaction writes nothing.
    pub fn is_empty(&self) -> bool {
        self.appends.is_empty()
            && self.definitions.is_empty()
            && self.idempotency.is_empty()
            && self.queue.is_empty()
            && self.inbox_consumed.is_empty()
    }

    /// Moves every part of `other` into `self` (group commit).
    pub fn merge(&mut self, other: Transaction) {
        self.appends.extend(other.appends);
        self.definitions.extend(other.definitions);
        self.idempotency.extend(other.idempotency);
        self.queue.extend(other.queue);
        self.inbox_consumed.extend(other.inbox_consumed);
        if self.writer.is_none() {
            self.writer = other.writer;
        }
    }
}

/// The writer's ownership claim, checked on append in the cluster modes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fence {
    /// The writing node.
    pub node_id: String,
    /// Its epoch for the execution.
    pub epoch: u64,
}

/// An inbox entry a transaction consumes: deleted in the same transaction
/// as the events it caused, and only by the execution's owner (the entry
/// is judged like an append, see [`conflict`](super::conflict)).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Consumed {
    /// The entry's id.
    pub id: i64,
    /// The execution it is addressed to.
    pub execution_id: String,
    /// The consuming owner's claim on that execution.
    pub fence: Fence,
}

/// New events for one execution and its updated projection.
#[derive(Debug, Clone, PartialEq)]
pub struct Append {
    /// The execution.
    pub execution_id: String,
    /// The last `seq` the writer believes committed (0 for a new execution);
    /// `events` continue from `after_seq + 1`.
    pub after_seq: u64,
    /// The status the writer believes the execution has at `after_seq`
    /// (`None` for a new execution, or when it does not say). A hint: a
    /// store may write a change of status in one statement with it, but
    /// the conflict rule never depends on it, and a wrong hint only costs
    /// the store a read.
    pub after_status: Option<String>,
    /// Ownership check; `None` on a single node.
    pub fence: Option<Fence>,
    /// The new events, contiguous (shared with the engine's batch).
    pub events: std::sync::Arc<[Event]>,
    /// The projection after these events.
    pub projection: ExecutionRow,
}

/// The summary of an execution that GET and list answer from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExecutionRow {
    /// Execution id.
    pub id: String,
    /// Workflow name.
    pub workflow: String,
    /// Workflow version.
    pub version: String,
    /// Pinned definition hash.
    pub definition_hash: String,
    /// `pending`, `running`, `compensating`, `completed`, `failed`, `cancelled`.
    pub status: String,
    /// Parent execution, for a child.
    pub parent: Option<String>,
    /// The checked input, shared with the engine's projection: it is
    /// written only with a new execution's row, and every later append
    /// carries it without copying it.
    pub input: std::sync::Arc<serde_json::Value>,
    /// The output, once completed.
    pub output: Option<serde_json::Value>,
    /// The error, once failed.
    pub error: Option<serde_json::Value>,
    /// When it was created (ms since the epoch).
    pub created_at: Millis,
    /// When its last event was recorded.
    pub updated_at: Millis,
    /// Its last committed `seq` (filled in by the store on reads).
    pub last_seq: u64,
}

/// An execution with its history, as recovery and reload read it.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredExecution {
    /// The projection.
    pub row: ExecutionRow,
    /// Every event, by `seq`.
    pub events: Vec<Event>,
}

/// A registered definition (workflow or task contract).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DefinitionRecord {
    /// Name.
    pub name: String,
    /// Version.
    pub version: String,
    /// `definition_hash`.
    pub hash: String,
    /// `workflow` or `task`.
    pub kind: String,
    /// The file it came from.
    pub filename: String,
    /// The source text of that file.
    pub source: String,
    /// The compiled definition (IR) as JSON.
    pub body: serde_json::Value,
    /// When it was registered.
    pub registered_at: Millis,
}

/// A stored API response guarded by an `Idempotency-Key`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IdempotencyRecord {
    /// Credential + method + path.
    pub scope: String,
    /// The client's key.
    pub key: String,
    /// SHA-256 of the canonical request body.
    pub fingerprint: String,
    /// HTTP status of the stored response.
    pub status: u16,
    /// The stored response body.
    pub body: String,
    /// When the record expires.
    pub expires_at: Millis,
}

/// A change to the task-queue rows.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum QueueOp {
    /// A unit is queued for delivery.
    Enqueue {
        /// Execution.
        execution_id: String,
        /// Unit.
        unit: String,
        /// Task name.
        task: String,
        /// When it was queued.
        enqueued_at: Millis,
        /// The task as delivered (JSON).
        body: serde_json::Value,
    },
    /// A unit left the queue (dispatched or resolved).
    Remove {
        /// Execution.
        execution_id: String,
        /// Unit.
        unit: String,
    },
}

/// Filter of `GET /v1/executions`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListFilter {
    /// Only this status.
    pub status: Option<String>,
    /// Only this workflow.
    pub workflow: Option<String>,
    /// At most this many rows.
    pub limit: u32,
    /// Only rows strictly older than this `(created_at, id)` position.
    pub before: Option<(Millis, String)>,
}
