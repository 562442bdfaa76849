//! The SQLite backend: WAL, one writer at a time (commits on a connection
//! of their own, see `committer`; their WAL synced by the store before a
//! commit is reported done, see `sync`) and a pool of readers, versioned
//! migrations run at open, one transaction per commit.

use super::rows::{
    self, decode, encode, execution_row, to_i64, to_u64, unavailable, EXECUTION_COLUMNS,
};
use super::{
    DefinitionRecord, ExecutionRow, IdempotencyRecord, ListFilter, MakeTransaction, QueueOp,
    StoredExecution, Transaction,
};
use super::{ListPage, Purged};
use super::{Storage, StorageError};
use async_trait::async_trait;

mod committer;
mod reads;
mod sync;
mod writer;
mod writes;
use committer::Committer;
use orbit_core::history::Event;
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteRow,
    SqliteSynchronous,
};
use sqlx::{Row, Sqlite};
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;
use sync::WalSync;
use writer::{Rollback, Writer};
use writes::Commit;

/// How to open a SQLite store.
#[derive(Debug, Clone)]
pub struct SqliteOptions {
    /// `sqlite://PATH` (in-memory databases are refused: recovery needs a file).
    pub url: String,
    /// How long a statement waits for a lock before failing.
    pub busy_timeout: Duration,
    /// Reader connections.
    pub readers: u32,
}

impl SqliteOptions {
    /// Defaults for `url`: 5 s busy timeout, 4 readers.
    pub fn new(url: impl Into<String>) -> Self {
        SqliteOptions {
            url: url.into(),
            busy_timeout: Duration::from_secs(5),
            readers: 4,
        }
    }
}

/// A store in one SQLite file.
#[derive(Debug, Clone)]
pub struct SqliteStore {
    /// The sqlx writer connection (migrations, retention) and the write
    /// lock every writer takes, commits included.
    writer: Arc<Writer>,
    /// The connection commits are written on (see `committer`).
    committer: Arc<Committer>,
    sync: Arc<WalSync>,
    readers: SqlitePool,
}

