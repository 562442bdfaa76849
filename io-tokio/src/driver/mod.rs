//! The production driver: one tokio task owns the core's node loop (the
//! [`Engine`] inside `orbit_core::node::Node`), takes requests over a
//! channel (each with a oneshot for its reply), feeds it the time when it
//! asks, and performs its I/O — group commits through [`Storage`], loads,
//! replies and committed-event notifications.

pub use orbit_core::store::convert;
mod event_loop;
mod load;
mod metrics;

pub use convert::LOCAL_NODE;
pub use metrics::{Histogram, Metrics};

use crate::storage::{Storage, StorageError};
use orbit_core::engine::{Config, Engine, Request, RequestId, Response};
use orbit_core::history::{Event, Millis};
use orbit_core::node::{Node, NodeInput};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::sync::{broadcast, mpsc, oneshot};

/// Settings of a [`Driver`].
#[derive(Debug, Clone)]
pub struct Options {
    /// The engine's settings.
    pub engine: Config,
    /// How often time is fed to the engine even without a `WakeAt`.
    pub tick: Duration,
    /// Group commits written at once (at least 1). The engine keeps the
    /// batches of concurrent commits disjoint, so any value is safe; more
    /// overlap storage with the engine's work but make groups smaller. A
    /// commit the store reported written (SQLite: waiting for its WAL sync)
    /// does not count.
    pub commits_in_flight: usize,
    /// Shared cluster mode: this member and the shared database's calls
    /// (`None`: one server, or leader mode).
    pub membership: Option<Membership>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            engine: Config::default(),
            tick: Duration::from_millis(100),
            commits_in_flight: event_loop::COMMITS_IN_FLIGHT,
            membership: None,
        }
    }
}

/// A shared-mode member: its settings and the database's calls beyond
/// commits.
#[derive(Clone)]
pub struct Membership {
    /// `--node-id`, `--advertise`, `--node-timeout`.
    pub member: orbit_core::node::Member,
    /// The shared database.
    pub store: Arc<dyn orbit_core::store::shared::Store>,
}

impl std::fmt::Debug for Membership {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Membership")
            .field("member", &self.member)
            .finish_non_exhaustive()
    }
}

/// Events of one execution that just became durable.
#[derive(Debug, Clone, PartialEq)]
pub struct Committed {
    /// The execution.
    pub execution_id: String,
    /// The new events, by `seq`.
    pub events: std::sync::Arc<[Event]>,
}

pub(crate) enum Command {
    Request {
        id: RequestId,
        request: Request,
        reply: oneshot::Sender<Response>,
    },
    /// Requests handled as one batch, in order (`NodeInput::Requests`).
    Requests(Vec<(RequestId, Request, oneshot::Sender<Response>)>),
    Abandon(RequestId),
    Shutdown(oneshot::Sender<()>),
}

/// Milliseconds since the Unix epoch from the system clock: the one place
/// the production driver reads the wall clock ([`Sources::default`]). The
/// engine, the idempotency edge and purge, and the metrics all read the
/// time through [`Driver::now`] instead.
pub fn now_ms() -> Millis {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// Where a driver reads the time and draws new ids and the engine's hash
/// seed: the system clock, UUIDv4 and a seed from the operating system by
/// default; a simulation passes a virtual clock, seeded ids and a seed of
/// its own.
#[derive(Clone)]
pub struct Sources {
    /// Milliseconds since the Unix epoch.
    pub clock: Clock,
    /// A new identifier, never returned before.
    pub ids: Arc<dyn Fn() -> String + Send + Sync>,
    /// The engine's [`Config::hash_seed`]: unknown outside this process,
    /// so nobody can prepare execution ids that collide in its tables.
    pub hash_seed: u64,
}

impl Default for Sources {
    fn default() -> Self {
        Sources {
            clock: Arc::new(now_ms),
            ids: Arc::new(|| uuid::Uuid::new_v4().to_string()),
            // 64 of a version-4 UUID's random bits, which come from the
            // operating system.
            hash_seed: uuid::Uuid::new_v4().as_u64_pair().1,
        }
    }
}

impl std::fmt::Debug for Sources {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sources").finish_non_exhaustive()
    }
}

