//! The seeded world: one thread, one RNG, virtual time, and a queue of
//! timed events. It owns the simulated store, the server (the core's node
//! loop around an unchanged `orbit_core::Engine`, whose I/O the world
//! performs: see [`server`]), the network between the server and the simulated
//! workers and clients, and the fault schedule. After every commit and
//! every acknowledgement it runs the invariant checkers.

use crate::bugs::Bugs;
use crate::builtin::{Builtin, BuiltinEv};
use crate::check::{self, durability::Fact, Invariant, Violation};
use crate::client::Client;
use crate::config::SimConfig;
use crate::payment::Payments;
use crate::report::{Outcome, Report, Stats};
use crate::rng::SimRng;
use crate::store::SimStore;
use crate::worker::Worker;
use crate::workload;
use orbit_core::engine::{Batch, DefinitionRecord, Request, RequestId, Response};
use orbit_core::history::Millis;
use orbit_core::ir;
use orbit_core::node::{GroupCommit, Io, LoadId, Node, NodeInput, NodeStats};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;

mod cluster;
pub(crate) mod lockstep;
mod server;
mod shared;

pub(crate) use cluster::ClusterEv;
pub(crate) use shared::SharedEv;

/// Steps the world takes at one virtual instant before it reports a spin
/// (a node asking for `Time` at a time already come, forever).
const SPIN_STEPS_MAX: u64 = 200_000;

/// Virtual time at which every run starts (2026-01-01T00:00:00Z).
pub const EPOCH_MS: Millis = 1_767_225_600_000;

/// Who sent a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Actor {
    Worker(usize),
    Client(usize),
    /// The server's own executor of built-in tasks (in process).
    Builtin,
}

/// A timed event of the world.
#[derive(Debug, Clone)]
pub(crate) enum Ev {
    ToServer {
        /// The node it was sent to.
        node: usize,
        from: Actor,
        req: u64,
        request: Request,
    },
    /// Requests sent in one message, handled as one (a worker's results
    /// and its next poll).
    ToServerTogether {
        node: usize,
        from: Actor,
        requests: Vec<(u64, Request)>,
    },
    ToActor {
        to: Actor,
        req: u64,
        response: Response,
    },
    CommitDone {
        inc: u64,
        commit: Arc<GroupCommit>,
    },
    /// A commit applied and reported written becomes durable
    /// ([`crate::SimConfig::sync_after_write`]).
    CommitDurable {
        inc: u64,
        commit: Arc<GroupCommit>,
    },
    ReloadDone {
        inc: u64,
        load: LoadId,
        ids: Vec<String>,
        /// `Some` for a fetch (with its idempotency keys), `None` for a
        /// reload.
        keys: Option<Vec<String>>,
    },
    Tick {
        inc: u64,
        wake: u64,
    },
    Crash {
        node: usize,
    },
    Restart {
        node: usize,
    },
    Timeout {
        actor: Actor,
        req: u64,
    },
    WorkerWake {
        w: usize,
        life: u64,
    },
    WorkDone {
        w: usize,
        life: u64,
        token: String,
    },
    WorkerCrash {
        w: usize,
        life: u64,
    },
    WorkerRestart {
        w: usize,
    },
    WorkerResume {
        w: usize,
        life: u64,
    },
    WorkerShutdown {
        w: usize,
        life: u64,
    },
    Report {
        w: usize,
        life: u64,
        token: String,
    },
    ClientOp {
        c: usize,
        op: usize,
    },
    Partition {
        actor: Actor,
        until: Millis,
    },
    ClockJump,
    FaultsEnd,
    Builtin(BuiltinEv),
    /// Leader mode: lease calls, recoveries, pauses and database cuts.
    Cluster(ClusterEv),
    /// Lockstep mode: a group commit of nothing but creates of ids the
    /// store holds, refused at once (see `lockstep`).
    CreatesRefused {
        inc: u64,
        commit: orbit_core::node::CommitId,
        stale: Vec<String>,
    },
    /// Shared mode: calls at the database, pauses and database cuts.
    Shared(SharedEv),
}

