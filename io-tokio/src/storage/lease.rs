//! The `--cluster` leader lease: one row `(holder, epoch, expires_at)`
//! judged by the database's clock (`now()`) only; the calls a node makes on
//! it (take, renew, release, read, node contacts) as the [`Store`] trait,
//! implemented on PostgreSQL by [`Postgres`] (and over the simulated
//! database by the networked simulation); and the [`LeaderFence`] every
//! commit of the leader checks inside its own transaction, so a deposed
//! leader's write is refused with nothing applied.

use super::StorageError;
use async_trait::async_trait;
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use sqlx::Row;
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tokio::sync::watch;

fn unavailable(e: impl std::fmt::Display) -> StorageError {
    StorageError::Unavailable(e.to_string())
}

fn millis_i64(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

fn to_u64(v: i64) -> u64 {
    u64::try_from(v).unwrap_or(0)
}

/// The lease as the database sees it now (the rules around it are in
/// `orbit_core::cluster`, shared with the simulated cluster).
pub use orbit_core::cluster::LeaseState;

/// One node's last contact, as `GET /v1/cluster` lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeContact {
    /// The node's `--node-id`.
    pub node_id: String,
    /// Its `--advertise` URL.
    pub advertise: String,
    /// The role it last reported (`leader` or `standby`).
    pub role: String,
    /// When it started, ms since the Unix epoch (database clock).
    pub started_at_ms: u64,
    /// Its last contact, ms since the Unix epoch (database clock).
    pub last_seen_ms: u64,
    /// The database's `now()` when this was read.
    pub db_now_ms: u64,
}

/// Why a renewal did not go through.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RenewError {
    /// Another node took the lease (or this term's epoch is no longer the
    /// lease's): this node is deposed.
    #[error("fenced: the lease is now held by `{holder}` at epoch {epoch}")]
    Fenced {
        /// The current holder.
        holder: String,
        /// The current epoch.
        epoch: u64,
    },
    /// The database did not answer; nothing is known.
    #[error(transparent)]
    Storage(#[from] StorageError),
}

/// Where the lease and the node contacts live: the calls one node makes.
/// Every time in them is the database's.
#[async_trait]
pub trait Store: Send + Sync + std::fmt::Debug {
    /// The lease now.
    async fn read(&self) -> Result<LeaseState, StorageError>;
    /// Takes the lease for `node` if it has expired, with the next epoch,
    /// valid for `ttl`. Returns the new epoch, or `None` when it is held.
    async fn try_acquire(&self, node: &str, ttl: Duration) -> Result<Option<u64>, StorageError>;
    /// Extends `node`'s term `epoch` to `ttl` from now. Refused as
    /// [`RenewError::Fenced`] when the lease moved on.
    async fn renew(&self, node: &str, epoch: u64, ttl: Duration) -> Result<(), RenewError>;
    /// Ends `node`'s term `epoch` now (a clean shutdown), so a standby takes
    /// over without waiting for the lease to run out.
    async fn release(&self, node: &str, epoch: u64) -> Result<bool, StorageError>;
    /// Records `node`'s contact (`role`, `advertise`) at the database's now,
    /// and forgets nodes silent for longer than `forget_after`.
    async fn touch(
        &self,
        node: &str,
        advertise: &str,
        role: &str,
        forget_after: Duration,
    ) -> Result<(), StorageError>;
    /// Every node's last contact, by node id.
    async fn nodes(&self) -> Result<Vec<NodeContact>, StorageError>;
    /// Lets go of connections.
    async fn close(&self);
}

/// The lease calls of one node on PostgreSQL, over a small pool of its own
/// (so a renewal never queues behind the group commit's writer connection).
#[derive(Debug, Clone)]
pub struct Postgres {
    pool: PgPool,
}

const EXPIRES_MS: &str = "(EXTRACT(EPOCH FROM expires_at) * 1000)::BIGINT";
const NOW_MS: &str = "(EXTRACT(EPOCH FROM now()) * 1000)::BIGINT";

