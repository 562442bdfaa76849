//! Input limits: each over-limit request is a 4xx with a code and changes
//! nothing — names and versions in a start, a cancellation reason, the
//! history page size, bodies over `--max-body` on keyed requests, and
//! poll sizes.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod guard_support;

use axum::http::{Method, StatusCode};
use guard_support::Harness;
use serde_json::json;

#[tokio::test]
async fn start_names_are_bounded() {
    let h = Harness::start().await;
    h.deploy().await;
    let long = "W".repeat(256);
    for body in [
        json!({"workflow": long, "input": {"n": 1}}),
        json!({"workflow": "", "input": {"n": 1}}),
        json!({"workflow": "Pla\u{7}in", "input": {"n": 1}}),
        json!({"workflow": "Plain", "version": "1".repeat(129), "input": {"n": 1}}),
        json!({"workflow": "Plain", "version": "1.0.0\n", "input": {"n": 1}}),
        json!({"workflow": "Plain", "input": {"n": 1}, "execution_id": "x".repeat(129)}),
        json!({"workflow": "Plain", "input": {"n": 1}, "execution_id": "has space"}),
    ] {
        let r = h.post("/v1/executions", Some("k"), &body.to_string()).await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{body}: {}", r.json);
        assert!(
            ["INVALID_REQUEST", "INVALID_EXECUTION_ID"].contains(&r.code()),
            "{}",
            r.json
        );
    }
    assert_eq!(h.count().await, 0);
}

#[tokio::test]
async fn cancel_reason_is_bounded() {
    let h = Harness::start().await;
    h.deploy().await;
    let start = r#"{"workflow": "Plain", "input": {"n": 1}, "execution_id": "e1"}"#;
    assert_eq!(
        h.post("/v1/executions", None, start).await.status,
        StatusCode::CREATED
    );
    let body = json!({"reason": "r".repeat(4097)}).to_string();
    let r = h.post("/v1/executions/e1/cancel", None, &body).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert_eq!(r.code(), "INVALID_REQUEST");
    let e = h.send(Method::GET, "/v1/executions/e1", &[], "").await;
    assert_ne!(e.json["status"], "cancelled", "{}", e.json);
    let body = json!({"reason": "r".repeat(4096)}).to_string();
    let r = h.post("/v1/executions/e1/cancel", None, &body).await;
    assert_eq!(r.status, StatusCode::ACCEPTED);
}

#[tokio::test]
async fn history_pages_are_bounded() {
    let h = Harness::start().await;
    h.deploy().await;
    let start = r#"{"workflow": "Plain", "input": {"n": 1}, "execution_id": "e1"}"#;
    h.post("/v1/executions", None, start).await;
    for bad in ["0", "10001", "-1", "x"] {
        let r = h
            .send(
                Method::GET,
                &format!("/v1/executions/e1/history?limit={bad}"),
                &[],
                "",
            )
            .await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "limit={bad}");
        assert_eq!(r.code(), "INVALID_REQUEST");
    }
    // e1's first step is scheduled in a batch of its own after the start's
    // answer: read once its history has stopped growing (reads come from
    // the store, which may be a commit ahead of an earlier read).
    let mut n = 0;
    for _ in 0..100 {
        let all = h
            .send(Method::GET, "/v1/executions/e1/history", &[], "")
            .await;
        let now = all.json["events"].as_array().unwrap().len();
        if now == n {
            break;
        }
        n = now;
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let all = h
        .send(Method::GET, "/v1/executions/e1/history", &[], "")
        .await;
    assert_eq!(all.json["events"].as_array().unwrap().len(), n);
    assert!(n >= 2, "{}", all.json);
    let one = h
        .send(Method::GET, "/v1/executions/e1/history?limit=1", &[], "")
        .await;
    let events = one.json["events"].as_array().unwrap();
    assert_eq!(events.len(), 1);
    let next = h
        .send(
            Method::GET,
            &format!(
                "/v1/executions/e1/history?limit=10000&after_seq={}",
                events[0]["seq"]
            ),
            &[],
            "",
        )
        .await;
    assert_eq!(next.json["events"].as_array().unwrap().len(), n - 1);
}

#[tokio::test]
async fn keyed_bodies_over_the_limit_are_413() {
    let h = Harness::start().await;
    h.deploy().await;
    let big =
        json!({"workflow": "Plain", "input": {"n": 1, "pad": "x".repeat(5 << 20)}}).to_string();
    let r = h.post("/v1/executions", Some("big"), &big).await;
    assert_eq!(r.status, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(r.code(), "BODY_TOO_LARGE");
    let r = h.post("/v1/executions", None, &big).await;
    assert_eq!(r.status, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(h.count().await, 0);
}

#[tokio::test]
async fn poll_size_and_wait_are_capped() {
    let h = Harness::start().await;
    let r = h
        .post(
            "/v1/workers",
            None,
            r#"{"worker_id": "w", "task_patterns": ["demo.*"]}"#,
        )
        .await;
    let session = r.json["session_id"].as_str().unwrap().to_owned();
    let poll = format!("/v1/workers/{session}/poll");
    let r = h.post(&poll, None, r#"{"max_tasks": 0}"#).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    let r = h
        .post(&poll, None, r#"{"max_tasks": 4294967296, "wait_ms": 0}"#)
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.json);
    // A huge max_tasks is capped, not an error; a wait_ms beyond u64 is.
    let r = h
        .post(&poll, None, r#"{"max_tasks": 4000000000, "wait_ms": 0}"#)
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.json);
    let r = h.post(&poll, None, r#"{"wait_ms": 1e30}"#).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
}