impl Ev {
    fn tag(&self) -> u64 {
        match self {
            Ev::ToServer { .. } => 1,
            Ev::ToActor { .. } => 2,
            Ev::CommitDone { .. } => 3,
            Ev::ReloadDone { .. } => 4,
            Ev::Tick { .. } => 5,
            Ev::Crash { .. } => 6,
            Ev::Restart { .. } => 7,
            Ev::Timeout { .. } => 8,
            Ev::WorkerWake { .. } => 9,
            Ev::WorkDone { .. } => 10,
            Ev::WorkerCrash { .. } => 11,
            Ev::WorkerRestart { .. } => 12,
            Ev::WorkerResume { .. } => 13,
            Ev::ClientOp { .. } => 14,
            Ev::FaultsEnd => 15,
            Ev::Report { .. } => 16,
            Ev::Partition { .. } => 17,
            Ev::ClockJump => 18,
            Ev::WorkerShutdown { .. } => 19,
            Ev::Builtin(_) => 20,
            Ev::Cluster(_) => 21,
            Ev::CreatesRefused { .. } => 22,
            Ev::Shared(_) => 23,
            Ev::ToServerTogether { .. } => 24,
            Ev::CommitDurable { .. } => 25,
        }
    }
}

pub(crate) struct Server {
    /// The node loop around the server's engine.
    pub node: Node,
    pub inc: u64,
    /// The name its fenced appends carry.
    writer: String,
    next_rid: RequestId,
    pending: BTreeMap<RequestId, (Actor, u64)>,
    silenced: BTreeSet<RequestId>,
    /// The latest `WakeAt` asked for (older ticks are ignored).
    wake_gen: u64,
}

/// Options of a run besides its seed-sampled configuration.
#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    /// Print every world step.
    pub trace: bool,
    /// Planted bugs around the engine (tests only).
    pub bugs: Bugs,
    /// Bugs planted in the engine itself (teeth; tests only).
    pub plant: Vec<orbit_core::engine::Bug>,
    /// Bugs planted in the cluster rules (teeth; tests only).
    pub cluster_plant: Vec<orbit_core::cluster::ClusterBug>,
}

/// One simulated world.
pub struct World {
    pub(crate) cfg: SimConfig,
    pub(crate) rng: SimRng,
    pub(crate) now: Millis,
    queue: BTreeMap<(Millis, u64), Ev>,
    next_ev: u64,
    pub(crate) store: SimStore,
    /// The server of each node: one node, or the nodes of a simulated
    /// cluster (`None` while down or, in a cluster, while not leading).
    pub(crate) servers: Vec<Option<Server>>,
    /// The node the event being handled concerns.
    pub(crate) focus: usize,
    /// Leader mode (the `cluster-leader` scenario), if simulated.
    cluster: Option<cluster::Cluster>,
    /// Shared mode (the `cluster-shared` scenario), if simulated.
    shared: Option<shared::SharedCluster>,
    /// Which node each worker and client sends its requests to.
    routes: BTreeMap<Actor, usize>,
    incarnation: u64,
    pub(crate) workers: Vec<Worker>,
    pub(crate) clients: Vec<Client>,
    pub(crate) payments: Payments,
    facts: Vec<Fact>,
    pub(crate) faults_on: bool,
    faults_end_at: Millis,
    pub(crate) stats: Stats,
    bugs: Bugs,
    trace: bool,
    hash: u64,
    definitions: Vec<DefinitionRecord>,
    workflows: BTreeMap<String, ir::Workflow>,
    pub(crate) violation: Option<Outcome>,
    partitions: BTreeMap<Actor, Millis>,
    /// How far each node's clock is ahead of (or, negative, behind) the
    /// reference clock (the database's, in a cluster). Steps back land at
    /// restarts only, as an engine never sees its time go back.
    clock_offsets: Vec<i64>,
    /// How fast each node's clock runs off the reference, in parts per
    /// million (0 on a single node).
    clock_drift_ppm: Vec<i64>,
    /// A backward step waiting for the next restart, in ms.
    clock_back_pending: Millis,
    /// Every backward step so far, in ms (how far event times may go back).
    clock_back_total: Millis,
    /// Bugs planted in every engine this world boots.
    plant: Vec<orbit_core::engine::Bug>,
    /// Bugs planted in the cluster rules.
    cluster_plant: Vec<orbit_core::cluster::ClusterBug>,
    /// Every result a worker sent, by delivery token.
    pub(crate) reports: check::tokens::Reports,
    /// Starts with an Idempotency-Key: the execution each created, with
    /// the expiry of its record (starts are facts: one execution per key
    /// while its record lives).
    created_by_key: BTreeMap<String, (String, Millis)>,
    /// The built-in task executor (`orbit.http`).
    pub(crate) builtin: Builtin,
    /// Counters of the node loops of past incarnations.
    node_stats: NodeStats,
    /// Lockstep mode (`eviction-invisible`): reads of the store are
    /// answered at once, and what the world showed is recorded.
    lockstep: Option<lockstep::Lockstep>,
    /// Events of the current instant, handled before any queued event
    /// (lockstep reads).
    instant: VecDeque<Ev>,
}

