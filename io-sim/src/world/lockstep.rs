//! Lockstep runs (`eviction-invisible`): one seed run twice, once with
//! eviction of idle executions off and once with it forced, compared by
//! invariant 9 ([`check::invisible`]).
//!
//! A faithful comparison needs both runs to meet the same world: the same
//! draws of the one random stream, at the same instants. Eviction changes
//! only when the engine reads the store, so in lockstep mode
//!
//! - a read the engine asks for (`Io::Fetch`: an evicted or forgotten
//!   execution, an Idempotency-Key's record) is answered at the same
//!   virtual instant, before any other event, with no draw and no fault:
//!   the extra reads of the run with eviction cost neither time nor
//!   randomness, and the batches they lead to join the same group commits.
//!   A read that handling another read's answer asks for is answered
//!   next, before the reads already waiting: a request that needs two
//!   reads where the other run needed one finishes where it would have;
//! - a group commit made only of creates of ids the store already holds
//!   (a start for an id the engine forgot is written without reading
//!   first, and the store's refusal is how the engine learns the id
//!   exists) is refused in the same way: at once, with no draw. It changes
//!   nothing in the store; it is a read in the form of a write, and so is
//!   the reload of those ids that follows;
//! - the node's `WakeAt` is arranged once the instant's reads are
//!   answered, so that its `Tick` comes after the commits those reads led
//!   to, as it comes after the same commits in the run that did not read;
//! - evictions forced between steps draw from a stream of their own,
//!   derived from the seed, so the world's stream is the same in both runs;
//! - every reply an actor receives is recorded, with its instant, and every
//!   history is taken from the store at the end.
//!
//! Commits, reloads after `Ambiguous` or `Conflict` (both runs make the
//! same ones), crashes, the network, workers, clients and clocks keep their
//! drawn latencies and faults.

use super::{Actor, World, EPOCH_MS};
use crate::check::invisible::{Observed, Received};
use crate::check::{self, Violation};
use crate::config::{Scenario, SimConfig};
use crate::report::{Outcome, Report};
use crate::rng::SimRng;
use crate::RunOptions;
use orbit_core::engine::Response;
use orbit_core::history::Millis;
use orbit_core::node::{CommitId, GroupCommit, LoadId, NodeInput};
use orbit_core::store::StorageError;
use std::collections::{BTreeMap, BTreeSet};

/// Salt of the stream forced evictions draw from.
const EVICT_STREAM: u64 = 0xe71c_7000_0000_0009;

/// What a world in lockstep mode keeps.
pub(crate) struct Lockstep {
    /// The stream of forced evictions (`None`: none are forced).
    evict: Option<SimRng>,
    /// Every reply each actor received, in order.
    replies: BTreeMap<String, Vec<Received>>,
    /// Ids whose create was refused, until their reload is asked for.
    refused: BTreeSet<String>,
    /// Those reloads, until answered.
    refused_loads: BTreeSet<LoadId>,
    /// The latest `WakeAt` (incarnation, time) of this instant, arranged
    /// once its reads are answered.
    wake: Option<(u64, Millis)>,
}

impl Lockstep {
    /// Lockstep mode for the `eviction-invisible` scenario, else `None`.
    pub(crate) fn for_config(cfg: &SimConfig) -> Option<Lockstep> {
        (cfg.scenario == Scenario::EvictionInvisible).then(|| Lockstep {
            evict: (cfg.evict_now_probability > 0.0).then(|| SimRng::new(cfg.seed ^ EVICT_STREAM)),
            replies: BTreeMap::new(),
            refused: BTreeSet::new(),
            refused_loads: BTreeSet::new(),
            wake: None,
        })
    }
}

impl World {
    /// True in lockstep mode: the engine's reads are answered at once.
    pub(super) fn reads_at_once(&self) -> bool {
        self.lockstep.is_some()
    }

    /// In lockstep mode, the ids of a group commit that only creates
    /// executions the store already holds (every one of them refused).
    pub(super) fn refused_creates(&self, commit: &GroupCommit) -> Option<Vec<String>> {
        if !self.reads_at_once() {
            return None;
        }
        let appends: Vec<_> = commit.batches.iter().flat_map(|b| &b.executions).collect();
        let refused = !appends.is_empty()
            && appends.iter().all(|a| {
                a.expected_last_seq == 0 && !self.store.events(&a.execution_id).is_empty()
            });
        refused.then(|| appends.iter().map(|a| a.execution_id.clone()).collect())
    }

    /// The store's answer to a group commit [`World::refused_creates`]
    /// named.
    pub(super) fn creates_refused(&mut self, inc: u64, commit: CommitId, stale: Vec<String>) {
        if self.server().is_none_or(|s| s.inc != inc) {
            return;
        }
        if self.trace {
            println!("          commit {commit} {stale:?} -> refused: the ids exist");
        }
        if let Some(l) = self.lockstep.as_mut() {
            l.refused.extend(stale.iter().cloned());
        }
        self.feed(NodeInput::Committed {
            commit,
            result: Err(StorageError::Conflict {
                fenced: Vec::new(),
                stale,
            }),
        });
    }

