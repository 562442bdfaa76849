//! The server on PostgreSQL, end to end (when `ORBIT_TEST_POSTGRES` is set;
//! each test in a scratch database of its own):
//! - the real `orbit server --db postgres://...` runs workflows driven by
//!   `orbit bench --server`, survives SIGKILL with nothing acknowledged lost
//!   and each step succeeding exactly once;
//! - a database outage while the server runs: requests fail with
//!   `503 STORAGE_ERROR`, nothing is half-applied, and once the database is
//!   back the same server carries on and every acknowledged execution
//!   completes.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../../io-tokio/tests/postgres_support/mod.rs"]
mod postgres_support;
mod process_support;

use orbit_io_tokio::driver::{Driver, Options};
use orbit_io_tokio::storage::{PostgresOptions, PostgresStore};
use orbit_server::api::{app, AppState};
use orbit_server::bench::{self, workload};
use postgres_support::ScratchDatabase;
use process_support::{free_port, Log, ServerProcess};
use serde_json::{json, Value};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// `orbit server` on `db` at `port` (2 s session timeout), ready.
async fn spawn_server(db: &str, port: u16) -> ServerProcess {
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    ServerProcess::spawn_at(addr, &["--db", db, "--session-timeout", "2"], Log::Inherit)
        .ready()
        .await
}