impl World {
    /// A world for `cfg`.
    pub fn new(cfg: SimConfig, options: RunOptions) -> Result<World, String> {
        let definitions = workload::definitions()?;
        let workflows = definitions
            .iter()
            .map(|d| (d.definition_hash.clone(), d.workflow.clone()))
            .collect();
        let rng = SimRng::new(cfg.seed);
        let faults_end_at = EPOCH_MS + cfg.safety_ms;
        let mut w = World {
            rng,
            now: EPOCH_MS,
            queue: BTreeMap::new(),
            next_ev: 0,
            store: SimStore::with_bug(options.bugs.store),
            servers: vec![None],
            focus: 0,
            cluster: None,
            shared: None,
            routes: BTreeMap::new(),
            incarnation: 0,
            workers: Vec::new(),
            clients: Vec::new(),
            payments: Payments::default(),
            facts: Vec::new(),
            faults_on: true,
            faults_end_at,
            stats: Stats::default(),
            bugs: options.bugs,
            trace: options.trace,
            hash: 0xcbf2_9ce4_8422_2325,
            definitions,
            workflows,
            violation: None,
            partitions: BTreeMap::new(),
            clock_offsets: vec![0],
            clock_drift_ppm: vec![0],
            clock_back_pending: 0,
            clock_back_total: 0,
            plant: options.plant,
            cluster_plant: options.cluster_plant,
            reports: BTreeMap::new(),
            created_by_key: BTreeMap::new(),
            builtin: Builtin::new(cfg.scenario == crate::config::Scenario::BuiltinHttp),
            node_stats: NodeStats::default(),
            lockstep: lockstep::Lockstep::for_config(&cfg),
            instant: VecDeque::new(),
            cfg,
        };
        w.setup()?;
        Ok(w)
    }

    fn setup(&mut self) -> Result<(), String> {
        if self.cfg.scenario == crate::config::Scenario::ClusterShared {
            self.shared_setup()?;
        } else if self.cfg.cluster_nodes > 1 {
            self.cluster_setup()?;
        } else {
            self.boot(None);
            self.deploy()?;
        }
        for i in 0..self.cfg.workers {
            self.workers.push(Worker::new(format!("w{i}")));
            let life = 0;
            let at = self.rng.between(0, 200);
            self.at(at, Ev::WorkerWake { w: i, life });
        }
        for c in 0..self.cfg.clients {
            self.clients.push(Client::new(format!("c{c}")));
            self.plan_client(c);
        }
        let actors: Vec<Actor> = (0..self.workers.len())
            .map(Actor::Worker)
            .chain((0..self.clients.len()).map(Actor::Client))
            .collect();
        for actor in actors {
            if self.rng.chance(self.cfg.faults.net_partition_probability) {
                let start = self.rng.between(0, self.cfg.safety_ms);
                let len = self
                    .rng
                    .between(500, self.cfg.faults.net_partition_ms_max.max(500));
                let until = self.now + start + len;
                self.at(start, Ev::Partition { actor, until });
            }
        }
        if self.cfg.faults.worker_unregister_probability > 0.0 {
            // Shutdowns at any moment too, not only after a task: a poll
            // may be mid-hand-out.
            for w in 0..self.workers.len() {
                if self
                    .rng
                    .chance(self.cfg.faults.worker_unregister_probability)
                {
                    let at = self.rng.between(0, self.cfg.safety_ms);
                    self.at(at, Ev::WorkerShutdown { w, life: 0 });
                }
            }
        }
        if self.cfg.faults.clock_jump_probability > 0.0 {
            for _ in 0..self.rng.between(1, 3) {
                let at = self.rng.between(0, self.cfg.safety_ms);
                self.at(at, Ev::ClockJump);
            }
        }
        let end = self.cfg.safety_ms;
        self.at(end, Ev::FaultsEnd);
        self.schedule_crash();
        Ok(())
    }

    /// Schedules `ev` `delay` ms from now.
    pub(crate) fn at(&mut self, delay: Millis, ev: Ev) {
        self.next_ev += 1;
        self.queue.insert((self.now + delay, self.next_ev), ev);
    }

    fn mix(&mut self, x: u64) {
        for b in x.to_le_bytes() {
            self.hash ^= u64::from(b);
            self.hash = self.hash.wrapping_mul(0x0100_0000_01b3);
        }
    }

