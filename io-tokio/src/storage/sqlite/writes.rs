//! What a commit writes, as a job for the commit connection (see
//! `committer`): in one transaction, the projection rows of the appends,
//! their events, the change they make to the executions counted per
//! status, definitions, idempotency records, queue operations and consumed
//! inbox entries, each row through a statement prepared once, then
//! `COMMIT`.
//!
//! The conflict rule is judged on the way. In the common case the write of
//! each projection row is itself the check (an insert that needs a free
//! id, an update that needs the claimed `last_seq`, owner and the status
//! the writer believes the row has), and
//! only a row it does not match is read. A commit the rule may refuse is
//! rolled back and written again the plain way: every row the rule judges
//! read first, then the verdict, which names each execution concerned.
//!
//! Everything is encoded by [`Commit::new`] before the job is sent, so the
//! writer is held only for SQLite's own work.

use super::super::rows::{self, encode, finished_at, last_seq, owner, to_i64, unavailable};
use super::super::{Consumed, Owner, QueueOp, StorageError, Transaction};
use super::committer::Link;
use super::sync::WalSync;
use orbit_core::store::{check_claims, Claim};
use rusqlite::{params, Connection, ErrorCode, OptionalExtension, ToSql};
use std::collections::{BTreeMap, BTreeSet};

/// A transaction, encoded and owned, ready for the commit thread.
pub(super) struct Commit {
    claims: Vec<Claim>,
    consumed: Vec<Consumed>,
    /// Execution id, seq, time, type, body.
    events: Vec<(String, i64, i64, &'static str, String)>,
    projections: Vec<Projection>,
    /// Name, version, hash, kind, filename, source, body, registered at.
    definitions: Vec<[Value; 8]>,
    /// Scope, key, fingerprint, status, body, expires at (the last record
    /// for a key).
    idempotency: Vec<[Value; 6]>,
    /// The last operation on each `(execution, unit)`.
    queue: Vec<QueueRow>,
}

/// A column value, as bound.
type Value = rusqlite::types::Value;

/// The projection row an append leaves.
struct Projection {
    id: String,
    status: String,
    /// The status the writer believes the row has (the append's
    /// `after_status`).
    before: Option<String>,
    /// What is written only with a new row: workflow, version, hash,
    /// parent, input, created at.
    new: Option<[Value; 6]>,
    output: Option<String>,
    error: Option<String>,
    updated_at: i64,
    finished_at: Option<i64>,
    last_seq: i64,
    owner_node: String,
    owner_epoch: i64,
}

impl Projection {
    /// `?1` to `?9` of the full update and of a new row: the id, then what
    /// the row becomes.
    fn becomes(&self) -> [&dyn ToSql; 9] {
        [
            &self.id,
            &self.status,
            &self.output,
            &self.error,
            &self.updated_at,
            &self.finished_at,
            &self.last_seq,
            &self.owner_node,
            &self.owner_epoch,
        ]
    }
}

/// The lean update of a row keeping its status: `?1` the id, `?2` to `?5`
/// the time, last event and owner. Conditions may follow.
macro_rules! lean_update {
    () => {
        "UPDATE executions SET updated_at = ?2, last_seq = ?3, owner_node = ?4, \
         owner_epoch = ?5 WHERE id = ?1"
    };
}

/// The full update, `?1` to `?9` as [`Projection::becomes`] binds them.
/// Conditions may follow.
macro_rules! full_update {
    () => {
        "UPDATE executions SET status = ?2, output = ?3, error = ?4, \
         updated_at = ?5, finished_at = ?6, last_seq = ?7, owner_node = ?8, \
         owner_epoch = ?9 WHERE id = ?1"
    };
}

/// Events written by one statement of [`INSERT_EVENTS`] (five parameters
/// each, far below SQLite's limit of 32,766).
const EVENTS_PER_INSERT: usize = 16;

/// `INSERT INTO events ... VALUES (?, ?, ?, ?, ?), ...` with
/// [`EVENTS_PER_INSERT`] rows.
static INSERT_EVENTS: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    let rows = vec!["(?, ?, ?, ?, ?)"; EVENTS_PER_INSERT].join(", ");
    format!("INSERT INTO events (execution_id, seq, at, type, body) VALUES {rows}")
});