impl SqliteStore {
    /// Opens (creating if needed) the database and runs the migrations.
    pub async fn open(options: &SqliteOptions) -> Result<Self, StorageError> {
        if options.url.contains(":memory:") || options.url.contains("mode=memory") {
            return Err(StorageError::Unavailable(
                "an in-memory SQLite database cannot be recovered; give a file path".into(),
            ));
        }
        let connect = SqliteConnectOptions::from_str(&options.url)
            .map_err(unavailable)?
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Full)
            .busy_timeout(options.busy_timeout)
            .foreign_keys(true);
        let wal_of = connect.get_filename().to_owned();
        // The writer leaves syncing the WAL to `sync` (see there).
        let writer = Writer::open(connect.clone().synchronous(SqliteSynchronous::Normal)).await?;
        {
            let mut held = writer.lock().await?;
            sqlx::migrate!("./migrations/sqlite")
                .run(held.conn()?)
                .await
                .map_err(|e| StorageError::Unavailable(format!("migration failed: {e}")))?;
        }
        let readers = SqlitePoolOptions::new()
            .max_connections(options.readers.max(1))
            .acquire_timeout(options.busy_timeout + Duration::from_secs(5))
            .connect_with(connect.read_only(true))
            .await
            .map_err(unavailable)?;
        Ok(SqliteStore {
            writer: Arc::new(writer),
            committer: Arc::new(Committer::open(wal_of.clone(), options.busy_timeout)?),
            sync: Arc::new(WalSync::new(wal_of)),
            readers,
        })
    }

    /// Closes every connection.
    pub async fn close(&self) {
        self.readers.close().await;
        self.writer.close().await;
        let _ = self.committer.run(|link| link.close()).await;
    }

    /// How many times the store has synced the WAL itself (see `sync`):
    /// at least once for each commit reported done since it opened.
    pub fn wal_syncs(&self) -> u64 {
        self.sync.syncs()
    }

    /// The writer connection's `(journal_mode, synchronous)` pragmas, for
    /// operators and tests to check the durability settings.
    pub async fn pragmas(&self) -> Result<(String, i64), StorageError> {
        let mut held = self.writer.lock().await?;
        let conn = held.conn()?;
        let journal: String = sqlx::query_scalar("PRAGMA journal_mode")
            .fetch_one(&mut *conn)
            .await
            .map_err(unavailable)?;
        let sync: i64 = sqlx::query_scalar("PRAGMA synchronous")
            .fetch_one(&mut *conn)
            .await
            .map_err(unavailable)?;
        Ok((journal, sync))
    }

    /// Executions matching `clause` with their histories: two queries in
    /// all (rows, then every event of those rows in order), so recovery time
    /// grows linearly with the data.
    async fn load_where(&self, clause: &str) -> Result<Vec<StoredExecution>, StorageError> {
        // One read transaction: both queries see the same snapshot.
        let mut tx = self.readers.begin().await.map_err(unavailable)?;
        let rows = sqlx::query(&format!(
            "SELECT {EXECUTION_COLUMNS} FROM executions {clause} ORDER BY created_at, id"
        ))
        .fetch_all(&mut *tx)
        .await
        .map_err(unavailable)?;
        let mut out = Vec::with_capacity(rows.len());
        let mut index = std::collections::HashMap::with_capacity(rows.len());
        for r in &rows {
            let row = execution_row(r)?;
            index.insert(row.id.clone(), out.len());
            out.push(StoredExecution {
                row,
                events: Vec::new(),
            });
        }
        let events = sqlx::query(&format!(
            "SELECT e.execution_id, e.body FROM events e JOIN executions x ON x.id = e.execution_id \
             {} ORDER BY e.execution_id, e.seq",
            clause.replace("status", "x.status")
        ))
        .fetch_all(&mut *tx)
        .await
        .map_err(unavailable)?;
        tx.commit().await.map_err(unavailable)?;
        for r in &events {
            let id: String = r.try_get(0).map_err(unavailable)?;
            if let Some(&i) = index.get(&id) {
                let event: Event = decode(&r.try_get::<String, _>(1).map_err(unavailable)?)?;
                out[i].events.push(event);
            }
        }
        Ok(out)
    }

    async fn events_of(
        &self,
        id: &str,
        after_seq: u64,
        limit: u32,
    ) -> Result<Vec<Event>, StorageError> {
        let rows = sqlx::query(
            "SELECT body FROM events WHERE execution_id = ? AND seq > ? ORDER BY seq LIMIT ?",
        )
        .bind(id)
        .bind(to_i64(after_seq))
        .bind(i64::from(limit))
        .fetch_all(&self.readers)
        .await
        .map_err(unavailable)?;
        rows.iter()
            .map(|r| decode::<Event>(&r.try_get::<String, _>(0).map_err(unavailable)?))
            .collect()
    }
}

/// One batch of expired idempotency records (found through the expiry
/// index of migration `0017`).
const PURGE_IDEMPOTENCY: &str = "DELETE FROM idempotency WHERE rowid IN \
     (SELECT rowid FROM idempotency WHERE expires_at <= ? LIMIT 500)";

/// An `idempotency` row (SQLite keeps `status` as a 64-bit integer).
fn idempotency_row(r: &SqliteRow) -> Result<IdempotencyRecord, StorageError> {
    rows::idempotency_row::<_, i64>(r)
}

impl SqliteStore {
    /// Writes the commit `encode` makes, under the write lock on the commit
    /// thread (where it is encoded too: the caller's thread runs the
    /// engine and the API), calls `written` and waits for its WAL sync.
    async fn write(
        &self,
        encode: impl FnOnce() -> Result<Commit, StorageError> + Send + 'static,
        written: &(dyn Fn() + Send + Sync),
    ) -> Result<(), StorageError> {
        let held = self.writer.lock().await?;
        let sync = Arc::clone(&self.sync);
        // The job keeps the write lock until it has ended, even if this
        // caller is cancelled meanwhile.
        let number = self
            .committer
            .run(move |link| {
                let number = encode().and_then(|commit| commit.apply(link, &sync));
                drop(held);
                number
            })
            .await??;
        written();
        self.sync.durable(number).await
    }
}

#[async_trait]
impl Storage for SqliteStore {
    async fn commit(&self, tx: &Transaction) -> Result<(), StorageError> {
        // Encoded here: `tx` is borrowed for this call only.
        let commit = Commit::new(tx)?;
        self.write(move || Ok(commit), &|| {}).await
    }

    async fn commit_signalling(
        &self,
        make: MakeTransaction,
        written: &(dyn Fn() + Send + Sync),
    ) -> Result<(), StorageError> {
        self.write(move || Commit::new(&make()), written).await
    }

