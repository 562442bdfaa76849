//! The SQLite backend: WAL, `synchronous=FULL`, one writer connection and a
//! pool of readers, versioned migrations run at open, one transaction per
//! commit.

use super::records::{
    Append, DefinitionRecord, ExecutionRow, IdempotencyRecord, ListFilter, QueueOp,
    StoredExecution, Transaction,
};
use super::{Storage, StorageError};
use async_trait::async_trait;
use orbit_core::history::Event;
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteRow,
    SqliteSynchronous,
};
use sqlx::{Row, Sqlite};
use std::str::FromStr;
use std::time::Duration;

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
    writer: SqlitePool,
    readers: SqlitePool,
}

fn unavailable(e: impl std::fmt::Display) -> StorageError {
    StorageError::Unavailable(e.to_string())
}

fn decode<T: serde::de::DeserializeOwned>(text: &str) -> Result<T, StorageError> {
    serde_json::from_str(text).map_err(|e| StorageError::Unavailable(format!("corrupt row: {e}")))
}

fn encode<T: serde::Serialize>(value: &T) -> Result<String, StorageError> {
    serde_json::to_string(value).map_err(|e| StorageError::Unavailable(format!("encode: {e}")))
}

fn to_i64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

fn to_u64(v: i64) -> u64 {
    u64::try_from(v).unwrap_or(0)
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
        let writer = SqlitePoolOptions::new()
            .max_connections(1)
            .min_connections(1)
            .acquire_timeout(options.busy_timeout + Duration::from_secs(5))
            .connect_with(connect.clone())
            .await
            .map_err(unavailable)?;
        sqlx::migrate!("./migrations/sqlite")
            .run(&writer)
            .await
            .map_err(|e| StorageError::Unavailable(format!("migration failed: {e}")))?;
        let readers = SqlitePoolOptions::new()
            .max_connections(options.readers.max(1))
            .acquire_timeout(options.busy_timeout + Duration::from_secs(5))
            .connect_with(connect.read_only(true))
            .await
            .map_err(unavailable)?;
        Ok(SqliteStore { writer, readers })
    }

    /// Closes every connection.
    pub async fn close(&self) {
        self.readers.close().await;
        self.writer.close().await;
    }

    /// The writer connection's `(journal_mode, synchronous)` pragmas, for
    /// operators and tests to check the durability settings.
    pub async fn pragmas(&self) -> Result<(String, i64), StorageError> {
        let mut conn = self.writer.acquire().await.map_err(unavailable)?;
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

    async fn apply(
        conn: &mut sqlx::SqliteConnection,
        tx: &Transaction,
    ) -> Result<(), StorageError> {
        // Check every append first, so a conflict names all the executions
        // concerned and nothing is written.
        let mut fenced = Vec::new();
        let mut stale = Vec::new();
        for append in &tx.appends {
            let row = sqlx::query(
                "SELECT last_seq, owner_node, owner_epoch FROM executions WHERE id = ?",
            )
            .bind(&append.execution_id)
            .fetch_optional(&mut *conn)
            .await
            .map_err(unavailable)?;
            let (last_seq, owner_node, owner_epoch) = match row {
                Some(r) => (
                    to_u64(r.try_get::<i64, _>(0).map_err(unavailable)?),
                    r.try_get::<String, _>(1).map_err(unavailable)?,
                    to_u64(r.try_get::<i64, _>(2).map_err(unavailable)?),
                ),
                None => (0, String::new(), 0),
            };
            if let Some(fence) = &append.fence {
                let other_owner = !owner_node.is_empty() && owner_node != fence.node_id;
                if owner_epoch > fence.epoch || (other_owner && owner_epoch >= fence.epoch) {
                    fenced.push(append.execution_id.clone());
                    continue;
                }
            }
            let contiguous = append
                .events
                .iter()
                .enumerate()
                .all(|(i, e)| e.seq == append.after_seq + 1 + i as u64);
            if last_seq != append.after_seq || !contiguous {
                stale.push(append.execution_id.clone());
            }
        }
        if !fenced.is_empty() || !stale.is_empty() {
            return Err(StorageError::Conflict { fenced, stale });
        }
        for append in &tx.appends {
            Self::write_append(conn, append).await?;
        }
        for def in &tx.definitions {
            sqlx::query(
                "INSERT OR IGNORE INTO definitions (name, version, hash, kind, filename, source, body, registered_at) \
                 VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            )
            .bind(&def.name)
            .bind(&def.version)
            .bind(&def.hash)
            .bind(&def.kind)
            .bind(&def.filename)
            .bind(&def.source)
            .bind(encode(&def.body)?)
            .bind(to_i64(def.registered_at))
            .execute(&mut *conn)
            .await
            .map_err(unavailable)?;
        }
        for rec in &tx.idempotency {
            sqlx::query(
                "INSERT OR REPLACE INTO idempotency (scope, key, fingerprint, status, body, expires_at) \
                 VALUES (?, ?, ?, ?, ?, ?)",
            )
            .bind(&rec.scope)
            .bind(&rec.key)
            .bind(&rec.fingerprint)
            .bind(i64::from(rec.status))
            .bind(&rec.body)
            .bind(to_i64(rec.expires_at))
            .execute(&mut *conn)
            .await
            .map_err(unavailable)?;
        }
        for op in &tx.queue {
            match op {
                QueueOp::Enqueue {
                    execution_id,
                    unit,
                    task,
                    enqueued_at,
                    body,
                } => {
                    sqlx::query(
                        "INSERT OR REPLACE INTO task_queue (execution_id, unit, task, enqueued_at, body) \
                         VALUES (?, ?, ?, ?, ?)",
                    )
                    .bind(execution_id)
                    .bind(unit)
                    .bind(task)
                    .bind(to_i64(*enqueued_at))
                    .bind(encode(body)?)
                    .execute(&mut *conn)
                    .await
                    .map_err(unavailable)?;
                }
                QueueOp::Remove { execution_id, unit } => {
                    sqlx::query("DELETE FROM task_queue WHERE execution_id = ? AND unit = ?")
                        .bind(execution_id)
                        .bind(unit)
                        .execute(&mut *conn)
                        .await
                        .map_err(unavailable)?;
                }
            }
        }
        for id in &tx.inbox_consumed {
            sqlx::query("DELETE FROM inbox WHERE id = ?")
                .bind(id)
                .execute(&mut *conn)
                .await
                .map_err(unavailable)?;
        }
        Ok(())
    }

    async fn write_append(
        conn: &mut sqlx::SqliteConnection,
        append: &Append,
    ) -> Result<(), StorageError> {
        for event in &append.events {
            let body = encode(event)?;
            let ty = serde_json::to_value(event)
                .ok()
                .and_then(|v| v.get("type").and_then(|t| t.as_str()).map(str::to_owned))
                .unwrap_or_default();
            let result = sqlx::query(
                "INSERT INTO events (execution_id, seq, at, type, body) VALUES (?, ?, ?, ?, ?)",
            )
            .bind(&append.execution_id)
            .bind(to_i64(event.seq))
            .bind(to_i64(event.at))
            .bind(ty)
            .bind(body)
            .execute(&mut *conn)
            .await;
            if let Err(e) = result {
                if let Some(db) = e.as_database_error() {
                    if db.is_unique_violation() {
                        return Err(StorageError::Conflict {
                            fenced: Vec::new(),
                            stale: vec![append.execution_id.clone()],
                        });
                    }
                }
                return Err(unavailable(e));
            }
        }
        let p = &append.projection;
        let last_seq = append
            .events
            .last()
            .map(|e| e.seq)
            .unwrap_or(append.after_seq);
        let (owner_node, owner_epoch) = append
            .fence
            .as_ref()
            .map(|f| (f.node_id.clone(), f.epoch))
            .unwrap_or_default();
        sqlx::query(
            "INSERT INTO executions (id, workflow, version, definition_hash, status, parent, input, output, error, \
             created_at, updated_at, last_seq, owner_node, owner_epoch) \
             VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) \
             ON CONFLICT (id) DO UPDATE SET workflow = excluded.workflow, version = excluded.version, \
             definition_hash = excluded.definition_hash, status = excluded.status, parent = excluded.parent, \
             input = excluded.input, output = excluded.output, error = excluded.error, \
             updated_at = excluded.updated_at, last_seq = excluded.last_seq, \
             owner_node = excluded.owner_node, owner_epoch = excluded.owner_epoch",
        )
        .bind(&append.execution_id)
        .bind(&p.workflow)
        .bind(&p.version)
        .bind(&p.definition_hash)
        .bind(&p.status)
        .bind(&p.parent)
        .bind(encode(&p.input)?)
        .bind(p.output.as_ref().map(encode).transpose()?)
        .bind(p.error.as_ref().map(encode).transpose()?)
        .bind(to_i64(p.created_at))
        .bind(to_i64(p.updated_at))
        .bind(to_i64(last_seq))
        .bind(owner_node)
        .bind(to_i64(owner_epoch))
        .execute(&mut *conn)
        .await
        .map_err(unavailable)?;
        Ok(())
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

const EXECUTION_COLUMNS: &str =
    "id, workflow, version, definition_hash, status, parent, input, output, error, \
     created_at, updated_at, last_seq";

fn execution_row(r: &SqliteRow) -> Result<ExecutionRow, StorageError> {
    let output: Option<String> = r.try_get("output").map_err(unavailable)?;
    let error: Option<String> = r.try_get("error").map_err(unavailable)?;
    Ok(ExecutionRow {
        id: r.try_get("id").map_err(unavailable)?,
        workflow: r.try_get("workflow").map_err(unavailable)?,
        version: r.try_get("version").map_err(unavailable)?,
        definition_hash: r.try_get("definition_hash").map_err(unavailable)?,
        status: r.try_get("status").map_err(unavailable)?,
        parent: r.try_get("parent").map_err(unavailable)?,
        input: decode(&r.try_get::<String, _>("input").map_err(unavailable)?)?,
        output: output.as_deref().map(decode).transpose()?,
        error: error.as_deref().map(decode).transpose()?,
        created_at: to_u64(r.try_get("created_at").map_err(unavailable)?),
        updated_at: to_u64(r.try_get("updated_at").map_err(unavailable)?),
        last_seq: to_u64(r.try_get("last_seq").map_err(unavailable)?),
    })
}

fn idempotency_row(r: &SqliteRow) -> Result<IdempotencyRecord, StorageError> {
    Ok(IdempotencyRecord {
        scope: r.try_get("scope").map_err(unavailable)?,
        key: r.try_get("key").map_err(unavailable)?,
        fingerprint: r.try_get("fingerprint").map_err(unavailable)?,
        status: u16::try_from(r.try_get::<i64, _>("status").map_err(unavailable)?).unwrap_or(500),
        body: r.try_get("body").map_err(unavailable)?,
        expires_at: to_u64(r.try_get("expires_at").map_err(unavailable)?),
    })
}

#[async_trait]
impl Storage for SqliteStore {
    async fn commit(&self, tx: &Transaction) -> Result<(), StorageError> {
        let mut conn = self.writer.acquire().await.map_err(unavailable)?;
        sqlx::query("BEGIN IMMEDIATE")
            .execute(&mut *conn)
            .await
            .map_err(unavailable)?;
        match Self::apply(&mut conn, tx).await {
            Ok(()) => match sqlx::query("COMMIT").execute(&mut *conn).await {
                Ok(_) => Ok(()),
                Err(e) => {
                    // The outcome is unknown; make sure the connection is not
                    // left inside a transaction.
                    let _ = sqlx::query("ROLLBACK").execute(&mut *conn).await;
                    Err(StorageError::Ambiguous(e.to_string()))
                }
            },
            Err(err) => {
                if let Err(e) = sqlx::query("ROLLBACK").execute(&mut *conn).await {
                    // A failed rollback leaves the connection unusable.
                    conn.detach();
                    tracing::warn!(error = %e, "rollback failed; connection dropped");
                }
                Err(err)
            }
        }
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
        self.load_where("WHERE status NOT IN ('completed', 'failed', 'cancelled')")
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
        let rows =
            sqlx::query("SELECT status, COUNT(*) FROM executions GROUP BY status ORDER BY status")
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
        let mut conn = self.writer.acquire().await.map_err(unavailable)?;
        sqlx::query("BEGIN IMMEDIATE")
            .execute(&mut *conn)
            .await
            .map_err(unavailable)?;
        if let Err(e) = sqlx::query("ROLLBACK").execute(&mut *conn).await {
            conn.detach();
            return Err(unavailable(e));
        }
        Ok(())
    }

    async fn ping(&self) -> Result<(), StorageError> {
        sqlx::query("SELECT 1")
            .execute(&self.readers)
            .await
            .map_err(unavailable)?;
        Ok(())
    }

    async fn purge_idempotency(&self, now: u64) -> Result<u64, StorageError> {
        // Small batches, each its own statement, so group commits get the
        // writer connection in between.
        let mut total = 0;
        loop {
            let done = sqlx::query(
                "DELETE FROM idempotency WHERE rowid IN \
                 (SELECT rowid FROM idempotency WHERE expires_at <= ? LIMIT 500)",
            )
            .bind(to_i64(now))
            .execute(&self.writer)
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
