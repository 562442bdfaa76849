//! Invariant 1: every unit has at most one `StepSucceeded`, and none is
//! recorded after its unit was resolved (failed).

use super::{Invariant, Violation};
use orbit_core::history::{Event, EventKind};
use std::collections::BTreeMap;

/// Checks one execution's history.
pub fn check(id: &str, events: &[Event]) -> Result<(), Violation> {
    // unit -> "succeeded" or "failed" with the seq that resolved it.
    let mut resolved: BTreeMap<&str, (&str, u64)> = BTreeMap::new();
    for e in events {
        match &e.kind {
            EventKind::StepSucceeded { step, .. } => {
                if let Some((how, seq)) = resolved.get(step.as_str()) {
                    return Err(Violation::new(
                        Invariant::OneSuccess,
                        format!(
                            "StepSucceeded #{} for a unit already {how} at #{seq}",
                            e.seq
                        ),
                    )
                    .in_execution(
                        id,
                        &events[..events
                            .iter()
                            .position(|x| x.seq == e.seq)
                            .map_or(events.len(), |p| p + 1)],
                    )
                    .at_unit(step));
                }
                resolved.insert(step, ("succeeded", e.seq));
            }
            EventKind::StepFailed { step, .. } => {
                resolved.entry(step).or_insert(("failed", e.seq));
            }
            _ => {}
        }
    }
    Ok(())
}
