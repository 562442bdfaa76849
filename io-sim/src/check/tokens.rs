//! Invariant 4, followed by token: the history and what the workers saw
//! must agree on each delivery. A failed attempt was reported as failed by
//! the delivery in flight (or timed out); a failure answered `accepted:
//! true` ended its own delivery, not a newer one. Attempt numbers cannot
//! tell this apart: a redelivery carries the same attempt as the delivery
//! it replaces.

use super::durability::Fact;
use super::{Invariant, Violation};
use orbit_core::history::{Event, EventKind};
use std::collections::BTreeMap;

/// What a worker sent as the result of one delivery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Report {
    /// An output (valid or not).
    Output,
    /// An error with this code.
    Error(String),
}

/// Every result sent, by delivery token (a token may report more than once).
pub type Reports = BTreeMap<String, Vec<Report>>;

/// Error codes the runtime itself gives an attempt.
const RUNTIME_CODES: [&str; 1] = ["ATTEMPT_TIMEOUT"];

/// How one delivery ended in the history.
#[derive(Debug, Clone, PartialEq)]
enum Fate {
    /// Still in flight at the end of the history.
    Open,
    /// Its attempt failed (`StepAttemptFailed`) with this code.
    Failed(String),
    /// Its attempt became uncertain.
    Uncertain,
    /// Its unit succeeded.
    Succeeded,
    /// Something else ended it first.
    Other(&'static str),
}

/// The fate of each dispatch, by token, with its unit.
fn fates(events: &[Event]) -> BTreeMap<&str, (&str, Fate)> {
    let mut current: BTreeMap<&str, &str> = BTreeMap::new();
    let mut out: BTreeMap<&str, (&str, Fate)> = BTreeMap::new();
    for e in events {
        let (unit, fate) = match &e.kind {
            EventKind::StepDispatched { step, .. } => (step, Fate::Other("StepDispatched")),
            EventKind::StepAttemptFailed { step, error, .. } => {
                (step, Fate::Failed(error.code.clone()))
            }
            EventKind::StepAttemptUncertain { step, .. } => (step, Fate::Uncertain),
            EventKind::StepSucceeded { step, .. } => (step, Fate::Succeeded),
            EventKind::StepFailed { step, .. } => (step, Fate::Other("StepFailed")),
            _ => continue,
        };
        if let Some(token) = current.remove(unit.as_str()) {
            if let Some(entry) = out.get_mut(token) {
                entry.1 = fate;
            }
        }
        if let EventKind::StepDispatched { step, token, .. } = &e.kind {
            current.insert(step, token);
            out.insert(token, (step, Fate::Open));
        }
    }
    out
}

/// Checks one execution's durable history against the results its
/// deliveries reported (`reports`) and the facts workers were told.
pub fn check(
    id: &str,
    events: &[Event],
    facts: &[&Fact],
    reports: &Reports,
) -> Result<(), Violation> {
    let fates = fates(events);
    for (token, (unit, fate)) in &fates {
        let Fate::Failed(code) = fate else {
            continue;
        };
        if RUNTIME_CODES.contains(&code.as_str()) {
            continue;
        }
        let sent = reports.get(*token).map(Vec::as_slice).unwrap_or_default();
        let explained = sent.iter().any(|r| match r {
            Report::Error(c) => c == code,
            Report::Output => code == "OUTPUT_CONTRACT_VIOLATION",
        });
        if !explained {
            return Err(Violation::new(
                Invariant::WellFormed,
                format!(
                    "the attempt of delivery {token} is recorded as failed with {code}, but that delivery reported {sent:?}"
                ),
            )
            .in_execution(id, events)
            .at_unit(unit));
        }
    }
    for fact in facts {
        let Fact::AttemptFailed { unit, token, .. } = fact else {
            continue;
        };
        let fate = fates.get(token.as_str()).map(|(_, f)| f);
        if !matches!(fate, Some(Fate::Failed(_))) {
            return Err(Violation::new(
                Invariant::WellFormed,
                format!(
                    "a failure from delivery {token} was answered `accepted: true`, but that delivery ended {fate:?} in the history"
                ),
            )
            .in_execution(id, events)
            .at_unit(unit));
        }
    }
    Ok(())
}
