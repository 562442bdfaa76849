//! The commit connection, kept from one commit to the next.
//!
//! Commits go through one connection of their own. Taken from a pool and
//! given back each time, it would be pinged on every return (sqlx tests a
//! connection it gets back), a round trip to PostgreSQL between every two
//! commits while the next one waits. So the connection is taken once and
//! kept behind a fair lock; a holder that finds it broken detaches it, and
//! the next holder takes a fresh one from the pool.

use super::super::rows::unavailable;
use super::super::StorageError;
use sqlx::pool::PoolConnection;
use sqlx::postgres::{PgConnection, PgPool};
use sqlx::Postgres;
use tokio::sync::{Mutex, MutexGuard};

/// The pool the connection comes from, and the connection once taken.
#[derive(Debug)]
pub(super) struct Writer {
    pool: PgPool,
    kept: Mutex<Option<PoolConnection<Postgres>>>,
}

impl Writer {
    /// Connections come from `pool` (of one connection).
    pub(super) fn new(pool: PgPool) -> Self {
        Writer {
            pool,
            kept: Mutex::new(None),
        }
    }

    /// Waits for the connection (first come, first served), taking one
    /// from the pool if none is kept.
    pub(super) async fn lock(&self) -> Result<Held<'_>, StorageError> {
        let mut kept = self.kept.lock().await;
        if kept.is_none() {
            *kept = Some(self.pool.acquire().await.map_err(unavailable)?);
        }
        Ok(Held { kept })
    }

    /// Gives the connection back and closes the pool.
    pub(super) async fn close(&self) {
        self.kept.lock().await.take();
        self.pool.close().await;
    }
}

/// The connection, held.
pub(super) struct Held<'a> {
    kept: MutexGuard<'a, Option<PoolConnection<Postgres>>>,
}

impl Held<'_> {
    /// The connection (gone only after [`Held::detach`]).
    pub(super) fn conn(&mut self) -> Result<&mut PgConnection, StorageError> {
        self.kept
            .as_mut()
            .map(|c| &mut **c)
            .ok_or_else(|| StorageError::Unavailable("the commit connection was dropped".into()))
    }

    /// Drops the connection, in a state not to be reused: PostgreSQL
    /// rolls back whatever it had open when it goes away.
    pub(super) fn detach(&mut self) {
        if let Some(conn) = self.kept.take() {
            conn.detach();
        }
    }
}
