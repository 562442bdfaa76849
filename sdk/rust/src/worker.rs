//! The worker half of the SDK: register task handlers by name, then
//! [`Worker::run`] registers a session, long-polls for tasks, runs the
//! handlers (at most `max_tasks` at once), heartbeats the tokens it holds,
//! stops handlers the server cancels and reports every result until the
//! server answers.
//!
//! Retries follow `api.md`: polls, heartbeats and results are retried with a
//! capped backoff on connection errors and 5xx for as long as it takes; an
//! `accepted: false` answer is final; `404 UNKNOWN_SESSION` makes the worker
//! register again and re-attach the tokens it holds with a heartbeat.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use serde::Serialize;
use serde_json::Value;
use tokio::sync::Notify;
use tokio::task::AbortHandle;

use crate::client::segment;
use crate::error::Error;
use crate::failover::{split_urls, FailoverTransport};
use crate::retry::{retryable_status, Backoff};
use crate::transport::{BoxFuture, HttpRequest, HttpResponse, Method, Transport, TransportError};
use crate::wire::{
    HeartbeatAck, HeartbeatRequest, Outcome, PollRequest, Polled, RegisterRequest, ResultAck,
    Session, Task, TaskError,
};

/// A task handler: takes the task, returns its output or a [`TaskError`].
pub type Handler = Arc<dyn Fn(Task) -> BoxFuture<'static, Result<Value, TaskError>> + Send + Sync>;

/// Builds a [`Worker`].
pub struct WorkerBuilder {
    worker_id: String,
    patterns: Option<Vec<String>>,
    handlers: BTreeMap<String, Handler>,
    max_tasks: usize,
    poll_wait: Duration,
    heartbeat_interval: Option<Duration>,
    backoff: Backoff,
    shutdown_grace: Duration,
    token: Option<String>,
}

impl std::fmt::Debug for WorkerBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkerBuilder")
            .field("worker_id", &self.worker_id)
            .field("patterns", &self.patterns)
            .field("handlers", &self.handlers.keys().collect::<Vec<_>>())
            .field("max_tasks", &self.max_tasks)
            .finish_non_exhaustive()
    }
}

impl WorkerBuilder {
    /// A worker named `worker_id` (shown in histories as `worker_id=`).
    pub fn new(worker_id: impl Into<String>) -> Self {
        WorkerBuilder {
            worker_id: worker_id.into(),
            patterns: None,
            handlers: BTreeMap::new(),
            max_tasks: 4,
            poll_wait: Duration::from_secs(10),
            heartbeat_interval: None,
            backoff: Backoff::WORKER,
            shutdown_grace: Duration::from_secs(30),
            token: None,
        }
    }

    /// Runs `handler` for tasks named `task_name` (`payments.charge`).
    pub fn handler<F, Fut>(mut self, task_name: impl Into<String>, handler: F) -> Self
    where
        F: Fn(Task) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Value, TaskError>> + Send + 'static,
    {
        let handler: Handler = Arc::new(move |task| Box::pin(handler(task)));
        self.handlers.insert(task_name.into(), handler);
        self
    }

    /// The task patterns to register (`payments.*`, `*`); by default, the
    /// names of the registered handlers.
    pub fn patterns(mut self, patterns: Vec<String>) -> Self {
        self.patterns = Some(patterns);
        self
    }

    /// At most this many tasks at once (default 4, at least 1).
    pub fn max_tasks(mut self, max_tasks: usize) -> Self {
        self.max_tasks = max_tasks.max(1);
        self
    }

    /// How long one poll waits at the server for a task (default 10 s).
    pub fn poll_wait(mut self, wait: Duration) -> Self {
        self.poll_wait = wait;
        self
    }

    /// Heartbeat period (default: a third of the server's session timeout).
    pub fn heartbeat_interval(mut self, interval: Duration) -> Self {
        self.heartbeat_interval = Some(interval);
        self
    }

    /// The retry schedule for polls, heartbeats and results.
    pub fn backoff(mut self, backoff: Backoff) -> Self {
        self.backoff = backoff;
        self
    }

    /// How long [`Worker::run`] lets running tasks finish after shutdown is
    /// asked before it abandons them (the server redelivers them).
    pub fn shutdown_grace(mut self, grace: Duration) -> Self {
        self.shutdown_grace = grace;
        self
    }

    /// Sends `Authorization: Bearer <token>`.
    pub fn token(mut self, token: Option<String>) -> Self {
        self.token = token.filter(|t| !t.is_empty());
        self
    }