/// What becomes of one queue row.
enum QueueRow {
    Removed(String, String),
    /// Execution id, unit, task, enqueued at, body.
    Enqueued(String, String, String, i64, String),
}

impl Commit {
    /// Encodes `tx`.
    pub(super) fn new(tx: &Transaction) -> Result<Commit, StorageError> {
        let mut events = Vec::with_capacity(tx.appends.iter().map(|a| a.events.len()).sum());
        let mut projections = Vec::with_capacity(tx.appends.len());
        for a in &tx.appends {
            for event in a.events.iter() {
                events.push((
                    a.execution_id.clone(),
                    to_i64(event.seq),
                    to_i64(event.at),
                    event.kind.type_name(),
                    encode(event)?,
                ));
            }
            let p = &a.projection;
            let new = if a.after_seq == 0 {
                Some([
                    Value::Text(p.workflow.clone()),
                    Value::Text(p.version.clone()),
                    Value::Text(p.definition_hash.clone()),
                    p.parent.clone().map_or(Value::Null, Value::Text),
                    Value::Text(encode(&p.input)?),
                    Value::Integer(to_i64(p.created_at)),
                ])
            } else {
                None
            };
            let (owner_node, owner_epoch) = owner(a);
            projections.push(Projection {
                id: a.execution_id.clone(),
                status: p.status.clone(),
                before: a.after_status.clone(),
                new,
                output: p.output.as_ref().map(encode).transpose()?,
                error: p.error.as_ref().map(encode).transpose()?,
                updated_at: to_i64(p.updated_at),
                finished_at: finished_at(p).map(to_i64),
                last_seq: to_i64(last_seq(a)),
                owner_node: owner_node.to_owned(),
                owner_epoch: to_i64(owner_epoch),
            });
        }
        let mut definitions = Vec::with_capacity(tx.definitions.len());
        for d in &tx.definitions {
            definitions.push([
                Value::Text(d.name.clone()),
                Value::Text(d.version.clone()),
                Value::Text(d.hash.clone()),
                Value::Text(d.kind.clone()),
                Value::Text(d.filename.clone()),
                Value::Text(d.source.clone()),
                Value::Text(encode(&d.body)?),
                Value::Integer(to_i64(d.registered_at)),
            ]);
        }
        let mut last = BTreeMap::new();
        for r in &tx.idempotency {
            last.insert((r.scope.as_str(), r.key.as_str()), r);
        }
        let idempotency = last
            .into_values()
            .map(|r| {
                [
                    Value::Text(r.scope.clone()),
                    Value::Text(r.key.clone()),
                    Value::Text(r.fingerprint.clone()),
                    Value::Integer(i64::from(r.status)),
                    Value::Text(r.body.clone()),
                    Value::Integer(to_i64(r.expires_at)),
                ]
            })
            .collect();
        let mut queue = Vec::new();
        for ((execution_id, unit), op) in rows::last_per_unit(&tx.queue) {
            queue.push(match op {
                QueueOp::Enqueue {
                    task,
                    enqueued_at,
                    body,
                    ..
                } => QueueRow::Enqueued(
                    execution_id.to_owned(),
                    unit.to_owned(),
                    task.clone(),
                    to_i64(*enqueued_at),
                    encode(body)?,
                ),
                QueueOp::Remove { .. } => {
                    QueueRow::Removed(execution_id.to_owned(), unit.to_owned())
                }
            });
        }
        Ok(Commit {
            claims: tx.appends.iter().map(Claim::from).collect(),
            consumed: tx.inbox_consumed.clone(),
            events,
            projections,
            definitions,
            idempotency,
            queue,
        })
    }

