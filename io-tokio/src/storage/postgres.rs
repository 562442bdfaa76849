//! The PostgreSQL backend: `synchronous_commit = on` pinned on every
//! connection, versioned migrations run at open, one transaction per commit
//! with the appended executions' rows locked (`FOR UPDATE`) while their
//! `seq` and owner epoch are checked. A batch is written with a handful of
//! set-based statements (arrays bound with `UNNEST`), so the cost of a group
//! commit does not grow with round trips per execution.

use super::lease::LeaderFence;
use super::rows::{
    self, decode, encode, execution_row, to_i64, to_u64, unavailable, EXECUTION_COLUMNS,
};
use super::{check, check_appends, Owner, Storage, StorageError};
use super::{
    DefinitionRecord, ExecutionRow, IdempotencyRecord, ListFilter, QueueOp, StoredExecution,
    Transaction,
};
use super::{ListPage, Purged};
use async_trait::async_trait;

pub mod claim;
mod columns;
mod in_doubt;
mod one_statement;
mod reads;
mod shared;
mod writer;
use columns::{add_to_counts, upsert_executions, Columns, Keys};
pub use in_doubt::{InDoubt, Outcome};
use orbit_core::history::Event;
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions, PgRow};
use sqlx::{Executor, Postgres, Row};
use std::collections::BTreeMap;
use std::str::FromStr;
use std::sync::{Arc, LazyLock, Mutex};
use std::time::Duration;

/// How to open a PostgreSQL store.
#[derive(Debug, Clone)]
pub struct PostgresOptions {
    /// `postgres://user@host:port/database`.
    pub url: String,
    /// How long a commit or read waits for a connection (including
    /// connecting) before failing with `Unavailable`.
    pub acquire_timeout: Duration,
    /// Reader connections (the writer has its own).
    pub readers: u32,
    /// Commit connections: one per group commit the node keeps in flight
    /// (`--commits-in-flight`), so that they are written at the same time.
    pub writers: u32,
    /// How soon after its last commit a commit connection still writes a
    /// group commit of appends (and idempotency records) as one statement
    /// (see
    /// `one_statement`); after a longer pause it begins a transaction
    /// first, which tells a connection the database ended meanwhile from
    /// a commit lost on its way. Zero: never one statement.
    pub warm: Duration,
}

impl PostgresOptions {
    /// Defaults for `url`: 5 s acquire timeout, 4 readers, 2 writers,
    /// warm for 2 ms.
    pub fn new(url: impl Into<String>) -> Self {
        PostgresOptions {
            url: url.into(),
            acquire_timeout: Duration::from_secs(5),
            readers: 4,
            writers: 2,
            warm: Duration::from_millis(2),
        }
    }
}

/// A store in one PostgreSQL database.
#[derive(Debug, Clone)]
pub struct PostgresStore {
    writer: Arc<writer::Writer>,
    readers: PgPool,
    /// Shared cluster mode's calls (connected on first use).
    cluster: PgPool,
    /// `--cluster`: the leadership term every commit checks.
    fence: Option<Arc<LeaderFence>>,
    /// Commits whose outcome could not be settled yet (see
    /// [`in_doubt`]); every call settles them first.
    in_doubt: Arc<Mutex<Vec<Doubt>>>,
}

/// A commit whose outcome is not known yet.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Doubt {
    /// A transaction whose `COMMIT` got no answer.
    Transaction(InDoubt),
    /// A commit in one statement that got no answer.
    Statement(one_statement::Token),
}

/// Maps an error of the COMMIT statement. A reply from the server says the
/// transaction was rolled back; anything else (the connection dropped, a
/// protocol error) leaves the outcome unknown.
fn commit_error(e: sqlx::Error) -> StorageError {
    match e {
        sqlx::Error::Database(db) => {
            StorageError::Unavailable(format!("commit refused: {}", db.message()))
        }
        other => StorageError::Ambiguous(other.to_string()),
    }
}

