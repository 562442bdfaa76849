//! A simulated `--cluster --cluster-mode shared`: three nodes (`n1`, `n2`,
//! `n3`) executing workflows at once over the one simulated database,
//! each the core's node loop with `NodeConfig::shared` set around an
//! engine with `Config::node_id` set, as the production driver runs it.
//! The database's clock is the world's reference time; each node has its
//! own clock (skew, drift, forward steps), and timers fire by the owner's.
//! The world performs the node's shared-mode calls (`Io::Beat`,
//! `Io::TakeOver`, `Io::Reclaim`, `Io::ReadInbox`, `Io::Send`,
//! `Io::Claim`, `Io::TouchSessions`, `Io::ReadSessions`) against the
//! simulated store's `*_now` calls, as `perform_shared` of the tokio
//! driver does, with latency and the store's fault model (`Unavailable`,
//! `Ambiguous` landed or lost), and its group commits fenced by the node's
//! id (`convert::group_transaction`).
//!
//! Clients start executions round-robin over the nodes (and send their
//! signals and cancellations the same way, so most reach a non-owner);
//! each worker polls one node (its session belongs to it) and posts its
//! results there, moving to the next node only while its own is down.
//!
//! Faults of this world, besides those of the single node (network,
//! storage, workers, partitions of workers and clients): a node killed at
//! any point — mid group commit (each commit in flight lands whole or
//! vanishes; so does each shared-mode call in flight) — and restarted
//! later with the same id (it takes its own executions back with a new
//! epoch); a node paused past `--node-timeout` and resumed with its
//! commits and calls still queued (they reach the database after its
//! executions moved: fenced); a node cut off from the database; clock
//! steps. Takeovers race with commits, sends, claims and inbox reads.
//!
//! Invariants added here (checked as they happen, and at the end):
//!
//! - one writer per execution per epoch: no two nodes ever have appends
//!   accepted for the same execution at the same epoch, and every
//!   takeover or reclaim hands out an epoch above every one seen before;
//! - every inbox entry is consumed once, by the execution's owner at its
//!   current epoch, in the commit of what it caused;
//! - a task is handed out only once its claim is durable: when a worker
//!   receives it, its `dispatch` entry is in the owner's inbox, or was
//!   consumed, or `StepDispatched` with its token is in the history;
//! - a result or cancellation another node acknowledged once stored in
//!   the owner's inbox ends up in the owner's history (unless the unit was
//!   resolved, or the execution ended, first);
//! - once faults stop and the cluster is quiet, no inbox entry and no
//!   queue row of a finished execution is left.

use super::{Actor, Ev, World};
use crate::check::durability::Fact;
use crate::check::{Invariant, Violation};
use orbit_core::history::{EventKind, Millis};
use orbit_core::node::{Io, NodeInput};
use orbit_core::store::shared::{Kind, Sent, Taken};
use orbit_core::store::{is_terminal, StorageError, Transaction};
use std::collections::{BTreeMap, BTreeSet};

/// Nodes of the shared cluster.
pub(crate) const NODES: usize = 3;

/// How long an inbox entry may wait, once everything is terminal and the
/// nodes idle, before the run is judged quiet and the entry left over —
/// counted from the end of the faults at the earliest, since an owner
/// paused or cut off until then could not apply it (seed 0x2a48).
const QUIET_ENTRY_MS: Millis = 5_000;

/// One member of the shared cluster.
#[derive(Debug, Clone)]
pub(crate) struct SharedNode {
    /// Its `--node-id`.
    pub id: String,
    /// While paused (SIGSTOP, a long GC pause), nothing of it runs.
    paused_until: Millis,
    /// While cut off from the database, none of its calls get through.
    db_cut_until: Millis,
}