    async fn load_definitions(&self) -> Result<Vec<DefinitionRecord>, StorageError> {
        let rows = sqlx::query(
            "SELECT name, version, hash, kind, filename, source, body, registered_at FROM definitions \
             ORDER BY registered_at, name, version",
        )
        .fetch_all(&self.readers)
        .await
        .map_err(unavailable)?;
        rows.iter()
            .map(|r| {
                Ok(DefinitionRecord {
                    name: r.try_get("name").map_err(unavailable)?,
                    version: r.try_get("version").map_err(unavailable)?,
                    hash: r.try_get("hash").map_err(unavailable)?,
                    kind: r.try_get("kind").map_err(unavailable)?,
                    filename: r.try_get("filename").map_err(unavailable)?,
                    source: r.try_get("source").map_err(unavailable)?,
                    body: decode(&r.try_get::<String, _>("body").map_err(unavailable)?)?,
                    registered_at: to_u64(r.try_get("registered_at").map_err(unavailable)?),
                })
            })
            .collect()
    }

    async fn load_active(&self) -> Result<Vec<StoredExecution>, StorageError> {
        // Named statuses, not `NOT IN` the terminal ones: the status index
        // then finds the few live rows among millions of finished ones.
        self.load_where("WHERE status IN ('pending', 'running', 'compensating')")
            .await
    }

    async fn load_all(&self) -> Result<Vec<StoredExecution>, StorageError> {
        self.load_where("").await
    }

    async fn idempotency_records(&self, now: u64) -> Result<Vec<IdempotencyRecord>, StorageError> {
        let rows = sqlx::query(
            "SELECT scope, key, fingerprint, status, body, expires_at FROM idempotency WHERE expires_at > ?",
        )
        .bind(to_i64(now))
        .fetch_all(&self.readers)
        .await
        .map_err(unavailable)?;
        rows.iter().map(idempotency_row).collect()
    }

    async fn count_by_status(&self) -> Result<Vec<(String, u64)>, StorageError> {
        // The running totals (migration `0016`), not a count of the rows.
        let rows = sqlx::query(
            "SELECT status, SUM(n) FROM execution_counts GROUP BY status \
             HAVING SUM(n) <> 0 ORDER BY status",
        )
        .fetch_all(&self.readers)
        .await
        .map_err(unavailable)?;
        rows.iter()
            .map(|r| {
                Ok((
                    r.try_get::<String, _>(0).map_err(unavailable)?,
                    to_u64(r.try_get::<i64, _>(1).map_err(unavailable)?),
                ))
            })
            .collect()
    }

    async fn load_execution(&self, id: &str) -> Result<Option<StoredExecution>, StorageError> {
        let Some(row) = self.execution(id).await? else {
            return Ok(None);
        };
        let events = self.events_of(id, 0, u32::MAX).await?;
        Ok(Some(StoredExecution { row, events }))
    }

    async fn execution(&self, id: &str) -> Result<Option<ExecutionRow>, StorageError> {
        let row = sqlx::query(&format!(
            "SELECT {EXECUTION_COLUMNS} FROM executions WHERE id = ?"
        ))
        .bind(id)
        .fetch_optional(&self.readers)
        .await
        .map_err(unavailable)?;
        row.as_ref().map(execution_row).transpose()
    }

    async fn history(
        &self,
        id: &str,
        after_seq: u64,
        limit: u32,
    ) -> Result<Vec<Event>, StorageError> {
        self.events_of(id, after_seq, limit).await
    }

    async fn list_executions(
        &self,
        filter: &ListFilter,
    ) -> Result<Vec<ExecutionRow>, StorageError> {
        let mut sql = format!("SELECT {EXECUTION_COLUMNS} FROM executions WHERE 1 = 1");
        if filter.status.is_some() {
            sql.push_str(" AND status = ?");
        }
        if filter.workflow.is_some() {
            sql.push_str(" AND workflow = ?");
        }
        if filter.before.is_some() {
            sql.push_str(" AND (created_at < ? OR (created_at = ? AND id < ?))");
        }
        sql.push_str(" ORDER BY created_at DESC, id DESC LIMIT ?");
        let mut q = sqlx::query::<Sqlite>(&sql);
        if let Some(s) = &filter.status {
            q = q.bind(s);
        }
        if let Some(w) = &filter.workflow {
            q = q.bind(w);
        }
        if let Some((at, id)) = &filter.before {
            q = q.bind(to_i64(*at)).bind(to_i64(*at)).bind(id);
        }
        q = q.bind(i64::from(filter.limit));
        let rows = q.fetch_all(&self.readers).await.map_err(unavailable)?;
        rows.iter().map(execution_row).collect()
    }

