//! Executions: start, get, list, history (JSON and SSE), signal, cancel, wait.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod api_support;

use api_support::{code, Server, PLAIN};
use axum::body::Body;
use axum::http::{Request, StatusCode};
use futures_util::StreamExt;
use serde_json::json;
use std::time::Duration;
use tower::ServiceExt;

#[tokio::test]
async fn start_creates_then_returns_the_existing_execution() {
    let s = Server::start().await;
    s.deploy(PLAIN).await;
    let body = json!({"workflow": "Plain", "input": {"n": 1}, "execution_id": "order-1"});
    let (status, first) = s.post("/v1/executions", body.clone()).await;
    assert_eq!(status, StatusCode::CREATED, "{first}");
    assert_eq!(first, json!({"execution_id": "order-1", "created": true}));
    let (status, again) = s.post("/v1/executions", body).await;
    assert_eq!(status, StatusCode::OK, "{again}");
    assert_eq!(again["created"], false);
}

#[tokio::test]
async fn start_without_id_generates_a_uuid() {
    let s = Server::start().await;
    s.deploy(PLAIN).await;
    let (status, body) = s
        .post(
            "/v1/executions",
            json!({"workflow": "Plain", "input": {"n": 1}}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let id = body["execution_id"].as_str().unwrap();
    assert!(uuid::Uuid::parse_str(id).is_ok(), "{id}");
}

#[tokio::test]
async fn start_errors_have_their_codes() {
    let s = Server::start().await;
    s.deploy(PLAIN).await;
    let (status, body) = s
        .post("/v1/executions", json!({"workflow": "Nope", "input": {}}))
        .await;
    assert_eq!(
        (status, code(&body)),
        (StatusCode::NOT_FOUND, "UNKNOWN_WORKFLOW")
    );
    let (status, body) = s
        .post(
            "/v1/executions",
            json!({"workflow": "Plain", "input": {"n": "one"}}),
        )
        .await;
    assert_eq!(
        (status, code(&body)),
        (StatusCode::BAD_REQUEST, "INPUT_CONTRACT_VIOLATION")
    );
    let (status, body) = s
        .post(
            "/v1/executions",
            json!({"workflow": "Plain", "input": {"n": 1}, "execution_id": "has space"}),
        )
        .await;
    assert_eq!(
        (status, code(&body)),
        (StatusCode::BAD_REQUEST, "INVALID_EXECUTION_ID")
    );
    s.start_plain("taken").await;
    let (status, body) = s
        .post(
            "/v1/executions",
            json!({"workflow": "Plain", "version": "2.0.0", "input": {"n": 1}, "execution_id": "taken"}),
        )
        .await;
    assert!(status.is_client_error(), "{status} {body}");
    let (status, body) = s.get("/v1/executions/never-started").await;
    assert_eq!(
        (status, code(&body)),
        (StatusCode::NOT_FOUND, "UNKNOWN_EXECUTION")
    );
}

#[tokio::test]
async fn get_shows_status_workflow_and_input() {
    let s = Server::start().await;
    s.deploy(PLAIN).await;
    s.start_plain("e-1").await;
    let (status, e) = s.get("/v1/executions/e-1").await;
    assert_eq!(status, StatusCode::OK, "{e}");
    assert_eq!(e["execution_id"], "e-1");
    assert_eq!(e["status"], "running");
    assert_eq!(e["workflow"], "Plain");
    assert_eq!(e["version"], "1.0.0");
    assert_eq!(e["input"], json!({"n": 21}));
}

#[tokio::test]
async fn list_is_newest_first_filtered_and_paged() {
    let s = Server::start().await;
    s.deploy(PLAIN).await;
    for i in 0..3 {
        s.start_plain(&format!("l-{i}")).await;
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let (status, page) = s
        .get("/v1/executions?limit=2&workflow=Plain&status=running")
        .await;
    assert_eq!(status, StatusCode::OK, "{page}");
    let ids: Vec<&str> = page["executions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["execution_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, vec!["l-2", "l-1"]);
    let cursor = page["next_cursor"].as_str().unwrap();
    let (_, page2) = s
        .get(&format!("/v1/executions?limit=2&cursor={cursor}"))
        .await;
    assert_eq!(page2["executions"][0]["execution_id"], "l-0", "{page2}");
    let (_, none) = s.get("/v1/executions?status=completed").await;
    assert!(none["executions"].as_array().unwrap().is_empty());
}

#[tokio::test]
async fn history_events_have_seq_rfc3339_time_and_type() {
    let s = Server::start().await;
    s.deploy(PLAIN).await;
    s.start_plain("h-1").await;
    let (status, h) = s.get("/v1/executions/h-1/history").await;
    assert_eq!(status, StatusCode::OK, "{h}");
    let events = h["events"].as_array().unwrap();
    assert_eq!(events[0]["seq"], 1);
    assert_eq!(events[0]["type"], "WorkflowCreated");
    assert_eq!(events[0]["workflow"], "Plain");
    let at = events[0]["at"].as_str().unwrap();
    assert!(
        time::OffsetDateTime::parse(at, &time::format_description::well_known::Rfc3339).is_ok(),
        "{at}"
    );
    let (_, later) = s.get("/v1/executions/h-1/history?after_seq=1").await;
    assert_eq!(later["events"][0]["seq"], 2, "{later}");
}

#[tokio::test]
async fn history_streams_as_server_sent_events_until_terminal() {
    let s = Server::start().await;
    s.deploy(PLAIN).await;
    s.start_plain("sse-1").await;
    let response = s
        .router
        .clone()
        .oneshot(
            Request::get("/v1/executions/sse-1/history")
                .header("accept", "text/event-stream")
                .body(Body::empty())
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert!(response.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/event-stream"));
    let mut stream = response.into_body().into_data_stream();
    // Cancel so the execution ends while we follow it.
    let (status, body) = s
        .post("/v1/executions/sse-1/cancel", json!({"reason": "test"}))
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let mut text = String::new();
    let read = async {
        while let Some(chunk) = stream.next().await {
            text.push_str(&String::from_utf8_lossy(&chunk.unwrap()));
        }
    };
    tokio::time::timeout(Duration::from_secs(10), read)
        .await
        .expect("stream did not end after the terminal event");
    assert!(text.contains("event: WorkflowCreated"), "{text}");
    assert!(text.contains("event: WorkflowCancelRequested"), "{text}");
    assert!(text.contains("event: WorkflowCancelled"), "{text}");
    assert!(text.contains("id: 1\n"), "{text}");
}

#[tokio::test]
async fn history_stream_resumes_after_last_event_id() {
    let s = Server::start().await;
    s.deploy(PLAIN).await;
    s.start_plain("sse-2").await;
    s.post("/v1/executions/sse-2/cancel", json!(null)).await;
    let (_, e) = s
        .post("/v1/executions/sse-2/wait?timeout_ms=5000", json!(null))
        .await;
    assert_eq!(e["status"], "cancelled");
    let response = s
        .router
        .clone()
        .oneshot(
            Request::get("/v1/executions/sse-2/history")
                .header("accept", "text/event-stream")
                .header("last-event-id", "2")
                .body(Body::empty())
                .unwrap(),
        )
        .await
        .unwrap();
    let mut stream = response.into_body().into_data_stream();
    let mut text = String::new();
    tokio::time::timeout(Duration::from_secs(5), async {
        while let Some(chunk) = stream.next().await {
            text.push_str(&String::from_utf8_lossy(&chunk.unwrap()));
        }
    })
    .await
    .expect("a finished execution's stream ends");
    assert!(
        !text.contains("id: 1\n") && !text.contains("id: 2\n"),
        "{text}"
    );
    assert!(text.contains("id: 3\n"), "{text}");
    assert!(text.contains("event: WorkflowCancelled"), "{text}");
}

#[tokio::test]
async fn history_stream_of_unknown_execution_is_404() {
    let s = Server::start().await;
    let response = s
        .router
        .clone()
        .oneshot(
            Request::get("/v1/executions/nope/history")
                .header("accept", "text/event-stream")
                .body(Body::empty())
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn signal_answers_its_seq_and_finished_executions_refuse() {
    let s = Server::start().await;
    s.deploy(PLAIN).await;
    s.start_plain("sig-1").await;
    let (status, body) = s
        .post(
            "/v1/executions/sig-1/signals/approve",
            json!({"payload": {"ok": true}}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let seq = body["seq"].as_u64().unwrap();
    let (_, h) = s
        .get(&format!(
            "/v1/executions/sig-1/history?after_seq={}",
            seq - 1
        ))
        .await;
    assert_eq!(h["events"][0]["type"], "SignalReceived");
    assert_eq!(h["events"][0]["payload"], json!({"ok": true}));
    let (status, body) = s.post("/v1/executions/nope/signals/x", json!({})).await;
    assert_eq!(
        (status, code(&body)),
        (StatusCode::NOT_FOUND, "UNKNOWN_EXECUTION")
    );
    s.post("/v1/executions/sig-1/cancel", json!(null)).await;
    let (_, waited) = s
        .post("/v1/executions/sig-1/wait?timeout_ms=5000", json!(null))
        .await;
    assert_eq!(waited["status"], "cancelled", "{waited}");
    let (status, body) = s.post("/v1/executions/sig-1/signals/x", json!(null)).await;
    assert_eq!(
        (status, code(&body)),
        (StatusCode::CONFLICT, "EXECUTION_FINISHED")
    );
}

#[tokio::test]
async fn cancel_is_202_twice_then_409_when_finished() {
    let s = Server::start().await;
    s.deploy(PLAIN).await;
    s.start_plain("c-1").await;
    let (status, body) = s
        .post(
            "/v1/executions/c-1/cancel",
            json!({"reason": "no longer needed"}),
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let (status, _) = s.post("/v1/executions/c-1/cancel", json!(null)).await;
    assert!(status == StatusCode::ACCEPTED || status == StatusCode::CONFLICT);
    let (_, e) = s
        .post("/v1/executions/c-1/wait?timeout_ms=5000", json!(null))
        .await;
    assert_eq!(e["status"], "cancelled", "{e}");
    let (status, body) = s.post("/v1/executions/c-1/cancel", json!(null)).await;
    assert_eq!(
        (status, code(&body)),
        (StatusCode::CONFLICT, "EXECUTION_FINISHED")
    );
    let types = s.types("c-1").await;
    assert_eq!(
        types
            .iter()
            .filter(|t| *t == "WorkflowCancelRequested")
            .count(),
        1,
        "{types:?}"
    );
}

#[tokio::test]
async fn wait_times_out_with_the_running_execution() {
    let s = Server::start().await;
    s.deploy(PLAIN).await;
    s.start_plain("w-1").await;
    let started = std::time::Instant::now();
    let (status, e) = s
        .post("/v1/executions/w-1/wait?timeout_ms=300", json!(null))
        .await;
    assert_eq!(status, StatusCode::OK, "{e}");
    assert_eq!(e["status"], "running");
    assert!(started.elapsed() >= Duration::from_millis(250));
    let (status, body) = s
        .post("/v1/executions/nope/wait?timeout_ms=10", json!(null))
        .await;
    assert_eq!(
        (status, code(&body)),
        (StatusCode::NOT_FOUND, "UNKNOWN_EXECUTION")
    );
}

#[tokio::test]
async fn a_start_that_waits_answers_with_the_finished_execution() {
    let s = Server::start().await;
    s.deploy(PLAIN).await;
    let session = s.register("w-1", &["demo.*"]).await;
    let body = json!({"workflow": "Plain", "input": {"n": 21}, "execution_id": "sw-1"});
    let start = s.post("/v1/executions?wait_ms=10000", body.clone());
    let work = async {
        let tasks = s.poll(&session, 5_000).await;
        assert_eq!(tasks.len(), 1, "{tasks:?}");
        let token = tasks[0]["token"].as_str().unwrap();
        let (status, answer) = s
            .post(
                &format!("/v1/tasks/{token}/result"),
                json!({"output": {"doubled": 42}}),
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{answer}");
    };
    let ((status, started), ()) = tokio::join!(start, work);
    assert_eq!(status, StatusCode::CREATED, "{started}");
    assert_eq!(started["execution_id"], "sw-1");
    assert_eq!(started["created"], true);
    assert_eq!(started["execution"]["status"], "completed", "{started}");
    assert_eq!(started["execution"]["output"], json!({"doubled": 42}));
    // As `GET` shows it, field for field.
    let (_, got) = s.get("/v1/executions/sw-1").await;
    assert_eq!(started["execution"], got);

    // Again with the same id: `created: false`, and the finished execution
    // (read from the store) at once.
    let (status, again) = s.post("/v1/executions?wait_ms=10000", body).await;
    assert_eq!(status, StatusCode::OK, "{again}");
    assert_eq!(again["created"], false);
    assert_eq!(again["execution"], got);
}

#[tokio::test]
async fn a_start_whose_wait_runs_out_answers_with_the_running_execution() {
    let s = Server::start().await;
    s.deploy(PLAIN).await;
    let begun = std::time::Instant::now();
    let (status, started) = s
        .post(
            "/v1/executions?wait_ms=300",
            json!({"workflow": "Plain", "input": {"n": 1}, "execution_id": "sw-2"}),
        )
        .await;
    assert!(begun.elapsed() >= Duration::from_millis(250));
    assert_eq!(status, StatusCode::CREATED, "{started}");
    assert_eq!(started["execution"]["status"], "running", "{started}");
    assert_eq!(started["execution"]["execution_id"], "sw-2");
    // Without `wait_ms` the answer is as it always was.
    let (_, plain) = s
        .post(
            "/v1/executions",
            json!({"workflow": "Plain", "input": {"n": 1}, "execution_id": "sw-3"}),
        )
        .await;
    assert_eq!(plain, json!({"execution_id": "sw-3", "created": true}));
}

#[tokio::test]
async fn a_start_that_waits_is_refused_as_a_start_is() {
    let s = Server::start().await;
    s.deploy(PLAIN).await;
    let (status, body) = s
        .post(
            "/v1/executions?wait_ms=5000",
            json!({"workflow": "Nope", "input": {}}),
        )
        .await;
    assert_eq!(
        (status, code(&body)),
        (StatusCode::NOT_FOUND, "UNKNOWN_WORKFLOW")
    );
    let (status, body) = s
        .post(
            "/v1/executions?wait_ms=soon",
            json!({"workflow": "Plain", "input": {"n": 1}}),
        )
        .await;
    assert_eq!(
        (status, code(&body)),
        (StatusCode::BAD_REQUEST, "INVALID_REQUEST"),
        "{body}"
    );
    let (_, list) = s.get("/v1/executions").await;
    assert_eq!(list["executions"], json!([]), "{list}");
}
