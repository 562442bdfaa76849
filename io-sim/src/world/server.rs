//! The simulated server: the core's node loop (`orbit_core::node::Node`,
//! the same group commits, `Conflict` splits, reload backoff and ticks as
//! production) around an unchanged engine, and the world performing the
//! node's I/O against the [`SimStore`](crate::store::SimStore) — with seeded
//! latency and faults that strike whole group commits: unavailable,
//! ambiguous (landed or lost), slow, and a crash while commits are in
//! flight (each lands whole or vanishes). Reads can fail too, which the
//! node retries with backoff. Also the server's clock (offset, jumps and
//! steps back at restarts), crashes and restarts.

use super::{plant_key_from_attempt, Actor, Ev, Server, World};
use crate::convert;
use crate::rng::SeededIds;
use orbit_core::engine::{Config, Engine, Request, Response, StoredExecution};
use orbit_core::history::Millis;
use orbit_core::node::{Fetched, GroupCommit, Io, LoadId, Node, NodeConfig, NodeInput};
use orbit_core::store::StorageError;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// How often the node ticks the engine besides its `WakeAt`s.
pub(super) const TICK_EVERY_MS: Millis = 500;

impl World {
    /// Boots a server on the node in focus: a fresh engine, with the
    /// fencing `epoch` of its leadership term in a cluster.
    pub(super) fn boot(&mut self, epoch: Option<u64>) {
        if let Some(old) = self.servers[self.focus].take() {
            self.node_stats.add(old.node.stats());
        }
        self.incarnation += 1;
        // One draw seeds both the ids and the hash tables: the schedule the
        // rest of the seed drives stays as it was.
        let seed = self.rng.next_u64();
        let ids = SeededIds::new(seed);
        let config = Config {
            session_timeout_ms: self.cfg.session_timeout_ms,
            max_active_executions: self.cfg.max_active_executions,
            idempotency_ttl_ms: self.cfg.idempotency_ttl_ms,
            epoch,
            node_id: self.shared_node_id(self.focus),
            idle_evict_ms: self.cfg.idle_evict_ms,
            max_in_memory: self.cfg.max_in_memory,
            finished_cache: self.cfg.finished_cache,
            hash_seed: seed,
        };
        let mut engine = Engine::new(config, Box::new(ids));
        for bug in &self.plant {
            engine.plant(*bug);
        }
        let node = Node::new(
            engine,
            NodeConfig {
                commits_in_flight: self.cfg.commits_in_flight,
                tick_ms: TICK_EVERY_MS,
                group_across_reads: self.reads_at_once(),
                shared: self
                    .shared_node_id(self.focus)
                    .map(|node_id| orbit_core::node::Member {
                        advertise: format!("http://{node_id}.sim"),
                        node_id,
                        node_timeout_ms: self.cfg.node_timeout_ms,
                    }),
                ..NodeConfig::default()
            },
        );
        let writer = match (&self.cluster, self.shared_node_id(self.focus)) {
            (_, Some(id)) => id,
            (Some(c), None) => c.nodes[self.focus].id.clone(),
            (None, None) => convert::NODE.to_owned(),
        };
        self.shared_booted(self.focus, self.incarnation);
        self.servers[self.focus] = Some(Server {
            node,
            writer,
            inc: self.incarnation,
            next_rid: 1,
            pending: BTreeMap::new(),
            silenced: BTreeSet::new(),
            wake_gen: 0,
        });
        self.builtin_boot(self.incarnation);
    }

    /// Deploys the workload's definitions through the node, committed
    /// without faults or latency.
    pub(super) fn deploy(&mut self) -> Result<(), String> {
        let mut ios = self.node_handle(NodeInput::Request {
            id: 0,
            request: Request::Deploy {
                definitions: self.definitions.clone(),
                idempotency: None,
            },
        });
        let mut deployed = false;
        while !ios.is_empty() {
            let mut later = Vec::new();
            for io in ios {
                match io {
                    Io::Commit(commit) => {
                        let result = self.apply_commit(&commit);
                        if let Err(e) = &result {
                            return Err(format!("deploy failed: {e}"));
                        }
                        later.extend(self.node_handle(NodeInput::Committed {
                            commit: commit.id,
                            result,
                        }));
                    }
                    Io::Reply {
                        request: 0,
                        response,
                    } => {
                        if response.status != 200 {
                            return Err(format!("deploy refused: {}", response.body));
                        }
                        deployed = true;
                    }
                    other => self.run_io(vec![other]),
                }
            }
            ios = later;
        }
        if deployed {
            Ok(())
        } else {
            Err("deploy was not answered".into())
        }
    }

