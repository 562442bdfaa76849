//! The worker protocol: register, long-poll, heartbeat, result by token,
//! unregister; and the read-only list of sessions.

use super::auth::{Caller, Role};
use super::error::ApiError;
use super::extract::{parse, Json, OptionalJson, Path};
use super::reply::respond;
use super::AppState;
use axum::body::Bytes;
use axum::extract::State;
use axum::response::Response;
use orbit_core::engine::{Outcome, Request};
use orbit_core::history::ErrorInfo;
use serde::Deserialize;
use serde_json::Value;
use utoipa::ToSchema;

/// Longest `wait_ms` a poll may ask for (60 s).
pub const POLL_WAIT_MS_MAX: u64 = 60_000;
/// Most tasks one poll may ask for.
pub const POLL_MAX_TASKS_MAX: u32 = 1_000;

/// Body of `POST /v1/workers`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RegisterBody {
    /// The worker's own id (`flaky-1`).
    pub worker_id: String,
    /// Exact task names, `*`, or `prefix.*`.
    pub task_patterns: Vec<String>,
    /// Default cap on tasks per poll.
    pub max_tasks: Option<u32>,
}

fn check_text(what: &str, value: &str, max: usize) -> Result<(), ApiError> {
    if value.is_empty() || value.len() > max || value.chars().any(char::is_control) {
        return Err(ApiError::invalid(format!(
            "{what} must be 1 to {max} characters without control characters"
        )));
    }
    Ok(())
}

/// Opens a session: `{"session_id", "session_timeout_ms"}`.
#[utoipa::path(post, path = "/v1/workers", request_body = RegisterBody,
    responses((status = 200, description = "`{session_id, session_timeout_ms}`")))]
pub async fn register(
    State(state): State<AppState>,
    Json(body): Json<RegisterBody>,
) -> Result<Response, ApiError> {
    check_text("worker_id", &body.worker_id, 255)?;
    if body.task_patterns.is_empty() {
        return Err(ApiError::invalid("task_patterns must not be empty"));
    }
    for p in &body.task_patterns {
        check_text("a task pattern", p, 255)?;
    }
    if body.max_tasks == Some(0) {
        return Err(ApiError::invalid("max_tasks must be at least 1"));
    }
    Ok(respond(
        state
            .driver
            .call(Request::RegisterWorker {
                worker_id: body.worker_id,
                task_patterns: body.task_patterns,
                max_tasks: body.max_tasks.map(|m| m.min(POLL_MAX_TASKS_MAX)),
            })
            .await,
    ))
}

/// Body of a poll.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PollBody {
    /// At most this many tasks.
    pub max_tasks: Option<u32>,
    /// Park at most this long (ms) when nothing is queued (at most 60 000).
    #[serde(default)]
    pub wait_ms: u64,
    /// Tokens the worker holds.
    #[serde(default)]
    pub held: Vec<String>,
}

/// Long-polls for tasks: `{"tasks": [...]}`.
#[utoipa::path(post, path = "/v1/workers/{session}/poll", request_body = PollBody,
    params(("session" = String, Path, description = "session id")),
    responses((status = 200, description = "`{tasks: [...]}`"), (status = 404, description = "UNKNOWN_SESSION")))]
pub async fn poll(
    State(state): State<AppState>,
    Path(session): Path<String>,
    OptionalJson(body): OptionalJson<PollBody>,
) -> Result<Response, ApiError> {
    if body.max_tasks == Some(0) {
        return Err(ApiError::invalid("max_tasks must be at least 1"));
    }
    Ok(respond(
        state
            .driver
            .call(Request::Poll {
                session_id: session,
                max_tasks: body.max_tasks.map(|m| m.min(POLL_MAX_TASKS_MAX)),
                wait_ms: body.wait_ms.min(POLL_WAIT_MS_MAX),
                held: body.held,
            })
            .await,
    ))
}

/// Body of a heartbeat (`tokens` is accepted for `held`).
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct HeartbeatBody {
    /// Tokens the worker holds.
    #[serde(default)]
    pub held: Vec<String>,
    /// Synonym of `held`.
    #[serde(default)]
    pub tokens: Vec<String>,
}

