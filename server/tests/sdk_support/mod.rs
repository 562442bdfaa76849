//! A scripted fake ORBIT server for SDK tests: an axum app on 127.0.0.1:0
//! that records every request and answers what the test's closure says.

#![allow(clippy::unwrap_used, dead_code)]

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::Router;
use serde_json::Value;

/// One request the fake received.
#[derive(Debug, Clone)]
pub struct Req {
    pub method: String,
    /// Path and query.
    pub path: String,
    pub idempotency_key: Option<String>,
    pub authorization: Option<String>,
    pub body: Value,
}

/// What the fake answers.
#[derive(Debug, Clone)]
pub struct Reply {
    pub status: u16,
    pub body: Value,
    pub delay: Duration,
}

impl Reply {
    pub fn ok(body: Value) -> Reply {
        Reply::status(200, body)
    }
    pub fn status(status: u16, body: Value) -> Reply {
        Reply {
            status,
            body,
            delay: Duration::ZERO,
        }
    }
    pub fn error(status: u16, code: &str) -> Reply {
        Reply::status(
            status,
            serde_json::json!({"error": {"code": code, "message": format!("scripted {code}")}}),
        )
    }
    pub fn after(mut self, delay: Duration) -> Reply {
        self.delay = delay;
        self
    }
}

type Script = dyn Fn(&Req, &[Req]) -> Reply + Send + Sync;

/// A running fake server.
pub struct Fake {
    pub addr: SocketAddr,
    pub log: Arc<Mutex<Vec<Req>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Fake {
    /// Starts a fake on a free port. `script(req, earlier)` gets the request
    /// and every earlier request.
    pub async fn start<F>(script: F) -> Fake
    where
        F: Fn(&Req, &[Req]) -> Reply + Send + Sync + 'static,
    {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        Fake::on(listener, script)
    }

    /// Starts a fake on an already bound listener.
    pub fn on<F>(listener: tokio::net::TcpListener, script: F) -> Fake
    where
        F: Fn(&Req, &[Req]) -> Reply + Send + Sync + 'static,
    {
        let addr = listener.local_addr().unwrap();
        let log: Arc<Mutex<Vec<Req>>> = Arc::default();
        let script: Arc<Script> = Arc::new(script);
        let state = (Arc::clone(&log), script);
        let app = Router::new().fallback(
            move |method: Method, uri: Uri, headers: HeaderMap, body: Bytes| {
                let (log, script) = state.clone();
                async move { handle(log, script, method, uri, headers, body).await }
            },
        );
        let task = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        Fake { addr, log, task }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Requests so far.
    pub fn requests(&self) -> Vec<Req> {
        self.log.lock().unwrap().clone()
    }

    /// Requests so far whose path starts with `prefix` and method is `method`.
    pub fn matching(&self, method: &str, prefix: &str) -> Vec<Req> {
        self.requests()
            .into_iter()
            .filter(|r| r.method == method && r.path.starts_with(prefix))
            .collect()
    }

    /// Waits until `cond` holds on the request log (panics after 10 s).
    pub async fn until(&self, what: &str, cond: impl Fn(&[Req]) -> bool) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            if cond(&self.requests()) {
                return;
            }
            if tokio::time::Instant::now() > deadline {
                panic!(
                    "timed out waiting for: {what}\nrequests: {:#?}",
                    self.requests()
                );
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    pub fn stop(self) {
        self.task.abort();
    }
}

async fn handle(
    log: Arc<Mutex<Vec<Req>>>,
    script: Arc<Script>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    };
    let req = Req {
        method: method.as_str().to_string(),
        path: uri
            .path_and_query()
            .map(|p| p.as_str().to_string())
            .unwrap_or_default(),
        idempotency_key: header("idempotency-key"),
        authorization: header("authorization"),
        body: serde_json::from_slice(&body).unwrap_or(Value::Null),
    };
    let reply = {
        let mut log = log.lock().unwrap();
        let reply = script(&req, &log);
        log.push(req);
        reply
    };
    if !reply.delay.is_zero() {
        tokio::time::sleep(reply.delay).await;
    }
    let status = StatusCode::from_u16(reply.status).unwrap();
    (status, axum::Json(reply.body)).into_response()
}

/// A port nothing listens on (bound, then released).
pub async fn dead_port() -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    addr
}