/// The shared cluster's state besides the nodes' servers, and what its
/// checkers remember.
#[derive(Debug, Clone, Default)]
pub(crate) struct SharedCluster {
    pub nodes: Vec<SharedNode>,
    /// The node of every server incarnation that ran (its commits and
    /// calls may still be on their way).
    incs: BTreeMap<u64, usize>,
    /// The next node a client request goes to.
    next_client_node: usize,
    /// The node whose appends were accepted, by execution and epoch.
    writers: BTreeMap<(String, u64), String>,
    /// The highest epoch seen for each execution (appends and moves).
    epochs: BTreeMap<String, u64>,
    /// Inbox entries consumed, with the node that consumed them.
    consumed: BTreeMap<i64, String>,
    /// Tokens of consumed `dispatch` entries.
    consumed_dispatches: BTreeSet<String>,
    /// Tokens whose result was stored in an owner's inbox (a member that
    /// stored it answered `accepted: true` before the owner judged it).
    forwarded_results: BTreeSet<String>,
    /// Acknowledgements that count once the owner applied its inbox
    /// entry, with the time they were told.
    deferred: Vec<(Fact, Millis)>,
}

/// Events of the shared cluster.
#[derive(Debug, Clone)]
pub(crate) enum SharedEv {
    /// A shared-mode call of incarnation `inc` reaches the database.
    Call { inc: u64, io: Box<Io> },
    /// A node stops (SIGSTOP, a long GC pause) for `ms`.
    Pause { ms: Millis },
    /// A node is cut off from the database for `ms`.
    CutFromDatabase { ms: Millis },
}

impl World {
    /// Boots the shared cluster: three nodes with their clocks, the
    /// definitions deployed through the first.
    pub(super) fn shared_setup(&mut self) -> Result<(), String> {
        let n = NODES;
        let skew = self.cfg.faults.clock_skew_ms_max as i64;
        self.servers = (0..n).map(|_| None).collect();
        self.clock_offsets = (0..n)
            .map(|_| self.rng.between(0, 2 * skew as u64) as i64 - skew)
            .collect();
        let drift = self.cfg.faults.clock_drift_ppm_max as i64;
        self.clock_drift_ppm = (0..n)
            .map(|_| self.rng.between(0, 2 * drift as u64) as i64 - drift)
            .collect();
        self.shared = Some(SharedCluster {
            nodes: (0..n)
                .map(|i| SharedNode {
                    id: format!("n{}", i + 1),
                    paused_until: 0,
                    db_cut_until: 0,
                })
                .collect(),
            ..SharedCluster::default()
        });
        self.cluster_clock_spread();
        self.store.set_clock(self.now);
        self.focus = 0;
        self.boot(None);
        self.deploy()?;
        for node in 1..n {
            self.focus = node;
            self.boot(None);
            self.recover();
        }
        let ttl = self.cfg.node_timeout_ms;
        let f = self.cfg.faults.clone();
        let safety = self.cfg.safety_ms;
        for _ in 0..self.rng.between(0, 3) {
            if self.rng.chance(f.node_pause_probability) {
                let at = self.rng.between(0, safety);
                let ms = self.rng.between(ttl + ttl / 5, 3 * ttl);
                self.at(at, Ev::Shared(SharedEv::Pause { ms }));
            }
            if self.rng.chance(f.node_db_cut_probability) {
                let at = self.rng.between(0, safety);
                let ms = self.rng.between(ttl / 2, 3 * ttl);
                self.at(at, Ev::Shared(SharedEv::CutFromDatabase { ms }));
            }
        }
        for node in 0..n {
            self.focus = node;
            self.schedule_crash();
        }
        self.focus = 0;
        Ok(())
    }

    fn shared_ref(&self) -> &SharedCluster {
        self.shared.as_ref().expect("a shared cluster world")
    }

    fn shared_mut(&mut self) -> &mut SharedCluster {
        self.shared.as_mut().expect("a shared cluster world")
    }

    /// The id of node `node`, in a shared cluster.
    pub(super) fn shared_node_id(&self, node: usize) -> Option<String> {
        Some(self.shared.as_ref()?.nodes.get(node)?.id.clone())
    }

    /// A server incarnation booted on `node`.
    pub(super) fn shared_booted(&mut self, node: usize, inc: u64) {
        if let Some(s) = self.shared.as_mut() {
            s.incs.insert(inc, node);
        }
    }

