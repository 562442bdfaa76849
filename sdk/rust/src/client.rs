//! The client half of the SDK: deploy definitions, start executions, look
//! at them, signal and cancel them. Creating calls carry an
//! `Idempotency-Key` (a UUIDv4 unless the caller sets one) and make up to
//! three attempts on 429, 5xx and connection errors, reusing the key.

use std::sync::Arc;
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::{json, Value};

use crate::error::Error;
use crate::failover::{split_urls, FailoverTransport};
use crate::options::{ListOptions, StartOptions};
use crate::retry::{retryable_status, Backoff};
use crate::transport::{HttpRequest, HttpResponse, Method, Transport};
use crate::wire::{
    ClusterStatus, Deployed, Execution, ExecutionPage, HistoryPage, SignalAck, SourceFile,
    StartRequest, Started,
};

/// The default server address.
pub const DEFAULT_SERVER: &str = "http://127.0.0.1:7373";

/// How many attempts a client call makes in total.
pub const DEFAULT_ATTEMPTS: u32 = 3;

/// A client of one ORBIT server. Cheap to clone.
#[derive(Clone)]
pub struct Client {
    transport: Arc<dyn Transport>,
    token: Option<String>,
    attempts: u32,
    backoff: Backoff,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("token", &self.token.as_ref().map(|_| "***"))
            .field("attempts", &self.attempts)
            .field("backoff", &self.backoff)
            .finish_non_exhaustive()
    }
}

impl Client {
    /// A client over HTTP to `server_url`, or to several servers of a
    /// `--cluster` given comma-separated (`http://a:7373,http://b:7373`):
    /// `503 NOT_LEADER` answers are followed to the leader they name, and
    /// the other servers are tried when one cannot be reached (see
    /// [`FailoverTransport`]).
    pub fn connect(server_url: &str) -> Result<Self, Error> {
        Ok(Client::with_transport(Arc::new(FailoverTransport::new(
            &split_urls(server_url),
        )?)))
    }

    /// A client over any transport.
    pub fn with_transport(transport: Arc<dyn Transport>) -> Self {
        Client {
            transport,
            token: None,
            attempts: DEFAULT_ATTEMPTS,
            backoff: Backoff::CLIENT,
        }
    }

    /// Sends `Authorization: Bearer <token>` with every request.
    pub fn with_token(mut self, token: Option<String>) -> Self {
        self.token = token.filter(|t| !t.is_empty());
        self
    }

    /// Changes the retry schedule (attempts in total, at least 1).
    pub fn with_retries(mut self, attempts: u32, backoff: Backoff) -> Self {
        self.attempts = attempts.max(1);
        self.backoff = backoff;
        self
    }

    /// The transport this client sends through.
    pub fn transport(&self) -> &Arc<dyn Transport> {
        &self.transport
    }

    /// Registers `.orbit` files in one request (the server registers children
    /// before parents).
    pub async fn deploy(&self, files: &[SourceFile]) -> Result<Deployed, Error> {
        self.deploy_with_key(files, None).await
    }

    /// [`Client::deploy`] with a caller-chosen `Idempotency-Key`.
    pub async fn deploy_with_key(
        &self,
        files: &[SourceFile],
        idempotency_key: Option<String>,
    ) -> Result<Deployed, Error> {
        if files.is_empty() {
            return Err(Error::InvalidArgument("no files to deploy".into()));
        }
        let body = json!({ "files": files });
        self.create(
            Method::Post,
            "/v1/definitions".into(),
            &body,
            idempotency_key,
            Vec::new(),
        )
        .await
    }

    /// Starts an execution.
    pub async fn start(&self, options: StartOptions) -> Result<Started, Error> {
        let body = StartRequest {
            workflow: options.workflow,
            version: options.version,
            input: options.input,
            execution_id: options.execution_id,
        };
        let trace = options.traceparent.map(|t| ("traceparent".to_string(), t));
        self.create(
            Method::Post,
            "/v1/executions".into(),
            &body,
            options.idempotency_key,
            trace.into_iter().collect(),
        )
        .await
    }

