//! On-demand loading: a command naming an execution the engine does not
//! hold (finished and forgotten), or carrying an `Idempotency-Key` whose
//! record lives only in the store, is parked while the driver reads them
//! ([`Effect::Load`] → [`Input::Loaded`]); it then runs exactly as if they
//! had been in memory all along.
//!
//! A load's answer can be older than memory: an `Idempotency-Key` committed,
//! or an execution forgotten, after the load was asked for. Both are
//! remembered (with the count of commits and forgettings at that time)
//! while loads are outstanding, and win over the stale answer.

use super::batch::{IdempotencyRecord, StoredExecution};
use super::effect::Effect;
use super::effect::Response;
use super::input::{IdempotencyScope, Request, RequestId};
use super::Engine;
use std::collections::{BTreeMap, BTreeSet};

/// Identifies one [`Effect::Load`] in its [`super::Input::Loaded`].
pub type LoadId = u64;

/// A load in progress.
struct Outstanding {
    /// The change counter when it was asked for.
    issued: u64,
    /// The request waiting for it (none for a load of recovery's own).
    request: Option<Parked>,
    /// It reads Idempotency-Key records.
    reads_keys: bool,
}

/// What waits for a load.
pub(super) enum Parked {
    /// One request.
    One(RequestId, Request),
    /// Requests handled together (see `together`).
    Together(Vec<(RequestId, Request)>),
}

/// What a request re-run after its load may take as the store's word.
#[derive(Default)]
pub(super) struct Known {
    /// Executions the store does not have.
    pub absent: BTreeSet<String>,
    /// Idempotency records by key (`None`: no live record).
    pub keys: BTreeMap<String, Option<IdempotencyRecord>>,
    /// Committed histories, for a history read.
    pub histories: BTreeMap<String, Vec<crate::history::Event>>,
    /// Shared cluster mode: running executions another node owns, with
    /// their workflow and version (not held here: a start of their id is
    /// answered from this).
    pub foreign: BTreeMap<String, (String, String)>,
}

/// The engine's loads: outstanding ones, and what changed meanwhile.
#[derive(Default)]
pub(super) struct Loads {
    next: LoadId,
    outstanding: BTreeMap<LoadId, Outstanding>,
    /// Bumped by every commit of an idempotency record and every forgotten
    /// execution while loads are outstanding.
    changes: u64,
    /// Records committed while loads were outstanding, with the counter.
    recent_keys: BTreeMap<String, (u64, IdempotencyRecord)>,
    /// Executions forgotten while loads were outstanding, with the counter.
    forgotten: BTreeMap<String, u64>,
    /// Set only while the request of a finished load runs again.
    pub known: Known,
}

impl Loads {
    /// Notes a committed record (it is in the store now; a load asked for
    /// earlier may not have seen it).
    pub fn committed_key(&mut self, record: &IdempotencyRecord) {
        if self.outstanding.is_empty() {
            return;
        }
        self.changes += 1;
        self.recent_keys
            .insert(record.key.clone(), (self.changes, record.clone()));
    }

    /// Notes an execution leaving memory.
    pub fn forgot(&mut self, exec_id: &str) {
        if self.outstanding.is_empty() {
            return;
        }
        self.changes += 1;
        self.forgotten.insert(exec_id.to_string(), self.changes);
    }

    /// Drops what no outstanding load can be older than.
    fn prune(&mut self) {
        match self.outstanding.values().map(|o| o.issued).min() {
            None => {
                self.recent_keys.clear();
                self.forgotten.clear();
            }
            Some(oldest) => {
                self.recent_keys.retain(|_, (at, _)| *at > oldest);
                self.forgotten.retain(|_, at| *at > oldest);
            }
        }
    }
}

impl Engine {
    /// Parks `request` and asks the driver for what it needs when the
    /// engine does not hold it: the execution `exec_id`, and the record of
    /// `scope`'s key (unless a batch with that key is in flight: the
    /// request then queues behind it and comes back here). Both are asked
    /// for in one load, so the request runs again knowing both. True when
    /// parked.
    pub(super) fn load_first(
        &mut self,
        id: RequestId,
        request: &Request,
        exec_id: Option<&str>,
        scope: Option<&IdempotencyScope>,
    ) -> bool {
        let exec = exec_id.filter(|x| !self.executions.contains_key(x));
        let key = scope.map(|s| s.key.as_str());
        let need_exec = exec.is_some_and(|x| {
            !self.loads.known.absent.contains(x) && !self.loads.known.foreign.contains_key(x)
        });
        let need_key = key.is_some_and(|k| {
            !self.keys.inflight.contains_key(k) && !self.loads.known.keys.contains_key(k)
        });
        if !need_exec && !need_key {
            return false;
        }
        // Whatever is missing is read again together: knowledge of one
        // half only would send the request back for the other, forever.
        let executions = exec.map(str::to_string).into_iter().collect();
        let idempotency = key.map(str::to_string).into_iter().collect();
        self.ask_load(
            executions,
            idempotency,
            Some(Parked::One(id, request.clone())),
        );
        true
    }

    /// Emits one load.
    pub(super) fn ask_load(
        &mut self,
        executions: Vec<String>,
        idempotency: Vec<String>,
        request: Option<Parked>,
    ) -> LoadId {
        self.loads.next += 1;
        let load = self.loads.next;
        self.loads.outstanding.insert(
            load,
            Outstanding {
                issued: self.loads.changes,
                request,
                reads_keys: !idempotency.is_empty(),
            },
        );
        self.out.push(Effect::Load {
            load,
            executions,
            idempotency,
        });
        load
    }

