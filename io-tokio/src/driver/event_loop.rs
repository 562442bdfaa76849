//! The driver's loop: feeds the engine, executes its effects, and runs group
//! commits — while a transaction is being written, new batches wait and are
//! merged into the next one; each batch gets its own storage result.
//!
//! Up to [`Options::commits_in_flight`] transactions (default
//! [`COMMITS_IN_FLIGHT`]) are written at once. The engine
//! never puts an execution into a batch while an earlier batch of it is
//! unanswered, so batches in flight together touch disjoint executions and
//! their order does not matter; overlapping them keeps the store busy while
//! this loop settles the previous commit's results.

use super::{convert, Command, Committed, Metrics, Options};
use crate::storage::{Storage, StorageError, Transaction};
use orbit_core::engine::{
    Batch, Effect, Engine, Input, RequestId, Response, StorageResult, StoredExecution,
};
use orbit_core::history::Millis;
use std::collections::{BTreeSet, HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{broadcast, mpsc, oneshot};
use tokio::task::{self, JoinSet};

type CommitOutcome = (Vec<Batch>, Result<(), StorageError>);

/// Transactions written concurrently by default (SQLite queues the second
/// behind its single writer connection, but its preparation overlaps the
/// first).
pub(super) const COMMITS_IN_FLIGHT: usize = 2;

pub(super) struct EventLoop {
    engine: Engine,
    store: Arc<dyn Storage>,
    commands: mpsc::UnboundedReceiver<Command>,
    committed: broadcast::Sender<Committed>,
    metrics: Arc<Metrics>,
    tick: Duration,
    /// Most transactions written at once.
    max_in_flight: usize,
    pending: VecDeque<Batch>,
    in_flight: JoinSet<CommitOutcome>,
    /// The batch ids of each commit in flight (to answer them if its task
    /// dies).
    in_flight_ids: HashMap<task::Id, Vec<u64>>,
    replies: HashMap<RequestId, oneshot::Sender<Response>>,
    wake_at: Option<Millis>,
    reloads_tx: mpsc::UnboundedSender<Vec<StoredExecution>>,
    reloads_rx: mpsc::UnboundedReceiver<Vec<StoredExecution>>,
    loads: super::load::Loads,
    clock: Arc<dyn Fn() -> Millis + Send + Sync>,
}

impl EventLoop {
    pub(super) fn new(
        engine: Engine,
        store: Arc<dyn Storage>,
        commands: mpsc::UnboundedReceiver<Command>,
        committed: broadcast::Sender<Committed>,
        metrics: Arc<Metrics>,
        options: &Options,
        clock: Arc<dyn Fn() -> Millis + Send + Sync>,
    ) -> EventLoop {
        let (reloads_tx, reloads_rx) = mpsc::unbounded_channel();
        EventLoop {
            engine,
            store,
            commands,
            committed,
            metrics,
            tick: options.tick,
            max_in_flight: options.commits_in_flight.max(1),
            pending: VecDeque::new(),
            in_flight: JoinSet::new(),
            in_flight_ids: HashMap::new(),
            replies: HashMap::new(),
            wake_at: None,
            reloads_tx,
            reloads_rx,
            loads: super::load::Loads::new(),
            clock,
        }
    }

    pub(super) async fn run(mut self, initial: Vec<Effect>) {
        self.execute(initial);
        let mut ticker = tokio::time::interval(self.tick);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut shutdown: Option<oneshot::Sender<()>> = None;
        loop {
            if self.in_flight.len() < self.max_in_flight {
                if shutdown.is_some() && self.pending.is_empty() && self.in_flight.is_empty() {
                    break;
                }
                self.start_commit();
            }
            let wake_in = self
                .wake_at
                .map(|t| Duration::from_millis(t.saturating_sub((self.clock)())));
            tokio::select! {
                Some(joined) = self.in_flight.join_next_with_id() => match joined {
                    Ok((task, (batches, result))) => {
                        self.in_flight_ids.remove(&task);
                        self.on_commit(batches, result);
                    }
                    Err(join_error) => {
                        // The commit task died: its outcome is unknown.
                        tracing::error!(error = %join_error, "commit task failed");
                        self.failed("commit task failed");
                        let ids = self.in_flight_ids.remove(&join_error.id()).unwrap_or_default();
                        for batch in ids {
                            let result = StorageResult::Ambiguous {
                                message: format!("commit task failed: {join_error}"),
                            };
                            let effects = self.engine.handle((self.clock)(), Input::Stored { batch, result });
                            self.execute(effects);
                        }
                    }
                },
                command = self.commands.recv(), if shutdown.is_none() => match command {
                    Some(Command::Request { id, request, reply }) => {
                        self.replies.insert(id, reply);
                        let effects = self.engine.handle((self.clock)(), Input::Request { id, request });
                        self.execute(effects);
                    }
                    Some(Command::Abandon(id)) => {
                        if self.replies.remove(&id).is_some() {
                            let effects = self.engine.handle((self.clock)(), Input::Abandoned { id });
                            self.execute(effects);
                        }
                    }
                    Some(Command::Shutdown(done)) => shutdown = Some(done),
                    None => shutdown = shutdown.or_else(|| Some(oneshot::channel().0)),
                },
                Some(executions) = self.reloads_rx.recv() => {
                    let effects = self.engine.handle((self.clock)(), Input::Reloaded { executions });
                    self.execute(effects);
                }
                Some(loaded) = self.loads.done.recv() => {
                    let effects = self.engine.handle((self.clock)(), loaded);
                    self.execute(effects);
                }
                _ = ticker.tick() => self.tick_engine(),
                _ = sleep_for(wake_in) => {
                    self.wake_at = None;
                    self.tick_engine();
                }
            }
        }
        tracing::info!("driver stopped");
        if let Some(done) = shutdown {
            let _ = done.send(());
        }
    }

    fn tick_engine(&mut self) {
        let effects = self.engine.handle((self.clock)(), Input::Tick);
        self.execute(effects);
    }

    fn execute(&mut self, effects: Vec<Effect>) {
        for effect in effects {
            match effect {
                Effect::Append(batch) => self.pending.push_back(batch),
                Effect::Reload { executions } => self.reload(executions),
                Effect::Load {
                    load,
                    executions,
                    idempotency,
                } => self.load_on_demand(load, executions, idempotency),
                Effect::Reply { request, response } => {
                    if let Some(reply) = self.replies.remove(&request) {
                        let _ = reply.send(response);
                    }
                }
                Effect::WakeAt(t) => self.wake_at = Some(t),
                Effect::Committed {
                    execution_id,
                    events,
                } => {
                    self.metrics.record_events(&execution_id, &events);
                    let _ = self.committed.send(Committed {
                        execution_id,
                        events,
                    });
                }
            }
        }
    }

    /// Writes every waiting batch in one transaction, in a task of its own.
    fn start_commit(&mut self) {
        if self.pending.is_empty() {
            return;
        }
        let batches: Vec<Batch> = self.pending.drain(..).collect();
        let ids = batches.iter().map(|b| b.id).collect();
        let store = self.store.clone();
        let metrics = self.metrics.clone();
        let handle = self.in_flight.spawn(async move {
            let mut tx = Transaction::default();
            for b in &batches {
                tx.merge(convert::transaction(b, convert::LOCAL_NODE));
            }
            let events: usize = tx.appends.iter().map(|a| a.events.len()).sum();
            let started = Instant::now();
            let result = store.commit(&tx).await;
            metrics
                .commit_latency
                .observe(started.elapsed().as_secs_f64());
            metrics.batches_per_commit.observe(batches.len() as f64);
            metrics.events_per_commit.observe(events as f64);
            (batches, result)
        });
        self.in_flight_ids.insert(handle.id(), ids);
    }

    fn on_commit(&mut self, batches: Vec<Batch>, result: Result<(), StorageError>) {
        let results: Vec<(u64, StorageResult)> = match result {
            Ok(()) => batches.iter().map(|b| (b.id, StorageResult::Ok)).collect(),
            Err(StorageError::Unavailable(message)) => {
                self.failed(&message);
                batches
                    .iter()
                    .map(|b| {
                        (
                            b.id,
                            StorageResult::Unavailable {
                                message: message.clone(),
                            },
                        )
                    })
                    .collect()
            }
            Err(StorageError::Ambiguous(message)) => {
                self.failed(&message);
                batches
                    .iter()
                    .map(|b| {
                        (
                            b.id,
                            StorageResult::Ambiguous {
                                message: message.clone(),
                            },
                        )
                    })
                    .collect()
            }
            Err(StorageError::Conflict { fenced, stale }) => {
                self.failed("conflict");
                let fenced: BTreeSet<String> = fenced.into_iter().collect();
                let stale: BTreeSet<String> = stale.into_iter().collect();
                let mut results = Vec::new();
                // Batches not concerned go back, in order, to be re-committed.
                let mut innocent = Vec::new();
                for b in batches {
                    let ids: Vec<&String> = b.executions.iter().map(|a| &a.execution_id).collect();
                    let f: Vec<String> = ids
                        .iter()
                        .filter(|id| fenced.contains(**id))
                        .map(|s| (*s).clone())
                        .collect();
                    let s: Vec<String> = ids
                        .iter()
                        .filter(|id| stale.contains(**id))
                        .map(|s| (*s).clone())
                        .collect();
                    if f.is_empty() && s.is_empty() {
                        innocent.push(b);
                    } else {
                        let message = if f.is_empty() {
                            format!("stale seq for {}", s.join(", "))
                        } else {
                            format!("fenced: {} is owned by another node", f.join(", "))
                        };
                        results.push((
                            b.id,
                            StorageResult::Conflict {
                                message,
                                fenced: f,
                                stale: s,
                            },
                        ));
                    }
                }
                for b in innocent.into_iter().rev() {
                    self.pending.push_front(b);
                }
                results
            }
        };
        for (batch, result) in results {
            let effects = self
                .engine
                .handle((self.clock)(), Input::Stored { batch, result });
            self.execute(effects);
        }
    }

    fn failed(&self, message: &str) {
        self.metrics
            .commit_failures
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        tracing::warn!(error = %message, "group commit failed");
    }

    /// Reads what a parked request needs, off the loop, on reader
    /// connections (see [`super::load`]).
    fn load_on_demand(&self, load: u64, executions: Vec<String>, idempotency: Vec<String>) {
        self.loads.spawn(
            self.store.clone(),
            self.clock.clone(),
            load,
            executions,
            idempotency,
        );
    }

    /// Reads the executions back from the store, retrying until it answers.
    fn reload(&self, ids: Vec<String>) {
        let store = self.store.clone();
        let tx = self.reloads_tx.clone();
        tokio::spawn(async move {
            let mut delay = Duration::from_millis(50);
            loop {
                match load(store.as_ref(), &ids).await {
                    Ok(executions) => {
                        let _ = tx.send(executions);
                        return;
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "reload failed; retrying");
                        tokio::time::sleep(delay).await;
                        delay = (delay * 2).min(Duration::from_secs(2));
                    }
                }
            }
        });
    }
}

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