    pub(crate) fn mix_str(&mut self, s: &str) {
        for b in s.bytes() {
            self.hash ^= u64::from(b);
            self.hash = self.hash.wrapping_mul(0x0100_0000_01b3);
        }
    }

    /// Runs the world to its end and reports.
    pub fn run(self) -> Report {
        self.run_observed().0
    }

    /// Runs the world to its end and reports, with what it showed the
    /// outside world (recorded in lockstep mode only).
    pub(crate) fn run_observed(mut self) -> (Report, check::invisible::Observed) {
        let deadline = self.faults_end_at + self.cfg.liveness_ms_max;
        let mut last_quiet_check = 0;
        let mut same_instant = 0u64;
        while self.violation.is_none() {
            let next = match self.instant.pop_front() {
                Some(ev) => Some(((self.now, 0), ev)),
                None => {
                    self.flush_wake();
                    self.queue.pop_first()
                }
            };
            // Events of this instant that handling this event asks for
            // come next, before those already waiting (lockstep: the read
            // that the answer of another read leads to, see `lockstep`).
            let waiting = self.instant.len();
            let Some(((t, _), ev)) = next else {
                break;
            };
            if t > deadline {
                self.now = deadline;
                break;
            }
            if t == self.now {
                same_instant += 1;
                if same_instant > SPIN_STEPS_MAX {
                    self.fail(Violation::new(
                        Invariant::Liveness,
                        format!(
                            "{SPIN_STEPS_MAX} steps at one instant ({} ms): a node asks for the time again and again without virtual time moving (last event: {})",
                            t - EPOCH_MS,
                            describe(&ev)
                        ),
                    ));
                    break;
                }
            } else {
                same_instant = 0;
            }
            self.now = t;
            self.stats.steps += 1;
            if self.bugs.panic_after_steps == Some(self.stats.steps) {
                panic!("planted panic at step {}", self.stats.steps);
            }
            if let Some(until) = self.paused_target(&ev) {
                // A paused process handles nothing: its events wait.
                self.at(until - t, ev);
                continue;
            }
            self.mix(t);
            self.mix(ev.tag());
            if self.trace {
                println!("{:>9} {}", t - EPOCH_MS, describe(&ev));
            }
            self.force_eviction();
            self.step(ev);
            if self.instant.len() > waiting {
                let asked = self.instant.split_off(waiting);
                for ev in asked.into_iter().rev() {
                    self.instant.push_front(ev);
                }
            }
            if !self.faults_on && self.now >= last_quiet_check + 1000 {
                last_quiet_check = self.now;
                if self.quiescent() {
                    break;
                }
            }
        }
        if self.violation.is_none() {
            self.final_checks();
        }
        let outcome = self.violation.take().unwrap_or(Outcome::Pass);
        // The store's final content is part of the trace.
        let mut h = 0u64;
        self.store.for_each(|row, events| {
            h = h.wrapping_mul(31).wrapping_add(events.len() as u64);
            for c in row.id.bytes().chain(row.status.bytes()) {
                h = h.wrapping_mul(31).wrapping_add(u64::from(c));
            }
        });
        self.mix(h);
        let mut n = 0;
        self.store.for_each(|_, _| n += 1);
        self.stats.executions = n;
        self.stats.commits = self.store.commits();
        for s in self.servers.iter().flatten() {
            self.node_stats.add(s.node.stats());
        }
        self.stats.node = std::mem::take(&mut self.node_stats);
        self.stats.payment_calls = self.payments.calls();
        self.stats.payment_effects = self.payments.effects() as u64;
        let observed = self.observed();
        let report = Report {
            config: self.cfg,
            outcome,
            trace_hash: self.hash,
            virtual_ms: self.now - EPOCH_MS,
            stats: self.stats,
        };
        (report, observed)
    }