    /// Starts an execution and waits, in the same request, for it to end,
    /// for at most `timeout`; the answer carries the execution as it is
    /// then (`Started::execution`, terminal or not). Instead of an
    /// `Idempotency-Key` (with which the server answers the start alone,
    /// as stored for the key) the start names its execution id —
    /// `options.execution_id`, or a generated UUIDv4 — so a retry after a
    /// lost answer finds the same execution (and reads `created: false`).
    /// An idempotency key in `options` is refused: use [`Client::start`]
    /// and [`Client::wait`] for a keyed start.
    pub async fn start_and_wait(
        &self,
        options: StartOptions,
        timeout: Duration,
    ) -> Result<Started, Error> {
        if options.idempotency_key.is_some() {
            return Err(Error::InvalidArgument(
                "a start that waits takes no idempotency key: name an execution_id".into(),
            ));
        }
        let execution_id = match options.execution_id {
            Some(id) if !id.is_empty() => id,
            _ => uuid::Uuid::new_v4().to_string(),
        };
        let body = StartRequest {
            workflow: options.workflow,
            version: options.version,
            input: options.input,
            execution_id: Some(execution_id),
        };
        let ms = timeout.as_millis().min(u128::from(u64::MAX)) as u64;
        let mut request = self.request(Method::Post, format!("/v1/executions?wait_ms={ms}"));
        request
            .headers
            .extend(options.traceparent.map(|t| ("traceparent".to_string(), t)));
        request.body =
            Some(serde_json::to_vec(&body).map_err(|e| Error::InvalidArgument(e.to_string()))?);
        request.timeout = Some(timeout + Duration::from_secs(15));
        let response = self.send_retrying(request).await?;
        decode(&response)
    }

    /// One execution.
    pub async fn get(&self, execution_id: &str) -> Result<Execution, Error> {
        self.read(format!("/v1/executions/{}", segment(execution_id)), None)
            .await
    }

    /// A page of executions, newest first.
    pub async fn list(&self, options: &ListOptions) -> Result<ExecutionPage, Error> {
        let mut query = Vec::new();
        if let Some(s) = options.status {
            query.push(format!("status={}", s.as_str()));
        }
        if let Some(w) = &options.workflow {
            query.push(format!("workflow={}", segment(w)));
        }
        if let Some(l) = options.limit {
            query.push(format!("limit={l}"));
        }
        if let Some(c) = &options.cursor {
            query.push(format!("cursor={}", segment(c)));
        }
        let mut path = "/v1/executions".to_string();
        if !query.is_empty() {
            path.push('?');
            path.push_str(&query.join("&"));
        }
        self.read(path, None).await
    }

    /// Waits (one long-poll of at most `timeout`) for the execution to end and
    /// returns it as it is then — terminal or not.
    pub async fn wait(&self, execution_id: &str, timeout: Duration) -> Result<Execution, Error> {
        let ms = timeout.as_millis().min(u128::from(u64::MAX)) as u64;
        let path = format!(
            "/v1/executions/{}/wait?timeout_ms={ms}",
            segment(execution_id)
        );
        let mut request = self.request(Method::Post, path);
        request.timeout = Some(timeout + Duration::from_secs(15));
        let response = self.send_retrying(request).await?;
        decode(&response)
    }

    /// The cluster as its leader sees it (`GET /v1/cluster`): nodes, leader,
    /// epoch and lease expiry; `mode: single` without `--cluster`.
    pub async fn cluster(&self) -> Result<ClusterStatus, Error> {
        self.read("/v1/cluster".into(), None).await
    }

    /// The execution's history after `after_seq` (all of it for `0`).
    pub async fn history(&self, execution_id: &str, after_seq: u64) -> Result<HistoryPage, Error> {
        let mut path = format!("/v1/executions/{}/history", segment(execution_id));
        if after_seq > 0 {
            path.push_str(&format!("?after_seq={after_seq}"));
        }
        self.read(path, None).await
    }

    /// Sends signal `name` to an execution.
    pub async fn signal(
        &self,
        execution_id: &str,
        name: &str,
        payload: Value,
        idempotency_key: Option<String>,
    ) -> Result<SignalAck, Error> {
        let path = format!(
            "/v1/executions/{}/signals/{}",
            segment(execution_id),
            segment(name)
        );
        let body = json!({ "payload": payload });
        self.create(Method::Post, path, &body, idempotency_key, Vec::new())
            .await
    }

