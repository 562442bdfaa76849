//! The rows a commit writes, as SQL: the events and the projection rows of
//! its appends, pushed into one multi-statement query.

use super::super::rows::{encode, finished_at, last_seq, owner, to_i64, type_of};
use super::super::{Append, StorageError};
use sqlx::{QueryBuilder, Sqlite};
use std::collections::BTreeMap;

/// Rows per `INSERT ... VALUES` statement (SQLite caps a `VALUES` list at
/// 500 rows).
const CHUNK_ROWS: usize = 128;

/// One row of `events`: execution id, seq, time, type, body.
pub(super) type EventRow<'a> = (&'a str, i64, i64, String, String);

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
pub(super) fn push_events<'a>(sql: &mut QueryBuilder<'a, Sqlite>, rows: &'a [EventRow<'a>]) {
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
pub(super) struct ProjectionRow<'a> {
    append: &'a Append,
    /// Whether the stored row keeps its status (see [`push_projections`]).
    lean: bool,
    input: String,
    output: Option<String>,
    error: Option<String>,
}

/// The projection of each execution appended (for one appended twice, the
/// last append's), and whether its stored status stays the same.
pub(super) fn projection_rows<'a>(
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
pub(super) fn push_projections<'a>(
    sql: &mut QueryBuilder<'a, Sqlite>,
    rows: &'a [ProjectionRow<'a>],
) {
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
