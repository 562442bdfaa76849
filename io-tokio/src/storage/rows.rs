//! What the SQLite and PostgreSQL stores share beyond their dialects:
//! turning records into column text and back (a corrupt row is
//! `Unavailable`, never a panic), the integer conversions of the schema's
//! signed columns, and the mapping of an `executions` or `idempotency` row
//! to its record — written once, for any sqlx row type.

use super::{Append, ExecutionRow, IdempotencyRecord, QueueOp, StorageError};
use sqlx::{ColumnIndex, Decode, Row, Type};
use std::collections::BTreeMap;

/// What deleting executions of `statuses` (one entry per row deleted)
/// takes off the counts per status.
pub(super) fn removed_per_status(statuses: Vec<String>) -> BTreeMap<String, i64> {
    let mut removed: BTreeMap<String, i64> = BTreeMap::new();
    for status in statuses {
        *removed.entry(status).or_default() -= 1;
    }
    removed
}

/// An error of the database or the driver: nothing was applied.
pub(super) fn unavailable(e: impl std::fmt::Display) -> StorageError {
    StorageError::Unavailable(e.to_string())
}

/// A JSON column back to its value.
pub(super) fn decode<T: serde::de::DeserializeOwned>(text: &str) -> Result<T, StorageError> {
    serde_json::from_str(text).map_err(|e| StorageError::Unavailable(format!("corrupt row: {e}")))
}

/// A value to its JSON column.
pub(super) fn encode<T: serde::Serialize>(value: &T) -> Result<String, StorageError> {
    serde_json::to_string(value).map_err(|e| StorageError::Unavailable(format!("encode: {e}")))
}

/// A count or time into a signed column.
pub(super) fn to_i64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// A signed column back to a count or time.
pub(super) fn to_u64(v: i64) -> u64 {
    u64::try_from(v).unwrap_or(0)
}

/// The `last_seq` an append leaves its execution at.
pub(super) fn last_seq(append: &Append) -> u64 {
    append.events.last().map_or(append.after_seq, |e| e.seq)
}

/// The `(owner_node, owner_epoch)` an append writes (`("", 0)` unfenced).
pub(super) fn owner(append: &Append) -> (&str, u64) {
    append
        .fence
        .as_ref()
        .map_or(("", 0), |f| (f.node_id.as_str(), f.epoch))
}

/// `finished_at` of a row: its last update once it has ended.
pub(super) fn finished_at(row: &ExecutionRow) -> Option<u64> {
    matches!(row.status.as_str(), "completed" | "failed" | "cancelled").then_some(row.updated_at)
}

/// The `executions` columns [`execution_row`] reads.
pub(super) const EXECUTION_COLUMNS: &str =
    "id, workflow, version, definition_hash, status, parent, input, output, error, \
     created_at, updated_at, last_seq";

fn get<'r, R, T>(r: &'r R, column: &'static str) -> Result<T, StorageError>
where
    R: Row,
    &'static str: ColumnIndex<R>,
    T: Decode<'r, R::Database> + Type<R::Database>,
{
    r.try_get(column).map_err(unavailable)
}

/// An `executions` row (selected with [`EXECUTION_COLUMNS`]).
pub(super) fn execution_row<'r, R>(r: &'r R) -> Result<ExecutionRow, StorageError>
where
    R: Row,
    &'static str: ColumnIndex<R>,
    String: Decode<'r, R::Database> + Type<R::Database>,
    i64: Decode<'r, R::Database> + Type<R::Database>,
{
    let output: Option<String> = get(r, "output")?;
    let error: Option<String> = get(r, "error")?;
    Ok(ExecutionRow {
        id: get(r, "id")?,
        workflow: get(r, "workflow")?,
        version: get(r, "version")?,
        definition_hash: get(r, "definition_hash")?,
        status: get(r, "status")?,
        parent: get(r, "parent")?,
        input: decode(&get::<R, String>(r, "input")?)?,
        output: output.as_deref().map(decode).transpose()?,
        error: error.as_deref().map(decode).transpose()?,
        created_at: to_u64(get(r, "created_at")?),
        updated_at: to_u64(get(r, "updated_at")?),
        last_seq: to_u64(get(r, "last_seq")?),
    })
}

/// An `idempotency` row; its `status` column is the integer type `S` of the
/// dialect.
pub(super) fn idempotency_row<'r, R, S>(r: &'r R) -> Result<IdempotencyRecord, StorageError>
where
    R: Row,
    &'static str: ColumnIndex<R>,
    String: Decode<'r, R::Database> + Type<R::Database>,
    i64: Decode<'r, R::Database> + Type<R::Database>,
    S: Decode<'r, R::Database> + Type<R::Database> + Into<i64>,
{
    let status: S = get(r, "status")?;
    Ok(IdempotencyRecord {
        scope: get(r, "scope")?,
        key: get(r, "key")?,
        fingerprint: get(r, "fingerprint")?,
        status: u16::try_from(status.into()).unwrap_or(500),
        body: get(r, "body")?,
        expires_at: to_u64(get(r, "expires_at")?),
    })
}

/// Queue operations applied in order: the last one on each
/// `(execution, unit)` decides whether its row exists and what it holds.
pub(super) fn last_per_unit(ops: &[QueueOp]) -> BTreeMap<(&str, &str), &QueueOp> {
    let mut last = BTreeMap::new();
    for op in ops {
        let key = match op {
            QueueOp::Enqueue {
                execution_id, unit, ..
            }
            | QueueOp::Remove { execution_id, unit } => (execution_id.as_str(), unit.as_str()),
        };
        last.insert(key, op);
    }
    last
}