    /// A worker talking to `server_url` over HTTP, or to several servers
    /// of a `--cluster` given comma-separated: it follows `503 NOT_LEADER`
    /// to the leader and moves on when a server cannot be reached (see
    /// [`crate::FailoverTransport`]).
    pub fn connect(self, server_url: &str) -> Result<Worker, Error> {
        let transport = FailoverTransport::new(&split_urls(server_url))?;
        Ok(self.build(Arc::new(transport)))
    }

    /// A worker over any transport.
    pub fn build(self, transport: Arc<dyn Transport>) -> Worker {
        let patterns = self
            .patterns
            .unwrap_or_else(|| self.handlers.keys().cloned().collect());
        Worker {
            inner: Arc::new(Inner {
                transport,
                worker_id: self.worker_id,
                patterns,
                handlers: self.handlers,
                max_tasks: self.max_tasks,
                poll_wait: self.poll_wait,
                heartbeat_interval: self.heartbeat_interval,
                backoff: self.backoff,
                shutdown_grace: self.shutdown_grace,
                token: self.token,
                session: tokio::sync::Mutex::new(None),
                held: Mutex::new(BTreeMap::new()),
                slot_freed: Notify::new(),
            }),
        }
    }
}

/// A worker process's connection to the server. See the module docs.
#[derive(Clone)]
pub struct Worker {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Worker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Worker")
            .field("worker_id", &self.inner.worker_id)
            .field("patterns", &self.inner.patterns)
            .finish_non_exhaustive()
    }
}

struct Inner {
    transport: Arc<dyn Transport>,
    worker_id: String,
    patterns: Vec<String>,
    handlers: BTreeMap<String, Handler>,
    max_tasks: usize,
    poll_wait: Duration,
    heartbeat_interval: Option<Duration>,
    backoff: Backoff,
    shutdown_grace: Duration,
    token: Option<String>,
    /// The current session (id, timeout), `None` before registering.
    session: tokio::sync::Mutex<Option<Session>>,
    /// Tokens received whose result the server has not answered yet.
    held: Mutex<BTreeMap<String, Held>>,
    slot_freed: Notify,
}

/// A task the worker holds.
struct Held {
    /// The running handler, until it finishes.
    handler: Option<AbortHandle>,
    /// The task that awaits the handler and reports its outcome.
    supervisor: AbortHandle,
    /// Why the handler was stopped, if it was.
    stopped: Option<Stop>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stop {
    /// The server put the token on the cancel list: report `CANCELLED`.
    Cancelled,
    /// The worker is shutting down and gave up: report nothing.
    Abandoned,
}

/// What a worker call got back.
enum Answer {
    /// A 2xx answer.
    Ok(HttpResponse),
    /// `404 UNKNOWN_SESSION`.
    UnknownSession,
    /// Connection error, 429 or 5xx: try again later.
    Retry(String),
    /// Any other refusal: final.
    Refused(Error),
}

impl Worker {
    /// Starts building a worker named `worker_id`.
    pub fn builder(worker_id: impl Into<String>) -> WorkerBuilder {
        WorkerBuilder::new(worker_id)
    }

    /// The worker's id.
    pub fn worker_id(&self) -> &str {
        &self.inner.worker_id
    }

    /// The tokens the worker holds right now (received, result not yet answered).
    pub fn held_tokens(&self) -> Vec<String> {
        self.inner.held_tokens()
    }

    /// Runs until `shutdown` completes, then lets running tasks finish (up to
    /// the shutdown grace) and unregisters. Returns an error only when the
    /// server refuses the worker (a 4xx other than `UNKNOWN_SESSION`, for
    /// example `403 FORBIDDEN` for patterns outside its grant). Run one
    /// `run` at a time per worker; clones share the same session.
    pub async fn run<S>(&self, shutdown: S) -> Result<(), Error>
    where
        S: Future<Output = ()> + Send,
    {
        let inner = &self.inner;
        tokio::pin!(shutdown);
        // `biased;` throughout: a seeded simulation must not depend on
        // tokio's random branch order; shutdown is checked first.
        let session = tokio::select! {
            biased;
            _ = &mut shutdown => return Ok(()),
            r = inner.register() => r?,
        };
        tracing::info!(worker = %inner.worker_id, session = %session, "worker registered");
        let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
        let heartbeats = tokio::spawn(Arc::clone(inner).heartbeat_loop(stop_rx));
        let result = tokio::select! {
            biased;
            _ = &mut shutdown => Ok(()),
            r = Arc::clone(inner).poll_loop() => r,
        };
        inner.drain().await;
        let _ = stop_tx.send(true);
        let _ = heartbeats.await;
        inner.unregister().await;
        result
    }
}

impl Inner {
    fn held(&self) -> MutexGuard<'_, BTreeMap<String, Held>> {
        // A panic while holding this lock cannot leave the map inconsistent
        // (every update is a single insert/remove/field write).
        self.held.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn held_tokens(&self) -> Vec<String> {
        self.held().keys().cloned().collect()
    }