    /// Runs the commit on the commit thread. Returns its number for
    /// [`WalSync::durable`] once `COMMIT` returned.
    ///
    /// An error before `COMMIT` applied nothing: the transaction is rolled
    /// back (by SQLite itself for some errors), and a connection that
    /// cannot roll back is dropped. An error of `COMMIT` that leaves no
    /// transaction open may have committed: `Ambiguous`.
    pub(super) fn apply(&self, link: &mut Link, sync: &WalSync) -> Result<u64, StorageError> {
        let conn = link.conn()?;
        // Nothing has begun if this fails (another program holds the lock).
        conn.execute_batch("BEGIN IMMEDIATE").map_err(unavailable)?;
        let written = self
            .write_matched(conn)
            .and_then(|matched| {
                if matched {
                    return Ok(());
                }
                // Nothing of the attempt may stay: the rule is judged
                // against the rows as they were.
                conn.execute_batch("ROLLBACK; BEGIN IMMEDIATE")
                    .map_err(unavailable)?;
                self.write(conn)
            })
            .and_then(|()| {
                conn.execute_batch("COMMIT").map_err(|e| {
                    if conn.is_autocommit() {
                        StorageError::Ambiguous(format!("COMMIT failed: {e}"))
                    } else {
                        failed(e, &self.claims)
                    }
                })
            });
        let error = match written {
            Ok(()) => return Ok(sync.written()),
            Err(error @ StorageError::Ambiguous(_)) => return Err(error),
            Err(error) => error,
        };
        if !conn.is_autocommit() && conn.execute_batch("ROLLBACK").is_err() {
            tracing::warn!("rollback failed; commit connection dropped");
            link.reset();
        }
        Err(error)
    }

    /// The common case in fewer statements: each projection row is written
    /// by a statement that matches only a row the rule lets through (a
    /// new row by its insert, an existing one by an update conditional on
    /// its `last_seq`, owner and status), so no row is read first. A row
    /// the update does not match (a status the writer did not know, a
    /// takeover, a conflict) is read and judged on its own. Returns
    /// `false`, with the transaction to be rolled back, when the rule may
    /// refuse the commit or the commit has a shape this path leaves to
    /// [`Commit::write`] (consumed inbox entries, two appends for one
    /// execution, a gap), which then names the executions concerned.
    fn write_matched(&self, conn: &Connection) -> Result<bool, StorageError> {
        let fail = |e| failed(e, &self.claims);
        let mut seen = BTreeSet::new();
        let plain = self.consumed.is_empty()
            && self
                .claims
                .iter()
                .all(|c| c.contiguous && seen.insert(c.execution_id.as_str()));
        if !plain {
            return Ok(false);
        }
        let mut counts = Counts::new();
        for (claim, p) in self.claims.iter().zip(&self.projections) {
            if !matched(conn, claim, p, &mut counts).map_err(fail)? {
                return Ok(false);
            }
        }
        self.write_events(conn).map_err(fail)?;
        counts.write(conn).map_err(fail)?;
        self.write_others(conn).map_err(fail)?;
        Ok(true)
    }

    /// Judges the rule against the stored rows, then writes every row.
    fn write(&self, conn: &Connection) -> Result<(), StorageError> {
        let fail = |e| failed(e, &self.claims);
        let mut stored: BTreeMap<&str, Stored> = BTreeMap::new();
        for claim in &self.claims {
            if let Some(row) = Stored::read(conn, &claim.execution_id).map_err(fail)? {
                stored.insert(&claim.execution_id, row);
            }
        }
        let mut entries: BTreeMap<i64, String> = BTreeMap::new();
        if !self.consumed.is_empty() {
            let mut read = conn
                .prepare_cached("SELECT execution_id FROM inbox WHERE id = ?1")
                .map_err(fail)?;
            for c in &self.consumed {
                let to: Option<String> = read
                    .query_row([c.id], |r| r.get(0))
                    .optional()
                    .map_err(fail)?;
                if let Some(to) = to {
                    entries.insert(c.id, to);
                }
            }
        }
        check_claims(
            &self.claims,
            &self.consumed,
            |id| stored.get(id).map(Stored::owner),
            |id| entries.get(&id).map(String::as_str),
        )?;
        self.write_events(conn).map_err(fail)?;
        self.write_projections(conn, &stored).map_err(fail)?;
        self.write_others(conn).map_err(fail)
    }

