//! The node loop: the deterministic state machine around the [`Engine`]
//! that both drivers run — the production driver over tokio and sqlx, the
//! simulated world over its seeded store.
//!
//! The engine says *what* must be written; the node decides *how*: it
//! groups the batches that wait into one transaction (group commit), keeps
//! at most [`NodeConfig::commits_in_flight`] transactions in flight, hands
//! each batch its own result when a transaction comes back, splits a
//! `Conflict` (the batches it names fail, the others are written again in
//! the next transaction), turns `Ambiguous` into reloads, retries failed
//! reloads with backoff, and feeds the engine the passing of time (a
//! periodic tick plus the engine's own `WakeAt`).
//!
//! Like the engine it never performs I/O and never reads a clock: every
//! call carries the driver's `now`, completions come in as [`NodeInput`]s
//! and everything to do goes out as [`Io`] requests.

mod commit;
mod io;
mod reload;
mod shared;
mod stats;

pub use io::{CommitId, Fetched, GroupCommit, Io, LoadId, NodeInput};
pub use shared::Member;
pub use stats::{FailureCount, NodeStats};

use crate::engine::{Batch, Effect, Engine, Input};
use crate::history::Millis;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;

/// Settings of a [`Node`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeConfig {
    /// Transactions written at once (at least 1). The engine keeps the
    /// batches of concurrent commits disjoint, so any value is safe; more
    /// overlap storage with the engine's work but make groups smaller. A
    /// commit the store reported [`NodeInput::Written`] (it waits only
    /// for the disk) no longer counts.
    pub commits_in_flight: usize,
    /// How often the engine is ticked even without a `WakeAt`.
    pub tick_ms: Millis,
    /// The first delay before a failed load is tried again; it doubles up
    /// to [`NodeConfig::reload_backoff_max_ms`].
    pub reload_backoff_ms: Millis,
    /// The longest delay between two tries of a load.
    pub reload_backoff_max_ms: Millis,
    /// While a read the engine asked for (an evicted or forgotten
    /// execution, an Idempotency-Key's record) is outstanding, no group
    /// commit starts: the batches that follow from its answer join those
    /// already waiting. Only for a driver that answers such reads at once —
    /// the simulator's lockstep runs, which compare a run with eviction to
    /// one without and need both to form the same group commits; against a
    /// real store it would hold writes up for a read's latency. In the same
    /// mode a batch that only creates executions is written alone and at
    /// once (a blind create is a read in another form). Off by default.
    pub group_across_reads: bool,
    /// Shared cluster mode: this member's settings (`None`: one server,
    /// or leader mode).
    pub shared: Option<Member>,
}

impl Default for NodeConfig {
    fn default() -> Self {
        NodeConfig {
            commits_in_flight: 2,
            tick_ms: 100,
            reload_backoff_ms: 50,
            reload_backoff_max_ms: 2_000,
            group_across_reads: false,
            shared: None,
        }
    }
}

/// The node loop around one [`Engine`]. See the module documentation.
pub struct Node {
    engine: Engine,
    config: NodeConfig,
    out: Vec<Io>,
    /// Batches waiting for the next group commit, in order.
    pending: VecDeque<Batch>,
    /// Group commits being written.
    in_flight: BTreeMap<CommitId, Arc<GroupCommit>>,
    /// Commits of `in_flight` the store reported written (waiting only to
    /// be durable): they hold no commit slot.
    written: BTreeSet<CommitId>,
    next_commit: CommitId,
    loads: reload::Loads,
    /// When the engine asked to be ticked.
    engine_wake: Option<Millis>,
    /// When the periodic tick is next due (0 before the first input).
    next_tick: Millis,
    /// The last `WakeAt` given out.
    wake_sent: Option<Millis>,
    stats: NodeStats,
    shared: Option<shared::State>,
}

impl Node {
    /// A node loop around `engine`.
    pub fn new(engine: Engine, config: NodeConfig) -> Node {
        let shared = config.shared.clone().map(shared::State::new);
        Node {
            shared,
            engine,
            config: NodeConfig {
                commits_in_flight: config.commits_in_flight.max(1),
                tick_ms: config.tick_ms.max(1),
                ..config
            },
            out: Vec::new(),
            pending: VecDeque::new(),
            in_flight: BTreeMap::new(),
            written: BTreeSet::new(),
            next_commit: 1,
            loads: reload::Loads::default(),
            engine_wake: None,
            next_tick: 0,
            wake_sent: None,
            stats: NodeStats::default(),
        }
    }