    fn request<B: Serialize>(
        &self,
        method: Method,
        path: String,
        body: Option<&B>,
        timeout: Duration,
    ) -> HttpRequest {
        let mut request = HttpRequest::new(method, path);
        if let Some(token) = &self.token {
            request
                .headers
                .push(("authorization".into(), format!("Bearer {token}")));
        }
        request.body = body.and_then(|b| serde_json::to_vec(b).ok());
        request.timeout = Some(timeout);
        request
    }

    /// One call, classified.
    async fn call(&self, request: HttpRequest) -> Answer {
        match self.transport.send(request).await {
            Ok(r) if (200..300).contains(&r.status) => Answer::Ok(r),
            Ok(r) if retryable_status(r.status) => Answer::Retry(format!(
                "server answered {}: {}",
                r.status,
                Error::from_response(r.status, &r.body)
            )),
            Ok(r) => {
                let error = Error::from_response(r.status, &r.body);
                if r.status == 404 && error.code() == Some("UNKNOWN_SESSION") {
                    Answer::UnknownSession
                } else {
                    Answer::Refused(error)
                }
            }
            Err(e @ TransportError::Invalid(_)) => Answer::Refused(Error::Transport(e)),
            Err(e) => Answer::Retry(e.to_string()),
        }
    }

    /// Registers a new session, retrying until the server answers.
    async fn register(&self) -> Result<String, Error> {
        let mut guard = self.session.lock().await;
        let id = self.register_locked(&mut guard).await?;
        Ok(id)
    }

    async fn register_locked(&self, slot: &mut Option<Session>) -> Result<String, Error> {
        let body = RegisterRequest {
            worker_id: self.worker_id.clone(),
            task_patterns: self.patterns.clone(),
            max_tasks: Some(u32::try_from(self.max_tasks).unwrap_or(u32::MAX)),
        };
        let mut failures = 0;
        loop {
            let request = self.request(
                Method::Post,
                "/v1/workers".into(),
                Some(&body),
                Duration::from_secs(30),
            );
            match self.call(request).await {
                Answer::Ok(r) => {
                    let session: Session =
                        serde_json::from_slice(&r.body).map_err(|e| Error::Decode {
                            status: r.status,
                            message: e.to_string(),
                        })?;
                    let id = session.session_id.clone();
                    *slot = Some(session);
                    return Ok(id);
                }
                Answer::Refused(e) => return Err(e),
                Answer::UnknownSession | Answer::Retry(_) => {
                    failures += 1;
                    tracing::warn!(worker = %self.worker_id, failures, "cannot register yet; retrying");
                    tokio::time::sleep(self.backoff.delay(failures)).await;
                }
            }
        }
    }

    /// The current session id (registering first if there is none).
    async fn session_id(&self) -> Result<String, Error> {
        let mut guard = self.session.lock().await;
        match guard.as_ref() {
            Some(s) => Ok(s.session_id.clone()),
            None => self.register_locked(&mut guard).await,
        }
    }

    /// Registers again after `stale` was reported unknown (once, however many
    /// callers noticed), then re-attaches the held tokens with a heartbeat.
    async fn reregister(self: &Arc<Self>, stale: &str) -> Result<String, Error> {
        let fresh = {
            let mut guard = self.session.lock().await;
            match guard.as_ref() {
                Some(s) if s.session_id != stale => return Ok(s.session_id.clone()),
                _ => {}
            }
            tracing::info!(worker = %self.worker_id, "session unknown to the server; registering again");
            self.register_locked(&mut guard).await?
        };
        // Re-attach what we hold right away; a failure here is retried by
        // the heartbeat loop and the next poll (which lists `held` too).
        let _ = self.heartbeat_once(&fresh).await;
        Ok(fresh)
    }

    fn heartbeat_period(&self, session_timeout_ms: Option<u64>) -> Duration {
        if let Some(d) = self.heartbeat_interval {
            return d;
        }
        let timeout = session_timeout_ms.unwrap_or(30_000);
        Duration::from_millis((timeout / 3).clamp(100, 10_000))
    }

