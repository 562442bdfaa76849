//! One `orbit.http` attempt: validate the input, check the allow-list,
//! send the request with the unit's idempotency key, and classify what
//! happened — a result to report (success, or a failure with its code), or
//! an uncertain outcome (the request may have reached the server).

use super::allow::allowed;
use super::HttpOptions;
use orbit_core::engine::{Outcome, Task};
use orbit_core::history::ErrorInfo;
use serde_json::{Map, Value};
use std::time::Duration;

/// What one attempt came to.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// Report this result with the delivery's token.
    Report(Outcome),
    /// The request may have been received: the attempt is uncertain, with
    /// this reason, and is redelivered with the same key.
    Uncertain(String),
}

fn failure(code: &str, message: impl Into<String>, retryable: bool) -> Verdict {
    Verdict::Report(Outcome::Error(ErrorInfo {
        code: code.to_string(),
        message: message.into(),
        retryable,
    }))
}

fn invalid(message: impl Into<String>) -> Verdict {
    failure("HTTP_INVALID_REQUEST", message, false)
}

/// The HTTP client shared by every attempt: no proxy from the environment,
/// redirects followed only to allowed hosts (at most `max_redirects`).
pub fn client(options: &HttpOptions) -> Result<reqwest::Client, reqwest::Error> {
    let allow = options.allow.clone();
    let max = options.max_redirects;
    let policy = reqwest::redirect::Policy::custom(move |attempt| {
        if attempt.previous().len() > max || !allowed(&allow, attempt.url()) {
            attempt.stop()
        } else {
            attempt.follow()
        }
    });
    reqwest::Client::builder()
        .redirect(policy)
        .no_proxy()
        .connect_timeout(options.connect_timeout)
        .user_agent(concat!("orbit/", env!("CARGO_PKG_VERSION")))
        .build()
}

/// Runs one attempt of `task` (an `orbit.http` unit).
pub async fn perform(client: &reqwest::Client, options: &HttpOptions, task: &Task) -> Verdict {
    let input = &task.input;
    let Some(method) = input.get("method").and_then(Value::as_str) else {
        return invalid("`method` must be a string");
    };
    let Ok(method) = reqwest::Method::from_bytes(method.to_ascii_uppercase().as_bytes()) else {
        return invalid(format!("`{method}` is not an HTTP method"));
    };
    let Some(url) = input.get("url").and_then(Value::as_str) else {
        return invalid("`url` must be a string");
    };
    let url = match reqwest::Url::parse(url) {
        Ok(u) if matches!(u.scheme(), "http" | "https") => u,
        Ok(u) => return invalid(format!("scheme `{}` is not http or https", u.scheme())),
        Err(e) => return invalid(format!("`{url}` is not a URL: {e}")),
    };
    if !allowed(&options.allow, &url) {
        let host = url.host_str().unwrap_or_default();
        return failure(
            "HTTP_HOST_NOT_ALLOWED",
            format!("host `{host}` is not allowed by --http-allow; no request was sent"),
            false,
        );
    }
    let timeout = match input.get("timeout") {
        None | Some(Value::Null) => options.default_timeout,
        Some(v) => match v.as_u64() {
            Some(ms) if ms > 0 => Duration::from_millis(ms).min(options.max_timeout),
            _ => return invalid("`timeout` must be a positive duration"),
        },
    };
    let mut request = client.request(method, url).timeout(timeout);
    let mut content_type = None;
    let mut own_traceparent = false;
    match input.get("headers") {
        None | Some(Value::Null) => {}
        Some(Value::Object(headers)) => {
            for (name, value) in headers {
                let Some(value) = value.as_str() else {
                    return invalid(format!("header `{name}` must be a string"));
                };
                let (Ok(n), Ok(v)) = (
                    reqwest::header::HeaderName::from_bytes(name.as_bytes()),
                    reqwest::header::HeaderValue::from_str(value),
                ) else {
                    return invalid(format!("header `{name}` is not a valid HTTP header"));
                };
                if n == reqwest::header::CONTENT_TYPE {
                    content_type = Some(value.to_ascii_lowercase());
                }
                own_traceparent |= n.as_str() == "traceparent";
                if n.as_str() != "idempotency-key" {
                    request = request.header(n, v);
                }
            }
        }
        Some(_) => return invalid("`headers` must be an object of strings"),
    }
    request = request.header("Idempotency-Key", &*task.idempotency_key);
    // The endpoint's own spans join the trace as children of the attempt,
    // unless the step sends a trace context of its own.
    if !own_traceparent && !task.traceparent.is_empty() {
        request = request.header("traceparent", &task.traceparent);
    }
    match input.get("body") {
        None | Some(Value::Null) => {}
        // A string sent with a content type of its own goes as it is.
        Some(Value::String(s)) if content_type.as_deref().is_some_and(|c| !is_json(c)) => {
            request = request.body(s.clone());
        }
        Some(body) => {
            if content_type.is_none() {
                request = request.header(reqwest::header::CONTENT_TYPE, "application/json");
            }
            request = request.body(body.to_string());
        }
    }
    let response = match request.send().await {
        Ok(r) => r,
        Err(e) => return classify_send_error(&e, timeout),
    };
    let status = response.status();
    let headers = headers_json(response.headers());
    let json = response
        .headers()
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|c| is_json(&c.to_ascii_lowercase()));
    let bytes = match read_capped(response, options.max_response_bytes).await {
        Ok(Some(b)) => b,
        Ok(None) => {
            return failure(
                "HTTP_RESPONSE_TOO_LARGE",
                format!(
                    "the response body exceeds {} bytes (status {})",
                    options.max_response_bytes,
                    status.as_u16()
                ),
                false,
            )
        }
        Err(e) if e.is_timeout() => {
            return Verdict::Uncertain(format!(
                "orbit.http: the response did not arrive within {} after the request was sent",
                show(timeout)
            ))
        }
        Err(_) => {
            return Verdict::Uncertain(
                "orbit.http: the connection was lost while the response was read".to_string(),
            )
        }
    };
    let body = if json {
        serde_json::from_slice(&bytes)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()))
    } else {
        Value::String(String::from_utf8_lossy(&bytes).into_owned())
    };
    let code = status.as_u16();
    if !status.is_success() {
        let retryable = code == 429 || status.is_server_error();
        let snippet: String = match &body {
            Value::String(s) => s.chars().take(200).collect(),
            other => other.to_string().chars().take(200).collect(),
        };
        return failure(
            &format!("HTTP_{code}"),
            format!("the server answered {status}: {snippet}"),
            retryable,
        );
    }
    let mut out = Map::new();
    out.insert("status".into(), Value::from(code));
    out.insert("headers".into(), headers);
    out.insert("body".into(), body);
    Verdict::Report(Outcome::Output(Value::Object(out)))
}