async fn send(method: reqwest::Method, url: String, body: Option<Value>) -> (u16, Value) {
    let mut request = reqwest::Client::new().request(method, url);
    if let Some(b) = body {
        request = request.json(&b);
    }
    let r = request.send().await.unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

async fn post(base: &str, path: &str, body: Value) -> (u16, Value) {
    send(reqwest::Method::POST, format!("{base}{path}"), Some(body)).await
}

async fn get(base: &str, path: &str) -> (u16, Value) {
    send(reqwest::Method::GET, format!("{base}{path}"), None).await
}

async fn event_types(base: &str, id: &str) -> Vec<String> {
    let (status, h) = get(base, &format!("/v1/executions/{id}/history")).await;
    assert_eq!(status, 200, "{h}");
    h["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["type"].as_str().unwrap().to_owned())
        .collect()
}

async fn wait_completed(base: &str, id: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (status, body) = post(
            base,
            &format!("/v1/executions/{id}/wait?timeout_ms=2000"),
            json!({}),
        )
        .await;
        if status == 200 && body["status"] == "completed" {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{id} did not complete: {status} {body}"
        );
    }
}

async fn register(base: &str) -> String {
    let (status, reg) = post(
        base,
        "/v1/workers",
        json!({"worker_id": "pg-test", "task_patterns": ["bench.*"]}),
    )
    .await;
    assert_eq!(status, 200, "{reg}");
    reg["session_id"].as_str().unwrap().to_owned()
}

async fn poll(base: &str, session: &str, max: u32) -> Vec<Value> {
    let (status, polled) = post(
        base,
        &format!("/v1/workers/{session}/poll"),
        json!({"max_tasks": max, "wait_ms": 2000}),
    )
    .await;
    assert_eq!(status, 200, "{polled}");
    polled["tasks"].as_array().cloned().unwrap_or_default()
}

fn output(task: &Value) -> Value {
    json!({"output": {"n": task["input"]["n"].as_i64().unwrap() + 1}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn orbit_server_on_postgres_runs_the_bench_and_survives_sigkill() {
    let Some(db) = ScratchDatabase::create("server").await else {
        return;
    };
    let port = free_port();
    let server = spawn_server(db.url(), port).await;

    // A whole benchmark through the real binary's API.
    let config = bench::Config {
        server: Some(server.url.clone()),
        executions: 60,
        concurrency: 12,
        steps: 3,
        workers: 2,
        worker_concurrency: 8,
        ..bench::Config::default()
    };
    let report = bench::run(&config, Options::default()).await.unwrap();
    assert_eq!((report.completed, report.errors), (60, 0), "{report:?}");
    assert!(report.steps_per_s > 0.0);

    // Executions in flight, one step taken by a worker, then SIGKILL.
    let base = server.url.clone();
    let ids: Vec<String> = (0..5).map(|i| format!("kill-{i}")).collect();
    for id in &ids {
        let (status, body) = post(
            &base,
            "/v1/executions",
            json!({"workflow": workload::workflow_name(3), "input": {"n": 0}, "execution_id": id}),
        )
        .await;
        assert_eq!(status, 201, "{body}");
    }
    let session = register(&base).await;
    let mut first = Vec::new();
    while first.len() < ids.len() {
        first.extend(poll(&base, &session, 10).await);
    }
    // Half the results are acknowledged before the crash.
    let (acked, unacked) = first.split_at(2);
    for task in acked {
        let token = task["token"].as_str().unwrap();
        let (status, body) = post(&base, &format!("/v1/tasks/{token}/result"), output(task)).await;
        assert_eq!((status, body["accepted"].as_bool()), (200, Some(true)));
    }
    drop(server);

    let server = spawn_server(db.url(), port).await;
    let base = server.url.clone();
    // A result is addressed by token: the old ones are still good.
    for task in unacked {
        let token = task["token"].as_str().unwrap();
        let (status, body) = post(&base, &format!("/v1/tasks/{token}/result"), output(task)).await;
        assert_eq!(status, 200, "{body}");
    }
    let session = register(&base).await;
    let worker_base = base.clone();
    let worker = tokio::spawn(async move {
        loop {
            for task in poll(&worker_base, &session, 10).await {
                let token = task["token"].as_str().unwrap();
                post(
                    &worker_base,
                    &format!("/v1/tasks/{token}/result"),
                    output(&task),
                )
                .await;
            }
        }
    });
    for id in &ids {
        wait_completed(&base, id).await;
        let types = event_types(&base, id).await;
        let successes = types.iter().filter(|t| *t == "StepSucceeded").count();
        assert_eq!(successes, 3, "{id}: {types:?}");
        assert_eq!(
            types.iter().filter(|t| *t == "WorkflowCompleted").count(),
            1
        );
    }
    worker.abort();
    let (status, body) = get(&base, "/v1/executions/kill-0").await;
    assert_eq!(status, 200);
    assert_eq!(body["output"], json!({"n": 3}), "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_outage_fails_requests_cleanly_and_the_server_carries_on() {
    let Some(db) = ScratchDatabase::create("outage").await else {
        return;
    };
    let options = PostgresOptions {
        acquire_timeout: Duration::from_millis(800),
        ..PostgresOptions::new(db.url())
    };
    let store = PostgresStore::open(&options).await.unwrap();
    let driver = Driver::start(Arc::new(store), Options::default())
        .await
        .unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let serving = tokio::spawn(async move {
        axum::serve(listener, app(AppState::new(driver)))
            .await
            .unwrap();
    });

    let (status, body) = post(
        &base,
        "/v1/definitions",
        json!({"source": workload::source(2), "filename": "bench.orbit"}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let workflow = workload::workflow_name(2);
    let start = |id: String| {
        let (base, workflow) = (base.clone(), workflow.clone());
        async move {
            post(
                &base,
                "/v1/executions",
                json!({"workflow": workflow, "input": {"n": 0}, "execution_id": id}),
            )
            .await
        }
    };
    let mut acknowledged = Vec::new();
    for i in 0..6 {
        let id = format!("before-{i}");
        let (status, body) = start(id.clone()).await;
        assert_eq!(status, 201, "{body}");
        acknowledged.push(id);
    }
    let session = register(&base).await;
    let mut tasks = Vec::new();
    while tasks.len() < 6 {
        tasks.extend(poll(&base, &session, 10).await);
    }

    // The outage: the database refuses connections and drops the open ones.
    db.block_connections().await;
    let (status, body) = start("during-0".into()).await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["error"]["code"], "STORAGE_ERROR", "{body}");
    let task = &tasks[0];
    let token = task["token"].as_str().unwrap();
    let (status, body) = post(&base, &format!("/v1/tasks/{token}/result"), output(task)).await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["error"]["code"], "STORAGE_ERROR", "{body}");
    let (status, _) = get(&base, "/readyz").await;
    assert_eq!(status, 503, "readyz while the database is down");

    // The database is back: the same server carries on, no restart.
    db.allow_connections().await;
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (status, _) = get(&base, "/readyz").await;
        if status == 200 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "server did not become ready again"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The refused start left nothing behind; it can be made again.
    let (status, body) = get(&base, "/v1/executions/during-0").await;
    assert_eq!(status, 404, "{body}");
    let (status, body) = start("during-0".into()).await;
    assert_eq!(status, 201, "{body}");
    acknowledged.push("during-0".into());
    // The refused result is delivered again and accepted.
    for task in &tasks {
        let token = task["token"].as_str().unwrap();
        let (status, body) = post(&base, &format!("/v1/tasks/{token}/result"), output(task)).await;
        assert_eq!(
            (status, body["accepted"].as_bool()),
            (200, Some(true)),
            "{body}"
        );
    }
    let worker_base = base.clone();
    let worker = tokio::spawn(async move {
        loop {
            for task in poll(&worker_base, &session, 10).await {
                let token = task["token"].as_str().unwrap();
                post(
                    &worker_base,
                    &format!("/v1/tasks/{token}/result"),
                    output(&task),
                )
                .await;
            }
        }
    });
    for id in &acknowledged {
        wait_completed(&base, id).await;
        let types = event_types(&base, id).await;
        assert_eq!(
            types.iter().filter(|t| *t == "StepSucceeded").count(),
            2,
            "{id}: {types:?}"
        );
    }
    worker.abort();
    serving.abort();
}

#[test]
fn an_unreachable_postgres_url_is_a_clear_start_error() {
    let out = Command::new(env!("CARGO_BIN_EXE_orbit"))
        .args([
            "server",
            "--db",
            "postgres://nobody@127.0.0.1:1/none",
            "--listen",
            &format!("127.0.0.1:{}", free_port()),
        ])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("storage"), "{stderr}");
}

/// `orbit server` on `db`, expected to refuse to start: its stderr.
fn refused_start(db: &str, extra: &[&str]) -> String {
    let listen = format!("127.0.0.1:{}", free_port());
    let out = Command::new(env!("CARGO_BIN_EXE_orbit"))
        .args(["server", "--db", db, "--listen", &listen])
        .args(extra)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    stderr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_server_without_cluster_per_database() {
    let Some(db) = ScratchDatabase::create("claim").await else {
        return;
    };
    let mut first = spawn_server(db.url(), free_port()).await;
    let stderr = refused_start(db.url(), &[]);
    assert!(
        stderr.contains("in use by another orbit server"),
        "{stderr}"
    );
    let stderr = refused_start(db.url(), &["--cluster", "--node-id", "n1"]);
    assert!(stderr.contains("without --cluster"), "{stderr}");
    let stderr = refused_start(
        db.url(),
        &["--cluster", "--cluster-mode", "shared", "--node-id", "n1"],
    );
    assert!(stderr.contains("without --cluster"), "{stderr}");
    // A benchmark's in-process server takes the same claim.
    let out = Command::new(env!("CARGO_BIN_EXE_orbit"))
        .args(["bench", "--db", db.url(), "--executions", "5", "--quiet"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("in use by another orbit server"),
        "{stderr}"
    );
    // A server that died leaves nothing behind: the next one starts.
    first.kill();
    let mut second = spawn_server(db.url(), free_port()).await;
    second.kill();
}