    /// Sends one heartbeat and stops what the server cancels.
    async fn heartbeat_once(self: &Arc<Self>, session: &str) -> Answer {
        let body = HeartbeatRequest {
            held: self.held_tokens(),
            tokens: Vec::new(),
        };
        let request = self.request(
            Method::Post,
            format!("/v1/workers/{}/heartbeat", segment(session)),
            Some(&body),
            Duration::from_secs(30),
        );
        let answer = self.call(request).await;
        if let Answer::Ok(r) = &answer {
            match serde_json::from_slice::<HeartbeatAck>(&r.body) {
                Ok(ack) => {
                    for token in ack.cancel {
                        self.cancel(&token);
                    }
                }
                Err(e) => tracing::warn!(error = %e, "unreadable heartbeat answer"),
            }
        }
        answer
    }

    async fn heartbeat_loop(self: Arc<Self>, mut stop: tokio::sync::watch::Receiver<bool>) {
        let mut failures = 0;
        loop {
            let timeout_ms = self
                .session
                .lock()
                .await
                .as_ref()
                .and_then(|s| s.session_timeout_ms);
            let delay = if failures == 0 {
                self.heartbeat_period(timeout_ms)
            } else {
                self.backoff.delay(failures)
            };
            tokio::select! {
                biased;
                _ = stop.changed() => return,
                _ = tokio::time::sleep(delay) => {}
            }
            if *stop.borrow() {
                return;
            }
            let session = match self.session_id().await {
                Ok(s) => s,
                Err(e) => {
                    failures += 1;
                    tracing::warn!(error = %e, "heartbeat: no session");
                    continue;
                }
            };
            match self.heartbeat_once(&session).await {
                Answer::Ok(_) => failures = 0,
                Answer::UnknownSession => {
                    failures = 0;
                    if let Err(e) = self.reregister(&session).await {
                        failures = 1;
                        tracing::warn!(error = %e, "heartbeat: cannot register again");
                    }
                }
                Answer::Retry(why) => {
                    failures += 1;
                    tracing::warn!(%why, failures, "heartbeat failed; retrying");
                }
                Answer::Refused(e) => {
                    failures += 1;
                    tracing::warn!(error = %e, "heartbeat refused");
                }
            }
        }
    }

    /// Polls and starts tasks until refused for good.
    async fn poll_loop(self: Arc<Self>) -> Result<(), Error> {
        let mut failures = 0;
        loop {
            let free = self.max_tasks.saturating_sub(self.held().len());
            if free == 0 {
                self.slot_freed.notified().await;
                continue;
            }
            let session = self.session_id().await?;
            // Never park a poll for longer than half the session timeout.
            let timeout_ms = self
                .session
                .lock()
                .await
                .as_ref()
                .and_then(|s| s.session_timeout_ms);
            let mut wait_ms = self.poll_wait.as_millis().min(u128::from(u64::MAX)) as u64;
            if let Some(t) = timeout_ms {
                wait_ms = wait_ms.min((t / 2).max(1));
            }
            let body = PollRequest {
                max_tasks: Some(u32::try_from(free).unwrap_or(u32::MAX)),
                wait_ms,
                held: self.held_tokens(),
            };
            let request = self.request(
                Method::Post,
                format!("/v1/workers/{}/poll", segment(&session)),
                Some(&body),
                self.poll_wait + Duration::from_secs(15),
            );
            match self.call(request).await {
                Answer::Ok(r) => {
                    failures = 0;
                    match serde_json::from_slice::<Polled>(&r.body) {
                        Ok(polled) => {
                            for task in polled.tasks {
                                self.start(task);
                            }
                        }
                        Err(e) => {
                            failures += 1;
                            tracing::warn!(error = %e, "unreadable poll answer");
                            tokio::time::sleep(self.backoff.delay(failures)).await;
                        }
                    }
                }
                Answer::UnknownSession => {
                    self.reregister(&session).await?;
                }
                Answer::Retry(why) => {
                    failures += 1;
                    tracing::warn!(%why, failures, "poll failed; retrying");
                    tokio::time::sleep(self.backoff.delay(failures)).await;
                }
                Answer::Refused(e) => return Err(e),
            }
        }
    }