struct Shared {
    commands: mpsc::UnboundedSender<Command>,
    next_id: AtomicU64,
    committed: broadcast::Sender<Committed>,
    metrics: Arc<Metrics>,
    ready: AtomicBool,
    /// Stopped because this node no longer leads (`--cluster`): requests
    /// it could not answer get `503 NOT_LEADER`, which sends clients to
    /// the other servers, instead of `SHUTTING_DOWN`.
    deposed: AtomicBool,
    store: Arc<dyn Storage>,
    session_timeout_ms: Millis,
    clock: Clock,
    /// Shared mode: this member, and the members its last beat found.
    membership: Option<orbit_core::node::Member>,
    members: Members,
}

/// The members the last beat of a shared-mode node found, and when (the
/// driver's clock).
pub type Members = Arc<std::sync::Mutex<Option<(orbit_core::store::shared::Members, Millis)>>>;

/// The driver's clock: milliseconds since the Unix epoch.
pub type Clock = Arc<dyn Fn() -> Millis + Send + Sync>;

/// A cheap, cloneable handle on the running driver.
#[derive(Clone)]
pub struct Driver {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Driver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Driver").finish_non_exhaustive()
    }
}

/// Sends `Abandoned` for a request whose caller went away before its reply.
struct AbandonGuard {
    id: RequestId,
    commands: mpsc::UnboundedSender<Command>,
    armed: bool,
}

impl Drop for AbandonGuard {
    fn drop(&mut self) {
        if self.armed {
            let _ = self.commands.send(Command::Abandon(self.id));
        }
    }
}

impl Driver {
    /// Recovers the engine from `store` (definitions, executions, live
    /// idempotency records) and spawns the event loop.
    pub async fn start(store: Arc<dyn Storage>, options: Options) -> Result<Driver, StorageError> {
        Driver::start_with(store, options, Sources::default()).await
    }

    /// Like [`Driver::start`], reading the time and drawing ids from
    /// `sources` instead of the system.
    pub async fn start_with(
        store: Arc<dyn Storage>,
        options: Options,
        sources: Sources,
    ) -> Result<Driver, StorageError> {
        let started = std::time::Instant::now();
        let now = (sources.clock)();
        let definitions = store
            .load_definitions()
            .await?
            .iter()
            .filter_map(|d| {
                let decoded = convert::definition_from_store(d);
                if decoded.is_none() {
                    tracing::error!(name = %d.name, version = %d.version, "stored definition does not decode; skipped");
                }
                decoded
            })
            .collect();
        let metrics = Arc::new(Metrics::default());
        // Work in progress only: finished executions stay in the store. A
        // shared-mode member reads only what it owns, once it has taken it
        // back (the node loop asks).
        let executions = match &options.membership {
            Some(_) => Vec::new(),
            None => store
                .load_active()
                .await?
                .into_iter()
                .map(convert::execution_from_store)
                .collect::<Vec<_>>(),
        };
        for e in &executions {
            metrics.recover_queue(&e.execution_id, &e.events);
        }
        let events: usize = executions.iter().map(|e| e.events.len()).sum();
        let execution_count = executions.len();
        let ids = sources.ids.clone();
        let mut config = options.engine.clone();
        config.hash_seed = sources.hash_seed;
        if let Some(m) = &options.membership {
            config.node_id = Some(m.member.node_id.clone());
        }
        let engine = Engine::new(config, Box::new(move || ids()));
        let mut node = Node::new(engine, event_loop::node_config(&options));
        let initial = node.handle(
            now,
            NodeInput::Recover {
                definitions,
                executions,
                // Loaded per key when a request carries one.
                idempotency: Vec::new(),
            },
        );
        tracing::info!(
            executions = execution_count,
            events,
            elapsed_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
            "recovered"
        );
        let (commands, rx) = mpsc::unbounded_channel();
        let (committed, _) = broadcast::channel(1024);
        let shared = Arc::new(Shared {
            commands,
            next_id: AtomicU64::new(1),
            committed: committed.clone(),
            metrics: metrics.clone(),
            ready: AtomicBool::new(false),
            deposed: AtomicBool::new(false),
            store: store.clone(),
            session_timeout_ms: options.engine.session_timeout_ms,
            clock: sources.clock.clone(),
            membership: options.membership.as_ref().map(|m| m.member.clone()),
            members: Members::default(),
        });
        let event_loop = event_loop::EventLoop::new(
            node,
            store,
            options
                .membership
                .clone()
                .map(|m| (m, shared.members.clone())),
            rx,
            committed,
            metrics,
            sources.clock,
        );
        tokio::spawn(event_loop.run(initial));
        shared.ready.store(true, Ordering::SeqCst);
        Ok(Driver { shared })
    }

