//! The built-in task executor: the runtime runs `orbit.http` itself.
//!
//! It is an in-process worker with a *built-in session*
//! ([`Request::RegisterBuiltin`]): the engine hands it `orbit.*` units and
//! never hands them to workers, so deliveries, tokens, retries, attempt
//! timeouts and reconciliation are exactly those of any task. The executor
//! long-polls for as many tasks as its pool (`--http-concurrency`) has free
//! slots, lists the tokens it runs in every poll and heartbeat, runs each
//! request in a task of its own, and reports the outcome with the token:
//! a result (success or failure), or — when the request may have reached
//! the server but no answer came back — [`Request::BuiltinUncertain`], so
//! the attempt is redelivered with the same idempotency key. A restart
//! while a request runs is handled by the engine's recovery.

pub mod allow;
pub mod http;

use crate::driver::Driver;
use allow::AllowPattern;
use orbit_core::engine::{Request, Response, Task};
use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// Settings of the built-in HTTP task (`orbit server --http-*`).
#[derive(Debug, Clone)]
pub struct HttpOptions {
    /// `--http-allow`: hosts requests may go to; empty allows none.
    pub allow: Vec<AllowPattern>,
    /// `--http-concurrency`: requests in flight at most.
    pub concurrency: usize,
    /// Whole-request time limit when the input names no `timeout`.
    pub default_timeout: Duration,
    /// Cap on an input's `timeout`.
    pub max_timeout: Duration,
    /// Time allowed to open a connection (a failure here is an ordinary,
    /// retryable failure: nothing was sent).
    pub connect_timeout: Duration,
    /// Largest response body read; longer is `HTTP_RESPONSE_TOO_LARGE`.
    pub max_response_bytes: usize,
    /// Redirects followed at most (only to allowed hosts).
    pub max_redirects: usize,
}

impl Default for HttpOptions {
    fn default() -> Self {
        HttpOptions {
            allow: Vec::new(),
            concurrency: DEFAULT_CONCURRENCY,
            default_timeout: Duration::from_secs(30),
            max_timeout: Duration::from_secs(300),
            connect_timeout: Duration::from_secs(10),
            max_response_bytes: 1024 * 1024,
            max_redirects: 5,
        }
    }
}

/// `--http-concurrency` default.
pub const DEFAULT_CONCURRENCY: usize = 32;

/// How long one long poll of the executor waits at most.
const POLL_WAIT_MS: u64 = 10_000;

/// Starts the executor on `driver`. It stops when the driver shuts down.
pub fn spawn(driver: Driver, options: HttpOptions) -> Result<JoinHandle<()>, String> {
    let client =
        http::client(&options).map_err(|e| format!("cannot build the HTTP client: {e}"))?;
    let executor = Executor {
        driver,
        options: Arc::new(options),
        client,
        session: Arc::new(Mutex::new(None)),
        running: BTreeSet::new(),
    };
    Ok(tokio::spawn(executor.run()))
}

struct Executor {
    driver: Driver,
    options: Arc<HttpOptions>,
    client: reqwest::Client,
    /// The current built-in session (shared with the jobs, which report
    /// uncertain outcomes in it).
    session: Arc<Mutex<Option<String>>>,
    /// Tokens of the requests running.
    running: BTreeSet<String>,
}

/// The driver stopped: the server shuts down, or this node's term as
/// leader ended.
fn is_shutdown(r: &Response) -> bool {
    r.status == 503 && matches!(r.error_code(), Some("SHUTTING_DOWN" | "NOT_LEADER"))
}

fn current(session: &Mutex<Option<String>>) -> Option<String> {
    session.lock().map(|s| s.clone()).unwrap_or_default()
}

/// The engine no longer knows `gone`: register again, unless that was
/// done already.
fn forget(session: &Mutex<Option<String>>, gone: &str) {
    if let Ok(mut s) = session.lock() {
        if s.as_deref() == Some(gone) {
            *s = None;
        }
    }
}

fn set(session: &Mutex<Option<String>>, value: Option<String>) {
    if let Ok(mut s) = session.lock() {
        *s = value;
    }
}

