//! Invariant 3: one writer. On a single node this means the durable history
//! is one contiguous sequence from 1 (a stale or fenced append never
//! landed) whose times never go back further than the server's clock was
//! stepped back (a restart on an NTP-corrected clock). Inside a node, it
//! means one batch in flight per execution at a time: two would be
//! written on the same history, and in one group commit the refusal of
//! one refuses the other.

use super::{Invariant, Violation};
use orbit_core::history::{Event, Millis};
use orbit_core::node::GroupCommit;
use std::collections::BTreeMap;

/// Checks that `commit`, about to be written, appends to no execution that
/// another of its batches, or a batch of the node's commits still in
/// flight, appends to.
pub fn one_batch_in_flight<'a>(
    commit: &'a GroupCommit,
    in_flight: impl Iterator<Item = &'a GroupCommit>,
) -> Result<(), Violation> {
    let mut writing: BTreeMap<&str, (u64, u64)> = BTreeMap::new();
    for c in in_flight.chain(std::iter::once(commit)) {
        for b in &c.batches {
            for a in &b.executions {
                let here = (c.id, b.id);
                if let Some(first) = writing.insert(&a.execution_id, here) {
                    return Err(Violation::new(
                        Invariant::OneWriter,
                        format!(
                            "{} has two batches in flight: {} (group commit {}) and {} (group commit {})",
                            a.execution_id, first.1, first.0, here.1, here.0
                        ),
                    ));
                }
            }
        }
    }
    Ok(())
}

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
