//! Translation between the engine's batch format and the storage records,
//! shared by the production driver and the simulation.

use super::{self as storage, Append, ExecutionRow, Fence, Transaction};
use crate::engine::{Batch, DefinitionRecord, IdempotencyRecord, StoredExecution, Summary};

/// The single-node owner name written with fenced appends.
pub const LOCAL_NODE: &str = "local";

/// One engine batch as a storage transaction, its appends fenced by `node`.
pub fn transaction(batch: &Batch, node: &str) -> Transaction {
    Transaction {
        appends: batch
            .executions
            .iter()
            .map(|a| Append {
                execution_id: a.execution_id.clone(),
                after_seq: a.expected_last_seq,
                after_status: a.expected_status.map(|s| s.as_str().to_owned()),
                fence: a.epoch.map(|epoch| Fence {
                    node_id: node.to_owned(),
                    epoch,
                }),
                events: a.events.clone(),
                projection: row(&a.summary),
            })
            .collect(),
        definitions: batch.definitions.iter().map(definition_to_store).collect(),
        idempotency: batch
            .idempotency
            .iter()
            .map(|r| storage::IdempotencyRecord {
                scope: String::new(),
                key: r.key.clone(),
                fingerprint: r.fingerprint.clone(),
                status: r.status,
                body: r.body.to_string(),
                expires_at: r.expires_at,
            })
            .collect(),
        queue: batch.queue.clone(),
        inbox_consumed: batch
            .consumed
            .iter()
            .map(|c| storage::Consumed {
                id: c.entry,
                execution_id: c.execution_id.clone(),
                fence: Fence {
                    node_id: node.to_owned(),
                    epoch: c.epoch,
                },
            })
            .collect(),
        writer: None,
    }
}

/// Several engine batches as one storage transaction (a group commit), in
/// order, their appends fenced by `node`.
pub fn group_transaction(batches: &[Batch], node: &str) -> Transaction {
    let mut tx = Transaction::default();
    for b in batches {
        tx.merge(transaction(b, node));
    }
    tx
}

/// The projection row of a summary.
pub fn row(s: &Summary) -> ExecutionRow {
    ExecutionRow {
        id: s.execution_id.to_string(),
        workflow: s.workflow.to_string(),
        version: s.version.to_string(),
        definition_hash: s.definition_hash.to_string(),
        status: s.status.as_str().to_owned(),
        parent: s.parent.clone(),
        input: s.input.clone(),
        output: s.output.clone(),
        error: s.error.as_ref().and_then(|e| serde_json::to_value(e).ok()),
        created_at: s.created_at,
        updated_at: s.updated_at,
        last_seq: s.last_seq,
    }
}

/// A definition as stored.
pub fn definition_to_store(d: &DefinitionRecord) -> storage::DefinitionRecord {
    storage::DefinitionRecord {
        name: d.workflow.name.clone(),
        version: d.workflow.version.clone(),
        hash: d.definition_hash.clone(),
        kind: "workflow".to_owned(),
        filename: String::new(),
        source: d.source.clone(),
        body: serde_json::to_value(&d.workflow).unwrap_or(serde_json::Value::Null),
        registered_at: d.registered_at,
    }
}

/// A stored definition for the engine; `None` when its body does not decode
/// (logged by the caller).
pub fn definition_from_store(d: &storage::DefinitionRecord) -> Option<DefinitionRecord> {
    let workflow = serde_json::from_value(d.body.clone()).ok()?;
    Some(DefinitionRecord {
        workflow,
        definition_hash: d.hash.clone(),
        source: d.source.clone(),
        registered_at: d.registered_at,
    })
}

/// A stored idempotency record for the engine.
pub fn idempotency_from_store(r: &storage::IdempotencyRecord) -> IdempotencyRecord {
    IdempotencyRecord {
        key: r.key.clone(),
        fingerprint: r.fingerprint.clone(),
        status: r.status,
        body: serde_json::from_str(&r.body).unwrap_or(serde_json::Value::Null),
        expires_at: r.expires_at,
    }
}

/// A stored execution for the engine.
pub fn execution_from_store(e: storage::StoredExecution) -> StoredExecution {
    StoredExecution {
        execution_id: e.row.id,
        events: e.events,
    }
}