    /// Runs a received task's handler and reports its outcome.
    fn start(self: &Arc<Self>, task: Task) {
        let token = task.token.clone();
        let work: BoxFuture<'static, Result<Value, TaskError>> =
            match self.handlers.get(&task.task_name) {
                Some(handler) => handler(task),
                None => {
                    let name = task.task_name.clone();
                    Box::pin(async move {
                        Err(TaskError::retryable(
                            "NO_HANDLER",
                            format!("this worker has no handler for task `{name}`"),
                        ))
                    })
                }
            };
        // Spawn under the lock so a cancel can never miss the handler.
        let mut held = self.held();
        if held.contains_key(&token) {
            return; // the same delivery twice: it is already running
        }
        let join = tokio::spawn(work);
        let inner = Arc::clone(self);
        let supervised = token.clone();
        let handler = join.abort_handle();
        let supervisor = tokio::spawn(async move {
            let token = supervised;
            let finished = join.await;
            let stopped = {
                let mut held = inner.held();
                match held.get_mut(&token) {
                    Some(entry) => {
                        entry.handler = None;
                        entry.stopped
                    }
                    None => Some(Stop::Abandoned),
                }
            };
            let outcome = match finished {
                Ok(Ok(output)) => Some(Outcome::Output(output)),
                Ok(Err(error)) => Some(Outcome::Error(error)),
                Err(e) if e.is_cancelled() => match stopped {
                    Some(Stop::Cancelled) => Some(Outcome::Error(TaskError::cancelled())),
                    _ => None,
                },
                Err(e) => Some(Outcome::Error(TaskError::retryable(
                    "WORKER_PANIC",
                    format!("the task handler panicked: {e}"),
                ))),
            };
            if let Some(outcome) = outcome {
                if stopped != Some(Stop::Abandoned) {
                    inner.report(&token, &outcome).await;
                }
            }
            inner.held().remove(&token);
            inner.slot_freed.notify_one();
        });
        held.insert(
            token,
            Held {
                handler: Some(handler),
                supervisor: supervisor.abort_handle(),
                stopped: None,
            },
        );
    }

    /// Stops the handler of `token` because the server cancelled it. A
    /// handler that already finished keeps its output.
    fn cancel(&self, token: &str) {
        let mut held = self.held();
        if let Some(entry) = held.get_mut(token) {
            if let Some(handle) = entry.handler.take() {
                tracing::info!(%token, "server cancelled the task; stopping its handler");
                entry.stopped = Some(Stop::Cancelled);
                handle.abort();
            }
        }
    }

    /// Reports a result until the server answers anything but a 5xx.
    async fn report(&self, token: &str, outcome: &Outcome) {
        let mut failures = 0;
        loop {
            let request = self.request(
                Method::Post,
                format!("/v1/tasks/{}/result", segment(token)),
                Some(outcome),
                Duration::from_secs(30),
            );
            match self.call(request).await {
                Answer::Ok(r) => {
                    match serde_json::from_slice::<ResultAck>(&r.body) {
                        Ok(ack) if !ack.accepted => tracing::info!(
                            %token,
                            reason = ack.reason.as_deref().unwrap_or(""),
                            "result not accepted (final)"
                        ),
                        Ok(_) => {}
                        Err(e) => tracing::warn!(%token, error = %e, "unreadable result answer"),
                    }
                    return;
                }
                Answer::Retry(why) => {
                    failures += 1;
                    tracing::warn!(%token, %why, failures, "result delivery failed; retrying");
                    tokio::time::sleep(self.backoff.delay(failures)).await;
                }
                Answer::UnknownSession | Answer::Refused(_) => {
                    tracing::warn!(%token, "result refused by the server (final)");
                    return;
                }
            }
        }
    }

    /// After shutdown: wait for held tasks (up to the grace), abandon the rest.
    async fn drain(&self) {
        let deadline = tokio::time::Instant::now() + self.shutdown_grace;
        loop {
            let notified = self.slot_freed.notified();
            if self.held().is_empty() {
                return;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                break;
            }
        }
        let abandoned = std::mem::take(&mut *self.held());
        for (token, entry) in abandoned {
            tracing::warn!(%token, "shutting down with the task unfinished; the server will redeliver it");
            if let Some(handle) = entry.handler {
                handle.abort();
            }
            entry.supervisor.abort();
        }
    }

    /// Ends the session (held tasks, if any, become uncertain at the server).
    async fn unregister(&self) {
        let Some(session) = self.session.lock().await.take() else {
            return;
        };
        for failures in 1..=3 {
            let request = self.request::<()>(
                Method::Delete,
                format!("/v1/workers/{}", segment(&session.session_id)),
                None,
                Duration::from_secs(10),
            );
            match self.call(request).await {
                Answer::Retry(why) => {
                    tracing::warn!(%why, "unregister failed; retrying");
                    tokio::time::sleep(self.backoff.delay(failures)).await;
                }
                _ => return,
            }
        }
    }
}
