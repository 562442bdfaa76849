//! [`DirectTransport`]: requests straight to the server over hyper's pooled
//! HTTP/1.1 client, and [`default_transport`], the SDK's choice of
//! transport for a server URL.
//!
//! A worker sends a request for every few tasks, so what its transport does
//! per request is paid on every step. reqwest ([`ReqwestTransport`]) parses
//! each request's URL again for its redirect policy and wraps every call in
//! redirect and retry layers: under callgrind about half of the transport's
//! instructions per poll, none of which a worker talking to its server
//! needs. Plain `http://` servers are spoken to directly; reqwest stays for
//! `https://` (it brings TLS) and for a server reached through an HTTP
//! proxy named in the environment (it honors `HTTP_PROXY`, `ALL_PROXY` and
//! `NO_PROXY`).

use crate::transport::{
    error_chain, is_loopback, root_cause, BoxFuture, HttpRequest, HttpResponse, Method,
    ReqwestTransport, Transport, TransportError,
};
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::header::CONTENT_TYPE;
use hyper::http::uri::{Authority, PathAndQuery, Scheme};
use hyper::{Request, Uri};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use std::sync::Arc;
use std::time::Duration;

/// The transport the SDK uses for the server at `base_url`: a
/// [`DirectTransport`] for a plain `http://` server, unless the environment
/// names an HTTP proxy and the server is not on this machine; a
/// [`ReqwestTransport`] otherwise.
pub fn default_transport(base_url: &str) -> Result<Arc<dyn Transport>, TransportError> {
    let direct = DirectTransport::new(base_url)
        .ok()
        .filter(|t| t.loopback || !proxy_in_environment());
    Ok(match direct {
        Some(t) => Arc::new(t),
        None => Arc::new(ReqwestTransport::new(base_url)?),
    })
}

/// Whether the environment names a proxy for `http://` URLs, as reqwest
/// reads it.
fn proxy_in_environment() -> bool {
    ["http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY"]
        .iter()
        .any(|name| std::env::var_os(name).is_some_and(|v| !v.is_empty()))
}

/// Plain HTTP/1.1 to one server over hyper's pooled client: no proxy, no
/// TLS, no redirects (the ORBIT API answers every call itself).
#[derive(Clone)]
pub struct DirectTransport {
    base: String,
    authority: Authority,
    /// The base URL's own path, without its trailing `/` (empty for most).
    prefix: String,
    loopback: bool,
    client: Client<HttpConnector, Full<Bytes>>,
    default_timeout: Duration,
}

impl std::fmt::Debug for DirectTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DirectTransport")
            .field("base", &self.base)
            .finish_non_exhaustive()
    }
}

impl DirectTransport {
    /// A transport to the server at `base_url` (`http://127.0.0.1:7373`,
    /// with an optional path prefix). Refused for any other scheme.
    pub fn new(base_url: &str) -> Result<Self, TransportError> {
        let base = base_url.trim_end_matches('/').to_string();
        let invalid =
            |why: &str| TransportError::Invalid(format!("server URL `{base_url}`: {why}"));
        let uri: Uri = base.parse().map_err(|e| invalid(&format!("{e}")))?;
        if uri.scheme() != Some(&Scheme::HTTP) {
            return Err(invalid("the direct transport speaks plain http"));
        }
        let authority = uri.authority().cloned().ok_or_else(|| invalid("no host"))?;
        let loopback = is_loopback(authority.host());
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        connector.set_connect_timeout(Some(Duration::from_secs(5)));
        let client = Client::builder(TokioExecutor::new()).build(connector);
        Ok(DirectTransport {
            prefix: uri.path().trim_end_matches('/').to_owned(),
            base,
            authority,
            loopback,
            client,
            default_timeout: Duration::from_secs(30),
        })
    }

    /// The base URL requests are sent to.
    pub fn base_url(&self) -> &str {
        &self.base
    }