    /// Steps the server's clock forward, or (sometimes) backwards at its
    /// next restart, as an NTP correction of a clock that ran fast.
    pub(super) fn clock_jump(&mut self) {
        if !self.faults_on || self.cfg.faults.clock_jump_ms_max == 0 {
            return;
        }
        let step = self.rng.between(100, self.cfg.faults.clock_jump_ms_max);
        if self.cluster.is_some() || self.shared.is_some() {
            // A cluster node's clock steps forward while it runs.
            self.focus = self.rng.between(0, self.servers.len() as u64 - 1) as usize;
            self.stats.fault("clock_jump");
            self.clock_offsets[self.focus] += step as i64;
            return self.cluster_clock_spread();
        }
        if self.rng.chance(self.cfg.faults.clock_back_probability) {
            self.stats.fault("clock_step_back");
            self.clock_back_pending += step;
        } else {
            self.stats.fault("clock_jump");
            self.clock_offsets[self.focus] += step as i64;
        }
    }

    /// The server's clock: reference time plus its offset.
    pub(super) fn server_now(&self) -> Millis {
        let drift =
            (self.now - super::EPOCH_MS) as i64 * self.clock_drift_ppm[self.focus] / 1_000_000;
        self.now
            .saturating_add_signed(self.clock_offsets[self.focus] + drift)
    }

    /// Feeds the running node (nothing when the server is down).
    pub(super) fn node_handle(&mut self, input: NodeInput) -> Vec<Io> {
        let now = self.server_now();
        match self.server_mut() {
            Some(s) => s.node.handle(now, input),
            None => Vec::new(),
        }
    }

    /// Feeds the node and performs what it asks.
    pub(super) fn feed(&mut self, input: NodeInput) {
        let ios = self.node_handle(input);
        self.run_io(ios);
    }

    pub(super) fn restart(&mut self) {
        if self.cluster.is_some() {
            return self.cluster_restart();
        }
        if self.shared.is_some() {
            return self.shared_restart();
        }
        if self.server().is_some() {
            return;
        }
        if self.faults_on && self.rng.chance(self.cfg.faults.clock_jump_probability) {
            self.clock_jump();
        }
        if self.clock_back_pending > 0 {
            self.clock_offsets[self.focus] -= self.clock_back_pending as i64;
            self.clock_back_total += self.clock_back_pending;
            self.clock_back_pending = 0;
        }
        self.boot(None);
        self.recover();
        self.schedule_crash();
    }

    /// Feeds the server in focus what a restarted driver reads: the
    /// definitions and the work in progress, as the store holds them now.
    pub(super) fn recover(&mut self) {
        let definitions = self
            .store
            .definitions()
            .iter()
            .filter_map(convert::definition_from_store)
            .collect();
        // Work in progress only, as the production driver loads it; the
        // engine fetches what it needs of finished executions and keys.
        // A shared-mode member reads only what it owns, once it has taken
        // it back (its node loop asks).
        let executions = if self.shared.is_some() {
            Vec::new()
        } else {
            self.store
                .all()
                .into_iter()
                .filter(|e| !orbit_core::store::is_terminal(&e.row.status))
                .map(convert::execution_from_store)
                .collect()
        };
        self.feed(NodeInput::Recover {
            definitions,
            executions,
            idempotency: Vec::new(),
        });
    }

    pub(super) fn schedule_crash(&mut self) {
        let mean = self.cfg.faults.server_crash_interval_ms_mean;
        if mean == 0 || !self.faults_on {
            return;
        }
        // Sometimes crash again right away: during recovery.
        let delay = if self.rng.chance(0.2) {
            self.rng.between(0, 300)
        } else {
            self.rng.between(mean / 4, mean * 2)
        };
        if self.now + delay < self.faults_end_at {
            let node = self.focus;
            self.at(delay, Ev::Crash { node });
        }
    }

