//! Invariant checkers: separate observers, one module per invariant of the
//! simulation contract. History checks ([`history`]) look at one
//! execution's durable events; the others compare what the world observed
//! (acknowledgements, deliveries, payment effects) with the store.

pub mod determinism;
pub mod durability;
pub mod invisible;
pub mod keys;
pub mod limits;
pub mod liveness;
pub mod saga;
pub mod success;
pub mod tokens;
pub mod wellformed;
pub mod writer;

use orbit_core::history::{logs, Event};
use orbit_core::ir;
use std::fmt;

/// The invariants, numbered as in the simulation contract.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Invariant {
    /// 1. Exactly one recorded success per unit.
    OneSuccess,
    /// 2. No lost commits: whatever a client or worker was told is durable.
    NoLostCommits,
    /// 3. One writer: `seq` contiguous, no fenced append lands.
    OneWriter,
    /// 4. Well-formed histories: each unit follows the legal state machine.
    WellFormed,
    /// 5. Determinism: replaying a history reproduces the projection.
    Determinism,
    /// 6. Stable keys: one key and input per unit; effects applied once.
    StableKeys,
    /// 7. Saga correctness.
    Saga,
    /// 8. Liveness: everything finishes once faults stop.
    Liveness,
    /// 9. Eviction is invisible: evicting idle executions changes no
    ///    history and no reply (`eviction-invisible` only).
    EvictionInvisible,
    /// 10. Shared mode: every inbox entry is applied once, by the
    ///     execution's owner at its current epoch, and deleted with what it
    ///     caused; a task is handed out only once its claim is durable;
    ///     nothing is left in the inbox or the queue once the cluster is
    ///     quiet (`cluster-shared` only).
    InboxOnce,
}

impl Invariant {
    /// Its number in the contract.
    pub fn number(self) -> u8 {
        match self {
            Invariant::OneSuccess => 1,
            Invariant::NoLostCommits => 2,
            Invariant::OneWriter => 3,
            Invariant::WellFormed => 4,
            Invariant::Determinism => 5,
            Invariant::StableKeys => 6,
            Invariant::Saga => 7,
            Invariant::Liveness => 8,
            Invariant::EvictionInvisible => 9,
            Invariant::InboxOnce => 10,
        }
    }

    /// Its short name.
    pub fn name(self) -> &'static str {
        match self {
            Invariant::OneSuccess => "exactly one recorded success per unit",
            Invariant::NoLostCommits => "no lost commits",
            Invariant::OneWriter => "one writer",
            Invariant::WellFormed => "well-formed histories",
            Invariant::Determinism => "determinism",
            Invariant::StableKeys => "stable keys",
            Invariant::Saga => "saga correctness",
            Invariant::Liveness => "liveness",
            Invariant::EvictionInvisible => "eviction is invisible",
            Invariant::InboxOnce => "inbox entries and claims applied once",
        }
    }
}

impl fmt::Display for Invariant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invariant {} ({})", self.number(), self.name())
    }
}

/// A broken invariant, with what is needed to understand it.
#[derive(Debug, Clone, PartialEq)]
pub struct Violation {
    /// Which invariant.
    pub invariant: Invariant,
    /// The execution concerned, if one.
    pub execution: Option<String>,
    /// The unit concerned, if one.
    pub unit: Option<String>,
    /// What was wrong.
    pub message: String,
    /// The execution's last events, in `orbit logs` format.
    pub last_events: Vec<String>,
}

impl Violation {
    /// A violation of `invariant` with `message`.
    pub fn new(invariant: Invariant, message: impl Into<String>) -> Violation {
        Violation {
            invariant,
            execution: None,
            unit: None,
            message: message.into(),
            last_events: Vec::new(),
        }
    }

    /// Names the execution and attaches its last events.
    pub fn in_execution(mut self, id: &str, events: &[Event]) -> Violation {
        self.execution = Some(id.to_owned());
        self.last_events = last_events(id, events, 12);
        self
    }

    /// Names the unit.
    pub fn at_unit(mut self, unit: &str) -> Violation {
        self.unit = Some(unit.to_owned());
        self
    }
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "VIOLATION of {}", self.invariant)?;
        if let Some(e) = &self.execution {
            writeln!(f, "  execution: {e}")?;
        }
        if let Some(u) = &self.unit {
            writeln!(f, "  unit: {u}")?;
        }
        writeln!(f, "  {}", self.message)?;
        if !self.last_events.is_empty() {
            writeln!(f, "  last events:")?;
            for l in &self.last_events {
                writeln!(f, "    {l}")?;
            }
        }
        Ok(())
    }
}

/// The last `n` events of a history, formatted as `orbit logs` prints them.
pub fn last_events(id: &str, events: &[Event], n: usize) -> Vec<String> {
    let origin = events.first().map_or(0, |e| e.at);
    let from = events.len().saturating_sub(n);
    events[from..]
        .iter()
        .map(|e| logs::format_event(id, origin, e))
        .collect()
}

/// Runs every history checker (invariants 1, 3, 4, 7) on one execution's
/// durable history. `workflow` is its pinned definition when known.
pub fn history(
    id: &str,
    events: &[Event],
    workflow: Option<&ir::Workflow>,
) -> Result<(), Violation> {
    history_under_steps(id, events, workflow, 0)
}

/// [`history`] for a server whose clock stepped backwards by `back_ms` in
/// all: event times may go back that far (legal across a restart on a
/// corrected clock), no further.
pub fn history_under_steps(
    id: &str,
    events: &[Event],
    workflow: Option<&ir::Workflow>,
    back_ms: orbit_core::history::Millis,
) -> Result<(), Violation> {
    writer::check(id, events, back_ms)?;
    success::check(id, events)?;
    wellformed::check(id, events)?;
    if let Some(wf) = workflow {
        limits::check(id, events, wf)?;
        saga::check(id, events, wf)?;
    }
    Ok(())
}