    /// True for reload `load` of `ids` when it follows
    /// [`World::creates_refused`]: it is answered at once too.
    pub(super) fn reload_of_refused(&mut self, load: LoadId, ids: &[String]) -> bool {
        let Some(l) = self.lockstep.as_mut() else {
            return false;
        };
        if ids.is_empty() || !ids.iter().all(|id| l.refused.contains(id)) {
            return false;
        }
        for id in ids {
            l.refused.remove(id);
        }
        l.refused_loads.insert(load);
        true
    }

    /// True, once, for a reload [`World::reload_of_refused`] took.
    pub(super) fn answers_refused_load(&mut self, load: LoadId) -> bool {
        self.lockstep
            .as_mut()
            .is_some_and(|l| l.refused_loads.remove(&load))
    }

    /// In lockstep mode, keeps a node's `WakeAt` for [`World::flush_wake`].
    pub(super) fn defer_wake(&mut self, inc: u64, t: Millis) -> bool {
        let Some(l) = self.lockstep.as_mut() else {
            return false;
        };
        l.wake = Some((inc, t));
        true
    }

    /// Arranges the `WakeAt` kept this instant (the instant's events are
    /// all handled).
    pub(crate) fn flush_wake(&mut self) {
        if let Some((inc, t)) = self.lockstep.as_mut().and_then(|l| l.wake.take()) {
            self.wake_at(inc, t);
        }
    }

    /// Before a step, sometimes: the server evicts every execution that
    /// could leave memory now.
    pub(super) fn force_eviction(&mut self) {
        let p = self.cfg.evict_now_probability;
        let Some(rng) = self.lockstep.as_mut().and_then(|l| l.evict.as_mut()) else {
            return;
        };
        if !rng.chance(p) {
            return;
        }
        let Some(s) = self.server_mut() else {
            return;
        };
        let gone = s.node.engine_mut().evict_idle_now();
        if gone.is_empty() {
            return;
        }
        if self.trace {
            println!("{:>9} evicted (forced): {gone:?}", self.now - EPOCH_MS);
        }
        *self.stats.faults.entry("evicted_forced").or_default() += gone.len() as u64;
    }

    /// Records a reply `to` received (lockstep mode only).
    pub(super) fn record_reply(&mut self, to: Actor, req: u64, response: &Response) {
        let at = self.now - EPOCH_MS;
        let Some(l) = self.lockstep.as_mut() else {
            return;
        };
        l.replies
            .entry(format!("{to:?}"))
            .or_default()
            .push(Received {
                at,
                req,
                status: response.status,
                body: response.body.to_string(),
            });
    }

    /// What the run showed: every stored history and every reply.
    pub(super) fn observed(&mut self) -> Observed {
        let Some(l) = self.lockstep.take() else {
            return Observed::default();
        };
        let mut histories = BTreeMap::new();
        self.store.for_each(|row, events| {
            histories.insert(row.id.clone(), events.to_vec());
        });
        Observed {
            histories,
            replies: l.replies,
        }
    }
}

/// The configuration of the run without eviction: the same seed and world,
/// every eviction switched off (nothing idle leaves memory, no cap, every
/// finished execution kept).
pub fn without_eviction(cfg: &SimConfig) -> SimConfig {
    SimConfig {
        idle_evict_ms: None,
        max_in_memory: None,
        finished_cache: orbit_core::engine::FINISHED_CACHE,
        evict_now_probability: 0.0,
        ..cfg.clone()
    }
}

/// Runs `cfg` without eviction, then with it, and compares the two.
pub(crate) fn run_pair(cfg: SimConfig, options: RunOptions) -> Result<Report, String> {
    if options.trace {
        println!("--- the run without eviction");
    }
    let (off, seen_off) = World::new(without_eviction(&cfg), options.clone())?.run_observed();
    if off.outcome != Outcome::Pass {
        return Ok(relabel(off, &cfg, "the run without eviction"));
    }
    if options.trace {
        println!("--- the run with eviction");
    }
    let (on, seen_on) = World::new(cfg.clone(), options)?.run_observed();
    if on.outcome != Outcome::Pass {
        return Ok(relabel(on, &cfg, "the run with eviction"));
    }
    let outcome = match check::invisible::check(&seen_off, &seen_on, EPOCH_MS) {
        Ok(()) => Outcome::Pass,
        Err(v) => Outcome::Correctness(v),
    };
    Ok(Report {
        config: cfg,
        outcome,
        trace_hash: off.trace_hash ^ on.trace_hash.rotate_left(17),
        virtual_ms: on.virtual_ms,
        stats: on.stats,
    })
}

/// A failure of one of the two runs, named as such, reported under the
/// scenario's configuration (so that its repro line runs both again).
fn relabel(mut report: Report, cfg: &SimConfig, run: &str) -> Report {
    let name = |v: &mut Violation| v.message = format!("in {run}: {}", v.message);
    report.outcome = match report.outcome {
        Outcome::Correctness(mut v) => {
            name(&mut v);
            Outcome::Correctness(v)
        }
        Outcome::Liveness(mut v) => {
            name(&mut v);
            Outcome::Liveness(v)
        }
        other => other,
    };
    report.config = cfg.clone();
    report
}