    pub(super) fn crash(&mut self) {
        let Some(server) = self.servers[self.focus].take() else {
            return;
        };
        self.stats.fault("server_crash");
        self.node_stats.add(server.node.stats());
        // Group commits in flight: each landed whole or vanished.
        self.cluster_crashed(server.inc);
        let inflight: Vec<(Millis, u64)> = self
            .queue
            .iter()
            .filter(|(_, e)| matches!(e, Ev::CommitDone { inc, .. } if *inc == server.inc))
            .map(|(k, _)| *k)
            .collect();
        for k in inflight {
            if let Some(Ev::CommitDone { commit, .. }) = self.queue.remove(&k) {
                if self.rng.chance(0.5) {
                    self.stats.fault("commit_landed_then_crash");
                    if self
                        .apply_commit_of(server.inc, &server.writer, &commit)
                        .is_ok()
                    {
                        for b in &commit.batches {
                            self.check_batch(b);
                        }
                    }
                } else {
                    self.stats.fault("commit_lost_in_crash");
                }
            }
        }
        self.shared_crashed(server.inc);
        self.store.crash();
        self.builtin_crashed();
        drop(server);
        self.recheck_facts();
        let delay = self
            .rng
            .between(10, self.cfg.faults.server_restart_ms_max.max(10));
        let node = self.focus;
        self.at(delay, Ev::Restart { node });
    }

    pub(crate) fn deliver_to_server(&mut self, from: Actor, req: u64, request: Request) {
        if self.cluster.is_some() && !self.serving() {
            return self.not_leader(from, req);
        }
        let ack_early = self.bugs.ack_before_commit;
        let Some(s) = self.servers[self.focus].as_mut() else {
            return; // connection refused: the caller times out
        };
        let rid = s.next_rid;
        s.next_rid += 1;
        s.pending.insert(rid, (from, req));
        if ack_early && matches!(request, Request::Result { .. }) {
            s.silenced.insert(rid);
            let early = Response::ok(200, serde_json::json!({"accepted": true}));
            self.send_to_actor(from, req, early);
        }
        self.feed(NodeInput::Request { id: rid, request });
    }

    /// Requests that came in one message: fed to the node together.
    pub(crate) fn deliver_together(&mut self, from: Actor, requests: Vec<(u64, Request)>) {
        if self.cluster.is_some() && !self.serving() {
            for (req, _) in requests {
                self.not_leader(from, req);
            }
            return;
        }
        let ack_early = self.bugs.ack_before_commit;
        let Some(s) = self.servers[self.focus].as_mut() else {
            return; // connection refused: the caller times out
        };
        let mut fed = Vec::with_capacity(requests.len());
        let mut early = Vec::new();
        for (req, request) in requests {
            let rid = s.next_rid;
            s.next_rid += 1;
            s.pending.insert(rid, (from, req));
            if ack_early && matches!(request, Request::Result { .. }) {
                s.silenced.insert(rid);
                early.push(req);
            }
            fed.push((rid, request));
        }
        for req in early {
            let ack = Response::ok(200, serde_json::json!({"accepted": true}));
            self.send_to_actor(from, req, ack);
        }
        self.feed(NodeInput::Requests { requests: fed });
    }

