//! End-to-end crash recovery against the real `orbit` binary: SIGKILL the
//! server while a payment is being charged, restart it on the same SQLite
//! file, and check that nothing committed was lost and the charge is recorded
//! exactly once.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::{json, Value};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const CHARGE: &str = r#"
task "payments.charge" version "1.0.0" {
    input  { order_id: String, amount: Int }
    output { transaction_id: String }
}

workflow Charge version "1.0.0" {
    input { order_id: String, amount: Int }

    step process_payment {
        worker "payments.charge"
        with { order_id: input.order_id, amount: input.amount }
        idempotency_key: "charge-" + input.order_id
    }

    output { transaction_id: process_payment.transaction_id }
}
"#;

/// A server process; killed with SIGKILL when dropped.
struct Server {
    child: Child,
    base: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

async fn start(db: &Path, port: u16, session_timeout: &str) -> Server {
    let child = Command::new(env!("CARGO_BIN_EXE_orbit"))
        .args([
            "server",
            "--db",
            &format!("sqlite://{}", db.display()),
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--session-timeout",
            session_timeout,
        ])
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn orbit server");
    let server = Server {
        child,
        base: format!("http://127.0.0.1:{port}"),
    };
    let client = reqwest::Client::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(r) = client.get(format!("{}/readyz", server.base)).send().await {
            if r.status().is_success() {
                return server;
            }
        }
        assert!(Instant::now() < deadline, "server did not become ready");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn post(base: &str, path: &str, body: Value) -> (u16, Value) {
    let r = reqwest::Client::new()
        .post(format!("{base}{path}"))
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

async fn get(base: &str, path: &str) -> (u16, Value) {
    let r = reqwest::get(format!("{base}{path}")).await.unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

async fn history_types(base: &str, id: &str) -> Vec<String> {
    let (status, h) = get(base, &format!("/v1/executions/{id}/history")).await;
    assert_eq!(status, 200, "{h}");
    h["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["type"].as_str().unwrap().to_owned())
        .collect()
}

/// Deploys, starts `id`, registers a worker and takes the charge task.
async fn charge_in_flight(base: &str, id: &str) -> Value {
    let (status, body) = post(
        base,
        "/v1/definitions",
        json!({"source": CHARGE, "filename": "charge.orbit"}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = post(
        base,
        "/v1/executions",
        json!({"workflow": "Charge", "input": {"order_id": id, "amount": 1250}, "execution_id": id}),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    let (status, reg) = post(
        base,
        "/v1/workers",
        json!({"worker_id": "payments-1", "task_patterns": ["payments.*"]}),
    )
    .await;
    assert_eq!(status, 200, "{reg}");
    let session = reg["session_id"].as_str().unwrap();
    let (status, polled) = post(
        base,
        &format!("/v1/workers/{session}/poll"),
        json!({"max_tasks": 1, "wait_ms": 5000}),
    )
    .await;
    assert_eq!(status, 200, "{polled}");
    let task = polled["tasks"][0].clone();
    assert_eq!(task["step_id"], "process_payment", "{polled}");
    assert_eq!(task["idempotency_key"], format!("charge-{id}"));
    task
}

#[tokio::test]
async fn test_z_crash_recovery_sigkill_mid_charge_records_one_success() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("orbit.db");
    let port = free_port();
    let server = start(&db, port, "30").await;
    let task = charge_in_flight(&server.base, "order-1").await;
    let token = task["token"].as_str().unwrap().to_owned();

    // The worker is charging; the server dies without any chance to clean up.
    drop(server);

    let server = start(&db, port, "30").await;
    // The dispatch was committed before the task left: it survived.
    let types = history_types(&server.base, "order-1").await;
    assert!(types.contains(&"StepDispatched".to_owned()), "{types:?}");
    let (_, e) = get(&server.base, "/v1/executions/order-1").await;
    assert_eq!(e["status"], "running", "{e}");

    // The worker reports with its old token; it is accepted across the restart.
    let (status, body) = post(
        &server.base,
        &format!("/v1/tasks/{token}/result"),
        json!({"output": {"transaction_id": "tx-1"}}),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(body, json!({"accepted": true}));

    let (status, e) = post(
        &server.base,
        "/v1/executions/order-1/wait?timeout_ms=10000",
        json!(null),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(e["status"], "completed", "{e}");
    assert_eq!(e["output"], json!({"transaction_id": "tx-1"}));
    let types = history_types(&server.base, "order-1").await;
    assert_eq!(
        types.iter().filter(|t| *t == "StepSucceeded").count(),
        1,
        "{types:?}"
    );
    assert_eq!(
        types.iter().filter(|t| *t == "StepDispatched").count(),
        1,
        "{types:?}"
    );

    // A repeat of the same result after completion changes nothing.
    let (_, again) = post(
        &server.base,
        &format!("/v1/tasks/{token}/result"),
        json!({"output": {"transaction_id": "tx-1"}}),
    )
    .await;
    assert_eq!(again["accepted"], false, "{again}");
}

#[tokio::test]
async fn unreported_dispatch_is_redelivered_after_restart_and_one_session_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("orbit.db");
    let port = free_port();
    let server = start(&db, port, "1s").await;
    let task = charge_in_flight(&server.base, "order-2").await;
    drop(server);

    // The worker never comes back; a new one registers after the restart.
    let server = start(&db, port, "1s").await;
    let (_, reg) = post(
        &server.base,
        "/v1/workers",
        json!({"worker_id": "payments-2", "task_patterns": ["payments.*"]}),
    )
    .await;
    let session = reg["session_id"].as_str().unwrap().to_owned();
    let deadline = Instant::now() + Duration::from_secs(15);
    let redelivered = loop {
        let (status, polled) = post(
            &server.base,
            &format!("/v1/workers/{session}/poll"),
            json!({"max_tasks": 1, "wait_ms": 500}),
        )
        .await;
        assert_eq!(status, 200, "{polled}");
        if let Some(t) = polled["tasks"].as_array().and_then(|t| t.first()) {
            break t.clone();
        }
        assert!(Instant::now() < deadline, "no redelivery");
    };
    assert_eq!(redelivered["redelivery"], true);
    assert_eq!(redelivered["attempt"], task["attempt"]);
    assert_eq!(redelivered["idempotency_key"], task["idempotency_key"]);
    assert_ne!(redelivered["token"], task["token"]);
    let (_, body) = post(
        &server.base,
        &format!(
            "/v1/tasks/{}/result",
            redelivered["token"].as_str().unwrap()
        ),
        json!({"output": {"transaction_id": "tx-2"}}),
    )
    .await;
    assert_eq!(body, json!({"accepted": true}));
    let (_, e) = post(
        &server.base,
        "/v1/executions/order-2/wait?timeout_ms=10000",
        json!(null),
    )
    .await;
    assert_eq!(e["status"], "completed", "{e}");
    let types = history_types(&server.base, "order-2").await;
    assert!(
        types.contains(&"StepAttemptUncertain".to_owned()),
        "{types:?}"
    );
    assert_eq!(types.iter().filter(|t| *t == "StepSucceeded").count(), 1);
}

#[tokio::test]
async fn sigterm_answers_parked_polls_and_exits_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("orbit.db");
    let port = free_port();
    let mut server = start(&db, port, "30").await;
    let (_, reg) = post(
        &server.base,
        "/v1/workers",
        json!({"worker_id": "idle", "task_patterns": ["*"]}),
    )
    .await;
    let session = reg["session_id"].as_str().unwrap().to_owned();
    let base = server.base.clone();
    let parked = tokio::spawn(async move {
        reqwest::Client::new()
            .post(format!("{base}/v1/workers/{session}/poll"))
            .json(&json!({"wait_ms": 30000}))
            .send()
            .await
            .map(|r| r.status().as_u16())
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let started = Instant::now();
    let status = Command::new("kill")
        .args(["-TERM", &server.child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let exit = loop {
        if let Some(code) = server.child.try_wait().unwrap() {
            break code;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "server did not stop"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(exit.success(), "{exit:?}");
    // The parked poll was answered (503) or its connection closed; it did
    // not hold the shutdown for its 30 s.
    match parked.await.unwrap() {
        Ok(code) => assert_eq!(code, 503),
        Err(e) => assert!(e.is_connect() || e.is_request() || e.is_body(), "{e}"),
    }
    assert!(started.elapsed() < Duration::from_secs(10));
}
