//! Following the leader of a `--cluster`: a [`FailoverTransport`] sends to
//! one of several server URLs. A `503 NOT_LEADER` answer that names the
//! leader is sent again to that URL at once; while no leader is named
//! (a takeover is under way) or a server cannot be reached, the other URLs
//! are tried in turn, with a short backoff between rounds, until a server
//! answers or the failover window has passed. The server that answered
//! last is tried first next time, so a worker that was polling a node which
//! lost the leadership moves to the new leader and stays there.
//!
//! A server that takes the connection but does not answer in time (paused,
//! hung) counts as one that cannot be reached: the request goes on to the
//! next URL, and so does the next request even when this one ran out of
//! window. It may have been applied there after all; every request ORBIT's
//! clients send again is safe to repeat (an `Idempotency-Key`, a task's
//! token).
//!
//! Each URL is reached through a transport made by a [`Connector`]: real
//! HTTP ([`default_transport`]) by default, the simulated network in the
//! simulator. Time is tokio's, so a simulated clock drives the window.

use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;

use crate::direct::default_transport;
use crate::retry::Backoff;
use crate::transport::{BoxFuture, HttpRequest, HttpResponse, Transport, TransportError};

/// How long a request keeps looking for the leader by default.
pub const DEFAULT_FAILOVER_WINDOW: Duration = Duration::from_secs(30);

/// Most URLs learned from `NOT_LEADER` answers kept beside the configured ones.
const MAX_LEARNED: usize = 16;

/// Redirects followed in a row before a pause (two nodes naming each other
/// while their views settle).
const MAX_HOPS: u32 = 4;

/// The pause between rounds over every URL.
const ROUNDS: Backoff = Backoff {
    initial: Duration::from_millis(100),
    factor: 2.0,
    max: Duration::from_secs(1),
};

/// Makes the transport to one server URL (`http://host:port`).
pub type Connector = Arc<dyn Fn(&str) -> Result<Arc<dyn Transport>, TransportError> + Send + Sync>;

struct Targets {
    list: Vec<(String, Arc<dyn Transport>)>,
    current: usize,
}

/// A transport over several servers that follows `NOT_LEADER`. See the
/// module docs.
pub struct FailoverTransport {
    targets: Mutex<Targets>,
    configured: usize,
    window: Duration,
    connect: Connector,
}

impl std::fmt::Debug for FailoverTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FailoverTransport")
            .field("urls", &self.urls())
            .field("window", &self.window)
            .finish()
    }
}

/// Splits a `--server` value into its URLs (comma-separated).
pub fn split_urls(urls: &str) -> Vec<String> {
    urls.split(',')
        .map(|u| u.trim().trim_end_matches('/').to_owned())
        .filter(|u| !u.is_empty())
        .collect()
}

impl FailoverTransport {
    /// A transport over `urls` (at least one), tried in this order, each
    /// spoken to over real HTTP.
    pub fn new(urls: &[String]) -> Result<Self, TransportError> {
        FailoverTransport::with_connector(urls, Arc::new(|url: &str| default_transport(url)))
    }

    /// A transport over `urls` (at least one), tried in this order, each
    /// reached through the transport `connect` makes for it (also for the
    /// leader URLs learned later).
    pub fn with_connector(urls: &[String], connect: Connector) -> Result<Self, TransportError> {
        let mut list: Vec<(String, Arc<dyn Transport>)> = Vec::new();
        for url in urls {
            let url = normalized(url);
            if !list.iter().any(|(u, _)| *u == url) {
                let transport = connect(&url)?;
                list.push((url, transport));
            }
        }
        if list.is_empty() {
            return Err(TransportError::Invalid("no server URL given".into()));
        }
        Ok(FailoverTransport {
            configured: list.len(),
            targets: Mutex::new(Targets { list, current: 0 }),
            window: DEFAULT_FAILOVER_WINDOW,
            connect,
        })
    }

    /// Changes how long one request keeps looking for the leader.
    pub fn with_failover_window(mut self, window: Duration) -> Self {
        self.window = window;
        self
    }

    /// The URLs known now: the configured ones, then those learned.
    pub fn urls(&self) -> Vec<String> {
        self.lock().list.iter().map(|(u, _)| u.clone()).collect()
    }

