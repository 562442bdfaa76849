//! The SDK's pluggable HTTP transport: a [`Transport`] sends one
//! [`HttpRequest`] and returns the [`HttpResponse`], or a [`TransportError`]
//! when no answer came back. The default, [`ReqwestTransport`], speaks real
//! HTTP; the simulation plugs in a transport over its simulated network.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

/// A boxed, sendable future, as returned by [`Transport::send`].
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// HTTP methods the ORBIT API uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    /// `GET`
    Get,
    /// `POST`
    Post,
    /// `DELETE`
    Delete,
}

impl Method {
    /// The method's name on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            Method::Get => "GET",
            Method::Post => "POST",
            Method::Delete => "DELETE",
        }
    }
}

/// One request, addressed by its path (and query) relative to the server.
#[derive(Debug, Clone, PartialEq)]
pub struct HttpRequest {
    /// The method.
    pub method: Method,
    /// Path and query, starting with `/` (`/v1/executions?status=running`).
    pub path: String,
    /// Extra headers (`Idempotency-Key`, `Authorization`, `Accept`).
    pub headers: Vec<(String, String)>,
    /// A JSON body, when there is one.
    pub body: Option<Vec<u8>>,
    /// How long to wait for the answer before giving up (long-polls need more
    /// than the transport's default).
    pub timeout: Option<Duration>,
}

impl HttpRequest {
    /// A request without headers, body or timeout.
    pub fn new(method: Method, path: impl Into<String>) -> Self {
        HttpRequest {
            method,
            path: path.into(),
            headers: Vec::new(),
            body: None,
            timeout: None,
        }
    }

    /// The value of a header (case-insensitive name), if set.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// The server's answer.
#[derive(Debug, Clone, PartialEq)]
pub struct HttpResponse {
    /// The status code.
    pub status: u16,
    /// Response headers (names lower-case).
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: Vec<u8>,
}

impl HttpResponse {
    /// The value of a header (case-insensitive name), if present.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// No answer came back.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TransportError {
    /// The server could not be reached (refused, reset, DNS, unreachable).
    #[error("cannot connect to {target}: {message}")]
    Connect {
        /// What was being contacted.
        target: String,
        /// Why it failed.
        message: String,
    },
    /// The request was sent but no answer arrived in time.
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    /// Any other failure while exchanging the request (connection dropped
    /// mid-answer, malformed HTTP).
    #[error("request failed: {0}")]
    Io(String),
    /// The request could not even be built (a bad base URL).
    #[error("invalid request: {0}")]
    Invalid(String),
}

impl TransportError {
    /// Whether sending again may help. Everything but an invalid request may.
    pub fn is_retryable(&self) -> bool {
        !matches!(self, TransportError::Invalid(_))
    }
}

/// Sends HTTP requests. Implementations must be cheap to share between tasks.
pub trait Transport: Send + Sync {
    /// Sends one request and waits for its answer.
    fn send(&self, request: HttpRequest) -> BoxFuture<'_, Result<HttpResponse, TransportError>>;
}

/// HTTP/1.1 (and HTTPS, and proxies from the environment) over reqwest: the
/// transport the SDK uses where [`crate::DirectTransport`] does not do
/// ([`crate::default_transport`]), and the one whose client streams
/// `text/event-stream` ([`ReqwestTransport::http_client`]).
#[derive(Debug, Clone)]
pub struct ReqwestTransport {
    base: String,
    /// `base` parsed once: each request's URL is this with its own path and
    /// query, so no request parses a host again.
    parsed: reqwest::Url,
    client: reqwest::Client,
    default_timeout: Duration,
}

impl ReqwestTransport {
    /// A transport to the server at `base_url` (`http://127.0.0.1:7373`).
    pub fn new(base_url: &str) -> Result<Self, TransportError> {
        let base = base_url.trim_end_matches('/').to_string();
        let parsed = reqwest::Url::parse(&base)
            .map_err(|e| TransportError::Invalid(format!("server URL `{base_url}`: {e}")))?;
        if parsed.scheme() != "http" && parsed.scheme() != "https" {
            return Err(TransportError::Invalid(format!(
                "server URL `{base_url}`: the scheme must be http or https"
            )));
        }
        let host = parsed.host_str().unwrap_or_default();
        let mut builder = reqwest::Client::builder().connect_timeout(Duration::from_secs(5));
        if is_loopback(host) {
            // A proxy configured for the outside world must not intercept a
            // local server.
            builder = builder.no_proxy();
        }
        let client = builder
            .build()
            .map_err(|e| TransportError::Invalid(e.to_string()))?;
        Ok(ReqwestTransport {
            base,
            parsed,
            client,
            default_timeout: Duration::from_secs(30),
        })
    }