impl PostgresStore {
    /// Connects, pins `synchronous_commit = on` on every connection and runs
    /// the migrations.
    pub async fn open(options: &PostgresOptions) -> Result<Self, StorageError> {
        // A process paused in the middle of a commit (SIGSTOP, a VM freeze)
        // must not hold its locks — among them the cluster lease row it
        // reads `FOR SHARE` — until it wakes: the database ends a session
        // idle inside a transaction after a second, which rolls that commit
        // back and lets a standby take over.
        let connect = PgConnectOptions::from_str(&options.url)
            .map_err(unavailable)?
            .application_name("orbit")
            .options([("idle_in_transaction_session_timeout", "1000")]);
        // The writer only looks rows up by key. While a table is young its
        // statistics are stale or absent, and the planner then prefers to
        // scan every row for a lookup of a group commit's ids (hundreds of
        // scans a minute at full load, a fifth of the database's CPU per
        // step); with sequential scans priced out, every lookup is an index
        // scan whatever the statistics say. No statement is refused: a
        // table without a usable index is still scanned.
        // A commit connection is taken from the pool only when its slot
        // has none (at start, or after one broke), so the pool may test it
        // first: an idle one that died with the database (the migrations'
        // connection, say) is replaced rather than failing a commit.
        let writers = options.writers.max(1);
        let writer = pool_options(writers, options.acquire_timeout)
            .test_before_acquire(true)
            .connect_with(connect.clone().options([("enable_seqscan", "off")]))
            .await
            .map_err(unavailable)?;
        sqlx::migrate!("./migrations/postgres")
            .run(&writer)
            .await
            .map_err(|e| StorageError::Unavailable(format!("migration failed: {e}")))?;
        one_statement::forget_old_tokens(&writer).await?;
        let readers = pool_options(options.readers.max(1), options.acquire_timeout)
            .connect_lazy_with(connect.clone());
        let cluster = pool_options(options.readers.max(1), options.acquire_timeout)
            .connect_lazy_with(connect.application_name("orbit-shared"));
        Ok(PostgresStore {
            writer: Arc::new(writer::Writer::new(writer, writers as usize, options.warm)),
            readers,
            cluster,
            fence: None,
            in_doubt: Arc::default(),
        })
    }

    /// The same database, every commit fenced by `fence` (checked in the
    /// commit's own transaction; see [`LeaderFence`]).
    pub fn fenced_by(&self, fence: Arc<LeaderFence>) -> PostgresStore {
        PostgresStore {
            fence: Some(fence),
            ..self.clone()
        }
    }

    /// What became of the transaction `doubt` (see [`in_doubt`]): its
    /// status once final, ending its backend if it is still in progress.
    pub async fn settle(&self, doubt: InDoubt) -> Result<Outcome, StorageError> {
        in_doubt::settle(&self.readers, doubt).await
    }

    /// What became of a commit in one statement that got no answer, made
    /// with the commit token `key` holding `value` (see `one_statement`):
    /// fences the token and reads the outcome.
    pub async fn settle_statement(&self, key: &str, value: i64) -> Result<Outcome, StorageError> {
        let token = one_statement::Token {
            key: key.to_owned(),
            value,
        };
        one_statement::settle(&self.readers, &token).await
    }

    /// The COMMIT of `doubt` got no answer (`message`): settles it now, or
    /// keeps it in doubt and answers `Ambiguous`.
    async fn after_lost_commit(&self, doubt: InDoubt, message: String) -> Result<(), StorageError> {
        self.after_lost(Doubt::Transaction(doubt), message).await
    }

    /// What became of `doubt`.
    async fn settle_doubt(&self, doubt: &Doubt) -> Result<Outcome, StorageError> {
        match doubt {
            Doubt::Transaction(doubt) => self.settle(*doubt).await,
            Doubt::Statement(token) => one_statement::settle(&self.readers, token).await,
        }
    }

    /// `doubt` got no answer (`message`): settles it now, or keeps it in
    /// doubt and answers `Ambiguous`.
    async fn after_lost(&self, doubt: Doubt, message: String) -> Result<(), StorageError> {
        match self.settle_doubt(&doubt).await {
            Ok(Outcome::Committed) => {
                tracing::warn!(?doubt, "a commit got no answer ({message}); it is durable");
                Ok(())
            }
            Ok(Outcome::Aborted) => Err(StorageError::Unavailable(format!(
                "{message}; nothing of the commit was written"
            ))),
            Err(e) => {
                self.lock_in_doubt().push(doubt);
                Err(StorageError::Ambiguous(format!("{message} ({e})")))
            }
        }
    }

    fn lock_in_doubt(&self) -> std::sync::MutexGuard<'_, Vec<Doubt>> {
        self.in_doubt.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Settles every commit still in doubt, before anything else reads or
    /// writes: until then the database may not show their final outcome.
    async fn settled(&self) -> Result<(), StorageError> {
        let pending: Vec<Doubt> = {
            let doubts = self.lock_in_doubt();
            if doubts.is_empty() {
                return Ok(());
            }
            doubts.clone()
        };
        for doubt in pending {
            if let Err(e) = self.settle_doubt(&doubt).await {
                return Err(StorageError::Unavailable(format!(
                    "an earlier commit is still in doubt: {e}"
                )));
            }
            self.lock_in_doubt().retain(|d| *d != doubt);
        }
        Ok(())
    }

    /// Closes every connection.
    pub async fn close(&self) {
        self.cluster.close().await;
        self.readers.close().await;
        self.writer.close().await;
    }

    /// The writer connection's `synchronous_commit` setting, for operators
    /// and tests to check the durability setting.
    pub async fn synchronous_commit(&self) -> Result<String, StorageError> {
        self.writer_setting("synchronous_commit").await
    }

