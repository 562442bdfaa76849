//! Invariant 5: determinism. Folding a durable history from scratch gives
//! the projection the store holds (status, output, error, times, last seq)
//! and the one the live engine holds in memory. (The other half — the same
//! seed gives the same trace hash — is a test of the runner.)

use super::{Invariant, Violation};
use orbit_core::history::{Event, Projection};
use orbit_core::store::ExecutionRow;

/// Compares the fold of `events` with the stored row and, when the server
/// is up, with the engine's projection.
pub fn check(
    row: &ExecutionRow,
    events: &[Event],
    live: Option<&Projection>,
) -> Result<(), Violation> {
    let fold = Projection::fold(&row.id, events);
    let error = fold
        .error
        .as_ref()
        .and_then(|e| serde_json::to_value(e).ok());
    let mismatch = if fold.status.as_str() != row.status {
        Some(format!(
            "status: fold {} vs stored {}",
            fold.status.as_str(),
            row.status
        ))
    } else if fold.output != row.output {
        Some(format!(
            "output: fold {:?} vs stored {:?}",
            fold.output, row.output
        ))
    } else if error != row.error {
        Some(format!("error: fold {error:?} vs stored {:?}", row.error))
    } else if fold.last_seq != row.last_seq || fold.updated_at != row.updated_at {
        Some(format!(
            "last_seq/updated_at: fold {}/{} vs stored {}/{}",
            fold.last_seq, fold.updated_at, row.last_seq, row.updated_at
        ))
    } else if fold.created_at != row.created_at {
        Some(format!(
            "created_at: fold {} vs stored {}",
            fold.created_at, row.created_at
        ))
    } else {
        None
    };
    if let Some(m) = mismatch {
        return Err(Violation::new(
            Invariant::Determinism,
            format!("replayed history differs from the stored projection: {m}"),
        )
        .in_execution(&row.id, events));
    }
    if let Some(p) = live {
        if p.last_seq == fold.last_seq && *p != fold {
            return Err(Violation::new(
                Invariant::Determinism,
                "the engine's in-memory projection differs from the fold of the durable history",
            )
            .in_execution(&row.id, events));
        }
    }
    Ok(())
}
