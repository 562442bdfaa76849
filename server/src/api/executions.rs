//! Executions: start, get, list, signal, cancel, wait.

use super::error::ApiError;
use super::extract::{Json, OptionalJson, Path, Query};
use super::idempotency::Scope;
use super::reads;
use super::reply::{self, respond};
use super::AppState;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use orbit_core::engine::json::Object;
use orbit_core::engine::{Request, Start};
use orbit_core::history::Status;
use orbit_io_tokio::storage::ListPage;
use orbit_sdk::wire::{self, CancelRequest, SignalRequest, StartRequest};
use serde::Deserialize;
use serde_json::Value;
use utoipa::IntoParams;

/// The W3C trace context header a start may carry.
pub const TRACEPARENT: &str = "traceparent";

pub use orbit_sdk::wire::{CANCEL_REASON_MAX, WAIT_TIMEOUT_MS_DEFAULT, WAIT_TIMEOUT_MS_MAX};

/// Query of a start.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct StartQuery {
    /// Answer once the execution has finished, or after this many ms
    /// (more than 300 000 is capped), with the execution as `GET` shows it
    /// under `execution`: a start and a `wait` in one request. Ignored on a
    /// start with an `Idempotency-Key`, whose answer is the start's own (the
    /// one stored and replayed): to make a start that waits safe to retry,
    /// name an `execution_id`; a repeated request answers `created: false`
    /// and waits for the same execution.
    #[param(minimum = 0, maximum = 18446744073709551615_u64)]
    pub wait_ms: Option<u64>,
}

/// The answer to a start that waited (`?wait_ms=`): the start's fields and
/// the execution as `GET` shows it when the wait ended.
struct StartedAndSeen {
    execution_id: String,
    created: bool,
    execution: Seen,
}

impl StartedAndSeen {
    /// `{"execution_id", "created", "execution"}`, the execution's view
    /// written by hand (see `orbit_core::engine::json`).
    fn write_json(&self, out: &mut Vec<u8>) -> serde_json::Result<()> {
        let mut o = Object::new(out);
        o.str("execution_id", &self.execution_id)?;
        o.bool("created", self.created);
        let execution = o.key("execution");
        match &self.execution {
            Seen::Engine(r) => r.body.write_json(execution)?,
            Seen::Stored(view) => serde_json::to_writer(execution, view)?,
        }
        o.end();
        Ok(())
    }

    /// The answer with `status`.
    fn respond(&self, status: StatusCode) -> Response {
        reply::written(status, |buf| self.write_json(buf))
    }
}

/// Starts an execution: `201` created, `200` for an existing id; with
/// `wait_ms`, once it has finished or the wait ran out.
#[utoipa::path(post, path = "/v1/executions", tag = "executions", request_body = StartRequest,
    params(("traceparent" = Option<String>, Header, description = "W3C trace context of the caller (`00-<trace id>-<parent span id>-<flags>`). A valid one is kept with the execution: its spans and its workers' tasks join the caller's trace. An invalid one is ignored, not refused."), StartQuery),
    responses((status = 201, description = "created (with `wait_ms` and no `Idempotency-Key`: and `execution`, as `GET` shows it when the wait ended, finished or not)", body = wire::Started),
              (status = 200, description = "an execution with this `execution_id` already exists for the same workflow (and version, if named): `created: false`", body = wire::Started),
              (status = 400, description = "`INPUT_CONTRACT_VIOLATION`, `INVALID_EXECUTION_ID`, `IDEMPOTENCY_KEY_REQUIRED`, or a malformed request", body = wire::ErrorBody),
              (status = 404, description = "`UNKNOWN_WORKFLOW`", body = wire::ErrorBody),
              (status = 409, description = "`EXECUTION_EXISTS` (the id belongs to another workflow or version)", body = wire::ErrorBody)))]