    async fn idempotency(
        &self,
        scope: &str,
        key: &str,
        now: u64,
    ) -> Result<Option<IdempotencyRecord>, StorageError> {
        let row = sqlx::query(
            "SELECT scope, key, fingerprint, status, body, expires_at FROM idempotency \
             WHERE scope = ? AND key = ? AND expires_at > ?",
        )
        .bind(scope)
        .bind(key)
        .bind(to_i64(now))
        .fetch_optional(&self.readers)
        .await
        .map_err(unavailable)?;
        row.as_ref().map(idempotency_row).transpose()
    }

    async fn queue(&self) -> Result<Vec<QueueOp>, StorageError> {
        let rows = sqlx::query(
            "SELECT execution_id, unit, task, enqueued_at, body FROM task_queue ORDER BY enqueued_at, execution_id, unit",
        )
        .fetch_all(&self.readers)
        .await
        .map_err(unavailable)?;
        rows.iter()
            .map(|r| {
                Ok(QueueOp::Enqueue {
                    execution_id: r.try_get("execution_id").map_err(unavailable)?,
                    unit: r.try_get("unit").map_err(unavailable)?,
                    task: r.try_get("task").map_err(unavailable)?,
                    enqueued_at: to_u64(r.try_get("enqueued_at").map_err(unavailable)?),
                    body: decode(&r.try_get::<String, _>("body").map_err(unavailable)?)?,
                })
            })
            .collect()
    }

    async fn check_writable(&self) -> Result<(), StorageError> {
        // Take the write lock and give it back: fails when the file is
        // read-only, locked by another program or the disk is gone.
        let mut held = self.writer.lock().await?;
        held.begun();
        let begun = sqlx::query("BEGIN IMMEDIATE")
            .execute(held.conn()?)
            .await
            .map_err(unavailable);
        match held.roll_back().await {
            Rollback::Failed => Err(StorageError::Unavailable(
                "the writer connection could not roll back".into(),
            )),
            Rollback::Undone | Rollback::NotOpen => begun.map(|_| ()),
        }
    }

    async fn ping(&self) -> Result<(), StorageError> {
        sqlx::query("SELECT 1")
            .execute(&self.readers)
            .await
            .map_err(unavailable)?;
        Ok(())
    }

    async fn list_page(&self, page: &ListPage) -> Result<Vec<ExecutionRow>, StorageError> {
        self.page(page).await
    }

    async fn purge_finished(
        &self,
        finished_before: u64,
        limit: u32,
    ) -> Result<Purged, StorageError> {
        self.purge(finished_before, limit).await
    }

    async fn purge_idempotency(&self, now: u64) -> Result<u64, StorageError> {
        // Small batches, each its own statement, so group commits get the
        // writer connection in between.
        let mut total = 0;
        loop {
            let done = sqlx::query(PURGE_IDEMPOTENCY)
                .bind(to_i64(now))
                .execute(self.writer.lock().await?.conn()?)
                .await
                .map_err(unavailable)?
                .rows_affected();
            total += done;
            if done < 500 {
                return Ok(total);
            }
            tokio::task::yield_now().await;
        }
    }
}

#[cfg(test)]
mod tests {
    //! The set-based commit against the row-by-row semantics it replaced:
    //! every column round-trips, the last queue/idempotency operation on a
    //! key wins, and a transaction that conflicts writes nothing.
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::storage::contract::append;
    use crate::storage::{Append, Consumed, Fence};
    use serde_json::json;

    /// A store in `dir` (shared with the tests of the submodules).
    pub(super) async fn open(dir: &tempfile::TempDir) -> SqliteStore {
        let url = format!("sqlite://{}", dir.path().join("orbit.db").display());
        SqliteStore::open(&SqliteOptions::new(url)).await.unwrap()
    }

    /// `append(id, after, upto)` written by `node` in `epoch`.
    pub(super) fn fenced(id: &str, after: u64, upto: u64, node: &str, epoch: u64) -> Append {
        let mut a = append(id, after, upto);
        a.fence = Some(Fence {
            node_id: node.to_owned(),
            epoch,
        });
        a
    }