    /// `SHOW name` on the kept commit connection, for operators and tests
    /// (detached if it fails, as a commit would do: the connection is not
    /// tested between uses).
    pub async fn writer_setting(&self, name: &str) -> Result<String, StorageError> {
        let mut held = self.writer.lock().await?;
        match sqlx::query_scalar(&format!("SHOW {name}"))
            .fetch_one(held.conn()?)
            .await
        {
            Ok(value) => Ok(value),
            Err(e) => {
                held.detach();
                Err(unavailable(e))
            }
        }
    }

    /// Begins the commit's transaction on `held`. The kept connection is
    /// not tested between commits (a round trip each), so one that broke
    /// while it sat idle (the database restarted, an administrator ended
    /// it) fails here, before anything was begun: it is replaced by a
    /// fresh one from the pool, once. A fresh one that fails is dropped,
    /// and the commit is refused.
    async fn begin(held: &mut writer::Held<'_>) -> Result<InDoubt, StorageError> {
        match in_doubt::begin(held.conn()?).await {
            Ok(doubt) => return Ok(doubt),
            Err(e) if held.reused() => {
                tracing::info!(error = %e, "the kept commit connection broke while idle; replaced");
                held.replace().await?;
            }
            Err(e) => {
                held.detach();
                return Err(unavailable(e));
            }
        }
        in_doubt::begin(held.conn()?).await.map_err(|e| {
            held.detach();
            unavailable(e)
        })
    }

    /// Writes `tx` (which [`one_statement::fits`]) in one statement on
    /// `held`. A kept connection that broke while it sat idle is replaced,
    /// once, when the statement is known not to have landed.
    async fn commit_in_one_statement(
        &self,
        mut held: writer::Held<'_>,
        tx: &Transaction,
        shard: &str,
    ) -> Result<(), StorageError> {
        let columns = Columns::of(tx)?;
        let keys = Keys::of(&tx.idempotency);
        let checked = Self::checked_ids(tx);
        let mut replaced = false;
        loop {
            let token = held.token().clone();
            let term = self.fence.as_ref().map(|f| (f.node_id(), f.epoch()));
            let conn = held.conn()?;
            let answer =
                one_statement::write(conn, &columns, &keys, &checked, shard, &token, term).await;
            match answer {
                one_statement::Answer::Written => {
                    held.advance_token();
                    return Ok(());
                }
                one_statement::Answer::Kept(before, lease) => {
                    held.advance_token();
                    if let Some(fence) = &self.fence {
                        // Refused, and the term deposed, unless the lease
                        // row still names it (no row: not this term's).
                        let (holder, epoch) = lease.unwrap_or_default();
                        fence.judge(&holder, epoch)?;
                    }
                    let stored = |id: &str| {
                        before.get(id).map(|(last_seq, node_id, epoch)| Owner {
                            last_seq: *last_seq,
                            node_id,
                            epoch: *epoch,
                        })
                    };
                    // The statement judged by the same rule; should the two
                    // ever differ, what was written (nothing) decides.
                    return Err(check_appends(&tx.appends, stored).err().unwrap_or_else(|| {
                        StorageError::Conflict {
                            fenced: Vec::new(),
                            stale: checked.clone(),
                        }
                    }));
                }
                one_statement::Answer::Refused(e) => {
                    if !matches!(e, StorageError::Conflict { .. }) {
                        held.renew_token();
                    }
                    return Err(e);
                }
                one_statement::Answer::Lost(message) => {
                    // Whatever happened, the connection must not be reused,
                    // nor the token: a copy of the statement may be on its
                    // way.
                    held.detach();
                    held.renew_token();
                    let doubt = Doubt::Statement(token);
                    let retry = held.reused() && !replaced;
                    if retry {
                        if let Ok(Outcome::Aborted) = self.settle_doubt(&doubt).await {
                            tracing::info!(
                                error = %message,
                                "the kept commit connection broke while idle; replaced"
                            );
                            held.replace().await?;
                            replaced = true;
                            continue;
                        }
                    }
                    drop(held);
                    return self.after_lost(doubt, message).await;
                }
            }
        }
    }

    /// The ids a transaction's conflict rule looks at, sorted (concurrent
    /// writers lock rows in the same order).
    fn checked_ids(tx: &Transaction) -> Vec<String> {
        let mut ids: Vec<String> = tx
            .appends
            .iter()
            .map(|a| a.execution_id.clone())
            .chain(tx.inbox_consumed.iter().map(|c| c.execution_id.clone()))
            .collect();
        ids.sort();
        ids.dedup();
        ids
    }

    /// Locks and reads the rows of `tx`'s executions (a transaction that
    /// only consumes inbox entries; one with appends reads them in the
    /// statement that writes its projections).
    async fn lock_rows(
        conn: &mut sqlx::PgConnection,
        tx: &Transaction,
    ) -> Result<Rows, StorageError> {
        // Not a persistent (named) statement: PostgreSQL would settle on a
        // generic plan while the table is still small — a sequential scan
        // testing every row against the whole id array — and keep it as the
        // table grows. Planned per call, the lookup stays an index scan.
        let rows = sqlx::query(
            "SELECT id, last_seq, owner_node, owner_epoch FROM executions \
             WHERE id = ANY($1) ORDER BY id FOR UPDATE",
        )
        .persistent(false)
        .bind(Self::checked_ids(tx))
        .fetch_all(&mut *conn)
        .await
        .map_err(unavailable)?;
        stored_rows(&rows)
    }

