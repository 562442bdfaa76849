//! End-to-end tests of the built-in task `orbit.http` against the real
//! `orbit` binary and a local HTTP server on 127.0.0.1: success, a 5xx
//! then success, a timeout after the request was sent (redelivered with the
//! same key), a host outside `--http-allow`, and SIGKILL of `orbit server`
//! while a request is running (the seed's reason in the history).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod cli_support;

use axum::extract::{Path as UrlPath, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use axum::routing::any;
use axum::Router;
use cli_support::process_support::{free_addr, Log, ServerProcess};
use cli_support::{orbit, without_offset};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const CALLS: &str = r#"
workflow Ok version "1.0.0" {
    input { base: String }
    step call {
        worker "orbit.http"
        with { method: "POST", url: input.base + "/ok", body: { n: 1 }, headers: { x_test: "yes" } }
    }
    output { status: call.status, body: call.body }
}

workflow Flaky version "1.0.0" {
    input { base: String }
    step call {
        worker "orbit.http"
        with { method: "GET", url: input.base + "/flaky" }
        retry: { max_attempts: 3, backoff: 100ms, factor: 1.0, max_backoff: 1s }
    }
    output { status: call.status, body: call.body }
}

workflow Slow version "1.0.0" {
    input { base: String }
    step call {
        worker "orbit.http"
        with { method: "POST", url: input.base + "/slow", timeout: 500ms }
    }
    output { status: call.status }
}

workflow Hang version "1.0.0" {
    input { base: String }
    step call {
        worker "orbit.http"
        with { method: "PUT", url: input.base + "/hang", body: "raw", headers: { content_type: "text/plain" } }
        idempotency_key: "hang-" + execution.id
    }
    output { status: call.status }
}

workflow Denied version "1.0.0" {
    input { base: String }
    step call {
        worker "orbit.http"
        with { method: "GET", url: "http://10.255.255.1/x" }
    }
}
"#;

/// What the target server saw: per path, the `Idempotency-Key` of each
/// request in arrival order.
#[derive(Clone, Default)]
struct Seen(Arc<Mutex<BTreeMap<String, Vec<String>>>>);

impl Seen {
    fn keys(&self, path: &str) -> Vec<String> {
        self.0
            .lock()
            .unwrap()
            .get(path)
            .cloned()
            .unwrap_or_default()
    }
}

async fn target(
    State(seen): State<Seen>,
    UrlPath(path): UrlPath<String>,
    headers: HeaderMap,
    body: String,
) -> axum::response::Response {
    let key = headers
        .get("idempotency-key")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    let n = {
        let mut map = seen.0.lock().unwrap();
        let list = map.entry(path.clone()).or_default();
        list.push(key.clone());
        list.len()
    };
    match path.as_str() {
        "ok" => axum::Json(json!({
            "key": key,
            "body": body,
            "x_test": headers.get("x_test").and_then(|v| v.to_str().ok()),
        }))
        .into_response(),
        "flaky" if n == 1 => (StatusCode::SERVICE_UNAVAILABLE, "try later").into_response(),
        "flaky" => "fine now".into_response(),
        "slow" if n == 1 => {
            tokio::time::sleep(Duration::from_secs(5)).await;
            "too late".into_response()
        }
        "slow" => axum::Json(json!({"fast": true})).into_response(),
        "hang" if n == 1 => {
            tokio::time::sleep(Duration::from_secs(3600)).await;
            "never".into_response()
        }
        "hang" => (StatusCode::CREATED, body).into_response(),
        _ => StatusCode::NOT_FOUND.into_response(),
    }
}

async fn start_target() -> (String, Seen) {
    let seen = Seen::default();
    let app = Router::new()
        .route("/{path}", any(target))
        .with_state(seen.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (format!("http://{addr}"), seen)
}

/// `orbit server` on the SQLite file `db`, `orbit.http` allowed to reach
/// `allow`, ready.
async fn start_server(db: &Path, allow: &str) -> ServerProcess {
    start_server_with(db, allow, &[], Log::Inherit).await
}

async fn start_server_with(db: &Path, allow: &str, extra: &[&str], log: Log<'_>) -> ServerProcess {
    let url = format!("sqlite://{}", db.display());
    let mut args = vec![
        "--db",
        url.as_str(),
        "--session-timeout",
        "2",
        "--http-allow",
        allow,
    ];
    args.extend_from_slice(extra);
    ServerProcess::spawn_with(free_addr(), &args, log, &[("RUST_LOG", "info")])
        .ready()
        .await
}

async fn cli(server: &str, args: &[&str]) -> cli_support::Run {
    let server = server.to_string();
    let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        orbit(&server, &args)
    })
    .await
    .unwrap()
}

