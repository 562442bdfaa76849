//! Extractors whose rejections use ORBIT's error shape: bodies over the
//! limit are `413 BODY_TOO_LARGE`, malformed JSON (bad syntax, non-UTF-8,
//! nesting too deep) is `400 INVALID_JSON`, and well-formed JSON of the wrong
//! shape (wrong types, missing or unknown fields) is `400 INVALID_REQUEST`.
//! The `Content-Type` is not insisted on.

use super::error::ApiError;
use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use axum::http::StatusCode;
use serde::de::DeserializeOwned;

/// A JSON body.
#[derive(Debug, Clone)]
pub struct Json<T>(pub T);

/// A JSON body that may be absent (an empty body reads as `T::default()`).
#[derive(Debug, Clone)]
pub struct OptionalJson<T>(pub T);

async fn body_bytes<S: Send + Sync>(req: Request, state: &S) -> Result<Bytes, ApiError> {
    Bytes::from_request(req, state).await.map_err(|rejection| {
        if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "BODY_TOO_LARGE",
                "the request body is larger than the server's --max-body",
            )
        } else {
            ApiError::bad_request("INVALID_BODY", rejection.body_text())
        }
    })
}

/// Parses `bytes` as `T`, classifying the failure.
pub fn parse<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    serde_json::from_slice(bytes).map_err(|e| match e.classify() {
        serde_json::error::Category::Data => {
            ApiError::invalid(format!("invalid request body: {e}"))
        }
        _ => ApiError::bad_request("INVALID_JSON", format!("malformed JSON: {e}")),
    })
}

impl<T: DeserializeOwned, S: Send + Sync> FromRequest<S> for Json<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let bytes = body_bytes(req, state).await?;
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Err(ApiError::bad_request(
                "INVALID_JSON",
                "a JSON body is required",
            ));
        }
        parse(&bytes).map(Json)
    }
}

impl<T: DeserializeOwned + Default, S: Send + Sync> FromRequest<S> for OptionalJson<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let bytes = body_bytes(req, state).await?;
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Ok(OptionalJson(T::default()));
        }
        parse(&bytes).map(OptionalJson)
    }
}

/// Query parameters.
#[derive(Debug, Clone)]
pub struct Query<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequestParts<S> for Query<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        axum::extract::Query::<T>::from_request_parts(parts, state)
            .await
            .map(|q| Query(q.0))
            .map_err(|e| ApiError::invalid(format!("invalid query: {}", e.body_text())))
    }
}

/// Path parameters, each checked: 1 to 512 characters, no control
/// characters (`wire::text_ok`, the rule the OpenAPI document publishes).
#[derive(Debug, Clone)]
pub struct Path<T>(pub T);

impl<T: DeserializeOwned + Send, S: Send + Sync> FromRequestParts<S> for Path<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let raw = axum::extract::RawPathParams::from_request_parts(parts, state)
            .await
            .map_err(|e| ApiError::invalid(format!("invalid path: {}", e.body_text())))?;
        for (name, value) in &raw {
            if !orbit_sdk::wire::text_ok(value, orbit_sdk::wire::PATH_PARAM_MAX) {
                return Err(ApiError::invalid(format!(
                    "path parameter `{name}` must be 1 to 512 characters without control characters"
                )));
            }
        }
        axum::extract::Path::<T>::from_request_parts(parts, state)
            .await
            .map(|p| Path(p.0))
            .map_err(|e| ApiError::invalid(format!("invalid path: {}", e.body_text())))
    }
}
