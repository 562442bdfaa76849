//! The tokio driver over SQLite: group commit, storage failures (memory
//! unchanged, `STORAGE_ERROR`, automatic resumption) and recovery.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use async_trait::async_trait;
use orbit_core::check::{compile, Source};
use orbit_core::engine::{DefinitionRecord, Request, Start};
use orbit_core::history::Event;
use orbit_io_tokio::driver::{Driver, Options};
use orbit_io_tokio::storage::{
    self, ExecutionRow, IdempotencyRecord, ListFilter, QueueOp, SqliteOptions, SqliteStore,
    Storage, StorageError, StoredExecution, Transaction,
};
use serde_json::json;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

const PLAIN: &str = r#"
task "demo.work" version "1.0.0" {
    input  { n: Int }
    output { doubled: Int }
}

workflow Plain version "1.0.0" {
    input { n: Int }
    step work {
        worker "demo.work"
        with { n: input.n }
    }
    output { doubled: work.doubled }
}
"#;

/// SQLite with a switch that makes commits fail, a commit delay and a
/// commit counter.
struct Flaky {
    inner: SqliteStore,
    failing: AtomicBool,
    delay_ms: AtomicU64,
    commits: AtomicU64,
}

#[async_trait]
impl Storage for Flaky {
    async fn commit(&self, tx: &Transaction) -> Result<(), StorageError> {
        let delay = self.delay_ms.load(Ordering::SeqCst);
        if delay > 0 {
            tokio::time::sleep(Duration::from_millis(delay)).await;
        }
        if self.failing.load(Ordering::SeqCst) {
            return Err(StorageError::Unavailable("disk on fire".into()));
        }
        self.commits.fetch_add(1, Ordering::SeqCst);
        self.inner.commit(tx).await
    }
    async fn load_definitions(&self) -> Result<Vec<storage::DefinitionRecord>, StorageError> {
        self.inner.load_definitions().await
    }
    async fn load_active(&self) -> Result<Vec<StoredExecution>, StorageError> {
        self.inner.load_active().await
    }
    async fn load_all(&self) -> Result<Vec<StoredExecution>, StorageError> {
        self.inner.load_all().await
    }
    async fn idempotency_records(&self, now: u64) -> Result<Vec<IdempotencyRecord>, StorageError> {
        self.inner.idempotency_records(now).await
    }
    async fn count_by_status(&self) -> Result<Vec<(String, u64)>, StorageError> {
        self.inner.count_by_status().await
    }
    async fn load_execution(&self, id: &str) -> Result<Option<StoredExecution>, StorageError> {
        self.inner.load_execution(id).await
    }
    async fn execution(&self, id: &str) -> Result<Option<ExecutionRow>, StorageError> {
        self.inner.execution(id).await
    }
    async fn history(&self, id: &str, after: u64, limit: u32) -> Result<Vec<Event>, StorageError> {
        self.inner.history(id, after, limit).await
    }
    async fn list_executions(&self, f: &ListFilter) -> Result<Vec<ExecutionRow>, StorageError> {
        self.inner.list_executions(f).await
    }
    async fn idempotency(
        &self,
        scope: &str,
        key: &str,
        now: u64,
    ) -> Result<Option<IdempotencyRecord>, StorageError> {
        self.inner.idempotency(scope, key, now).await
    }
    async fn queue(&self) -> Result<Vec<QueueOp>, StorageError> {
        self.inner.queue().await
    }
    async fn ping(&self) -> Result<(), StorageError> {
        self.inner.ping().await
    }
}

async fn flaky(dir: &tempfile::TempDir) -> Arc<Flaky> {
    let url = format!("sqlite://{}", dir.path().join("orbit.db").display());
    Arc::new(Flaky {
        inner: SqliteStore::open(&SqliteOptions::new(url)).await.unwrap(),
        failing: AtomicBool::new(false),
        delay_ms: AtomicU64::new(0),
        commits: AtomicU64::new(0),
    })
}

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
        input: json!({"n": 1}),
        execution_id: Some(id.into()),
        idempotency: None,
        traceparent: None,
    })
}

async fn deploy(driver: &Driver) {
    let r = driver
        .call(Request::Deploy {
            definitions: definitions(),
            idempotency: None,
        })
        .await;
    assert_eq!(r.status, 200, "{:?}", r.body);
}

