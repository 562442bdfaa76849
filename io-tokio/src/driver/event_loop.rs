//! The driver's loop: a thin executor of the core's node loop
//! ([`orbit_core::node::Node`]). It feeds the node the commands that come
//! in over the channel, the completions of the I/O it asked for, and the
//! time when the node's `WakeAt` comes; and it performs the node's I/O —
//! group commits in tasks of their own (up to
//! [`Options::commits_in_flight`] at once, default [`COMMITS_IN_FLIGHT`]),
//! loads, replies and committed-event notifications. Group-commit
//! assembly, per-batch results, the `Conflict` split, reloads and their
//! backoff, and ticks are the node's, the same code the simulation runs.
//!
//! The `select!` is `biased;`: completions first (they free commit slots
//! and answer requests), then the timer, then new commands — an order that
//! cannot starve the timer, as it is ready only once its time has come.

use super::{Clock, Command, Committed, Metrics, Options};
use crate::storage::{Storage, StorageError};
use orbit_core::engine::{RequestId, Response, StoredExecution};
use orbit_core::history::Millis;
use orbit_core::node::{CommitId, Fetched, Io, LoadId, Node, NodeInput};
use orbit_core::store::{convert, shared};
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{broadcast, mpsc, oneshot};
use tokio::task::{self, JoinSet};

type Loaded = (LoadId, Result<Vec<StoredExecution>, StorageError>);

/// Transactions written concurrently by default: PostgreSQL's two commit
/// connections. `orbit server` sets 1 on SQLite, whose one writer takes a
/// commit at a time; a SQLite commit waiting only for its WAL sync holds no
/// slot, so the next is formed and written meanwhile.
pub(super) const COMMITS_IN_FLIGHT: usize = 2;

pub(super) struct EventLoop {
    node: Node,
    store: Arc<dyn Storage>,
    /// Shared mode: the database's calls beyond commits.
    shared: Option<Arc<dyn shared::Store>>,
    /// The node id commits are fenced with.
    fence_node: Arc<str>,
    /// Shared mode: the member whose liveness every commit checks.
    writer: Option<orbit_core::store::Writer>,
    /// The members of the last successful beat (for `/v1/cluster`).
    members: super::Members,
    /// Inputs from the loop's own tasks: completions of shared-mode calls,
    /// and commits the store reported written.
    inputs_tx: mpsc::UnboundedSender<NodeInput>,
    inputs_rx: mpsc::UnboundedReceiver<NodeInput>,
    commands: mpsc::UnboundedReceiver<Command>,
    committed: broadcast::Sender<Committed>,
    metrics: Arc<Metrics>,
    in_flight: JoinSet<(CommitId, Result<(), StorageError>)>,
    /// The commit of each task in flight (to answer it if its task dies).
    in_flight_ids: HashMap<task::Id, CommitId>,
    replies: HashMap<RequestId, oneshot::Sender<Response>>,
    wake_at: Option<Millis>,
    loads_tx: mpsc::UnboundedSender<Loaded>,
    loads_rx: mpsc::UnboundedReceiver<Loaded>,
    fetches_tx: mpsc::UnboundedSender<(LoadId, Result<Fetched, StorageError>)>,
    fetches_rx: mpsc::UnboundedReceiver<(LoadId, Result<Fetched, StorageError>)>,
    clock: Clock,
}

impl EventLoop {
    pub(super) fn new(
        node: Node,
        store: Arc<dyn Storage>,
        member: Option<(super::Membership, super::Members)>,
        commands: mpsc::UnboundedReceiver<Command>,
        committed: broadcast::Sender<Committed>,
        metrics: Arc<Metrics>,
        clock: Clock,
    ) -> EventLoop {
        let (loads_tx, loads_rx) = mpsc::unbounded_channel();
        let (fetches_tx, fetches_rx) = mpsc::unbounded_channel();
        let (inputs_tx, inputs_rx) = mpsc::unbounded_channel();
        let (membership, members) = match member {
            Some((m, members)) => (Some(m), members),
            None => (None, super::Members::default()),
        };
        let fence_node: Arc<str> = match &membership {
            Some(m) => m.member.node_id.as_str().into(),
            None => convert::LOCAL_NODE.into(),
        };
        let writer = membership.as_ref().map(|m| orbit_core::store::Writer {
            node_id: m.member.node_id.clone(),
            timeout_ms: m.member.node_timeout_ms,
        });
        EventLoop {
            node,
            store,
            writer,
            shared: membership.map(|m| m.store),
            fence_node,
            members,
            inputs_tx,
            inputs_rx,
            commands,
            committed,
            metrics,
            in_flight: JoinSet::new(),
            in_flight_ids: HashMap::new(),
            replies: HashMap::new(),
            wake_at: None,
            loads_tx,
            loads_rx,
            fetches_tx,
            fetches_rx,
            clock,
        }
    }

