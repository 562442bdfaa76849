//! Shared cluster mode on PostgreSQL: the calls of [`shared::Store`] over
//! the tables of migration `0015` (see `orbit_core::store::shared` for
//! what each call promises and why it is one transaction). Each write is
//! one transaction begun like a commit, so a COMMIT without an answer is
//! settled the same way ([`super::in_doubt`]). The calls run on a small
//! pool of their own, so a beat never queues behind the group commit or
//! the API's reads. Row locks keep takeovers, sends and claims apart:
//!
//! - a takeover locks the dead node's rows `FOR UPDATE SKIP LOCKED` (by
//!   id, as commits do) before it moves them and re-addresses their inbox
//!   entries; it picks its share by the slot of each id's family root
//!   (`split_part(id, '.', 1)`, as `shared::assignee` does);
//! - a reclaim locks the node's own rows `FOR UPDATE` (by id): only the
//!   node itself calls it, so it may wait for its own older incarnation's
//!   commit;
//! - a send locks its execution's row `FOR SHARE` while it reads the owner
//!   and writes the entry, so the entry and a takeover never cross;
//! - a claim locks its queue row `FOR UPDATE SKIP LOCKED` and the
//!   execution's row `FOR SHARE SKIP LOCKED`: it never waits, so it never
//!   deadlocks with an owner's commit (which locks the execution, then the
//!   queue row).

use super::in_doubt::{self, InDoubt};
use super::{commit_error, decode, encode, to_i64, to_u64, unavailable, PostgresStore};
use async_trait::async_trait;
use orbit_core::history::Millis;
use orbit_core::store::shared::{
    self, invalid, Claimed, Dispatch, Entry, Kind, Member, Members, Poll, Sent, SessionContact,
    Taken,
};
use orbit_core::store::{is_terminal, Fence, StorageError};
use sqlx::pool::PoolConnection;
use sqlx::{PgConnection, Postgres, Row};

/// A non-terminal execution, as SQL.
const ACTIVE: &str = "status NOT IN ('completed', 'failed', 'cancelled')";

/// How long ago `column` was, by the database's clock, in ms (never < 0).
fn silent_ms(column: &str) -> String {
    format!("GREATEST(0, (EXTRACT(EPOCH FROM (now() - {column})) * 1000)::BIGINT)")
}

/// How many of the oldest rows of each task a claim looks at.
const CLAIM_WINDOW: u32 = 64;

/// The database's now in ms since the Unix epoch.
const NOW_MS: &str = "(EXTRACT(EPOCH FROM now()) * 1000)::BIGINT";

fn refuse_empty(node_id: &str) -> Result<(), StorageError> {
    if node_id.is_empty() {
        return Err(invalid("an empty node id"));
    }
    Ok(())
}

fn millis(ms: Millis) -> i64 {
    to_i64(ms)
}

impl PostgresStore {
    /// A connection of the shared-mode pool inside a new transaction.
    async fn begin_shared(&self) -> Result<(PoolConnection<Postgres>, InDoubt), StorageError> {
        self.settled().await?;
        let mut conn = self.cluster.acquire().await.map_err(unavailable)?;
        match in_doubt::begin(&mut conn).await {
            Ok(doubt) => Ok((conn, doubt)),
            Err(e) => {
                conn.detach();
                Err(unavailable(e))
            }
        }
    }

    /// Commits (when `result` is `Ok`) or rolls back the transaction on
    /// `conn`; a COMMIT without an answer is settled like a commit's.
    async fn end_shared<T>(
        &self,
        mut conn: PoolConnection<Postgres>,
        doubt: InDoubt,
        result: Result<T, StorageError>,
    ) -> Result<T, StorageError> {
        match result {
            Ok(value) => match sqlx::query("COMMIT").execute(&mut *conn).await {
                Ok(_) => Ok(value),
                Err(e) => {
                    conn.detach();
                    match commit_error(e) {
                        StorageError::Ambiguous(message) => {
                            self.after_lost_commit(doubt, message).await?;
                            Ok(value)
                        }
                        other => Err(other),
                    }
                }
            },
            Err(err) => {
                if sqlx::query("ROLLBACK").execute(&mut *conn).await.is_err() {
                    conn.detach();
                }
                Err(err)
            }
        }
    }

