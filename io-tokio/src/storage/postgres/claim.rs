//! Who may write to a PostgreSQL database: one server without `--cluster`,
//! or the servers of a `--cluster`, never both. Nothing fences a server
//! without `--cluster`: a second one on the same database would recover the
//! same executions and hand their tasks out twice.
//!
//! A server without `--cluster` holds an exclusive session-level advisory
//! lock for as long as it runs ([`Claim::take`] with [`Use::Alone`]); each
//! cluster member holds the same lock shared. The database drops a session's
//! locks when its connection ends, so a server that died leaves nothing
//! behind. A lock lost with its connection (the database restarted) is taken
//! again as soon as the database answers; [`Claim::lost`] ends only if
//! another server took the database meanwhile.

use super::super::StorageError;
use sqlx::postgres::{PgConnectOptions, PgConnection};
use sqlx::{ConnectOptions, Connection};
use std::str::FromStr;
use std::time::Duration;

/// The advisory lock's key ("orbit" in ASCII).
const KEY: i64 = 0x6f_72_62_69_74;

/// How long a start waits for a lock still held: a server killed a moment
/// ago holds it until the database notices its connection is gone.
const PATIENCE: Duration = Duration::from_secs(5);

/// How a server uses the database.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Use {
    /// A server without `--cluster`: the only one.
    Alone,
    /// A member of a `--cluster` (leader or shared mode).
    Cluster,
}

/// The lock, held on a connection of its own.
pub struct Claim {
    options: PgConnectOptions,
    how: Use,
    conn: PgConnection,
}

impl Claim {
    /// Takes the lock, waiting up to a few seconds for a holder that just
    /// died. Refused when another server holds it the other way (or, for
    /// [`Use::Alone`], at all).
    pub async fn take(url: &str, how: Use) -> Result<Claim, StorageError> {
        let options = PgConnectOptions::from_str(url)
            .map_err(|e| StorageError::Unavailable(e.to_string()))?
            .application_name("orbit-claim");
        let deadline = tokio::time::Instant::now() + PATIENCE;
        loop {
            let mut conn = options.connect().await.map_err(|e| {
                StorageError::Unavailable(format!("cannot connect to claim the database: {e}"))
            })?;
            if lock(&mut conn, how).await? {
                return Ok(Claim { options, how, conn });
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(StorageError::Unavailable(in_use(how)));
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// Checks the lock's connection every `every`; when it is gone, waits
    /// for the database and takes the lock again. Resolves, with why, only
    /// when another server took the database meanwhile.
    pub async fn lost(mut self, every: Duration) -> String {
        loop {
            tokio::time::sleep(every).await;
            if self.conn.ping().await.is_ok() {
                continue;
            }
            tracing::warn!("the connection holding this server's claim on the database dropped");
            loop {
                let Ok(mut conn) = self.options.connect().await else {
                    tokio::time::sleep(every).await;
                    continue;
                };
                match lock(&mut conn, self.how).await {
                    Ok(true) => {
                        tracing::info!("claim on the database taken again");
                        self.conn = conn;
                        break;
                    }
                    Ok(false) => return in_use(self.how),
                    Err(_) => tokio::time::sleep(every).await,
                }
            }
        }
    }
}

async fn lock(conn: &mut PgConnection, how: Use) -> Result<bool, StorageError> {
    let sql = match how {
        Use::Alone => "SELECT pg_try_advisory_lock($1)",
        Use::Cluster => "SELECT pg_try_advisory_lock_shared($1)",
    };
    sqlx::query_scalar(sql)
        .bind(KEY)
        .fetch_one(conn)
        .await
        .map_err(|e| StorageError::Unavailable(format!("cannot claim the database: {e}")))
}

fn in_use(how: Use) -> String {
    match how {
        Use::Alone => "the database is in use by another orbit server; several servers on one \
                       database need --cluster, each of them"
            .to_owned(),
        Use::Cluster => "the database is in use by an orbit server without --cluster; stop it \
                         first, or start it with --cluster too"
            .to_owned(),
    }
}
