//! The `--cluster` lease on PostgreSQL (when `ORBIT_TEST_POSTGRES` is set):
//! taking, renewing and releasing it by the database's clock, and the fence
//! in the commit transaction — a deposed leader's write is a `Conflict`
//! naming no execution, nothing of it is applied, and its term stays
//! closed; the new leader writes on. Through the driver, the requests of a
//! fenced commit are answered `503 STORAGE_ERROR` starting with `fenced:`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod postgres_support;

use orbit_core::check::{compile, Source};
use orbit_core::engine::{DefinitionRecord, Request, Start};
use orbit_io_tokio::driver::{Driver, Options};
use orbit_io_tokio::storage::contract::append;
use orbit_io_tokio::storage::lease::{self, LeaderFence, RenewError, Store};
use orbit_io_tokio::storage::{PostgresOptions, PostgresStore, Storage, StorageError, Transaction};
use postgres_support::ScratchDatabase;
use std::sync::Arc;
use std::time::Duration;

fn tx(id: &str, after: u64, last: u64) -> Transaction {
    Transaction {
        appends: vec![append(id, after, last)],
        ..Transaction::default()
    }
}

#[tokio::test]
async fn a_deposed_leaders_write_is_fenced_and_applies_nothing() {
    deposed_leader(PostgresOptions::new("").warm).await;
}

/// The same with every commit written as one statement, which reads the
/// lease row itself.
#[tokio::test]
async fn a_deposed_leaders_one_statement_commit_is_fenced_and_applies_nothing() {
    deposed_leader(Duration::from_secs(3600)).await;
}

/// A leader's term ends while it is silent; its next write is refused and
/// the next leader writes on. Commit connections warm for `warm`.
async fn deposed_leader(warm: Duration) {
    let Some(db) = ScratchDatabase::create("lease").await else {
        return;
    };
    let pg = PostgresStore::open(&PostgresOptions {
        warm,
        ..PostgresOptions::new(db.url())
    })
    .await
    .unwrap();
    let lease = lease::Postgres::connect(db.url(), Duration::from_secs(5)).unwrap();
    let before = lease.read().await.unwrap();
    assert_eq!((before.holder.as_str(), before.epoch), ("", 0));
    assert!(before.expired());

    // `a` takes the lease for a short while; `b` cannot while it is live.
    let ttl = Duration::from_millis(300);
    assert_eq!(lease.try_acquire("a", ttl).await.unwrap(), Some(1));
    assert_eq!(lease.try_acquire("b", ttl).await.unwrap(), None);
    lease.renew("a", 1, ttl).await.unwrap();
    let a = Arc::new(LeaderFence::new("a", 1));
    let store_a = pg.fenced_by(a.clone());
    store_a.commit(&tx("x", 0, 2)).await.unwrap();

    // `a` goes silent past its lease; `b` takes over with the next epoch.
    tokio::time::sleep(ttl + Duration::from_millis(100)).await;
    assert!(lease.read().await.unwrap().expired());
    assert_eq!(lease.try_acquire("b", ttl * 10).await.unwrap(), Some(2));

    // `a` wakes up and writes: refused, nothing applied, term closed.
    let refused = store_a.commit(&tx("x", 2, 3)).await;
    assert_eq!(
        refused,
        Err(StorageError::Conflict {
            fenced: Vec::new(),
            stale: Vec::new()
        })
    );
    assert!(a.is_deposed());
    let stored = pg.load_execution("x").await.unwrap().unwrap();
    assert_eq!(stored.events.len(), 2);
    assert_eq!(
        store_a.commit(&tx("y", 0, 1)).await,
        Err(LeaderFence::refusal())
    );
    assert!(pg.load_execution("y").await.unwrap().is_none());
    assert_eq!(
        lease.renew("a", 1, ttl).await,
        Err(RenewError::Fenced {
            holder: "b".into(),
            epoch: 2
        })
    );

    // The new leader writes on from what is durable.
    let b = Arc::new(LeaderFence::new("b", 2));
    let store_b = pg.fenced_by(b.clone());
    store_b.commit(&tx("x", 2, 3)).await.unwrap();
    assert_eq!(
        pg.load_execution("x").await.unwrap().unwrap().events.len(),
        3
    );
    assert!(!b.is_deposed());

    // A clean shutdown releases the lease: the next node takes it at once.
    assert!(lease.release("b", 2).await.unwrap());
    assert_eq!(lease.try_acquire("c", ttl).await.unwrap(), Some(3));
    assert_eq!(
        store_b.commit(&tx("x", 3, 4)).await,
        Err(LeaderFence::refusal())
    );
    assert!(b.is_deposed());

    // Node contacts are recorded by the database's clock.
    lease
        .touch("c", "http://127.0.0.1:1", "leader", Duration::from_secs(60))
        .await
        .unwrap();
    let nodes = lease.nodes().await.unwrap();
    assert_eq!(nodes.len(), 1);
    assert_eq!(nodes[0].role, "leader");
    assert!(nodes[0].db_now_ms >= nodes[0].last_seen_ms);
    lease.close().await;
    pg.close().await;
}