pub async fn start(
    State(state): State<AppState>,
    Scope(idempotency): Scope,
    Query(q): Query<StartQuery>,
    headers: HeaderMap,
    Json(body): Json<StartRequest>,
) -> Result<Response, ApiError> {
    check_name("workflow", &body.workflow, wire::NAME_MAX)?;
    if let Some(v) = &body.version {
        check_name("version", v, wire::VERSION_MAX)?;
    }
    // With an `Idempotency-Key` the answer is the start's own: it is the
    // answer stored against the key and replayed byte for byte, which an
    // answer depending on when a wait ended could not be.
    let wait_ms = q.wait_ms.filter(|_| idempotency.is_none());
    let request = Request::Start(Start {
        workflow: body.workflow,
        version: body.version,
        input: body.input,
        execution_id: body.execution_id,
        idempotency,
        traceparent: traceparent(&headers),
    });
    let started = state.driver.call(request).await;
    let Some(wait_ms) = wait_ms else {
        return Ok(respond(started));
    };
    let id = started.body.field("execution_id").and_then(Value::as_str);
    let (Some(id), true) = (id, (200..300).contains(&started.status)) else {
        return Ok(respond(started));
    };
    let id = id.to_owned();
    let created = started.body.field("created").and_then(Value::as_bool) == Some(true);
    let status = StatusCode::from_u16(started.status).unwrap_or(StatusCode::OK);
    let answer = |execution| StartedAndSeen {
        execution_id: id.clone(),
        created,
        execution,
    };
    Ok(
        match wait_for(&state, id.clone(), wait_ms.min(WAIT_TIMEOUT_MS_MAX)).await? {
            Seen::Engine(r) if r.status == 200 => answer(Seen::Engine(r)).respond(status),
            // Not found by the wait (shared mode: gone from this member
            // between the start and the wait): its own answer.
            Seen::Engine(r) => respond(r),
            seen @ Seen::Stored(_) => answer(seen).respond(status),
        },
    )
}

/// The request's one `traceparent` header as text (the engine keeps it when
/// it is valid W3C trace context; a repeated or non-text header is ignored,
/// as W3C says an invalid one is).
fn traceparent(headers: &HeaderMap) -> Option<String> {
    let mut values = headers.get_all(TRACEPARENT).iter();
    match (values.next(), values.next()) {
        (Some(v), None) => v.to_str().ok().map(str::to_owned),
        _ => None,
    }
}

/// A name in a body: 1 to `max` characters, no control characters.
fn check_name(what: &str, value: &str, max: usize) -> Result<(), ApiError> {
    if !wire::text_ok(value, max) {
        return Err(ApiError::invalid(format!(
            "{what} must be 1 to {max} characters without control characters"
        )));
    }
    Ok(())
}

/// One execution: status, workflow, version, hash, input, output, error,
/// timestamps, per-unit state.
#[utoipa::path(get, path = "/v1/executions/{id}", tag = "executions",
    params(("id" = String, Path, description = "execution id")),
    responses((status = 200, description = "the execution", body = wire::Execution),
              (status = 404, description = "`UNKNOWN_EXECUTION`", body = wire::ErrorBody)))]
pub async fn get_one(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    // From the store, outside the engine loop: finished executions are not
    // in the engine's memory, and reads never queue behind commands.
    match reads::execution(state.driver.store().as_ref(), &id).await? {
        Some((_, view)) => Ok(reply::json(StatusCode::OK, &view)),
        None => Err(reads::unknown(&id)),
    }
}

/// Query of `GET /v1/executions`.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ListQuery {
    /// Only this status (empty: any).
    #[param(value_type = Option<String>, pattern = "^(|pending|running|compensating|completed|failed|cancelled)$")]
    pub status: Option<String>,
    /// Only this workflow (empty: any).
    #[param(max_length = 255, pattern = "^[^\\u0000-\\u001F\\u007F-\\u009F]*$")]
    pub workflow: Option<String>,
    /// Only executions pinned to this workflow version (empty: any).
    #[param(max_length = 128, pattern = "^[^\\u0000-\\u001F\\u007F-\\u009F]*$")]
    pub version: Option<String>,
    /// Only executions whose id starts with this, an exact id included
    /// (empty: any).
    #[param(max_length = 128, pattern = "^[^\\u0000-\\u001F\\u007F-\\u009F]*$")]
    pub id_prefix: Option<String>,
    /// Page size (default 100; more than 1000 is capped).
    #[param(minimum = 1, maximum = 18446744073709551615_u64)]
    pub limit: Option<usize>,
    /// `next_cursor` of the previous page.
    pub cursor: Option<String>,
    /// Only executions created strictly after this time (RFC 3339; empty:
    /// any).
    #[param(schema_with = time_or_empty)]
    pub created_after: Option<String>,
    /// Only executions created strictly before this time (RFC 3339; empty:
    /// any).
    #[param(schema_with = time_or_empty)]
    pub created_before: Option<String>,
}

/// The schema of a time filter: an RFC 3339 `date-time`, or empty for none.
fn time_or_empty() -> utoipa::openapi::schema::Schema {
    use utoipa::openapi::schema::{KnownFormat, ObjectBuilder, OneOfBuilder, SchemaFormat, Type};
    OneOfBuilder::new()
        .item(
            ObjectBuilder::new()
                .schema_type(Type::String)
                .format(Some(SchemaFormat::KnownFormat(KnownFormat::DateTime))),
        )
        .item(
            ObjectBuilder::new()
                .schema_type(Type::String)
                .max_length(Some(0)),
        )
        .build()
        .into()
}

