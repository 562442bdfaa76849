//! `/healthz` (the process is up), `/readyz` (recovered and the store
//! answers), `/metrics` (Prometheus text).

use super::error::ApiError;
use super::AppState;
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use orbit_sdk::wire::Health;

/// The process is up.
#[utoipa::path(get, path = "/healthz", tag = "health", security(()),
    responses((status = 200, description = "the process is up: `{status: ok}`", body = Health)))]
pub async fn healthz() -> Json<Health> {
    Json(Health {
        status: "ok".to_owned(),
        role: None,
    })
}

/// Recovered, and the store would take a write now.
#[utoipa::path(get, path = "/readyz", tag = "health", security(()),
    responses((status = 200, description = "ready: `{status: ready}` (under `--cluster`, only the \
                  leader, with `role: leader`; in shared mode every live member, with \
                  `role: member`)", body = Health),
              (status = 503, description = "`NOT_READY`, or `NOT_LEADER` with `role: standby` on a \
                  `--cluster` standby", body = orbit_sdk::wire::ErrorBody)))]
pub async fn readyz(State(state): State<AppState>) -> Result<Json<Health>, ApiError> {
    if !state.driver.is_ready() {
        return Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "NOT_READY",
            "the server is not running its engine",
        ));
    }
    if let Err(e) = state.driver.store().check_writable().await {
        return Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "NOT_READY",
            format!("the store does not answer: {e}"),
        ));
    }
    let role = match state.driver.membership() {
        Some(member) => {
            // A member is live while its beats reach the database.
            let live = state.driver.members().is_some_and(|(m, at)| {
                state.driver.now().saturating_sub(at) <= member.node_timeout_ms
                    && m.live.iter().any(|n| n.node_id == member.node_id)
            });
            if !live {
                return Err(ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "NOT_READY",
                    "this cluster member has not reached the database within --node-timeout",
                ));
            }
            Some("member".to_owned())
        }
        None => None,
    };
    Ok(Json(Health {
        status: "ready".to_owned(),
        role,
    }))
}

/// Prometheus metrics.
#[utoipa::path(get, path = "/metrics", tag = "health",
    responses((status = 200, description = "Prometheus text format", body = String, content_type = "text/plain")))]
pub async fn metrics(State(state): State<AppState>) -> Response {
    let by_status = match state.driver.store().count_by_status().await {
        Ok(counts) => counts,
        Err(e) => {
            tracing::warn!(error = %e, "metrics: cannot count executions");
            Vec::new()
        }
    };
    let text = state.driver.metrics().render(&by_status);
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        text,
    )
        .into_response()
}
