//! Shared helpers of the idempotency, auth and hardening tests: an in-process
//! server on a temporary SQLite file behind a store wrapper that can slow
//! commits down or fail idempotency reads, and requests with headers.
#![allow(clippy::unwrap_used, clippy::expect_used, dead_code)]

use async_trait::async_trait;
use axum::body::Body;
use axum::http::{HeaderMap, Method, Request, StatusCode};
use axum::Router;
use http_body_util::BodyExt;
use orbit_io_tokio::driver::{Driver, Options};
use orbit_io_tokio::storage::{
    DefinitionRecord, ExecutionRow, IdempotencyRecord, ListFilter, QueueOp, SqliteOptions,
    SqliteStore, Storage, StorageError, StoredExecution, Transaction,
};
use orbit_server::api::{self, AppState};
use serde_json::Value;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tower::ServiceExt;

/// A workflow with one task step, and one that requires a key.
pub const SOURCE: &str = r#"
task "demo.work" version "1.0.0" {
    input  { n: Int }
    output { doubled: Int }
}

task "payments.charge" version "1.0.0" {
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

workflow Pay version "1.0.0" {
    requires_idempotency_key: true
    input { n: Int }

    step charge {
        worker "payments.charge"
        with { n: input.n }
    }

    output { doubled: charge.doubled }
}
"#;

/// SQLite with knobs: commits can be slowed down, idempotency reads failed.
pub struct FlakyStore {
    inner: SqliteStore,
    /// Extra delay before every commit, in ms.
    pub commit_delay_ms: AtomicU64,
    /// When set, `idempotency` reads fail.
    pub fail_idempotency_reads: AtomicBool,
    /// When set, commits fail (`Unavailable`: nothing applied).
    pub fail_commits: AtomicBool,
}

#[async_trait]
impl Storage for FlakyStore {
    async fn commit(&self, tx: &Transaction) -> Result<(), StorageError> {
        let delay = self.commit_delay_ms.load(Ordering::SeqCst);
        if delay > 0 {
            tokio::time::sleep(Duration::from_millis(delay)).await;
        }
        if self.fail_commits.load(Ordering::SeqCst) {
            return Err(StorageError::Unavailable("injected commit failure".into()));
        }
        self.inner.commit(tx).await
    }
    async fn load_definitions(&self) -> Result<Vec<DefinitionRecord>, StorageError> {
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
    async fn history(
        &self,
        id: &str,
        after_seq: u64,
        limit: u32,
    ) -> Result<Vec<orbit_core::history::Event>, StorageError> {
        self.inner.history(id, after_seq, limit).await
    }
    async fn list_executions(
        &self,
        filter: &ListFilter,
    ) -> Result<Vec<ExecutionRow>, StorageError> {
        self.inner.list_executions(filter).await
    }
    async fn idempotency(
        &self,
        scope: &str,
        key: &str,
        now: u64,
    ) -> Result<Option<IdempotencyRecord>, StorageError> {
        if self.fail_idempotency_reads.load(Ordering::SeqCst) {
            return Err(StorageError::Unavailable("injected read failure".into()));
        }
        self.inner.idempotency(scope, key, now).await
    }
    async fn queue(&self) -> Result<Vec<QueueOp>, StorageError> {
        self.inner.queue().await
    }
    async fn ping(&self) -> Result<(), StorageError> {
        self.inner.ping().await
    }
    async fn purge_idempotency(&self, now: u64) -> Result<u64, StorageError> {
        self.inner.purge_idempotency(now).await
    }
}

/// One answer.
#[derive(Debug)]
pub struct Reply {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub bytes: Vec<u8>,
    pub json: Value,
}

impl Reply {
    /// The error code, if any.
    pub fn code(&self) -> &str {
        self.json["error"]["code"].as_str().unwrap_or("")
    }

    /// Whether `Idempotent-Replayed: true` is set.
    pub fn replayed(&self) -> bool {
        self.headers
            .get("idempotent-replayed")
            .is_some_and(|v| v == "true")
    }
}

/// A running in-process server.
pub struct Harness {
    pub router: Router,
    pub driver: Driver,
    pub store: Arc<FlakyStore>,
    pub dir: tempfile::TempDir,
}

impl Harness {
    /// A fresh server with `options` and `engine` options.
    pub async fn start_with(options: api::Options, driver_options: Options) -> Harness {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("orbit.db").display());
        let inner = SqliteStore::open(&SqliteOptions::new(url)).await.unwrap();
        let store = Arc::new(FlakyStore {
            inner,
            commit_delay_ms: AtomicU64::new(0),
            fail_idempotency_reads: AtomicBool::new(false),
            fail_commits: AtomicBool::new(false),
        });
        let driver = Driver::start(store.clone(), driver_options).await.unwrap();
        let router = api::app_with(AppState::new(driver.clone()), options);
        Harness {
            router,
            driver,
            store,
            dir,
        }
    }

    /// A fresh server without auth.
    pub async fn start() -> Harness {
        Harness::start_with(api::Options::default(), Options::default()).await
    }

    /// Sends `body` with `headers`.
    pub async fn send(
        &self,
        method: Method,
        uri: &str,
        headers: &[(&str, &str)],
        body: &str,
    ) -> Reply {
        self.send_bytes(method, uri, headers, body.as_bytes().to_vec())
            .await
    }

    /// Sends raw `body` bytes with `headers`.
    pub async fn send_bytes(
        &self,
        method: Method,
        uri: &str,
        headers: &[(&str, &str)],
        body: Vec<u8>,
    ) -> Reply {
        let mut request = Request::builder()
            .method(method)
            .uri(uri)
            .header("content-type", "application/json");
        for (k, v) in headers {
            request = request.header(*k, *v);
        }
        let request = request.body(Body::from(body)).unwrap();
        let response = self.router.clone().oneshot(request).await.unwrap();
        let status = response.status();
        let headers = response.headers().clone();
        let bytes = response
            .into_body()
            .collect()
            .await
            .unwrap()
            .to_bytes()
            .to_vec();
        let json = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        Reply {
            status,
            headers,
            bytes,
            json,
        }
    }

    /// POST with an optional `Idempotency-Key`.
    pub async fn post(&self, uri: &str, key: Option<&str>, body: &str) -> Reply {
        match key {
            Some(k) => {
                self.send(Method::POST, uri, &[("idempotency-key", k)], body)
                    .await
            }
            None => self.send(Method::POST, uri, &[], body).await,
        }
    }

    /// Deploys [`SOURCE`] (no key), asserting 200.
    pub async fn deploy(&self) {
        let body = serde_json::json!({"source": SOURCE, "filename": "t.orbit"}).to_string();
        let r = self.post("/v1/definitions", None, &body).await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.json);
    }

    /// How many executions exist.
    pub async fn count(&self) -> usize {
        let r = self
            .send(Method::GET, "/v1/executions?limit=1000", &[], "")
            .await;
        r.json["executions"].as_array().unwrap().len()
    }
}