/// An RFC 3339 time of a query parameter, in ms since the epoch. RFC 3339
/// allows a lower-case `t` and `z`; a time before 1970 is 0, which bounds a
/// range exactly as the earlier time would (no execution is that old).
fn parse_time(what: &str, text: &str) -> Result<u64, ApiError> {
    let rfc3339 = &time::format_description::well_known::Rfc3339;
    let t = time::OffsetDateTime::parse(text, rfc3339)
        .or_else(|_| time::OffsetDateTime::parse(&text.to_ascii_uppercase(), rfc3339))
        .map_err(|_| {
            ApiError::invalid(format!(
                "{what} must be an RFC 3339 time such as 2026-12-01T10:00:00Z"
            ))
        })?;
    Ok(u64::try_from(t.unix_timestamp_nanos() / 1_000_000).unwrap_or(0))
}

fn parse_status(s: &str) -> Result<Status, ApiError> {
    serde_json::from_value(Value::String(s.to_owned())).map_err(|_| {
        ApiError::invalid(format!(
            "unknown status `{s}` (pending, running, compensating, completed, failed, cancelled)"
        ))
    })
}

/// Executions, newest first: `{"executions": [...], "next_cursor": ...}`.
/// Filters combine: `status`, `workflow`, `version`, `id_prefix` and the
/// created range must all match; an empty parameter is no filter. Read
/// from the store (keyset pages over an index, whatever the filters).
#[utoipa::path(get, path = "/v1/executions", tag = "executions", params(ListQuery),
    responses((status = 200, description = "a page of executions", body = wire::ExecutionPage)))]
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
    let created_after = q
        .created_after
        .filter(|t| !t.is_empty())
        .map(|t| parse_time("created_after", &t))
        .transpose()?;
    let created_before = q
        .created_before
        .filter(|t| !t.is_empty())
        .map(|t| parse_time("created_before", &t))
        .transpose()?;
    let limit = q
        .limit
        .unwrap_or(LIST_LIMIT_DEFAULT)
        .clamp(1, wire::LIST_LIMIT_MAX);
    let page = ListPage {
        status: status.map(|s| s.as_str().to_owned()),
        workflow,
        version,
        id_prefix,
        created_after,
        created_before,
        before: q.cursor.as_deref().and_then(reads::cursor),
        limit: u32::try_from(limit).unwrap_or(u32::MAX),
    };
    let body = reads::list(state.driver.store().as_ref(), page).await?;
    Ok((StatusCode::OK, axum::Json(body)).into_response())
}

/// Page size of a list without `limit`.
const LIST_LIMIT_DEFAULT: usize = 100;

/// Records a signal: `200 {"seq": N}`.
#[utoipa::path(post, path = "/v1/executions/{id}/signals/{name}", tag = "executions",
    request_body(content = SignalRequest, description = "optional"),
    params(("id" = String, Path, description = "execution id"), ("name" = String, Path, description = "signal name")),
    responses((status = 200, description = "recorded", body = wire::SignalAck),
              (status = 404, description = "`UNKNOWN_EXECUTION`", body = wire::ErrorBody),
              (status = 409, description = "`EXECUTION_FINISHED`", body = wire::ErrorBody)))]
pub async fn signal(
    State(state): State<AppState>,
    Path((id, name)): Path<(String, String)>,
    Scope(idempotency): Scope,
    OptionalJson(body): OptionalJson<SignalRequest>,
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

/// Requests cancellation: `202`; twice is a no-op.
#[utoipa::path(post, path = "/v1/executions/{id}/cancel", tag = "executions",
    request_body(content = CancelRequest, description = "optional"),
    params(("id" = String, Path, description = "execution id")),
    responses((status = 202, description = "cancellation recorded (asking again changes nothing)", body = wire::CancelAck),
              (status = 404, description = "`UNKNOWN_EXECUTION`", body = wire::ErrorBody),
              (status = 409, description = "`EXECUTION_FINISHED`", body = wire::ErrorBody)))]