#[tokio::test]
async fn concurrent_requests_share_one_transaction() {
    let dir = tempfile::tempdir().unwrap();
    let store = flaky(&dir).await;
    let driver = Driver::start(store.clone(), Options::default())
        .await
        .unwrap();
    deploy(&driver).await;
    // Slow commits: requests arriving meanwhile pile up for the next one.
    store.delay_ms.store(100, Ordering::SeqCst);
    let before = store.commits.load(Ordering::SeqCst);
    let calls = (0..20).map(|i| {
        let d = driver.clone();
        tokio::spawn(async move { d.call(start(&format!("g-{i}"))).await })
    });
    for c in calls.collect::<Vec<_>>() {
        let r = c.await.unwrap();
        assert_eq!(r.status, 201, "{:?}", r.body);
    }
    let commits = store.commits.load(Ordering::SeqCst) - before;
    assert!(
        commits < 20,
        "20 starts took {commits} commits: no grouping"
    );
    for i in 0..20 {
        let e = store.execution(&format!("g-{i}")).await.unwrap();
        assert!(e.is_some(), "g-{i} missing");
    }
}

#[tokio::test]
async fn storage_failure_answers_storage_error_changes_nothing_and_resumes() {
    let dir = tempfile::tempdir().unwrap();
    let store = flaky(&dir).await;
    let driver = Driver::start(store.clone(), Options::default())
        .await
        .unwrap();
    deploy(&driver).await;
    store.failing.store(true, Ordering::SeqCst);
    let r = driver.call(start("s-1")).await;
    assert_eq!(r.status, 503, "{:?}", r.body);
    assert_eq!(r.error_code(), Some("STORAGE_ERROR"));
    // Memory was not changed: the engine does not know the execution.
    let r = driver
        .call(Request::GetExecution {
            execution_id: "s-1".into(),
        })
        .await;
    assert_eq!(r.status, 404, "{:?}", r.body);
    assert!(store.execution("s-1").await.unwrap().is_none());
    assert!(driver.metrics().commit_failures.load(Ordering::SeqCst) >= 1);

    // Storage works again: so does the server, by itself.
    store.failing.store(false, Ordering::SeqCst);
    let r = driver.call(start("s-1")).await;
    assert_eq!(r.status, 201, "{:?}", r.body);
    assert!(store.execution("s-1").await.unwrap().is_some());
}

#[tokio::test]
async fn committed_events_are_published_and_recovered_after_restart() {
    let dir = tempfile::tempdir().unwrap();
    let store = flaky(&dir).await;
    let driver = Driver::start(store.clone(), Options::default())
        .await
        .unwrap();
    let mut live = driver.subscribe();
    deploy(&driver).await;
    assert_eq!(driver.call(start("r-1")).await.status, 201);
    let first = tokio::time::timeout(Duration::from_secs(5), live.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(first.execution_id, "r-1");
    assert_eq!(first.events[0].seq, 1);
    driver.shutdown().await;
    let r = driver.call(start("r-2")).await;
    assert_eq!(r.status, 503, "a stopped driver answers 503");

    let restarted = Driver::start(store.clone(), Options::default())
        .await
        .unwrap();
    let r = restarted
        .call(Request::GetExecution {
            execution_id: "r-1".into(),
        })
        .await;
    assert_eq!(r.status, 200, "{:?}", r.body);
    assert_eq!(r.body["status"], "running");
    // The id is taken: starting it again returns the existing execution.
    let r = restarted.call(start("r-1")).await;
    assert_eq!(r.status, 200, "{:?}", r.body);
    assert_eq!(r.body["created"], false);
}

#[tokio::test]
async fn a_deposed_driver_sends_its_parked_polls_to_another_leader() {
    let dir = tempfile::tempdir().unwrap();
    let store = flaky(&dir).await;
    let driver = Driver::start(store.clone(), Options::default())
        .await
        .unwrap();
    let r = driver
        .call(Request::RegisterWorker {
            worker_id: "w".into(),
            task_patterns: vec!["*".into()],
            max_tasks: None,
        })
        .await;
    let session = r.body["session_id"].as_str().unwrap().to_owned();
    // A poll parked with nothing to hand out, when the term ends.
    let parked = {
        let driver = driver.clone();
        tokio::spawn(async move {
            driver
                .call(Request::Poll {
                    session_id: session,
                    max_tasks: None,
                    wait_ms: 10_000,
                    held: Vec::new(),
                })
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    driver.depose().await;
    let r = tokio::time::timeout(Duration::from_secs(5), parked)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(r.status, 503, "{:?}", r.body);
    assert_eq!(r.body["error"]["code"], "NOT_LEADER", "{:?}", r.body);
    assert!(r.body["error"]["leader"].is_null(), "{:?}", r.body);
    let after = driver.call(start("d-1")).await;
    assert_eq!(
        after.body["error"]["code"], "NOT_LEADER",
        "{:?}",
        after.body
    );
}