impl Postgres {
    /// Connects lazily to `url` (the schema is migrated by
    /// [`super::PostgresStore::open`]); every call waits at most `timeout`
    /// for a connection.
    pub fn connect(url: &str, timeout: Duration) -> Result<Postgres, StorageError> {
        let connect = PgConnectOptions::from_str(url)
            .map_err(unavailable)?
            .application_name("orbit-lease");
        let pool = PgPoolOptions::new()
            .max_connections(2)
            .min_connections(0)
            .acquire_timeout(timeout)
            .connect_lazy_with(connect);
        Ok(Postgres { pool })
    }
}

#[async_trait]
impl Store for Postgres {
    async fn read(&self) -> Result<LeaseState, StorageError> {
        let row = sqlx::query(&format!(
            "SELECT holder, epoch, {EXPIRES_MS}, {NOW_MS} FROM cluster_lease WHERE id = 1"
        ))
        .fetch_one(&self.pool)
        .await
        .map_err(unavailable)?;
        Ok(LeaseState {
            holder: row.try_get(0).map_err(unavailable)?,
            epoch: to_u64(row.try_get(1).map_err(unavailable)?),
            expires_at_ms: to_u64(row.try_get(2).map_err(unavailable)?),
            db_now_ms: to_u64(row.try_get(3).map_err(unavailable)?),
        })
    }

    async fn try_acquire(&self, node: &str, ttl: Duration) -> Result<Option<u64>, StorageError> {
        let epoch: Option<i64> = sqlx::query_scalar(
            "UPDATE cluster_lease SET holder = $1, epoch = epoch + 1, \
             expires_at = now() + $2 * interval '1 millisecond', acquired_at = now() \
             WHERE id = 1 AND expires_at <= now() RETURNING epoch",
        )
        .bind(node)
        .bind(millis_i64(ttl))
        .fetch_optional(&self.pool)
        .await
        .map_err(unavailable)?;
        Ok(epoch.map(to_u64))
    }

    async fn renew(&self, node: &str, epoch: u64, ttl: Duration) -> Result<(), RenewError> {
        let renewed = sqlx::query(
            "UPDATE cluster_lease SET expires_at = now() + $3 * interval '1 millisecond' \
             WHERE id = 1 AND holder = $1 AND epoch = $2",
        )
        .bind(node)
        .bind(i64::try_from(epoch).unwrap_or(i64::MAX))
        .bind(millis_i64(ttl))
        .execute(&self.pool)
        .await
        .map_err(unavailable)?
        .rows_affected();
        if renewed == 1 {
            return Ok(());
        }
        let now = self.read().await?;
        Err(RenewError::Fenced {
            holder: now.holder,
            epoch: now.epoch,
        })
    }

    async fn release(&self, node: &str, epoch: u64) -> Result<bool, StorageError> {
        let released = sqlx::query(
            "UPDATE cluster_lease SET expires_at = now() \
             WHERE id = 1 AND holder = $1 AND epoch = $2",
        )
        .bind(node)
        .bind(i64::try_from(epoch).unwrap_or(i64::MAX))
        .execute(&self.pool)
        .await
        .map_err(unavailable)?
        .rows_affected();
        Ok(released == 1)
    }

    async fn touch(
        &self,
        node: &str,
        advertise: &str,
        role: &str,
        forget_after: Duration,
    ) -> Result<(), StorageError> {
        sqlx::query(
            "INSERT INTO cluster_nodes (node_id, advertise, role, started_at, last_seen) \
             VALUES ($1, $2, $3, now(), now()) \
             ON CONFLICT (node_id) DO UPDATE SET advertise = $2, role = $3, last_seen = now()",
        )
        .bind(node)
        .bind(advertise)
        .bind(role)
        .execute(&self.pool)
        .await
        .map_err(unavailable)?;
        sqlx::query(
            "DELETE FROM cluster_nodes WHERE last_seen < now() - $1 * interval '1 millisecond'",
        )
        .bind(millis_i64(forget_after))
        .execute(&self.pool)
        .await
        .map_err(unavailable)?;
        Ok(())
    }