    /// Whether each of `nodes` wrote its contact within `timeout_ms`.
    async fn live_now<const N: usize>(
        conn: &mut PgConnection,
        nodes: [&str; N],
        timeout_ms: Millis,
    ) -> Result<[bool; N], StorageError> {
        // The rows stay locked (shared) to the end of the transaction: a
        // judged member's beat, or a write of it checking that it is live,
        // waits until this one is over (see `Transaction::writer`).
        let rows = sqlx::query(
            "SELECT node_id, last_seen >= now() - $2 * interval '1 millisecond' \
             FROM nodes WHERE node_id = ANY($1) ORDER BY node_id FOR SHARE",
        )
        .bind(&nodes[..])
        .bind(millis(timeout_ms))
        .fetch_all(&mut *conn)
        .await
        .map_err(unavailable)?;
        let mut live: Vec<String> = Vec::new();
        for r in &rows {
            if r.try_get::<bool, _>(1).map_err(unavailable)? {
                live.push(r.try_get(0).map_err(unavailable)?);
            }
        }
        Ok(nodes.map(|n| live.iter().any(|l| l == n)))
    }

    async fn beat_in(
        conn: &mut PgConnection,
        node_id: &str,
        advertise: &str,
        timeout_ms: Millis,
    ) -> Result<Members, StorageError> {
        let silence: Option<i64> = sqlx::query_scalar(&format!(
            "SELECT {} FROM nodes WHERE node_id = $1 FOR UPDATE",
            silent_ms("last_seen")
        ))
        .bind(node_id)
        .fetch_optional(&mut *conn)
        .await
        .map_err(unavailable)?;
        sqlx::query(
            "INSERT INTO nodes (node_id, advertise, started_at, last_seen) \
             VALUES ($1, $2, now(), now()) \
             ON CONFLICT (node_id) DO UPDATE SET advertise = $2, last_seen = now()",
        )
        .bind(node_id)
        .bind(advertise)
        .execute(&mut *conn)
        .await
        .map_err(unavailable)?;
        sqlx::query("DELETE FROM nodes WHERE last_seen < now() - $1 * interval '1 millisecond'")
            .bind(millis(timeout_ms.saturating_mul(10)))
            .execute(&mut *conn)
            .await
            .map_err(unavailable)?;
        let rows = sqlx::query(&format!(
            "SELECT node_id, advertise, {}, {}, \
             last_seen >= now() - $1 * interval '1 millisecond' FROM nodes ORDER BY node_id",
            silent_ms("last_seen"),
            silent_ms("started_at")
        ))
        .bind(millis(timeout_ms))
        .fetch_all(&mut *conn)
        .await
        .map_err(unavailable)?;
        let (mut live, mut silent) = (Vec::new(), Vec::new());
        for r in &rows {
            let member = Member {
                node_id: r.try_get(0).map_err(unavailable)?,
                advertise: r.try_get(1).map_err(unavailable)?,
                silent_ms: to_u64(r.try_get(2).map_err(unavailable)?),
                up_ms: to_u64(r.try_get(3).map_err(unavailable)?),
            };
            if r.try_get::<bool, _>(4).map_err(unavailable)? {
                live.push(member);
            } else {
                silent.push(member);
            }
        }
        // The distinct owners of non-terminal executions, one index probe
        // each (a loose scan of executions_owner), less the live ones.
        let dead: Vec<String> = sqlx::query_scalar(&format!(
            "WITH RECURSIVE owners (node) AS ( \
               (SELECT owner_node FROM executions WHERE {ACTIVE} ORDER BY owner_node LIMIT 1) \
               UNION ALL \
               SELECT (SELECT x.owner_node FROM executions x \
                       WHERE x.{ACTIVE} AND x.owner_node > o.node \
                       ORDER BY x.owner_node LIMIT 1) \
               FROM owners o WHERE o.node IS NOT NULL) \
             SELECT node FROM owners WHERE node IS NOT NULL AND NOT EXISTS ( \
               SELECT 1 FROM nodes n WHERE n.node_id = owners.node \
               AND n.last_seen >= now() - $1 * interval '1 millisecond') \
             ORDER BY node"
        ))
        .bind(millis(timeout_ms))
        .fetch_all(&mut *conn)
        .await
        .map_err(unavailable)?;
        Ok(Members {
            live,
            silent,
            dead,
            silence_ms: silence.map(to_u64),
        })
    }

