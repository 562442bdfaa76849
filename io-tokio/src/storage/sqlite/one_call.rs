//! A commit in one call to the writer connection's thread.
//!
//! The two-call commit (`BEGIN` with the read the conflict rule judges,
//! then every write with `COMMIT`) holds the one writer across two hops to
//! SQLite's thread, and the writer is what sets the pace under load. Here
//! the rule is judged in SQL, in the same call as the writes:
//!
//! 1. `BEGIN IMMEDIATE`;
//! 2. the guard: when any append breaks the rule (its `after_seq` is not
//!    the stored `last_seq`, or its fence is older than the row's owner),
//!    a row goes into `commit_guard`, whose CHECK fails the call before
//!    anything is written;
//! 3. the per-status counts, from the statuses as stored;
//! 4. the projections: a row keeping its status gets the lean update
//!    (no indexed column named, so no index is rewritten), one changing it
//!    the full one, a new execution its whole row;
//! 5. events, definitions, idempotency records, queue rows, `COMMIT`.
//!
//! Every value is bound as a JSON array, one per kind of row, so the text
//! never changes and SQLite prepares it once per connection.
//!
//! A call that fails with its transaction still open wrote nothing: the
//! store rolls it back and takes the two-call path, which names the
//! executions in conflict or meets the same error. What the call cannot
//! express takes the two-call path directly: an execution appended twice,
//! events that do not follow `after_seq`, consumed inbox entries and a
//! shared-mode writer.

use super::super::rows::{encode, finished_at, last_seq, owner, to_i64};
use super::super::{StorageError, Transaction};
use super::writes::{definition_rows, event_rows, idempotency_rows, queue_rows};
use std::collections::BTreeSet;

/// Whether `tx` can be committed in one call.
pub(super) fn fits(tx: &Transaction) -> bool {
    let mut ids = BTreeSet::new();
    tx.writer.is_none()
        && tx.inbox_consumed.is_empty()
        && tx.appends.iter().all(|a| {
            ids.insert(a.execution_id.as_str())
                && a.events
                    .iter()
                    .enumerate()
                    .all(|(i, e)| e.seq == a.after_seq + 1 + i as u64)
        })
}

/// The call. Its parameters are bound by position, an array once for
/// each `json_each` reading it (see [`Call::run`]): sqlx counts the numbers
/// a statement skips (`?6` alone) as positional arguments, so numbered ones
/// would bind the wrong arrays.
const STATEMENT: &str = "BEGIN IMMEDIATE;
INSERT INTO commit_guard (refused)
    SELECT 1 FROM json_each(?) a LEFT JOIN executions b ON b.id = a.value ->> 0
    WHERE COALESCE(b.last_seq, 0) <> a.value ->> 1
       OR (a.value ->> 2 IS NOT NULL
           AND (COALESCE(b.owner_epoch, 0) > a.value ->> 3
                OR (COALESCE(b.owner_node, '') NOT IN ('', a.value ->> 2)
                    AND COALESCE(b.owner_epoch, 0) >= a.value ->> 3)))
    LIMIT 1;
INSERT INTO execution_counts (shard, status, n)
    SELECT '', status, SUM(n) FROM (
        SELECT a.value ->> 4 AS status, 1 AS n
            FROM json_each(?) a LEFT JOIN executions b ON b.id = a.value ->> 0
            WHERE b.status IS NOT a.value ->> 4
        UNION ALL
        SELECT b.status, -1
            FROM json_each(?) a JOIN executions b ON b.id = a.value ->> 0
            WHERE b.status <> a.value ->> 4)
    WHERE true GROUP BY status HAVING SUM(n) <> 0
    ON CONFLICT (shard, status) DO UPDATE SET n = n + excluded.n;
UPDATE executions SET updated_at = p.value ->> 4, last_seq = p.value ->> 6,
        owner_node = p.value ->> 7, owner_epoch = p.value ->> 8
    FROM json_each(?) p
    WHERE executions.id = p.value ->> 0 AND executions.status = p.value ->> 1;
UPDATE executions SET status = p.value ->> 1, output = p.value ->> 2,
        error = p.value ->> 3, updated_at = p.value ->> 4,
        finished_at = p.value ->> 5, last_seq = p.value ->> 6,
        owner_node = p.value ->> 7, owner_epoch = p.value ->> 8
    FROM json_each(?) p
    WHERE executions.id = p.value ->> 0 AND executions.status <> p.value ->> 1;
