//! Deliberately broken variants, switched on only by tests, that prove the
//! checkers catch real bugs ("teeth"). Each plants the bug in the layer
//! around the unchanged engine: the store, the driver, or a worker.

use crate::store::StoreBug;

/// Which planted bugs are active (all off by default).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Bugs {
    /// A crash drops the last committed transaction.
    pub store: StoreBug,
    /// The driver answers a task result `accepted: true` as soon as it
    /// arrives, before the engine committed it.
    pub ack_before_commit: bool,
    /// The driver rewrites a retried task's idempotency key with its
    /// attempt number (`key#2`).
    pub key_from_attempt: bool,
    /// The driver tells the engine a failed commit succeeded.
    pub ignore_commit_failures: bool,
    /// The driver never answers the engine's `Reload` requests (the
    /// executions concerned wait forever).
    pub drop_reloads: bool,
    /// The simulator panics after this many world steps (to test that a
    /// panic is reported as a crash, with its own exit code).
    pub panic_after_steps: Option<u64>,
}

impl Bugs {
    /// True when any bug is planted.
    pub fn any(&self) -> bool {
        *self != Bugs::default()
    }
}
