//! Bad input answers a 4xx with a code and changes nothing; never a 500.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod api_support;

use api_support::{code, Server};
use axum::http::{Method, StatusCode};
use serde_json::json;

#[tokio::test]
async fn malformed_json_is_invalid_json() {
    let s = Server::start().await;
    let (status, body) = s
        .raw(Method::POST, "/v1/executions", b"{\"workflow\": ".to_vec())
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(code(&body), "INVALID_JSON");
}

#[tokio::test]
async fn wrong_types_are_invalid_request() {
    let s = Server::start().await;
    let (status, body) = s.post("/v1/executions", json!({"workflow": 42})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(code(&body), "INVALID_REQUEST");
    assert!(body["error"]["message"]
        .as_str()
        .unwrap()
        .contains("invalid type"));
}

#[tokio::test]
async fn unknown_fields_in_control_bodies_are_refused() {
    let s = Server::start().await;
    let (status, body) = s
        .post(
            "/v1/workers",
            json!({"worker_id": "w", "task_patterns": ["*"], "colour": "red"}),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(code(&body), "INVALID_REQUEST");
}

#[tokio::test]
async fn missing_body_is_invalid_json() {
    let s = Server::start().await;
    let (status, body) = s.raw(Method::POST, "/v1/workers", Vec::new()).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(code(&body), "INVALID_JSON");
}

#[tokio::test]
async fn body_over_the_limit_is_413_body_too_large() {
    let s = Server::start_with(Default::default(), 1024).await;
    let big = json!({"workflow": "W", "input": {"pad": "x".repeat(4096)}});
    let (status, body) = s.post("/v1/executions", big).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(code(&body), "BODY_TOO_LARGE");
    let (status, body) = s
        .raw(Method::POST, "/v1/tasks/t/result", vec![b' '; 2048])
        .await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(code(&body), "BODY_TOO_LARGE");
}

#[tokio::test]
async fn non_utf8_body_is_invalid_json() {
    let s = Server::start().await;
    let (status, body) = s
        .raw(Method::POST, "/v1/executions", vec![b'"', 0xff, 0xfe, b'"'])
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(code(&body), "INVALID_JSON");
}

#[tokio::test]
async fn over_deep_json_is_refused_without_crashing() {
    let s = Server::start().await;
    let deep = format!(
        "{{\"workflow\":\"W\",\"input\":{}{}}}",
        "[".repeat(10_000),
        "]".repeat(10_000)
    );
    let (status, body) = s
        .raw(Method::POST, "/v1/executions", deep.into_bytes())
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(code(&body), "INVALID_JSON");
}

#[tokio::test]
async fn control_characters_in_path_parameters_are_refused() {
    let s = Server::start().await;
    let (status, body) = s.get("/v1/executions/bad%01id").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(code(&body), "INVALID_REQUEST");
    let long = "x".repeat(600);
    let (status, _) = s.get(&format!("/v1/executions/{long}")).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn bad_query_parameters_are_refused() {
    let s = Server::start().await;
    let (status, body) = s.get("/v1/executions?status=sleeping").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(code(&body), "INVALID_REQUEST");
    let (status, body) = s.get("/v1/executions?limit=many").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(code(&body), "INVALID_REQUEST");
    let (status, _) = s.get("/v1/executions/x/history?after_seq=-1").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn unknown_routes_and_methods_use_the_error_shape() {
    let s = Server::start().await;
    let (status, body) = s.get("/v1/nothing-here").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(code(&body), "NOT_FOUND");
    let (status, body) = s.call(Method::DELETE, "/v1/executions", json!(null)).await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(code(&body), "METHOD_NOT_ALLOWED");
}

#[tokio::test]
async fn result_needs_exactly_one_of_output_and_error() {
    let s = Server::start().await;
    for body in [
        json!({}),
        json!({"output": 1, "error": {"code": "X"}}),
        json!({"error": {"message": "no code"}}),
    ] {
        let (status, answer) = s.post("/v1/tasks/some-token/result", body.clone()).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body} -> {answer}");
        assert_eq!(code(&answer), "INVALID_REQUEST");
    }
}

#[tokio::test]
async fn deploy_needs_a_source() {
    let s = Server::start().await;
    let (status, body) = s.post("/v1/definitions", json!({"files": []})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(code(&body), "INVALID_REQUEST");
    let (status, body) = s
        .post(
            "/v1/definitions",
            json!({"source": "x", "filename": "a\u{7}.orbit"}),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(code(&body), "INVALID_REQUEST");
}

#[tokio::test]
async fn register_refuses_empty_patterns_and_bad_ids() {
    let s = Server::start().await;
    let (status, _) = s
        .post(
            "/v1/workers",
            json!({"worker_id": "w", "task_patterns": []}),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let (status, _) = s
        .post(
            "/v1/workers",
            json!({"worker_id": "w\n", "task_patterns": ["*"]}),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    // Patterns that could never match a task.
    for pattern in ["pay*", "*.charge", "payments.*.x", "a b", "**"] {
        let (status, body) = s
            .post(
                "/v1/workers",
                json!({"worker_id": "w", "task_patterns": ["payments.*", pattern]}),
            )
            .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{pattern}");
        assert_eq!(code(&body), "INVALID_REQUEST");
        assert!(
            body["error"]["message"].as_str().unwrap().contains(pattern),
            "{body}"
        );
    }
    for pattern in ["*", "payments.*", "payments.charge", "orbit.http"] {
        let (status, body) = s
            .post(
                "/v1/workers",
                json!({"worker_id": "w", "task_patterns": [pattern]}),
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{pattern}: {body}");
    }
}