    /// The URI of `path` (absolute, with an optional query) on the server.
    fn uri(&self, path: &str) -> Result<Uri, TransportError> {
        let path_and_query: Result<PathAndQuery, _> = if self.prefix.is_empty() {
            path.parse()
        } else {
            format!("{}{path}", self.prefix).parse()
        };
        let invalid = |e: &dyn std::fmt::Display| TransportError::Invalid(format!("{path}: {e}"));
        Uri::builder()
            .scheme(Scheme::HTTP)
            .authority(self.authority.clone())
            .path_and_query(path_and_query.map_err(|e| invalid(&e))?)
            .build()
            .map_err(|e| invalid(&e))
    }

    async fn exchange(&self, request: HttpRequest) -> Result<HttpResponse, TransportError> {
        let method = match request.method {
            Method::Get => hyper::Method::GET,
            Method::Post => hyper::Method::POST,
            Method::Delete => hyper::Method::DELETE,
        };
        let mut builder = Request::builder()
            .method(method)
            .uri(self.uri(&request.path)?);
        for (name, value) in &request.headers {
            builder = builder.header(name.as_str(), value.as_str());
        }
        let body = match request.body {
            Some(body) => {
                builder = builder.header(CONTENT_TYPE, "application/json");
                Full::new(Bytes::from(body))
            }
            None => Full::default(),
        };
        let request_out = builder
            .body(body)
            .map_err(|e| TransportError::Invalid(error_chain(&e)))?;
        let timeout = request.timeout.unwrap_or(self.default_timeout);
        let answer = async {
            let response = self.client.request(request_out).await.map_err(|e| {
                if e.is_connect() {
                    TransportError::Connect {
                        target: self.base.clone(),
                        message: root_cause(&e),
                    }
                } else {
                    TransportError::Io(error_chain(&e))
                }
            })?;
            let (parts, body) = response.into_parts();
            let body = body
                .collect()
                .await
                .map_err(|e| TransportError::Io(error_chain(&e)))?
                .to_bytes();
            let headers = parts
                .headers
                .iter()
                .map(|(k, v)| {
                    (
                        k.as_str().to_owned(),
                        String::from_utf8_lossy(v.as_bytes()).into_owned(),
                    )
                })
                .collect();
            Ok(HttpResponse {
                status: parts.status.as_u16(),
                headers,
                body: body.to_vec(),
            })
        };
        tokio::time::timeout(timeout, answer)
            .await
            .map_err(|_| TransportError::Timeout(timeout))?
    }
}

impl Transport for DirectTransport {
    fn send(&self, request: HttpRequest) -> BoxFuture<'_, Result<HttpResponse, TransportError>> {
        Box::pin(self.exchange(request))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::DirectTransport;

    #[test]
    fn only_plain_http_servers_are_spoken_to_directly() {
        assert!(DirectTransport::new("http://127.0.0.1:7373").is_ok());
        assert!(DirectTransport::new("https://orbit.example.com").is_err());
        assert!(DirectTransport::new("not a url").is_err());
        assert!(DirectTransport::new("ftp://x").is_err());
        let local = DirectTransport::new("http://[::1]:7373/").unwrap();
        assert!(local.loopback);
        assert!(
            !DirectTransport::new("http://orbit.internal:7373")
                .unwrap()
                .loopback
        );
    }

    #[test]
    fn a_request_goes_to_the_base_path_and_the_call_path() {
        let cases = [
            (
                "http://127.0.0.1:7373",
                "/v1/workers/s/poll",
                "http://127.0.0.1:7373/v1/workers/s/poll",
            ),
            (
                "http://localhost:7373/",
                "/v1/executions?wait_ms=30000",
                "http://localhost:7373/v1/executions?wait_ms=30000",
            ),
            (
                "http://[::1]:7373/deep/prefix/",
                "/v1/executions/a%2Fb/wait?timeout_ms=1",
                "http://[::1]:7373/deep/prefix/v1/executions/a%2Fb/wait?timeout_ms=1",
            ),
        ];
        for (base, path, want) in cases {
            let t = DirectTransport::new(base).unwrap();
            assert_eq!(t.uri(path).unwrap().to_string(), want);
        }
        let t = DirectTransport::new("http://127.0.0.1:7373").unwrap();
        assert!(t.uri("/bad path").is_err());
    }
}