    /// The events, [`EVENTS_PER_INSERT`] rows per statement and the rest
    /// one by one: each statement opens its cursors and checks its
    /// transaction once, so most events skip that work.
    fn write_events(&self, conn: &Connection) -> rusqlite::Result<()> {
        let mut chunks = self.events.chunks_exact(EVENTS_PER_INSERT);
        if chunks.len() > 0 {
            let mut insert = conn.prepare_cached(&INSERT_EVENTS)?;
            for chunk in chunks.by_ref() {
                let values = chunk
                    .iter()
                    .flat_map(|(id, seq, at, ty, body)| [id as &dyn ToSql, seq, at, ty, body]);
                insert.execute(rusqlite::params_from_iter(values))?;
            }
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut insert = conn.prepare_cached(
                "INSERT INTO events (execution_id, seq, at, type, body) VALUES (?, ?, ?, ?, ?)",
            )?;
            for (id, seq, at, ty, body) in rest {
                insert.execute(params![id, seq, at, ty, body])?;
            }
        }
        Ok(())
    }

    /// The projection rows and the counts per status. `stored` holds the
    /// row of each execution that has one.
    fn write_projections(
        &self,
        conn: &Connection,
        stored: &BTreeMap<&str, Stored>,
    ) -> rusqlite::Result<()> {
        let mut counts = Counts::new();
        for p in &self.projections {
            let before = stored.get(p.id.as_str()).map(|row| row.status.as_str());
            write_projection(conn, p, before, &mut counts)?;
        }
        counts.write(conn)
    }

