//! Executions: start, get, list, signal, cancel, wait.

use super::error::ApiError;
use super::extract::{Json, OptionalJson, Path, Query};
use super::idempotency::Scope;
use super::reply::respond;
use super::AppState;
use axum::extract::State;
use axum::response::Response;
use orbit_core::engine::{ListFilter, Request, Start};
use orbit_core::history::Status;
use serde::Deserialize;
use serde_json::Value;
use utoipa::{IntoParams, ToSchema};

/// Longest `timeout_ms` a wait may ask for (5 minutes).
pub const WAIT_TIMEOUT_MS_MAX: u64 = 300_000;
/// `timeout_ms` when the query names none (30 s).
pub const WAIT_TIMEOUT_MS_DEFAULT: u64 = 30_000;

/// Body of `POST /v1/executions`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct StartBody {
    /// Workflow name.
    pub workflow: String,
    /// Version; the highest registered when absent.
    pub version: Option<String>,
    /// The execution's input (checked against the workflow's input type).
    #[serde(default)]
    pub input: Value,
    /// Client-chosen id (1-128 of `A-Z a-z 0-9 _ : -`).
    pub execution_id: Option<String>,
}

/// Starts an execution: `201` created, `200` for an existing id.
#[utoipa::path(post, path = "/v1/executions", request_body = StartBody,
    responses((status = 201, description = "`{execution_id, created: true}`"),
              (status = 200, description = "`{execution_id, created: false}`"),
              (status = 400, description = "INPUT_CONTRACT_VIOLATION, INVALID_EXECUTION_ID"),
              (status = 404, description = "UNKNOWN_WORKFLOW"),
              (status = 409, description = "EXECUTION_EXISTS")))]
pub async fn start(
    State(state): State<AppState>,
    Scope(idempotency): Scope,
    Json(body): Json<StartBody>,
) -> Result<Response, ApiError> {
    check_name("workflow", &body.workflow, 255)?;
    if let Some(v) = &body.version {
        check_name("version", v, 128)?;
    }
    let request = Request::Start(Start {
        workflow: body.workflow,
        version: body.version,
        input: body.input,
        execution_id: body.execution_id,
        idempotency,
    });
    Ok(respond(state.driver.call(request).await))
}

/// A name in a body: 1 to `max` bytes, no control characters.
fn check_name(what: &str, value: &str, max: usize) -> Result<(), ApiError> {
    if value.is_empty() || value.len() > max || value.chars().any(char::is_control) {
        return Err(ApiError::invalid(format!(
            "{what} must be 1 to {max} bytes without control characters"
        )));
    }
    Ok(())
}

/// One execution: status, workflow, version, hash, input, output, error,
/// timestamps, per-unit state.
#[utoipa::path(get, path = "/v1/executions/{id}",
    params(("id" = String, Path, description = "execution id")),
    responses((status = 200, description = "the execution"), (status = 404, description = "UNKNOWN_EXECUTION")))]
pub async fn get_one(State(state): State<AppState>, Path(id): Path<String>) -> Response {
    respond(
        state
            .driver
            .call(Request::GetExecution { execution_id: id })
            .await,
    )
}

/// Query of `GET /v1/executions`.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    /// Only this status.
    pub status: Option<String>,
    /// Only this workflow.
    pub workflow: Option<String>,
    /// Only executions pinned to this workflow version.
    pub version: Option<String>,
    /// Only executions whose id starts with this (an exact id included).
    pub id_prefix: Option<String>,
    /// Page size.
    pub limit: Option<usize>,
    /// `next_cursor` of the previous page.
    pub cursor: Option<String>,
}

fn parse_status(s: &str) -> Result<Status, ApiError> {
    serde_json::from_value(Value::String(s.to_owned())).map_err(|_| {
        ApiError::invalid(format!(
            "unknown status `{s}` (pending, running, compensating, completed, failed, cancelled)"
        ))
    })
}

/// Executions, newest first: `{"executions": [...], "next_cursor": ...}`.
/// Filters combine: `status`, `workflow`, `version` and `id_prefix` must
/// all match; an empty parameter is no filter.
#[utoipa::path(get, path = "/v1/executions", params(ListQuery),
    responses((status = 200, description = "a page of executions")))]