    /// Sends `request` to the engine and waits for its reply. If this future
    /// is dropped first (the client went away), the engine is told.
    pub async fn call(&self, request: Request) -> Response {
        let (id, watch) = self.enter(&request);
        let (reply, rx) = oneshot::channel();
        let command = Command::Request { id, request, reply };
        if self.shared.commands.send(command).is_err() {
            return self.stopped();
        }
        let mut guard = self.guard(id);
        let response = rx.await;
        guard.armed = false;
        match response {
            Ok(response) => {
                self.observe(watch, &response);
                response
            }
            Err(_) => self.stopped(),
        }
    }

    /// Sends `requests` to the engine to be handled as one, in order (what
    /// they write goes in one batch, and a poll last among them can take
    /// the tasks the others schedule), and waits for every reply; one
    /// response per request, in order. A worker's results and its next poll
    /// go this way.
    pub async fn call_together(&self, requests: Vec<Request>) -> Vec<Response> {
        self.send(requests).await
    }

    async fn send(&self, requests: Vec<Request>) -> Vec<Response> {
        let count = requests.len();
        let mut sessions = Vec::with_capacity(count);
        let mut sent = Vec::with_capacity(count);
        let mut replies = Vec::with_capacity(count);
        for request in requests {
            let (id, watch) = self.enter(&request);
            let (tx, rx) = oneshot::channel();
            sessions.push(watch);
            sent.push((id, request, tx));
            replies.push((id, rx));
        }
        if self.shared.commands.send(Command::Requests(sent)).is_err() {
            return (0..count).map(|_| self.stopped()).collect();
        }
        let mut guards: Vec<AbandonGuard> = replies.iter().map(|(id, _)| self.guard(*id)).collect();
        let mut responses = Vec::with_capacity(count);
        for (((_, rx), guard), session) in replies.into_iter().zip(&mut guards).zip(sessions) {
            let response = rx.await;
            guard.armed = false;
            let Ok(response) = response else {
                responses.push(self.stopped());
                continue;
            };
            self.observe(session, &response);
            responses.push(response);
        }
        responses
    }

    /// A new request's id, and what its reply will say of a worker session
    /// (a session's call counts as seen at once).
    fn enter(&self, request: &Request) -> (RequestId, Watch) {
        let id = self.shared.next_id.fetch_add(1, Ordering::Relaxed);
        let watch = watch(request);
        if let Watch::Session(session) = &watch {
            self.shared.metrics.session_seen(session, self.now());
        }
        (id, watch)
    }

    /// Tells the engine request `id` was abandoned if dropped armed.
    fn guard(&self, id: RequestId) -> AbandonGuard {
        AbandonGuard {
            id,
            commands: self.shared.commands.clone(),
            armed: true,
        }
    }

    /// Notes in the metrics what a reply says of a worker session.
    fn observe(&self, watch: Watch, response: &Response) {
        let metrics = &self.shared.metrics;
        let now = self.now();
        match (watch, response.status) {
            (Watch::Session(id), 404) => metrics.session_gone(&id),
            (Watch::Session(id), 200) if unregisters(response) => metrics.session_gone(&id),
            (Watch::Session(id), _) => metrics.session_seen(&id, now),
            (Watch::Registration, 200) => {
                if let Some(new) = response.body.field("session_id").and_then(|v| v.as_str()) {
                    metrics.session_seen(new, now);
                }
            }
            _ => {}
        }
    }

    /// Committed events of every execution, as they become durable.
    pub fn subscribe(&self) -> broadcast::Receiver<Committed> {
        self.shared.committed.subscribe()
    }

