//! Invariant 3: one writer. On a single node this means the durable history
//! is one contiguous sequence from 1 (a stale or fenced append never
//! landed) whose times never go back further than the server's clock was
//! stepped back (a restart on an NTP-corrected clock).

use super::{Invariant, Violation};
use orbit_core::history::{Event, Millis};

/// Checks one execution's history; times may go back by `back_ms` at most.
pub fn check(id: &str, events: &[Event], back_ms: Millis) -> Result<(), Violation> {
    let mut at = 0;
    for (i, e) in events.iter().enumerate() {
        if e.seq != i as u64 + 1 {
            return Err(Violation::new(
                Invariant::OneWriter,
                format!(
                    "event at position {} has seq {} (not contiguous)",
                    i + 1,
                    e.seq
                ),
            )
            .in_execution(id, &events[..=i]));
        }
        if e.at.saturating_add(back_ms) < at {
            return Err(Violation::new(
                Invariant::OneWriter,
                format!(
                    "event #{} is recorded at {} before its predecessor ({at})",
                    e.seq, e.at
                ),
            )
            .in_execution(id, &events[..=i]));
        }
        at = at.max(e.at);
    }
    Ok(())
}
