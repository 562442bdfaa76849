//! The storage contract suite and SQLite-specific durability checks.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use orbit_io_tokio::storage::contract::{self, append};
use orbit_io_tokio::storage::{SqliteOptions, SqliteStore, Storage, StorageError, Transaction};
use std::time::Duration;

fn url(dir: &tempfile::TempDir) -> String {
    format!("sqlite://{}", dir.path().join("orbit.db").display())
}

fn tx(appends: Vec<orbit_io_tokio::storage::Append>) -> Transaction {
    Transaction {
        appends,
        ..Transaction::default()
    }
}

#[tokio::test]
async fn sqlite_passes_the_storage_contract() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(&SqliteOptions::new(url(&dir)))
        .await
        .unwrap();
    contract::run(&store).await.unwrap();
}

#[tokio::test]
async fn reopened_store_recovers_exactly_the_committed_state() {
    let dir = tempfile::tempdir().unwrap();
    let opts = SqliteOptions::new(url(&dir));
    let store = SqliteStore::open(&opts).await.unwrap();
    store.commit(&tx(vec![append("e1", 0, 3)])).await.unwrap();
    store.commit(&tx(vec![append("e1", 3, 4)])).await.unwrap();
    let refused = store.commit(&tx(vec![append("e1", 2, 5)])).await;
    assert!(matches!(refused, Err(StorageError::Conflict { .. })));
    store.close().await;
    drop(store);

    // Migrations run again at open and are a no-op on a migrated file.
    let store = SqliteStore::open(&opts).await.unwrap();
    let active = store.load_active().await.unwrap();
    assert_eq!(active.len(), 1);
    assert_eq!(active[0].events, contract::events(1, 4));
    assert_eq!(active[0].row, contract::row("e1", "running", 4));
}

#[tokio::test]
async fn durability_pragmas_are_pinned() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("orbit.db");
    let store = SqliteStore::open(&SqliteOptions::new(url(&dir)))
        .await
        .unwrap();
    assert_eq!(store.wal_syncs(), 0);
    store.commit(&tx(vec![append("p", 0, 1)])).await.unwrap();
    // SQLite does not sync inside COMMIT; the store syncs the WAL before
    // the commit is reported done.
    assert_eq!(store.wal_syncs(), 1);
    // The WAL file exists next to the database while the store is open.
    assert!(
        dir.path().join("orbit.db-wal").exists(),
        "{} has no WAL",
        path.display()
    );
    let (journal, sync) = store.pragmas().await.unwrap();
    assert_eq!(journal, "wal");
    assert_eq!(sync, 1, "synchronous=NORMAL is 1");
}

#[tokio::test]
async fn locked_database_is_unavailable_applies_nothing_and_recovers() {
    let dir = tempfile::tempdir().unwrap();
    let mut opts = SqliteOptions::new(url(&dir));
    opts.busy_timeout = Duration::from_millis(100);
    let store = SqliteStore::open(&opts).await.unwrap();
    store.commit(&tx(vec![append("x", 0, 1)])).await.unwrap();

    // Another process holds the write lock.
    use sqlx::Connection;
    let mut blocker = sqlx::SqliteConnection::connect(&url(&dir)).await.unwrap();
    sqlx::query("BEGIN IMMEDIATE")
        .execute(&mut blocker)
        .await
        .unwrap();
    let result = store
        .commit(&tx(vec![append("x", 1, 2), append("y", 0, 1)]))
        .await;
    assert!(
        matches!(result, Err(StorageError::Unavailable(_))),
        "{result:?}"
    );
    assert!(store.check_writable().await.is_err());
    assert!(store.ping().await.is_ok(), "reads still work");
    sqlx::query("ROLLBACK").execute(&mut blocker).await.unwrap();

    assert_eq!(store.history("x", 0, 10).await.unwrap().len(), 1);
    assert!(store.execution("y").await.unwrap().is_none());
    // The store works again by itself.
    store.check_writable().await.unwrap();
    store
        .commit(&tx(vec![append("x", 1, 2), append("y", 0, 1)]))
        .await
        .unwrap();
    assert_eq!(store.history("x", 0, 10).await.unwrap().len(), 2);
}

#[tokio::test]
async fn in_memory_database_is_refused() {
    let r = SqliteStore::open(&SqliteOptions::new("sqlite::memory:")).await;
    assert!(matches!(r, Err(StorageError::Unavailable(_))));
}

/// SQLite is built as `.cargo/config.toml` asks (`LIBSQLITE3_FLAGS`):
/// without the shared page cache and the memory statistics, each of which
/// takes a process-wide lock on every page or allocation. A build that
/// lost the setting would still work, only slower; this says so.
#[test]
fn sqlite_is_built_without_process_wide_locks() {
    let conn = rusqlite::Connection::open_in_memory().unwrap();
    let mut stmt = conn.prepare("PRAGMA compile_options").unwrap();
    let options: Vec<String> = stmt
        .query_map([], |row| row.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert!(
        !options.iter().any(|o| o == "ENABLE_MEMORY_MANAGEMENT"),
        "{options:?}"
    );
    assert!(
        options.iter().any(|o| o == "DEFAULT_MEMSTATUS=0"),
        "{options:?}"
    );
}