    /// The URL tried first.
    pub fn current_url(&self) -> String {
        let t = self.lock();
        t.list[t.current].0.clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Targets> {
        match self.targets.lock() {
            Ok(t) => t,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    fn pick(&self, index: usize) -> (usize, String, Arc<dyn Transport>) {
        let t = self.lock();
        let i = index % t.list.len();
        (i, t.list[i].0.clone(), t.list[i].1.clone())
    }

    fn len(&self) -> usize {
        self.lock().list.len()
    }

    /// The index of `url`, learning it if new.
    fn index_of(&self, url: &str) -> Option<usize> {
        let url = normalized(url);
        let mut t = self.lock();
        if let Some(i) = t.list.iter().position(|(u, _)| *u == url) {
            return Some(i);
        }
        let transport = (self.connect)(&url).ok()?;
        if t.list.len() >= self.configured + MAX_LEARNED {
            // Forget the oldest learned URL.
            t.list.remove(self.configured);
            t.current = 0;
        }
        t.list.push((url, transport));
        Some(t.list.len() - 1)
    }

    fn answered(&self, index: usize) {
        self.lock().current = index;
    }

    /// `index` did not answer: unless another server answered meanwhile,
    /// the next request starts at the one after it.
    fn passed_over(&self, index: usize) {
        let mut t = self.lock();
        if t.current == index {
            t.current = (index + 1) % t.list.len();
        }
    }

    /// The error of a window in which no server answered: with several
    /// URLs it names them all (the last one's error alone would send an
    /// operator to the wrong server), and stays a connection error.
    fn none_answered(&self, last: TransportError) -> TransportError {
        if self.len() < 2 {
            return last;
        }
        match last {
            TransportError::Connect { .. } | TransportError::Timeout(_) => {
                TransportError::Connect {
                    target: self.urls().join(", "),
                    message: format!("no server answered within {:?} (last: {last})", self.window),
                }
            }
            other => other,
        }
    }

    async fn exchange(&self, request: HttpRequest) -> Result<HttpResponse, TransportError> {
        let deadline = Instant::now() + self.window;
        let start = self.lock().current;
        let mut index = start;
        let mut tried = 0usize;
        let mut hops = 0u32;
        let mut rounds = 0u32;
        let mut clustered = false;
        loop {
            let (i, url, transport) = self.pick(index);
            let outcome = transport.send(request.clone()).await;
            match &outcome {
                Ok(response) if is_not_leader(response) => {
                    clustered = true;
                    if let Some(leader) = leader_of(response) {
                        if leader != url && hops < MAX_HOPS {
                            if let Some(next) = self.index_of(&leader) {
                                hops += 1;
                                index = next;
                                continue;
                            }
                        }
                    }
                }
                Err(TransportError::Connect { .. }) if clustered || self.len() > 1 => {
                    self.passed_over(i);
                }
                Err(TransportError::Timeout(_)) if self.len() > 1 => self.passed_over(i),
                _ => {
                    self.answered(i);
                    return outcome;
                }
            }
            if Instant::now() >= deadline {
                return outcome.map_err(|e| self.none_answered(e));
            }
            index = i + 1;
            tried += 1;
            if tried >= self.len() {
                tried = 0;
                hops = 0;
                rounds += 1;
                let pause = ROUNDS
                    .delay(rounds)
                    .min(deadline.saturating_duration_since(Instant::now()));
                tracing::debug!(?pause, "no ORBIT leader answered; trying again");
                tokio::time::sleep(pause).await;
            }
        }
    }
}

/// `url` without surrounding blanks or trailing slashes.
fn normalized(url: &str) -> String {
    url.trim().trim_end_matches('/').to_owned()
}

/// Whether `response` is a standby's `503 NOT_LEADER`.
fn is_not_leader(response: &HttpResponse) -> bool {
    response.status == 503 && error_field(response, "code").as_deref() == Some("NOT_LEADER")
}

/// The `leader` URL of a `NOT_LEADER` answer, when it names one.
fn leader_of(response: &HttpResponse) -> Option<String> {
    error_field(response, "leader").filter(|l| !l.is_empty())
}

fn error_field(response: &HttpResponse, name: &str) -> Option<String> {
    let body: serde_json::Value = serde_json::from_slice(&response.body).ok()?;
    body.get("error")?.get(name)?.as_str().map(str::to_owned)
}

impl Transport for FailoverTransport {
    fn send(&self, request: HttpRequest) -> BoxFuture<'_, Result<HttpResponse, TransportError>> {
        Box::pin(self.exchange(request))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_split_on_commas() {
        assert_eq!(
            split_urls(" http://a:1/, http://b:2 ,,"),
            vec!["http://a:1".to_owned(), "http://b:2".to_owned()]
        );
    }

    #[test]
    fn not_leader_answers_are_recognised() {
        let answer = |status, body: &str| HttpResponse {
            status,
            headers: Vec::new(),
            body: body.as_bytes().to_vec(),
        };
        let named = answer(
            503,
            r#"{"error":{"code":"NOT_LEADER","message":"m","leader":"http://b:2"}}"#,
        );
        assert!(is_not_leader(&named));
        assert_eq!(leader_of(&named).as_deref(), Some("http://b:2"));
        let unknown = answer(
            503,
            r#"{"error":{"code":"NOT_LEADER","message":"m","leader":null}}"#,
        );
        assert!(is_not_leader(&unknown));
        assert_eq!(leader_of(&unknown), None);
        assert!(!is_not_leader(&answer(
            503,
            r#"{"error":{"code":"STORAGE_ERROR","message":"m"}}"#
        )));
    }

    /// Answers `200` from the URLs in `answering`; the others time out.
    fn some_paused(answering: &'static [&'static str]) -> Connector {
        struct One {
            answers: bool,
        }
        impl Transport for One {
            fn send(&self, _: HttpRequest) -> BoxFuture<'_, Result<HttpResponse, TransportError>> {
                let answers = self.answers;
                Box::pin(async move {
                    if answers {
                        Ok(HttpResponse {
                            status: 200,
                            headers: Vec::new(),
                            body: b"{}".to_vec(),
                        })
                    } else {
                        Err(TransportError::Timeout(Duration::from_secs(30)))
                    }
                })
            }
        }
        Arc::new(move |url: &str| {
            let answers = answering.contains(&url);
            Ok(Arc::new(One { answers }) as Arc<dyn Transport>)
        })
    }

    fn urls(list: &[&str]) -> Vec<String> {
        list.iter().map(|u| (*u).to_owned()).collect()
    }

    #[tokio::test]
    async fn a_server_that_never_answers_is_passed_over() {
        let t = FailoverTransport::with_connector(
            &urls(&["http://paused:1", "http://up:2"]),
            some_paused(&["http://up:2"]),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let r = t.send(HttpRequest::new(
            crate::transport::Method::Get,
            "/v1/executions",
        ));
        assert_eq!(r.await.map(|r| r.status).ok(), Some(200));
        assert_eq!(t.current_url(), "http://up:2");
    }

    #[tokio::test]
    async fn after_a_window_spent_waiting_the_next_request_starts_elsewhere() {
        // The whole window goes to one server that never answers.
        let t = FailoverTransport::with_connector(
            &urls(&["http://paused:1", "http://up:2"]),
            some_paused(&["http://up:2"]),
        )
        .unwrap_or_else(|e| panic!("{e}"))
        .with_failover_window(Duration::ZERO);
        let first = t.send(HttpRequest::new(crate::transport::Method::Get, "/"));
        // No server answered in the window: the error names every one.
        let message = first.await.err().map(|e| e.to_string());
        assert_eq!(
            message.as_deref(),
            Some(
                "cannot connect to http://paused:1, http://up:2: no server answered \
                 within 0ns (last: no answer within 30s)"
            )
        );
        assert_eq!(t.current_url(), "http://up:2");
        let second = t.send(HttpRequest::new(crate::transport::Method::Get, "/"));
        assert_eq!(second.await.map(|r| r.status).ok(), Some(200));
    }

    #[tokio::test]
    async fn one_server_that_times_out_answers_with_the_timeout() {
        let t = FailoverTransport::with_connector(&urls(&["http://paused:1"]), some_paused(&[]))
            .unwrap_or_else(|e| panic!("{e}"));
        let r = t.send(HttpRequest::new(crate::transport::Method::Get, "/"));
        assert!(matches!(r.await, Err(TransportError::Timeout(_))));
    }

    #[test]
    fn learned_urls_are_kept_once() {
        let t = FailoverTransport::new(&["http://127.0.0.1:1".to_owned()])
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(t.index_of("http://127.0.0.1:2/"), Some(1));
        assert_eq!(t.index_of("http://127.0.0.1:2"), Some(1));
        assert_eq!(t.urls().len(), 2);
    }
}
