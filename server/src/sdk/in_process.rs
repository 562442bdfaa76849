//! A [`Transport`] that calls an axum [`Router`] directly, without a socket:
//! the SDK against the real API in the same process (tests, embedding, the
//! simulation's single-process runs).

use std::time::Duration;

use axum::body::Body;
use axum::Router;
use tower::ServiceExt;

use orbit_sdk::{BoxFuture, HttpRequest, HttpResponse, Transport, TransportError};

/// Sends requests straight into a router (for example `orbit_server::api::app(state)`).
#[derive(Debug, Clone)]
pub struct InProcessTransport {
    router: Router,
    default_timeout: Duration,
}

impl InProcessTransport {
    /// A transport into `router`.
    pub fn new(router: Router) -> Self {
        InProcessTransport {
            router,
            default_timeout: Duration::from_secs(30),
        }
    }

    async fn exchange(&self, request: HttpRequest) -> Result<HttpResponse, TransportError> {
        let timeout = request.timeout.unwrap_or(self.default_timeout);
        let mut builder = axum::http::Request::builder()
            .method(request.method.as_str())
            .uri(request.path.as_str());
        for (name, value) in &request.headers {
            builder = builder.header(name.as_str(), value.as_str());
        }
        let body = match request.body {
            Some(bytes) => {
                builder = builder.header("content-type", "application/json");
                Body::from(bytes)
            }
            None => Body::empty(),
        };
        let http_request = builder
            .body(body)
            .map_err(|e| TransportError::Invalid(e.to_string()))?;
        let call = self.router.clone().oneshot(http_request);
        let response = match tokio::time::timeout(timeout, call).await {
            Ok(Ok(response)) => response,
            Ok(Err(never)) => match never {},
            Err(_) => return Err(TransportError::Timeout(timeout)),
        };
        let status = response.status().as_u16();
        let headers = response
            .headers()
            .iter()
            .map(|(k, v)| {
                (
                    k.as_str().to_ascii_lowercase(),
                    String::from_utf8_lossy(v.as_bytes()).into_owned(),
                )
            })
            .collect();
        let body = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .map_err(|e| TransportError::Io(e.to_string()))?
            .to_vec();
        Ok(HttpResponse {
            status,
            headers,
            body,
        })
    }
}

impl Transport for InProcessTransport {
    fn send(&self, request: HttpRequest) -> BoxFuture<'_, Result<HttpResponse, TransportError>> {
        Box::pin(self.exchange(request))
    }
}