    /// The node that owns `id` (by the store's row), if it is up.
    pub(super) fn shared_owner_node(&self, id: &str) -> Option<usize> {
        let owner = self.store.owner(id)?;
        let node = self
            .shared_ref()
            .nodes
            .iter()
            .position(|n| n.id == owner.node_id)?;
        self.servers[node].is_some().then_some(node)
    }

    fn node_of_inc(&self, inc: u64) -> Option<usize> {
        self.shared.as_ref()?.incs.get(&inc).copied()
    }

    /// Whether the node of incarnation `inc` is cut off from the database.
    pub(super) fn shared_db_cut(&self, inc: u64) -> bool {
        self.node_of_inc(inc)
            .is_some_and(|n| self.now < self.shared_ref().nodes[n].db_cut_until)
    }

    /// The event's node, if it is paused: the time it resumes.
    pub(super) fn shared_paused_target(&self, ev: &Ev) -> Option<Millis> {
        let s = self.shared.as_ref()?;
        let node = match ev {
            Ev::ToServer { node, .. } | Ev::ToServerTogether { node, .. } => *node,
            Ev::CommitDone { inc, .. }
            | Ev::ReloadDone { inc, .. }
            | Ev::Tick { inc, .. }
            | Ev::CreatesRefused { inc, .. }
            | Ev::Shared(SharedEv::Call { inc, .. }) => *s.incs.get(inc)?,
            _ => return None,
        };
        let until = s.nodes[node].paused_until;
        (self.now < until).then_some(until)
    }

    /// Which node `actor` sends to: a worker to its own node (the next
    /// one while its own is down), a client to each node in turn.
    pub(super) fn shared_route(&mut self, actor: Actor) -> usize {
        let n = self.servers.len();
        match actor {
            Actor::Worker(w) => {
                let home = w % n;
                let mut node = self.routes.get(&actor).copied().unwrap_or(home);
                if self.servers[home].is_some() {
                    node = home;
                }
                for _ in 0..n {
                    if self.servers[node].is_some() {
                        break;
                    }
                    node = (node + 1) % n;
                }
                self.routes.insert(actor, node);
                node
            }
            _ => {
                let s = self.shared_mut();
                let node = s.next_client_node % n;
                s.next_client_node = (node + 1) % n;
                node
            }
        }
    }

    /// Faults stop: every node runs again, reachable.
    pub(super) fn shared_heal(&mut self) {
        let now = self.now;
        for n in &mut self.shared_mut().nodes {
            n.db_cut_until = n.db_cut_until.min(now);
        }
        self.queue.retain(|_, e| !matches!(e, Ev::Restart { .. }));
        for node in 0..self.servers.len() {
            if self.servers[node].is_none() {
                self.at(0, Ev::Restart { node });
            }
        }
    }

    /// A crashed node starts again with the same id: an empty engine that
    /// takes its own executions back (the node loop reclaims them).
    pub(super) fn shared_restart(&mut self) {
        if self.server().is_some() {
            return;
        }
        self.boot(None);
        self.recover();
        self.schedule_crash();
    }

    /// The shared-mode calls in flight of a crashed incarnation: each
    /// reached the database or was lost on the way.
    pub(super) fn shared_crashed(&mut self, inc: u64) {
        if self.shared.is_none() {
            return;
        }
        let inflight: Vec<(Millis, u64)> = self
            .queue
            .iter()
            .filter(|(_, e)| matches!(e, Ev::Shared(SharedEv::Call { inc: i, .. }) if *i == inc))
            .map(|(k, _)| *k)
            .collect();
        for k in inflight {
            if let Some(Ev::Shared(SharedEv::Call { io, .. })) = self.queue.remove(&k) {
                if self.rng.chance(0.5) {
                    self.stats.fault("shared_call_landed_then_crash");
                    self.shared_perform(inc, *io);
                }
            }
        }
    }

