//! A simulated `--cluster` in leader mode: two or three nodes over the one
//! simulated database, which has its own clock (the world's reference
//! time) and holds the lease row. Each node has its own clock — skewed by
//! up to several seconds, drifting, and stepped now and then — and follows
//! the lease rules of `orbit_core::cluster` exactly as the production
//! supervisor does: a standby tries to take an expired lease every
//! `--node-timeout / 4`, a new leader recovers from the store before it
//! answers, a leader renews on the same beat and steps down once a write or
//! a renewal is fenced or its last acknowledged renewal is `--node-timeout`
//! old. Every leader write is checked against the lease in its own
//! transaction.
//!
//! Faults of this world: the leader killed mid group-commit (each commit in
//! flight lands whole or vanishes), the leader paused for longer than
//! `--node-timeout` and resumed with its writes still queued (the GC-pause
//! case), a node cut off from the database, clock jumps, and every fault of
//! the single-node world (network, storage, workers) besides. Invariant 3
//! gains two checks: a new epoch begins only once the previous lease has
//! expired by the database's clock, and no write of an older epoch than
//! the lease's is ever applied.

use super::{Actor, Ev, World};
use crate::check::{Invariant, Violation};
use orbit_core::cluster::Rules;
use orbit_core::engine::Response;
use orbit_core::history::Millis;
use orbit_core::store::{StorageError, Transaction};
use std::collections::BTreeMap;

/// A node's part in the cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Role {
    /// The process is dead.
    Down,
    /// Watching the lease.
    Standby,
    /// Took the lease at `epoch`; replaying the store before it answers.
    Recovering { epoch: u64 },
    /// Leading at `epoch`.
    Leader { epoch: u64 },
}

/// One node of the simulated cluster.
#[derive(Debug, Clone)]
pub(crate) struct ClusterNode {
    /// Its `--node-id`.
    pub id: String,
    pub role: Role,
    /// When (its own clock) the last acknowledged renewal — or the take —
    /// of its term was sent.
    renewed_at: Millis,
    /// While paused (SIGSTOP, a long GC pause), nothing of it runs.
    paused_until: Millis,
    /// While cut off from the database, none of its calls get through.
    db_cut_until: Millis,
    /// The leader its last look at the lease showed, if any.
    known_leader: Option<usize>,
    /// Bumped at every change of role; answers of an older one are dropped.
    generation: u64,
}

/// The cluster's state besides the nodes' servers.
#[derive(Debug, Clone)]
pub(crate) struct Cluster {
    pub nodes: Vec<ClusterNode>,
    rules: Rules,
    /// The node and epoch of every server incarnation that led (writes of
    /// a term outlive its server: a deposed node's commits still reach
    /// the database).
    terms: BTreeMap<u64, (usize, u64)>,
}

/// Events of the simulated cluster.
#[derive(Debug, Clone)]
pub(crate) enum ClusterEv {
    /// A node's lease beat (every `--node-timeout / 4`).
    Beat { node: usize, generation: u64 },
    /// A lease call reaches the database.
    AtDatabase {
        node: usize,
        generation: u64,
        call: Call,
    },
    /// The database's answer reaches the node.
    Answer {
        node: usize,
        generation: u64,
        answer: Answer,
    },
    /// A new leader's recovery read is done.
    Recovered { node: usize, generation: u64 },
    /// A node — the leader, most of the time — stops (SIGSTOP, a long GC
    /// pause) for `ms`.
    Pause { ms: Millis },
    /// A node — the leader, most of the time — is cut off from the
    /// database for `ms`.
    CutFromDatabase { ms: Millis },
}

/// A lease call, with the node's clock when it was sent.
#[derive(Debug, Clone)]
pub(crate) enum Call {
    Take { sent_at: Millis },
    Renew { epoch: u64, sent_at: Millis },
}

/// The database's answer to a lease call.
#[derive(Debug, Clone)]
pub(crate) enum Answer {
    Took { epoch: u64, sent_at: Millis },
    Held { holder: String, expired: bool },
    Renewed { sent_at: Millis },
    Fenced,
}

