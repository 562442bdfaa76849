//! Turning the engine's answers into HTTP responses, and history events into
//! their API JSON (`{"seq", "at": RFC 3339, "type", ...fields}`).

use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use orbit_core::engine;
use orbit_core::history::{Event, Millis};
use serde_json::Value;

/// `ms` since the epoch as RFC 3339 UTC with three digits of milliseconds,
/// the engine's rendering: every time the API shows has the one width,
/// whether it came from memory, the store or the event stream.
pub fn rfc3339(ms: Millis) -> String {
    engine::rfc3339(ms)
}

/// One history event as the API shows it.
pub fn event_json(event: &Event) -> Value {
    let mut v = serde_json::to_value(event).unwrap_or(Value::Null);
    fix_at(&mut v);
    v
}

/// Rewrites a numeric `at` into RFC 3339 text.
fn fix_at(v: &mut Value) {
    if let Some(obj) = v.as_object_mut() {
        if let Some(ms) = obj.get("at").and_then(Value::as_u64) {
            obj.insert("at".to_owned(), Value::String(rfc3339(ms)));
        }
    }
}

/// Converts an engine answer into an HTTP response. History bodies get
/// their event timestamps in RFC 3339. A typed body (a poll's hand-out, an
/// execution's view) is serialized straight from its types, here, once.
pub fn respond(r: engine::Response) -> Response {
    let status = StatusCode::from_u16(r.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut body = r.body;
    if !body.is_typed() {
        if let Some(events) = body.get_mut("events").and_then(Value::as_array_mut) {
            events.iter_mut().for_each(fix_at);
        }
    }
    if status.is_server_error() {
        if let Some(code) = r_code(&body) {
            tracing::warn!(code, status = status.as_u16(), "request failed");
        }
    }
    let mut response = written(status, |buf| body.write_json(buf));
    if r.replayed {
        response
            .headers_mut()
            .insert("idempotent-replayed", HeaderValue::from_static("true"));
    }
    response
}

/// Bytes an answer's JSON starts with room for: a poll's hand-out of one
/// task or an execution's view fits, so most answers are written without
/// growing their buffer.
const ANSWER_CAPACITY: usize = 1024;

/// `value` as a JSON response with `status`, serialized once into a buffer
/// sized for a typical answer (`axum::Json` starts from 128 bytes and grows
/// its buffer three times for most of ORBIT's answers).
pub fn json<T: serde::Serialize>(status: StatusCode, value: &T) -> Response {
    written(status, |buf| serde_json::to_writer(buf, value))
}

/// The JSON response with `status` that `write` writes into a buffer sized
/// as [`json`]'s.
pub fn written(
    status: StatusCode,
    write: impl FnOnce(&mut Vec<u8>) -> serde_json::Result<()>,
) -> Response {
    let mut buf = Vec::with_capacity(ANSWER_CAPACITY);
    if let Err(e) = write(&mut buf) {
        return super::error::ApiError::internal(format!("serializing an answer: {e}"))
            .into_response();
    }
    let mut response = Response::new(axum::body::Body::from(buf));
    *response.status_mut() = status;
    response.headers_mut().insert(
        axum::http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

fn r_code(body: &Value) -> Option<&str> {
    body.get("error")?.get("code")?.as_str()
}

#[cfg(test)]
mod tests {
    use super::{event_json, rfc3339};
    use orbit_core::history::{Event, EventKind};

    #[test]
    fn every_time_has_three_digits_of_milliseconds() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339(1_796_448_522_890), "2026-12-05T05:28:42.890Z");
        let event = Event {
            seq: 1,
            at: 1_796_448_522_890,
            kind: EventKind::WorkflowStarted {},
        };
        assert_eq!(event_json(&event)["at"], "2026-12-05T05:28:42.890Z");
    }
}