    /// Checks every append and consumed inbox entry against the rows as
    /// they were before this transaction wrote (`current`, already locked)
    /// with the shared conflict rule ([`check`]), so a conflict names all
    /// the executions concerned and the transaction is rolled back. The
    /// rows of the executions are locked first (`FOR UPDATE`, by id), then
    /// the entries here: the order a takeover locks them in.
    async fn check(
        conn: &mut sqlx::PgConnection,
        tx: &Transaction,
        current: &Rows,
    ) -> Result<(), StorageError> {
        let mut entries: BTreeMap<i64, String> = BTreeMap::new();
        if !tx.inbox_consumed.is_empty() {
            let mut wanted: Vec<i64> = tx.inbox_consumed.iter().map(|c| c.id).collect();
            wanted.sort_unstable();
            wanted.dedup();
            let rows = sqlx::query(
                "SELECT id, execution_id FROM inbox WHERE id = ANY($1) ORDER BY id FOR UPDATE",
            )
            .persistent(false)
            .bind(&wanted)
            .fetch_all(&mut *conn)
            .await
            .map_err(unavailable)?;
            for r in &rows {
                entries.insert(
                    r.try_get(0).map_err(unavailable)?,
                    r.try_get(1).map_err(unavailable)?,
                );
            }
        }
        check(
            &tx.appends,
            &tx.inbox_consumed,
            |id| {
                current.get(id).map(|(last_seq, node_id, epoch)| Owner {
                    last_seq: *last_seq,
                    node_id,
                    epoch: *epoch,
                })
            },
            |id| entries.get(&id).map(String::as_str),
        )
    }

    /// Writes `tx`. With appends, the events and projections are written
    /// in the statement that locks and reads the rows as they were (one
    /// round trip where a lock, a projection write and an event write took
    /// three); the rule is judged on what it read, and a `Conflict` rolls
    /// the write back with the rest.
    async fn apply(
        conn: &mut sqlx::PgConnection,
        tx: &Transaction,
        shard: &str,
    ) -> Result<(), StorageError> {
        if let Some(w) = &tx.writer {
            // The member's contact row, locked against a takeover judging
            // it at the same time (see `Transaction::writer`).
            let live: Option<bool> = sqlx::query_scalar(
                "SELECT last_seen >= now() - $2 * interval '1 millisecond' \
                 FROM nodes WHERE node_id = $1 FOR SHARE",
            )
            .bind(&w.node_id)
            .bind(i64::try_from(w.timeout_ms).unwrap_or(i64::MAX))
            .fetch_optional(&mut *conn)
            .await
            .map_err(unavailable)?;
            if live != Some(true) && !(tx.appends.is_empty() && tx.inbox_consumed.is_empty()) {
                return Err(orbit_core::store::writer_not_live(tx));
            }
        }
        if !tx.appends.is_empty() {
            let (current, inserted) = Self::write_appends(conn, tx, shard).await?;
            Self::check(conn, tx, &current).await?;
            let count: usize = tx.appends.iter().map(|a| a.events.len()).sum();
            if inserted != count {
                // The rule passed, yet some event was already there: a new
                // execution created concurrently by another writer (there
                // was no row to lock). The primary key caught it.
                return Err(StorageError::Conflict {
                    fenced: Vec::new(),
                    stale: tx.appends.iter().map(|a| a.execution_id.clone()).collect(),
                });
            }
        } else if !tx.inbox_consumed.is_empty() {
            let current = Self::lock_rows(conn, tx).await?;
            Self::check(conn, tx, &current).await?;
        }
        if !tx.definitions.is_empty() {
            Self::write_definitions(conn, &tx.definitions).await?;
        }
        if !tx.idempotency.is_empty() {
            let written =
                Self::write_idempotency(conn, &tx.idempotency, tx.writer.is_some()).await?;
            if !written && !tx.appends.is_empty() {
                return Err(orbit_core::store::key_taken(tx));
            }
        }
        if !tx.queue.is_empty() {
            Self::write_queue(conn, &tx.queue).await?;
        }
        if !tx.inbox_consumed.is_empty() {
            let ids: Vec<i64> = tx.inbox_consumed.iter().map(|c| c.id).collect();
            // Planned per call, like the row lock.
            sqlx::query("DELETE FROM inbox WHERE id = ANY($1)")
                .persistent(false)
                .bind(&ids)
                .execute(&mut *conn)
                .await
                .map_err(unavailable)?;
        }
        Ok(())
    }

