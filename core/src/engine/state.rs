//! The engine's in-memory tables: executions, sessions, tokens, the task
//! queue and parked requests.

use super::batch::DefinitionRecord;
use super::input::{Request, RequestId};
use crate::history::{Millis, Name, Projection};
use std::collections::{BTreeSet, VecDeque};
use std::sync::Arc;

/// One execution as the engine holds it (committed state only).
pub(crate) struct Exec {
    /// The fold of the committed history (the history itself is the
    /// store's: reads of it load it).
    pub proj: Projection,
    /// The pinned definition.
    pub def: Arc<DefinitionRecord>,
    /// The batch holding this execution's uncommitted events.
    pub busy: Option<u64>,
    /// True between a `Reload` and the matching `Reloaded`.
    pub reloading: bool,
    /// Requests waiting for the batch in flight.
    pub waiting: VecDeque<(RequestId, Request)>,
    /// Next time the decider has something due.
    pub wake: Option<Millis>,
    /// Its last commit or arrival in memory (see `idle`).
    pub active_at: Millis,
    /// True while `Idle::checks` holds an entry for it.
    pub idle_watched: bool,
    /// Shared cluster mode: this node's epoch for it, written with every
    /// append (`None`: one server, or held read-only, finished).
    pub epoch: Option<u64>,
}

impl Exec {
    /// True while inputs for it must wait.
    pub fn blocked(&self) -> bool {
        self.busy.is_some() || self.reloading
    }
}

/// A worker session.
pub(crate) struct Session {
    /// The worker's id.
    pub worker_id: Name,
    /// Task patterns.
    pub patterns: Vec<String>,
    /// Default tasks per poll.
    pub max_tasks: u32,
    /// Last poll or heartbeat.
    pub last_seen: Millis,
    /// Tokens dispatched to or re-attached by this session.
    pub tokens: BTreeSet<Name>,
    /// The runtime's own executor of built-in tasks.
    pub builtin: bool,
}

impl Session {
    /// True when this session may be handed `task`: a built-in (`orbit.`)
    /// task goes to the built-in session only; any other task to a worker
    /// session one of whose patterns matches.
    pub fn takes(&self, task: &str) -> bool {
        if self.builtin {
            return crate::builtin::is_reserved(task);
        }
        !crate::builtin::is_reserved(task) && self.patterns.iter().any(|p| pattern_matches(p, task))
    }
}

/// What the engine knows about a token beyond the history.
pub(crate) struct TokenRef {
    /// Execution id (shared with the execution's projection).
    pub execution_id: Name,
    /// Unit (shared with the projection's name for it).
    pub unit: Name,
    /// The worker id recorded in `StepDispatched`.
    pub worker_id: Name,
    /// The session holding it (none after a restart until re-attached).
    pub session: Option<Name>,
    /// True once listed in `held` by a poll or heartbeat (a reported result
    /// confirms nothing until its batch commits, and then the delivery is no
    /// longer current).
    pub confirmed: bool,
    /// Dispatch time.
    pub dispatched_at: Millis,
}

/// A parked long poll.
pub(crate) struct ParkedPoll {
    /// The session.
    pub session_id: Name,
    /// Tasks at most.
    pub max_tasks: u32,
    /// Answer `{"tasks": []}` at this time.
    pub deadline: Millis,
}

/// A parked wait.
pub(crate) struct ParkedWait {
    /// The execution.
    pub execution_id: String,
    /// Answer at this time at the latest.
    pub deadline: Millis,
}

/// A queued task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Queued {
    /// Execution id (shared with the execution's projection).
    pub execution_id: Name,
    /// Unit (shared with the projection's name for it).
    pub unit: Name,
    /// Task name (shared with the unit's).
    pub task: Name,
}

/// Does `task` match a worker's `pattern` (exact, `*`, `prefix.*`)?
pub(crate) fn pattern_matches(pattern: &str, task: &str) -> bool {
    if pattern == "*" {
        return true;
    }
    match pattern.strip_suffix(".*") {
        Some(prefix) => task
            .strip_prefix(prefix)
            .is_some_and(|rest| rest.starts_with('.') && rest.len() > 1),
        None => pattern == task,
    }
}

#[cfg(test)]
mod tests {
    use super::pattern_matches;

    #[test]
    fn patterns() {
        assert!(pattern_matches("*", "a.b"));
        assert!(pattern_matches("payments.*", "payments.charge"));
        assert!(pattern_matches("payments.*", "payments.card.charge"));
        assert!(!pattern_matches("payments.*", "payments"));
        assert!(!pattern_matches("payments.*", "paymentsx.charge"));
        assert!(pattern_matches("demo.work", "demo.work"));
        assert!(!pattern_matches("demo.work", "demo.work2"));
    }
}
