//! Health, readiness, metrics and the OpenAPI document.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod api_support;

use api_support::Server;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use http_body_util::BodyExt;
use serde_json::json;
use tower::ServiceExt;

#[tokio::test]
async fn healthz_and_readyz_answer_ok() {
    let s = Server::start().await;
    let (status, body) = s.get("/healthz").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["status"], "ok");
    let (status, body) = s.get("/readyz").await;
    assert_eq!(status, StatusCode::OK, "{body}");
}

#[tokio::test]
async fn readyz_is_503_after_shutdown() {
    let s = Server::start().await;
    s.driver.shutdown().await;
    let (status, body) = s.get("/readyz").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(body["error"]["code"], "NOT_READY");
}

#[tokio::test]
async fn metrics_are_prometheus_text_with_the_required_series() {
    let s = Server::start().await;
    let response = s
        .router
        .clone()
        .oneshot(Request::get("/metrics").body(Body::empty()).unwrap())
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let content_type = response.headers()["content-type"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(content_type.starts_with("text/plain"), "{content_type}");
    let text = String::from_utf8(
        response
            .into_body()
            .collect()
            .await
            .unwrap()
            .to_bytes()
            .to_vec(),
    )
    .unwrap();
    for series in [
        "orbit_executions{status=\"running\"}",
        "orbit_steps_dispatched_total",
        "orbit_steps_succeeded_total",
        "orbit_steps_failed_total",
        "orbit_redeliveries_total",
        "orbit_commit_latency_seconds_bucket",
        "orbit_commit_batches_bucket",
        "orbit_queue_depth",
        "orbit_worker_sessions",
    ] {
        assert!(text.contains(series), "missing {series} in\n{text}");
    }
}

#[tokio::test]
async fn openapi_document_lists_every_route() {
    let s = Server::start().await;
    let (status, doc) = s.get("/v1/openapi.json").await;
    assert_eq!(status, StatusCode::OK);
    assert!(doc["openapi"].as_str().unwrap().starts_with("3."));
    let paths = doc["paths"].as_object().unwrap();
    for p in [
        "/v1/definitions",
        "/v1/definitions/{name}/{version}",
        "/v1/executions",
        "/v1/executions/{id}",
        "/v1/executions/{id}/history",
        "/v1/executions/{id}/signals/{name}",
        "/v1/executions/{id}/cancel",
        "/v1/executions/{id}/wait",
        "/v1/workers",
        "/v1/workers/{session}",
        "/v1/workers/{session}/poll",
        "/v1/workers/{session}/heartbeat",
        "/v1/tasks/{token}/result",
        "/healthz",
        "/readyz",
        "/metrics",
    ] {
        assert!(paths.contains_key(p), "OpenAPI lacks {p}");
    }
    // The wire types are the schemas: request bodies refuse unknown fields.
    let start = &doc["components"]["schemas"]["StartRequest"];
    assert_eq!(start["additionalProperties"], json!(false), "{start}");
    assert!(doc["components"]["schemas"]["ErrorBody"].is_object());
    assert!(doc["components"]["securitySchemes"]["bearer"].is_object());
}