    /// The underlying reqwest client (for calls the [`Transport`] trait does
    /// not cover, such as streaming `text/event-stream`).
    pub fn http_client(&self) -> &reqwest::Client {
        &self.client
    }

    /// The base URL requests are sent to.
    pub fn base_url(&self) -> &str {
        &self.base
    }

    async fn exchange(&self, request: HttpRequest) -> Result<HttpResponse, TransportError> {
        let url = endpoint(&self.parsed, &request.path);
        let method = match request.method {
            Method::Get => reqwest::Method::GET,
            Method::Post => reqwest::Method::POST,
            Method::Delete => reqwest::Method::DELETE,
        };
        let timeout = request.timeout.unwrap_or(self.default_timeout);
        let mut builder = self.client.request(method, url).timeout(timeout);
        for (name, value) in &request.headers {
            builder = builder.header(name.as_str(), value.as_str());
        }
        if let Some(body) = request.body {
            builder = builder
                .header("content-type", "application/json")
                .body(body);
        }
        let classify = |e: reqwest::Error| {
            if e.is_timeout() {
                TransportError::Timeout(timeout)
            } else if e.is_connect() {
                TransportError::Connect {
                    target: self.base.clone(),
                    message: root_cause(&e),
                }
            } else if e.is_builder() {
                TransportError::Invalid(error_chain(&e))
            } else {
                TransportError::Io(error_chain(&e))
            }
        };
        let response = builder.send().await.map_err(classify)?;
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
        let body = response.bytes().await.map_err(classify)?.to_vec();
        Ok(HttpResponse {
            status,
            headers,
            body,
        })
    }
}

/// The URL of `path` (an absolute path with an optional `?query`, its
/// segments already escaped) on the server at `base`: `base`'s own path, if
/// any, then `path`; the same URL as parsing `base` and `path` joined as
/// text, without parsing the scheme and host again.
pub(crate) fn endpoint(base: &reqwest::Url, path: &str) -> reqwest::Url {
    let (path, query) = match path.split_once('?') {
        Some((path, query)) => (path, Some(query)),
        None => (path, None),
    };
    let mut url = base.clone();
    match base.path().trim_end_matches('/') {
        "" => url.set_path(path),
        prefix => url.set_path(&format!("{prefix}{path}")),
    }
    url.set_query(query);
    url
}

/// Whether `host` (a name, an IPv4 address or a bracketed IPv6 one) is
/// this machine.
pub(crate) fn is_loopback(host: &str) -> bool {
    host.eq_ignore_ascii_case("localhost")
        || host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// An error and its sources, joined with `: ` (reqwest hides the useful part
/// — "connection refused" — in the source chain).
pub(crate) fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(inner) = source {
        let part = inner.to_string();
        if !text.contains(&part) {
            text.push_str(": ");
            text.push_str(&part);
        }
        source = inner.source();
    }
    text
}

/// The innermost error of a chain ("Connection refused (os error 111)").
pub(crate) fn root_cause(error: &dyn std::error::Error) -> String {
    let mut last = error.to_string();
    let mut source = error.source();
    while let Some(inner) = source {
        last = inner.to_string();
        source = inner.source();
    }
    last
}

impl Transport for ReqwestTransport {
    fn send(&self, request: HttpRequest) -> BoxFuture<'_, Result<HttpResponse, TransportError>> {
        Box::pin(self.exchange(request))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::endpoint;

    #[test]
    fn an_endpoint_is_the_url_its_text_would_parse_to() {
        let bases = [
            "http://127.0.0.1:7373",
            "http://localhost:7373/",
            "https://orbit.example.com/prefix",
            "http://[::1]:7373/deep/prefix/",
        ];
        let paths = [
            "/v1/workers/poll",
            "/v1/executions?wait_ms=30000",
            "/v1/executions/a%2Fb%3Fc/wait?timeout_ms=100&x=y",
            "/v1/definitions/x%20y",
        ];
        for base in bases {
            let parsed = reqwest::Url::parse(base).unwrap();
            for path in paths {
                let joined = format!("{}{path}", base.trim_end_matches('/'));
                assert_eq!(
                    endpoint(&parsed, path),
                    reqwest::Url::parse(&joined).unwrap(),
                    "{base} + {path}"
                );
            }
        }
    }
}
