//! Commits in doubt. A COMMIT whose answer never came back (the connection
//! broke while it was in flight) may still be running on its server
//! backend, and could land *after* the engine has reloaded the rows it
//! touches — and then a retried request would act on a past that is about
//! to change. So each transaction's backend and id are read as it begins,
//! and when its COMMIT gets no answer the store settles the outcome before
//! it answers: it asks the database for the transaction's status
//! (`pg_xact_status`), ends the old backend while the transaction is still
//! in progress (`pg_terminate_backend`: the transaction then rolls back,
//! unless its commit record was already written), and waits until the
//! status is final. A commit it cannot settle — the database is out of
//! reach — stays in doubt: the commit is answered `Ambiguous`, and every
//! later call of the store settles it first, so nothing reads the database
//! before that transaction's outcome is final.

use super::{unavailable, StorageError};
use sqlx::postgres::PgPool;
use std::time::Duration;

/// One transaction as it began: its server backend and its id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InDoubt {
    /// `pg_backend_pid()` of the connection that ran it.
    pub pid: i32,
    /// `pg_current_xact_id()`.
    pub xid: i64,
}

/// What became of a transaction whose COMMIT got no answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// It is durable.
    Committed,
    /// Nothing of it was applied.
    Aborted,
}

/// Looks at the status this often while the old backend winds down.
const PAUSE: Duration = Duration::from_millis(10);

/// How many looks before giving up (about 5 s).
const TRIES: u32 = 500;

/// `BEGIN`, then the new transaction's backend and id, in one round trip.
pub(super) async fn begin(conn: &mut sqlx::PgConnection) -> Result<InDoubt, sqlx::Error> {
    use sqlx::{Executor, Row};
    const BEGIN: &str = "BEGIN; SELECT pg_backend_pid(), pg_current_xact_id()::text::bigint";
    let row = conn.fetch_one(BEGIN).await?;
    Ok(InDoubt {
        pid: row.try_get(0)?,
        xid: row.try_get(1)?,
    })
}

/// Settles `doubt` over `pool` (see the module docs). An error means the
/// outcome is still unknown.
pub(super) async fn settle(pool: &PgPool, doubt: InDoubt) -> Result<Outcome, StorageError> {
    for _ in 0..TRIES {
        let status: Option<String> =
            sqlx::query_scalar("SELECT pg_xact_status($1::text::xid8)::text")
                .bind(doubt.xid.to_string())
                .fetch_one(pool)
                .await
                .map_err(unavailable)?;
        match status.as_deref() {
            Some("committed") => return Ok(Outcome::Committed),
            Some("aborted") => return Ok(Outcome::Aborted),
            Some("in progress") => {
                // Only the backend still running that very transaction.
                sqlx::query(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
                     WHERE pid = $1 AND backend_xid = xid($2::text::xid8)",
                )
                .bind(doubt.pid)
                .bind(doubt.xid.to_string())
                .execute(pool)
                .await
                .map_err(unavailable)?;
                tokio::time::sleep(PAUSE).await;
            }
            _ => {
                return Err(StorageError::Ambiguous(format!(
                    "the status of transaction {} is no longer known to the database",
                    doubt.xid
                )))
            }
        }
    }
    Err(StorageError::Ambiguous(format!(
        "transaction {} was still in progress after its backend {} was told to end",
        doubt.xid, doubt.pid
    )))
}
