//! Planted bugs ("teeth"): deliberate mistakes the simulator must catch.
//!
//! They exist only when `orbit-core` is built with the `planted-bugs`
//! feature, which only the simulation crates turn on; the `orbit` binary
//! never does. Without the feature [`Engine::planted`] is a constant
//! `false` and the switch to turn a bug on does not exist.

use super::Engine;

/// A deliberate mistake in the engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Bug {
    /// A lost worker's attempt is recorded as failed (`WORKER_LOST`) and
    /// retried, instead of uncertain and redelivered.
    UncertainAsFailed,
    /// A failure is accepted from any token of a unit in flight, not only
    /// from its current one.
    StaleFailureAccepted,
    /// A success for an already resolved unit is recorded again.
    DoubleSuccess,
    /// A poll is answered with its tasks before their `StepDispatched`
    /// commits.
    DispatchBeforeCommit,
    /// An `Ambiguous` commit releases its Idempotency-Keys before the
    /// reload has decided what was stored.
    KeyReleasedOnAmbiguous,
    /// A task handed out in a batch is attached to its session when the
    /// batch commits, even if that session ended meanwhile, and the check
    /// for tasks never confirmed skips tokens of dead sessions (the two
    /// halves of the original bug).
    HandOutToDeadSession,
    /// An execution evicted for idleness forgets its next wake-up: it comes
    /// back only when a command names it.
    EvictionLosesTimer,
    /// A group commit refused by a `Conflict` answers its other batches as
    /// written, instead of writing them again (a bug of the node loop's
    /// split, planted through the engine it drives).
    SplitForgetsInnocent,
    /// An execution evicted for idleness gives up its admission slot
    /// (`--max-active-executions`): a waiting execution starts in its
    /// place, earlier than it would have had the evicted one stayed.
    EvictionFreesAdmissionSlot,
    /// Shared mode: an inbox entry is applied but its deletion is left out
    /// of the batch that records what it caused (it stays in the inbox and
    /// is applied again).
    InboxEntryKept,
}

impl Bug {
    /// Every planted bug.
    pub const ALL: [Bug; 10] = [
        Bug::UncertainAsFailed,
        Bug::StaleFailureAccepted,
        Bug::DoubleSuccess,
        Bug::DispatchBeforeCommit,
        Bug::KeyReleasedOnAmbiguous,
        Bug::HandOutToDeadSession,
        Bug::EvictionLosesTimer,
        Bug::SplitForgetsInnocent,
        Bug::EvictionFreesAdmissionSlot,
        Bug::InboxEntryKept,
    ];

    /// Its name on the command line (`orbit-sim --plant NAME`).
    pub fn name(self) -> &'static str {
        match self {
            Bug::UncertainAsFailed => "uncertain-as-failed",
            Bug::StaleFailureAccepted => "stale-failure-accepted",
            Bug::DoubleSuccess => "double-success",
            Bug::DispatchBeforeCommit => "dispatch-before-commit",
            Bug::KeyReleasedOnAmbiguous => "key-released-on-ambiguous",
            Bug::HandOutToDeadSession => "hand-out-to-dead-session",
            Bug::EvictionLosesTimer => "eviction-loses-timer",
            Bug::SplitForgetsInnocent => "split-forgets-innocent",
            Bug::EvictionFreesAdmissionSlot => "eviction-frees-admission-slot",
            Bug::InboxEntryKept => "inbox-entry-kept",
        }
    }

    /// The bug named `name`.
    pub fn parse(name: &str) -> Option<Bug> {
        Bug::ALL.into_iter().find(|b| b.name() == name)
    }
}

/// The set of planted bugs an engine runs with (empty unless the
/// `planted-bugs` feature is on and a test planted some).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Planted {
    #[cfg(feature = "planted-bugs")]
    bugs: std::collections::BTreeSet<Bug>,
}

impl Engine {
    /// True when `bug` is planted in this engine.
    #[inline]
    pub(crate) fn planted(&self, bug: Bug) -> bool {
        #[cfg(feature = "planted-bugs")]
        {
            self.planted.bugs.contains(&bug)
        }
        #[cfg(not(feature = "planted-bugs"))]
        {
            let _ = bug;
            false
        }
    }

    /// Plants `bug` (simulation teeth only).
    #[cfg(feature = "planted-bugs")]
    pub fn plant(&mut self, bug: Bug) {
        self.planted.bugs.insert(bug);
    }
}