    async fn nodes(&self) -> Result<Vec<NodeContact>, StorageError> {
        let rows = sqlx::query(&format!(
            "SELECT node_id, advertise, role, (EXTRACT(EPOCH FROM started_at) * 1000)::BIGINT, \
             (EXTRACT(EPOCH FROM last_seen) * 1000)::BIGINT, {NOW_MS} \
             FROM cluster_nodes ORDER BY node_id"
        ))
        .fetch_all(&self.pool)
        .await
        .map_err(unavailable)?;
        rows.iter()
            .map(|r| {
                Ok(NodeContact {
                    node_id: r.try_get(0).map_err(unavailable)?,
                    advertise: r.try_get(1).map_err(unavailable)?,
                    role: r.try_get(2).map_err(unavailable)?,
                    started_at_ms: to_u64(r.try_get(3).map_err(unavailable)?),
                    last_seen_ms: to_u64(r.try_get(4).map_err(unavailable)?),
                    db_now_ms: to_u64(r.try_get(5).map_err(unavailable)?),
                })
            })
            .collect()
    }

    /// Closes the pool.
    async fn close(&self) {
        self.pool.close().await;
    }
}

/// The leadership term a store commits under: every commit reads the lease
/// row (`FOR SHARE`, so a takeover waits for it or it sees the takeover) and
/// is refused when the holder or the epoch differ. Once refused — or once
/// the node stepped down on its own — every later commit is refused at once,
/// without touching the database.
#[derive(Debug)]
pub struct LeaderFence {
    node_id: String,
    epoch: u64,
    deposed: AtomicBool,
    signal: watch::Sender<bool>,
}

impl LeaderFence {
    /// The term `epoch` of `node_id`.
    pub fn new(node_id: impl Into<String>, epoch: u64) -> LeaderFence {
        LeaderFence {
            node_id: node_id.into(),
            epoch,
            deposed: AtomicBool::new(false),
            signal: watch::channel(false).0,
        }
    }

    /// The node.
    pub fn node_id(&self) -> &str {
        &self.node_id
    }

    /// The term's epoch.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// Whether the term is over (a write was fenced, or the node stepped
    /// down).
    pub fn is_deposed(&self) -> bool {
        self.deposed.load(Ordering::SeqCst)
    }

    /// Ends the term: every later commit is refused.
    pub fn depose(&self) {
        if !self.deposed.swap(true, Ordering::SeqCst) {
            self.signal.send_replace(true);
        }
    }

    /// Resolves once the term is over (the hook the node supervisor waits on
    /// to step down at once when a write was fenced).
    pub async fn deposed(&self) {
        let mut rx = self.signal.subscribe();
        let _ = rx.wait_for(|d| *d).await;
    }

    /// The refusal of a commit: a `Conflict` naming no execution, which the
    /// driver reads as "this writer is fenced" (message `fenced: ...`).
    pub fn refusal() -> StorageError {
        orbit_core::cluster::fence::refusal()
    }

    /// Checks the term inside the commit's transaction on `conn`.
    pub(super) async fn check(&self, conn: &mut sqlx::PgConnection) -> Result<(), StorageError> {
        if self.is_deposed() {
            return Err(LeaderFence::refusal());
        }
        let row = sqlx::query("SELECT holder, epoch FROM cluster_lease WHERE id = 1 FOR SHARE")
            .fetch_one(&mut *conn)
            .await
            .map_err(unavailable)?;
        let holder: String = row.try_get(0).map_err(unavailable)?;
        let epoch = to_u64(row.try_get(1).map_err(unavailable)?);
        self.judge(&holder, epoch)
    }

    /// Judges the term against the lease row `(holder, epoch)` read inside
    /// the commit's transaction: refused (and the term deposed, with a
    /// `fenced:` warning in the log) unless they are this term's.
    pub fn judge(&self, holder: &str, epoch: u64) -> Result<(), StorageError> {
        if self.is_deposed() {
            return Err(LeaderFence::refusal());
        }
        if orbit_core::cluster::check_leader(holder, epoch, &self.node_id, self.epoch).is_ok() {
            return Ok(());
        }
        tracing::warn!(
            node_id = %self.node_id,
            epoch = self.epoch,
            holder = %holder,
            holder_epoch = epoch,
            "fenced: write of epoch {} refused, the lease is held by `{holder}` at epoch {epoch}; nothing applied",
            self.epoch
        );
        self.depose();
        Err(LeaderFence::refusal())
    }
}