    /// A shared-mode call of the node in focus: it reaches the database
    /// after a delay.
    pub(super) fn shared_io(&mut self, inc: u64, io: Io) {
        let latency = if self.faults_on && self.rng.chance(self.cfg.faults.store_slow_probability) {
            self.rng
                .between(20, self.cfg.faults.store_slow_ms_max.clamp(20, 1000))
        } else {
            self.rng.between(1, 10)
        };
        self.at(
            latency,
            Ev::Shared(SharedEv::Call {
                inc,
                io: Box::new(io),
            }),
        );
    }

    /// One event of the shared cluster.
    pub(super) fn shared_event(&mut self, ev: SharedEv) {
        match ev {
            SharedEv::Call { inc, io } => {
                self.focus_inc(inc);
                if self.server().is_none_or(|s| s.inc != inc) {
                    return; // the crash decided its fate
                }
                if let Some(input) = self.shared_perform(inc, *io) {
                    if self.trace {
                        let text = format!("{input:?}");
                        let short: String = text.chars().take(300).collect();
                        println!("          -> {short}");
                    }
                    self.feed(input);
                }
            }
            SharedEv::Pause { ms } => {
                if !self.faults_on {
                    return;
                }
                let node = self.shared_fault_target();
                self.stats.fault("node_paused");
                let until = (self.now + ms).min(self.faults_end_at.max(self.now));
                if self.trace {
                    println!(
                        "          node {node} paused until {}",
                        until - super::EPOCH_MS
                    );
                }
                self.shared_mut().nodes[node].paused_until = until;
            }
            SharedEv::CutFromDatabase { ms } => {
                if !self.faults_on {
                    return;
                }
                let node = self.shared_fault_target();
                self.stats.fault("node_cut_from_database");
                let until = (self.now + ms).min(self.faults_end_at.max(self.now));
                self.shared_mut().nodes[node].db_cut_until = until;
            }
        }
    }

    /// The node a fault strikes: the one that owns the most running
    /// executions four times in five, any node otherwise.
    fn shared_fault_target(&mut self) -> usize {
        let n = self.servers.len();
        let any = self.rng.between(0, n as u64 - 1) as usize;
        if !self.rng.chance(0.8) {
            return any;
        }
        let mut owned = vec![0usize; n];
        let ids: Vec<String> = self
            .shared_ref()
            .nodes
            .iter()
            .map(|x| x.id.clone())
            .collect();
        let mut running = Vec::new();
        self.store.for_each(|row, _| {
            if !is_terminal(&row.status) {
                running.push(row.id.clone());
            }
        });
        for id in running {
            if let Some(owner) = self.store.owner(&id) {
                if let Some(i) = ids.iter().position(|x| *x == owner.node_id) {
                    owned[i] += 1;
                }
            }
        }
        (0..n).max_by_key(|i| (owned[*i], *i == any)).unwrap_or(any)
    }

    /// A write at the database: cut off, it fails; under faults it fails
    /// before applying, or ambiguously (applied whole or not at all).
    fn db_write<T>(
        &mut self,
        inc: u64,
        f: impl FnOnce(&mut World) -> Result<T, StorageError>,
    ) -> Result<T, StorageError> {
        if self.shared_db_cut(inc) {
            return Err(StorageError::Unavailable(
                "simulated: node cut off from the database".into(),
            ));
        }
        let faults = &self.cfg.faults;
        let (fail_p, ambiguous_p) = (
            faults.store_commit_fail_probability,
            faults.store_commit_ambiguous_probability,
        );
        if self.faults_on && self.rng.chance(fail_p) {
            self.stats.fault("shared_call_unavailable");
            return Err(StorageError::Unavailable(
                "simulated: database unreachable".into(),
            ));
        }
        if self.faults_on && self.rng.chance(ambiguous_p) {
            if self.rng.chance(0.5) {
                self.stats.fault("shared_call_ambiguous_applied");
                let _ = f(self);
            } else {
                self.stats.fault("shared_call_ambiguous_lost");
            }
            return Err(StorageError::Ambiguous(
                "simulated: connection lost during COMMIT".into(),
            ));
        }
        f(self)
    }

