//! What a commit writes, as SQL: the events and projection rows of its
//! appends, the change they make to the executions counted per status, its
//! definitions, idempotency records, queue operations and consumed inbox
//! entries, then `COMMIT`, all in one multi-statement query (one round trip
//! to the writer connection's thread).

use super::super::rows::{self, encode, finished_at, last_seq, owner, to_i64, type_of};
use super::super::Transaction;
use super::super::{Append, DefinitionRecord, IdempotencyRecord, QueueOp, StorageError};
use sqlx::{QueryBuilder, Sqlite};
use std::collections::BTreeMap;

/// Every row of a transaction, encoded, for [`Rows::query`] to borrow.
pub(super) struct Rows<'a> {
    events: Vec<EventRow<'a>>,
    projections: Vec<ProjectionRow<'a>>,
    /// What the projections add to (or take from) each status's count.
    counts: Vec<(String, i64)>,
    /// JSON arrays, each bound to one `json_each` statement.
    definitions: Option<String>,
    idempotency: Option<String>,
    dequeued: Option<String>,
    enqueued: Option<String>,
    consumed: Option<String>,
}

impl<'a> Rows<'a> {
    /// Encodes `tx`; `stored` holds the stored status of each execution
    /// that has a row (see [`push_projections`]).
    pub(super) fn new(
        tx: &'a Transaction,
        stored: &BTreeMap<String, String>,
    ) -> Result<Self, StorageError> {
        let (dequeued, enqueued) = queue_rows(&tx.queue)?;
        let consumed: Vec<i64> = tx.inbox_consumed.iter().map(|c| c.id).collect();
        let projections = projection_rows(&tx.appends, stored)?;
        Ok(Rows {
            events: event_rows(&tx.appends)?,
            counts: count_changes(&projections, stored),
            projections,
            definitions: definition_rows(&tx.definitions)?,
            idempotency: idempotency_rows(&tx.idempotency)?,
            dequeued,
            enqueued,
            consumed: nonempty(&consumed)?,
        })
    }

    /// The writes (events, executions rows, definitions, idempotency
    /// records, queue operations, consumed inbox entries), then `COMMIT`.
    pub(super) fn query(&self) -> QueryBuilder<'_, Sqlite> {
        let mut sql = QueryBuilder::<Sqlite>::new("");
        push_events(&mut sql, &self.events);
        push_projections(&mut sql, &self.projections);
        push_counts(&mut sql, &self.counts);
        // Each JSON array feeds one statement: (rows, text before, text after).
        let statements = [
            (
                &self.definitions,
                "INSERT OR IGNORE INTO definitions (name, version, hash, kind, filename, \
                 source, body, registered_at) \
                 SELECT value ->> 0, value ->> 1, value ->> 2, value ->> 3, value ->> 4, \
                 value ->> 5, value ->> 6, value ->> 7 FROM json_each(",
                ");\n",
            ),
            (
                &self.idempotency,
                "INSERT OR REPLACE INTO idempotency (scope, key, fingerprint, status, body, \
                 expires_at) \
                 SELECT value ->> 0, value ->> 1, value ->> 2, value ->> 3, value ->> 4, \
                 value ->> 5 FROM json_each(",
                ");\n",
            ),
            (
                &self.dequeued,
                "DELETE FROM task_queue WHERE (execution_id, unit) IN \
                 (SELECT value ->> 0, value ->> 1 FROM json_each(",
                "));\n",
            ),
            (
                &self.enqueued,
                "INSERT OR REPLACE INTO task_queue (execution_id, unit, task, enqueued_at, body) \
                 SELECT value ->> 0, value ->> 1, value ->> 2, value ->> 3, value ->> 4 \
                 FROM json_each(",
                ");\n",
            ),
            (
                &self.consumed,
                "DELETE FROM inbox WHERE id IN (SELECT value FROM json_each(",
                "));\n",
            ),
        ];
        for (rows, before, after) in statements {
            if let Some(rows) = rows {
                sql.push(before);
                sql.push_bind(rows.as_str());
                sql.push(after);
            }
        }
        sql.push("COMMIT");
        sql
    }
}

/// Rows per `INSERT ... VALUES` statement (SQLite caps a `VALUES` list at
/// 500 rows).
const CHUNK_ROWS: usize = 128;

/// One row of `events`: execution id, seq, time, type, body.
type EventRow<'a> = (&'a str, i64, i64, String, String);

