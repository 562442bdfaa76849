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
//!
//! One request per step: by default results ride on polls. The worker
//! keeps up to four polls waiting at the server, each asking for a share of
//! its free slots, so a step the server makes due is usually handed to one
//! of them in the commit that made it due. A finished task's result goes
//! out at once on the next of those waiting polls (so the same request
//! reports one step and brings the next), or, when four already wait, on
//! a poll that does not wait (`wait_ms: 0`), so a result never queues
//! behind a parked poll. Results that finish while such a call is in
//! flight go out together on the next one. A task just handed out holds
//! the place of a waiting poll for a few milliseconds: a quick handler's
//! result then leaves on that poll instead of the worker sending a poll
//! without results first and the result on another. A task keeps its slot,
//! running or finished, until its result leaves; the poll that carries the
//! result asks for that slot again, so the result never lacks a poll.
//! [`WorkerBuilder::results_on_poll`]`(false)` uses the separate result
//! call instead, and so does a worker shutting down (it wants no new tasks).

use std::collections::{BTreeMap, VecDeque};
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
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
    ErrorBody, HeartbeatAck, HeartbeatRequest, Outcome, PollRequest, Polled, RegisterRequest,
    ResultAck, ResultAnswer, Session, Task, TaskError, TaskResult, POLL_RESULTS_MAX,
};

/// Serialized results one poll carries at most (bytes, roughly); a larger
/// single result goes alone.
const CARRY_BYTES_MAX: usize = 512 * 1024;
/// Longest wait at the server of a poll that carries results, so that
/// their answers come back soon even when no task is coming.
const CARRY_WAIT_MS_MAX: u64 = 1_000;
/// Polls that may wait at the server, in flight at once (each asks for a
/// share of the free slots).
const LONG_MAX: usize = 4;
/// Polls that carry results without waiting at the server, in flight at
/// once: a finished task's result leaves at once unless this many are out.
const QUICK_MAX: usize = 4;
/// How long a task just handed out holds the place of a waiting poll: a
/// quick handler's result leaves on that poll, which then waits, instead of
/// the worker sending a poll without results in between (one request per
/// step instead of two at light load). A slower handler's place is given
/// back to a results-free poll once this has passed.
const LINGER: Duration = Duration::from_millis(5);

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
    results_on_poll: bool,
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
            results_on_poll: true,
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

    /// Whether results ride on polls (default true: one request per step;
    /// see the module docs). `false` reports each result with its own
    /// `POST /v1/tasks/{token}/result`, as servers before this option did.
    pub fn results_on_poll(mut self, on: bool) -> Self {
        self.results_on_poll = on;
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
                current: Mutex::new(None),
                held: Mutex::new(BTreeMap::new()),
                slot_freed: Notify::new(),
                results_on_poll: AtomicBool::new(self.results_on_poll),
                draining: AtomicBool::new(false),
                outbox: Mutex::new(VecDeque::new()),
                flow: Mutex::new(Flow::default()),
                wake: Notify::new(),
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
    /// A copy of `session` readable without waiting, for sending a result
    /// straight from the task that finished it.
    current: Mutex<Option<Session>>,
    /// Tokens received whose result the server has not answered yet.
    held: Mutex<BTreeMap<String, Held>>,
    slot_freed: Notify,
    /// Results ride on polls (turned off when a server refuses them).
    results_on_poll: AtomicBool,
    /// Shutting down: no new polls; results go by the result call.
    draining: AtomicBool,
    /// Finished results waiting for the next poll.
    outbox: Mutex<VecDeque<Ready>>,
    /// The polls in flight.
    flow: Mutex<Flow>,
    /// Wakes the poll loop: a result is ready, a call came back, a slot freed.
    wake: Notify,
}

/// A finished task's result, waiting to be reported.
struct Ready {
    result: TaskResult,
    /// Its serialized size, roughly.
    size: usize,
}