impl World {
    /// Boots the cluster: node 0 takes the first lease and deploys; the
    /// others stand by. Each node's clock gets its skew and drift.
    pub(super) fn cluster_setup(&mut self) -> Result<(), String> {
        let n = self.cfg.cluster_nodes;
        let mut rules = Rules::new(self.cfg.node_timeout_ms);
        for bug in &self.cluster_plant {
            rules.plant(*bug);
        }
        let skew = self.cfg.faults.clock_skew_ms_max as i64;
        self.servers = (0..n).map(|_| None).collect();
        self.clock_offsets = (0..n)
            .map(|_| self.rng.between(0, 2 * skew as u64) as i64 - skew)
            .collect();
        let drift = self.cfg.faults.clock_drift_ppm_max as i64;
        self.clock_drift_ppm = (0..n)
            .map(|_| self.rng.between(0, 2 * drift as u64) as i64 - drift)
            .collect();
        self.cluster = Some(Cluster {
            nodes: (0..n)
                .map(|i| ClusterNode {
                    id: format!("n{i}"),
                    role: Role::Standby,
                    renewed_at: 0,
                    paused_until: 0,
                    db_cut_until: 0,
                    known_leader: None,
                    generation: 0,
                })
                .collect(),
            rules,
            terms: BTreeMap::new(),
        });
        self.cluster_clock_spread();
        // The first leader, before any fault.
        self.focus = 0;
        let ttl = self.cfg.node_timeout_ms;
        let epoch = self
            .store
            .lease_take("n0", ttl, self.now, self.now)
            .ok_or("the first lease could not be taken")?;
        let renewed_at = self.server_now();
        self.begin_term(epoch, renewed_at);
        self.deploy()?;
        // Nothing to recover yet: it leads at once.
        self.cluster_mut().nodes[0].role = Role::Leader { epoch };
        for node in 0..n {
            let at = self.rng.between(0, self.renew_every());
            self.at(at, self.beat(node));
        }
        // Faults of the safety phase.
        let f = self.cfg.faults.clone();
        let safety = self.cfg.safety_ms;
        for _ in 0..self.rng.between(0, 3) {
            if self.rng.chance(f.node_pause_probability) {
                let at = self.rng.between(0, safety);
                let ms = self.rng.between(ttl + ttl / 5, 3 * ttl);
                self.at(at, Ev::Cluster(ClusterEv::Pause { ms }));
            }
            if self.rng.chance(f.node_db_cut_probability) {
                let at = self.rng.between(0, safety);
                let ms = self.rng.between(ttl / 2, 3 * ttl);
                self.at(at, Ev::Cluster(ClusterEv::CutFromDatabase { ms }));
            }
        }
        self.schedule_crash();
        Ok(())
    }

    fn cluster_ref(&self) -> &Cluster {
        self.cluster.as_ref().expect("a cluster world")
    }

    fn cluster_mut(&mut self) -> &mut Cluster {
        self.cluster.as_mut().expect("a cluster world")
    }

    fn renew_every(&self) -> Millis {
        self.cluster_ref().rules.renew_every_ms()
    }

    fn beat(&self, node: usize) -> Ev {
        let generation = self.cluster_ref().nodes[node].generation;
        Ev::Cluster(ClusterEv::Beat { node, generation })
    }

    /// The node that leads now, if any: the one whose term is the lease's
    /// or, when no node holds that term, one that still believes it leads
    /// (a deposed node does until its next beat). Faults aim at it.
    fn leader(&self) -> Option<usize> {
        self.lease_holder().or_else(|| {
            self.cluster
                .as_ref()?
                .nodes
                .iter()
                .position(|n| matches!(n.role, Role::Leader { .. }))
        })
    }

    /// The node whose term is the lease's, if it leads in it: the only one
    /// whose memory is the store's, so the only one reads may go through.
    fn lease_holder(&self) -> Option<usize> {
        let epoch = self.store.lease(self.now).epoch;
        self.cluster
            .as_ref()?
            .nodes
            .iter()
            .position(|n| n.role == Role::Leader { epoch })
    }

    /// Focuses the node that leads (a cluster's final checks read through
    /// it); without a cluster, the one server. False when no node leads in
    /// the lease's term: nothing may be read through a node still
    /// recovering, nor through a deposed one that has not noticed yet (a
    /// paused leader wakes believing it leads, its memory stale).
    pub(super) fn focus_leader(&mut self) -> bool {
        if self.cluster.is_none() {
            return true;
        }
        match self.lease_holder() {
            Some(leader) => {
                self.focus = leader;
                true
            }
            None => false,
        }
    }

    /// The event's node, if it is paused: the time it resumes.
    pub(super) fn paused_target(&self, ev: &Ev) -> Option<Millis> {
        if self.shared.is_some() {
            return self.shared_paused_target(ev);
        }
        let c = self.cluster.as_ref()?;
        let node = match ev {
            Ev::ToServer { node, .. } | Ev::ToServerTogether { node, .. } | Ev::Crash { node } => {
                *node
            }
            Ev::CommitDone { inc, .. } | Ev::ReloadDone { inc, .. } | Ev::Tick { inc, .. } => {
                c.terms.get(inc)?.0
            }
            Ev::Cluster(
                ClusterEv::Beat { node, .. }
                | ClusterEv::Answer { node, .. }
                | ClusterEv::Recovered { node, .. },
            ) => *node,
            _ => return None,
        };
        let until = c.nodes[node].paused_until;
        (self.now < until).then_some(until)
    }