/// Every event of every append, encoded.
pub(super) fn event_rows(appends: &[Append]) -> Result<Vec<EventRow<'_>>, StorageError> {
    let mut rows = Vec::with_capacity(appends.iter().map(|a| a.events.len()).sum());
    for append in appends {
        for event in append.events.iter() {
            let body = encode(event)?;
            let ty = type_of(&body);
            rows.push((
                append.execution_id.as_str(),
                to_i64(event.seq),
                to_i64(event.at),
                ty,
                body,
            ));
        }
    }
    Ok(rows)
}

/// `INSERT INTO events` statements for `rows` (values bound directly: no
/// JSON round trip inside SQLite).
fn push_events<'a>(sql: &mut QueryBuilder<'a, Sqlite>, rows: &'a [EventRow<'a>]) {
    for chunk in rows.chunks(CHUNK_ROWS) {
        sql.push("INSERT INTO events (execution_id, seq, at, type, body) ");
        sql.push_values(chunk, |mut row, (id, seq, at, ty, body)| {
            row.push_bind(*id)
                .push_bind(*seq)
                .push_bind(*at)
                .push_bind(ty.as_str())
                .push_bind(body.as_str());
        });
        sql.push(";\n");
    }
}

/// The projection row of an append, with its columns encoded.
struct ProjectionRow<'a> {
    append: &'a Append,
    /// Whether the stored row keeps its status (see [`push_projections`]).
    lean: bool,
    input: String,
    output: Option<String>,
    error: Option<String>,
}

/// The projection of each execution appended (for one appended twice, the
/// last append's), and whether its stored status stays the same.
fn projection_rows<'a>(
    appends: &'a [Append],
    stored: &BTreeMap<String, String>,
) -> Result<Vec<ProjectionRow<'a>>, StorageError> {
    let mut last: BTreeMap<&str, &Append> = BTreeMap::new();
    for append in appends {
        last.insert(append.execution_id.as_str(), append);
    }
    let mut rows = Vec::with_capacity(last.len());
    for append in last.into_values() {
        let p = &append.projection;
        let lean = stored
            .get(&append.execution_id)
            .is_some_and(|s| *s == p.status);
        let (input, output, error) = if lean {
            (String::new(), None, None)
        } else {
            (
                encode(&p.input)?,
                p.output.as_ref().map(encode).transpose()?,
                p.error.as_ref().map(encode).transpose()?,
            )
        };
        rows.push(ProjectionRow {
            append,
            lean,
            input,
            output,
            error,
        });
    }
    Ok(rows)
}

/// The projection writes: a row whose status stays the same gets the lean
/// update, which names no indexed column, so SQLite leaves every index of
/// the table alone (it picks the indexes to rewrite by the columns a
/// statement sets, not by whether their values change); the others are
/// upserted whole.
fn push_projections<'a>(sql: &mut QueryBuilder<'a, Sqlite>, rows: &'a [ProjectionRow<'a>]) {
    let (lean, full): (Vec<&ProjectionRow>, Vec<&ProjectionRow>) =
        rows.iter().partition(|r| r.lean);
    for chunk in lean.chunks(CHUNK_ROWS) {
        sql.push("WITH new (id, updated_at, last_seq, owner_node, owner_epoch) AS (");
        sql.push_values(chunk, |mut row, r| {
            let (owner_node, owner_epoch) = owner(r.append);
            row.push_bind(r.append.execution_id.as_str())
                .push_bind(to_i64(r.append.projection.updated_at))
                .push_bind(to_i64(last_seq(r.append)))
                .push_bind(owner_node)
                .push_bind(to_i64(owner_epoch));
        });
        sql.push(
            ") UPDATE executions SET updated_at = new.updated_at, last_seq = new.last_seq, \
             owner_node = new.owner_node, owner_epoch = new.owner_epoch \
             FROM new WHERE executions.id = new.id;\n",
        );
    }
    for chunk in full.chunks(CHUNK_ROWS) {
        sql.push(
            "INSERT INTO executions (id, workflow, version, definition_hash, status, parent, \
             input, output, error, created_at, updated_at, finished_at, last_seq, \
             owner_node, owner_epoch) ",
        );
        sql.push_values(chunk, |mut row, r| {
            let p = &r.append.projection;
            let (owner_node, owner_epoch) = owner(r.append);
            row.push_bind(r.append.execution_id.as_str())
                .push_bind(p.workflow.as_str())
                .push_bind(p.version.as_str())
                .push_bind(p.definition_hash.as_str())
                .push_bind(p.status.as_str())
                .push_bind(p.parent.as_deref())
                .push_bind(r.input.as_str())
                .push_bind(r.output.as_deref())
                .push_bind(r.error.as_deref())
                .push_bind(to_i64(p.created_at))
                .push_bind(to_i64(p.updated_at))
                .push_bind(finished_at(p).map(to_i64))
                .push_bind(to_i64(last_seq(r.append)))
                .push_bind(owner_node)
                .push_bind(to_i64(owner_epoch));
        });
        // What an execution is (workflow, version, parent, input,
        // creation) never changes: only what it has become is set.
        sql.push(
            " ON CONFLICT (id) DO UPDATE SET status = excluded.status, \
             output = excluded.output, error = excluded.error, \
             updated_at = excluded.updated_at, finished_at = excluded.finished_at, \
             last_seq = excluded.last_seq, owner_node = excluded.owner_node, \
             owner_epoch = excluded.owner_epoch;\n",
        );
    }
}

