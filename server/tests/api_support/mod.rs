//! Shared helpers of the in-process API tests: a server on a temporary
//! SQLite file, driven through `tower::ServiceExt::oneshot`.
#![allow(clippy::unwrap_used, clippy::expect_used, dead_code)]

use axum::body::Body;
use axum::http::{Method, Request, StatusCode};
use axum::Router;
use http_body_util::BodyExt;
use orbit_io_tokio::driver::{Driver, Options};
use orbit_io_tokio::storage::{SqliteOptions, SqliteStore};
use orbit_server::api::{app, AppState};
use serde_json::{json, Value};
use std::sync::Arc;
use tower::ServiceExt;

/// A workflow with one task step, as in seed 003's listing.
pub const PLAIN: &str = r#"
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

/// A running in-process server.
pub struct Server {
    pub router: Router,
    pub driver: Driver,
    pub dir: tempfile::TempDir,
}

impl Server {
    /// A fresh server with default options.
    pub async fn start() -> Server {
        Server::start_with(Options::default(), orbit_server::api::DEFAULT_MAX_BODY).await
    }

    /// A fresh server with `options` and `max_body`.
    pub async fn start_with(options: Options, max_body: usize) -> Server {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("orbit.db").display());
        let store = SqliteStore::open(&SqliteOptions::new(url)).await.unwrap();
        let driver = Driver::start(Arc::new(store), options).await.unwrap();
        let router = app(AppState {
            driver: driver.clone(),
            max_body,
        });
        Server {
            router,
            driver,
            dir,
        }
    }

    /// Sends a request with a raw body.
    pub async fn raw(&self, method: Method, uri: &str, body: Vec<u8>) -> (StatusCode, Value) {
        let request = Request::builder()
            .method(method)
            .uri(uri)
            .header("content-type", "application/json")
            .body(Body::from(body))
            .unwrap();
        let response = self.router.clone().oneshot(request).await.unwrap();
        let status = response.status();
        let bytes = response.into_body().collect().await.unwrap().to_bytes();
        let value = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes)
                .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()))
        };
        (status, value)
    }

    /// Sends JSON.
    pub async fn call(&self, method: Method, uri: &str, body: Value) -> (StatusCode, Value) {
        let bytes = if body.is_null() {
            Vec::new()
        } else {
            serde_json::to_vec(&body).unwrap()
        };
        self.raw(method, uri, bytes).await
    }

    pub async fn get(&self, uri: &str) -> (StatusCode, Value) {
        self.call(Method::GET, uri, Value::Null).await
    }

    pub async fn post(&self, uri: &str, body: Value) -> (StatusCode, Value) {
        self.call(Method::POST, uri, body).await
    }

    /// Deploys `source`, asserting 200.
    pub async fn deploy(&self, source: &str) -> Value {
        let (status, body) = self
            .post(
                "/v1/definitions",
                json!({"source": source, "filename": "test.orbit"}),
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{body}");
        body
    }

    /// Starts `Plain` with id `id`, asserting 201.
    pub async fn start_plain(&self, id: &str) {
        let (status, body) = self
            .post(
                "/v1/executions",
                json!({"workflow": "Plain", "input": {"n": 21}, "execution_id": id}),
            )
            .await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
    }

    /// Registers a worker for `patterns`; returns its session id.
    pub async fn register(&self, worker_id: &str, patterns: &[&str]) -> String {
        let (status, body) = self
            .post(
                "/v1/workers",
                json!({"worker_id": worker_id, "task_patterns": patterns}),
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{body}");
        body["session_id"].as_str().unwrap().to_owned()
    }

    /// Polls once with `wait_ms`; returns the tasks.
    pub async fn poll(&self, session: &str, wait_ms: u64) -> Vec<Value> {
        let (status, body) = self
            .post(
                &format!("/v1/workers/{session}/poll"),
                json!({"max_tasks": 10, "wait_ms": wait_ms}),
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{body}");
        body["tasks"].as_array().unwrap().clone()
    }

    /// The event types of an execution's history.
    pub async fn types(&self, id: &str) -> Vec<String> {
        let (status, body) = self.get(&format!("/v1/executions/{id}/history")).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        body["events"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["type"].as_str().unwrap().to_owned())
            .collect()
    }
}

/// The error code of an error body.
pub fn code(body: &Value) -> &str {
    body["error"]["code"].as_str().unwrap_or("<none>")
}