    /// Asks for an execution to be cancelled (its compensations run).
    pub async fn cancel(
        &self,
        execution_id: &str,
        reason: Option<&str>,
        idempotency_key: Option<String>,
    ) -> Result<(), Error> {
        let path = format!("/v1/executions/{}/cancel", segment(execution_id));
        let body = match reason {
            Some(r) => json!({ "reason": r }),
            None => json!({}),
        };
        let _: Value = self
            .create(Method::Post, path, &body, idempotency_key, Vec::new())
            .await?;
        Ok(())
    }

    /// A request with the client's credentials.
    fn request(&self, method: Method, path: String) -> HttpRequest {
        let mut request = HttpRequest::new(method, path);
        if let Some(token) = &self.token {
            request
                .headers
                .push(("authorization".into(), format!("Bearer {token}")));
        }
        request
    }

    async fn read<T: DeserializeOwned>(
        &self,
        path: String,
        timeout: Option<Duration>,
    ) -> Result<T, Error> {
        let mut request = self.request(Method::Get, path);
        request.timeout = timeout;
        let response = self.send_retrying(request).await?;
        decode(&response)
    }

    /// A creating call: JSON body, `Idempotency-Key`, up to `attempts` tries.
    async fn create<B: Serialize + ?Sized, T: DeserializeOwned>(
        &self,
        method: Method,
        path: String,
        body: &B,
        idempotency_key: Option<String>,
        headers: Vec<(String, String)>,
    ) -> Result<T, Error> {
        let key = match idempotency_key {
            Some(k) if !k.is_empty() => k,
            _ => uuid::Uuid::new_v4().to_string(),
        };
        let mut request = self.request(method, path);
        request.headers.push(("idempotency-key".into(), key));
        request.headers.extend(headers);
        request.body =
            Some(serde_json::to_vec(body).map_err(|e| Error::InvalidArgument(e.to_string()))?);
        let response = self.send_retrying(request).await?;
        decode(&response)
    }

    /// Sends `request` up to `attempts` times, backing off between tries on
    /// 429, 5xx and transport errors. Returns the last answer (any status).
    async fn send_retrying(&self, request: HttpRequest) -> Result<HttpResponse, Error> {
        let mut attempt = 1;
        loop {
            let outcome = self.transport.send(request.clone()).await;
            let retry = match &outcome {
                Ok(response) => retryable_status(response.status),
                Err(e) => e.is_retryable(),
            };
            if !retry || attempt >= self.attempts {
                return match outcome {
                    Ok(response) if (200..300).contains(&response.status) => Ok(response),
                    Ok(response) => Err(Error::from_response(response.status, &response.body)),
                    Err(e) => Err(Error::Transport(e)),
                };
            }
            let mut delay = self.backoff.delay(attempt);
            if let Ok(response) = &outcome {
                if let Some(after) = retry_after(response) {
                    delay = delay.max(after.min(self.backoff.max));
                }
            }
            tracing::debug!(attempt, ?delay, path = %request.path, "retrying ORBIT request");
            tokio::time::sleep(delay).await;
            attempt += 1;
        }
    }
}

/// A `Retry-After` header in seconds, if present.
fn retry_after(response: &HttpResponse) -> Option<Duration> {
    response
        .header("retry-after")
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map(Duration::from_secs)
}

/// Decodes a 2xx JSON answer (an empty body reads as `null`).
pub(crate) fn decode<T: DeserializeOwned>(response: &HttpResponse) -> Result<T, Error> {
    if !(200..300).contains(&response.status) {
        return Err(Error::from_response(response.status, &response.body));
    }
    let body: &[u8] = if response.body.iter().all(u8::is_ascii_whitespace) {
        b"null"
    } else {
        &response.body
    };
    serde_json::from_slice(body).map_err(|e| Error::Decode {
        status: response.status,
        message: e.to_string(),
    })
}

/// Percent-encodes one path segment or query value.
pub(crate) fn segment(raw: &str) -> String {
    let mut out = String::with_capacity(raw.len());
    for b in raw.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' | b':' => {
                out.push(b as char)
            }
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::segment;

    #[test]
    fn segments_are_escaped() {
        assert_eq!(segment("order-1.charge"), "order-1.charge");
        assert_eq!(segment("a/b c"), "a%2Fb%20c");
        assert_eq!(segment("é"), "%C3%A9");
    }
}