    pub(super) async fn run(mut self, initial: Vec<Io>) {
        self.perform(initial);
        let mut shutdown: Option<oneshot::Sender<()>> = None;
        loop {
            if shutdown.is_some() && self.node.is_idle() {
                break;
            }
            let wake_in = self
                .wake_at
                .map(|t| Duration::from_millis(t.saturating_sub((self.clock)())));
            tokio::select! {
                biased;
                Some(joined) = self.in_flight.join_next_with_id() => match joined {
                    Ok((task, (commit, result))) => {
                        self.in_flight_ids.remove(&task);
                        if let Err(e) = &result {
                            self.failed(&e.to_string());
                        }
                        self.feed(NodeInput::Committed { commit, result });
                    }
                    Err(join_error) => {
                        // The commit task died: its outcome is unknown.
                        tracing::error!(error = %join_error, "commit task failed");
                        self.failed("commit task failed");
                        if let Some(commit) = self.in_flight_ids.remove(&join_error.id()) {
                            let result = Err(StorageError::Ambiguous(format!(
                                "commit task failed: {join_error}"
                            )));
                            self.feed(NodeInput::Committed { commit, result });
                        }
                    }
                },
                Some((load, result)) = self.loads_rx.recv() => {
                    if let Err(e) = &result {
                        tracing::warn!(error = %e, "reload failed; retrying");
                    }
                    self.feed(NodeInput::Loaded { load, result });
                }
                Some((load, result)) = self.fetches_rx.recv() => {
                    if let Err(e) = &result {
                        tracing::warn!(error = %e, "load failed; retrying");
                    }
                    self.feed(NodeInput::Fetched { load, result });
                }
                Some(input) = self.inputs_rx.recv() => self.feed(input),
                _ = sleep_for(wake_in) => self.feed(NodeInput::Time),
                command = self.commands.recv(), if shutdown.is_none() => match command {
                    Some(Command::Request { id, request, reply }) => {
                        self.replies.insert(id, reply);
                        self.feed(NodeInput::Request { id, request });
                    }
                    Some(Command::Requests(sent)) => {
                        let mut requests = Vec::with_capacity(sent.len());
                        for (id, request, reply) in sent {
                            self.replies.insert(id, reply);
                            requests.push((id, request));
                        }
                        self.feed(NodeInput::Requests { requests });
                    }
                    Some(Command::Abandon(id)) => {
                        if self.replies.remove(&id).is_some() {
                            self.feed(NodeInput::Abandoned { id });
                        }
                    }
                    Some(Command::Shutdown(done)) => shutdown = Some(done),
                    None => shutdown = shutdown.or_else(|| Some(oneshot::channel().0)),
                },
            }
        }
        tracing::info!("driver stopped");
        if let Some(done) = shutdown {
            let _ = done.send(());
        }
    }

    /// Feeds the node at the driver's time and performs what it asks.
    fn feed(&mut self, input: NodeInput) {
        if let NodeInput::Committed {
            result: Err(StorageError::Conflict { fenced, .. }),
            ..
        } = &input
        {
            if !fenced.is_empty() {
                tracing::warn!(
                    executions = ?fenced,
                    "fenced: another node owns these executions now; this node gave them up"
                );
            }
        }
        let drops = self.node.stats().drops;
        let ios = self.node.handle((self.clock)(), input);
        if self.node.stats().drops > drops {
            tracing::warn!(
                "fenced: this node was out of touch with the database for --node-timeout; \
                 it dropped the executions it owned and takes back those still its own"
            );
        }
        let engine = self.node.engine();
        self.metrics.in_memory.store(
            i64::try_from(engine.executions_in_memory()).unwrap_or(i64::MAX),
            Ordering::Relaxed,
        );
        self.metrics.evicted.store(
            i64::try_from(engine.evicted()).unwrap_or(i64::MAX),
            Ordering::Relaxed,
        );
        self.perform(ios);
    }

