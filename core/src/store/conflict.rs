//! The one conflict rule every store applies before writing a transaction's
//! appends and consumed inbox entries. Each is judged against the
//! execution's row as stored *before* the transaction:
//!
//! 1. **One append per execution.** A transaction holds at most one append
//!    for an execution (the engine never has two batches of one execution
//!    in flight, so a group commit never merges two). A second append for
//!    the same execution is refused: the execution is named `stale` and
//!    nothing is written.
//! 2. **Fencing.** An append carrying a [`Fence`] is `fenced`
//!    when the row's owner epoch is newer than the writer's, or equal to it
//!    while the row names another node. A higher epoch than the row's is a
//!    takeover and passes. Appends without a fence (one node) skip this.
//! 3. **Sequence.** The append's `after_seq` must equal the row's last
//!    `seq` (0 for an execution not stored yet) and its events must number
//!    `after_seq + 1, after_seq + 2, …`; otherwise the execution is `stale`
//!    (a stale expected `seq`, a re-created id, or a gap).
//! 4. **Inbox.** A consumed inbox entry ([`Consumed`]) is judged by its
//!    fence like an append (rule 2: `fenced` once its execution moved to
//!    another owner, so an entry is never applied after a takeover), and it
//!    must still be stored, addressed to the execution named with it, and
//!    be consumed once in the transaction; otherwise its execution is
//!    `stale` (the entry was applied already).
//!
//! A fenced execution is not also named stale. Any conflict refuses the
//! whole transaction; it names every execution concerned, in the order of
//! the appends and then of the consumed entries, each once, so the node
//! loop can re-commit the batches it did not name.

use super::{Append, Consumed, Fence, StorageError};
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

impl Owner<'_> {
    /// Rule 2: whether a writer claiming `fence` is fenced out by this row.
    pub fn fences(&self, fence: &Fence) -> bool {
        let other = !self.node_id.is_empty() && self.node_id != fence.node_id;
        self.epoch > fence.epoch || (other && self.epoch >= fence.epoch)
    }
}

/// What the rule looks at in an append: a store that hands the writes to
/// another thread keeps these instead of the appends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim {
    /// The execution appended to.
    pub execution_id: String,
    /// The append's `after_seq`.
    pub after_seq: u64,
    /// Its fence, if any.
    pub fence: Option<Fence>,
    /// Whether its events number `after_seq + 1, after_seq + 2, …`.
    pub contiguous: bool,
}

impl From<&Append> for Claim {
    fn from(a: &Append) -> Self {
        Claim {
            execution_id: a.execution_id.clone(),
            after_seq: a.after_seq,
            fence: a.fence.clone(),
            contiguous: a
                .events
                .iter()
                .enumerate()
                .all(|(i, e)| e.seq == a.after_seq + 1 + i as u64),
        }
    }
}

/// Applies the rule to `appends` alone; `stored` answers what the store
/// holds for an execution (`None` when it has no row).
pub fn check_appends<'a>(
    appends: &[Append],
    stored: impl Fn(&str) -> Option<Owner<'a>>,
) -> Result<(), StorageError> {
    check(appends, &[], stored, |_| None)
}

/// Applies the whole rule: `stored` answers what the store holds for an
/// execution, `entry` the execution an inbox entry is addressed to (`None`
/// when no such entry is stored).
pub fn check<'a, 'b>(
    appends: &[Append],
    consumed: &[Consumed],
    stored: impl Fn(&str) -> Option<Owner<'a>>,
    entry: impl Fn(i64) -> Option<&'b str>,
) -> Result<(), StorageError> {
    let claims: Vec<Claim> = appends.iter().map(Claim::from).collect();
    check_claims(&claims, consumed, stored, entry)
}

