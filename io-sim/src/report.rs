//! What a run ends with: its outcome class (with the exit code that
//! separates crash, liveness and correctness failures), the trace hash, the
//! faults injected by kind, and the one-line repro command.

use crate::check::Violation;
use crate::config::SimConfig;
use orbit_core::node::NodeStats;
use std::collections::BTreeMap;
use std::fmt;

/// Exit code of a run that passed.
pub const EXIT_OK: i32 = 0;
/// Exit code of a correctness failure (invariants 1–7 and 9).
pub const EXIT_CORRECTNESS: i32 = 1;
/// Exit code of a liveness failure (invariant 8).
pub const EXIT_LIVENESS: i32 = 2;
/// Exit code of a crash (a panic in the engine or the simulator).
pub const EXIT_CRASH: i32 = 3;
/// Exit code of bad command-line usage.
pub const EXIT_USAGE: i32 = 64;

/// How a run ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// Every invariant held and everything finished.
    Pass,
    /// A safety invariant was violated.
    Correctness(Violation),
    /// Something did not finish within the bound after faults stopped.
    Liveness(Violation),
    /// The engine or the simulator panicked.
    Crash(String),
}

impl Outcome {
    /// `pass`, `correctness`, `liveness` or `crash`.
    pub fn class(&self) -> &'static str {
        match self {
            Outcome::Pass => "pass",
            Outcome::Correctness(_) => "correctness",
            Outcome::Liveness(_) => "liveness",
            Outcome::Crash(_) => "crash",
        }
    }

    /// The process exit code for this outcome.
    pub fn exit_code(&self) -> i32 {
        match self {
            Outcome::Pass => EXIT_OK,
            Outcome::Correctness(_) => EXIT_CORRECTNESS,
            Outcome::Liveness(_) => EXIT_LIVENESS,
            Outcome::Crash(_) => EXIT_CRASH,
        }
    }

    /// The violation, for correctness and liveness failures.
    pub fn violation(&self) -> Option<&Violation> {
        match self {
            Outcome::Correctness(v) | Outcome::Liveness(v) => Some(v),
            _ => None,
        }
    }
}

/// Counters of one run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stats {
    /// Faults injected, by kind.
    pub faults: BTreeMap<&'static str, u64>,
    /// World events processed.
    pub steps: u64,
    /// Executions in the store at the end.
    pub executions: u64,
    /// Transactions committed.
    pub commits: u64,
    /// Payment-model calls and distinct effects.
    pub payment_calls: u64,
    /// Distinct effects applied.
    pub payment_effects: u64,
    /// What the node loops did (group commits and their results), summed
    /// over the server's incarnations.
    pub node: NodeStats,
}

impl Stats {
    /// Counts one fault of `kind`.
    pub fn fault(&mut self, kind: &'static str) {
        *self.faults.entry(kind).or_default() += 1;
    }
}

/// The result of one run.
#[derive(Debug, Clone)]
pub struct Report {
    /// The configuration sampled from the seed.
    pub config: SimConfig,
    /// How it ended.
    pub outcome: Outcome,
    /// Hash of the run's trace (equal for equal seeds).
    pub trace_hash: u64,
    /// Virtual time at the end, ms since the run started.
    pub virtual_ms: u64,
    /// Counters.
    pub stats: Stats,
}

/// The command that reproduces a run.
pub fn repro(seed: u64, scenario: &str) -> String {
    format!("cargo run -p sim-tests --bin orbit-sim -- --seed {seed:#x} --scenario {scenario}")
}

impl Report {
    /// The command that reproduces this run.
    pub fn repro(&self) -> String {
        let base = repro(self.config.seed, self.config.scenario.name());
        match &self.config.fault_kinds {
            Some(k) => format!("{base} --faults {}", k.join(",")),
            None => base,
        }
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "outcome = {}", self.outcome.class())?;
        writeln!(f, "trace_hash = {:016x}", self.trace_hash)?;
        writeln!(f, "virtual_ms = {}", self.virtual_ms)?;
        writeln!(
            f,
            "steps = {}, executions = {}, commits = {}, payment calls/effects = {}/{}",
            self.stats.steps,
            self.stats.executions,
            self.stats.commits,
            self.stats.payment_calls,
            self.stats.payment_effects
        )?;
        let faults: Vec<String> = self
            .stats
            .faults
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        writeln!(f, "faults = {}", faults.join(" "))?;
        writeln!(f, "node = {}", self.stats.node)?;
        match &self.outcome {
            Outcome::Pass => {}
            Outcome::Correctness(v) | Outcome::Liveness(v) => write!(f, "{v}")?,
            Outcome::Crash(m) => writeln!(f, "CRASH: {m}")?,
        }
        if self.outcome != Outcome::Pass {
            writeln!(f, "repro: {}", self.repro())?;
        }
        Ok(())
    }
}