INSERT INTO executions (id, workflow, version, definition_hash, status, parent,
        input, output, error, created_at, updated_at, finished_at, last_seq,
        owner_node, owner_epoch)
    SELECT value ->> 0, value ->> 1, value ->> 2, value ->> 3, value ->> 4,
        value ->> 5, value ->> 6, value ->> 7, value ->> 8, value ->> 9,
        value ->> 10, value ->> 11, value ->> 12, value ->> 13, value ->> 14
    FROM json_each(?);
INSERT INTO events (execution_id, seq, at, type, body)
    SELECT value ->> 0, value ->> 1, value ->> 2, value ->> 3, value ->> 4
    FROM json_each(?);
INSERT OR IGNORE INTO definitions (name, version, hash, kind, filename, source,
        body, registered_at)
    SELECT value ->> 0, value ->> 1, value ->> 2, value ->> 3, value ->> 4,
        value ->> 5, value ->> 6, value ->> 7
    FROM json_each(?);
INSERT OR REPLACE INTO idempotency (scope, key, fingerprint, status, body, expires_at)
    SELECT value ->> 0, value ->> 1, value ->> 2, value ->> 3, value ->> 4, value ->> 5
    FROM json_each(?);
DELETE FROM task_queue WHERE (execution_id, unit) IN
    (SELECT value ->> 0, value ->> 1 FROM json_each(?));
INSERT OR REPLACE INTO task_queue (execution_id, unit, task, enqueued_at, body)
    SELECT value ->> 0, value ->> 1, value ->> 2, value ->> 3, value ->> 4
    FROM json_each(?);
COMMIT";

/// A rule row: execution id, `after_seq`, fence node and epoch (null
/// unfenced), the status the append leaves.
type RuleRow<'a> = (&'a str, i64, Option<&'a str>, Option<i64>, &'a str);

/// A new execution's whole row, in the column order of the insert.
type NewRow<'a> = (
    &'a str,
    &'a str,
    &'a str,
    &'a str,
    &'a str,
    Option<&'a str>,
    String,
    Option<String>,
    Option<String>,
    i64,
    i64,
    Option<i64>,
    i64,
    &'a str,
    i64,
);

/// What a stored execution becomes: id, status, output, error, updated
/// at, finished at, `last_seq`, owner node and epoch.
type StoredRow<'a> = (
    &'a str,
    &'a str,
    Option<String>,
    Option<String>,
    i64,
    Option<i64>,
    i64,
    &'a str,
    i64,
);

/// A transaction encoded for the call (done before the writer is taken).
pub(super) struct Call {
    /// The JSON arrays: rule rows, new executions, stored ones, events,
    /// definitions, idempotency records, queue rows removed and enqueued.
    arrays: [String; 8],
}

impl Call {
    /// Encodes `tx`, which [`fits`].
    pub(super) fn new(tx: &Transaction) -> Result<Call, StorageError> {
        let mut rule: Vec<RuleRow> = Vec::with_capacity(tx.appends.len());
        let mut new: Vec<NewRow> = Vec::new();
        let mut stored: Vec<StoredRow> = Vec::with_capacity(tx.appends.len());
        for a in &tx.appends {
            let p = &a.projection;
            let fence = a.fence.as_ref();
            rule.push((
                &a.execution_id,
                to_i64(a.after_seq),
                fence.map(|f| f.node_id.as_str()),
                fence.map(|f| to_i64(f.epoch)),
                &p.status,
            ));
            let (owner_node, owner_epoch) = owner(a);
            let output = p.output.as_ref().map(encode).transpose()?;
            let error = p.error.as_ref().map(encode).transpose()?;
            if a.after_seq == 0 {
                new.push((
                    &a.execution_id,
                    &p.workflow,
                    &p.version,
                    &p.definition_hash,
                    &p.status,
                    p.parent.as_deref(),
                    encode(&p.input)?,
                    output,
                    error,
                    to_i64(p.created_at),
                    to_i64(p.updated_at),
                    finished_at(p).map(to_i64),
                    to_i64(last_seq(a)),
                    owner_node,
                    to_i64(owner_epoch),
                ));
            } else {
                stored.push((
                    &a.execution_id,
                    &p.status,
                    output,
                    error,
                    to_i64(p.updated_at),
                    finished_at(p).map(to_i64),
                    to_i64(last_seq(a)),
                    owner_node,
                    to_i64(owner_epoch),
                ));
            }
        }
        let events = event_rows(&tx.appends)?;
        let (dequeued, enqueued) = queue_rows(&tx.queue)?;
        let array = |rows: Option<String>| rows.unwrap_or_else(|| "[]".to_owned());
        Ok(Call {
            arrays: [
                encode(&rule)?,
                encode(&new)?,
                encode(&stored)?,
                encode(&events)?,
                array(definition_rows(&tx.definitions)?),
                array(idempotency_rows(&tx.idempotency)?),
                array(dequeued),
                array(enqueued),
            ],
        })
    }