    /// A read at the database: cut off or under faults, it fails.
    fn db_read<T>(&mut self, inc: u64, f: impl FnOnce(&World) -> T) -> Result<T, StorageError> {
        let fail_p = self.cfg.faults.store_commit_fail_probability;
        if self.shared_db_cut(inc) || (self.faults_on && self.rng.chance(fail_p)) {
            return Err(StorageError::Unavailable(
                "simulated: database unreachable".into(),
            ));
        }
        Ok(f(self))
    }

    /// Performs a shared-mode call at the database now and returns the
    /// node's completion (mirrors `perform_shared` of the tokio driver).
    fn shared_perform(&mut self, inc: u64, io: Io) -> Option<NodeInput> {
        self.store.set_clock(self.now);
        let input = match io {
            Io::Beat {
                node_id,
                advertise,
                timeout_ms,
            } => NodeInput::Beat {
                result: self.db_write(inc, |w| w.store.beat_now(&node_id, &advertise, timeout_ms)),
            },
            Io::TakeOver {
                node_id,
                dead,
                live,
                timeout_ms,
                limit,
            } => NodeInput::TakenOver {
                result: self.db_write(inc, |w| {
                    let taken = w
                        .store
                        .take_over_now(&node_id, &dead, &live, timeout_ms, limit)?;
                    if !taken.is_empty() {
                        w.stats.fault("takeover");
                    }
                    w.moved(&node_id, &taken, "took over");
                    Ok(taken)
                }),
            },
            Io::Reclaim {
                node_id,
                after_id,
                timeout_ms,
                limit,
            } => NodeInput::Reclaimed {
                result: self.db_write(inc, |w| {
                    let taken = w
                        .store
                        .reclaim_now(&node_id, &after_id, timeout_ms, limit)?;
                    if !taken.is_empty() {
                        w.stats.fault("reclaim");
                    }
                    w.moved(&node_id, &taken, "took back");
                    Ok(taken)
                }),
            },
            Io::ReadInbox {
                node_id,
                read,
                limit,
            } => NodeInput::InboxRead {
                read,
                result: self.db_read(inc, |w| w.store.inbox_now(&node_id, 0, limit)),
            },
            Io::Send {
                send,
                execution_id,
                kind,
                body,
            } => NodeInput::Sent {
                send,
                result: self.db_write(inc, |w| {
                    let sent = w.store.send_now(&execution_id, kind, &body)?;
                    if matches!(sent, Sent::Queued { .. }) {
                        if kind == Kind::Result {
                            if let Some(token) = body.get("token").and_then(|t| t.as_str()) {
                                w.shared_mut().forwarded_results.insert(token.to_owned());
                            }
                        }
                        w.stats.fault(match kind {
                            Kind::Result => "inbox_result",
                            Kind::Signal => "inbox_signal",
                            Kind::Cancel => "inbox_cancel",
                            Kind::Start => "inbox_start",
                            Kind::Dispatch => "inbox_dispatch",
                        });
                    }
                    Ok(sent)
                }),
            },
            Io::Claim { claim, poll } => NodeInput::Claimed {
                claim,
                result: self.db_write(inc, |w| w.store.claim_now(&poll)),
            },
            Io::TouchSessions { node_id, sessions } => NodeInput::Touched {
                result: self.db_write(inc, |w| w.store.touch_sessions_now(&node_id, &sessions)),
            },
            Io::ReadSessions { sessions } => NodeInput::SessionContacts {
                result: self.db_read(inc, |w| w.store.session_contacts_now(&sessions)),
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
                result: self.db_read(inc, |w| {
                    let waiting = w.store.inbox_now(&owner, entry.saturating_sub(1), 1);
                    if waiting.first().is_some_and(|e| e.id == entry) {
                        return None;
                    }
                    w.store
                        .events(&execution_id)
                        .iter()
                        .rev()
                        .find_map(|e| match &e.kind {
                            EventKind::SignalReceived {
                                name: n,
                                payload: p,
                            } if *n == name && *p == payload => Some(e.seq),
                            _ => None,
                        })
                }),
            },
            Io::ReadDefinitions => NodeInput::Definitions {
                result: self.db_read(inc, |w| {
                    w.store
                        .definitions()
                        .iter()
                        .filter_map(crate::convert::definition_from_store)
                        .collect()
                }),
            },
            _ => return None,
        };
        Some(input)
    }