    /// Which node `actor` sends to: the one it last heard leads, or — when
    /// that process refuses connections — the next one of its list.
    pub(super) fn route(&mut self, actor: Actor) -> usize {
        if self.shared.is_some() {
            return self.shared_route(actor);
        }
        let Some(c) = &self.cluster else {
            return 0;
        };
        let n = c.nodes.len();
        let mut node = self.routes.get(&actor).copied().unwrap_or(0);
        for _ in 0..n {
            if c.nodes[node].role != Role::Down {
                break;
            }
            node = (node + 1) % n;
        }
        self.routes.insert(actor, node);
        node
    }

    /// Whether the node in focus answers the API (it leads, and — unless
    /// the tooth is planted — its recovery finished).
    pub(super) fn serving(&self) -> bool {
        let c = self.cluster_ref();
        match c.nodes[self.focus].role {
            Role::Leader { .. } => true,
            Role::Recovering { .. } => !c.rules.serves_after_recovery(),
            Role::Down | Role::Standby => false,
        }
    }

    /// A node that does not lead answers `503 NOT_LEADER`; the caller turns
    /// to the leader it names, or to the next node of its list.
    pub(super) fn not_leader(&mut self, from: Actor, req: u64) {
        let c = self.cluster_ref();
        let n = c.nodes.len();
        let node = self.focus;
        if c.nodes[node].role == Role::Down {
            return; // connection refused: the caller times out
        }
        let next = c.nodes[node].known_leader.unwrap_or((node + 1) % n);
        let leader = c.nodes[next].id.clone();
        self.routes.insert(from, next);
        let mut response = Response::error(
            503,
            "NOT_LEADER",
            format!("this node does not lead; try {leader}"),
        );
        response.body["leader"] = serde_json::Value::String(leader);
        self.stats.fault("not_leader");
        self.send_to_actor(from, req, response);
    }

    /// The name `node` writes with.
    pub(super) fn cluster_writer(&self, node: usize) -> String {
        self.cluster_ref().nodes[node].id.clone()
    }

    /// Whether the node of server incarnation `inc` is cut off from the
    /// database now (its writes and reads do not get through).
    pub(super) fn db_cut(&self, inc: u64) -> bool {
        if self.shared.is_some() {
            return self.shared_db_cut(inc);
        }
        self.cluster_term(inc)
            .is_some_and(|(node, _)| self.now < self.cluster_ref().nodes[node].db_cut_until)
    }

    /// The node and epoch a server incarnation writes with, in a cluster.
    pub(super) fn cluster_term(&self, inc: u64) -> Option<(usize, u64)> {
        self.cluster.as_ref()?.terms.get(&inc).copied()
    }

    /// Applies a leader write of `node`'s term `epoch` at the database: it
    /// does not get through while the node is cut off, is fenced by the
    /// lease in its own transaction, and — invariant 3 — must never apply
    /// under an older epoch than the lease's.
    pub(super) fn apply_as_leader(
        &mut self,
        node: usize,
        epoch: u64,
        tx: &Transaction,
    ) -> Result<(), StorageError> {
        let c = self.cluster_ref();
        if self.now < c.nodes[node].db_cut_until {
            return Err(StorageError::Unavailable(
                "simulated: node cut off from the database".into(),
            ));
        }
        let id = c.nodes[node].id.clone();
        let fences = c.rules.fences_writes();
        let lease = self.store.lease(self.now);
        let result = self.store.apply_as_leader(tx, &id, epoch, fences);
        if result.is_ok() && epoch < lease.epoch {
            self.fail(Violation::new(
                Invariant::OneWriter,
                format!(
                    "a write of {id}'s epoch {epoch} was applied while the lease was at epoch {} ({})",
                    lease.epoch, lease.holder
                ),
            ));
        }
        if result.is_err() && epoch < lease.epoch {
            self.stats.fault("write_fenced");
        }
        result
    }

    /// Starts a term of `epoch` on the node in focus: a fresh engine that
    /// writes with that epoch, recovering.
    fn begin_term(&mut self, epoch: u64, renewed_at: Millis) {
        self.boot(Some(epoch));
        let node = self.focus;
        let inc = self.incarnation;
        let c = self.cluster_mut();
        c.terms.insert(inc, (node, epoch));
        let n = &mut c.nodes[node];
        n.role = Role::Recovering { epoch };
        n.renewed_at = renewed_at;
        n.known_leader = Some(node);
        n.generation += 1;
    }