    /// A load's answer: install what the store holds, then run its request
    /// again with what the store said.
    pub(super) fn loaded(
        &mut self,
        load: LoadId,
        executions: Vec<StoredExecution>,
        idempotency: Vec<(String, Option<IdempotencyRecord>)>,
    ) {
        let Some(done) = self.loads.outstanding.remove(&load) else {
            return;
        };
        let mut known = Known::default();
        let wants_history = matches!(done.request, Some(Parked::One(_, Request::History { .. })));
        for stored in executions {
            let id = stored.execution_id.clone();
            // An inbox entry that asked for this read may ask again, whatever
            // the answer is used for below (seed 0x22a52c777: read while
            // not held, taken back meanwhile, finished and forgotten, its
            // entry then never read it again and stayed in the inbox).
            self.read_for_inbox(&id);
            if wants_history {
                if stored.events.is_empty() {
                    known.absent.insert(id.clone());
                } else {
                    known.histories.insert(id.clone(), stored.events.clone());
                }
            }
            if self.executions.contains_key(&id) {
                // Created or installed meanwhile: memory is newer.
                continue;
            }
            // Forgotten (finished, or evicted for idleness) after this load
            // was asked for: its answer may be older than what memory last
            // held. A waiting request loads it again.
            let forgotten = self
                .loads
                .forgotten
                .get(&id)
                .is_some_and(|at| *at > done.issued);
            if forgotten {
                continue;
            }
            if stored.events.is_empty() {
                self.returned(&id);
                known.absent.insert(id);
                continue;
            }
            if self.is_shared() {
                let p = crate::history::Projection::fold(&id, &stored.events);
                if !p.status.is_terminal() {
                    // Running, and not this node's: never held here.
                    known
                        .foreign
                        .insert(id, (p.workflow.to_string(), p.version.to_string()));
                    continue;
                }
            }
            // Evicted with a wake-up that no tick has read it back for
            // and no child's end has asked for: nothing came due that a
            // tick would not decide, and `install` keeps that wake-up.
            // In memory it would wait for the tick, even once the clock
            // has passed it (a clock stepped forward): so it does now.
            let waits_for_tick = self
                .idle
                .evicted
                .get(&id)
                .copied()
                .flatten()
                .is_some_and(|t| self.idle.dormant.contains(&(t, id.clone())));
            if self.install(stored) {
                self.retire(&id);
                // Back from eviction: whatever came due meanwhile (its
                // wake-up's tick, a child's end) is decided now, as if it
                // had never left.
                if !waits_for_tick {
                    self.dirty.insert(id);
                }
            } else {
                // Its definition is not registered here: as good as absent
                // (asking again would get the same answer).
                known.absent.insert(id);
            }
        }
        let now = self.now;
        for (key, record) in idempotency {
            let newer = self
                .loads
                .recent_keys
                .get(&key)
                .filter(|(at, _)| *at > done.issued)
                .map(|(_, r)| r.clone());
            let record = newer.or(record).filter(|r| r.expires_at > now);
            known.keys.insert(key, record);
        }
        self.loads.prune();
        self.tick_read_done(load);
        self.barrier.remove(&load);
        if let Some(parked) = done.request {
            self.loads.known = known;
            match parked {
                Parked::One(id, request) => self.request(id, request),
                Parked::Together(requests) => self.together(requests),
            }
            self.loads.known = Known::default();
        }
    }

    /// A load could not be read: the request waiting for it fails `503`
    /// now, as a write would during an outage, instead of hanging until
    /// the store is back — `IDEMPOTENCY_UNAVAILABLE` when the read carried
    /// the request's Idempotency-Key record (the request is refused rather
    /// than run unguarded), `STORAGE_ERROR` otherwise. The load stays
    /// outstanding; when the driver's retry lands it only warms memory.
    pub(super) fn load_failed(&mut self, load: LoadId, message: &str) {
        self.tick_read_done(load);
        self.barrier.remove(&load);
        let Some(o) = self.loads.outstanding.get_mut(&load) else {
            return;
        };
        let code = if o.reads_keys {
            "IDEMPOTENCY_UNAVAILABLE"
        } else {
            "STORAGE_ERROR"
        };
        let ids = match o.request.take() {
            Some(Parked::One(id, _)) => vec![id],
            Some(Parked::Together(requests)) => requests.into_iter().map(|(id, _)| id).collect(),
            None => Vec::new(),
        };
        for id in ids {
            let response = Response::error(503, code, message);
            self.reply(id, response);
        }
    }

    /// `load` was a tick's read of evicted executions: the tick's due
    /// work is decided now (with those read back, or, when the read
    /// failed, without them: they are decided when the driver's retry of
    /// the read brings them back).
    fn tick_read_done(&mut self, load: LoadId) {
        if self.tick_read.as_ref().is_some_and(|(l, _)| *l == load) {
            if let Some((_, returned)) = self.tick_read.take() {
                self.decide_due(&returned);
            }
        }
    }

    /// Recovery: children of live parents that the driver did not pass
    /// (finished ones) are loaded, so the parents can record their outcome.
    pub(super) fn load_missing_children(&mut self) {
        let mut missing = BTreeSet::new();
        for e in self.executions.values() {
            if e.proj.status.is_terminal() {
                continue;
            }
            for u in e.proj.units.values() {
                if let crate::history::UnitState::Child { child_id } = &u.state {
                    if !self.executions.contains_key(child_id) {
                        missing.insert(child_id.clone());
                    }
                }
            }
        }
        if !missing.is_empty() {
            self.ask_load(missing.into_iter().collect(), Vec::new(), None);
        }
    }
}