    /// Executions moved to `node` at new epochs: each epoch must be above
    /// every one seen for its execution (invariant 3).
    fn moved(&mut self, node: &str, taken: &[Taken], how: &str) {
        for t in taken {
            let seen = self
                .shared_ref()
                .epochs
                .get(&t.execution_id)
                .copied()
                .unwrap_or(0);
            if t.epoch <= seen {
                let events = self.store.events(&t.execution_id);
                let v = Violation::new(
                    Invariant::OneWriter,
                    format!(
                        "{node} {how} {} at epoch {}, but epoch {seen} was already in use: ownership moved without a new epoch",
                        t.execution_id, t.epoch
                    ),
                )
                .in_execution(&t.execution_id, &events);
                self.fail(v);
            }
            let s = self.shared_mut();
            let e = s.epochs.entry(t.execution_id.clone()).or_default();
            *e = (*e).max(t.epoch);
        }
    }

    /// The stored status of an execution.
    fn status(&self, id: &str) -> Option<String> {
        let mut status = None;
        self.store.for_each(|row, _| {
            if row.id == id {
                status = Some(row.status.clone());
            }
        });
        status
    }

    /// The inbox entries a transaction consumes, as stored before it
    /// applies: `(id, kind, body)`.
    pub(super) fn shared_before_apply(
        &self,
        tx: &Transaction,
    ) -> Vec<(i64, Option<(Kind, serde_json::Value)>)> {
        if self.shared.is_none() {
            return Vec::new();
        }
        tx.inbox_consumed
            .iter()
            .map(|c| {
                (
                    c.id,
                    self.store.inbox_entry(c.id).map(|(_, _, k, b)| (k, b)),
                )
            })
            .collect()
    }

    /// Checks a group commit of `writer` the store accepted: one writer
    /// per execution and epoch, and each consumed inbox entry consumed
    /// once, by the owner at its current epoch.
    pub(super) fn shared_applied(
        &mut self,
        writer: &str,
        tx: &Transaction,
        entries: Vec<(i64, Option<(Kind, serde_json::Value)>)>,
    ) {
        if self.shared.is_none() {
            return;
        }
        for a in &tx.appends {
            let Some(f) = &a.fence else {
                continue;
            };
            if a.events.is_empty() {
                continue;
            }
            let newest = self
                .shared_ref()
                .epochs
                .get(&a.execution_id)
                .copied()
                .unwrap_or(0);
            if f.epoch < newest {
                let events = self.store.events(&a.execution_id);
                let v = Violation::new(
                    Invariant::OneWriter,
                    format!(
                        "an append of {} by {} at epoch {} was accepted after the execution moved to epoch {newest}: a fenced owner wrote",
                        a.execution_id, f.node_id, f.epoch
                    ),
                )
                .in_execution(&a.execution_id, &events);
                return self.fail(v);
            }
            let key = (a.execution_id.clone(), f.epoch);
            let first = self.shared_ref().writers.get(&key).cloned();
            match first {
                Some(other) if other != f.node_id => {
                    let events = self.store.events(&a.execution_id);
                    let v = Violation::new(
                        Invariant::OneWriter,
                        format!(
                            "appends of {} at epoch {} were accepted from {other} and from {}",
                            a.execution_id, f.epoch, f.node_id
                        ),
                    )
                    .in_execution(&a.execution_id, &events);
                    return self.fail(v);
                }
                Some(_) => {}
                None => {
                    self.shared_mut().writers.insert(key, f.node_id.clone());
                }
            }
            let s = self.shared_mut();
            let e = s.epochs.entry(a.execution_id.clone()).or_default();
            *e = (*e).max(f.epoch);
        }
        for (c, (id, stored)) in tx.inbox_consumed.iter().zip(entries) {
            debug_assert_eq!(c.id, id);
            let owner = self.store.owner(&c.execution_id);
            let events = self.store.events(&c.execution_id);
            if let Some(by) = self.shared_ref().consumed.get(&c.id).cloned() {
                let v = Violation::new(
                    Invariant::InboxOnce,
                    format!(
                        "inbox entry {} for {} was consumed twice: by {by}, then by {writer}",
                        c.id, c.execution_id
                    ),
                )
                .in_execution(&c.execution_id, &events);
                return self.fail(v);
            }
            // An entry of a finished execution causes nothing: whoever it
            // is addressed to deletes it (at the epoch that fences no one).
            let finished = self
                .status(&c.execution_id)
                .is_some_and(|s| is_terminal(&s));
            let mismatch = if finished {
                c.fence.node_id != writer
            } else {
                owner.as_ref() != Some(&c.fence) || c.fence.node_id != writer
            };
            if mismatch {
                let v = Violation::new(
                    Invariant::InboxOnce,
                    format!(
                        "inbox entry {} for {} was consumed by {writer} as {:?} while the owner is {owner:?}",
                        c.id, c.execution_id, c.fence
                    ),
                )
                .in_execution(&c.execution_id, &events);
                return self.fail(v);
            }
            let s = self.shared_mut();
            s.consumed.insert(c.id, writer.to_owned());
            if let Some((Kind::Dispatch, body)) = stored {
                if let Some(token) = body.get("token").and_then(|t| t.as_str()) {
                    s.consumed_dispatches.insert(token.to_owned());
                }
            }
        }
    }