    async fn take_over_in(
        conn: &mut PgConnection,
        node_id: &str,
        dead: &str,
        view: &[String],
        timeout_ms: Millis,
        limit: u32,
    ) -> Result<Vec<Taken>, StorageError> {
        let Some(index) = view.iter().position(|n| n == node_id) else {
            return Ok(Vec::new());
        };
        let [me_live, dead_live] = Self::live_now(conn, [node_id, dead], timeout_ms).await?;
        if !me_live || dead_live {
            return Ok(Vec::new());
        }
        let rows = sqlx::query(&format!(
            "WITH picked AS ( \
               SELECT id FROM executions \
               WHERE owner_node = $1 AND {ACTIVE} \
               AND orbit_slot(split_part(id, '.', 1)) % $3 = $4 \
               ORDER BY id LIMIT $5 FOR UPDATE SKIP LOCKED) \
             UPDATE executions x SET owner_node = $2, owner_epoch = x.owner_epoch + 1 \
             FROM picked WHERE x.id = picked.id AND x.owner_node = $1 \
             RETURNING x.id, x.owner_epoch"
        ))
        .bind(dead)
        .bind(node_id)
        .bind(i64::try_from(view.len()).unwrap_or(i64::MAX))
        .bind(i64::try_from(index).unwrap_or(i64::MAX))
        .bind(i64::from(limit))
        .persistent(false)
        .fetch_all(&mut *conn)
        .await
        .map_err(unavailable)?;
        let mut taken = rows
            .iter()
            .map(|r| {
                Ok(Taken {
                    execution_id: r.try_get(0).map_err(unavailable)?,
                    epoch: to_u64(r.try_get(1).map_err(unavailable)?),
                })
            })
            .collect::<Result<Vec<_>, StorageError>>()?;
        taken.sort();
        if !taken.is_empty() {
            let ids: Vec<&str> = taken.iter().map(|t| t.execution_id.as_str()).collect();
            sqlx::query("UPDATE inbox SET node_id = $1 WHERE execution_id = ANY($2)")
                .bind(node_id)
                .bind(&ids)
                .persistent(false)
                .execute(&mut *conn)
                .await
                .map_err(unavailable)?;
        }
        Ok(taken)
    }

    async fn reclaim_in(
        conn: &mut PgConnection,
        node_id: &str,
        after_id: &str,
        timeout_ms: Millis,
        limit: u32,
    ) -> Result<Vec<Taken>, StorageError> {
        let [me_live] = Self::live_now(conn, [node_id], timeout_ms).await?;
        if !me_live {
            return Ok(Vec::new());
        }
        // Plain FOR UPDATE under the LIMIT: a row that changed while it was
        // waited for (finished, or taken over) is passed and the next one
        // locked instead, so a short page still means none are left. The
        // answer is in the database's id order, the order `id > $2` pages
        // by.
        let rows = sqlx::query(&format!(
            "WITH picked AS ( \
               SELECT id FROM executions \
               WHERE owner_node = $1 AND {ACTIVE} AND id > $2 \
               ORDER BY id LIMIT $3 FOR UPDATE), \
             moved AS ( \
               UPDATE executions x SET owner_epoch = x.owner_epoch + 1 \
               FROM picked WHERE x.id = picked.id AND x.owner_node = $1 \
               RETURNING x.id, x.owner_epoch) \
             SELECT id, owner_epoch FROM moved ORDER BY id"
        ))
        .bind(node_id)
        .bind(after_id)
        .bind(i64::from(limit))
        .persistent(false)
        .fetch_all(&mut *conn)
        .await
        .map_err(unavailable)?;
        rows.iter()
            .map(|r| {
                Ok(Taken {
                    execution_id: r.try_get(0).map_err(unavailable)?,
                    epoch: to_u64(r.try_get(1).map_err(unavailable)?),
                })
            })
            .collect()
    }