    /// The events and projection upserts of all the appends, and what they
    /// change in the counts per status (in the shard of [`counts_shard`]),
    /// in one statement that also locks the rows of every execution `tx`
    /// names and returns them as they were before it (all parts of a
    /// statement see one snapshot), with the number of events it inserted:
    /// one round trip for the whole write. An event already stored is
    /// skipped, not an error, so the caller judges the rule on the rows
    /// first and a shortfall after; either way the transaction is rolled
    /// back. For an execution appended twice the last append's projection
    /// wins.
    async fn write_appends(
        conn: &mut sqlx::PgConnection,
        tx: &Transaction,
        shard: &str,
    ) -> Result<(Rows, usize), StorageError> {
        let columns = Columns::of(tx)?;
        let checked = Self::checked_ids(tx);
        // Rows locked in id order first (the upsert's rows are in id order
        // too): concurrent writers never wait on each other in a cycle.
        // Prepared once per connection: planning this statement on every
        // call made a commit one execution at a time take 1.02 ms instead
        // of 0.66 ms. The generic plan PostgreSQL settles on after
        // a few calls cannot be the sequential scan that `lock_rows` avoids
        // by planning per call, because the commit connection prices
        // sequential scans out (`enable_seqscan = off`).
        static STATEMENT: LazyLock<String> = LazyLock::new(|| {
            format!(
                "WITH before AS (SELECT id, last_seq, owner_node, owner_epoch, status \
                 FROM executions WHERE id = ANY($16) ORDER BY id FOR UPDATE), \
                 written AS ({}), \
                 appended AS (INSERT INTO events (execution_id, seq, at, type, body) \
                 SELECT * FROM UNNEST($17::text[], $18::int8[], $19::int8[], $20::text[], \
                 $21::text[]) ON CONFLICT DO NOTHING RETURNING 1), \
                 {} \
                 SELECT id, last_seq, owner_node, owner_epoch FROM before \
                 UNION ALL SELECT NULL, count(*), NULL, NULL FROM appended",
                upsert_executions(""),
                add_to_counts(""),
            )
        });
        let query = sqlx::query(STATEMENT.as_str()).persistent(true);
        let rows = columns
            .bind(query, &checked)
            .bind(shard)
            .fetch_all(&mut *conn)
            .await
            .map_err(unavailable)?;
        // The row without an id counts the events inserted; the others are
        // the rows as they were.
        let mut before = Vec::with_capacity(rows.len());
        let mut inserted = None;
        for row in rows {
            if row
                .try_get::<Option<&str>, _>(0)
                .map_err(unavailable)?
                .is_some()
            {
                before.push(row);
            } else {
                inserted = Some(row.try_get::<i64, _>(1).map_err(unavailable)?);
            }
        }
        let Some(inserted) = inserted else {
            return Err(StorageError::Unavailable(
                "commit: no count of events".into(),
            ));
        };
        Ok((
            stored_rows(&before)?,
            usize::try_from(inserted).unwrap_or(0),
        ))
    }

    async fn write_definitions(
        conn: &mut sqlx::PgConnection,
        definitions: &[DefinitionRecord],
    ) -> Result<(), StorageError> {
        let n = definitions.len();
        let mut names = Vec::with_capacity(n);
        let mut versions = Vec::with_capacity(n);
        let mut hashes = Vec::with_capacity(n);
        let mut kinds = Vec::with_capacity(n);
        let mut filenames = Vec::with_capacity(n);
        let mut sources = Vec::with_capacity(n);
        let mut bodies = Vec::with_capacity(n);
        let mut registered = Vec::with_capacity(n);
        for d in definitions {
            names.push(d.name.as_str());
            versions.push(d.version.as_str());
            hashes.push(d.hash.as_str());
            kinds.push(d.kind.as_str());
            filenames.push(d.filename.as_str());
            sources.push(d.source.as_str());
            bodies.push(encode(&d.body)?);
            registered.push(to_i64(d.registered_at));
        }
        sqlx::query(
            "INSERT INTO definitions (name, version, hash, kind, filename, source, body, registered_at) \
             SELECT * FROM UNNEST($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], \
             $6::text[], $7::text[], $8::int8[]) \
             ON CONFLICT (name, version) DO NOTHING",
        )
        .bind(&names)
        .bind(&versions)
        .bind(&hashes)
        .bind(&kinds)
        .bind(&filenames)
        .bind(&sources)
        .bind(&bodies)
        .bind(&registered)
        .execute(&mut *conn)
        .await
        .map_err(unavailable)?;
        Ok(())
    }