    fn step(&mut self, ev: Ev) {
        match ev {
            Ev::ToServer {
                node,
                from,
                req,
                request,
            } => {
                self.focus = node;
                self.deliver_to_server(from, req, request);
            }
            Ev::ToServerTogether {
                node,
                from,
                requests,
            } => {
                self.focus = node;
                self.deliver_together(from, requests);
            }
            Ev::ToActor { to, req, response } => {
                self.record_reply(to, req, &response);
                match to {
                    Actor::Worker(w) => self.worker_response(w, req, response),
                    Actor::Client(c) => self.client_response(c, req, response),
                    Actor::Builtin => self.builtin_answer(req, response),
                }
            }
            Ev::CommitDone { inc, commit } => {
                self.focus_inc(inc);
                self.commit_done(inc, commit);
            }
            Ev::CommitDurable { inc, commit } => {
                self.focus_inc(inc);
                self.commit_durable(inc, commit);
            }
            Ev::CreatesRefused { inc, commit, stale } => {
                self.focus_inc(inc);
                self.creates_refused(inc, commit, stale);
            }
            Ev::ReloadDone {
                inc,
                load,
                ids,
                keys,
            } => {
                self.focus_inc(inc);
                self.reload_done(inc, load, ids, keys);
            }
            Ev::Tick { inc, wake } => {
                self.focus_inc(inc);
                self.tick(inc, wake);
            }
            Ev::Crash { node } => {
                self.focus = node;
                self.crash();
            }
            Ev::Restart { node } => {
                self.focus = node;
                self.restart();
            }
            Ev::Cluster(ev) => self.cluster_event(ev),
            Ev::Shared(ev) => self.shared_event(ev),
            Ev::Timeout { actor, req } => match actor {
                Actor::Worker(w) => self.worker_timeout(w, req),
                Actor::Client(c) => self.client_timeout(c, req),
                Actor::Builtin => {}
            },
            Ev::Builtin(ev) => {
                self.focus = 0;
                self.builtin_event(ev);
            }
            Ev::WorkerWake { w, life } => self.worker_wake(w, life),
            Ev::WorkDone { w, life, token } => self.work_done(w, life, &token),
            Ev::WorkerCrash { w, life } => self.worker_crash(w, life),
            Ev::WorkerRestart { w } => self.worker_restart(w),
            Ev::WorkerResume { w, life } => self.worker_resume(w, life),
            Ev::WorkerShutdown { w, life } => self.worker_shutdown(w, life),
            Ev::Report { w, life, token } => self.report_again(w, life, &token),
            Ev::ClientOp { c, op } => self.client_op(c, op),
            Ev::ClockJump => self.clock_jump(),
            Ev::Partition { actor, until } => {
                self.stats.fault("partition");
                self.partitions.insert(actor, until);
            }
            Ev::FaultsEnd => {
                self.faults_on = false;
                if self.shared.is_some() {
                    self.shared_heal();
                } else if self.cluster.is_some() {
                    self.cluster_heal();
                } else if self.server().is_none() {
                    // A crashed server comes back now, not later.
                    self.queue.retain(|_, e| !matches!(e, Ev::Restart { .. }));
                    self.at(0, Ev::Restart { node: 0 });
                }
            }
        }
    }

    // ---- the network ---------------------------------------------------

    fn delay(&mut self) -> Millis {
        let max = if self.faults_on {
            self.cfg.faults.net_delay_ms_max
        } else {
            5
        };
        self.rng.between(1, max.max(1))
    }

    /// Sends a request over the network; the sender's timeout fires after
    /// `timeout_ms` unless an answer arrives first.
    pub(crate) fn send(&mut self, from: Actor, req: u64, request: Request, timeout_ms: Millis) {
        self.at(timeout_ms, Ev::Timeout { actor: from, req });
        self.transmit(from, |node| Ev::ToServer {
            node,
            from,
            req,
            request: request.clone(),
        });
    }

    /// Sends `requests` in one message (lost, duplicated or delayed as a
    /// whole), each with its own timeout.
    pub(crate) fn send_together(&mut self, from: Actor, requests: Vec<(u64, Request, Millis)>) {
        for (req, _, timeout_ms) in &requests {
            let req = *req;
            self.at(*timeout_ms, Ev::Timeout { actor: from, req });
        }
        let requests: Vec<(u64, Request)> =
            requests.into_iter().map(|(req, r, _)| (req, r)).collect();
        self.transmit(from, |node| Ev::ToServerTogether {
            node,
            from,
            requests: requests.clone(),
        });
    }

    /// Puts a message from `from` to the server on the network: lost,
    /// duplicated or delayed as the faults say (`message` builds it for
    /// the node it is routed to).
    fn transmit(&mut self, from: Actor, message: impl Fn(usize) -> Ev) {
        if self.cut_off(from) {
            return;
        }
        let node = self.route(from);
        if self.faults_on && self.rng.chance(self.cfg.faults.net_loss_probability) {
            self.stats.fault("request_lost");
            return;
        }
        if self.faults_on && self.rng.chance(self.cfg.faults.net_duplicate_probability) {
            self.stats.fault("request_duplicated");
            let d = self.delay();
            self.at(d, message(node));
        }
        let d = self.delay();
        self.at(d, message(node));
    }

    /// True while `actor` is partitioned from the server (partitions heal
    /// when faults stop).
    fn cut_off(&self, actor: Actor) -> bool {
        self.faults_on && self.partitions.get(&actor).is_some_and(|t| self.now < *t)
    }