#[tokio::test]
async fn an_unfenced_store_ignores_the_lease() {
    let Some(db) = ScratchDatabase::create("lease_single").await else {
        return;
    };
    let pg = PostgresStore::open(&PostgresOptions::new(db.url()))
        .await
        .unwrap();
    let lease = lease::Postgres::connect(db.url(), Duration::from_secs(5)).unwrap();
    assert_eq!(
        lease
            .try_acquire("someone", Duration::from_secs(60))
            .await
            .unwrap(),
        Some(1)
    );
    pg.commit(&tx("single", 0, 1)).await.unwrap();
    lease.close().await;
    pg.close().await;
}

const PLAIN: &str = r#"
task "demo.work" version "1.0.0" {
    input  { n: Int }
    output { n: Int }
}

workflow Plain version "1.0.0" {
    input { n: Int }
    step work {
        worker "demo.work"
        with { n: input.n }
    }
    output { n: work.n }
}
"#;

fn definitions() -> Vec<DefinitionRecord> {
    let compiled = compile(
        &[Source {
            name: "plain.orbit".into(),
            text: PLAIN.into(),
        }],
        &|_, _| None,
    );
    assert!(compiled.is_ok(), "{:?}", compiled.diagnostics);
    compiled
        .definitions
        .into_iter()
        .map(|d| DefinitionRecord {
            workflow: d.workflow,
            definition_hash: d.hash,
            source: PLAIN.into(),
            registered_at: 0,
        })
        .collect()
}

fn start(id: &str) -> Request {
    Request::Start(Start {
        workflow: "Plain".into(),
        version: None,
        input: serde_json::json!({"n": 1}),
        execution_id: Some(id.into()),
        idempotency: None,
        traceparent: None,
    })
}

#[tokio::test]
async fn a_fenced_drivers_requests_get_storage_error_fenced_and_nothing_is_written() {
    let Some(db) = ScratchDatabase::create("lease_driver").await else {
        return;
    };
    let pg = PostgresStore::open(&PostgresOptions::new(db.url()))
        .await
        .unwrap();
    let lease = lease::Postgres::connect(db.url(), Duration::from_secs(5)).unwrap();
    let ttl = Duration::from_millis(300);
    assert_eq!(lease.try_acquire("a", ttl).await.unwrap(), Some(1));
    let fence = Arc::new(LeaderFence::new("a", 1));
    let mut options = Options::default();
    options.engine.epoch = Some(1);
    let driver = Driver::start(Arc::new(pg.fenced_by(fence.clone())), options)
        .await
        .unwrap();
    let deployed = driver
        .call(Request::Deploy {
            definitions: definitions(),
            idempotency: None,
        })
        .await;
    assert_eq!(deployed.status, 200, "{:?}", deployed.body);
    let first = driver.call(start("before")).await;
    assert_eq!(first.status, 201, "{:?}", first.body);

    tokio::time::sleep(ttl + Duration::from_millis(100)).await;
    assert_eq!(lease.try_acquire("b", ttl * 10).await.unwrap(), Some(2));

    let refused = tokio::time::timeout(Duration::from_secs(10), driver.call(start("after")))
        .await
        .expect("a fenced request is answered, not retried forever");
    assert_eq!(refused.status, 503, "{:?}", refused.body);
    assert_eq!(refused.body["error"]["code"], "STORAGE_ERROR");
    let message = refused.body["error"]["message"]
        .as_str()
        .unwrap_or_default();
    assert!(message.starts_with("fenced:"), "{message}");
    assert!(fence.is_deposed());
    assert!(pg.execution("after").await.unwrap().is_none());
    assert!(pg.execution("before").await.unwrap().is_some());
    // The deposed driver stops promptly: nothing it holds can be written.
    tokio::time::timeout(Duration::from_secs(5), driver.shutdown())
        .await
        .unwrap();
    lease.close().await;
    pg.close().await;
}