    /// Writes the records; `false` when, with `exclusive` (shared mode:
    /// other members write keys too), a live record of another writer was
    /// in the way and was kept (the caller refuses the transaction).
    async fn write_idempotency(
        conn: &mut sqlx::PgConnection,
        records: &[IdempotencyRecord],
        exclusive: bool,
    ) -> Result<bool, StorageError> {
        let columns = Keys::of(records);
        // Exclusive: a live record is not replaced (the WHERE leaves it,
        // and the row count tells).
        let only_expired = if exclusive {
            " WHERE idempotency.expires_at <= (EXTRACT(EPOCH FROM now()) * 1000)::BIGINT"
        } else {
            ""
        };
        let sql = format!(
            "INSERT INTO idempotency (scope, key, fingerprint, status, body, expires_at) \
             SELECT * FROM UNNEST($1::text[], $2::text[], $3::text[], $4::int4[], $5::text[], $6::int8[]) \
             ON CONFLICT (scope, key) DO UPDATE SET fingerprint = excluded.fingerprint, \
             status = excluded.status, body = excluded.body, expires_at = excluded.expires_at{only_expired}"
        );
        let query = sqlx::query(&sql).persistent(false);
        let written = columns
            .bind(query)
            .execute(&mut *conn)
            .await
            .map_err(unavailable)?;
        Ok(written.rows_affected() == columns.len() as u64)
    }

    async fn write_queue(
        conn: &mut sqlx::PgConnection,
        ops: &[QueueOp],
    ) -> Result<(), StorageError> {
        let last = rows::last_per_unit(ops);
        let mut del_ids = Vec::new();
        let mut del_units = Vec::new();
        let mut ids = Vec::new();
        let mut units = Vec::new();
        let mut tasks = Vec::new();
        let mut enqueued = Vec::new();
        let mut bodies = Vec::new();
        for ((execution_id, unit), op) in &last {
            match op {
                QueueOp::Enqueue {
                    task,
                    enqueued_at,
                    body,
                    ..
                } => {
                    ids.push(*execution_id);
                    units.push(*unit);
                    tasks.push(task.as_str());
                    enqueued.push(to_i64(*enqueued_at));
                    bodies.push(encode(body)?);
                }
                QueueOp::Remove { .. } => {
                    del_ids.push(*execution_id);
                    del_units.push(*unit);
                }
            }
        }
        if !del_ids.is_empty() {
            sqlx::query(
                "DELETE FROM task_queue q USING UNNEST($1::text[], $2::text[]) AS d(execution_id, unit) \
                 WHERE q.execution_id = d.execution_id AND q.unit = d.unit",
            )
            .bind(&del_ids)
            .bind(&del_units)
            .execute(&mut *conn)
            .await
            .map_err(unavailable)?;
        }
        if !ids.is_empty() {
            sqlx::query(
                "INSERT INTO task_queue (execution_id, unit, task, enqueued_at, body) \
                 SELECT * FROM UNNEST($1::text[], $2::text[], $3::text[], $4::int8[], $5::text[]) \
                 ON CONFLICT (execution_id, unit) DO UPDATE SET task = excluded.task, \
                 enqueued_at = excluded.enqueued_at, body = excluded.body",
            )
            .bind(&ids)
            .bind(&units)
            .bind(&tasks)
            .bind(&enqueued)
            .bind(&bodies)
            .execute(&mut *conn)
            .await
            .map_err(unavailable)?;
        }
        Ok(())
    }

