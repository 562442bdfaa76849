//! API-level idempotency at the HTTP edge (seed `002_…`, `api.md`): the
//! `Idempotency-Key` header of every creating POST (deploy, start, signal,
//! cancel) is checked for shape, scoped to the caller's credential, the method
//! and the concrete path, and paired with a fingerprint of the body (SHA-256 of
//! its canonical JSON). A live stored record answers the request here — the
//! same body replays the stored response byte for byte with
//! `Idempotent-Replayed: true`, another body is `409 IDEMPOTENCY_KEY_REUSED` —
//! otherwise the scope travels to the engine, which writes the record in the
//! same batch as the effect. Racing requests with one scope are serialized: the
//! second waits up to [`IN_FLIGHT_WAIT`] and then replays, or gets `409
//! IDEMPOTENCY_KEY_IN_FLIGHT`. When the records cannot be read the request is
//! refused with `503 IDEMPOTENCY_UNAVAILABLE` rather than run unguarded.

use super::auth::Caller;
use super::error::ApiError;
use axum::body::{Body, Bytes};
use axum::extract::{FromRequestParts, Request, State};
use axum::http::request::Parts;
use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use orbit_core::engine::IdempotencyScope;
use orbit_io_tokio::driver::Clock;
use orbit_io_tokio::storage::Storage;
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The request header naming the key.
pub const KEY_HEADER: &str = "idempotency-key";
/// The response header marking a replayed answer.
pub const REPLAYED_HEADER: &str = "idempotent-replayed";
/// How long a request waits for a racing request with the same key.
pub const IN_FLIGHT_WAIT: Duration = Duration::from_secs(2);
/// Longest key accepted.
pub const KEY_MAX_LEN: usize = 255;

/// Whether `key` has the shape `api.md` allows: 1–255 characters of
/// `A-Z a-z 0-9 - _ . : /`.
pub fn valid_key(key: &str) -> bool {
    !key.is_empty()
        && key.len() <= KEY_MAX_LEN
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b':' | b'/'))
}

/// Whether `method path` is a creating route (the only routes the header
/// applies to).
pub fn is_creating(method: &Method, path: &str) -> bool {
    if method != Method::POST {
        return false;
    }
    let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    matches!(
        parts.as_slice(),
        ["v1", "definitions"]
            | ["v1", "executions"]
            | ["v1", "executions", _, "signals", _]
            | ["v1", "executions", _, "cancel"]
    )
}

/// Writes `v` as canonical JSON: object members sorted by key, no
/// insignificant whitespace, numbers and strings as serde_json prints them.
fn canonical(v: &Value, out: &mut String) {
    match v {
        Value::Object(map) => {
            let mut members: Vec<(&String, &Value)> = map.iter().collect();
            members.sort_by(|a, b| a.0.cmp(b.0));
            out.push('{');
            for (i, (k, v)) in members.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(k.clone()).to_string());
                out.push(':');
                canonical(v, out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, v) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                canonical(v, out);
            }
            out.push(']');
        }
        other => out.push_str(&other.to_string()),
    }
}

/// The fingerprint of a request body: SHA-256 (hex) of its canonical JSON,
/// so whitespace and member order do not matter. An empty body has the
/// fingerprint of the empty text. `None` when the body is not JSON (the
/// handler rejects it).
pub fn fingerprint(body: &[u8]) -> Option<String> {
    let text = if body.iter().all(u8::is_ascii_whitespace) {
        String::new()
    } else {
        let value: Value = serde_json::from_slice(body).ok()?;
        let mut out = String::new();
        canonical(&value, &mut out);
        out
    };
    Some(hex::encode(Sha256::digest(text.as_bytes())))
}

/// The engine-level key of a request: credential, method, concrete path and
/// the client's key.
pub fn scope_key(credential: &str, method: &Method, path: &str, key: &str) -> String {
    format!("{credential} {method} {path} {key}")
}

/// Keys of requests being answered right now, so that a racing request with
/// the same scope waits for the first instead of running beside it.
#[derive(Debug, Clone, Default)]
pub struct InFlight {
    slots: Arc<Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>>,
}