    fn send_to_actor(&mut self, to: Actor, req: u64, response: Response) {
        if to == Actor::Builtin {
            self.record_reply(to, req, &response);
            return self.builtin_answer(req, response);
        }
        if self.cut_off(to) {
            return;
        }
        if self.faults_on && self.rng.chance(self.cfg.faults.net_loss_probability) {
            self.stats.fault("response_lost");
            return;
        }
        if self.faults_on && self.rng.chance(self.cfg.faults.net_duplicate_probability) {
            self.stats.fault("response_duplicated");
            let d = self.delay();
            self.at(
                d,
                Ev::ToActor {
                    to,
                    req,
                    response: response.clone(),
                },
            );
        }
        let d = self.delay();
        self.at(d, Ev::ToActor { to, req, response });
    }

    /// The caller gave up on a request: a parked one is abandoned.
    pub(crate) fn hang_up(&mut self, actor: Actor, req: u64) {
        for node in 0..self.servers.len() {
            self.focus = node;
            let Some(s) = self.server_mut() else {
                continue;
            };
            let rid = s
                .pending
                .iter()
                .find(|(_, v)| **v == (actor, req))
                .map(|(k, _)| *k);
            if let Some(rid) = rid {
                s.pending.remove(&rid);
                self.feed(NodeInput::Abandoned { id: rid });
            }
        }
    }

    /// The running server of the node in focus.
    pub(crate) fn server(&self) -> Option<&Server> {
        self.servers[self.focus].as_ref()
    }

    /// The running server of the node in focus, mutably.
    pub(crate) fn server_mut(&mut self) -> Option<&mut Server> {
        self.servers[self.focus].as_mut()
    }

    /// Focuses the node running incarnation `inc` (unchanged when none does).
    fn focus_inc(&mut self, inc: u64) {
        if let Some(n) = self
            .servers
            .iter()
            .position(|s| s.as_ref().is_some_and(|s| s.inc == inc))
        {
            self.focus = n;
        }
    }

    // ---- checks ----------------------------------------------------------

    pub(crate) fn fail(&mut self, v: Violation) {
        if self.violation.is_none() {
            self.violation = Some(if v.invariant == Invariant::Liveness {
                Outcome::Liveness(v)
            } else {
                Outcome::Correctness(v)
            });
        }
    }

    /// Records what an actor was told and checks it is durable now.
    pub(crate) fn told(&mut self, fact: Fact) {
        let fact = if self.shared.is_some() {
            match self.shared_told(fact) {
                Some(fact) => fact,
                None => return,
            }
        } else {
            fact
        };
        let events = self.store.events(fact.execution());
        if let Err(v) = check::durability::check(&fact, &events) {
            self.fail(v);
        }
        self.facts.push(fact);
    }

    fn recheck_facts(&mut self) {
        for i in 0..self.facts.len() {
            let events = self.store.events(self.facts[i].execution());
            if let Err(v) = check::durability::check(&self.facts[i], &events) {
                self.fail(v);
                return;
            }
        }
    }

    /// Invariants 1, 3, 4, 7 and 5 (against the stored row) on every
    /// execution a just-applied batch touched, and starts as facts: an
    /// Idempotency-Key creates one execution while its record lives.
    fn check_batch(&mut self, batch: &Batch) {
        for r in &batch.idempotency {
            let created =
                r.status == 201 && r.body.get("created").and_then(|c| c.as_bool()) == Some(true);
            let Some(exec) = r.body.get("execution_id").and_then(|e| e.as_str()) else {
                continue;
            };
            if !created {
                continue;
            }
            let made_at = r.expires_at.saturating_sub(self.cfg.idempotency_ttl_ms);
            if let Some((first, expires)) = self.created_by_key.get(&r.key) {
                if first != exec && *expires > made_at {
                    let v = Violation::new(
                        Invariant::NoLostCommits,
                        format!(
                            "Idempotency-Key {} created execution {first}, then {exec} while its record still lived",
                            r.key
                        ),
                    );
                    return self.fail(v);
                }
            }
            self.created_by_key
                .insert(r.key.clone(), (exec.to_owned(), r.expires_at));
        }
        for a in &batch.executions {
            if let Err(v) = self.check_execution(&a.execution_id, None) {
                self.fail(v);
                return;
            }
        }
    }

