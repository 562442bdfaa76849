//! The starters' HTTP client: hyper's own pooled HTTP/1.1 client, without
//! the per-request work of a general-purpose one (reqwest parses each
//! request's URL twice more for its redirect policy, and wraps every call
//! in layers the bench does not use). The load shares the machine with the
//! server it measures; every cycle it saves is the server's. Workers keep
//! the SDK's transport: they are the users' code under test.

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::header::{HeaderValue, CONTENT_TYPE};
use hyper::{Method, Request, Uri};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde::de::DeserializeOwned;
use serde_json::Value;
use std::time::Duration;

/// A pooled client (cheap to clone: clones share the pool).
#[derive(Clone)]
pub(super) struct Http {
    client: Client<HttpConnector, Full<Bytes>>,
    /// The longest a call may take, answer read included.
    timeout: Duration,
}

/// Why a call failed.
#[derive(Debug)]
pub(super) enum CallError {
    /// No answer: the server could not be reached, or did not answer in
    /// time (another server of a cluster may).
    Unreachable(String),
    /// The server answered with an error (or with something unreadable).
    Answered(String),
}

impl std::fmt::Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CallError::Unreachable(e) | CallError::Answered(e) => f.write_str(e),
        }
    }
}

/// A server's base URL, parsed once: a call's URI is its scheme and
/// authority with the call's path.
#[derive(Clone)]
pub(super) struct Base {
    scheme: hyper::http::uri::Scheme,
    authority: hyper::http::uri::Authority,
    /// The base's own path, without its trailing `/` (empty for most).
    prefix: String,
}

impl Base {
    /// Parses `url` (`http://HOST:PORT[/PREFIX]`).
    pub(super) fn parse(url: &str) -> Result<Base, String> {
        let uri: Uri = url
            .parse()
            .map_err(|e| format!("server URL `{url}`: {e}"))?;
        let (Some(scheme), Some(authority)) = (uri.scheme(), uri.authority()) else {
            return Err(format!("server URL `{url}`: expected http://HOST:PORT"));
        };
        if scheme != &hyper::http::uri::Scheme::HTTP {
            return Err(format!("server URL `{url}`: the bench speaks plain http"));
        }
        Ok(Base {
            scheme: scheme.clone(),
            authority: authority.clone(),
            prefix: uri.path().trim_end_matches('/').to_owned(),
        })
    }

    /// The URI of `path` (absolute, with an optional query) on this server.
    fn uri(&self, path: &str) -> Result<Uri, String> {
        let path_and_query: Result<hyper::http::uri::PathAndQuery, _> = if self.prefix.is_empty() {
            path.parse()
        } else {
            format!("{}{path}", self.prefix).parse()
        };
        Uri::builder()
            .scheme(self.scheme.clone())
            .authority(self.authority.clone())
            .path_and_query(path_and_query.map_err(|e| format!("{path}: {e}"))?)
            .build()
            .map_err(|e| format!("{path}: {e}"))
    }
}

impl std::fmt::Display for Base {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}://{}{}", self.scheme, self.authority, self.prefix)
    }
}

impl Http {
    /// A client whose calls give up after `timeout`.
    pub(super) fn new(timeout: Duration) -> Http {
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        connector.set_connect_timeout(Some(Duration::from_secs(5)));
        let client = Client::builder(TokioExecutor::new())
            .pool_max_idle_per_host(usize::MAX)
            .build(connector);
        Http { client, timeout }
    }

    /// Calls `path` on `base` with `body` as JSON, reading the answer as
    /// `T`; a non-2xx answer is an error with its body.
    pub(super) async fn call<T: DeserializeOwned>(
        &self,
        method: Method,
        base: &Base,
        path: &str,
        body: Option<&Value>,
    ) -> Result<T, CallError> {
        let uri = base.uri(path).map_err(CallError::Answered)?;
        let mut request = Request::builder().method(method).uri(uri);
        let bytes = match body {
            Some(b) => {
                request =
                    request.header(CONTENT_TYPE, HeaderValue::from_static("application/json"));
                Bytes::from(serde_json::to_vec(b).unwrap_or_default())
            }
            None => Bytes::new(),
        };
        let request = request
            .body(Full::new(bytes))
            .map_err(|e| CallError::Answered(format!("{base}{path}: {e}")))?;
        let unreachable =
            |e: &dyn std::fmt::Display| CallError::Unreachable(format!("{base}{path}: {e}"));
        let exchange = async {
            let response = self
                .client
                .request(request)
                .await
                .map_err(|e| unreachable(&e))?;
            let status = response.status();
            let text = response
                .into_body()
                .collect()
                .await
                .map_err(|e| unreachable(&e))?
                .to_bytes();
            Ok::<_, CallError>((status, text))
        };
        let (status, text) = tokio::time::timeout(self.timeout, exchange)
            .await
            .map_err(|_| unreachable(&format!("no answer within {:?}", self.timeout)))??;
        if !status.is_success() {
            return Err(CallError::Answered(format!(
                "{base}{path}: {status} {}",
                String::from_utf8_lossy(&text)
            )));
        }
        let text: &[u8] = if text.is_empty() { b"null" } else { &text };
        serde_json::from_slice(text)
            .map_err(|e| CallError::Answered(format!("{base}{path}: bad JSON: {e}")))
    }
}

#[cfg(test)]
mod tests {
    use super::Base;

    #[test]
    fn a_call_goes_to_its_path_on_the_base() {
        let uri = |base: &str, path: &str| Base::parse(base).and_then(|b| b.uri(path));
        assert_eq!(
            uri("http://127.0.0.1:7811", "/v1/executions?wait_ms=30000").map(|u| u.to_string()),
            Ok("http://127.0.0.1:7811/v1/executions?wait_ms=30000".to_owned())
        );
        assert_eq!(
            uri("http://localhost:7811/orbit/", "/v1/definitions").map(|u| u.to_string()),
            Ok("http://localhost:7811/orbit/v1/definitions".to_owned())
        );
        assert!(Base::parse("https://orbit.example.com").is_err());
        assert!(Base::parse("127.0.0.1:7811").is_err());
        assert!(Base::parse("http://bad host").is_err());
    }
}