async fn deploy(server: &ServerProcess, dir: &Path) {
    let file = dir.join("calls.orbit");
    std::fs::write(&file, CALLS).unwrap();
    let r = cli(&server.url, &["deploy", file.to_str().unwrap()]).await;
    assert_eq!(r.code, 0, "{r:?}");
}

async fn run(server: &ServerProcess, workflow: &str, id: &str, base: &str) {
    let input = json!({ "base": base }).to_string();
    let r = cli(
        &server.url,
        &["run", workflow, "--input", &input, "--id", id],
    )
    .await;
    assert_eq!(r.code, 0, "{r:?}");
}

async fn wait(server: &ServerProcess, id: &str) -> Value {
    let client = reqwest::Client::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let r = client
            .post(format!(
                "{}/v1/executions/{id}/wait?timeout_ms=5000",
                server.url
            ))
            .send()
            .await;
        if let Ok(r) = r {
            let v: Value = r.json().await.unwrap_or(Value::Null);
            if matches!(
                v["status"].as_str(),
                Some("completed" | "failed" | "cancelled")
            ) {
                return v;
            }
        }
        assert!(Instant::now() < deadline, "{id} did not finish");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// `orbit logs ID` without offsets.
async fn logs(server: &ServerProcess, id: &str) -> Vec<String> {
    let r = cli(&server.url, &["logs", id]).await;
    assert_eq!(r.code, 0, "{r:?}");
    r.stdout
        .lines()
        .map(|l| without_offset(l).to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_steps_succeed_retry_and_redeliver_with_the_same_key() {
    let dir = tempfile::tempdir().unwrap();
    let (base, seen) = start_target().await;
    let allow = base.trim_start_matches("http://").to_string();
    let server = start_server(&dir.path().join("orbit.db"), &allow).await;
    deploy(&server, dir.path()).await;

    // Success: the key is sent as Idempotency-Key, JSON bodies parse.
    run(&server, "Ok", "ok-1", &base).await;
    let done = wait(&server, "ok-1").await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(done["output"]["status"], 200);
    assert_eq!(done["output"]["body"]["key"], "ok-1/call");
    assert_eq!(done["output"]["body"]["body"], r#"{"n":1}"#);
    assert_eq!(done["output"]["body"]["x_test"], "yes");
    assert_eq!(
        logs(&server, "ok-1").await,
        [
            "#1 WorkflowCreated",
            "#2 WorkflowStarted",
            "#3 StepScheduled step=call attempt=1",
            "#4 StepDispatched step=call attempt=1 worker_id=orbit",
            "#5 StepSucceeded step=call attempt=1",
            "#6 WorkflowCompleted",
        ]
    );

    // 503, then success on the retry, with the same key; a text body.
    run(&server, "Flaky", "flaky-1", &base).await;
    let done = wait(&server, "flaky-1").await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(done["output"]["body"], "fine now");
    assert_eq!(seen.keys("flaky"), ["flaky-1/call", "flaky-1/call"]);
    let lines = logs(&server, "flaky-1").await;
    assert!(
        lines[4].starts_with("#5 StepAttemptFailed step=call attempt=1 code=HTTP_503 retry_at="),
        "{lines:?}"
    );
    assert_eq!(
        lines[6],
        "#7 StepDispatched step=call attempt=2 worker_id=orbit"
    );

    // No answer within 500ms after the request was sent: uncertain, then
    // the same attempt redelivered with the same key.
    run(&server, "Slow", "slow-1", &base).await;
    let done = wait(&server, "slow-1").await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(seen.keys("slow"), ["slow-1/call", "slow-1/call"]);
    assert_eq!(
        logs(&server, "slow-1").await,
        [
            "#1 WorkflowCreated",
            "#2 WorkflowStarted",
            "#3 StepScheduled step=call attempt=1",
            "#4 StepDispatched step=call attempt=1 worker_id=orbit",
            "#5 StepAttemptUncertain step=call attempt=1 reason=orbit.http: no response within 500ms after the request was sent",
            "#6 StepScheduled step=call attempt=1 redelivery=true",
            "#7 StepDispatched step=call attempt=1 worker_id=orbit",
            "#8 StepSucceeded step=call attempt=1",
            "#9 WorkflowCompleted",
        ]
    );

    // A host outside the allow-list: refused without a request, final.
    run(&server, "Denied", "denied-1", &base).await;
    let done = wait(&server, "denied-1").await;
    assert_eq!(done["status"], "failed", "{done}");
    assert_eq!(done["error"]["code"], "HTTP_HOST_NOT_ALLOWED", "{done}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_mid_request_makes_the_attempt_uncertain_with_the_seeds_reason() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("orbit.db");
    let (base, seen) = start_target().await;
    let allow = base.trim_start_matches("http://").to_string();
    let server = start_server(&db, &allow).await;
    deploy(&server, dir.path()).await;
    run(&server, "Hang", "hang-1", &base).await;
    let deadline = Instant::now() + Duration::from_secs(20);
    while seen.keys("hang").is_empty() {
        assert!(Instant::now() < deadline, "the request never arrived");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // SIGKILL while the request is running.
    drop(server);
    let server = start_server(&db, &allow).await;
    let done = wait(&server, "hang-1").await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(done["output"]["status"], 201);
    assert_eq!(seen.keys("hang"), ["hang-hang-1", "hang-hang-1"]);
    assert_eq!(
        logs(&server, "hang-1").await,
        [
            "#1 WorkflowCreated",
            "#2 WorkflowStarted",
            "#3 StepScheduled step=call attempt=1 key=hang-hang-1",
            "#4 StepDispatched step=call attempt=1 worker_id=orbit",
            "#5 StepAttemptUncertain step=call attempt=1 reason=runtime restarted while the built-in task was running",
            "#6 StepScheduled step=call attempt=1 redelivery=true key=hang-hang-1",
            "#7 StepDispatched step=call attempt=1 worker_id=orbit",
            "#8 StepSucceeded step=call attempt=1",
            "#9 WorkflowCompleted",
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_logs_name_the_execution() {
    let dir = tempfile::tempdir().unwrap();
    let (base, _seen) = start_target().await;
    let allow = base.trim_start_matches("http://").to_string();
    let log_path = dir.path().join("server.log");
    let server = start_server_with(
        &dir.path().join("orbit.db"),
        &allow,
        &["--log-format", "json"],
        Log::File(&log_path),
    )
    .await;
    deploy(&server, dir.path()).await;
    run(&server, "Denied", "denied-json", &base).await;
    assert_eq!(wait(&server, "denied-json").await["status"], "failed");
    drop(server);
    let text = std::fs::read_to_string(&log_path).unwrap();
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    assert!(!lines.is_empty());
    let about = lines
        .iter()
        .find(|l| l["fields"]["execution_id"] == "denied-json")
        .unwrap_or_else(|| panic!("no line names the execution:\n{text}"));
    assert_eq!(about["fields"]["code"], "HTTP_HOST_NOT_ALLOWED", "{about}");
    assert!(about["level"].is_string() && about["timestamp"].is_string());
}