    fn perform(&mut self, ios: Vec<Io>) {
        for io in ios {
            match io {
                Io::Commit(commit) => {
                    let store = self.store.clone();
                    let metrics = self.metrics.clone();
                    let id = commit.id;
                    let node = self.fence_node.clone();
                    let writer = self.writer.clone();
                    let inputs = self.inputs_tx.clone();
                    let batches = commit.batches.len() as f64;
                    let events = commit.events() as f64;
                    let handle = self.in_flight.spawn(async move {
                        // The rows are built where the store writes them
                        // (SQLite: its commit thread), not on this one.
                        let make = Box::new(move || {
                            let mut tx = convert::group_transaction(&commit.batches, &node);
                            tx.writer = writer;
                            tx
                        });
                        // Commit latency is a duration on the monotonic
                        // clock, not a time the engine sees.
                        let started = Instant::now();
                        let written = move || {
                            let _ = inputs.send(NodeInput::Written { commit: id });
                        };
                        let result = store.commit_signalling(make, &written).await;
                        metrics
                            .commit_latency
                            .observe(started.elapsed().as_secs_f64());
                        metrics.batches_per_commit.observe(batches);
                        metrics.events_per_commit.observe(events);
                        (id, result)
                    });
                    self.in_flight_ids.insert(handle.id(), id);
                }
                Io::Load { id, executions } => {
                    let store = self.store.clone();
                    let tx = self.loads_tx.clone();
                    tokio::spawn(async move {
                        let result = load(store.as_ref(), &executions).await;
                        let _ = tx.send((id, result));
                    });
                }
                Io::Fetch {
                    id,
                    executions,
                    idempotency,
                } => {
                    let store = self.store.clone();
                    let tx = self.fetches_tx.clone();
                    let now = (self.clock)();
                    tokio::spawn(async move {
                        let result =
                            super::load::fetch(store.as_ref(), now, &executions, &idempotency)
                                .await;
                        let _ = tx.send((id, result));
                    });
                }
                Io::Reply { request, response } => {
                    if let Some(reply) = self.replies.remove(&request) {
                        let _ = reply.send(response);
                    }
                }
                Io::WakeAt(t) => self.wake_at = Some(t),
                Io::Committed {
                    execution_id,
                    events,
                } => {
                    self.metrics.record_events(&execution_id, &events);
                    let _ = self.committed.send(Committed {
                        execution_id,
                        events,
                    });
                }
                shared => self.perform_shared(shared),
            }
        }
    }