/// Keeps a session alive: `{"cancel": [tokens to stop]}`.
#[utoipa::path(post, path = "/v1/workers/{session}/heartbeat", request_body = HeartbeatBody,
    params(("session" = String, Path, description = "session id")),
    responses((status = 200, description = "`{cancel: [...]}`"), (status = 404, description = "UNKNOWN_SESSION")))]
pub async fn heartbeat(
    State(state): State<AppState>,
    Path(session): Path<String>,
    OptionalJson(body): OptionalJson<HeartbeatBody>,
) -> Response {
    let mut held = body.held;
    for t in body.tokens {
        if !held.contains(&t) {
            held.push(t);
        }
    }
    respond(
        state
            .driver
            .call(Request::Heartbeat {
                session_id: session,
                held,
            })
            .await,
    )
}

/// Ends a session; held tasks become uncertain (`worker unregistered`).
#[utoipa::path(delete, path = "/v1/workers/{session}",
    params(("session" = String, Path, description = "session id")),
    responses((status = 200, description = "unregistered"), (status = 404, description = "UNKNOWN_SESSION")))]
pub async fn unregister(State(state): State<AppState>, Path(session): Path<String>) -> Response {
    respond(
        state
            .driver
            .call(Request::Unregister {
                session_id: session,
            })
            .await,
    )
}

/// A worker's reported error.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ReportedError {
    /// `UPPER_SNAKE` code.
    pub code: String,
    /// Optional message.
    #[serde(default)]
    pub message: String,
    /// Whether a retry may help (default true).
    pub retryable: Option<bool>,
}

/// Body of a result: exactly one of `output` and `error`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ResultBody {
    /// The task's output.
    pub output: Option<Value>,
    /// The task's failure.
    pub error: Option<ReportedError>,
}

/// Reports a task's outcome by token: `{"accepted": true}` or
/// `{"accepted": false, "reason": ...}`.
#[utoipa::path(post, path = "/v1/tasks/{token}/result", request_body = ResultBody,
    params(("token" = String, Path, description = "the delivery's token")),
    responses((status = 200, description = "`{accepted, reason?}`")))]
pub async fn result(
    State(state): State<AppState>,
    caller: Option<axum::Extension<Caller>>,
    Path(token): Path<String>,
    bytes: Result<Bytes, axum::extract::rejection::BytesRejection>,
) -> Result<Response, ApiError> {
    let bytes = bytes.map_err(|r| {
        if r.status() == axum::http::StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::new(
                r.status(),
                "BODY_TOO_LARGE",
                "the request body is larger than the server's --max-body",
            )
        } else {
            ApiError::bad_request("INVALID_BODY", r.body_text())
        }
    })?;
    // `{"output": null}` is a real (null) output: look at the keys.
    let raw: serde_json::Map<String, Value> = parse(&bytes)?;
    let body: ResultBody = parse(&bytes)?;
    let outcome = match (raw.contains_key("output"), body.error) {
        (false, Some(e)) => {
            check_text("error.code", &e.code, 255)?;
            Outcome::Error(ErrorInfo {
                code: e.code,
                message: e.message,
                retryable: e.retryable.unwrap_or(true),
            })
        }
        (true, None) => Outcome::Output(body.output.unwrap_or(Value::Null)),
        _ => {
            return Err(ApiError::invalid(
                "a result has exactly one of `output` and `error`",
            ))
        }
    };
    Ok(respond(
        state
            .driver
            .call(Request::Result {
                token,
                outcome,
                // A worker token reports only for tasks within its patterns;
                // the engine knows each token's task, across restarts too.
                patterns: caller
                    .filter(|c| c.role == Role::Worker)
                    .map(|c| c.0.task_patterns),
            })
            .await,
    ))
}

/// The live worker sessions: `{"sessions": [{session_id, worker_id,
/// task_patterns, max_tasks, last_seen, held: [{execution_id, unit, task,
/// attempt, dispatched_at, confirmed}]}], "session_timeout_ms"}`. Delivery
/// tokens are not shown.
#[utoipa::path(get, path = "/v1/workers",
    responses((status = 200, description = "`{sessions: [...], session_timeout_ms}`")))]
pub async fn list(State(state): State<AppState>) -> Response {
    respond(state.driver.call(Request::ListWorkers).await)
}