pub async fn list(
    State(state): State<AppState>,
    Query(q): Query<ListQuery>,
) -> Result<Response, ApiError> {
    let status = q
        .status
        .as_deref()
        .filter(|s| !s.is_empty())
        .map(parse_status)
        .transpose()?;
    if q.limit == Some(0) {
        return Err(ApiError::invalid("limit must be at least 1"));
    }
    let workflow = q.workflow.filter(|w| !w.is_empty());
    if let Some(w) = &workflow {
        check_name("workflow", w, 255)?;
    }
    let version = q.version.filter(|v| !v.is_empty());
    if let Some(v) = &version {
        check_name("version", v, 128)?;
    }
    let id_prefix = q.id_prefix.filter(|x| !x.is_empty());
    if let Some(x) = &id_prefix {
        check_name("id_prefix", x, 128)?;
    }
    let filter = ListFilter {
        status,
        workflow,
        version,
        id_prefix,
        limit: q.limit.map(|l| l.min(1000)),
        cursor: q.cursor.filter(|c| !c.is_empty()),
    };
    Ok(respond(
        state.driver.call(Request::ListExecutions(filter)).await,
    ))
}

/// Body of a signal.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SignalBody {
    /// The signal's payload (null when absent).
    #[serde(default)]
    pub payload: Value,
}

/// Records a signal: `200 {"seq": N}`.
#[utoipa::path(post, path = "/v1/executions/{id}/signals/{name}", request_body = SignalBody,
    params(("id" = String, Path, description = "execution id"), ("name" = String, Path, description = "signal name")),
    responses((status = 200, description = "`{seq}`"), (status = 404, description = "UNKNOWN_EXECUTION"),
              (status = 409, description = "EXECUTION_FINISHED")))]
pub async fn signal(
    State(state): State<AppState>,
    Path((id, name)): Path<(String, String)>,
    Scope(idempotency): Scope,
    OptionalJson(body): OptionalJson<SignalBody>,
) -> Response {
    respond(
        state
            .driver
            .call(Request::Signal {
                execution_id: id,
                name,
                payload: body.payload,
                idempotency,
            })
            .await,
    )
}

/// Body of a cancel.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CancelBody {
    /// Why.
    pub reason: Option<String>,
}

/// Requests cancellation: `202`; twice is a no-op.
#[utoipa::path(post, path = "/v1/executions/{id}/cancel", request_body = CancelBody,
    params(("id" = String, Path, description = "execution id")),
    responses((status = 202, description = "cancellation recorded"), (status = 404, description = "UNKNOWN_EXECUTION"),
              (status = 409, description = "EXECUTION_FINISHED")))]
pub async fn cancel(
    State(state): State<AppState>,
    Path(id): Path<String>,
    Scope(idempotency): Scope,
    OptionalJson(body): OptionalJson<CancelBody>,
) -> Result<Response, ApiError> {
    if body
        .reason
        .as_ref()
        .is_some_and(|r| r.len() > CANCEL_REASON_MAX)
    {
        return Err(ApiError::invalid(format!(
            "reason must be at most {CANCEL_REASON_MAX} bytes"
        )));
    }
    Ok(respond(
        state
            .driver
            .call(Request::Cancel {
                execution_id: id,
                reason: body.reason,
                idempotency,
            })
            .await,
    ))
}

/// Longest cancellation reason accepted.
pub const CANCEL_REASON_MAX: usize = 4096;

/// Query of a wait.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
pub struct WaitQuery {
    /// Longest wait in ms (default 30 000, at most 300 000).
    pub timeout_ms: Option<u64>,
}

/// Long-polls until the execution is terminal or the timeout passed; either
/// way `200` with the execution as `GET` shows it.
#[utoipa::path(post, path = "/v1/executions/{id}/wait", params(("id" = String, Path, description = "execution id"), WaitQuery),
    responses((status = 200, description = "the execution"), (status = 404, description = "UNKNOWN_EXECUTION")))]
pub async fn wait(
    State(state): State<AppState>,
    Path(id): Path<String>,
    Query(q): Query<WaitQuery>,
) -> Response {
    let timeout_ms = q
        .timeout_ms
        .unwrap_or(WAIT_TIMEOUT_MS_DEFAULT)
        .min(WAIT_TIMEOUT_MS_MAX);
    respond(
        state
            .driver
            .call(Request::Wait {
                execution_id: id,
                timeout_ms,
            })
            .await,
    )
}