    /// Invariant 5 against the live engine's memory after a commit.
    fn check_live(&mut self, batch: &Batch) {
        for a in &batch.executions {
            let live = self
                .server()
                .and_then(|s| s.node.engine().projection(&a.execution_id).cloned());
            if let Err(v) = self.check_execution(&a.execution_id, live.as_ref()) {
                self.fail(v);
                return;
            }
        }
    }

    fn check_execution(
        &self,
        id: &str,
        live: Option<&orbit_core::history::Projection>,
    ) -> Result<(), Violation> {
        let mut result = Ok(());
        let workflows = &self.workflows;
        let back = self.clock_back_total + self.clock_back_pending;
        self.store.for_each(|row, events| {
            if row.id != id || result.is_err() {
                return;
            }
            let wf = workflows.get(&row.definition_hash);
            result = check::history_under_steps(id, events, wf, back)
                .and_then(|()| crate::builtin::check_history(id, events))
                .and_then(|()| check::determinism::check(row, events, live));
        });
        result
    }

    fn final_checks(&mut self) {
        let led = self.focus_leader();
        self.recheck_facts();
        if self.violation.is_some() {
            return;
        }
        if let Err(v) = check::keys::payments(&self.payments) {
            return self.fail(v);
        }
        if let Err(v) = self.builtin_final() {
            return self.fail(v);
        }
        let mut result = Ok(());
        let workflows = &self.workflows;
        let bound = self.cfg.liveness_ms_max;
        let mut stuck: BTreeMap<String, Violation> = BTreeMap::new();
        // In a shared cluster no one node holds every execution: the
        // histories are compared with the store's rows alone.
        let live_engine = self
            .server()
            .filter(|_| led && self.shared.is_none())
            .map(|s| s.node.engine());
        let back = self.clock_back_total + self.clock_back_pending;
        let mut facts: BTreeMap<&str, Vec<&Fact>> = BTreeMap::new();
        for f in &self.facts {
            facts.entry(f.execution()).or_default().push(f);
        }
        let (reports, payments) = (&self.reports, &self.payments);
        self.store.for_each(|row, events| {
            if result.is_err() {
                return;
            }
            let wf = workflows.get(&row.definition_hash);
            let live = live_engine.and_then(|e| e.projection(&row.id));
            let told = facts
                .get(row.id.as_str())
                .map(Vec::as_slice)
                .unwrap_or_default();
            result = check::history_under_steps(&row.id, events, wf, back)
                .and_then(|()| crate::builtin::check_history(&row.id, events))
                .and_then(|()| check::tokens::check(&row.id, events, told, reports))
                .and_then(|()| check::keys::effects_applied(payments, &row.id, events))
                .and_then(|()| check::determinism::check(row, events, live));
            if let Err(v) = check::liveness::check(&row.id, events, bound) {
                stuck.insert(row.id.clone(), v);
            }
        });
        // Report a stuck execution none of whose children is stuck: the
        // parent of a stuck child only waits for it.
        let liveness = match stuck
            .iter()
            .find(|(id, _)| !stuck.keys().any(|k| k.starts_with(&format!("{id}."))))
            .or_else(|| stuck.iter().next())
        {
            Some((_, v)) => Err(v.clone()),
            None => Ok(()),
        };
        if let Err(v) = result {
            return self.fail(v);
        }
        if self.shared.is_some() {
            // A member answers for a running execution only once it owns
            // it: what never finished is reported as such first.
            if let Err(v) = liveness.clone() {
                return self.fail(v);
            }
        }
        if led {
            if let Err(v) = self.read_back() {
                return self.fail(v);
            }
        }
        if let Err(v) = liveness {
            return self.fail(v);
        }
        if let Err(v) = self.shared_final() {
            return self.fail(v);
        }
        let open: Vec<String> = self.clients.iter().flat_map(|c| c.open_ops()).collect();
        if let Err(v) = check::liveness::clients(&open, bound) {
            self.fail(v);
        }
    }

