//! Making commits durable outside the write lock (group fsync).
//!
//! With `synchronous = FULL`, SQLite fsyncs the WAL inside `COMMIT`, while
//! it holds the database's one write lock: the next commit cannot start
//! writing until the disk has answered. The store instead runs the writer
//! with `synchronous = NORMAL` (SQLite appends the commit's frames to the
//! WAL and syncs only around checkpoints) and syncs the WAL itself, after
//! giving the lock back and before the commit is reported done. One
//! `fdatasync` covers every commit written before it began, so while one
//! commit waits for the disk the next one writes, and commits that finish
//! writing together share a sync.
//!
//! No commit is reported done before its frames are on disk, as before.
//! What changes: other connections can read a commit during the short
//! wait for its sync, so after a power cut (not a crash of the process:
//! the operating system still holds what was written) a read may have
//! shown a commit that is gone. Nothing is ever acknowledged on it.

use super::super::StorageError;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use tokio::sync::Mutex;

/// The WAL's path and how far it is known to be on disk.
#[derive(Debug)]
pub(super) struct WalSync {
    wal: PathBuf,
    /// Commits that have written their frames, numbered in write order
    /// (counted under the write lock, after `COMMIT` returned).
    written: AtomicU64,
    /// Every commit numbered up to this is on disk; held during a sync, so
    /// one runs at a time and the others wait to see whether it covered
    /// them.
    synced: Mutex<u64>,
    /// Syncs run so far.
    syncs: AtomicU64,
}

impl WalSync {
    /// For the database file `db` (its WAL is `db` with `-wal` appended).
    pub(super) fn new(db: PathBuf) -> Self {
        let mut wal = db.into_os_string();
        wal.push("-wal");
        WalSync {
            wal: PathBuf::from(wal),
            written: AtomicU64::new(0),
            synced: Mutex::new(0),
            syncs: AtomicU64::new(0),
        }
    }

    /// Counts a commit whose frames are written; call it holding the write
    /// lock. Returns the number to wait for with [`WalSync::durable`].
    pub(super) fn written(&self) -> u64 {
        self.written.fetch_add(1, Ordering::SeqCst) + 1
    }

    /// Syncs run so far.
    pub(super) fn syncs(&self) -> u64 {
        self.syncs.load(Ordering::Relaxed)
    }

    /// Returns once commit `number` is on disk, syncing the WAL unless a
    /// sync that began after the commit was written already did.
    pub(super) async fn durable(&self, number: u64) -> Result<(), StorageError> {
        let mut synced = self.synced.lock().await;
        if *synced >= number {
            return Ok(());
        }
        // Everything counted so far has written its frames.
        let through = self.written.load(Ordering::SeqCst);
        let wal = self.wal.clone();
        self.syncs.fetch_add(1, Ordering::Relaxed);
        let outcome = tokio::task::spawn_blocking(move || {
            match std::fs::OpenOptions::new().write(true).open(&wal) {
                Ok(f) => f.sync_data(),
                // No WAL: SQLite checkpointed it into the database file,
                // synced, and removed it.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
                Err(e) => Err(e),
            }
        })
        .await;
        match outcome {
            Ok(Ok(())) => {
                *synced = through;
                Ok(())
            }
            // A failed sync may have dropped what it was to write: whether
            // the commit survives a power cut is unknown.
            Ok(Err(e)) => Err(StorageError::Ambiguous(format!(
                "syncing the WAL failed: {e}"
            ))),
            Err(e) => Err(StorageError::Ambiguous(format!(
                "syncing the WAL failed: {e}"
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[tokio::test]
    async fn a_sync_covers_every_commit_written_before_it_began_and_no_later_one() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("orbit.db");
        std::fs::write(dir.path().join("orbit.db-wal"), b"frames").unwrap();
        let sync = WalSync::new(db);

        let first = sync.written();
        sync.durable(first).await.unwrap();
        assert_eq!(sync.syncs(), 1);
        // Already on disk: no second sync.
        sync.durable(first).await.unwrap();
        assert_eq!(sync.syncs(), 1);

        // Two commits written before one sync: it covers both.
        let (second, third) = (sync.written(), sync.written());
        sync.durable(second).await.unwrap();
        sync.durable(third).await.unwrap();
        assert_eq!(sync.syncs(), 2);

        // A commit written after that sync needs one of its own.
        let fourth = sync.written();
        sync.durable(fourth).await.unwrap();
        assert_eq!(sync.syncs(), 3);
    }

    #[tokio::test]
    async fn no_wal_means_nothing_to_sync() {
        let dir = tempfile::tempdir().unwrap();
        let sync = WalSync::new(dir.path().join("orbit.db"));
        let n = sync.written();
        sync.durable(n).await.unwrap();
    }
}