/// The polls in flight: up to [`LONG_MAX`] that may wait at the server
/// (`long`) and [`QUICK_MAX`] that do not (`quick`).
#[derive(Default)]
struct Flow {
    long: usize,
    quick: usize,
    /// Tasks the polls in flight asked for.
    reserved: usize,
    /// Consecutive failed polls, for the backoff.
    failures: u32,
    /// The results-free long polls in flight, by call number, aborted at
    /// shutdown.
    long_aborts: BTreeMap<u64, AbortHandle>,
    /// The next call number.
    calls: u64,
    /// A refusal that ends [`Worker::run`].
    fatal: Option<Error>,
}

impl Flow {
    fn next_call(&mut self) -> u64 {
        self.calls += 1;
        self.calls
    }

    /// A poll that asked for `ask` tasks is answered (`long`: its call
    /// number if it could wait at the server).
    fn release(&mut self, ask: usize, long: Option<u64>) {
        self.reserved = self.reserved.saturating_sub(ask);
        if let Some(number) = long {
            self.long = self.long.saturating_sub(1);
            self.long_aborts.remove(&number);
        } else {
            self.quick = self.quick.saturating_sub(1);
        }
    }
}

/// A task the worker holds.
struct Held {
    /// The running handler, until it finishes.
    handler: Option<AbortHandle>,
    /// The task that awaits the handler and reports its outcome (or,
    /// once it is queued for a poll that could not carry it, reports it).
    supervisor: AbortHandle,
    /// Why the handler was stopped, if it was.
    stopped: Option<Stop>,
    /// The handler finished; its result waits for the server's answer.
    done: bool,
    /// Its result left on a poll: its slot went to that poll's ask. Until
    /// then, running or finished, the task takes a slot.
    sent: bool,
    /// When the task was received (see [`LINGER`]).
    received: tokio::time::Instant,
}

