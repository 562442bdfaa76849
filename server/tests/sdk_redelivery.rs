//! Seed 003's redelivery story end to end, with the real server and the SDK:
//! `flaky-1` receives the task and goes silent; after the session timeout
//! (5 s) the attempt becomes uncertain and is redelivered to `flaky-2` (an
//! SDK worker) with `redelivery: true`, the same attempt and key; `flaky-1`
//! comes back and reports success with its original token, which is
//! accepted; `flaky-2` finds its token on the cancel list and its handler is
//! stopped. The history has the seed's shape, line for line.

#![allow(clippy::unwrap_used)]

mod cli_support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cli_support::process_support::{Log, ServerProcess};
use cli_support::{orbit, without_offset, PLAIN};
use orbit_sdk::{
    Client, HttpRequest, Method, ReqwestTransport, SourceFile, StartOptions, Status, Task,
    Transport, Worker,
};
use serde_json::{json, Value};
use tokio::sync::Notify;

async fn post(t: &ReqwestTransport, path: &str, body: Value) -> Value {
    let mut r = HttpRequest::new(Method::Post, path);
    r.body = Some(serde_json::to_vec(&body).unwrap());
    r.timeout = Some(Duration::from_secs(10));
    let answer = t.send(r).await.unwrap();
    assert!(answer.status < 300, "{path}: {answer:?}");
    serde_json::from_slice(&answer.body).unwrap()
}

struct DropFlag(Arc<AtomicUsize>);

impl Drop for DropFlag {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_seed_redelivery_story() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}/orbit.db", dir.path().display());
    let mut server = ServerProcess::spawn(&["--db", &db, "--session-timeout", "5"], Log::Discard);
    let url = server.url.clone();
    let client = Client::connect(&url).unwrap();
    for _ in 0..400 {
        if client.list(&Default::default()).await.is_ok() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    client
        .deploy(&[SourceFile {
            filename: "plain.orbit".into(),
            source: PLAIN.into(),
        }])
        .await
        .unwrap();
    let mut start = StartOptions::new("Plain", json!({"n": 1}));
    start.execution_id = Some("u-1".into());
    client.start(start).await.unwrap();

    // flaky-1: a bare-protocol worker that takes the task and goes silent.
    let raw = ReqwestTransport::new(&url).unwrap();
    let session = post(
        &raw,
        "/v1/workers",
        json!({"worker_id": "flaky-1", "task_patterns": ["demo.work"]}),
    )
    .await;
    let session = session["session_id"].as_str().unwrap().to_string();
    let polled = post(
        &raw,
        &format!("/v1/workers/{session}/poll"),
        json!({"max_tasks": 1, "wait_ms": 5000}),
    )
    .await;
    let first = polled["tasks"][0].clone();
    assert_eq!(first["redelivery"], false);
    let first_token = first["token"].as_str().unwrap().to_string();

    // flaky-2: an SDK worker whose handler never finishes on its own.
    let received: Arc<Mutex<Option<Task>>> = Arc::default();
    let started = Arc::new(Notify::new());
    let dropped = Arc::new(AtomicUsize::new(0));
    let (rx, st, dr) = (
        Arc::clone(&received),
        Arc::clone(&started),
        Arc::clone(&dropped),
    );
    let worker = Worker::builder("flaky-2")
        .poll_wait(Duration::from_secs(1))
        .heartbeat_interval(Duration::from_millis(200))
        .handler("demo.work", move |task: Task| {
            let (rx, st, flag) = (Arc::clone(&rx), Arc::clone(&st), DropFlag(Arc::clone(&dr)));
            async move {
                let _flag = flag;
                *rx.lock().unwrap() = Some(task);
                st.notify_one();
                tokio::time::sleep(Duration::from_secs(3600)).await;
                Ok(json!({"doubled": 2}))
            }
        })
        .connect(&url)
        .unwrap();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(async move {
        worker
            .run(async move {
                let _ = stop_rx.await;
            })
            .await
    });

    tokio::time::timeout(Duration::from_secs(20), started.notified())
        .await
        .expect("the task was redelivered to flaky-2");
    let task = received.lock().unwrap().clone().unwrap();
    assert!(task.redelivery);
    assert_eq!(task.attempt, 1);
    assert_eq!(task.execution_id, "u-1");
    assert_eq!(task.workflow, "Plain");
    assert_eq!(task.workflow_version, "1.0.0");
    assert_eq!(task.step_id, "work");
    assert_eq!(task.task_name, "demo.work");
    assert_eq!(task.contract_version, "1.0.0");
    assert_eq!(task.input, json!({"n": 1}));
    assert_eq!(task.idempotency_key, "u-1/work");
    assert_ne!(task.token, first_token);

    // flaky-1 comes back with its original token: the work happened, it counts.
    let ack = post(
        &raw,
        &format!("/v1/tasks/{first_token}/result"),
        json!({"output": {"doubled": 2}}),
    )
    .await;
    assert_eq!(ack, json!({"accepted": true}));

    let done = client.wait("u-1", Duration::from_secs(10)).await.unwrap();
    assert_eq!(done.status, Status::Completed);
    // flaky-2's handler is stopped through the cancel list.
    for _ in 0..100 {
        if dropped.load(Ordering::SeqCst) == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        dropped.load(Ordering::SeqCst),
        1,
        "flaky-2's handler was stopped"
    );

    let logs = tokio::task::spawn_blocking({
        let url = url.clone();
        move || orbit(&url, &["logs", "u-1"])
    })
    .await
    .unwrap();
    assert_eq!(logs.code, 0, "{logs:?}");
    let lines: Vec<&str> = logs.stdout.lines().collect();
    let bodies: Vec<&str> = lines.iter().map(|l| without_offset(l)).collect();
    assert_eq!(
        bodies,
        vec![
            "#1 WorkflowCreated",
            "#2 WorkflowStarted",
            "#3 StepScheduled step=work attempt=1",
            "#4 StepDispatched step=work attempt=1 worker_id=flaky-1",
            "#5 StepAttemptUncertain step=work attempt=1 reason=worker `flaky-1` stopped responding",
            "#6 StepScheduled step=work attempt=1 redelivery=true",
            "#7 StepDispatched step=work attempt=1 worker_id=flaky-2",
            "#8 StepSucceeded step=work attempt=1",
            "#9 WorkflowCompleted",
        ],
        "{}",
        logs.stdout
    );
    // The uncertainty comes one session timeout (5 s) after the dispatch.
    let offset = lines[4].split(' ').nth(1).unwrap();
    let secs: f64 = offset.strip_suffix('s').unwrap().parse().unwrap();
    assert!((5.0..10.0).contains(&secs), "{offset}");

    stop_tx.send(()).unwrap();
    running.await.unwrap().unwrap();
    server.kill();
}