    /// Writes an entry for `owner` and returns its id.
    async fn push(
        conn: &mut PgConnection,
        owner: &str,
        execution_id: &str,
        kind: Kind,
        body: &serde_json::Value,
    ) -> Result<i64, StorageError> {
        sqlx::query_scalar(&format!(
            "INSERT INTO inbox (node_id, execution_id, kind, body, created_at) \
             VALUES ($1, $2, $3, $4, {NOW_MS}) RETURNING id"
        ))
        .bind(owner)
        .bind(execution_id)
        .bind(kind.as_str())
        .bind(encode(body)?)
        .fetch_one(&mut *conn)
        .await
        .map_err(unavailable)
    }

    async fn send_in(
        conn: &mut PgConnection,
        execution_id: &str,
        kind: Kind,
        body: &serde_json::Value,
    ) -> Result<Sent, StorageError> {
        let row = sqlx::query(
            "SELECT owner_node, owner_epoch, status FROM executions WHERE id = $1 FOR SHARE",
        )
        .bind(execution_id)
        .fetch_optional(&mut *conn)
        .await
        .map_err(unavailable)?;
        let Some(row) = row else {
            return Ok(Sent::Missing);
        };
        let status: String = row.try_get(2).map_err(unavailable)?;
        if is_terminal(&status) {
            return Ok(Sent::Finished { status });
        }
        let owner = Fence {
            node_id: row.try_get(0).map_err(unavailable)?,
            epoch: to_u64(row.try_get(1).map_err(unavailable)?),
        };
        let id = Self::push(conn, &owner.node_id, execution_id, kind, body).await?;
        Ok(Sent::Queued { id, owner })
    }

    async fn claim_in(conn: &mut PgConnection, poll: &Poll) -> Result<Vec<Claimed>, StorageError> {
        // The oldest rows of each task, walked in claim order along
        // task_queue_claim (a sort of every matching row instead costs
        // milliseconds once thousands are queued), then the oldest of
        // those that are free, one per token.
        let rows = sqlx::query(&format!(
            "WITH candidates AS ( \
               SELECT c.execution_id, c.unit FROM UNNEST($1::text[]) AS t (task) \
               CROSS JOIN LATERAL ( \
                 SELECT q.execution_id, q.unit FROM task_queue q WHERE q.task = t.task \
                 ORDER BY q.enqueued_at, q.execution_id, q.unit LIMIT {CLAIM_WINDOW}) AS c) \
             SELECT q.execution_id, q.unit, q.task, q.enqueued_at, q.body, \
                    x.owner_node, x.owner_epoch \
             FROM task_queue q \
             JOIN candidates c ON c.execution_id = q.execution_id AND c.unit = q.unit \
             JOIN executions x ON x.id = q.execution_id \
             WHERE x.{ACTIVE} \
             ORDER BY q.enqueued_at, q.execution_id, q.unit LIMIT $2 \
             FOR UPDATE OF q SKIP LOCKED FOR SHARE OF x SKIP LOCKED"
        ))
        .bind(&poll.tasks)
        .bind(poll.tokens.len() as i64)
        .persistent(false)
        .fetch_all(&mut *conn)
        .await
        .map_err(unavailable)?;
        let mut claimed = Vec::with_capacity(rows.len());
        for (row, token) in rows.iter().zip(&poll.tokens) {
            claimed.push(Self::claim_row(conn, poll, row, token).await?);
        }
        Ok(claimed)
    }