/// What [`Inner::send_next`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sent {
    /// It sent a poll (or reported results alone).
    Poll,
    /// Nothing is due.
    Nothing,
    /// Nothing is due before a handler received within [`LINGER`] either
    /// returns or lingers no longer: look again then.
    Lingering,
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
    /// `404 UNKNOWN_SESSION` (with its body).
    UnknownSession(Vec<u8>),
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
        // A worker may run again after an earlier run ended.
        inner.draining.store(false, Ordering::SeqCst);
        *inner.flow() = Flow::default();
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
                    Answer::UnknownSession(r.body)
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
                    *self.current.lock().unwrap_or_else(|p| p.into_inner()) = Some(session.clone());
                    *slot = Some(session);
                    return Ok(id);
                }
                Answer::Refused(e) => return Err(e),
                Answer::UnknownSession(_) | Answer::Retry(_) => {
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
                Answer::UnknownSession(_) => {
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

    fn flow(&self) -> MutexGuard<'_, Flow> {
        self.flow.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn outbox(&self) -> MutexGuard<'_, VecDeque<Ready>> {
        self.outbox.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Wakes the poll loop and [`Inner::drain`].
    fn kick(&self) {
        self.wake.notify_one();
        self.slot_freed.notify_one();
    }

    /// Whether a finished result should ride on the next poll.
    fn carrying(&self) -> bool {
        self.results_on_poll.load(Ordering::SeqCst) && !self.draining.load(Ordering::SeqCst)
    }

    /// Tokens of the tasks whose handlers still run.
    fn running_tokens(&self) -> Vec<String> {
        self.held()
            .iter()
            .filter(|(_, h)| !h.done)
            .map(|(t, _)| t.clone())
            .collect()
    }

    /// How long a poll may wait at the server.
    async fn wait_ms(&self) -> u64 {
        let timeout_ms = self
            .session
            .lock()
            .await
            .as_ref()
            .and_then(|s| s.session_timeout_ms);
        self.wait_for(timeout_ms)
    }

    /// `poll_wait`, but never longer than half the session timeout.
    fn wait_for(&self, session_timeout_ms: Option<u64>) -> u64 {
        let mut wait_ms = u64::try_from(self.poll_wait.as_millis()).unwrap_or(u64::MAX);
        if let Some(t) = session_timeout_ms {
            wait_ms = wait_ms.min((t / 2).max(1));
        }
        wait_ms
    }

    /// Sends the next poll now if one is due and the session is known,
    /// without waiting for the poll loop to wake up (one hop less between a
    /// handler returning and its result leaving).
    fn send_now(self: &Arc<Self>) {
        if self.draining.load(Ordering::SeqCst) {
            return;
        }
        let current = self
            .current
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            .map(|s| (s.session_id.clone(), s.session_timeout_ms));
        if let Some((session, timeout_ms)) = current {
            let wait_ms = self.wait_for(timeout_ms);
            self.send_next(&session, wait_ms);
        }
    }

    /// Polls and starts tasks until refused for good. Each poll runs as its
    /// own task (see [`Inner::exchange`]); this loop only decides when to
    /// send one.
    async fn poll_loop(self: Arc<Self>) -> Result<(), Error> {
        loop {
            if let Some(e) = self.flow().fatal.take() {
                return Err(e);
            }
            if !self.outbox().is_empty() {
                // Let other handlers that finish right now join this batch.
                tokio::task::yield_now().await;
            }
            let session = self.session_id().await?;
            let wait_ms = self.wait_ms().await;
            match self.send_next(&session, wait_ms) {
                Sent::Poll => {}
                Sent::Nothing => self.wake.notified().await,
                Sent::Lingering => {
                    tokio::select! {
                        biased;
                        () = self.wake.notified() => {}
                        () = tokio::time::sleep(LINGER) => {}
                    }
                }
            }
        }
    }

    /// Sends the next poll if one is due.
    fn send_next(self: &Arc<Self>, session: &str, wait_ms: u64) -> Sent {
        // A result reported with its own call takes no poll's place.
        let on_poll = self.results_on_poll.load(Ordering::SeqCst);
        // Under the flow lock, which a poll's answer holds while its tasks
        // take its place, so the slots are never counted twice or missed.
        let mut flow = self.flow();
        let (occupied, lingering) = {
            let held = self.held();
            let mut occupied = 0;
            let mut lingering = 0;
            for h in held.values().filter(|h| !h.sent) {
                occupied += 1;
                if on_poll && !h.done && h.received.elapsed() < LINGER {
                    lingering += 1;
                }
            }
            (occupied, lingering)
        };
        let free = self.max_tasks.saturating_sub(occupied + flow.reserved);
        let mut outbox = self.outbox();
        if !outbox.is_empty() && (flow.long < LONG_MAX || flow.quick < QUICK_MAX) {
            if !on_poll {
                // No polls to ride on: report these with the result call.
                for ready in outbox.drain(..) {
                    self.report_alone(ready.result);
                }
                return Sent::Poll;
            }
            let mut carried = Vec::new();
            let mut bytes = 0;
            while let Some(ready) = outbox.front() {
                if carried.len() >= POLL_RESULTS_MAX
                    || (!carried.is_empty() && bytes + ready.size > CARRY_BYTES_MAX)
                {
                    break;
                }
                bytes += ready.size;
                if let Some(ready) = outbox.pop_front() {
                    carried.push(ready.result);
                }
            }
            drop(outbox);
            self.mark_sent(&carried, true);
            // It asks again for the slots its results free. It waits at the
            // server as one of the waiting polls when there is room for one
            // more, and asks for their share of the free slots besides;
            // otherwise it does not wait and asks for them all.
            let (wait, ask, long) = if flow.long < LONG_MAX {
                let ask = carried.len() + free.div_ceil(LONG_MAX - flow.long);
                flow.long += 1;
                (wait_ms.min(CARRY_WAIT_MS_MAX), ask, Some(flow.next_call()))
            } else {
                flow.quick += 1;
                (0, carried.len() + free, None)
            };
            flow.reserved += ask;
            tokio::spawn(Arc::clone(self).exchange(session.to_owned(), carried, ask, wait, long));
            return Sent::Poll;
        }
        if !outbox.is_empty() || flow.long >= LONG_MAX || free == 0 {
            return Sent::Nothing;
        }
        if flow.long + lingering >= LONG_MAX {
            // The results of the tasks just received will take these
            // places (see `LINGER`).
            return Sent::Lingering;
        }
        // The free slots are shared among the polls that may still be
        // sent, so that several wait at the server: a task the server
        // makes due is handed to a waiting poll in the commit that made it
        // due, instead of waiting for the next poll and a commit of its
        // own.
        let ask = free.div_ceil(LONG_MAX - flow.long);
        flow.long += 1;
        flow.reserved += ask;
        let number = flow.next_call();
        let call = tokio::spawn(Arc::clone(self).exchange(
            session.to_owned(),
            Vec::new(),
            ask,
            wait_ms,
            Some(number),
        ));
        flow.long_aborts.insert(number, call.abort_handle());
        Sent::Poll
    }

    /// One poll: carries `carried` results, asks for `ask` tasks, starts
    /// the tasks it gets and settles the results it carried. `long` is the
    /// call number of a poll that may wait at the server.
    async fn exchange(
        self: Arc<Self>,
        session: String,
        carried: Vec<TaskResult>,
        ask: usize,
        wait_ms: u64,
        long: Option<u64>,
    ) {
        let mut body = PollRequest {
            max_tasks: Some(u32::try_from(ask).unwrap_or(u32::MAX)),
            wait_ms,
            held: self.running_tokens(),
            results: carried,
        };
        let request = self.request(
            Method::Post,
            format!("/v1/workers/{}/poll", segment(&session)),
            Some(&body),
            Duration::from_millis(wait_ms) + Duration::from_secs(15),
        );
        let carried = std::mem::take(&mut body.results);
        let answer = self.call(request).await;
        let mut retry = Vec::new();
        let mut failed = false;
        let mut released = false;
        match answer {
            Answer::Ok(r) => match serde_json::from_slice::<Polled>(&r.body) {
                Ok(polled) => {
                    // The tasks take this poll's place under the flow lock:
                    // a handler that finishes on another thread before this
                    // poll is released would otherwise find every slot
                    // reserved and report with the result call.
                    let mut flow = self.flow();
                    for task in polled.tasks {
                        self.start(task);
                    }
                    retry = self.settle(carried, &polled.results);
                    // Results the server could not record yet: back off
                    // before this poll's slot is free again.
                    failed = !retry.is_empty();
                    if !failed {
                        flow.release(ask, long);
                        released = true;
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, "unreadable poll answer");
                    failed = true;
                    retry = carried;
                }
            },
            Answer::UnknownSession(body) => {
                // The results were still recorded: their answers ride on
                // the error.
                let answers = serde_json::from_slice::<ErrorBody>(&body)
                    .ok()
                    .and_then(|b| b.error.details.get("results").cloned())
                    .and_then(|v| serde_json::from_value::<Vec<ResultAnswer>>(v).ok())
                    .unwrap_or_default();
                retry = self.settle(carried, &answers);
                if let Err(e) = self.reregister(&session).await {
                    self.flow().fatal = Some(e);
                }
            }
            Answer::Retry(why) => {
                tracing::warn!(%why, "poll failed; retrying");
                failed = true;
                retry = carried;
            }
            Answer::Refused(e) if carried.is_empty() => self.flow().fatal = Some(e),
            Answer::Refused(e) => {
                // A server that does not take results on polls: use the
                // result call from now on.
                if e.code() == Some("INVALID_REQUEST") {
                    tracing::warn!(error = %e, "the server refused results on a poll; reporting them one by one");
                    self.results_on_poll.store(false, Ordering::SeqCst);
                }
                // They take their slots again until the result call is done.
                self.mark_sent(&carried, false);
                for result in carried {
                    self.report_alone(result);
                }
            }
        }
        let failures = {
            let mut flow = self.flow();
            if failed {
                flow.failures += 1;
            } else {
                flow.failures = 0;
            }
            flow.failures
        };
        if failed {
            // Back off before this poll's slot is free again.
            tokio::time::sleep(self.backoff.delay(failures)).await;
        }
        if !retry.is_empty() {
            self.mark_sent(&retry, false);
            let mut outbox = self.outbox();
            for result in retry.into_iter().rev() {
                let size = serde_json::to_vec(&result).map_or(0, |b| b.len());
                outbox.push_front(Ready { result, size });
            }
        }
        if !released {
            self.flow().release(ask, long);
        }
        self.send_now();
        self.kick();
    }

    /// Settles the carried results by their answers (in order); returns
    /// those to report again (a 5xx answer, or none).
    fn settle(&self, carried: Vec<TaskResult>, answers: &[ResultAnswer]) -> Vec<TaskResult> {
        let mut again = Vec::new();
        for (i, result) in carried.into_iter().enumerate() {
            let answer = answers
                .get(i)
                .filter(|a| a.token == result.token)
                .or_else(|| answers.iter().find(|a| a.token == result.token));
            match answer {
                None => again.push(result),
                Some(a) if a.retry() => {
                    tracing::warn!(token = %result.token, status = a.status, "result not recorded yet; retrying");
                    again.push(result);
                }
                Some(a) => {
                    if a.accepted == Some(false) {
                        tracing::info!(
                            token = %result.token,
                            reason = a.reason.as_deref().unwrap_or(""),
                            "result not accepted (final)"
                        );
                    } else if a.accepted.is_none() {
                        tracing::warn!(token = %result.token, status = a.status, "result refused by the server (final)");
                    }
                    self.finish(&result.token);
                }
            }
        }
        again
    }

    /// Marks the tasks of `results` as carried on a poll (or back in the
    /// outbox, `false`).
    fn mark_sent(&self, results: &[TaskResult], sent: bool) {
        let mut held = self.held();
        for r in results {
            if let Some(h) = held.get_mut(&r.token) {
                h.sent = sent;
            }
        }
    }

    /// A result is settled: its slot is free.
    fn finish(&self, token: &str) {
        self.held().remove(token);
        self.kick();
    }

    /// Reports one result with the result call, on a task of its own.
    fn report_alone(self: &Arc<Self>, result: TaskResult) {
        let inner = Arc::clone(self);
        let token = result.token.clone();
        let reporter = tokio::spawn(async move {
            inner.report(&result.token, &result.outcome).await;
            inner.finish(&result.token);
        });
        // A shutdown that gives up on the task stops its reporter too.
        if let Some(entry) = self.held().get_mut(&token) {
            entry.supervisor = reporter.abort_handle();
        }
    }

    /// Queues a finished task's result for the next poll, and sends that
    /// poll at once if it is due.
    fn enqueue(self: &Arc<Self>, token: String, outcome: Outcome) {
        if let Some(entry) = self.held().get_mut(&token) {
            entry.done = true;
        }
        let result = TaskResult { token, outcome };
        let size = serde_json::to_vec(&result).map_or(0, |b| b.len());
        self.outbox().push_back(Ready { result, size });
        self.send_now();
        self.kick();
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
                    if inner.carrying() {
                        // Settled (and its slot freed) when a poll's answer
                        // comes back.
                        return inner.enqueue(token, outcome);
                    }
                    inner.report(&token, &outcome).await;
                }
            }
            inner.finish(&token);
        });
        held.insert(
            token,
            Held {
                handler: Some(handler),
                supervisor: supervisor.abort_handle(),
                stopped: None,
                done: false,
                sent: false,
                received: tokio::time::Instant::now(),
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
                Answer::UnknownSession(_) | Answer::Refused(_) => {
                    tracing::warn!(%token, "result refused by the server (final)");
                    return;
                }
            }
        }
    }

    /// After shutdown: wait for held tasks (up to the grace), abandon the rest.
    async fn drain(self: &Arc<Self>) {
        let deadline = tokio::time::Instant::now() + self.shutdown_grace;
        self.draining.store(true, Ordering::SeqCst);
        for poll in std::mem::take(&mut self.flow().long_aborts).into_values() {
            poll.abort();
        }
        loop {
            let notified = self.slot_freed.notified();
            // Results still waiting for a poll go by the result call.
            let waiting: Vec<Ready> = self.outbox().drain(..).collect();
            for ready in waiting {
                self.report_alone(ready.result);
            }
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
        *self.current.lock().unwrap_or_else(|p| p.into_inner()) = None;
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
