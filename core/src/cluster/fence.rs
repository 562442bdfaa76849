//! The leader fence: every commit of a leader reads the lease row inside
//! its own transaction and is refused, with nothing applied, unless the row
//! still names this node and this term's epoch. PostgreSQL does it with
//! `SELECT … FOR SHARE` on the row; the simulated store calls
//! [`check_leader`] directly.

use crate::store::StorageError;

/// Judges a leader write of `node_id`'s term `epoch` against the lease row
/// `(holder, holder_epoch)` read in the same transaction. A refusal is a
/// `Conflict` naming no execution: the driver reads it as "this writer is
/// fenced" (`STORAGE_ERROR`, message `fenced: …`) and the node steps down.
pub fn check_leader(
    holder: &str,
    holder_epoch: u64,
    node_id: &str,
    epoch: u64,
) -> Result<(), StorageError> {
    if holder == node_id && holder_epoch == epoch {
        Ok(())
    } else {
        Err(refusal())
    }
}

/// The refusal of a fenced leader write.
pub fn refusal() -> StorageError {
    StorageError::Conflict {
        fenced: Vec::new(),
        stale: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_holder_at_its_epoch_writes() {
        assert_eq!(check_leader("a", 2, "a", 2), Ok(()));
        assert_eq!(check_leader("b", 3, "a", 2), Err(refusal()));
        assert_eq!(check_leader("a", 3, "a", 2), Err(refusal()));
    }
}
