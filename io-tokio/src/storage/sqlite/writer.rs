//! The sqlx writer connection and the store's write lock.
//!
//! SQLite takes one writer at a time. Commits are written on a connection
//! of their own (see `committer`); this one runs the migrations and the
//! rest of the writes (retention, the writability check). Both take the
//! same fair lock, held from holder to holder directly: a pool of one
//! would ping the connection when it is given back and again when it is
//! taken. The lock is owned, so a commit's job can keep it until it ends.
//!
//! A holder that is cancelled may leave a transaction open on this
//! connection, and a connection whose rollback failed is in an unknown
//! state: the next holder rolls back the first, and replaces the second.

use super::super::rows::unavailable;
use super::super::StorageError;
use sqlx::sqlite::{SqliteConnectOptions, SqliteConnection};
use sqlx::{ConnectOptions, Connection};
use std::sync::Arc;
use tokio::sync::{Mutex, OwnedMutexGuard};

/// The writer connection and how to open it again.
#[derive(Debug)]
pub(super) struct Writer {
    slot: Arc<Mutex<Slot>>,
    connect: SqliteConnectOptions,
}

/// What the lock guards.
#[derive(Debug)]
struct Slot {
    /// `None` once dropped as unusable; opened again on the next lock.
    conn: Option<SqliteConnection>,
    /// A holder began a transaction and has not ended it.
    open: bool,
    /// The store was closed: every later lock fails.
    closed: bool,
}

/// What `ROLLBACK` found.
pub(super) enum Rollback {
    /// An open transaction, now undone.
    Undone,
    /// No open transaction.
    NotOpen,
    /// It failed otherwise: the connection's state is unknown, and it was
    /// dropped rather than reused.
    Failed,
}

impl Writer {
    /// Opens the connection.
    pub(super) async fn open(connect: SqliteConnectOptions) -> Result<Self, StorageError> {
        let conn = connect.connect().await.map_err(unavailable)?;
        Ok(Writer {
            slot: Arc::new(Mutex::new(Slot {
                conn: Some(conn),
                open: false,
                closed: false,
            })),
            connect,
        })
    }

    /// Waits for the connection (first come, first served), opening it
    /// again if it was dropped and undoing a transaction a cancelled holder
    /// left open.
    pub(super) async fn lock(&self) -> Result<Held, StorageError> {
        let mut slot = Arc::clone(&self.slot).lock_owned().await;
        if slot.closed {
            return Err(StorageError::Unavailable("the store is closed".into()));
        }
        if slot.open {
            let mut held = Held { slot };
            held.roll_back().await;
            slot = held.slot;
        }
        if slot.conn.is_none() {
            slot.conn = Some(self.connect.connect().await.map_err(unavailable)?);
        }
        Ok(Held { slot })
    }

    /// Closes the connection for good (after the holder before has
    /// finished).
    pub(super) async fn close(&self) {
        let mut slot = self.slot.lock().await;
        slot.closed = true;
        if let Some(conn) = slot.conn.take() {
            let _ = conn.close().await;
        }
    }
}

/// The connection, held.
pub(super) struct Held {
    slot: OwnedMutexGuard<Slot>,
}

impl Held {
    /// The connection (gone only after a failed rollback in this hold).
    pub(super) fn conn(&mut self) -> Result<&mut SqliteConnection, StorageError> {
        self.slot
            .conn
            .as_mut()
            .ok_or_else(|| StorageError::Unavailable("the writer connection was dropped".into()))
    }

    /// Marks a transaction begun (from before `BEGIN` is sent: a holder
    /// cancelled while it is on its way leaves it to the next holder).
    pub(super) fn begun(&mut self) {
        self.slot.open = true;
    }

    /// Rolls back whatever transaction is open.
    pub(super) async fn roll_back(&mut self) -> Rollback {
        let Some(conn) = self.slot.conn.as_mut() else {
            self.slot.open = false;
            return Rollback::Failed;
        };
        let outcome = match sqlx::query("ROLLBACK").execute(&mut *conn).await {
            Ok(_) => Rollback::Undone,
            Err(e)
                if e.as_database_error()
                    .is_some_and(|d| d.message().contains("no transaction is active")) =>
            {
                Rollback::NotOpen
            }
            Err(e) => {
                tracing::warn!(error = %e, "rollback failed; connection dropped");
                self.slot.conn = None;
                Rollback::Failed
            }
        };
        self.slot.open = false;
        outcome
    }
}
