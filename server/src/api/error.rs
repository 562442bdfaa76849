//! The API's one error type: every failure answers
//! `{"error": {"code": "UPPER_SNAKE", "message": "..."}}` with a fitting
//! status. Internal errors answer an opaque body and are logged.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};

/// An error answer of the HTTP API.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{status} {code}: {message}")]
pub struct ApiError {
    /// HTTP status.
    pub status: StatusCode,
    /// `UPPER_SNAKE` code.
    pub code: &'static str,
    /// Human-readable message.
    pub message: String,
    /// Extra members of the `error` object (e.g. `diagnostics`).
    pub details: serde_json::Map<String, Value>,
}

impl ApiError {
    /// An error with `status`, `code` and `message`.
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            code,
            message: message.into(),
            details: serde_json::Map::new(),
        }
    }

    /// `400` with `code`.
    pub fn bad_request(code: &'static str, message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, code, message)
    }

    /// `400 INVALID_REQUEST`: a body or parameter of the wrong shape.
    pub fn invalid(message: impl Into<String>) -> ApiError {
        ApiError::bad_request("INVALID_REQUEST", message)
    }

    /// `500 INTERNAL`: logged with its cause, answered without it.
    pub fn internal(cause: impl std::fmt::Display) -> ApiError {
        tracing::error!(error = %cause, "internal error");
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "INTERNAL",
            "internal server error",
        )
    }

    /// `503 STORAGE_ERROR`.
    pub fn storage(cause: impl std::fmt::Display) -> ApiError {
        tracing::warn!(error = %cause, "storage error");
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "STORAGE_ERROR",
            format!("storage error: {cause}"),
        )
    }

    /// Adds a member to the `error` object.
    pub fn with(mut self, key: &str, value: Value) -> ApiError {
        self.details.insert(key.to_owned(), value);
        self
    }

    /// The JSON body.
    pub fn body(&self) -> Value {
        let mut error = serde_json::Map::new();
        error.insert("code".to_owned(), json!(self.code));
        error.insert("message".to_owned(), json!(self.message));
        for (k, v) in &self.details {
            error.insert(k.clone(), v.clone());
        }
        json!({ "error": error })
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.status, Json(self.body())).into_response()
    }
}

/// `404 NOT_FOUND` for a route the API does not have.
pub async fn not_found() -> ApiError {
    ApiError::new(StatusCode::NOT_FOUND, "NOT_FOUND", "no such route")
}