    /// Takes one row found by [`Self::claim_in`]: deletes it and writes
    /// its `dispatch` entry, handed out with `token`.
    async fn claim_row(
        conn: &mut PgConnection,
        poll: &Poll,
        row: &sqlx::postgres::PgRow,
        token: &str,
    ) -> Result<Claimed, StorageError> {
        let text = |i: usize| -> Result<String, StorageError> {
            row.try_get::<String, _>(i).map_err(unavailable)
        };
        let execution_id = text(0)?;
        let unit = text(1)?;
        let task = text(2)?;
        let enqueued_at = to_u64(row.try_get(3).map_err(unavailable)?);
        let body = decode(&text(4)?)?;
        let owner = Fence {
            node_id: text(5)?,
            epoch: to_u64(row.try_get(6).map_err(unavailable)?),
        };
        sqlx::query("DELETE FROM task_queue WHERE execution_id = $1 AND unit = $2")
            .bind(&execution_id)
            .bind(&unit)
            .execute(&mut *conn)
            .await
            .map_err(unavailable)?;
        let dispatch = Dispatch {
            unit: unit.clone(),
            task: task.clone(),
            token: token.to_owned(),
            session: poll.session.clone(),
            node_id: poll.node_id.clone(),
            worker_id: poll.worker_id.clone(),
        };
        let dispatch = serde_json::to_value(&dispatch)
            .map_err(|e| StorageError::Unavailable(format!("encode: {e}")))?;
        let entry = Self::push(
            conn,
            &owner.node_id,
            &execution_id,
            Kind::Dispatch,
            &dispatch,
        )
        .await?;
        Ok(Claimed {
            execution_id,
            unit,
            task,
            token: token.to_owned(),
            body,
            enqueued_at,
            entry,
            owner,
        })
    }
}

#[async_trait]
impl shared::Store for PostgresStore {
    async fn beat(
        &self,
        node_id: &str,
        advertise: &str,
        timeout_ms: Millis,
    ) -> Result<Members, StorageError> {
        refuse_empty(node_id)?;
        let (mut conn, doubt) = self.begin_shared().await?;
        let result = Self::beat_in(&mut conn, node_id, advertise, timeout_ms).await;
        self.end_shared(conn, doubt, result).await
    }

    async fn take_over(
        &self,
        node_id: &str,
        dead: &str,
        live: &[String],
        timeout_ms: Millis,
        limit: u32,
    ) -> Result<Vec<Taken>, StorageError> {
        refuse_empty(node_id)?;
        let mut view = live.to_vec();
        view.sort();
        view.dedup();
        if limit == 0 || !view.iter().any(|n| n == node_id) {
            return Ok(Vec::new());
        }
        let (mut conn, doubt) = self.begin_shared().await?;
        let result = Self::take_over_in(&mut conn, node_id, dead, &view, timeout_ms, limit).await;
        self.end_shared(conn, doubt, result).await
    }

    async fn reclaim(
        &self,
        node_id: &str,
        after_id: &str,
        timeout_ms: Millis,
        limit: u32,
    ) -> Result<Vec<Taken>, StorageError> {
        refuse_empty(node_id)?;
        if limit == 0 {
            return Ok(Vec::new());
        }
        let (mut conn, doubt) = self.begin_shared().await?;
        let result = Self::reclaim_in(&mut conn, node_id, after_id, timeout_ms, limit).await;
        self.end_shared(conn, doubt, result).await
    }

    async fn send(
        &self,
        execution_id: &str,
        kind: Kind,
        body: &serde_json::Value,
    ) -> Result<Sent, StorageError> {
        let (mut conn, doubt) = self.begin_shared().await?;
        let result = Self::send_in(&mut conn, execution_id, kind, body).await;
        self.end_shared(conn, doubt, result).await
    }

