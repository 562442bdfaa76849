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
use orbit_sdk::wire::{self, HeartbeatRequest, PollRequest, RegisterRequest};

pub use orbit_sdk::wire::{POLL_MAX_TASKS_MAX, POLL_WAIT_MS_MAX};

fn check_text(what: &str, value: &str, max: usize) -> Result<(), ApiError> {
    if !wire::text_ok(value, max) {
        return Err(ApiError::invalid(format!(
            "{what} must be 1 to {max} characters without control characters"
        )));
    }
    Ok(())
}

/// Opens a session: `{"session_id", "session_timeout_ms"}`.
#[utoipa::path(post, path = "/v1/workers", tag = "workers", request_body = RegisterRequest,
    responses((status = 200, description = "the session", body = wire::Session)))]
pub async fn register(
    State(state): State<AppState>,
    Json(body): Json<RegisterRequest>,
) -> Result<Response, ApiError> {
    check_text("worker_id", &body.worker_id, wire::NAME_MAX)?;
    if body.task_patterns.is_empty() {
        return Err(ApiError::invalid("task_patterns must not be empty"));
    }
    for p in &body.task_patterns {
        check_text("a task pattern", p, wire::NAME_MAX)?;
        // Anything else could never match a task: refused, not idle for good.
        if !super::auth::valid_pattern(p) {
            return Err(ApiError::invalid(format!(
                "`{p}` is not a task pattern (an exact task name, `prefix.*` or `*`)"
            )));
        }
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

/// Long-polls for tasks: `{"tasks": [...]}`. A poll may carry results
/// (`results`): each is recorded exactly as the result endpoint records it
/// and answered in the reply's `results`, and a task one of them schedules
/// can come back in the same reply.
#[utoipa::path(post, path = "/v1/workers/{session}/poll", tag = "workers",
    request_body(content = PollRequest, description = "optional"),
    params(("session" = String, Path, description = "session id")),
    responses((status = 200, description = "the tasks handed out (possibly none) and, when the poll carried results, one answer per result", body = wire::Polled),
              (status = 404, description = "`UNKNOWN_SESSION`: register again (results the poll carried were still recorded: their answers are in `error.results`)", body = wire::ErrorBody)))]
pub async fn poll(
    State(state): State<AppState>,
    caller: Option<axum::Extension<Caller>>,
    Path(session): Path<String>,
    OptionalJson(body): OptionalJson<PollRequest>,
) -> Result<Response, ApiError> {
    if body.max_tasks == Some(0) {
        return Err(ApiError::invalid("max_tasks must be at least 1"));
    }
    // The whole body is checked before anything is recorded: a malformed
    // result refuses the call and changes nothing.
    if body.results.len() > wire::POLL_RESULTS_MAX {
        return Err(ApiError::invalid(format!(
            "a poll carries at most {} results",
            wire::POLL_RESULTS_MAX
        )));
    }
    let mut results = Vec::with_capacity(body.results.len());
    for (i, r) in body.results.into_iter().enumerate() {
        if !wire::text_ok(&r.token, wire::PATH_PARAM_MAX) {
            return Err(ApiError::invalid(format!(
                "results[{i}].token must be 1 to {} characters without control characters",
                wire::PATH_PARAM_MAX
            )));
        }
        let outcome = engine_outcome(r.outcome)
            .map_err(|e| ApiError::invalid(format!("results[{i}]: {}", e.message)))?;
        results.push((r.token, outcome));
    }
    let patterns = caller
        .filter(|c| c.role == Role::Worker)
        .map(|c| c.0.task_patterns);
    let wait_ms = body.wait_ms.min(POLL_WAIT_MS_MAX);
    let poll = Request::Poll {
        session_id: session,
        max_tasks: body.max_tasks.map(|m| m.min(POLL_MAX_TASKS_MAX)),
        wait_ms,
        held: body.held,
    };
    let tokens: Vec<String> = results.iter().map(|(t, _)| t.clone()).collect();
    let recorded: Vec<Request> = results
        .into_iter()
        .map(|(token, outcome)| Request::Result {
            token,
            outcome,
            patterns: patterns.clone(),
        })
        .collect();
    let (mut polled, answers) = if recorded.is_empty() {
        (state.driver.call(poll).await, Vec::new())
    } else if state.driver.membership().is_none() {
        // The results, then the poll, handled as one: each result is
        // recorded exactly as alone, and the poll takes what is queued and
        // what they schedule, all in one commit after which every answer
        // goes out.
        let mut requests = recorded;
        requests.push(poll);
        let mut responses = state.driver.call_together(requests).await;
        let polled = match responses.pop() {
            // Their commit failed: the results are answered `503` each,
            // and the poll handed out nothing, which is what it says.
            Some(r) if r.status == 503 && r.error_code() == Some("STORAGE_ERROR") => {
                orbit_core::engine::Response::ok(200, serde_json::json!({"tasks": []}))
            }
            Some(r) => r,
            None => orbit_core::engine::Response::error(
                503,
                "SHUTTING_DOWN",
                "the server is shutting down",
            ),
        };
        (polled, answers_of(tokens, responses))
    } else {
        // Shared mode claims tasks from the database's queue, which the
        // results' tasks reach only once committed. A poll that may wait
        // goes first: parked, it is woken when they are. One that may not
        // wait goes after the results, so it still finds what they
        // scheduled.
        let recorded = futures_util::future::join_all(
            recorded
                .into_iter()
                .map(|request| state.driver.call(request)),
        );
        if wait_ms > 0 {
            // `join` polls its first future first: the poll's request is
            // sent before the results'.
            let (polled, responses) =
                futures_util::future::join(state.driver.call(poll), recorded).await;
            (polled, answers_of(tokens, responses))
        } else {
            let responses = recorded.await;
            (state.driver.call(poll).await, answers_of(tokens, responses))
        }
    };
    if !answers.is_empty() {
        let answers = serde_json::Value::Array(answers);
        if (200..300).contains(&polled.status) {
            // A hand-out stays typed: serialized once, at the edge.
            polled.body.insert("results", answers);
        } else if let Some(error) = polled
            .body
            .get_mut("error")
            .and_then(serde_json::Value::as_object_mut)
        {
            error.insert("results".into(), answers);
        }
    }
    Ok(respond(polled))
}

