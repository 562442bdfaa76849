//! Invariant 8: liveness. Once faults stop, every execution reaches a
//! terminal state within the bound, and every client operation gets its
//! answer.

use super::{Invariant, Violation};
use orbit_core::history::{Event, Projection};

/// Fails when the execution is not terminal.
pub fn check(id: &str, events: &[Event], bound_ms: u64) -> Result<(), Violation> {
    let p = Projection::fold(id, events);
    if p.status.is_terminal() {
        return Ok(());
    }
    Err(Violation::new(
        Invariant::Liveness,
        format!(
            "still {} {bound_ms} ms after faults stopped",
            p.status.as_str()
        ),
    )
    .in_execution(id, events))
}

/// Fails when clients still wait for answers.
pub fn clients(open: &[String], bound_ms: u64) -> Result<(), Violation> {
    if open.is_empty() {
        return Ok(());
    }
    Err(Violation::new(
        Invariant::Liveness,
        format!(
            "{} client operations unanswered {bound_ms} ms after faults stopped: {}",
            open.len(),
            open.join("; ")
        ),
    ))
}
