//! [`TurmoilTransport`]: the SDK's [`Transport`] over turmoil's simulated
//! TCP, speaking HTTP/1.1 with hyper's client connection API (one connection
//! per request, so a partition or a server crash fails only the requests in
//! flight, as a real network would).

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use orbit_sdk::{BoxFuture, HttpRequest, HttpResponse, Method, Transport, TransportError};
use std::time::Duration;

/// Sends SDK requests to `host:port` on the simulated network.
#[derive(Debug, Clone)]
pub struct TurmoilTransport {
    server: String,
    default_timeout: Duration,
}

impl TurmoilTransport {
    /// A transport to `server` (`server:7373`); requests without a timeout
    /// give up after 30 s of virtual time.
    pub fn new(server: impl Into<String>) -> TurmoilTransport {
        TurmoilTransport {
            server: server.into(),
            default_timeout: Duration::from_secs(30),
        }
    }

    async fn exchange(&self, request: HttpRequest) -> Result<HttpResponse, TransportError> {
        let stream = turmoil::net::TcpStream::connect(self.server.as_str())
            .await
            .map_err(|e| TransportError::Connect {
                target: self.server.clone(),
                message: e.to_string(),
            })?;
        let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| TransportError::Io(e.to_string()))?;
        tokio::spawn(async move {
            let _ = connection.await;
        });
        let method = match request.method {
            Method::Get => hyper::Method::GET,
            Method::Post => hyper::Method::POST,
            Method::Delete => hyper::Method::DELETE,
        };
        let mut builder = hyper::Request::builder()
            .method(method)
            .uri(request.path.as_str())
            .header("host", self.server.as_str());
        for (name, value) in &request.headers {
            builder = builder.header(name.as_str(), value.as_str());
        }
        let body = match request.body {
            Some(body) => {
                builder = builder.header("content-type", "application/json");
                Bytes::from(body)
            }
            None => Bytes::new(),
        };
        let http_request = builder
            .body(Full::new(body))
            .map_err(|e| TransportError::Invalid(e.to_string()))?;
        let response = sender
            .send_request(http_request)
            .await
            .map_err(|e| TransportError::Io(e.to_string()))?;
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
        let body = response
            .into_body()
            .collect()
            .await
            .map_err(|e| TransportError::Io(e.to_string()))?
            .to_bytes()
            .to_vec();
        Ok(HttpResponse {
            status,
            headers,
            body,
        })
    }
}

impl Transport for TurmoilTransport {
    fn send(&self, request: HttpRequest) -> BoxFuture<'_, Result<HttpResponse, TransportError>> {
        Box::pin(async move {
            let timeout = request.timeout.unwrap_or(self.default_timeout);
            match tokio::time::timeout(timeout, self.exchange(request)).await {
                Ok(result) => result,
                Err(_) => Err(TransportError::Timeout(timeout)),
            }
        })
    }
}