/// The answers to carried results, in the order they came.
fn answers_of(
    tokens: Vec<String>,
    responses: Vec<orbit_core::engine::Response>,
) -> Vec<serde_json::Value> {
    tokens
        .into_iter()
        .zip(responses)
        .map(|(token, r)| result_answer(token, r))
        .collect()
}

/// One carried result's answer: `{"token", "status", ...}` with the result
/// endpoint's body (`accepted`, `reason`; or `error`).
fn result_answer(token: String, r: orbit_core::engine::Response) -> serde_json::Value {
    // The body's own map, kept: it holds `accepted` already.
    let mut answer = match r.body.into_json() {
        serde_json::Value::Object(mut body) => {
            body.retain(|k, _| matches!(k.as_str(), "accepted" | "reason" | "error"));
            body
        }
        _ => serde_json::Map::new(),
    };
    answer.insert("token".into(), token.into());
    answer.insert("status".into(), r.status.into());
    serde_json::Value::Object(answer)
}

/// A reported outcome as the engine takes it (the error code checked).
fn engine_outcome(outcome: wire::Outcome) -> Result<Outcome, ApiError> {
    Ok(match outcome {
        wire::Outcome::Output(output) => Outcome::Output(output),
        wire::Outcome::Error(e) => {
            check_text("error.code", &e.code, wire::NAME_MAX)?;
            Outcome::Error(ErrorInfo {
                code: e.code,
                message: e.message.unwrap_or_default(),
                retryable: e.retryable,
            })
        }
    })
}

/// Keeps a session alive: `{"cancel": [tokens to stop]}`.
#[utoipa::path(post, path = "/v1/workers/{session}/heartbeat", tag = "workers",
    request_body(content = HeartbeatRequest, description = "optional"),
    params(("session" = String, Path, description = "session id")),
    responses((status = 200, description = "the held tasks to stop", body = wire::HeartbeatAck),
              (status = 404, description = "`UNKNOWN_SESSION`: register again", body = wire::ErrorBody)))]
pub async fn heartbeat(
    State(state): State<AppState>,
    Path(session): Path<String>,
    OptionalJson(body): OptionalJson<HeartbeatRequest>,
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
#[utoipa::path(delete, path = "/v1/workers/{session}", tag = "workers",
    params(("session" = String, Path, description = "session id")),
    responses((status = 200, description = "unregistered", body = wire::Unregistered),
              (status = 404, description = "`UNKNOWN_SESSION`", body = wire::ErrorBody)))]
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

/// Reports a task's outcome by token: `{"accepted": true}` or
/// `{"accepted": false, "reason": ...}`.
#[utoipa::path(post, path = "/v1/tasks/{token}/result", tag = "workers", request_body = wire::Outcome,
    params(("token" = String, Path, description = "the delivery's token")),
    responses((status = 200, description = "`accepted: true` once recorded, or `accepted: false` with the reason (final: do not retry)", body = wire::ResultAck),
              (status = 503, description = "`STORAGE_ERROR`: not recorded; or `NOT_READY` (shared mode): the member is still taking back its executions and cannot judge the token yet. Report the result again", body = wire::ErrorBody)))]
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
    // Exactly one of `output` (null included) and `error`.
    // Parsed as an object first, so that a well-formed body of the wrong
    // shape is INVALID_REQUEST, not INVALID_JSON.
    let raw: serde_json::Map<String, serde_json::Value> = parse(&bytes)?;
    let outcome =
        serde_json::from_value::<wire::Outcome>(serde_json::Value::Object(raw)).map_err(|e| {
            ApiError::invalid(format!(
                "a result has exactly one of `output` and `error`: {e}"
            ))
        })?;
    let outcome = engine_outcome(outcome)?;
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
#[utoipa::path(get, path = "/v1/workers", tag = "workers",
    responses((status = 200, description = "the live sessions", body = wire::WorkerSessions)))]
pub async fn list(State(state): State<AppState>) -> Response {
    respond(state.driver.call(Request::ListWorkers).await)
}
