//! The SDK's error type: what went wrong with a call to the server.

use crate::transport::TransportError;

/// An error returned by an SDK call.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Error {
    /// The server answered with an error body `{"error": {"code", "message", ...}}`.
    #[error("{code} ({status}): {message}")]
    Api {
        /// The HTTP status.
        status: u16,
        /// The server's `UPPER_SNAKE` code.
        code: String,
        /// The server's message.
        message: String,
        /// The whole `error` object, details included.
        details: serde_json::Value,
    },
    /// No answer came back (after the retries the call allows).
    #[error(transparent)]
    Transport(#[from] TransportError),
    /// The server answered something the SDK could not read.
    #[error("unexpected answer from the server (status {status}): {message}")]
    Decode {
        /// The HTTP status.
        status: u16,
        /// What was wrong.
        message: String,
    },
    /// The caller passed something that cannot be sent.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
}

impl Error {
    /// The server's error code, for an [`Error::Api`].
    pub fn code(&self) -> Option<&str> {
        match self {
            Error::Api { code, .. } => Some(code),
            _ => None,
        }
    }

    /// The HTTP status, when the server answered.
    pub fn status(&self) -> Option<u16> {
        match self {
            Error::Api { status, .. } | Error::Decode { status, .. } => Some(*status),
            _ => None,
        }
    }

    /// True when the server refused the request (a 4xx answer).
    pub fn is_refusal(&self) -> bool {
        matches!(self.status(), Some(s) if (400..500).contains(&s))
    }

    /// Builds the error for a non-2xx answer from its status and body.
    pub(crate) fn from_response(status: u16, body: &[u8]) -> Error {
        let parsed: Option<serde_json::Value> = serde_json::from_slice(body).ok();
        let object = parsed.as_ref().and_then(|v| v.get("error"));
        match object {
            Some(err) => Error::Api {
                status,
                code: err
                    .get("code")
                    .and_then(|c| c.as_str())
                    .unwrap_or("UNKNOWN")
                    .to_string(),
                message: err
                    .get("message")
                    .and_then(|c| c.as_str())
                    .unwrap_or_default()
                    .to_string(),
                details: err.clone(),
            },
            None => Error::Api {
                status,
                code: format!("HTTP_{status}"),
                message: String::from_utf8_lossy(body).chars().take(500).collect(),
                details: serde_json::Value::Null,
            },
        }
    }
}