/// Holds a scope in flight until dropped.
#[derive(Debug)]
pub struct Slot {
    registry: InFlight,
    key: String,
    guard: Option<tokio::sync::OwnedMutexGuard<()>>,
}

impl InFlight {
    /// Takes the slot for `key`, waiting up to `wait` for a request holding
    /// it; `None` when it is still held after that.
    pub async fn enter(&self, key: &str, wait: Duration) -> Option<Slot> {
        let lock = {
            let mut slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
            slots.entry(key.to_owned()).or_default().clone()
        };
        let mut slot = Slot {
            registry: self.clone(),
            key: key.to_owned(),
            guard: None,
        };
        // A statement, so the timed-out future (and its handle on the lock)
        // is gone before `slot` tidies the map.
        let acquired = tokio::time::timeout(wait, lock.lock_owned()).await;
        match acquired {
            Ok(guard) => {
                slot.guard = Some(guard);
                Some(slot)
            }
            // `slot` is dropped here without a guard, which tidies the map.
            Err(_) => None,
        }
    }

    /// How many scopes have a slot (held or waited for).
    pub fn len(&self) -> usize {
        self.slots.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// Whether no scope has a slot.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut slots = self
            .registry
            .slots
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        self.guard = None;
        // Only the map holds it: nobody is running or waiting.
        if slots
            .get(&self.key)
            .is_some_and(|l| Arc::strong_count(l) == 1)
        {
            slots.remove(&self.key);
        }
    }
}

/// What the idempotency middleware needs.
#[derive(Clone)]
pub struct Guard {
    /// Where the records live.
    pub store: Arc<dyn Storage>,
    /// Requests in flight.
    pub in_flight: InFlight,
    /// How long a racing request waits.
    pub wait: Duration,
    /// Largest body accepted (`--max-body`).
    pub max_body: usize,
    /// The driver's clock (record expiry is judged on the engine's time).
    pub clock: Clock,
}

impl std::fmt::Debug for Guard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Guard")
            .field("in_flight", &self.in_flight)
            .field("wait", &self.wait)
            .field("max_body", &self.max_body)
            .finish_non_exhaustive()
    }
}

/// Reads a whole body of at most `max` bytes.
pub async fn read_body(body: Body, max: usize) -> Result<Bytes, ApiError> {
    let limited = http_body_util::Limited::new(body, max);
    match http_body_util::BodyExt::collect(limited).await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => Err(ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "BODY_TOO_LARGE",
            "the request body is larger than the server's --max-body",
        )),
        Err(e) => Err(ApiError::bad_request(
            "INVALID_BODY",
            format!("cannot read the request body: {e}"),
        )),
    }
}

/// A stored answer, replayed.
fn replay(status: u16, body: String) -> Response {
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::OK);
    let mut response = (status, body).into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    headers.insert(REPLAYED_HEADER, HeaderValue::from_static("true"));
    response
}

/// The middleware: see the module documentation.
pub async fn middleware(State(guard): State<Guard>, request: Request, next: Next) -> Response {
    match handle(guard, request, next).await {
        Ok(r) | Err(r) => r,
    }
}