    /// The node in focus finished recovering: it answers as leader.
    fn lead(&mut self) {
        let node = self.focus;
        if let Role::Recovering { epoch } = self.cluster_ref().nodes[node].role {
            self.recover();
            self.cluster_mut().nodes[node].role = Role::Leader { epoch };
        }
    }

    /// The node in focus ends its term: its memory is dropped, parked
    /// requests get `503`, and it stands by again.
    pub(super) fn step_down(&mut self, why: &str) {
        let node = self.focus;
        if self.trace {
            println!("          node {node} steps down: {why}");
        }
        self.stats.fault("step_down");
        if let Some(server) = self.servers[node].take() {
            self.node_stats.add(server.node.stats());
            for (actor, req) in server.pending.into_values() {
                let response = Response::error(
                    503,
                    "STORAGE_ERROR",
                    "fenced: this node stepped down; nothing of the request was applied",
                );
                self.send_to_actor(actor, req, response);
            }
        }
        let n = &mut self.cluster_mut().nodes[node];
        n.role = Role::Standby;
        n.known_leader = None;
        n.generation += 1;
        let ev = self.beat(node);
        let every = self.renew_every();
        self.at(every, ev);
    }

    /// A crashed node's server incarnation `inc` is gone: the node is down.
    pub(super) fn cluster_crashed(&mut self, _inc: u64) {
        let node = self.focus;
        if let Some(c) = &mut self.cluster {
            let n = &mut c.nodes[node];
            n.role = Role::Down;
            n.known_leader = None;
            n.generation += 1;
        }
    }

    /// A crashed node's process starts again, as a standby.
    pub(super) fn cluster_restart(&mut self) {
        let node = self.focus;
        if self.cluster_ref().nodes[node].role != Role::Down {
            return;
        }
        let n = &mut self.cluster_mut().nodes[node];
        n.role = Role::Standby;
        n.generation += 1;
        let ev = self.beat(node);
        self.at(0, ev);
        // The next crash strikes whoever leads then.
        if let Some(leader) = self.leader() {
            self.focus = leader;
        }
        self.schedule_crash();
    }

    /// Faults stop: every node runs again, reachable.
    pub(super) fn cluster_heal(&mut self) {
        let now = self.now;
        let down: Vec<usize> = self
            .cluster_ref()
            .nodes
            .iter()
            .enumerate()
            .filter(|(_, n)| n.role == Role::Down)
            .map(|(i, _)| i)
            .collect();
        for n in &mut self.cluster_mut().nodes {
            n.db_cut_until = n.db_cut_until.min(now);
        }
        self.queue.retain(|_, e| !matches!(e, Ev::Restart { .. }));
        for node in down {
            self.at(0, Ev::Restart { node });
        }
    }

    /// Widens what the checkers accept of event times going back: a
    /// history written by several nodes carries the spread of their clocks.
    pub(super) fn cluster_clock_spread(&mut self) {
        let lo = self.clock_offsets.iter().min().copied().unwrap_or(0);
        let hi = self.clock_offsets.iter().max().copied().unwrap_or(0);
        let drift = self.cfg.faults.clock_drift_ppm_max
            * (self.cfg.safety_ms + self.cfg.liveness_ms_max)
            / 1_000_000;
        let spread = (hi - lo).unsigned_abs() + 2 * drift;
        self.clock_back_total = self.clock_back_total.max(spread);
    }

    /// One cluster event.
    pub(super) fn cluster_event(&mut self, ev: ClusterEv) {
        match ev {
            ClusterEv::Beat { node, generation } => self.on_beat(node, generation),
            ClusterEv::AtDatabase {
                node,
                generation,
                call,
            } => self.at_database(node, generation, call),
            ClusterEv::Answer {
                node,
                generation,
                answer,
            } => self.on_answer(node, generation, answer),
            ClusterEv::Recovered { node, generation } => {
                let n = &self.cluster_ref().nodes[node];
                if n.generation != generation {
                    return;
                }
                let cut = self.now < n.db_cut_until;
                self.focus = node;
                if cut {
                    // The recovery read failed: try it again.
                    let ev = Ev::Cluster(ClusterEv::Recovered { node, generation });
                    return self.at(100, ev);
                }
                self.lead();
            }
            ClusterEv::Pause { ms } => {
                if !self.faults_on {
                    return;
                }
                let node = self.fault_target();
                self.stats.fault("node_paused");
                let until = (self.now + ms).min(self.faults_end_at.max(self.now));
                self.cluster_mut().nodes[node].paused_until = until;
            }
            ClusterEv::CutFromDatabase { ms } => {
                if !self.faults_on {
                    return;
                }
                let node = self.fault_target();
                self.stats.fault("node_cut_from_database");
                let until = (self.now + ms).min(self.faults_end_at.max(self.now));
                self.cluster_mut().nodes[node].db_cut_until = until;
            }
        }
    }

