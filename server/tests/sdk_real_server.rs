//! The SDK against the real `orbit server` binary, across a SIGKILL of the
//! server: the worker keeps retrying its result while the server is down,
//! registers again on `UNKNOWN_SESSION` once it is back, the result is
//! accepted with the old token, and the execution completes with exactly
//! one `StepSucceeded`.

#![allow(clippy::unwrap_used)]

mod cli_support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use cli_support::process_support::{free_addr, Log, ServerProcess};
use cli_support::PLAIN;
use orbit_sdk::{Backoff, Client, SourceFile, StartOptions, Status, Task, Worker};
use serde_json::json;
use std::net::SocketAddr;
use tokio::sync::Notify;

/// `orbit server` on `db` at `addr` (2 s session timeout), not yet ready.
fn spawn_server(db: &str, addr: SocketAddr) -> ServerProcess {
    ServerProcess::spawn_at(addr, &["--db", db, "--session-timeout", "2"], Log::Discard)
}

async fn ready(client: &Client) {
    for _ in 0..400 {
        if client.list(&Default::default()).await.is_ok() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("server did not come up");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_rides_out_a_server_crash() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}/orbit.db", dir.path().display());
    let addr = free_addr();
    let url = format!("http://{addr}");
    let mut server = spawn_server(&db, addr);
    let client = Client::connect(&url).unwrap();
    ready(&client).await;
    client
        .deploy(&[SourceFile {
            filename: "plain.orbit".into(),
            source: PLAIN.into(),
        }])
        .await
        .unwrap();

    let started = Arc::new(Notify::new());
    let release = Arc::new(Notify::new());
    let runs = Arc::new(AtomicUsize::new(0));
    let (s, r, n) = (
        Arc::clone(&started),
        Arc::clone(&release),
        Arc::clone(&runs),
    );
    let worker = Worker::builder("crash-worker")
        .poll_wait(Duration::from_millis(500))
        .heartbeat_interval(Duration::from_millis(200))
        .backoff(Backoff {
            initial: Duration::from_millis(50),
            factor: 2.0,
            max: Duration::from_millis(300),
        })
        .handler("demo.work", move |task: Task| {
            let (s, r, n) = (Arc::clone(&s), Arc::clone(&r), Arc::clone(&n));
            async move {
                n.fetch_add(1, Ordering::SeqCst);
                s.notify_one();
                r.notified().await;
                Ok(json!({ "doubled": task.input["n"].as_i64().unwrap() * 2 }))
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

    let mut options = StartOptions::new("Plain", json!({"n": 21}));
    options.execution_id = Some("crash-1".into());
    client.start(options).await.unwrap();
    started.notified().await;

    // SIGKILL the server while the task runs, finish the task while it is
    // down (the result cannot be delivered), then bring the server back.
    server.kill();
    release.notify_one();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut server = spawn_server(&db, addr);
    ready(&client).await;

    let mut execution = client.get("crash-1").await.unwrap();
    for _ in 0..100 {
        if execution.status.is_terminal() {
            break;
        }
        execution = client
            .wait("crash-1", Duration::from_secs(1))
            .await
            .unwrap();
    }
    assert_eq!(execution.status, Status::Completed, "{execution:?}");
    assert_eq!(execution.output, json!({"doubled": 42}));
    let history = client.history("crash-1", 0).await.unwrap();
    let successes = history
        .events
        .iter()
        .filter(|e| e.kind == "StepSucceeded")
        .count();
    assert_eq!(successes, 1);
    assert_eq!(runs.load(Ordering::SeqCst), 1, "the task ran once");

    stop_tx.send(()).unwrap();
    running.await.unwrap().unwrap();
    server.kill();
}