    /// Performs the node's I/O.
    pub(crate) fn run_io(&mut self, ios: Vec<Io>) {
        let Some(inc) = self.server().map(|s| s.inc) else {
            return;
        };
        for io in ios {
            match io {
                Io::Commit(commit) => {
                    let in_flight = self.queue.values().filter_map(|ev| match ev {
                        Ev::CommitDone { inc: i, commit }
                        | Ev::CommitDurable { inc: i, commit }
                            if *i == inc =>
                        {
                            Some(&**commit)
                        }
                        _ => None,
                    });
                    if let Err(v) = crate::check::writer::one_batch_in_flight(&commit, in_flight) {
                        self.fail(v);
                    }
                    if let Some(stale) = self.refused_creates(&commit) {
                        let commit = commit.id;
                        self.instant
                            .push_back(Ev::CreatesRefused { inc, commit, stale });
                        continue;
                    }
                    let latency = if self.faults_on
                        && self.rng.chance(self.cfg.faults.store_slow_probability)
                    {
                        self.stats.fault("store_slow");
                        self.rng
                            .between(50, self.cfg.faults.store_slow_ms_max.max(50))
                    } else {
                        self.rng.between(0, 5)
                    };
                    self.mix(commit.id);
                    self.at(latency, Ev::CommitDone { inc, commit });
                }
                Io::Load { id, executions } => {
                    if self.bugs.drop_reloads {
                        continue;
                    }
                    let at_once = self.reload_of_refused(id, &executions);
                    let done = Ev::ReloadDone {
                        inc,
                        load: id,
                        ids: executions,
                        keys: None,
                    };
                    if at_once {
                        self.instant.push_back(done);
                    } else {
                        let latency = self.rng.between(1, 20);
                        self.at(latency, done);
                    }
                }
                Io::Fetch {
                    id,
                    executions,
                    idempotency,
                } => {
                    let done = Ev::ReloadDone {
                        inc,
                        load: id,
                        ids: executions,
                        keys: Some(idempotency),
                    };
                    if self.reads_at_once() {
                        // Lockstep: now, before anything else happens.
                        self.instant.push_back(done);
                    } else {
                        let latency = self.rng.between(1, 20);
                        self.at(latency, done);
                    }
                }
                Io::Reply {
                    request,
                    mut response,
                } => {
                    let Some(s) = self.server_mut() else {
                        continue;
                    };
                    let Some((actor, req)) = s.pending.remove(&request) else {
                        continue;
                    };
                    if s.silenced.remove(&request) {
                        continue;
                    }
                    if self.bugs.key_from_attempt {
                        plant_key_from_attempt(&mut response);
                    }
                    self.mix(u64::from(response.status));
                    self.send_to_actor(actor, req, response);
                }
                Io::WakeAt(t) => {
                    if self.defer_wake(inc, t) {
                        continue;
                    }
                    self.wake_at(inc, t);
                }
                Io::Committed { .. } => {}
                // Shared cluster mode (the three-node world's).
                shared @ (Io::Beat { .. }
                | Io::TakeOver { .. }
                | Io::Reclaim { .. }
                | Io::ReadInbox { .. }
                | Io::Send { .. }
                | Io::Claim { .. }
                | Io::TouchSessions { .. }
                | Io::ReadSessions { .. }
                | Io::ReadDefinitions
                | Io::FindSignal { .. }) => {
                    if self.shared.is_some() {
                        self.shared_io(inc, shared);
                    }
                }
            }
        }
    }

    /// Arranges the `Tick` a node asked for at `t` (its clock).
    pub(super) fn wake_at(&mut self, inc: u64, t: Millis) {
        let delay = t.saturating_sub(self.server_now());
        let Some(s) = self.server_mut().filter(|s| s.inc == inc) else {
            return;
        };
        s.wake_gen += 1;
        let wake = s.wake_gen;
        self.at(delay, Ev::Tick { inc, wake });
    }

    /// The time a node asked for came (only its latest `WakeAt` counts).
    pub(super) fn tick(&mut self, inc: u64, wake: u64) {
        if self
            .server()
            .is_some_and(|s| s.inc == inc && s.wake_gen == wake)
        {
            self.feed(NodeInput::Time);
        }
    }

    /// The execution a simulated stale-seq `Conflict` names, when one
    /// strikes this group commit: only a group of several batches (the
    /// split is what it exercises), and only an execution the store already
    /// holds (a create cannot be stale).
    fn injected_conflict(&mut self, commit: &GroupCommit, p: f64) -> Option<String> {
        if !self.faults_on || commit.batches.len() < 2 || p <= 0.0 || !self.rng.chance(p) {
            return None;
        }
        let held: Vec<&str> = commit
            .batches
            .iter()
            .flat_map(|b| &b.executions)
            .filter(|a| a.expected_last_seq > 0)
            .map(|a| a.execution_id.as_str())
            .collect();
        if held.is_empty() {
            return None;
        }
        let i = self.rng.between(0, held.len() as u64 - 1) as usize;
        Some(held[i].to_owned())
    }