    /// Definitions, idempotency records, queue rows, consumed entries.
    fn write_others(&self, conn: &Connection) -> rusqlite::Result<()> {
        if !self.definitions.is_empty() {
            let mut insert = conn.prepare_cached(
                "INSERT OR IGNORE INTO definitions (name, version, hash, kind, filename, \
                 source, body, registered_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
            )?;
            for row in &self.definitions {
                insert.execute(rusqlite::params_from_iter(row))?;
            }
        }
        if !self.idempotency.is_empty() {
            let mut insert = conn.prepare_cached(
                "INSERT OR REPLACE INTO idempotency (scope, key, fingerprint, status, body, \
                 expires_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            )?;
            for row in &self.idempotency {
                insert.execute(rusqlite::params_from_iter(row))?;
            }
        }
        for row in &self.queue {
            match row {
                QueueRow::Removed(id, unit) => conn
                    .prepare_cached("DELETE FROM task_queue WHERE execution_id = ?1 AND unit = ?2")?
                    .execute(params![id, unit])?,
                QueueRow::Enqueued(id, unit, task, at, body) => conn
                    .prepare_cached(
                        "INSERT OR REPLACE INTO task_queue (execution_id, unit, task, \
                         enqueued_at, body) VALUES (?1, ?2, ?3, ?4, ?5)",
                    )?
                    .execute(params![id, unit, task, at, body])?,
            };
        }
        for c in &self.consumed {
            conn.prepare_cached("DELETE FROM inbox WHERE id = ?1")?
                .execute([c.id])?;
        }
        Ok(())
    }
}

/// Writes `p` over a row that passed the rule on a matched path: tries
/// the conditional write, and reads and judges the row only when that
/// matched nothing. `false` when the rule may refuse `claim` (nothing of
/// `p` written).
fn matched(
    conn: &Connection,
    claim: &Claim,
    p: &Projection,
    counts: &mut Counts,
) -> rusqlite::Result<bool> {
    if let Some(new) = &p.new {
        // A new execution passes the rule exactly when its id is free.
        return match insert_row(conn, p, new) {
            Ok(()) => {
                counts.add(&p.status, 1);
                Ok(true)
            }
            Err(e) if e.sqlite_error_code() == Some(ErrorCode::ConstraintViolation) => Ok(false),
            Err(e) => Err(e),
        };
    }
    // Matches a row at the claimed `last_seq`, in the status the writer
    // believes it has, whose owner is the writer's own (or with no fence,
    // any owner): the rule lets such a row through. A row that keeps its
    // status gets the lean update; one that changes it, the full update
    // and the move between the counts. Without a belief, only a row
    // that keeps its status is tried.
    let unfenced = claim.fence.is_none();
    let before = p.before.as_deref().unwrap_or(&p.status);
    let changed = if before == p.status {
        conn.prepare_cached(concat!(
            lean_update!(),
            " AND last_seq = ?6 AND status = ?7 \
             AND (?8 OR (owner_node = ?4 AND owner_epoch = ?5))"
        ))?
        .execute(params![
            p.id,
            p.updated_at,
            p.last_seq,
            p.owner_node,
            p.owner_epoch,
            to_i64(claim.after_seq),
            p.status,
            unfenced
        ])?
    } else {
        let mut values = p.becomes().to_vec();
        let after_seq = to_i64(claim.after_seq);
        values.extend([&after_seq as &dyn ToSql, &before, &unfenced]);
        let changed = conn
            .prepare_cached(concat!(
                full_update!(),
                " AND last_seq = ?10 AND status = ?11 \
                 AND (?12 OR (owner_node = ?8 AND owner_epoch = ?9))"
            ))?
            .execute(&*values)?;
        if changed == 1 {
            counts.add(before, -1);
            counts.add(&p.status, 1);
        }
        changed
    };
    if changed == 1 {
        return Ok(true);
    }
    let Some(stored) = Stored::read(conn, &claim.execution_id)? else {
        return Ok(false);
    };
    let allowed = check_claims(
        std::slice::from_ref(claim),
        &[],
        |_| Some(stored.owner()),
        |_| None,
    )
    .is_ok();
    if allowed {
        write_projection(conn, p, Some(&stored.status), counts)?;
    }
    Ok(allowed)
}

/// What the rule and the counts need of an execution's stored row.
struct Stored {
    last_seq: u64,
    owner_node: String,
    owner_epoch: u64,
    status: String,
}

impl Stored {
    /// Reads the row of execution `id`, if it has one.
    fn read(conn: &Connection, id: &str) -> rusqlite::Result<Option<Stored>> {
        conn.prepare_cached(
            "SELECT last_seq, owner_node, owner_epoch, status FROM executions WHERE id = ?1",
        )?
        .query_row([id], |r| {
            Ok(Stored {
                last_seq: rows::to_u64(r.get(0)?),
                owner_node: r.get(1)?,
                owner_epoch: rows::to_u64(r.get(2)?),
                status: r.get(3)?,
            })
        })
        .optional()
    }

    fn owner(&self) -> Owner<'_> {
        Owner {
            last_seq: self.last_seq,
            node_id: &self.owner_node,
            epoch: self.owner_epoch,
        }
    }
}

/// Writes the projection row `p` over a row whose status was `before`
/// (`None`: no row) and counts the change of status. A row keeping its
/// status gets the lean update, which names no indexed column, so SQLite
/// leaves every index of the table alone (it picks the indexes to rewrite
/// by the columns a statement sets, not by whether their values change);
/// a row changing it gets the full update, a new execution its whole row.
/// What an execution is (workflow, version, parent, input, creation) is
/// written once.
fn write_projection(
    conn: &Connection,
    p: &Projection,
    before: Option<&str>,
    counts: &mut Counts,
) -> rusqlite::Result<()> {
    if before == Some(p.status.as_str()) {
        conn.prepare_cached(lean_update!())?.execute(params![
            p.id,
            p.updated_at,
            p.last_seq,
            p.owner_node,
            p.owner_epoch
        ])?;
        return Ok(());
    }
    counts.add(&p.status, 1);
    if let Some(before) = before {
        counts.add(before, -1);
    }
    match (&p.new, before) {
        (Some(new), None) => insert_row(conn, p, new),
        _ => {
            conn.prepare_cached(full_update!())?.execute(p.becomes())?;
            Ok(())
        }
    }
}