    /// Executions (only the non-terminal ones when `active_only`) with
    /// their histories, oldest first.
    async fn load_many(&self, active_only: bool) -> Result<Vec<StoredExecution>, StorageError> {
        let clause = if active_only {
            "WHERE x.status IN ('pending', 'running', 'compensating')"
        } else {
            ""
        };
        let rows = sqlx::query(&format!(
            "SELECT {EXECUTION_COLUMNS} FROM executions x {clause} ORDER BY created_at, id"
        ))
        .fetch_all(&self.readers)
        .await
        .map_err(unavailable)?;
        let mut out: Vec<StoredExecution> = Vec::with_capacity(rows.len());
        let mut index: BTreeMap<String, usize> = BTreeMap::new();
        for r in &rows {
            let row = execution_row(r)?;
            index.insert(row.id.clone(), out.len());
            out.push(StoredExecution {
                row,
                events: Vec::new(),
            });
        }
        if out.is_empty() {
            return Ok(out);
        }
        // All the histories in one ordered scan rather than a query each.
        let events = sqlx::query(&format!(
            "SELECT e.execution_id, e.body FROM events e JOIN executions x ON x.id = e.execution_id \
             {clause} ORDER BY e.execution_id, e.seq"
        ))
        .fetch_all(&self.readers)
        .await
        .map_err(unavailable)?;
        for r in &events {
            let id: String = r.try_get(0).map_err(unavailable)?;
            let body: String = r.try_get(1).map_err(unavailable)?;
            if let Some(&i) = index.get(&id) {
                out[i].events.push(decode(&body)?);
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
            "SELECT body FROM events WHERE execution_id = $1 AND seq > $2 ORDER BY seq LIMIT $3",
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

/// The shard of `execution_counts` a commit on commit connection `slot`
/// adds to, so that two commits in flight never wait on each other's
/// totals: a shared-mode member's own (its node id), `''` for a single
/// server, the leader of `--cluster` and retention; a second connection
/// adds `#1` (no node id holds a `#`).
fn counts_shard(tx: &Transaction, slot: usize) -> String {
    let base = tx.writer.as_ref().map_or("", |w| w.node_id.as_str());
    if slot == 0 {
        base.to_owned()
    } else {
        format!("{base}#{slot}")
    }
}

/// Adds `changes` (status, change) to the running totals in shard `''`.
async fn add_counts(
    conn: &mut sqlx::PgConnection,
    changes: &BTreeMap<String, i64>,
) -> Result<(), StorageError> {
    if changes.is_empty() {
        return Ok(());
    }
    let statuses: Vec<&str> = changes.keys().map(String::as_str).collect();
    let ns: Vec<i64> = changes.values().copied().collect();
    sqlx::query(
        "INSERT INTO execution_counts (shard, status, n) \
         SELECT '', s, n FROM UNNEST($1::text[], $2::int8[]) AS c(s, n) \
         ON CONFLICT (shard, status) DO UPDATE SET n = execution_counts.n + excluded.n",
    )
    .bind(&statuses)
    .bind(&ns)
    .execute(conn)
    .await
    .map_err(unavailable)?;
    Ok(())
}

/// Rows as the conflict rule reads them: id -> (last seq, owner node,
/// owner epoch).
type Rows = BTreeMap<String, (u64, String, u64)>;

fn stored_rows(rows: &[PgRow]) -> Result<Rows, StorageError> {
    let mut current = Rows::new();
    for r in rows {
        current.insert(
            r.try_get(0).map_err(unavailable)?,
            (
                to_u64(r.try_get::<i64, _>(1).map_err(unavailable)?),
                r.try_get::<String, _>(2).map_err(unavailable)?,
                to_u64(r.try_get::<i64, _>(3).map_err(unavailable)?),
            ),
        );
    }
    Ok(current)
}

fn pool_options(max: u32, acquire_timeout: Duration) -> PgPoolOptions {
    PgPoolOptions::new()
        .max_connections(max)
        .acquire_timeout(acquire_timeout)
        .after_connect(|conn, _meta| {
            Box::pin(async move {
                // Durability is pinned here, not left to the server's
                // configuration: a commit is acknowledged only once flushed.
                conn.execute("SET synchronous_commit = on").await?;
                Ok(())
            })
        })
}

/// An `idempotency` row (PostgreSQL keeps `status` as `INT`).
fn idempotency_row(r: &PgRow) -> Result<IdempotencyRecord, StorageError> {
    rows::idempotency_row::<_, i32>(r)
}

#[async_trait]
impl Storage for PostgresStore {
    async fn commit(&self, tx: &Transaction) -> Result<(), StorageError> {
        self.settled().await?;
        if tx.is_empty() {
            return Ok(());
        }
        if self.fence.as_ref().is_some_and(|f| f.is_deposed()) {
            return Err(LeaderFence::refusal());
        }
        let mut held = self.writer.lock().await?;
        let shard = counts_shard(tx, held.slot());
        // An idle connection takes `BEGIN` first: a connection that broke
        // while idle fails there, before anything was sent, which a lone
        // statement's failure could not tell from a failure while it ran.
        if held.warm() && one_statement::fits(tx) {
            return self.commit_in_one_statement(held, tx, &shard).await;
        }
        let doubt = Self::begin(&mut held).await?;
        let conn = held.conn()?;
        let applied = match &self.fence {
            Some(fence) => match fence.check(conn).await {
                Ok(()) => Self::apply(conn, tx, &shard).await,
                Err(e) => Err(e),
            },
            None => Self::apply(conn, tx, &shard).await,
        };
        match applied {
            Ok(()) => match sqlx::query("COMMIT").execute(&mut *conn).await {
                Ok(_) => Ok(()),
                Err(e) => {
                    // Whatever happened, the connection must not be reused
                    // inside a transaction or half-broken.
                    held.detach();
                    drop(held);
                    match commit_error(e) {
                        StorageError::Ambiguous(message) => {
                            self.after_lost_commit(doubt, message).await
                        }
                        other => Err(other),
                    }
                }
            },
            Err(err) => {
                if let Err(e) = sqlx::query("ROLLBACK").execute(&mut *conn).await {
                    // A failed rollback leaves the connection unusable; the
                    // server rolls the transaction back when it goes away.
                    held.detach();
                    tracing::warn!(error = %e, "rollback failed; connection dropped");
                }
                Err(err)
            }
        }
    }

    async fn load_definitions(&self) -> Result<Vec<DefinitionRecord>, StorageError> {
        self.settled().await?;
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
        self.settled().await?;
        self.load_many(true).await
    }

    async fn load_all(&self) -> Result<Vec<StoredExecution>, StorageError> {
        self.settled().await?;
        self.load_many(false).await
    }

    async fn idempotency_records(&self, now: u64) -> Result<Vec<IdempotencyRecord>, StorageError> {
        self.settled().await?;
        let rows = sqlx::query(
            "SELECT scope, key, fingerprint, status, body, expires_at FROM idempotency WHERE expires_at > $1",
        )
        .bind(to_i64(now))
        .fetch_all(&self.readers)
        .await
        .map_err(unavailable)?;
        rows.iter().map(idempotency_row).collect()
    }

    async fn count_by_status(&self) -> Result<Vec<(String, u64)>, StorageError> {
        self.settled().await?;
        // The running totals (migration `0016`) summed over their shards,
        // not a count of the rows.
        let rows = sqlx::query(
            "SELECT status, SUM(n)::int8 FROM execution_counts GROUP BY status \
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
        self.settled().await?;
        let Some(row) = self.execution(id).await? else {
            return Ok(None);
        };
        let events = self.events_of(id, 0, u32::MAX).await?;
        Ok(Some(StoredExecution { row, events }))
    }

    async fn execution(&self, id: &str) -> Result<Option<ExecutionRow>, StorageError> {
        self.settled().await?;
        let row = sqlx::query(&format!(
            "SELECT {EXECUTION_COLUMNS} FROM executions WHERE id = $1"
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
        self.settled().await?;
        self.events_of(id, after_seq, limit).await
    }

    async fn list_executions(
        &self,
        filter: &ListFilter,
    ) -> Result<Vec<ExecutionRow>, StorageError> {
        self.settled().await?;
        let mut sql = format!("SELECT {EXECUTION_COLUMNS} FROM executions WHERE 1 = 1");
        let mut n = 0;
        let mut next = || {
            n += 1;
            format!("${n}")
        };
        if filter.status.is_some() {
            sql.push_str(&format!(" AND status = {}", next()));
        }
        if filter.workflow.is_some() {
            sql.push_str(&format!(" AND workflow = {}", next()));
        }
        if filter.before.is_some() {
            let (at, id) = (next(), next());
            sql.push_str(&format!(" AND (created_at, id) < ({at}, {id})"));
        }
        sql.push_str(&format!(
            " ORDER BY created_at DESC, id DESC LIMIT {}",
            next()
        ));
        let mut q = sqlx::query::<Postgres>(&sql);
        if let Some(s) = &filter.status {
            q = q.bind(s);
        }
        if let Some(w) = &filter.workflow {
            q = q.bind(w);
        }
        if let Some((at, id)) = &filter.before {
            q = q.bind(to_i64(*at)).bind(id);
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
        self.settled().await?;
        let row = sqlx::query(
            "SELECT scope, key, fingerprint, status, body, expires_at FROM idempotency \
             WHERE scope = $1 AND key = $2 AND expires_at > $3",
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
        self.settled().await?;
        let rows = sqlx::query(
            "SELECT execution_id, unit, task, enqueued_at, body FROM task_queue \
             ORDER BY enqueued_at, execution_id, unit",
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
        self.settled().await?;
        // On the writer's own connection: a hot standby or a read-only
        // default would refuse every commit.
        let read_only = self.writer_setting("transaction_read_only").await?;
        if read_only == "on" {
            return Err(StorageError::Unavailable(
                "the database is read-only (a standby, or default_transaction_read_only)".into(),
            ));
        }
        Ok(())
    }

    async fn ping(&self) -> Result<(), StorageError> {
        self.settled().await?;
        sqlx::query("SELECT 1")
            .execute(&self.readers)
            .await
            .map_err(unavailable)?;
        Ok(())
    }

    async fn list_page(&self, page: &ListPage) -> Result<Vec<ExecutionRow>, StorageError> {
        self.settled().await?;
        self.page(page).await
    }

    async fn purge_finished(
        &self,
        finished_before: u64,
        limit: u32,
    ) -> Result<Purged, StorageError> {
        self.settled().await?;
        self.purge(finished_before, limit).await
    }

    async fn purge_idempotency(&self, now: u64) -> Result<u64, StorageError> {
        self.settled().await?;
        // On a reader connection: PostgreSQL takes concurrent writers, and
        // the commit path keeps its own connection.
        let done = sqlx::query("DELETE FROM idempotency WHERE expires_at <= $1")
            .bind(to_i64(now))
            .execute(&self.readers)
            .await
            .map_err(unavailable)?
            .rows_affected();
        Ok(done)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_lost_connection_during_commit_is_ambiguous() {
        let lost = sqlx::Error::Io(std::io::Error::new(
            std::io::ErrorKind::ConnectionReset,
            "connection reset by peer",
        ));
        assert!(matches!(commit_error(lost), StorageError::Ambiguous(_)));
        assert!(matches!(
            commit_error(sqlx::Error::Protocol("unexpected message".into())),
            StorageError::Ambiguous(_)
        ));
        assert!(matches!(
            commit_error(sqlx::Error::PoolTimedOut),
            StorageError::Ambiguous(_)
        ));
    }
}