    async fn inbox(
        &self,
        node_id: &str,
        after_id: i64,
        limit: u32,
    ) -> Result<Vec<Entry>, StorageError> {
        self.settled().await?;
        let rows = sqlx::query(
            "SELECT id, execution_id, kind, body, created_at FROM inbox \
             WHERE node_id = $1 AND id > $2 ORDER BY id LIMIT $3",
        )
        .bind(node_id)
        .bind(after_id)
        .bind(i64::from(limit))
        .fetch_all(&self.cluster)
        .await
        .map_err(unavailable)?;
        rows.iter()
            .map(|r| {
                let kind: String = r.try_get(2).map_err(unavailable)?;
                Ok(Entry {
                    id: r.try_get(0).map_err(unavailable)?,
                    execution_id: r.try_get(1).map_err(unavailable)?,
                    kind: Kind::parse(&kind).ok_or_else(|| {
                        StorageError::Unavailable(format!("corrupt row: inbox kind `{kind}`"))
                    })?,
                    body: decode(&r.try_get::<String, _>(3).map_err(unavailable)?)?,
                    created_at: to_u64(r.try_get(4).map_err(unavailable)?),
                })
            })
            .collect()
    }

    async fn claim(&self, poll: &Poll) -> Result<Vec<Claimed>, StorageError> {
        refuse_empty(&poll.node_id)?;
        if poll.tasks.is_empty() || poll.tokens.is_empty() {
            return Ok(Vec::new());
        }
        let (mut conn, doubt) = self.begin_shared().await?;
        let result = Self::claim_in(&mut conn, poll).await;
        self.end_shared(conn, doubt, result).await
    }

    async fn touch_sessions(&self, node_id: &str, sessions: &[String]) -> Result<(), StorageError> {
        refuse_empty(node_id)?;
        // Sorted and once each: one row is updated once per statement, and
        // concurrent touches lock rows in the same order.
        let mut sessions: Vec<&str> = sessions.iter().map(String::as_str).collect();
        sessions.sort_unstable();
        sessions.dedup();
        if sessions.is_empty() {
            return Ok(());
        }
        let (mut conn, doubt) = self.begin_shared().await?;
        let result = sqlx::query(
            "INSERT INTO worker_sessions (session, node_id, last_seen) \
             SELECT s, $1, now() FROM UNNEST($2::text[]) AS s \
             ON CONFLICT (session) DO UPDATE SET node_id = excluded.node_id, \
             last_seen = excluded.last_seen",
        )
        .bind(node_id)
        .bind(&sessions)
        .persistent(false)
        .execute(&mut *conn)
        .await
        .map(|_| ())
        .map_err(unavailable);
        self.end_shared(conn, doubt, result).await
    }

    async fn session_contacts(
        &self,
        sessions: &[String],
    ) -> Result<Vec<SessionContact>, StorageError> {
        self.settled().await?;
        let rows = sqlx::query(&format!(
            "SELECT session, node_id, {} FROM worker_sessions \
             WHERE session = ANY($1) ORDER BY session",
            silent_ms("last_seen")
        ))
        .bind(sessions)
        .persistent(false)
        .fetch_all(&self.cluster)
        .await
        .map_err(unavailable)?;
        rows.iter()
            .map(|r| {
                Ok(SessionContact {
                    session: r.try_get(0).map_err(unavailable)?,
                    node_id: r.try_get(1).map_err(unavailable)?,
                    silent_ms: to_u64(r.try_get(2).map_err(unavailable)?),
                })
            })
            .collect()
    }

    async fn forget_sessions(&self, silent_ms: Millis) -> Result<u64, StorageError> {
        self.settled().await?;
        let gone = sqlx::query(
            "DELETE FROM worker_sessions WHERE last_seen < now() - $1 * interval '1 millisecond'",
        )
        .bind(millis(silent_ms))
        .execute(&self.cluster)
        .await
        .map_err(unavailable)?
        .rows_affected();
        Ok(gone)
    }
}