    /// Reads every committed execution back through the live server (no
    /// faults, no randomness drawn) and compares it with the store.
    fn read_back(&mut self) -> Result<(), Violation> {
        if self.server().is_none() {
            return Ok(());
        }
        let mut rows = Vec::new();
        self.store
            .for_each(|row, events| rows.push((row.clone(), events.to_vec())));
        let focus = self.focus;
        for (i, (row, events)) in rows.iter().enumerate() {
            if self.shared.is_some() {
                // Through its owner (another member answers for a running
                // execution it does not own from the row alone).
                match self.shared_owner_node(&row.id) {
                    Some(node) => self.focus = node,
                    None => continue,
                }
            }
            // Below the ids the engine keeps for its own (inbox) requests.
            let id = orbit_core::engine::INBOX_REQUESTS - 1 - i as u64;
            let ios = self.node_handle(NodeInput::Request {
                id,
                request: Request::GetExecution {
                    execution_id: row.id.clone(),
                },
            });
            // A finished execution the engine no longer holds is fetched
            // first: answer the fetch from the store at once.
            let mut ios = ios;
            let mut reply = None;
            while reply.is_none() && !ios.is_empty() {
                let mut next = Vec::new();
                for io in ios {
                    match io {
                        Io::Reply { request, response } if request == id => reply = Some(response),
                        Io::Fetch {
                            id: load,
                            executions,
                            idempotency,
                        } => {
                            let result = Ok(self.fetch_now(executions, idempotency));
                            next.extend(self.node_handle(NodeInput::Fetched { load, result }));
                        }
                        Io::Load {
                            id: load,
                            executions,
                        } => {
                            let result = Ok(self.fetch_now(executions, Vec::new()).executions);
                            next.extend(self.node_handle(NodeInput::Loaded { load, result }));
                        }
                        other => {
                            if self.trace {
                                let text = format!("{other:?}");
                                let short: String = text.chars().take(160).collect();
                                println!("          read back of {}: {short}", row.id);
                            }
                        }
                    }
                }
                ios = next;
            }
            let response = reply.unwrap_or_else(|| Response::error(599, "NO_REPLY", "no reply"));
            check::durability::read_back(row, events, &response)?;
        }
        self.focus = focus;
        Ok(())
    }

    /// Whether the running server still waits for a commit or a read of
    /// the store, in flight or waiting to be tried again: until it has its
    /// answer, what it holds in memory may lag the store (an `Ambiguous`
    /// commit that landed is read back by a reload), so the run is not
    /// over.
    fn io_outstanding(&self) -> bool {
        let inc = self.incarnation;
        let node_busy = self
            .server()
            .is_some_and(|s| !s.node.is_idle() || s.node.reads_open() > 0);
        node_busy
            || self.queue.values().any(|ev| {
            matches!(ev, Ev::CommitDone { inc: i, .. } | Ev::CommitDurable { inc: i, .. } | Ev::ReloadDone { inc: i, .. } if *i == inc)
        })
    }

    fn quiescent(&mut self) -> bool {
        if self.shared.is_some() {
            if self.clients.iter().any(|c| !c.open_ops().is_empty()) || !self.shared_quiet() {
                return false;
            }
            let mut all = true;
            self.store.for_each(|row, _| {
                all &= orbit_core::store::is_terminal(&row.status);
            });
            return all;
        }
        if !self.focus_leader()
            || self.server().is_none()
            || self.clients.iter().any(|c| !c.open_ops().is_empty())
            || self.io_outstanding()
        {
            return false;
        }
        let mut all = true;
        self.store.for_each(|row, _| {
            all &= orbit_core::store::is_terminal(&row.status);
        });
        all
    }
}

/// The "derive the key from the attempt" bug, applied to a poll answer.
pub(super) fn plant_key_from_attempt(response: &mut Response) {
    let Some(tasks) = response
        .body
        .get_mut("tasks")
        .and_then(|t| t.as_array_mut())
    else {
        return;
    };
    for t in tasks {
        let attempt = t.get("attempt").and_then(|a| a.as_u64()).unwrap_or(1);
        if attempt > 1 {
            if let Some(k) = t.get("idempotency_key").and_then(|k| k.as_str()) {
                let k = format!("{k}#{attempt}");
                t["idempotency_key"] = serde_json::Value::String(k);
            }
        }
    }
}

fn describe(ev: &Ev) -> String {
    match ev {
        Ev::ToServer {
            node,
            from,
            req,
            request,
        } => {
            let text = format!("{request:?}");
            let short: String = text.chars().take(160).collect();
            format!("net -> server {node} from {from:?}#{req}: {short}")
        }
        Ev::ToServerTogether {
            node,
            from,
            requests,
        } => {
            let text = format!("{requests:?}");
            let short: String = text.chars().take(160).collect();
            format!("net -> server {node} from {from:?}, together: {short}")
        }
        Ev::ToActor { to, req, response } => {
            let body = response.body.to_string();
            let short: String = body.chars().take(160).collect();
            format!("net -> {to:?}#{req}: {} {short}", response.status)
        }
        Ev::CommitDone { inc, commit } => format!(
            "group commit {} (incarnation {inc}, {} batches, {} events)",
            commit.id,
            commit.batches.len(),
            commit.events()
        ),
        other => format!("{other:?}").chars().take(160).collect(),
    }
}