/// Inserts the whole row of a new execution.
fn insert_row(conn: &Connection, p: &Projection, new: &[Value; 6]) -> rusqlite::Result<()> {
    let mut values = p.becomes().to_vec();
    values.extend(new.iter().map(|v| v as &dyn ToSql));
    conn.prepare_cached(
        "INSERT INTO executions (id, status, output, error, updated_at, \
         finished_at, last_seq, owner_node, owner_epoch, workflow, version, \
         definition_hash, parent, input, created_at) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15)",
    )?
    .execute(&*values)?;
    Ok(())
}

/// How a commit changes the number of executions in each status.
struct Counts(BTreeMap<String, i64>);

impl Counts {
    fn new() -> Self {
        Counts(BTreeMap::new())
    }

    fn add(&mut self, status: &str, n: i64) {
        match self.0.get_mut(status) {
            Some(total) => *total += n,
            None => {
                self.0.insert(status.to_owned(), n);
            }
        }
    }

    /// Adds each change to its running total.
    fn write(&self, conn: &Connection) -> rusqlite::Result<()> {
        let mut add = conn.prepare_cached(ADD_TO_COUNT)?;
        for (status, n) in self.0.iter().filter(|(_, n)| **n != 0) {
            add.execute(params![status, n])?;
        }
        Ok(())
    }
}

/// Adds `?2` to the running total of status `?1` (SQLite's one shard).
pub(super) const ADD_TO_COUNT: &str = "INSERT INTO execution_counts (shard, status, n) \
     VALUES ('', ?1, ?2) ON CONFLICT (shard, status) DO UPDATE SET n = n + excluded.n";

/// What a failed statement means: a unique-key clash after the rule passed
/// is between rows the rule does not see (events stored past an
/// execution's `last_seq`): every execution appended is named stale, to be
/// read back. Anything else is `Unavailable`.
fn failed(e: rusqlite::Error, claims: &[Claim]) -> StorageError {
    if e.sqlite_error_code() == Some(ErrorCode::ConstraintViolation)
        && e.to_string().contains("UNIQUE")
    {
        return StorageError::Conflict {
            fenced: Vec::new(),
            stale: claims.iter().map(|c| c.execution_id.clone()).collect(),
        };
    }
    unavailable(e)
}

#[cfg(test)]
mod tests {
    //! Rows and counts per status as an execution moves through its
    //! statuses (new row, full update, lean update), and a cancelled
    //! caller that does not let the next writer in early.
    #![allow(clippy::unwrap_used)]

    use super::super::tests::open;
    use super::super::SqliteStore;
    use crate::storage::contract::append;
    use crate::storage::{Storage, Transaction};
    use sqlx::Row;
    use std::time::Duration;

    async fn commit(store: &SqliteStore, appends: Vec<crate::storage::Append>) {
        let tx = Transaction {
            appends,
            ..Transaction::default()
        };
        store.commit(&tx).await.unwrap();
    }

    async fn counts(store: &SqliteStore) -> Vec<(String, u64)> {
        store.count_by_status().await.unwrap()
    }

    fn counted(pairs: &[(&str, u64)]) -> Vec<(String, u64)> {
        pairs.iter().map(|(s, n)| ((*s).to_owned(), *n)).collect()
    }

    /// `(status, last_seq, output, finished_at)` as stored.
    async fn stored(store: &SqliteStore, id: &str) -> (String, i64, Option<String>, Option<i64>) {
        let row = sqlx::query(
            "SELECT status, last_seq, output, finished_at FROM executions WHERE id = ?",
        )
        .bind(id)
        .fetch_one(&store.readers)
        .await
        .unwrap();
        (row.get(0), row.get(1), row.get(2), row.get(3))
    }