/// A send that failed: before the request left (a connection that could
/// not be made) is an ordinary, retryable failure; anything later may have
/// reached the server and is uncertain.
fn classify_send_error(e: &reqwest::Error, timeout: Duration) -> Verdict {
    if e.is_connect() {
        return failure(
            "HTTP_CONNECTION_FAILED",
            format!("cannot connect: {}", chain(e)),
            true,
        );
    }
    if e.is_builder() {
        return invalid(chain(e));
    }
    if e.is_timeout() {
        return Verdict::Uncertain(format!(
            "orbit.http: no response within {} after the request was sent",
            show(timeout)
        ));
    }
    Verdict::Uncertain(format!(
        "orbit.http: the connection was lost after the request was sent ({})",
        chain(e)
    ))
}

fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut source = e.source();
    while let Some(inner) = source {
        s.push_str(": ");
        s.push_str(&inner.to_string());
        source = inner.source();
    }
    s
}

fn show(d: Duration) -> String {
    let ms = d.as_millis();
    if ms.is_multiple_of(1000) {
        format!("{}s", ms / 1000)
    } else {
        format!("{ms}ms")
    }
}

fn is_json(content_type: &str) -> bool {
    let essence = content_type.split(';').next().unwrap_or_default().trim();
    essence == "application/json" || essence.ends_with("+json")
}

/// Response headers as a JSON object: lower-case names, repeated headers
/// joined with `, `, values that are not text left out.
fn headers_json(headers: &reqwest::header::HeaderMap) -> Value {
    let mut out = Map::new();
    for name in headers.keys() {
        let values: Vec<&str> = headers
            .get_all(name)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .collect();
        if !values.is_empty() {
            out.insert(name.as_str().to_string(), Value::from(values.join(", ")));
        }
    }
    Value::Object(out)
}

/// The body, or `None` when it is longer than `max` bytes.
async fn read_capped(
    mut response: reqwest::Response,
    max: usize,
) -> Result<Option<Vec<u8>>, reqwest::Error> {
    if response
        .content_length()
        .is_some_and(|n| n > u64::try_from(max).unwrap_or(u64::MAX))
    {
        return Ok(None);
    }
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await? {
        if body.len() + chunk.len() > max {
            return Ok(None);
        }
        body.extend_from_slice(&chunk);
    }
    Ok(Some(body))
}