    /// Shared mode: what an actor was told. A task handed out must have its
    /// claim durable; an acknowledgement another node gave once the
    /// command was stored in the owner's inbox counts once the owner
    /// applies it (checked at the end). Returns the fact when it is to be
    /// checked now, as on one server.
    pub(super) fn shared_told(&mut self, fact: Fact) -> Option<Fact> {
        let s = self.shared.as_ref()?;
        // A result stored in the owner's inbox was accepted before anyone
        // judged it: the owner may still find it stale (finding 41), even
        // when the history already records a failure of the same attempt
        // from the delivery that replaced it. It is held to the deferred
        // rule, whatever the history holds now.
        if let Fact::Succeeded { token, .. } | Fact::AttemptFailed { token, .. } = &fact {
            if s.forwarded_results.contains(token) {
                let now = self.now;
                self.shared_mut().deferred.push((fact, now));
                return None;
            }
        }
        let events = self.store.events(fact.execution());
        if crate::check::durability::check(&fact, &events).is_ok() {
            return Some(fact);
        }
        match &fact {
            Fact::Dispatched {
                execution,
                unit,
                token,
            } => {
                let in_inbox = self.store.inbox_rows().iter().any(|(_, _, e, k, b, _)| {
                    *k == Kind::Dispatch
                        && e == execution
                        && b.get("token").and_then(|t| t.as_str()) == Some(token.as_str())
                });
                let consumed = self.shared_ref().consumed_dispatches.contains(token);
                if !in_inbox && !consumed {
                    let v = Violation::new(
                        Invariant::InboxOnce,
                        format!(
                            "a task of {execution} was handed out with token {token} but its claim is not durable: no dispatch entry for it in the inbox, none consumed, and no StepDispatched"
                        ),
                    )
                    .in_execution(execution, &events)
                    .at_unit(unit);
                    self.fail(v);
                    return None;
                }
                let now = self.now;
                self.shared_mut().deferred.push((fact, now));
                None
            }
            Fact::Succeeded { .. } | Fact::AttemptFailed { .. } | Fact::CancelRequested { .. } => {
                let now = self.now;
                self.shared_mut().deferred.push((fact, now));
                None
            }
            _ => Some(fact),
        }
    }