    #[tokio::test]
    async fn an_execution_moves_through_its_statuses_and_is_counted_in_each() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(&dir).await;
        let with = |id: &str, after: u64, upto: u64, status: &str| {
            let mut a = append(id, after, upto);
            a.projection.status = status.to_owned();
            a.projection.updated_at = upto * 10;
            a
        };
        commit(
            &store,
            vec![with("a", 0, 1, "pending"), with("b", 0, 2, "running")],
        )
        .await;
        assert_eq!(
            counts(&store).await,
            counted(&[("pending", 1), ("running", 1)])
        );
        // A status change, and a row keeping its status (the lean update).
        commit(
            &store,
            vec![with("a", 1, 3, "running"), with("b", 2, 4, "running")],
        )
        .await;
        assert_eq!(counts(&store).await, counted(&[("running", 2)]));
        assert_eq!(
            stored(&store, "b").await,
            ("running".to_owned(), 4, None, None)
        );
        let mut done = with("a", 3, 5, "completed");
        done.projection.output = Some(serde_json::json!({"total": 3}));
        commit(&store, vec![done]).await;
        assert_eq!(
            counts(&store).await,
            counted(&[("completed", 1), ("running", 1)])
        );
        assert_eq!(
            stored(&store, "a").await,
            (
                "completed".to_owned(),
                5,
                Some("{\"total\":3}".to_owned()),
                Some(50)
            )
        );
        let row = store.execution("a").await.unwrap().unwrap();
        assert_eq!(row.output, Some(serde_json::json!({"total": 3})));
        assert_eq!(row.updated_at, 50);
        assert_eq!(store.history("a", 0, 10).await.unwrap().len(), 5);
    }

    #[tokio::test]
    async fn a_cancelled_commit_keeps_the_write_lock_until_its_job_has_ended() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(&dir).await;
        // Occupy the commit thread until told to go on.
        let (go, wait) = std::sync::mpsc::channel::<()>();
        let (busy, occupied) = tokio::sync::oneshot::channel();
        let committer = std::sync::Arc::clone(&store.committer);
        let blocker = tokio::spawn(async move {
            committer
                .run(move |_| {
                    let _ = busy.send(());
                    wait.recv()
                })
                .await
        });
        occupied.await.unwrap();
        let caller = {
            let store = store.clone();
            tokio::spawn(async move { commit(&store, vec![append("a", 0, 1)]).await })
        };
        // Until the caller holds the lock (it sends its job in the same
        // step): the lock is fair, so a try behind it times out. Bounded,
        // so a lock that is never held fails the checks below.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(2);
        while !caller.is_finished() && tokio::time::Instant::now() < deadline {
            let Ok(held) =
                tokio::time::timeout(Duration::from_millis(5), store.writer.lock()).await
            else {
                break;
            };
            drop(held);
            tokio::task::yield_now().await;
        }
        caller.abort();
        assert!(caller.await.unwrap_err().is_cancelled());
        // The job is queued behind the blocker and holds the lock.
        let early = tokio::time::timeout(Duration::from_millis(100), store.writer.lock()).await;
        assert!(
            early.is_err(),
            "the write lock was free while a job held it"
        );
        go.send(()).unwrap();
        blocker.await.unwrap().unwrap().unwrap();
        drop(store.writer.lock().await.unwrap());
        // The job ran to its end: the commit is there.
        assert_eq!(store.execution("a").await.unwrap().unwrap().last_seq, 1);
    }

    #[tokio::test]
    async fn a_job_that_panics_is_ambiguous_and_the_next_commit_goes_through() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(&dir).await;
        let outcome = store.committer.run(|_| panic!("planted")).await;
        assert!(
            matches!(outcome, Err(crate::storage::StorageError::Ambiguous(_))),
            "{outcome:?}"
        );
        commit(&store, vec![append("a", 0, 1)]).await;
        assert_eq!(store.execution("a").await.unwrap().unwrap().last_seq, 1);
    }
}
