//! End-to-end crash recovery against the real `orbit` binary: SIGKILL the
//! server while a payment is being charged, restart it on the same SQLite
//! file, and check that nothing committed was lost and the charge is recorded
//! exactly once.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::{json, Value};
mod process_support;

use process_support::{free_port, Log, ServerProcess};
use std::path::Path;
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

/// `orbit server` on the SQLite file `db` at `port`, ready.
async fn start(db: &Path, port: u16, session_timeout: &str) -> ServerProcess {
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let url = format!("sqlite://{}", db.display());
    ServerProcess::spawn_at(
        addr,
        &["--db", &url, "--session-timeout", session_timeout],
        Log::Inherit,
    )
    .ready()
    .await
}

/// A client whose every request ends within 30 s: a request that never
/// gets an answer (a connection lost in a restart) fails and is retried or
/// reported instead of holding the test forever.
fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap()
}

async fn post(base: &str, path: &str, body: Value) -> (u16, Value) {
    let r = client()
        .post(format!("{base}{path}"))
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

async fn get(base: &str, path: &str) -> (u16, Value) {
    let r = client().get(format!("{base}{path}")).send().await.unwrap();
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
    let task = charge_in_flight(&server.url, "order-1").await;
    let token = task["token"].as_str().unwrap().to_owned();

    // The worker is charging; the server dies without any chance to clean up.
    drop(server);

    let server = start(&db, port, "30").await;
    // The dispatch was committed before the task left: it survived.
    let types = history_types(&server.url, "order-1").await;
    assert!(types.contains(&"StepDispatched".to_owned()), "{types:?}");
    let (_, e) = get(&server.url, "/v1/executions/order-1").await;
    assert_eq!(e["status"], "running", "{e}");

    // The worker reports with its old token; it is accepted across the restart.
    let (status, body) = post(
        &server.url,
        &format!("/v1/tasks/{token}/result"),
        json!({"output": {"transaction_id": "tx-1"}}),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(body, json!({"accepted": true}));

    let (status, e) = post(
        &server.url,
        "/v1/executions/order-1/wait?timeout_ms=10000",
        json!(null),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(e["status"], "completed", "{e}");
    assert_eq!(e["output"], json!({"transaction_id": "tx-1"}));
    let types = history_types(&server.url, "order-1").await;
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
        &server.url,
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
    let task = charge_in_flight(&server.url, "order-2").await;
    drop(server);

    // The worker never comes back; a new one registers after the restart.
    let server = start(&db, port, "1s").await;
    let (_, reg) = post(
        &server.url,
        "/v1/workers",
        json!({"worker_id": "payments-2", "task_patterns": ["payments.*"]}),
    )
    .await;
    let session = reg["session_id"].as_str().unwrap().to_owned();
    let deadline = Instant::now() + Duration::from_secs(15);
    let redelivered = loop {
        let (status, polled) = post(
            &server.url,
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
        &server.url,
        &format!(
            "/v1/tasks/{}/result",
            redelivered["token"].as_str().unwrap()
        ),
        json!({"output": {"transaction_id": "tx-2"}}),
    )
    .await;
    assert_eq!(body, json!({"accepted": true}));
    let (_, e) = post(
        &server.url,
        "/v1/executions/order-2/wait?timeout_ms=10000",
        json!(null),
    )
    .await;
    assert_eq!(e["status"], "completed", "{e}");
    let types = history_types(&server.url, "order-2").await;
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
        &server.url,
        "/v1/workers",
        json!({"worker_id": "idle", "task_patterns": ["*"]}),
    )
    .await;
    let session = reg["session_id"].as_str().unwrap().to_owned();
    let base = server.url.clone();
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
    server.terminate();
    let exit = loop {
        if let Some(code) = server.try_wait() {
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

const TWO_STEPS: &str = r#"
task "orders.validate" version "1.0.0" {
    input  { order_id: String }
    output { ok: Bool }
}

task "payments.charge" version "1.0.0" {
    input  { order_id: String, amount: Int }
    output { transaction_id: String }
}

workflow Soak version "1.0.0" {
    input { order_id: String, amount: Int }

    step validate {
        worker "orders.validate"
        with { order_id: input.order_id }
    }

    step charge {
        worker "payments.charge"
        with { order_id: input.order_id, amount: input.amount }
        idempotency_key: "charge-" + input.order_id
        after: [validate]
    }

    output { transaction_id: charge.transaction_id }
}
"#;

/// Sends until the server gives an answer that is not a connection error
/// or a 5xx, as the SDKs do for worker traffic.
async fn post_until_answered(base: &str, path: &str, body: &Value) -> (u16, Value) {
    let client = client();
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        if let Ok(r) = client.post(format!("{base}{path}")).json(body).send().await {
            let status = r.status().as_u16();
            if status < 500 {
                return (status, r.json().await.unwrap_or(Value::Null));
            }
        }
        assert!(Instant::now() < deadline, "no answer to {path}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A wallet that records one charge per idempotency key and answers a
/// repeated key with the recorded transaction.
#[derive(Default)]
struct Wallet {
    charges: std::sync::Mutex<std::collections::BTreeMap<String, String>>,
}

impl Wallet {
    fn charge(&self, key: &str) -> String {
        let mut charges = self.charges.lock().unwrap();
        let next = format!("tx-{}", charges.len() + 1);
        charges.entry(key.to_owned()).or_insert(next).clone()
    }
}

async fn soak_worker(
    base: String,
    name: String,
    wallet: std::sync::Arc<Wallet>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
) {
    use std::sync::atomic::Ordering;
    let mut session: Option<String> = None;
    while !stop.load(Ordering::SeqCst) {
        let Some(sid) = session.clone() else {
            let (status, reg) = post_until_answered(
                &base,
                "/v1/workers",
                &json!({"worker_id": name, "task_patterns": ["orders.*", "payments.*"]}),
            )
            .await;
            assert_eq!(status, 200, "{reg}");
            session = reg["session_id"].as_str().map(str::to_owned);
            continue;
        };
        let (status, polled) = post_until_answered(
            &base,
            &format!("/v1/workers/{sid}/poll"),
            &json!({"max_tasks": 8, "wait_ms": 300}),
        )
        .await;
        if status == 404 {
            session = None;
            continue;
        }
        assert_eq!(status, 200, "{polled}");
        for task in polled["tasks"].as_array().cloned().unwrap_or_default() {
            let output = match task["task_name"].as_str().unwrap() {
                "orders.validate" => json!({"ok": true}),
                _ => {
                    json!({"transaction_id": wallet.charge(task["idempotency_key"].as_str().unwrap())})
                }
            };
            let token = task["token"].as_str().unwrap();
            let (status, answer) = post_until_answered(
                &base,
                &format!("/v1/tasks/{token}/result"),
                &json!({"output": output}),
            )
            .await;
            assert_eq!(status, 200, "{answer}");
        }
    }
}

/// A soak: executions run while the server is SIGKILLed five times at
/// varying moments. Every execution completes, every unit has exactly one
/// `StepSucceeded`, and the wallet charged each order once.
/// `ORBIT_SOAK_EXECUTIONS` sets the size (default 1000).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn soak_with_five_sigkills_completes_every_execution_once() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    let n: usize = std::env::var("ORBIT_SOAK_EXECUTIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000);
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("orbit.db");
    let port = free_port();
    let mut server = start(&db, port, "2s").await;
    let base = server.url.clone();
    let (status, body) = post(
        &base,
        "/v1/definitions",
        json!({"source": TWO_STEPS, "filename": "soak.orbit"}),
    )
    .await;
    assert_eq!(status, 200, "{body}");

    let wallet = Arc::new(Wallet::default());
    let stop = Arc::new(AtomicBool::new(false));
    let workers: Vec<_> = (0..3)
        .map(|i| {
            tokio::spawn(soak_worker(
                base.clone(),
                format!("soak-{i}"),
                wallet.clone(),
                stop.clone(),
            ))
        })
        .collect();
    let starter = {
        let base = base.clone();
        tokio::spawn(async move {
            for i in 0..n {
                let (status, body) = post_until_answered(
                    &base,
                    "/v1/executions",
                    &json!({"workflow": "Soak", "input": {"order_id": format!("o-{i}"), "amount": 100 + i}, "execution_id": format!("soak-{i}")}),
                )
                .await;
                assert!(status == 201 || status == 200, "{body}");
            }
        })
    };

    // Kill at moments spread over the run; the seed is printed for a rerun.
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos() as u64;
    eprintln!("soak seed {seed}");
    let mut x = seed | 1;
    for _ in 0..5 {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let delay = 200 + (x >> 33) % 900;
        tokio::time::sleep(Duration::from_millis(delay)).await;
        drop(server);
        server = start(&db, port, "2s").await;
    }
    starter.await.unwrap();

    let deadline = Instant::now() + Duration::from_secs(180);
    for i in 0..n {
        loop {
            let (status, e) = post_until_answered(
                &base,
                &format!("/v1/executions/soak-{i}/wait?timeout_ms=5000"),
                &json!(null),
            )
            .await;
            assert_eq!(status, 200, "{e}");
            if e["status"] == "completed" {
                let key = format!("charge-o-{i}");
                let recorded = wallet.charges.lock().unwrap().get(&key).cloned();
                assert_eq!(e["output"]["transaction_id"].as_str(), recorded.as_deref());
                break;
            }
            assert_ne!(e["status"], "failed", "{e}");
            assert!(Instant::now() < deadline, "soak-{i} did not complete: {e}");
        }
    }
    stop.store(true, Ordering::SeqCst);
    for w in workers {
        w.await.unwrap();
    }
    for i in 0..n {
        let (status, h) = get(&base, &format!("/v1/executions/soak-{i}/history")).await;
        assert_eq!(status, 200);
        let mut successes = std::collections::BTreeMap::<String, usize>::new();
        for e in h["events"].as_array().unwrap() {
            if e["type"] == "StepSucceeded" {
                *successes
                    .entry(e["step"].as_str().unwrap().to_owned())
                    .or_default() += 1;
            }
        }
        assert_eq!(
            successes.get("validate"),
            Some(&1),
            "soak-{i}: {successes:?}"
        );
        assert_eq!(successes.get("charge"), Some(&1), "soak-{i}: {successes:?}");
    }
    assert_eq!(
        wallet.charges.lock().unwrap().len(),
        n,
        "one charge per order"
    );
    drop(server);
}

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

/// Seed 003's listing: `flaky-1` takes the task and goes silent; after
/// `--session-timeout 5` the attempt is uncertain and redelivered to
/// `flaky-2`; `flaky-1` comes back and its success is accepted, and
/// `flaky-2` finds its own token on the cancel list.
#[tokio::test]
async fn silent_worker_is_redelivered_and_its_late_success_counts() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("orbit.db");
    let server = start(&db, free_port(), "5").await;
    let base = server.url.clone();
    let (status, body) = post(
        &base,
        "/v1/definitions",
        json!({"source": PLAIN, "filename": "plain.orbit"}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let register = |name: &'static str| {
        let base = base.clone();
        async move {
            let (_, reg) = post(
                &base,
                "/v1/workers",
                json!({"worker_id": name, "task_patterns": ["demo.*"]}),
            )
            .await;
            reg["session_id"].as_str().unwrap().to_owned()
        }
    };
    let flaky1 = register("flaky-1").await;
    let flaky2 = register("flaky-2").await;
    let (status, _) = post(
        &base,
        "/v1/executions",
        json!({"workflow": "Plain", "input": {"n": 1}, "execution_id": "u-1"}),
    )
    .await;
    assert_eq!(status, 201);
    let (_, polled) = post(
        &base,
        &format!("/v1/workers/{flaky1}/poll"),
        json!({"max_tasks": 1, "wait_ms": 2000}),
    )
    .await;
    let first = polled["tasks"][0].clone();
    assert_eq!(first["redelivery"], false, "{polled}");

    // flaky-1 is silent; flaky-2 keeps polling and receives the redelivery.
    let started = Instant::now();
    let second = loop {
        let (status, polled) = post(
            &base,
            &format!("/v1/workers/{flaky2}/poll"),
            json!({"max_tasks": 1, "wait_ms": 1000}),
        )
        .await;
        assert_eq!(status, 200, "{polled}");
        if let Some(t) = polled["tasks"].as_array().and_then(|t| t.first()) {
            break t.clone();
        }
        assert!(started.elapsed() < Duration::from_secs(15), "no redelivery");
    };
    assert!(
        started.elapsed() >= Duration::from_secs(4),
        "redelivered too early"
    );
    assert_eq!(second["redelivery"], true);
    assert_eq!(second["attempt"], 1);
    assert_eq!(second["idempotency_key"], "u-1/work");
    assert_eq!(second["input"], json!({"n": 1}));

    // flaky-1 comes back with its original token: the work happened, it counts.
    let (_, body) = post(
        &base,
        &format!("/v1/tasks/{}/result", first["token"].as_str().unwrap()),
        json!({"output": {"doubled": 2}}),
    )
    .await;
    assert_eq!(body, json!({"accepted": true}));
    let second_token = second["token"].as_str().unwrap();
    let (_, hb) = post(
        &base,
        &format!("/v1/workers/{flaky2}/heartbeat"),
        json!({"held": [second_token]}),
    )
    .await;
    assert_eq!(hb["cancel"], json!([second_token]), "{hb}");
    // The execution is finished, so flaky-2's report is not recorded.
    let (_, dup) = post(
        &base,
        &format!("/v1/tasks/{second_token}/result"),
        json!({"output": {"doubled": 2}}),
    )
    .await;
    assert_eq!(
        dup,
        json!({"accepted": false, "reason": "unknown token (execution finished or token invalid)"})
    );

    let (_, h) = get(&base, "/v1/executions/u-1/history").await;
    let lines: Vec<String> = h["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| match e["type"].as_str().unwrap() {
            "StepDispatched" => format!("StepDispatched {}", e["worker_id"].as_str().unwrap()),
            "StepAttemptUncertain" => {
                format!("StepAttemptUncertain {}", e["reason"].as_str().unwrap())
            }
            "StepScheduled" => format!("StepScheduled redelivery={}", e["redelivery"]),
            other => other.to_owned(),
        })
        .collect();
    assert_eq!(
        lines,
        vec![
            "WorkflowCreated",
            "WorkflowStarted",
            "StepScheduled redelivery=false",
            "StepDispatched flaky-1",
            "StepAttemptUncertain worker `flaky-1` stopped responding",
            "StepScheduled redelivery=true",
            "StepDispatched flaky-2",
            "StepSucceeded",
            "WorkflowCompleted",
        ]
    );
}
