//! The SDK over [`InProcessTransport`] against the real API router and
//! driver (SQLite in a temp dir), no sockets: deploy, start, a worker runs
//! the task, the execution completes; refusals come back typed.

#![allow(clippy::unwrap_used)]

mod cli_support;

use std::sync::Arc;
use std::time::Duration;

use cli_support::PLAIN;
use orbit_io_tokio::driver::{Driver, Options};
use orbit_io_tokio::storage::{SqliteOptions, SqliteStore};
use orbit_sdk::{
    Backoff, BoxFuture, Client, HttpRequest, HttpResponse, SourceFile, StartOptions, Status, Task,
    Transport, TransportError, Worker,
};
use orbit_server::api::{app, AppState};
use orbit_server::sdk::{logs, InProcessTransport};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_and_worker_in_process() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}/orbit.db", dir.path().display());
    let store = SqliteStore::open(&SqliteOptions::new(url)).await.unwrap();
    let driver = Driver::start(Arc::new(store), Options::default())
        .await
        .unwrap();
    let transport: Arc<dyn Transport> =
        Arc::new(InProcessTransport::new(app(AppState::new(driver.clone()))));
    let client = Client::with_transport(Arc::clone(&transport));

    let deployed = client
        .deploy(&[SourceFile {
            filename: "plain.orbit".into(),
            source: PLAIN.into(),
        }])
        .await
        .unwrap();
    assert!(deployed
        .workflows
        .iter()
        .any(|w| w.name == "Plain" && w.created));

    let worker = Worker::builder("in-process")
        .poll_wait(Duration::from_millis(500))
        .handler("demo.work", |task: Task| async move {
            Ok(json!({ "doubled": task.input["n"].as_i64().unwrap() * 2 }))
        })
        .build(Arc::clone(&transport));
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(async move {
        worker
            .run(async move {
                let _ = stop_rx.await;
            })
            .await
    });

    let mut start = StartOptions::new("Plain", json!({"n": 5}));
    start.execution_id = Some("ip-1".into());
    let started = client.start(start).await.unwrap();
    assert!(started.created);
    let done = client.wait("ip-1", Duration::from_secs(10)).await.unwrap();
    assert_eq!(done.status, Status::Completed);
    assert_eq!(done.output, json!({"doubled": 10}));
    // Start and wait in one request: the answer carries the finished
    // execution; the start names its own id (no idempotency key).
    let ran = client
        .start_and_wait(
            StartOptions::new("Plain", json!({"n": 6})),
            Duration::from_secs(10),
        )
        .await
        .unwrap();
    assert!(ran.created);
    let execution = ran
        .execution
        .expect("a start that waited carries the execution");
    assert_eq!(execution.execution_id, ran.execution_id);
    assert_eq!(execution.status, Status::Completed);
    assert_eq!(execution.output, json!({"doubled": 12}));
    let mut keyed = StartOptions::new("Plain", json!({"n": 6}));
    keyed.idempotency_key = Some("k-1".into());
    let refused = client
        .start_and_wait(keyed, Duration::from_secs(1))
        .await
        .unwrap_err();
    assert!(
        matches!(refused, orbit_sdk::Error::InvalidArgument(_)),
        "{refused:?}"
    );
    let logs = logs(&client, "ip-1").await.unwrap();
    assert!(
        logs.contains("#4 StepDispatched step=work attempt=1 worker_id=in-process"),
        "{logs}"
    );

    let err = client
        .start(StartOptions::new("Plain", json!({"n": "five"})))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some("INPUT_CONTRACT_VIOLATION"));
    assert_eq!(err.status(), Some(400));
    let err = client.get("nope").await.unwrap_err();
    assert_eq!(err.code(), Some("UNKNOWN_EXECUTION"));

    stop_tx.send(()).unwrap();
    running.await.unwrap().unwrap();
    driver.shutdown().await;
}

/// Forwards every request but loses the first answer of each creating call,
/// as a network that drops a response after the server acted.
struct LoseFirstAnswer {
    inner: InProcessTransport,
    lost: std::sync::Mutex<std::collections::BTreeSet<String>>,
}

impl Transport for LoseFirstAnswer {
    fn send(&self, request: HttpRequest) -> BoxFuture<'_, Result<HttpResponse, TransportError>> {
        Box::pin(async move {
            let key = request.header("idempotency-key").map(str::to_string);
            let answer = self.inner.send(request).await?;
            if let Some(key) = key {
                if self.lost.lock().unwrap().insert(key) {
                    return Err(TransportError::Io("connection reset (simulated)".into()));
                }
            }
            Ok(answer)
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_answer_is_recovered_by_the_retry_with_the_same_key() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}/orbit.db", dir.path().display());
    let store = SqliteStore::open(&SqliteOptions::new(url)).await.unwrap();
    let driver = Driver::start(Arc::new(store), Options::default())
        .await
        .unwrap();
    let transport = Arc::new(LoseFirstAnswer {
        inner: InProcessTransport::new(app(AppState::new(driver.clone()))),
        lost: Default::default(),
    });
    let client = Client::with_transport(transport).with_retries(
        3,
        Backoff {
            initial: Duration::from_millis(5),
            factor: 2.0,
            max: Duration::from_millis(20),
        },
    );
    client
        .deploy(&[SourceFile {
            filename: "plain.orbit".into(),
            source: PLAIN.into(),
        }])
        .await
        .unwrap();
    // No execution id: only the key prevents a second execution.
    let started = client
        .start(StartOptions::new("Gate", json!({"n": 1})))
        .await
        .unwrap();
    assert!(started.created);
    let page = client.list(&Default::default()).await.unwrap();
    assert_eq!(
        page.executions.len(),
        1,
        "the retry replayed, not started again"
    );
    assert_eq!(page.executions[0].execution_id, started.execution_id);

    let ack = client
        .signal(&started.execution_id, "approve", json!("yes"), None)
        .await
        .unwrap();
    assert!(ack.seq.is_some());
    let done = client
        .wait(&started.execution_id, Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(done.status, Status::Completed);
    let logs = logs(&client, &started.execution_id).await.unwrap();
    assert_eq!(logs.matches("SignalReceived").count(), 1, "{logs}");
    driver.shutdown().await;
}
