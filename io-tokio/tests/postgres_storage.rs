//! The storage contract suite and PostgreSQL-specific checks. They run when
//! `ORBIT_TEST_POSTGRES` holds a URL (and fail if it is unreachable); each
//! test works in a database of its own, dropped at the end.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod postgres_support;

use orbit_io_tokio::storage::contract::{self, append};
use orbit_io_tokio::storage::{
    Append, IdempotencyRecord, PostgresOptions, PostgresStore, QueueOp, Storage, StorageError,
    Transaction,
};
use postgres_support::ScratchDatabase;
use sqlx::Connection;
use std::sync::Arc;

fn tx(appends: Vec<Append>) -> Transaction {
    Transaction {
        appends,
        ..Transaction::default()
    }
}

async fn open(db: &ScratchDatabase) -> PostgresStore {
    PostgresStore::open(&PostgresOptions::new(db.url()))
        .await
        .unwrap()
}

#[tokio::test]
async fn postgres_passes_the_storage_contract() {
    let Some(db) = ScratchDatabase::create("contract").await else {
        return;
    };
    let store = open(&db).await;
    contract::run(&store).await.unwrap();
    // Twice: the suite must hold on a store that already has data.
    contract::run(&store).await.unwrap();
    store.close().await;
}

/// The suite again with every connection warm, so that every group commit
/// of appends alone is written as one statement, and once with none.
#[tokio::test]
async fn postgres_passes_the_storage_contract_with_and_without_one_statement_commits() {
    let Some(db) = ScratchDatabase::create("contract_warm").await else {
        return;
    };
    for warm in [
        std::time::Duration::from_secs(3600),
        std::time::Duration::ZERO,
    ] {
        let store = PostgresStore::open(&PostgresOptions {
            warm,
            ..PostgresOptions::new(db.url())
        })
        .await
        .unwrap();
        contract::run(&store).await.unwrap();
        store.close().await;
    }
}

#[tokio::test]
async fn reopened_store_recovers_exactly_the_committed_state() {
    let Some(db) = ScratchDatabase::create("reopen").await else {
        return;
    };
    let store = open(&db).await;
    store.commit(&tx(vec![append("e1", 0, 3)])).await.unwrap();
    store.commit(&tx(vec![append("e1", 3, 4)])).await.unwrap();
    let refused = store.commit(&tx(vec![append("e1", 2, 5)])).await;
    assert!(matches!(refused, Err(StorageError::Conflict { .. })));
    store.close().await;
    drop(store);

    // Migrations run again at open and are a no-op on a migrated database.
    let store = open(&db).await;
    let active = store.load_active().await.unwrap();
    assert_eq!(active.len(), 1);
    assert_eq!(active[0].events, contract::events(1, 4));
    assert_eq!(active[0].row, contract::row("e1", "running", 4));
    store.close().await;
}

#[tokio::test]
async fn synchronous_commit_is_pinned_on_every_connection() {
    let Some(db) = ScratchDatabase::create("sync").await else {
        return;
    };
    // Even when the database's own default says otherwise.
    db.admin(&format!(
        "ALTER DATABASE \"{}\" SET synchronous_commit = off",
        db.name()
    ))
    .await;
    let store = open(&db).await;
    assert_eq!(store.synchronous_commit().await.unwrap(), "on");
    store.close().await;
}

#[tokio::test]
async fn the_commit_connection_never_plans_a_table_scan_for_a_lookup() {
    let Some(db) = ScratchDatabase::create("noscan").await else {
        return;
    };
    let store = open(&db).await;
    assert_eq!(store.writer_setting("enable_seqscan").await.unwrap(), "off");
    store.close().await;
}

