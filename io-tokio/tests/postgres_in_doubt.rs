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

/// The token step a commit in one statement makes, as the statement makes
/// it: `true` when it moved the token from `value`.
async fn step_token(url: &str, key: &str, value: i64) -> bool {
    let mut conn = PgConnection::connect(url).await.unwrap();
    let moved = sqlx::query(
        "INSERT INTO commit_tokens (writer, token) VALUES ($1, $2 + 1) \
         ON CONFLICT (writer) DO UPDATE SET token = excluded.token \
         WHERE commit_tokens.token = $2 RETURNING 1",
    )
    .bind(key)
    .bind(value)
    .fetch_optional(&mut conn)
    .await
    .unwrap()
    .is_some();
    let _ = conn.close().await;
    moved
}

#[tokio::test]
async fn a_lost_statement_is_settled_by_its_token_and_a_late_copy_writes_nothing() {
    let Some(db) = ScratchDatabase::create("token").await else {
        return;
    };
    let store = PostgresStore::open(&PostgresOptions::new(db.url()))
        .await
        .unwrap();

    // The statement landed: its token moved from 3 to 4.
    for value in 0..4 {
        assert!(step_token(db.url(), "landed", value).await);
    }
    assert_eq!(
        store.settle_statement("landed", 3).await.unwrap(),
        Outcome::Committed
    );
    // Settling again reads the same outcome.
    assert_eq!(
        store.settle_statement("landed", 3).await.unwrap(),
        Outcome::Committed
    );

    // The statement never landed: the token still holds 2, and once
    // settled, a copy of the statement arriving late cannot move it.
    for value in 0..2 {
        assert!(step_token(db.url(), "lost", value).await);
    }
    assert_eq!(
        store.settle_statement("lost", 2).await.unwrap(),
        Outcome::Aborted
    );
    assert!(!step_token(db.url(), "lost", 2).await);
    assert_eq!(
        store.settle_statement("lost", 2).await.unwrap(),
        Outcome::Aborted
    );

    // The first statement of a token, lost before its row existed.
    assert_eq!(
        store.settle_statement("first", 0).await.unwrap(),
        Outcome::Aborted
    );
    assert!(!step_token(db.url(), "first", 0).await);
    store.close().await;
}