pub async fn cancel(
    State(state): State<AppState>,
    Path(id): Path<String>,
    Scope(idempotency): Scope,
    OptionalJson(body): OptionalJson<CancelRequest>,
) -> Result<Response, ApiError> {
    if body
        .reason
        .as_ref()
        .is_some_and(|r| r.chars().count() > CANCEL_REASON_MAX)
    {
        return Err(ApiError::invalid(format!(
            "reason must be at most {CANCEL_REASON_MAX} characters"
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

/// Query of a wait.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct WaitQuery {
    /// Longest wait in ms (default 30 000; more than 300 000 is capped).
    #[param(minimum = 0, maximum = 18446744073709551615_u64)]
    pub timeout_ms: Option<u64>,
}

/// How often a shared-mode member looks at the row of an execution another
/// member runs while a `wait` on it lasts.
const WAIT_ELSEWHERE_EVERY: std::time::Duration = std::time::Duration::from_millis(100);

/// What a wait saw: the engine's answer (the execution held in memory, or
/// an error), or the execution as `GET` shows it, read from the store.
enum Seen {
    Engine(orbit_core::engine::Response),
    Stored(Value),
}

impl IntoResponse for Seen {
    fn into_response(self) -> Response {
        match self {
            Seen::Engine(r) => respond(r),
            Seen::Stored(view) => reply::json(StatusCode::OK, &view),
        }
    }
}

/// Waits up to `timeout_ms` for execution `id` to finish; what it is then.
async fn wait_for(state: &AppState, id: String, timeout_ms: u64) -> Result<Seen, ApiError> {
    // Held in memory (running, or finished a moment ago): the engine
    // answers without a read of the store — the usual case, a client
    // waiting on what it just started.
    let held = state
        .driver
        .call(Request::WaitHeld {
            execution_id: id.clone(),
            timeout_ms,
        })
        .await;
    if held.error_code() != Some(orbit_core::engine::NOT_HELD) {
        return Ok(Seen::Engine(held));
    }
    // Unknown, finished or idle and evicted: the row says which. Only a
    // finished execution's history is read and folded into its view, and
    // outside the engine.
    let store = state.driver.store();
    let row = store.execution(&id).await.map_err(ApiError::storage)?;
    let Some(row) = row else {
        return Err(reads::unknown(&id));
    };
    if parse_status(&row.status).is_ok_and(|s| s.is_terminal()) {
        return stored(state, &id).await;
    }
    if state.driver.membership().is_some() {
        // Shared mode: another member runs it; its row tells when it ends.
        return wait_elsewhere(state, &id, timeout_ms).await;
    }
    Ok(Seen::Engine(
        state
            .driver
            .call(Request::Wait {
                execution_id: id,
                timeout_ms,
            })
            .await,
    ))
}

/// The execution `id` as `GET` shows it, from the store.
async fn stored(state: &AppState, id: &str) -> Result<Seen, ApiError> {
    match reads::execution(state.driver.store().as_ref(), id).await? {
        Some((_, view)) => Ok(Seen::Stored(view)),
        None => Err(reads::unknown(id)),
    }
}

/// `wait` on an execution another member owns: its row is read every
/// [`WAIT_ELSEWHERE_EVERY`] until it is finished or the timeout passed,
/// then answered as `GET` shows it.
async fn wait_elsewhere(state: &AppState, id: &str, timeout_ms: u64) -> Result<Seen, ApiError> {
    let store = state.driver.store();
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_millis(timeout_ms);
    loop {
        let row = store.execution(id).await.map_err(ApiError::storage)?;
        let Some(row) = row else {
            return Err(reads::unknown(id));
        };
        let ended = parse_status(&row.status).is_ok_and(|s| s.is_terminal());
        if ended || tokio::time::Instant::now() >= deadline {
            return stored(state, id).await;
        }
        tokio::time::sleep(WAIT_ELSEWHERE_EVERY.min(deadline - tokio::time::Instant::now())).await;
    }
}

/// Long-polls until the execution is terminal or the timeout passed; either
/// way `200` with the execution as `GET` shows it.
#[utoipa::path(post, path = "/v1/executions/{id}/wait", tag = "executions",
    params(("id" = String, Path, description = "execution id"), WaitQuery),
    responses((status = 200, description = "the execution, finished or not (look at `status`)", body = wire::Execution),
              (status = 404, description = "`UNKNOWN_EXECUTION`", body = wire::ErrorBody)))]
pub async fn wait(
    State(state): State<AppState>,
    Path(id): Path<String>,
    Query(q): Query<WaitQuery>,
) -> Result<Response, ApiError> {
    let timeout_ms = q
        .timeout_ms
        .unwrap_or(WAIT_TIMEOUT_MS_DEFAULT)
        .min(WAIT_TIMEOUT_MS_MAX);
    Ok(wait_for(&state, id, timeout_ms).await?.into_response())
}