    /// The driver's metrics (the session gauge refreshed).
    pub fn metrics(&self) -> &Metrics {
        self.shared
            .metrics
            .live_sessions(self.shared.session_timeout_ms, self.now());
        &self.shared.metrics
    }

    /// The driver's time: the clock the engine runs on. Everything around
    /// the driver that needs the time (idempotency expiry and purge,
    /// metrics) reads it here, so a simulation's virtual clock is the only
    /// time they see.
    pub fn now(&self) -> Millis {
        (self.shared.clock)()
    }

    /// The driver's clock itself, for tasks that outlive a borrow of the
    /// driver.
    pub fn clock(&self) -> Clock {
        self.shared.clock.clone()
    }

    /// The store the driver commits to (for reads and health checks).
    pub fn store(&self) -> &Arc<dyn Storage> {
        &self.shared.store
    }

    /// Whether recovery finished and the loop is running.
    pub fn is_ready(&self) -> bool {
        self.shared.ready.load(Ordering::SeqCst) && !self.shared.commands.is_closed()
    }

    /// Shared cluster mode: this member's settings (`None` otherwise).
    pub fn membership(&self) -> Option<&orbit_core::node::Member> {
        self.shared.membership.as_ref()
    }

    /// Shared cluster mode: the members the last successful beat found,
    /// and when it came back (the driver's clock).
    pub fn members(&self) -> Option<(orbit_core::store::shared::Members, Millis)> {
        self.shared
            .members
            .lock()
            .map(|m| m.clone())
            .unwrap_or_default()
    }

    /// The configured session timeout.
    pub fn session_timeout_ms(&self) -> Millis {
        self.shared.session_timeout_ms
    }

    /// [`Driver::shutdown`] of a leader's driver when its term ends: the
    /// requests still parked are answered `503 NOT_LEADER` (no leader
    /// named: the next one is not known here).
    pub async fn depose(&self) {
        self.shared.deposed.store(true, Ordering::SeqCst);
        self.shutdown().await;
    }

    /// The answer to a request the stopped loop did not answer.
    fn stopped(&self) -> Response {
        if !self.shared.deposed.load(Ordering::SeqCst) {
            return shutting_down();
        }
        let mut r = Response::error(
            503,
            "NOT_LEADER",
            "this node stopped leading; another one takes over",
        );
        if let Some(error) = r.body.get_mut("error").and_then(|e| e.as_object_mut()) {
            error.insert("leader".into(), serde_json::Value::Null);
        }
        r
    }

    /// Stops the loop after the commit in flight (and the batches waiting for
    /// it) are written; requests still parked are answered with 503.
    pub async fn shutdown(&self) {
        self.shared.ready.store(false, Ordering::SeqCst);
        let (tx, rx) = oneshot::channel();
        if self.shared.commands.send(Command::Shutdown(tx)).is_ok() {
            let _ = rx.await;
        }
    }
}

/// The worker session a request is made in, if any.
/// What the reply to a request may tell the metrics of worker sessions.
enum Watch {
    /// The request names this session: its reply says whether it lives.
    Session(String),
    /// A registration: its reply names a new session.
    Registration,
    /// Nothing (the reply is not read: an execution's view, say, is not
    /// built into a tree to be searched for a session).
    Nothing,
}

fn watch(request: &Request) -> Watch {
    match request {
        Request::Poll { session_id, .. }
        | Request::Heartbeat { session_id, .. }
        | Request::Unregister { session_id } => Watch::Session(session_id.clone()),
        Request::RegisterWorker { .. } => Watch::Registration,
        _ => Watch::Nothing,
    }
}

fn unregisters(response: &Response) -> bool {
    // `field`: a poll's hand-out is not built into a tree to be looked at.
    response
        .body
        .field("unregistered")
        .and_then(|v| v.as_bool())
        == Some(true)
}

fn shutting_down() -> Response {
    Response::error(503, "SHUTTING_DOWN", "the server is shutting down")
}

#[cfg(test)]
mod tests {
    use super::Sources;

    #[test]
    fn each_driver_hashes_ids_with_a_seed_of_its_own() {
        let seeds: std::collections::BTreeSet<u64> =
            (0..8).map(|_| Sources::default().hash_seed).collect();
        assert_eq!(seeds.len(), 8, "{seeds:?}");
    }
}