async fn handle(guard: Guard, request: Request, next: Next) -> Result<Response, Response> {
    if !is_creating(request.method(), request.uri().path()) {
        return Ok(next.run(request).await);
    }
    let Some(raw) = request.headers().get(KEY_HEADER) else {
        return Ok(next.run(request).await);
    };
    let key = raw
        .to_str()
        .ok()
        .filter(|k| valid_key(k))
        .map(str::to_owned)
        .ok_or_else(|| {
            ApiError::bad_request(
                "INVALID_IDEMPOTENCY_KEY",
                "Idempotency-Key must be 1 to 255 characters of A-Z a-z 0-9 - _ . : /",
            )
            .into_response()
        })?;
    let credential = request
        .extensions()
        .get::<Caller>()
        .map_or_else(|| "anonymous".to_owned(), |c| format!("token:{}", c.name));
    let scope = scope_key(&credential, request.method(), request.uri().path(), &key);
    let (mut parts, body) = request.into_parts();
    let bytes = read_body(body, guard.max_body)
        .await
        .map_err(IntoResponse::into_response)?;
    let Some(fingerprint) = fingerprint(&bytes) else {
        // Not JSON: the handler answers 400 and nothing is stored.
        return Ok(next
            .run(Request::from_parts(parts, Body::from(bytes)))
            .await);
    };
    let Some(_slot) = guard.in_flight.enter(&scope, guard.wait).await else {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "IDEMPOTENCY_KEY_IN_FLIGHT",
            "another request with this Idempotency-Key is still running; retry shortly",
        )
        .into_response());
    };
    let record = guard
        .store
        .idempotency("", &scope, (guard.clock)())
        .await
        .map_err(|e| {
            tracing::warn!(error = %e, "idempotency records unreadable");
            ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "IDEMPOTENCY_UNAVAILABLE",
                "the idempotency records cannot be read; the request was not run",
            )
            .into_response()
        })?;
    match record {
        Some(r) if r.fingerprint == fingerprint => Ok(replay(r.status, r.body)),
        Some(_) => Err(ApiError::new(
            StatusCode::CONFLICT,
            "IDEMPOTENCY_KEY_REUSED",
            "this Idempotency-Key was used with a different request body",
        )
        .into_response()),
        None => {
            parts.extensions.insert(IdempotencyScope {
                key: scope,
                fingerprint,
            });
            Ok(next
                .run(Request::from_parts(parts, Body::from(bytes)))
                .await)
        }
    }
}

/// The idempotency scope the middleware attached to a creating request
/// (`None` without an `Idempotency-Key`).
#[derive(Debug, Clone, Default)]
pub struct Scope(pub Option<IdempotencyScope>);

impl<S: Send + Sync> FromRequestParts<S> for Scope {
    type Rejection = Infallible;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        Ok(Scope(parts.extensions.get::<IdempotencyScope>().cloned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_shape() {
        assert!(valid_key("order-conf-98421"));
        assert!(valid_key("a:b/c.d_e-F9"));
        assert!(valid_key(&"k".repeat(255)));
        assert!(!valid_key(""));
        assert!(!valid_key(&"k".repeat(256)));
        assert!(!valid_key("has space"));
        assert!(!valid_key("é"));
        assert!(!valid_key("a\u{0}b"));
    }

    #[test]
    fn fingerprint_ignores_whitespace_and_order() {
        let a = fingerprint(br#"{"a": 1, "b": {"y": [1, 2], "x": "s"}}"#);
        let b = fingerprint(br#"{"b":{"x":"s","y":[1,2]},"a":1}"#);
        assert_eq!(a, b);
        assert_ne!(a, fingerprint(br#"{"a": 2, "b": {"y": [1, 2], "x": "s"}}"#));
        assert_ne!(fingerprint(b"[1,2]"), fingerprint(b"[2,1]"));
        assert_eq!(fingerprint(b"  "), fingerprint(b""));
        assert_eq!(fingerprint(b"{nope"), None);
    }

    #[test]
    fn creating_routes() {
        assert!(is_creating(&Method::POST, "/v1/definitions"));
        assert!(is_creating(&Method::POST, "/v1/executions"));
        assert!(is_creating(&Method::POST, "/v1/executions/x/signals/go"));
        assert!(is_creating(&Method::POST, "/v1/executions/x/cancel"));
        assert!(!is_creating(&Method::GET, "/v1/executions"));
        assert!(!is_creating(&Method::POST, "/v1/executions/x/wait"));
        assert!(!is_creating(&Method::POST, "/v1/workers"));
        assert!(!is_creating(&Method::POST, "/v1/workers/s/poll"));
        assert!(!is_creating(&Method::POST, "/v1/tasks/t/result"));
    }

    #[tokio::test]
    async fn in_flight_waits_then_gives_up() {
        let reg = InFlight::default();
        let first = reg.enter("k", Duration::from_millis(10)).await;
        assert!(first.is_some());
        assert!(reg.enter("k", Duration::from_millis(20)).await.is_none());
        assert!(reg
            .enter("other", Duration::from_millis(20))
            .await
            .is_some());
        drop(first);
        assert!(reg.is_empty());
        assert!(reg.enter("k", Duration::from_millis(20)).await.is_some());
        assert!(reg.is_empty());
    }
}