    /// Whether the shared cluster is quiet: every node up, idle and not
    /// reading, no call in flight, and no inbox entry younger than
    /// [`QUIET_ENTRY_MS`] (one older is left over).
    pub(super) fn shared_quiet(&self) -> bool {
        let busy = self.servers.iter().any(|s| {
            s.as_ref()
                .is_none_or(|s| !s.node.is_idle() || s.node.reads_open() > 0)
        });
        if busy {
            return false;
        }
        let incs: BTreeSet<u64> = self.servers.iter().flatten().map(|s| s.inc).collect();
        let in_flight = self.queue.values().any(|ev| match ev {
            Ev::CommitDone { inc, .. } | Ev::ReloadDone { inc, .. } => incs.contains(inc),
            Ev::Shared(SharedEv::Call { io, .. }) => !matches!(
                **io,
                Io::Beat { .. }
                    | Io::ReadInbox { .. }
                    | Io::TouchSessions { .. }
                    | Io::ReadSessions { .. }
                    | Io::ReadDefinitions
                    | Io::FindSignal { .. }
            ),
            _ => false,
        });
        if in_flight {
            return false;
        }
        let now = self.store.clock().max(self.now);
        let faults_end = self.faults_end_at;
        self.store.inbox_rows().iter().all(|(.., created_at)| {
            now.saturating_sub((*created_at).max(faults_end)) >= QUIET_ENTRY_MS
        })
    }

    /// The end of a run in a shared cluster: deferred acknowledgements are
    /// in the owner's history (unless overtaken), and nothing is left in
    /// the inbox or in the queue of a finished execution.
    pub(super) fn shared_final(&mut self) -> Result<(), Violation> {
        let mut statuses: BTreeMap<String, String> = BTreeMap::new();
        self.store.for_each(|row, _| {
            statuses.insert(row.id.clone(), row.status.clone());
        });
        let Some(s) = self.shared.as_ref() else {
            return Ok(());
        };
        for (fact, _at) in &s.deferred {
            let events = self.store.events(fact.execution());
            if crate::check::durability::check(fact, &events).is_ok() {
                continue;
            }
            let status = statuses.get(fact.execution()).map_or("", String::as_str);
            let terminal = is_terminal(status);
            let excused = match fact {
                Fact::Dispatched { .. } | Fact::CancelRequested { .. } => terminal,
                Fact::Succeeded { unit, attempt, .. }
                | Fact::AttemptFailed { unit, attempt, .. } => {
                    let resolved = events.iter().any(|e| match &e.kind {
                        EventKind::StepSucceeded { step, .. } => step == unit,
                        EventKind::StepAttemptFailed {
                            step, attempt: a, ..
                        } => step == unit && a == attempt,
                        _ => false,
                    });
                    resolved || (terminal && status != "completed")
                }
                _ => false,
            };
            if !excused {
                let v = Violation::new(
                    Invariant::NoLostCommits,
                    format!(
                        "acknowledged once stored in the owner's inbox, but never applied by the owner: {fact:?}"
                    ),
                )
                .in_execution(fact.execution(), &events);
                return Err(v);
            }
        }
        if let Some((id, node, exec, kind, body, created_at)) =
            self.store.inbox_rows().into_iter().next()
        {
            let events = self.store.events(&exec);
            let owner = self.store.owner(&exec);
            return Err(Violation::new(
                Invariant::InboxOnce,
                format!(
                    "inbox entry {id} ({} for {exec}, addressed to {node}, stored at {} ms, body {body}) is left once the cluster is quiet (owner {owner:?})",
                    kind.as_str(),
                    created_at.saturating_sub(super::EPOCH_MS)
                ),
            )
            .in_execution(&exec, &events));
        }
        let finished: BTreeSet<String> = statuses
            .into_iter()
            .filter(|(_, status)| is_terminal(status))
            .map(|(id, _)| id)
            .collect();
        if let Some((exec, unit)) = self
            .store
            .queue_rows()
            .into_iter()
            .find(|(e, _)| finished.contains(e))
        {
            let events = self.store.events(&exec);
            return Err(Violation::new(
                Invariant::InboxOnce,
                format!("the queue row of unit {unit} of the finished execution {exec} is left"),
            )
            .in_execution(&exec, &events)
            .at_unit(&unit));
        }
        Ok(())
    }
}