    /// The node a fault strikes: the leader four times in five (the case
    /// that matters), any node otherwise.
    fn fault_target(&mut self) -> usize {
        let any = self.rng.between(0, self.servers.len() as u64 - 1) as usize;
        match self.leader() {
            Some(l) if self.rng.chance(0.8) => l,
            _ => any,
        }
    }

    fn on_beat(&mut self, node: usize, generation: u64) {
        self.focus = node;
        let now = self.server_now();
        let c = self.cluster_ref();
        let n = &c.nodes[node];
        if n.generation != generation || n.role == Role::Down {
            return;
        }
        let lapsed = c.rules.lapsed(n.renewed_at, now);
        let role = n.role;
        let every = self.renew_every();
        let ev = self.beat(node);
        self.at(every, ev);
        let call = match role {
            Role::Down => return,
            Role::Standby => Call::Take { sent_at: now },
            Role::Recovering { epoch } | Role::Leader { epoch } => {
                if lapsed {
                    return self.step_down("no renewal for --node-timeout");
                }
                Call::Renew {
                    epoch,
                    sent_at: now,
                }
            }
        };
        let d = self.rng.between(1, 20);
        self.at(
            d,
            Ev::Cluster(ClusterEv::AtDatabase {
                node,
                generation,
                call,
            }),
        );
    }

    fn at_database(&mut self, node: usize, generation: u64, call: Call) {
        let skew = self.rng.between(1, 20);
        let c = self.cluster_ref();
        if self.now < c.nodes[node].db_cut_until {
            return; // lost on the way: the node hears nothing
        }
        let id = c.nodes[node].id.clone();
        let ttl = self.cfg.node_timeout_ms;
        let answer = match call {
            Call::Take { sent_at } => {
                // The node's clock when the call arrives (its judgement, if
                // the tooth is planted).
                let node_now = sent_at + skew;
                let judged_at = c.rules.expiry_judged_at(self.now, node_now);
                let before = self.store.lease(self.now);
                match self.store.lease_take(&id, ttl, self.now, judged_at) {
                    Some(epoch) => {
                        if !before.expired() {
                            self.fail(Violation::new(
                                Invariant::OneWriter,
                                format!(
                                    "{id} took the lease at epoch {epoch} while epoch {} of {} ran {} ms more by the database's clock",
                                    before.epoch,
                                    before.holder,
                                    before.remaining_ms()
                                ),
                            ));
                        }
                        self.stats.fault("takeover");
                        Answer::Took { epoch, sent_at }
                    }
                    None => Answer::Held {
                        holder: before.holder.clone(),
                        expired: before.expired(),
                    },
                }
            }
            Call::Renew { epoch, sent_at } => {
                match self.store.lease_renew(&id, epoch, ttl, self.now) {
                    Ok(()) => Answer::Renewed { sent_at },
                    Err(_) => Answer::Fenced,
                }
            }
        };
        let d = self.rng.between(1, 20);
        self.at(
            d,
            Ev::Cluster(ClusterEv::Answer {
                node,
                generation,
                answer,
            }),
        );
    }

    fn on_answer(&mut self, node: usize, generation: u64, answer: Answer) {
        if self.cluster_ref().nodes[node].generation != generation {
            return;
        }
        self.focus = node;
        match answer {
            Answer::Took { epoch, sent_at } => {
                self.begin_term(epoch, sent_at);
                let generation = self.cluster_ref().nodes[node].generation;
                let ev = self.beat(node);
                let every = self.renew_every();
                self.at(every, ev);
                let d = self.rng.between(5, 300);
                self.at(d, Ev::Cluster(ClusterEv::Recovered { node, generation }));
            }
            Answer::Held { holder, expired } => {
                let leader = self.cluster_ref().nodes.iter().position(|n| n.id == holder);
                self.cluster_mut().nodes[node].known_leader = if expired { None } else { leader };
            }
            Answer::Renewed { sent_at } => {
                let n = &mut self.cluster_mut().nodes[node];
                n.renewed_at = n.renewed_at.max(sent_at);
            }
            Answer::Fenced => self.step_down("the lease renewal was fenced"),
        }
    }
}