/// [`check`], over what the rule looks at in each append.
pub fn check_claims<'a, 'b>(
    claims: &[Claim],
    consumed: &[Consumed],
    stored: impl Fn(&str) -> Option<Owner<'a>>,
    entry: impl Fn(i64) -> Option<&'b str>,
) -> Result<(), StorageError> {
    let mut seen: BTreeSet<&str> = BTreeSet::new();
    let mut fenced: Vec<String> = Vec::new();
    let mut stale: Vec<String> = Vec::new();
    let name = |list: &mut Vec<String>, id: &str| {
        if !list.iter().any(|x| x == id) {
            list.push(id.to_owned());
        }
    };
    for a in claims {
        let id = a.execution_id.as_str();
        if !seen.insert(id) {
            name(&mut stale, id);
            continue;
        }
        let row = stored(id).unwrap_or_default();
        if a.fence.as_ref().is_some_and(|f| row.fences(f)) {
            name(&mut fenced, id);
            continue;
        }
        if row.last_seq != a.after_seq || !a.contiguous {
            name(&mut stale, id);
        }
    }
    let mut entries: BTreeSet<i64> = BTreeSet::new();
    for c in consumed {
        let id = c.execution_id.as_str();
        if stored(id).unwrap_or_default().fences(&c.fence) {
            name(&mut fenced, id);
            continue;
        }
        let addressed = entry(c.id).is_some_and(|e| e == id);
        if !entries.insert(c.id) || !addressed {
            name(&mut stale, id);
        }
    }
    stale.retain(|id| !fenced.contains(id));
    if fenced.is_empty() && stale.is_empty() {
        Ok(())
    } else {
        Err(StorageError::Conflict { fenced, stale })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fence(node: &str, epoch: u64) -> Fence {
        Fence {
            node_id: node.to_owned(),
            epoch,
        }
    }

    fn consumed(id: i64, execution: &str, node: &str, epoch: u64) -> Consumed {
        Consumed {
            id,
            execution_id: execution.to_owned(),
            fence: fence(node, epoch),
        }
    }

    fn owner(node_id: &str, epoch: u64) -> Owner<'_> {
        Owner {
            last_seq: 3,
            node_id,
            epoch,
        }
    }

    #[test]
    fn an_entry_of_a_moved_execution_is_fenced() {
        let moved = [consumed(7, "x", "n1", 1)];
        let r = check(&[], &moved, |_| Some(owner("n2", 2)), |_| Some("x"));
        assert_eq!(
            r,
            Err(StorageError::Conflict {
                fenced: vec!["x".into()],
                stale: vec![]
            })
        );
        // The owner consumes it.
        let mine = [consumed(7, "x", "n2", 2)];
        assert_eq!(
            check(&[], &mine, |_| Some(owner("n2", 2)), |_| Some("x")),
            Ok(())
        );
    }

    #[test]
    fn an_entry_gone_twice_consumed_or_misaddressed_is_stale() {
        let stale = |consumed: &[Consumed], entry: Option<&'static str>| {
            check(&[], consumed, |_| Some(owner("n1", 1)), |_| entry)
        };
        let want = Err(StorageError::Conflict {
            fenced: vec![],
            stale: vec!["x".into()],
        });
        assert_eq!(stale(&[consumed(7, "x", "n1", 1)], None), want);
        assert_eq!(stale(&[consumed(7, "x", "n1", 1)], Some("y")), want);
        let twice = [consumed(7, "x", "n1", 1), consumed(7, "x", "n1", 1)];
        assert_eq!(stale(&twice, Some("x")), want);
    }

    #[test]
    fn a_fenced_execution_is_not_also_stale() {
        // A stale append for `x` (the row is at seq 3), then an entry of
        // `x` consumed under an old epoch.
        let appends = [crate::store::contract::append("x", 1, 2)];
        let entries = [consumed(1, "x", "n1", 1)];
        let r = check(&appends, &entries, |_| Some(owner("n2", 2)), |_| Some("x"));
        assert_eq!(
            r,
            Err(StorageError::Conflict {
                fenced: vec!["x".into()],
                stale: vec![]
            })
        );
    }
}