#[tokio::test]
async fn a_batch_of_many_executions_is_one_atomic_write() {
    let Some(db) = ScratchDatabase::create("batch").await else {
        return;
    };
    let store = open(&db).await;
    // The queue operations of a unit apply in order. (Two appends of one
    // execution in one batch are a conflict: see the contract suite.)
    let mut t = tx((0..50).map(|i| append(&format!("b{i}"), 0, 2)).collect());
    for unit in ["u1", "u2"] {
        t.queue.push(QueueOp::Enqueue {
            execution_id: "b1".into(),
            unit: unit.into(),
            task: "t".into(),
            enqueued_at: 1,
            body: serde_json::json!({"unit": unit}),
        });
    }
    t.queue.push(QueueOp::Remove {
        execution_id: "b1".into(),
        unit: "u1".into(),
    });
    store.commit(&t).await.unwrap();
    assert_eq!(store.history("b7", 0, 100).await.unwrap().len(), 2);
    assert_eq!(store.execution("b7").await.unwrap().unwrap().last_seq, 2);
    assert_eq!(store.load_active().await.unwrap().len(), 50);
    let queue = store.queue().await.unwrap();
    assert_eq!(queue.len(), 1, "{queue:?}");
    assert!(matches!(&queue[0], QueueOp::Enqueue { unit, .. } if unit == "u2"));

    // One stale append among fifty fresh ones: nothing at all is written.
    let mut t = tx((0..50).map(|i| append(&format!("c{i}"), 0, 1)).collect());
    t.appends.push(append("b3", 1, 3));
    match store.commit(&t).await {
        Err(StorageError::Conflict { stale, fenced }) => {
            assert_eq!(stale, vec!["b3".to_owned()]);
            assert!(fenced.is_empty());
        }
        other => panic!("expected a conflict, got {other:?}"),
    }
    assert!(store.execution("c0").await.unwrap().is_none());
    assert_eq!(store.load_all().await.unwrap().len(), 50);
    store.close().await;
}

#[tokio::test]
async fn racing_writers_of_one_execution_never_both_win() {
    let Some(db) = ScratchDatabase::create("race").await else {
        return;
    };
    let a = Arc::new(open(&db).await);
    let b = Arc::new(open(&db).await);
    a.commit(&tx(vec![append("r", 0, 1)])).await.unwrap();
    for round in 1..20u64 {
        // Both believe `seq` is `round`; exactly one append may land.
        let (ta, tb) = (
            tx(vec![append("r", round, round + 1)]),
            tx(vec![append("r", round, round + 1)]),
        );
        let (ra, rb) = tokio::join!(a.commit(&ta), b.commit(&tb));
        let wins = [&ra, &rb].iter().filter(|r| r.is_ok()).count();
        assert_eq!(wins, 1, "round {round}: {ra:?} / {rb:?}");
        for r in [ra, rb] {
            assert!(r.is_ok() || matches!(r, Err(StorageError::Conflict { .. })));
        }
    }
    // Two writers creating the same new execution: one wins.
    let (ta, tb) = (tx(vec![append("new", 0, 2)]), tx(vec![append("new", 0, 2)]));
    let (ra, rb) = tokio::join!(a.commit(&ta), b.commit(&tb));
    assert_eq!([&ra, &rb].iter().filter(|r| r.is_ok()).count(), 1);
    assert_eq!(a.history("r", 0, 100).await.unwrap().len(), 20);
    a.close().await;
    b.close().await;
}

#[tokio::test]
async fn unreachable_database_is_unavailable_and_applies_nothing() {
    let Some(db) = ScratchDatabase::create("down").await else {
        return;
    };
    let store = open(&db).await;
    store.commit(&tx(vec![append("x", 0, 1)])).await.unwrap();
    // Cut the store off: no new connections, existing ones terminated.
    db.block_connections().await;
    let result = store
        .commit(&tx(vec![append("x", 1, 2), append("y", 0, 1)]))
        .await;
    assert!(
        matches!(result, Err(StorageError::Unavailable(_))),
        "{result:?}"
    );
    assert!(store.ping().await.is_err());
    db.allow_connections().await;

    // The same store object works again by itself; nothing was half-applied.
    assert_eq!(store.history("x", 0, 10).await.unwrap().len(), 1);
    assert!(store.execution("y").await.unwrap().is_none());
    store
        .commit(&tx(vec![append("x", 1, 2), append("y", 0, 1)]))
        .await
        .unwrap();
    assert_eq!(store.history("x", 0, 10).await.unwrap().len(), 2);
    store.close().await;
}

