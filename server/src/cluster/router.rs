//! The HTTP front of a `--cluster` node: `/healthz`, `/readyz`, `/metrics`
//! and `/v1/openapi.json` are answered on every node; every other call goes
//! to the current term's API while this node leads, and is answered
//! `503 NOT_LEADER` (with the leader's URL, or `null`) on a standby.

use super::{Node, Role};
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use orbit_sdk::wire::Health;
use std::sync::Arc;
use tower::ServiceExt;

/// Largest `/metrics` body read back from a term to append the cluster lines.
const METRICS_MAX: usize = 16 * 1024 * 1024;

/// The router of a cluster node (`auth`: whether `--auth` is on, for the
/// OpenAPI document).
pub fn router(node: Arc<Node>, auth: bool) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .route("/v1/openapi.json", get(crate::api::openapi::serve(auth)))
        .fallback(forward)
        .with_state(node)
}

async fn healthz() -> Json<Health> {
    Json(Health {
        status: "ok".to_owned(),
        role: None,
    })
}

/// 200 `{"status": "ready", "role": "leader"}` on the leader whose store
/// takes writes; 503 elsewhere, `{"role": "standby", "error": {…}}` (the
/// error `NOT_LEADER`, naming the role and the leader).
async fn readyz(State(node): State<Arc<Node>>, request: Request) -> Response {
    if node.view().role == Role::Leader {
        if let Some(term) = node.term() {
            let answer = match term.oneshot(request).await {
                Ok(r) => r,
                Err(never) => match never {},
            };
            if answer.status() == StatusCode::OK {
                return Json(Health {
                    status: "ready".to_owned(),
                    role: Some(Role::Leader.as_str().to_owned()),
                })
                .into_response();
            }
            return answer;
        }
    }
    // The role at the top too, where the leader's answer has it.
    let role = Role::Standby.as_str();
    let mut body = node.not_leader().with("role", role.into()).body();
    body["role"] = role.into();
    (StatusCode::SERVICE_UNAVAILABLE, Json(body)).into_response()
}

/// The term's metrics (on the leader) followed by the cluster's.
async fn metrics(State(node): State<Arc<Node>>, request: Request) -> Response {
    let mut text = String::new();
    if let Some(term) = node.term() {
        let answer = match term.oneshot(request).await {
            Ok(r) => r,
            Err(never) => match never {},
        };
        if answer.status() != StatusCode::OK {
            return answer;
        }
        match axum::body::to_bytes(answer.into_body(), METRICS_MAX).await {
            Ok(bytes) => text.push_str(&String::from_utf8_lossy(&bytes)),
            Err(e) => tracing::warn!(error = %e, "metrics: cannot read the term's metrics"),
        }
    }
    text.push_str(&node.metrics_text());
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        text,
    )
        .into_response()
}

async fn forward(State(node): State<Arc<Node>>, request: Request<Body>) -> Response {
    match node.term() {
        Some(term) => match term.oneshot(request).await {
            Ok(r) => r,
            Err(never) => match never {},
        },
        None => node.not_leader().into_response(),
    }
}