    /// A group commit reaches the store: a fault strikes all of it, or the
    /// store applies it whole (or refuses it with a `Conflict`).
    /// A commit reported written is durable: the node gets its outcome.
    /// One the server crashed before is durable too, as a SQLite commit
    /// is once written: the process died, the operating system did not.
    pub(super) fn commit_durable(&mut self, inc: u64, commit: Arc<GroupCommit>) {
        if self.server().is_none_or(|s| s.inc != inc) {
            return;
        }
        self.feed(NodeInput::Committed {
            commit: commit.id,
            result: Ok(()),
        });
        for b in &commit.batches {
            self.check_live(b);
        }
    }

    pub(super) fn commit_done(&mut self, inc: u64, commit: Arc<GroupCommit>) {
        if self.server().is_none_or(|s| s.inc != inc) {
            // A deposed leader's write still reaches the database, where
            // the lease fences it.
            if let Some((node, _)) = self.cluster_term(inc) {
                let writer = self.cluster_writer(node);
                if self.apply_commit_of(inc, &writer, &commit).is_ok() {
                    for b in &commit.batches {
                        self.check_batch(b);
                    }
                }
            }
            return;
        }
        let many = commit.batches.len() > 1;
        let f = &self.cfg.faults;
        let (fail_p, ambiguous_p, conflict_p) = (
            f.store_commit_fail_probability,
            f.store_commit_ambiguous_probability,
            f.store_commit_conflict_probability,
        );
        let mut applied = false;
        let result = if self.db_cut(inc) {
            // Cut off from the database: the commit never gets through.
            Err(StorageError::Unavailable(
                "simulated: node cut off from the database".into(),
            ))
        } else if self.faults_on && self.rng.chance(fail_p) {
            self.stats.fault("commit_unavailable");
            Err(StorageError::Unavailable(
                "simulated: database unreachable".into(),
            ))
        } else if self.faults_on && self.rng.chance(ambiguous_p) {
            if self.rng.chance(0.5) {
                self.stats.fault("commit_ambiguous_applied");
                applied = self.apply_commit(&commit).is_ok();
            } else {
                self.stats.fault("commit_ambiguous_lost");
            }
            Err(StorageError::Ambiguous(
                "simulated: connection lost during COMMIT".into(),
            ))
        } else if let Some(stale) = self.injected_conflict(&commit, conflict_p) {
            self.stats.fault("commit_conflict_injected");
            Err(StorageError::Conflict {
                fenced: Vec::new(),
                stale: vec![stale],
            })
        } else {
            let r = self.apply_commit(&commit);
            applied = r.is_ok();
            r
        };
        if many {
            match &result {
                Err(StorageError::Ambiguous(_)) => self.stats.fault("group_commit_ambiguous"),
                Err(StorageError::Unavailable(_)) => self.stats.fault("group_commit_unavailable"),
                Err(StorageError::Conflict { .. }) => self.stats.fault("group_commit_conflict"),
                Ok(()) => {}
            }
        }
        let result = if self.bugs.ignore_commit_failures
            && matches!(result, Err(StorageError::Unavailable(_)))
        {
            Ok(())
        } else {
            result
        };
        if self.trace {
            let ids: Vec<Vec<&str>> = commit
                .batches
                .iter()
                .map(|b| {
                    b.executions
                        .iter()
                        .map(|a| a.execution_id.as_str())
                        .collect()
                })
                .collect();
            println!("          commit {} {ids:?} -> {result:?}", commit.id);
            for a in commit.batches.iter().flat_map(|b| &b.executions) {
                for e in a.events.iter() {
                    let line = orbit_core::history::logs::format_event(
                        &a.execution_id,
                        super::EPOCH_MS,
                        e,
                    );
                    println!("            {} {line}", a.execution_id);
                }
            }
        }
        if applied {
            for b in &commit.batches {
                self.check_batch(b);
            }
        }
        let fenced = self.cluster.is_some()
            && matches!(&result, Err(e) if *e == orbit_core::cluster::fence::refusal());
        if applied && result.is_ok() && self.cfg.sync_after_write {
            // Written now, durable a moment later: the node may start its
            // next commit in between.
            self.stats.fault("commit_written_before_durable");
            self.feed(NodeInput::Written { commit: commit.id });
            let sync = self.rng.between(0, 3);
            self.at(sync, Ev::CommitDurable { inc, commit });
            return;
        }
        self.feed(NodeInput::Committed {
            commit: commit.id,
            result,
        });
        if applied {
            for b in &commit.batches {
                self.check_live(b);
            }
        }
        if fenced {
            self.step_down("a write was fenced");
        }
    }

