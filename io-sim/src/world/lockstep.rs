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
//!   randomness, and the batches they lead to join the same group commits;
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
use std::collections::BTreeMap;

/// Salt of the stream forced evictions draw from.
const EVICT_STREAM: u64 = 0xe71c_7000_0000_0009;

/// What a world in lockstep mode keeps.
pub(crate) struct Lockstep {
    /// The stream of forced evictions (`None`: none are forced).
    evict: Option<SimRng>,
    /// Every reply each actor received, in order.
    replies: BTreeMap<String, Vec<Received>>,
}

impl Lockstep {
    /// Lockstep mode for the `eviction-invisible` scenario, else `None`.
    pub(crate) fn for_config(cfg: &SimConfig) -> Option<Lockstep> {
        (cfg.scenario == Scenario::EvictionInvisible).then(|| Lockstep {
            evict: (cfg.evict_now_probability > 0.0).then(|| SimRng::new(cfg.seed ^ EVICT_STREAM)),
            replies: BTreeMap::new(),
        })
    }
}

impl World {
    /// True in lockstep mode: the engine's reads are answered at once.
    pub(super) fn reads_at_once(&self) -> bool {
        self.lockstep.is_some()
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
        let n = s.node.engine_mut().evict_idle_now();
        if n > 0 {
            *self.stats.faults.entry("evicted_forced").or_default() += n as u64;
        }
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
