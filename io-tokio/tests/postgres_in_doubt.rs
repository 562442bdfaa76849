//! Commits in doubt on PostgreSQL (when `ORBIT_TEST_POSTGRES` is set): a
//! transaction whose COMMIT got no answer is settled before the store
//! answers — committed, or ended and rolled back while it was still in
//! progress — so no later read sees the database before its outcome is
//! final.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod postgres_support;

use orbit_io_tokio::storage::{InDoubt, Outcome, PostgresOptions, PostgresStore, Storage};
use postgres_support::ScratchDatabase;
use sqlx::{Connection, Executor, PgConnection, Row};

/// Begins a transaction on its own connection, as the store does, and
/// writes an idempotency record in it (not committed).
async fn open_transaction(url: &str, key: &str) -> (PgConnection, InDoubt) {
    let mut conn = PgConnection::connect(url).await.unwrap();
    let row = conn
        .fetch_one("BEGIN; SELECT pg_backend_pid(), pg_current_xact_id()::text::bigint")
        .await
        .unwrap();
    let doubt = InDoubt {
        pid: row.get(0),
        xid: row.get(1),
    };
    sqlx::query(
        "INSERT INTO idempotency (scope, key, fingerprint, status, body, expires_at) \
         VALUES ('start', $1, 'fp', 201, '{}', 9223372036854775807)",
    )
    .bind(key)
    .execute(&mut conn)
    .await
    .unwrap();
    (conn, doubt)
}

#[tokio::test]
async fn a_transaction_still_in_progress_is_ended_and_rolled_back() {
    let Some(db) = ScratchDatabase::create("in_doubt").await else {
        return;
    };
    let pg = PostgresStore::open(&PostgresOptions::new(db.url()))
        .await
        .unwrap();
    let (mut stuck, doubt) = open_transaction(db.url(), "k-stuck").await;
    assert_eq!(pg.settle(doubt).await.unwrap(), Outcome::Aborted);
    // Its backend is gone, and nothing of it was applied.
    assert!(stuck.execute("COMMIT").await.is_err());
    assert!(pg
        .idempotency("start", "k-stuck", 0)
        .await
        .unwrap()
        .is_none());
}

#[tokio::test]
async fn a_transaction_that_committed_is_known_as_committed() {
    let Some(db) = ScratchDatabase::create("in_doubt").await else {
        return;
    };
    let pg = PostgresStore::open(&PostgresOptions::new(db.url()))
        .await
        .unwrap();
    let (mut done, doubt) = open_transaction(db.url(), "k-done").await;
    done.execute("COMMIT").await.unwrap();
    assert_eq!(pg.settle(doubt).await.unwrap(), Outcome::Committed);
    assert!(pg
        .idempotency("start", "k-done", 0)
        .await
        .unwrap()
        .is_some());
    // Its connection was not ended.
    done.execute("SELECT 1").await.unwrap();
}

#[tokio::test]
async fn a_transaction_that_was_rolled_back_is_known_as_aborted() {
    let Some(db) = ScratchDatabase::create("in_doubt").await else {
        return;
    };
    let pg = PostgresStore::open(&PostgresOptions::new(db.url()))
        .await
        .unwrap();
    let (mut gone, doubt) = open_transaction(db.url(), "k-gone").await;
    gone.execute("ROLLBACK").await.unwrap();
    assert_eq!(pg.settle(doubt).await.unwrap(), Outcome::Aborted);
    assert!(pg
        .idempotency("start", "k-gone", 0)
        .await
        .unwrap()
        .is_none());
}