    /// Handles one input at time `now` and returns the I/O to perform, in
    /// order.
    pub fn handle(&mut self, now: Millis, input: NodeInput) -> Vec<Io> {
        if self.next_tick == 0 || self.next_tick > now.saturating_add(self.config.tick_ms) {
            // First call, or the clock stepped back: tick a period from now.
            self.next_tick = now.saturating_add(self.config.tick_ms);
        }
        match input {
            NodeInput::Recover {
                definitions,
                executions,
                idempotency,
            } => self.engine_input(
                now,
                Input::Recover {
                    definitions,
                    executions,
                    idempotency,
                },
            ),
            NodeInput::Request { id, request } => {
                self.engine_input(now, Input::Request { id, request })
            }
            NodeInput::Requests { requests } => {
                self.engine_input(now, Input::Requests { requests })
            }
            NodeInput::Abandoned { id } => self.engine_input(now, Input::Abandoned { id }),
            NodeInput::Written { commit } => {
                if self.in_flight.contains_key(&commit) {
                    self.written.insert(commit);
                }
            }
            NodeInput::Committed { commit, result } => self.committed(now, commit, result),
            NodeInput::Loaded { load, result } => self.loaded(now, load, result),
            NodeInput::Fetched { load, result } => self.fetched(now, load, result),
            NodeInput::Time => {
                // The driver's timer fired: whatever was asked for is asked
                // again. A timer may fire before `now` reaches the time asked
                // for (a wall clock slewed slower than the timer's clock);
                // nothing is due then, and without a new request nothing
                // would ever tick again.
                self.wake_sent = None;
                self.time(now);
            }
            other => self.shared_input(now, other),
        }
        if !(self.config.group_across_reads && self.loads.fetches_open() > 0) {
            self.start_commit();
        }
        self.ask_wake();
        std::mem::take(&mut self.out)
    }

    /// The engine (for reads a driver or test makes outside the loop).
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// The engine, mutably (for drivers that feed it directly, e.g. planted
    /// bugs in tests).
    pub fn engine_mut(&mut self) -> &mut Engine {
        &mut self.engine
    }

    /// Counters of what the loop did.
    pub fn stats(&self) -> &NodeStats {
        &self.stats
    }

    /// Whether nothing is waiting to be written and nothing is being
    /// written (a driver that shuts down waits for this).
    pub fn is_idle(&self) -> bool {
        self.pending.is_empty() && self.in_flight.is_empty()
    }

    /// Reads of the store being read or waiting to be tried again
    /// (reloads after `Ambiguous`, and the engine's loads).
    pub fn reads_open(&self) -> usize {
        self.loads.open_count()
    }

    /// Group commits not answered yet: being written, or written and
    /// waiting to be durable.
    pub fn commits_in_flight(&self) -> usize {
        self.in_flight.len()
    }

    fn time(&mut self, now: Millis) {
        let periodic = now >= self.next_tick;
        let woken = self.engine_wake.is_some_and(|t| now >= t);
        if periodic {
            self.next_tick = now.saturating_add(self.config.tick_ms);
        }
        if woken {
            self.engine_wake = None;
        }
        if periodic || woken {
            self.stats.ticks += 1;
            self.engine_input(now, Input::Tick);
        }
        self.shared_time(now);
        self.retry_loads(now);
    }

    /// Feeds the engine and routes its effects.
    fn engine_input(&mut self, now: Millis, input: Input) {
        let effects = self.engine.handle(now, input);
        self.route(effects);
    }

    fn route(&mut self, effects: Vec<Effect>) {
        // Most effects become one output each (replies above all).
        self.out.reserve(effects.len());
        for effect in effects {
            match effect {
                Effect::Append(batch) => self.pending.push_back(batch),
                Effect::Reload { executions } => self.load(executions),
                Effect::Load {
                    load,
                    executions,
                    idempotency,
                } => self.fetch(load, executions, idempotency),
                Effect::Reply { request, response } => {
                    self.out.push(Io::Reply { request, response })
                }
                Effect::WakeAt(t) => self.engine_wake = Some(t),
                Effect::Committed {
                    execution_id,
                    events,
                } => self.out.push(Io::Committed {
                    execution_id,
                    events,
                }),
                Effect::Send {
                    send,
                    execution_id,
                    kind,
                    body,
                } => self.out.push(Io::Send {
                    send,
                    execution_id,
                    kind,
                    body,
                }),
                Effect::Claim { claim, poll } => self.out.push(Io::Claim { claim, poll }),
                Effect::InboxDone { entry, applied } => self.inbox_done(entry, applied),
                Effect::ReadDefinitions => self.read_definitions(),
                Effect::FindSignal {
                    watch,
                    owner,
                    entry,
                    execution_id,
                    name,
                    payload,
                } => self.out.push(Io::FindSignal {
                    watch,
                    owner,
                    entry,
                    execution_id,
                    name,
                    payload,
                }),
            }
        }
    }

    /// Asks for `Time` at the earliest deadline, when it changed.
    fn ask_wake(&mut self) {
        let mut at = self.next_tick;
        if let Some(t) = self.engine_wake {
            at = at.min(t);
        }
        if let Some(t) = self.loads.next_retry() {
            at = at.min(t);
        }
        if let Some(t) = self.shared_due() {
            at = at.min(t);
        }
        if self.wake_sent != Some(at) {
            self.wake_sent = Some(at);
            self.out.push(Io::WakeAt(at));
        }
    }
}
