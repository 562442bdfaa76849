//! The one conflict rule every store applies before writing a transaction's
//! appends. Each append is judged against the execution's row as stored
//! *before* the transaction:
//!
//! 1. **One append per execution.** A transaction holds at most one append
//!    for an execution (the engine never has two batches of one execution
//!    in flight, so a group commit never merges two). A second append for
//!    the same execution is refused: the execution is named `stale` and
//!    nothing is written.
//! 2. **Fencing.** An append carrying a [`Fence`](super::Fence) is `fenced`
//!    when the row's owner epoch is newer than the writer's, or equal to it
//!    while the row names another node. A higher epoch than the row's is a
//!    takeover and passes. Appends without a fence (one node) skip this.
//! 3. **Sequence.** The append's `after_seq` must equal the row's last
//!    `seq` (0 for an execution not stored yet) and its events must number
//!    `after_seq + 1, after_seq + 2, …`; otherwise the execution is `stale`
//!    (a stale expected `seq`, a re-created id, or a gap).
//!
//! A fenced execution is not also named stale. Any conflict refuses the
//! whole transaction; it names every execution concerned, in append order,
//! so the node loop can re-commit the batches it did not name.

use super::{Append, StorageError};
use std::collections::BTreeSet;

/// What a store holds for one execution, as the rule needs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Owner<'a> {
    /// The last committed `seq` (0 when nothing is stored).
    pub last_seq: u64,
    /// The owning node written with the last fenced append (empty if none).
    pub node_id: &'a str,
    /// Its epoch (0 if none).
    pub epoch: u64,
}

/// Applies the rule to `appends`; `stored` answers what the store holds for
/// an execution (`None` when it has no row).
pub fn check_appends<'a>(
    appends: &[Append],
    stored: impl Fn(&str) -> Option<Owner<'a>>,
) -> Result<(), StorageError> {
    let mut seen: BTreeSet<&str> = BTreeSet::new();
    let mut fenced: Vec<String> = Vec::new();
    let mut stale: Vec<String> = Vec::new();
    for a in appends {
        let id = a.execution_id.as_str();
        if !seen.insert(id) {
            if !fenced.iter().chain(&stale).any(|x| x == id) {
                stale.push(id.to_owned());
            }
            continue;
        }
        let row = stored(id).unwrap_or_default();
        if let Some(f) = &a.fence {
            let other = !row.node_id.is_empty() && row.node_id != f.node_id;
            if row.epoch > f.epoch || (other && row.epoch >= f.epoch) {
                fenced.push(id.to_owned());
                continue;
            }
        }
        let contiguous = a
            .events
            .iter()
            .enumerate()
            .all(|(i, e)| e.seq == a.after_seq + 1 + i as u64);
        if row.last_seq != a.after_seq || !contiguous {
            stale.push(id.to_owned());
        }
    }
    if fenced.is_empty() && stale.is_empty() {
        Ok(())
    } else {
        Err(StorageError::Conflict { fenced, stale })
    }
}