/// The database ends every connection while the store is idle (a restart,
/// an administrator): the next commit finds its kept connection broken
/// before it has begun anything, and goes through on a fresh one.
///
/// Warm (its last commit a moment ago), the connection takes no `BEGIN`:
/// the lone statement's failure is settled by its commit token, found not
/// to have landed, and the commit goes through on a fresh connection too.
#[tokio::test]
async fn a_commit_connection_ended_while_idle_is_replaced_and_the_commit_lands() {
    for warm in [
        std::time::Duration::ZERO,
        std::time::Duration::from_secs(3600),
    ] {
        let Some(db) = ScratchDatabase::create("idle").await else {
            return;
        };
        let store = PostgresStore::open(&PostgresOptions {
            warm,
            ..PostgresOptions::new(db.url())
        })
        .await
        .unwrap();
        store.commit(&tx(vec![append("x", 0, 1)])).await.unwrap();
        db.block_connections().await;
        db.allow_connections().await;
        store.commit(&tx(vec![append("x", 1, 2)])).await.unwrap();
        assert_eq!(store.history("x", 0, 10).await.unwrap().len(), 2);
        store.close().await;
    }
}

/// A group commit of appends (and idempotency records) on a warm
/// connection is one statement that judges the rule itself: it writes
/// everything or, when an append is stale, nothing but its token's step,
/// and names the stale executions.
#[tokio::test]
async fn appends_alone_are_one_statement_that_writes_all_or_nothing() {
    let Some(db) = ScratchDatabase::create("one_statement").await else {
        return;
    };
    let store = PostgresStore::open(&PostgresOptions {
        warm: std::time::Duration::from_secs(3600),
        ..PostgresOptions::new(db.url())
    })
    .await
    .unwrap();
    let tokens = || async {
        let mut conn = sqlx::PgConnection::connect(db.url()).await.unwrap();
        let tokens: Vec<i64> = sqlx::query_scalar("SELECT token FROM commit_tokens")
            .fetch_all(&mut conn)
            .await
            .unwrap();
        let _ = conn.close().await;
        tokens
    };
    store.commit(&tx(vec![append("x", 0, 1)])).await.unwrap();
    assert_eq!(tokens().await, vec![1]);

    // x is stale: y is not created either, nor y's key stored.
    let keyed = |appends: Vec<Append>, key: &str| Transaction {
        appends,
        idempotency: vec![IdempotencyRecord {
            scope: "start".to_owned(),
            key: key.to_owned(),
            fingerprint: "f".to_owned(),
            status: 201,
            body: "{}".to_owned(),
            expires_at: u64::MAX / 4,
        }],
        ..Transaction::default()
    };
    let stale = store
        .commit(&keyed(vec![append("y", 0, 1), append("x", 0, 1)], "y"))
        .await;
    match stale {
        Err(StorageError::Conflict { stale, fenced }) => {
            assert_eq!((stale, fenced), (vec!["x".to_owned()], vec![]));
        }
        other => panic!("{other:?}"),
    }
    assert!(store.execution("y").await.unwrap().is_none());
    assert!(store.idempotency("start", "y", 0).await.unwrap().is_none());
    assert_eq!(store.history("x", 0, 10).await.unwrap().len(), 1);
    assert_eq!(tokens().await, vec![2]);

    // A new execution whose events are already there (no row to lock): the
    // primary key refuses the statement, and the token stays.
    {
        let mut conn = sqlx::PgConnection::connect(db.url()).await.unwrap();
        sqlx::query(
            "INSERT INTO events (execution_id, seq, at, type, body) VALUES ('z', 1, 0, 't', '{}')",
        )
        .execute(&mut conn)
        .await
        .unwrap();
        let _ = conn.close().await;
    }
    let taken = store
        .commit(&tx(vec![append("w", 0, 1), append("z", 0, 1)]))
        .await;
    assert!(
        matches!(&taken, Err(StorageError::Conflict { stale, .. }) if stale.len() == 2),
        "{taken:?}"
    );
    assert!(store.execution("w").await.unwrap().is_none());
    assert_eq!(tokens().await, vec![2]);

    store
        .commit(&keyed(vec![append("x", 1, 3), append("y", 0, 1)], "y"))
        .await
        .unwrap();
    assert!(store.idempotency("start", "y", 0).await.unwrap().is_some());
    assert_eq!(store.history("x", 0, 10).await.unwrap().len(), 3);
    assert_eq!(store.history("y", 0, 10).await.unwrap().len(), 1);
    assert_eq!(tokens().await, vec![3]);
    let mut counts = store.count_by_status().await.unwrap();
    counts.sort();
    assert_eq!(counts, vec![("running".to_owned(), 2)]);
    store.close().await;
}