    /// Applies a group commit of the server in focus to the store.
    fn apply_commit(&mut self, commit: &GroupCommit) -> Result<(), StorageError> {
        let (inc, writer) = match self.server() {
            Some(s) => (s.inc, s.writer.clone()),
            None => return Err(StorageError::Unavailable("no server".into())),
        };
        self.apply_commit_of(inc, &writer, commit)
    }

    /// Applies a group commit of incarnation `inc` (written as `writer`) to
    /// the store: as a leader's write in a cluster (fenced by the lease,
    /// and refused while its node is cut off from the database).
    pub(super) fn apply_commit_of(
        &mut self,
        inc: u64,
        writer: &str,
        commit: &GroupCommit,
    ) -> Result<(), StorageError> {
        let mut tx = convert::group_transaction(&commit.batches, writer);
        if self.shared.is_some() {
            self.store.set_clock(self.now);
            // A member's writes pass only while it is live (as the tokio
            // driver sends them).
            tx.writer = Some(orbit_core::store::Writer {
                node_id: writer.to_owned(),
                timeout_ms: self.cfg.node_timeout_ms,
            });
        }
        match self.cluster_term(inc) {
            Some((node, epoch)) => self.apply_as_leader(node, epoch, &tx),
            None => {
                let entries = self.shared_before_apply(&tx);
                let result = self.store.apply(&tx);
                if result.is_ok() {
                    self.shared_applied(writer, &tx, entries);
                } else if self.shared.is_some()
                    && matches!(&result, Err(StorageError::Conflict { fenced, .. }) if !fenced.is_empty())
                {
                    self.stats.fault("write_fenced");
                }
                result
            }
        }
    }

    /// A load reaches the store: it answers what it holds, or (under
    /// storage faults) the read fails and the node tries again later.
    pub(super) fn reload_done(
        &mut self,
        inc: u64,
        load: LoadId,
        ids: Vec<String>,
        keys: Option<Vec<String>>,
    ) {
        if self.server().is_none_or(|s| s.inc != inc) {
            return;
        }
        // A node cut off from the database reads nothing either.
        // In lockstep, the engine's own reads never fail (only the run
        // with eviction makes some of them).
        let at_once = (keys.is_some() && self.reads_at_once()) || self.answers_refused_load(load);
        let failed = self.db_cut(inc)
            || (self.faults_on
                && !at_once
                && self
                    .rng
                    .chance(self.cfg.faults.store_commit_fail_probability));
        let unavailable = || StorageError::Unavailable("simulated: database unreachable".into());
        if failed {
            self.stats.fault("load_unavailable");
        }
        match keys {
            None => {
                let result = if failed {
                    Err(unavailable())
                } else {
                    Ok(self.fetch_now(ids, Vec::new()).executions)
                };
                self.feed(NodeInput::Loaded { load, result });
            }
            Some(keys) => {
                let result = if failed {
                    Err(unavailable())
                } else {
                    Ok(self.fetch_now(ids, keys))
                };
                self.feed(NodeInput::Fetched { load, result });
            }
        }
    }

    /// What the store holds of these executions and idempotency keys now.
    pub(super) fn fetch_now(&self, ids: Vec<String>, keys: Vec<String>) -> Fetched {
        let now = self.server_now();
        let executions = ids
            .into_iter()
            .map(|id| StoredExecution {
                events: self.store.events(&id),
                execution_id: id,
            })
            .collect();
        let idempotency = keys
            .into_iter()
            .map(|key| {
                let record = self
                    .store
                    .live_record(&key, now)
                    .map(|r| convert::idempotency_from_store(&r));
                (key, record)
            })
            .collect();
        Fetched {
            executions,
            idempotency,
        }
    }
}