    fn enqueue(id: &str, unit: &str, at: u64) -> QueueOp {
        QueueOp::Enqueue {
            execution_id: id.to_owned(),
            unit: unit.to_owned(),
            task: "t.run".to_owned(),
            enqueued_at: at,
            body: json!({"unit": unit, "at": at}),
        }
    }

    fn record(key: &str, status: u16) -> IdempotencyRecord {
        IdempotencyRecord {
            scope: "s".to_owned(),
            key: key.to_owned(),
            fingerprint: format!("f{status}"),
            status,
            body: format!("{{\"status\":{status}}}"),
            expires_at: u64::MAX / 4,
        }
    }

    #[tokio::test]
    async fn every_part_of_a_batch_round_trips() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(&dir).await;
        let mut a = append("a", 0, 3);
        a.projection.parent = Some("p \"quoted\" ünïcode".to_owned());
        a.projection.output = Some(json!({"x": [1, 2.5, null, "y"]}));
        a.projection.error = Some(json!({"code": "E", "message": "m"}));
        a.projection.status = "completed".to_owned();
        let mut t = Transaction {
            appends: vec![a.clone(), append("b", 0, 1)],
            ..Transaction::default()
        };
        t.queue = vec![
            enqueue("a", "u1", 1),
            enqueue("a", "u2", 2),
            QueueOp::Remove {
                execution_id: "a".to_owned(),
                unit: "u1".to_owned(),
            },
            enqueue("b", "u3", 3),
            enqueue("b", "u3", 4),
        ];
        t.idempotency = vec![record("k", 201), record("k", 409), record("j", 200)];
        store.commit(&t).await.unwrap();

        let got = store.load_execution("a").await.unwrap().unwrap();
        let mut want = a.projection.clone();
        want.last_seq = 3;
        assert_eq!(got.row, want);
        assert_eq!(got.events[..], a.events[..]);
        let events: Vec<(String, i64, i64, String)> =
            sqlx::query_as("SELECT execution_id, seq, at, type FROM events ORDER BY 1, 2")
                .fetch_all(&store.readers)
                .await
                .unwrap();
        assert_eq!(events.len(), 4);
        assert_eq!(events[0], ("a".into(), 1, 1_001, "WorkflowCreated".into()));
        assert_eq!(events[1].3, "SignalReceived");

        let queue = store.queue().await.unwrap();
        assert_eq!(queue, vec![enqueue("a", "u2", 2), enqueue("b", "u3", 4)]);
        assert_eq!(
            store.idempotency("s", "k", 0).await.unwrap(),
            Some(record("k", 409))
        );
        assert_eq!(
            store.idempotency("s", "j", 0).await.unwrap(),
            Some(record("j", 200))
        );