    /// Performs a shared-mode call in a task of its own; its completion
    /// comes back through `inputs`.
    fn perform_shared(&mut self, io: Io) {
        let Some(store) = self.shared.clone() else {
            tracing::error!(?io, "a shared-mode call outside shared mode");
            return;
        };
        let tx = self.inputs_tx.clone();
        let members = self.members.clone();
        let clock = self.clock.clone();
        let store_all = self.store.clone();
        tokio::spawn(async move {
            let input = match io {
                Io::Beat {
                    node_id,
                    advertise,
                    timeout_ms,
                } => {
                    let result = store.beat(&node_id, &advertise, timeout_ms).await;
                    match &result {
                        Ok(m) => {
                            if let Ok(mut last) = members.lock() {
                                *last = Some((m.clone(), clock()));
                            }
                        }
                        Err(e) => tracing::warn!(error = %e, "cannot reach the database to beat"),
                    }
                    NodeInput::Beat { result }
                }
                Io::TakeOver {
                    node_id,
                    dead,
                    live,
                    timeout_ms,
                    limit,
                } => {
                    let result = store
                        .take_over(&node_id, &dead, &live, timeout_ms, limit)
                        .await;
                    match &result {
                        Ok(taken) if !taken.is_empty() => tracing::info!(
                            dead = %dead,
                            executions = taken.len(),
                            "took over executions of a member that stopped answering"
                        ),
                        Ok(_) => {}
                        Err(e) => tracing::warn!(dead = %dead, error = %e, "cannot take over"),
                    }
                    NodeInput::TakenOver { result }
                }
                Io::Reclaim {
                    node_id,
                    after_id,
                    timeout_ms,
                    limit,
                } => NodeInput::Reclaimed {
                    result: store.reclaim(&node_id, &after_id, timeout_ms, limit).await,
                },
                Io::ReadInbox {
                    node_id,
                    read,
                    limit,
                } => NodeInput::InboxRead {
                    read,
                    result: store.inbox(&node_id, 0, limit).await,
                },
                Io::Send {
                    send,
                    execution_id,
                    kind,
                    body,
                } => NodeInput::Sent {
                    send,
                    result: store.send(&execution_id, kind, &body).await,
                },
                Io::Claim { claim, poll } => NodeInput::Claimed {
                    claim,
                    result: store.claim(&poll).await,
                },
                Io::TouchSessions { node_id, sessions } => NodeInput::Touched {
                    result: store.touch_sessions(&node_id, &sessions).await,
                },
                Io::FindSignal {
                    watch,
                    owner,
                    entry,
                    execution_id,
                    name,
                    payload,
                } => NodeInput::SignalFound {
                    watch,
                    result: find_signal(
                        store.as_ref(),
                        store_all.as_ref(),
                        (&owner, entry),
                        &execution_id,
                        (&name, &payload),
                    )
                    .await,
                },
                Io::ReadDefinitions => NodeInput::Definitions {
                    result: store_definitions(store_all.as_ref()).await,
                },
                Io::ReadSessions { sessions } => NodeInput::SessionContacts {
                    result: store.session_contacts(&sessions).await,
                },
                _ => return,
            };
            let _ = tx.send(input);
        });
    }

    fn failed(&self, message: &str) {
        self.metrics.commit_failures.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(error = %message, "group commit failed");
    }
}

/// The seq of a signal sent to `owner`'s inbox as `entry`, once the owner
/// applied it: the last `SignalReceived` of the execution with its name and
/// payload (`None` while the entry waits).
async fn find_signal(
    shared: &dyn shared::Store,
    store: &dyn Storage,
    (owner, entry): (&str, i64),
    execution_id: &str,
    (name, payload): (&str, &serde_json::Value),
) -> Result<Option<u64>, StorageError> {
    let waiting = shared.inbox(owner, entry.saturating_sub(1), 1).await?;
    if waiting.first().is_some_and(|e| e.id == entry) {
        return Ok(None);
    }
    let events = store.history(execution_id, 0, u32::MAX).await?;
    Ok(events.iter().rev().find_map(|e| match &e.kind {
        orbit_core::history::EventKind::SignalReceived {
            name: n,
            payload: p,
        } if n == name && p == payload => Some(e.seq),
        _ => None,
    }))
}

/// Every definition the store holds that decodes.
async fn store_definitions(
    store: &dyn Storage,
) -> Result<Vec<orbit_core::engine::DefinitionRecord>, StorageError> {
    Ok(store
        .load_definitions()
        .await?
        .iter()
        .filter_map(convert::definition_from_store)
        .collect())
}

/// Reads `ids` back from the store (an unknown one with no events).
async fn load(store: &dyn Storage, ids: &[String]) -> Result<Vec<StoredExecution>, StorageError> {
    let mut out = Vec::with_capacity(ids.len());
    for id in ids {
        let events = store
            .load_execution(id)
            .await?
            .map(|e| e.events)
            .unwrap_or_default();
        out.push(StoredExecution {
            execution_id: id.clone(),
            events,
        });
    }
    Ok(out)
}

async fn sleep_for(d: Option<Duration>) {
    match d {
        Some(d) => tokio::time::sleep(d).await,
        None => std::future::pending().await,
    }
}

/// Options as the node loop's settings.
pub(super) fn node_config(options: &Options) -> orbit_core::node::NodeConfig {
    orbit_core::node::NodeConfig {
        commits_in_flight: options.commits_in_flight.max(1),
        tick_ms: u64::try_from(options.tick.as_millis())
            .unwrap_or(u64::MAX)
            .max(1),
        shared: options.membership.as_ref().map(|m| m.member.clone()),
        ..orbit_core::node::NodeConfig::default()
    }
}
