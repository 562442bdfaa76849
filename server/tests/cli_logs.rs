//! `orbit logs --follow` reads the history as server-sent events: against a
//! fake server whose plain history never grows, the only way to see the
//! final event is the `text/event-stream` answer.

#![allow(clippy::unwrap_used)]

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use axum::http::{header, HeaderMap};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;

async fn history(headers: HeaderMap) -> Response {
    let sse = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains("text/event-stream"));
    if sse {
        let body = concat!(
            ": keep-alive\n\n",
            "id: 2\nevent: StepScheduled\n",
            "data: {\"seq\":2,\"at\":\"2026-01-01T00:00:00.039Z\",\"type\":\"StepScheduled\",\"step\":\"work\",\"attempt\":1,",
            "\"redelivery\":false,\"input\":{},\"idempotency_key\":\"u-1/work\",\"task\":\"demo.work\",\"contract_version\":\"1.0.0\"}\n\n",
            "id: 3\nevent: WorkflowCancelled\n",
            "data: {\"seq\":3,\"at\":\"2026-01-01T00:00:05.150Z\",\"type\":\"WorkflowCancelled\"}\n\n",
        );
        ([(header::CONTENT_TYPE, "text/event-stream")], body).into_response()
    } else {
        let body = r#"{"events":[{"seq":1,"at":"2026-01-01T00:00:00Z","type":"WorkflowStarted"}]}"#;
        ([(header::CONTENT_TYPE, "application/json")], body).into_response()
    }
}

/// Runs `orbit logs u-1 --follow` against the fake server, reached
/// through the `--server` value `server(url)` makes of its URL; returns
/// what it printed.
async fn follow(server: impl FnOnce(&str) -> String) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let app = Router::new().route("/v1/executions/{id}/history", get(history));
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let servers = server(&url);

    let output = tokio::task::spawn_blocking(move || {
        let mut child = Command::new(env!("CARGO_BIN_EXE_orbit"))
            .args(["logs", "u-1", "--follow", "--server", &servers])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while child.try_wait().unwrap().is_none() {
            if Instant::now() > deadline {
                child.kill().unwrap();
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        child.wait_with_output().unwrap()
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

const FOLLOWED: &str =
    "+ 0ms #1 WorkflowStarted\n+ 39ms #2 StepScheduled step=work attempt=1\n+ 5.2s #3 WorkflowCancelled\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn follow_reads_the_event_stream() {
    assert_eq!(follow(str::to_owned).await, FOLLOWED);
}

/// With several servers (a cluster), the stream is read from the one that
/// answers, not from the `--server` value as a whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn follow_streams_from_the_server_of_a_list_that_answers() {
    // Nothing listens on the first: a node that is down.
    let down = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let gone = format!("http://{}", down.local_addr().unwrap());
    drop(down);
    assert_eq!(follow(|url| format!("{gone},{url}")).await, FOLLOWED);
}