    /// Sends the call. An error with the transaction still open means
    /// nothing was written (see the module docs).
    pub(super) async fn run(&self, conn: &mut sqlx::SqliteConnection) -> Result<(), sqlx::Error> {
        let [rule, new, stored, events, definitions, idempotency, dequeued, enqueued] =
            &self.arrays;
        // Each array once for every `json_each` reading it, in order.
        let order = [
            rule,
            rule,
            rule,
            stored,
            stored,
            new,
            events,
            definitions,
            idempotency,
            dequeued,
            enqueued,
        ];
        let mut query = sqlx::query(STATEMENT);
        for array in order {
            query = query.bind(array.as_str());
        }
        query.execute(conn).await.map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    //! The call against what the two calls wrote: statuses and their
    //! counts, the guard's verdicts, and plans that never scan a table.
    #![allow(clippy::unwrap_used)]

    use super::super::tests::{fenced, open};
    use super::super::SqliteStore;
    use super::STATEMENT;
    use crate::storage::contract::append;
    use crate::storage::{Storage, StorageError, Transaction};
    use sqlx::Row;

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
    async fn an_execution_moves_through_its_statuses_in_one_call_per_commit() {
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
        assert_eq!(store.two_call_commits(), 0);
    }

    #[tokio::test]
    async fn a_commit_the_guard_refuses_is_judged_in_two_calls_and_writes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(&dir).await;
        commit(
            &store,
            vec![append("a", 0, 2), fenced("owned", 0, 1, "n2", 5)],
        )
        .await;
        let late = [
            (append("a", 1, 3), "a", false),
            (fenced("owned", 1, 2, "n1", 5), "owned", true),
            (fenced("owned", 1, 2, "n1", 4), "owned", true),
        ];
        for (late, id, is_fenced) in late {
            let tx = Transaction {
                appends: vec![append("new", 0, 1), late],
                ..Transaction::default()
            };
            let named = match store.commit(&tx).await {
                Err(StorageError::Conflict { fenced, .. }) if is_fenced => fenced,
                Err(StorageError::Conflict { stale, .. }) => stale,
                other => panic!("expected a conflict, got {other:?}"),
            };
            assert_eq!(named, vec![id.to_owned()]);
        }
        assert_eq!(store.two_call_commits(), 3);
        assert!(store.execution("new").await.unwrap().is_none());
        assert_eq!(counts(&store).await, counted(&[("running", 2)]));
        let guard: i64 = sqlx::query_scalar("SELECT count(*) FROM commit_guard")
            .fetch_one(&store.readers)
            .await
            .unwrap();
        assert_eq!(guard, 0);
        // A takeover (a newer epoch) passes the guard.
        let takeover = fenced("owned", 1, 2, "n1", 6);
        commit(&store, vec![takeover]).await;
        assert_eq!(store.two_call_commits(), 3);
    }

    #[tokio::test]
    async fn no_statement_of_the_call_scans_a_table() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(&dir).await;
        let statements = STATEMENT
            .split(";\n")
            .filter(|s| !s.starts_with("BEGIN") && !s.starts_with("COMMIT"));
        for statement in statements {
            let sql = format!("EXPLAIN QUERY PLAN {statement}");
            let mut query = sqlx::query_as::<_, (i64, i64, i64, String)>(&sql);
            for _ in 0..statement.matches('?').count() {
                query = query.bind("[]");
            }
            let plan = query.fetch_all(&store.readers).await.unwrap();
            for (_, _, _, detail) in plan {
                // Scanning a JSON array or an intermediate result is fine.
                let scan = detail.starts_with("SCAN")
                    && !detail.contains("VIRTUAL TABLE")
                    && !detail.starts_with("SCAN (subquery");
                assert!(!scan, "{detail} in {statement}");
            }
        }
    }
}