/// What writing `rows` changes in the count of each status: one more of
/// the status an execution gets, one fewer of the status it leaves
/// (`stored`: the statuses before this transaction; none for a new
/// execution). Statuses whose count does not change are left out.
fn count_changes(rows: &[ProjectionRow], stored: &BTreeMap<String, String>) -> Vec<(String, i64)> {
    let mut changes: BTreeMap<&str, i64> = BTreeMap::new();
    for r in rows {
        let status = r.append.projection.status.as_str();
        let before = stored.get(&r.append.execution_id).map(String::as_str);
        if before == Some(status) {
            continue;
        }
        *changes.entry(status).or_default() += 1;
        if let Some(before) = before {
            *changes.entry(before).or_default() -= 1;
        }
    }
    changes
        .into_iter()
        .filter(|(_, n)| *n != 0)
        .map(|(status, n)| (status.to_owned(), n))
        .collect()
}

/// Adds `changes` to the running totals of `execution_counts` (SQLite's
/// one shard).
pub(super) fn push_counts<'a>(sql: &mut QueryBuilder<'a, Sqlite>, changes: &'a [(String, i64)]) {
    if changes.is_empty() {
        return;
    }
    sql.push("INSERT INTO execution_counts (shard, status, n) ");
    sql.push_values(changes, |mut row, (status, n)| {
        row.push("''").push_bind(status.as_str()).push_bind(*n);
    });
    sql.push(" ON CONFLICT (shard, status) DO UPDATE SET n = n + excluded.n;\n");
}

/// `rows` as a JSON array, or `None` when there are none.
fn nonempty<T: serde::Serialize>(rows: &[T]) -> Result<Option<String>, StorageError> {
    if rows.is_empty() {
        Ok(None)
    } else {
        encode(&rows).map(Some)
    }
}

/// New definitions; ones already registered are left as they are.
pub(super) fn definition_rows(
    definitions: &[DefinitionRecord],
) -> Result<Option<String>, StorageError> {
    let mut rows = Vec::with_capacity(definitions.len());
    for d in definitions {
        rows.push(serde_json::json!([
            d.name,
            d.version,
            d.hash,
            d.kind,
            d.filename,
            d.source,
            encode(&d.body)?,
            to_i64(d.registered_at),
        ]));
    }
    nonempty(&rows)
}

/// Idempotency records; the last record for a `(scope, key)` wins.
pub(super) fn idempotency_rows(
    records: &[IdempotencyRecord],
) -> Result<Option<String>, StorageError> {
    let mut last: BTreeMap<(&str, &str), &IdempotencyRecord> = BTreeMap::new();
    for r in records {
        last.insert((r.scope.as_str(), r.key.as_str()), r);
    }
    let rows: Vec<_> = last
        .values()
        .map(|r| {
            (
                r.scope.as_str(),
                r.key.as_str(),
                r.fingerprint.as_str(),
                i64::from(r.status),
                r.body.as_str(),
                to_i64(r.expires_at),
            )
        })
        .collect();
    nonempty(&rows)
}

/// Queue operations as the units removed and the rows enqueued: applied
/// in order, the last operation on an `(execution, unit)` decides whether
/// its row exists and what it holds.
pub(super) fn queue_rows(
    ops: &[QueueOp],
) -> Result<(Option<String>, Option<String>), StorageError> {
    let last = rows::last_per_unit(ops);
    let mut removed = Vec::new();
    let mut enqueued = Vec::new();
    for ((execution_id, unit), op) in &last {
        match op {
            QueueOp::Enqueue {
                task,
                enqueued_at,
                body,
                ..
            } => enqueued.push((
                *execution_id,
                *unit,
                task.as_str(),
                to_i64(*enqueued_at),
                encode(body)?,
            )),
            QueueOp::Remove { .. } => removed.push((*execution_id, *unit)),
        }
    }
    Ok((nonempty(&removed)?, nonempty(&enqueued)?))
}