        // Removing a queue row and consuming inbox entries.
        sqlx::query("INSERT INTO inbox (node_id, execution_id, body, created_at) VALUES ('n', 'a', '{}', 1), ('n', 'b', '{}', 2)")
            .execute(store.writer.lock().await.unwrap().conn().unwrap())
            .await
            .unwrap();
        let first: i64 = sqlx::query_scalar("SELECT MIN(id) FROM inbox")
            .fetch_one(store.writer.lock().await.unwrap().conn().unwrap())
            .await
            .unwrap();
        let t = Transaction {
            queue: vec![QueueOp::Remove {
                execution_id: "b".to_owned(),
                unit: "u3".to_owned(),
            }],
            inbox_consumed: vec![Consumed {
                id: first,
                execution_id: "a".to_owned(),
                fence: Fence {
                    node_id: "n".to_owned(),
                    epoch: 1,
                },
            }],
            ..Transaction::default()
        };
        store.commit(&t).await.unwrap();
        assert_eq!(store.queue().await.unwrap(), vec![enqueue("a", "u2", 2)]);
        let left: Vec<String> = sqlx::query_scalar("SELECT execution_id FROM inbox")
            .fetch_all(store.writer.lock().await.unwrap().conn().unwrap())
            .await
            .unwrap();
        assert_eq!(left, vec!["b".to_owned()]);
    }

    #[tokio::test]
    async fn a_conflict_names_every_execution_and_writes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(&dir).await;
        store
            .commit(&Transaction {
                appends: vec![append("a", 0, 2), fenced("owned", 0, 1, "n2", 5)],
                ..Transaction::default()
            })
            .await
            .unwrap();
        let t = Transaction {
            appends: vec![
                append("new", 0, 1),
                append("a", 1, 3),
                fenced("owned", 1, 2, "n1", 4),
            ],
            queue: vec![enqueue("new", "u", 1)],
            ..Transaction::default()
        };
        match store.commit(&t).await {
            Err(StorageError::Conflict { fenced, stale }) => {
                assert_eq!(fenced, vec!["owned".to_owned()]);
                assert_eq!(stale, vec!["a".to_owned()]);
            }
            other => panic!("expected a conflict, got {other:?}"),
        }
        assert!(store.execution("new").await.unwrap().is_none());
        assert!(store.queue().await.unwrap().is_empty());
        assert_eq!(store.execution("a").await.unwrap().unwrap().last_seq, 2);
    }

    #[tokio::test]
    async fn a_commit_reports_written_before_its_sync_and_a_refused_one_never() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(&dir).await;
        let seen = std::sync::Mutex::new(Vec::new());
        let written = || seen.lock().unwrap().push(store.wal_syncs());
        let t = Transaction {
            appends: vec![append("a", 0, 2)],
            ..Transaction::default()
        };
        let syncs = store.wal_syncs();
        store
            .commit_signalling(
                Box::new({
                    let t = t.clone();
                    move || t
                }),
                &written,
            )
            .await
            .unwrap();
        // Called once, before the commit's own sync, which followed.
        assert_eq!(*seen.lock().unwrap(), vec![syncs]);
        assert_eq!(store.wal_syncs(), syncs + 1);
        // The same append again is stale: refused, never written.
        assert!(matches!(
            store
                .commit_signalling(
                    Box::new({
                        let t = t.clone();
                        move || t
                    }),
                    &written
                )
                .await,
            Err(StorageError::Conflict { .. })
        ));
        assert_eq!(seen.lock().unwrap().len(), 1);
    }

    #[tokio::test]
    async fn expired_idempotency_records_are_found_through_their_index() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(&dir).await;
        let expiring = |key: &str, expires_at: u64| IdempotencyRecord {
            expires_at,
            ..record(key, 201)
        };
        store
            .commit(&Transaction {
                idempotency: vec![
                    expiring("old", 1_000),
                    expiring("due", 2_000),
                    expiring("live", 3_000),
                ],
                ..Transaction::default()
            })
            .await
            .unwrap();
        assert_eq!(store.purge_idempotency(2_000).await.unwrap(), 2);
        let left: Vec<String> = store
            .idempotency_records(0)
            .await
            .unwrap()
            .into_iter()
            .map(|r| r.key)
            .collect();
        assert_eq!(left, vec!["live".to_owned()]);
        // Each round reads only what has expired, not every record.
        let plan = explain(&store, PURGE_IDEMPOTENCY).await;
        assert!(
            plan.iter().any(|d| d.contains("idempotency_expiry")),
            "the purge does not use the expiry index: {plan:?}"
        );
    }

    /// `EXPLAIN QUERY PLAN` of `sql` (one `?` bound to 0): its details.
    async fn explain(store: &SqliteStore, sql: &str) -> Vec<String> {
        let rows = sqlx::query(&format!("EXPLAIN QUERY PLAN {sql}"))
            .bind(0_i64)
            .fetch_all(&store.readers)
            .await
            .unwrap();
        rows.iter().map(|r| r.get::<String, _>("detail")).collect()
    }

    #[tokio::test]
    async fn two_appends_of_one_execution_clash_as_before() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(&dir).await;
        let t = Transaction {
            appends: vec![append("x", 0, 1), append("y", 0, 1), append("x", 0, 2)],
            ..Transaction::default()
        };
        match store.commit(&t).await {
            Err(StorageError::Conflict { fenced, stale }) => {
                assert!(fenced.is_empty());
                assert_eq!(stale, vec!["x".to_owned()]);
            }
            other => panic!("expected a conflict, got {other:?}"),
        }
        assert!(store.execution("y").await.unwrap().is_none());
        // The store is still usable afterwards.
        store
            .commit(&Transaction {
                appends: vec![append("y", 0, 1)],
                ..Transaction::default()
            })
            .await
            .unwrap();
        assert_eq!(store.execution("y").await.unwrap().unwrap().last_seq, 1);
    }

    #[tokio::test]
    async fn a_transaction_left_open_by_a_cancelled_holder_is_rolled_back() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(&dir).await;
        {
            // A holder cancelled after BEGIN and a write, before COMMIT.
            let mut held = store.writer.lock().await.unwrap();
            held.begun();
            sqlx::raw_sql(
                "BEGIN IMMEDIATE; INSERT INTO events (execution_id, seq, at, type, body) \
                 VALUES ('ghost', 1, 0, 'WorkflowStarted', '{}')",
            )
            .execute(held.conn().unwrap())
            .await
            .unwrap();
        }
        store
            .commit(&Transaction {
                appends: vec![append("next", 0, 1)],
                ..Transaction::default()
            })
            .await
            .unwrap();
        assert!(has_events(&store, "next").await);
        assert!(!has_events(&store, "ghost").await);
    }

    #[tokio::test]
    async fn a_closed_store_refuses_commits_instead_of_reopening() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(&dir).await;
        store.close().await;
        let t = Transaction {
            appends: vec![append("late", 0, 1)],
            ..Transaction::default()
        };
        match store.commit(&t).await {
            Err(StorageError::Unavailable(message)) => assert!(message.contains("closed")),
            other => panic!("expected unavailable, got {other:?}"),
        }
    }

    /// Runs `sql` on the writer connection (a planted failure).
    async fn plant(store: &SqliteStore, sql: &str) {
        let mut held = store.writer.lock().await.unwrap();
        sqlx::raw_sql(sql)
            .execute(held.conn().unwrap())
            .await
            .unwrap();
    }

    /// Whether `id` has any stored event.
    async fn has_events(store: &SqliteStore, id: &str) -> bool {
        !store.events_of(id, 0, 10).await.unwrap().is_empty()
    }

    #[tokio::test]
    async fn a_write_failing_midway_applies_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(&dir).await;
        // The events go in before the executions rows: make the second
        // execution's row fail after both histories are written.
        plant(
            &store,
            "CREATE TRIGGER planted BEFORE INSERT ON executions WHEN NEW.id = 'bad' \
             BEGIN SELECT RAISE(ABORT, 'planted failure'); END",
        )
        .await;
        let t = Transaction {
            appends: vec![append("good", 0, 2), append("bad", 0, 1)],
            idempotency: vec![record("k", 201)],
            ..Transaction::default()
        };
        match store.commit(&t).await {
            Err(StorageError::Unavailable(message)) => assert!(message.contains("planted")),
            other => panic!("expected unavailable, got {other:?}"),
        }
        assert!(store.execution("good").await.unwrap().is_none());
        assert!(!has_events(&store, "good").await);
        assert_eq!(store.idempotency("s", "k", 0).await.unwrap(), None);
        // No transaction was left open on the writer connection.
        store
            .commit(&Transaction {
                appends: vec![append("good", 0, 2)],
                ..Transaction::default()
            })
            .await
            .unwrap();
        assert_eq!(store.execution("good").await.unwrap().unwrap().last_seq, 2);
    }

    #[tokio::test]
    async fn a_commit_refused_by_sqlite_applies_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(&dir).await;
        // A deferred foreign key is checked at COMMIT, which then fails and
        // leaves the transaction open: the store rolls it back.
        plant(
            &store,
            "CREATE TABLE planted (x TEXT REFERENCES executions (id) DEFERRABLE INITIALLY DEFERRED); \
             CREATE TRIGGER planted AFTER INSERT ON events WHEN NEW.execution_id = 'bad' \
             BEGIN INSERT INTO planted VALUES ('missing'); END",
        )
        .await;
        let t = Transaction {
            appends: vec![append("good", 0, 1), append("bad", 0, 1)],
            ..Transaction::default()
        };
        match store.commit(&t).await {
            Err(StorageError::Unavailable(message)) => {
                assert!(message.contains("FOREIGN KEY"), "{message}")
            }
            other => panic!("expected unavailable, got {other:?}"),
        }
        assert!(store.execution("good").await.unwrap().is_none());
        assert!(!has_events(&store, "good").await);
        store
            .commit(&Transaction {
                appends: vec![append("good", 0, 1)],
                ..Transaction::default()
            })
            .await
            .unwrap();
        assert!(has_events(&store, "good").await);
    }
}