#[tokio::test]
async fn a_bad_url_is_unavailable_not_a_panic() {
    let result = PostgresStore::open(&PostgresOptions {
        acquire_timeout: std::time::Duration::from_millis(500),
        ..PostgresOptions::new("postgres://nobody@127.0.0.1:1/none")
    })
    .await;
    assert!(matches!(result, Err(StorageError::Unavailable(_))));
    let result = PostgresStore::open(&PostgresOptions::new("not a url")).await;
    assert!(matches!(result, Err(StorageError::Unavailable(_))));
}

#[tokio::test]
async fn a_read_only_database_is_not_writable() {
    let Some(db) = ScratchDatabase::create("readonly").await else {
        return;
    };
    let store = open(&db).await;
    store.check_writable().await.unwrap();
    store.close().await;
    db.admin(&format!(
        "ALTER DATABASE \"{}\" SET default_transaction_read_only = on",
        db.name()
    ))
    .await;
    // Opening may already refuse (the migration bookkeeping writes); if it
    // opens, the store says it is not writable and commits fail cleanly.
    let store = match PostgresStore::open(&PostgresOptions::new(db.url())).await {
        Ok(store) => store,
        Err(e) => {
            assert!(matches!(e, StorageError::Unavailable(_)), "{e:?}");
            return;
        }
    };
    assert!(matches!(
        store.check_writable().await,
        Err(StorageError::Unavailable(_))
    ));
    let result = store.commit(&tx(vec![append("ro", 0, 1)])).await;
    assert!(
        matches!(result, Err(StorageError::Unavailable(_))),
        "{result:?}"
    );
    store.close().await;
}

/// Two commit connections write at once: commits of different executions
/// run side by side and all land, and the totals per status, which each
/// connection adds to a row of its own, still add up.
#[tokio::test]
async fn commits_on_both_connections_land_and_the_totals_add_up() {
    let Some(db) = ScratchDatabase::create("writers").await else {
        return;
    };
    let store = Arc::new(open(&db).await);
    for round in 0..2u64 {
        let commits: Vec<_> = (0..40)
            .map(|i| {
                let store = store.clone();
                tokio::spawn(async move {
                    let mut created = append(&format!("w-{i}"), round, round + 1);
                    if round == 1 && i % 2 == 0 {
                        created.projection.status = "completed".into();
                    }
                    store.commit(&tx(vec![created])).await
                })
            })
            .collect();
        for commit in commits {
            commit.await.unwrap().unwrap();
        }
    }
    let mut counts = store.count_by_status().await.unwrap();
    counts.sort();
    assert_eq!(
        counts,
        vec![("completed".to_owned(), 20), ("running".to_owned(), 20)]
    );
    store.close().await;
}
