//! The commit connection: a rusqlite connection on a thread of its own.
//!
//! Under load the one SQLite writer sets the pace, so a commit should hold
//! it for as little as possible. Through sqlx every call is a hop to the
//! connection's thread and every statement is text parsed again when its
//! row count changes. Here a whole commit (`BEGIN`, the conflict rule's
//! reads, one prepared statement per row, `COMMIT`) runs as one job on the
//! connection's own thread, with statements prepared once and kept.
//!
//! The job holds the store's write lock (see `writer`) until it ends, so
//! maintenance on the sqlx writer connection never interleaves with it,
//! even when the commit's caller is cancelled while the job runs. A job
//! never leaves a transaction open: it commits or rolls back before it
//! returns, and a connection whose rollback failed is dropped and opened
//! again for the next job.

use super::super::rows::unavailable;
use super::super::StorageError;
use rusqlite::{Connection, OpenFlags};
use std::path::PathBuf;
use std::sync::mpsc;
use std::time::Duration;

/// A job for the connection's thread.
type Job = Box<dyn FnOnce(&mut Link) + Send>;

/// The thread's handle; the thread ends when the store is dropped.
#[derive(Debug)]
pub(super) struct Committer {
    jobs: mpsc::Sender<Job>,
}

/// The connection as the thread holds it, and how to open it again.
pub(super) struct Link {
    conn: Option<Connection>,
    path: PathBuf,
    busy_timeout: Duration,
    /// The store was closed: the connection is never opened again.
    closed: bool,
}

impl Committer {
    /// Opens the connection to the database file `path` and starts its
    /// thread.
    pub(super) fn open(path: PathBuf, busy_timeout: Duration) -> Result<Self, StorageError> {
        let conn = connect(&path, busy_timeout)?;
        let (jobs, queue) = mpsc::channel::<Job>();
        let mut link = Link {
            conn: Some(conn),
            path,
            busy_timeout,
            closed: false,
        };
        std::thread::Builder::new()
            .name("orbit-sqlite-commit".into())
            .spawn(move || {
                for job in queue {
                    // A job that panics answers nobody (its caller hears
                    // `Ambiguous`); the connection's state is then unknown.
                    let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        job(&mut link);
                    }));
                    if ran.is_err() {
                        link.reset();
                    }
                }
            })
            .map_err(unavailable)?;
        Ok(Committer { jobs })
    }

    /// Runs `job` on the connection's thread, after every job sent before.
    /// `Unavailable` if the thread is gone (the job never ran), `Ambiguous`
    /// if it ended the job without answering (it panicked).
    pub(super) async fn run<R: Send + 'static>(
        &self,
        job: impl FnOnce(&mut Link) -> R + Send + 'static,
    ) -> Result<R, StorageError> {
        let (answer, answered) = tokio::sync::oneshot::channel();
        let job: Job = Box::new(move |link| {
            let _ = answer.send(job(link));
        });
        self.jobs
            .send(job)
            .map_err(|_| StorageError::Unavailable("the commit thread is gone".into()))?;
        // Sent but never answered: it may have run.
        answered.await.map_err(|_| {
            StorageError::Ambiguous("the commit thread ended a job without an answer".into())
        })
    }
}

impl Link {
    /// The connection, opened again if it was dropped.
    pub(super) fn conn(&mut self) -> Result<&mut Connection, StorageError> {
        if self.closed {
            return Err(StorageError::Unavailable("the store is closed".into()));
        }
        if self.conn.is_none() {
            self.conn = Some(connect(&self.path, self.busy_timeout)?);
        }
        self.conn
            .as_mut()
            .ok_or_else(|| StorageError::Unavailable("the commit connection is gone".into()))
    }

    /// Drops the connection (its state is unknown); the next job opens it
    /// again.
    pub(super) fn reset(&mut self) {
        self.conn = None;
    }

    /// Closes the connection for good.
    pub(super) fn close(&mut self) {
        if let Some(conn) = self.conn.take() {
            let _ = conn.close();
        }
        self.closed = true;
    }
}

/// Opens the file with the writer's settings (the database is in WAL mode
/// since the store first opened it): `synchronous=NORMAL` (the store syncs
/// the WAL itself, see `sync`), foreign keys on.
fn connect(path: &PathBuf, busy_timeout: Duration) -> Result<Connection, StorageError> {
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let conn = Connection::open_with_flags(path, flags).map_err(unavailable)?;
    conn.busy_timeout(busy_timeout).map_err(unavailable)?;
    conn.pragma_update(None, "synchronous", "NORMAL")
        .map_err(unavailable)?;
    conn.pragma_update(None, "foreign_keys", "ON")
        .map_err(unavailable)?;
    conn.set_prepared_statement_cache_capacity(64);
    Ok(conn)
}