impl Executor {
    async fn run(mut self) {
        let (polls_tx, mut polls_rx) = mpsc::unbounded_channel::<(String, Response)>();
        let (done_tx, mut done_rx) = mpsc::unbounded_channel::<String>();
        let beat = Duration::from_millis((self.driver.session_timeout_ms() / 3).max(10));
        let mut heartbeat = tokio::time::interval(beat);
        heartbeat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut polling = false;
        loop {
            let Some(session) = current(&self.session) else {
                let r = self
                    .driver
                    .call(Request::RegisterBuiltin {
                        max_tasks: Some(u32::try_from(self.options.concurrency).unwrap_or(1)),
                    })
                    .await;
                if is_shutdown(&r) {
                    return;
                }
                match r.body.get("session_id").and_then(|v| v.as_str()) {
                    Some(id) if r.status == 200 => set(&self.session, Some(id.to_string())),
                    _ => tokio::time::sleep(Duration::from_millis(200)).await,
                }
                continue;
            };
            let free = self.options.concurrency.saturating_sub(self.running.len());
            if !polling && free > 0 {
                polling = true;
                let driver = self.driver.clone();
                let tx = polls_tx.clone();
                let request = Request::Poll {
                    session_id: session.clone(),
                    max_tasks: Some(u32::try_from(free).unwrap_or(u32::MAX)),
                    wait_ms: POLL_WAIT_MS
                        .min(self.driver.session_timeout_ms() / 2)
                        .max(1),
                    held: self.running.iter().cloned().collect(),
                };
                // The poll runs on its own: dropping it could lose tasks
                // whose dispatch is already committed.
                let polled = session.clone();
                tokio::spawn(async move {
                    let _ = tx.send((polled, driver.call(request).await));
                });
            }
            tokio::select! {
                biased;
                Some((polled, r)) = polls_rx.recv() => {
                    polling = false;
                    if is_shutdown(&r) {
                        return;
                    }
                    match r.status {
                        200 => self.start_jobs(&r, &done_tx),
                        404 => forget(&self.session, &polled),
                        _ => tokio::time::sleep(Duration::from_millis(200)).await,
                    }
                }
                Some(token) = done_rx.recv() => {
                    self.running.remove(&token);
                }
                _ = heartbeat.tick() => {
                    if !polling && !self.running.is_empty() {
                        let r = self.driver.call(Request::Heartbeat {
                            session_id: session.clone(),
                            held: self.running.iter().cloned().collect(),
                        }).await;
                        if is_shutdown(&r) {
                            return;
                        }
                        if r.status == 404 {
                            forget(&self.session, &session);
                        }
                    }
                }
            }
        }
    }

    fn start_jobs(&mut self, r: &Response, done: &mpsc::UnboundedSender<String>) {
        let tasks: Vec<Task> = match r.body.get("tasks") {
            Some(t) => serde_json::from_value(t.clone()).unwrap_or_default(),
            None => Vec::new(),
        };
        for task in tasks {
            self.running.insert(task.token.clone());
            let job = Job {
                driver: self.driver.clone(),
                client: self.client.clone(),
                options: self.options.clone(),
                session: self.session.clone(),
                done: done.clone(),
            };
            tokio::spawn(job.run(task));
        }
    }
}

struct Job {
    driver: Driver,
    client: reqwest::Client,
    options: Arc<HttpOptions>,
    session: Arc<Mutex<Option<String>>>,
    done: mpsc::UnboundedSender<String>,
}

impl Job {
    async fn run(self, task: Task) {
        let verdict = http::perform(&self.client, &self.options, &task).await;
        match &verdict {
            http::Verdict::Report(orbit_core::engine::Outcome::Output(output)) => tracing::debug!(
                execution_id = %task.execution_id,
                step = %task.step_id,
                attempt = task.attempt,
                status = %output["status"],
                "orbit.http attempt succeeded"
            ),
            http::Verdict::Report(orbit_core::engine::Outcome::Error(e)) => tracing::info!(
                execution_id = %task.execution_id,
                step = %task.step_id,
                attempt = task.attempt,
                code = %e.code,
                message = %e.message,
                "orbit.http attempt failed"
            ),
            http::Verdict::Uncertain(reason) => tracing::warn!(
                execution_id = %task.execution_id,
                step = %task.step_id,
                attempt = task.attempt,
                %reason,
                "orbit.http attempt uncertain; it will be redelivered with the same key"
            ),
        }
        let mut delay = Duration::from_millis(50);
        loop {
            let request = match &verdict {
                http::Verdict::Report(outcome) => Request::Result {
                    token: task.token.clone(),
                    outcome: outcome.clone(),
                    patterns: None,
                },
                http::Verdict::Uncertain(reason) => match current(&self.session) {
                    Some(session_id) => Request::BuiltinUncertain {
                        session_id,
                        token: task.token.clone(),
                        reason: reason.clone(),
                    },
                    None => {
                        tokio::time::sleep(delay).await;
                        continue;
                    }
                },
            };
            let r = self.driver.call(request).await;
            // Answered (accepted or not), or the server is stopping (its
            // restart makes this attempt uncertain): done.
            if r.status == 200 || is_shutdown(&r) {
                break;
            }
            tokio::time::sleep(delay).await;
            delay = (delay * 2).min(Duration::from_secs(2));
        }
        let _ = self.done.send(task.token);
    }
}
