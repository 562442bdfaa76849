//! Units — what gets scheduled (`charge`, `reserve[2]`,
//! `compensate:reserve[2]`) — and their folded state.

use super::event::{ErrorInfo, Millis};
use super::projection::Name;
use std::collections::BTreeMap;
use std::fmt;

/// A parsed unit name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct UnitName {
    /// The step it belongs to.
    pub step: Name,
    /// The element index of a `for` step.
    pub index: Option<usize>,
    /// True for `compensate:<unit>`.
    pub compensation: bool,
}

impl UnitName {
    /// Parses `[compensate:]step[[i]]`.
    pub fn parse(text: &str) -> UnitName {
        let (step, index, compensation) = split(text);
        UnitName {
            step: step.into(),
            index,
            compensation,
        }
    }

    /// Parses `name`, sharing it as the step's name when it names a whole
    /// step (no copy of the text then).
    pub fn of(name: &Name) -> UnitName {
        let (step, index, compensation) = split(name);
        UnitName {
            step: if step.len() == name.len() {
                name.clone()
            } else {
                step.into()
            },
            index,
            compensation,
        }
    }

    /// The unit this compensation undoes (`reserve[2]` for
    /// `compensate:reserve[2]`), or the unit itself.
    pub fn base(&self) -> String {
        match self.index {
            Some(i) => format!("{}[{}]", self.step, i),
            None => self.step.to_string(),
        }
    }
}

/// `[compensate:]step[[i]]` as its step, index and compensation flag.
fn split(text: &str) -> (&str, Option<usize>, bool) {
    let (compensation, rest) = match text.strip_prefix("compensate:") {
        Some(rest) => (true, rest),
        None => (false, text),
    };
    if let Some(open) = rest.find('[') {
        if let Some(inner) = rest[open + 1..].strip_suffix(']') {
            if let Ok(index) = inner.parse::<usize>() {
                return (&rest[..open], Some(index), compensation);
            }
        }
    }
    (rest, None, compensation)
}

impl fmt::Display for UnitName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.compensation {
            f.write_str("compensate:")?;
        }
        f.write_str(&self.base())
    }
}

/// Where a unit is.
#[derive(Debug, Clone, PartialEq)]
pub enum UnitState {
    /// Queued for delivery since `since` (a first delivery, a retry, or a
    /// redelivery).
    Queued {
        /// When it was (re)scheduled.
        since: Millis,
    },
    /// Dispatched; the delivery with `token` is the attempt in flight.
    InFlight {
        /// The current delivery's token.
        token: Name,
    },
    /// An attempt failed; the next one is scheduled at `retry_at`.
    Retrying {
        /// When the next attempt is scheduled.
        retry_at: Millis,
    },
    /// Between an attempt's outcome and the next event (a failed attempt
    /// with no retry, or an uncertain attempt awaiting its redelivery).
    Idle,
    /// A child execution runs for this unit.
    Child {
        /// The child's id.
        child_id: String,
    },
    /// Resolved: succeeded.
    Succeeded {
        /// Its output (shared with the `StepSucceeded` event).
        output: std::sync::Arc<serde_json::Value>,
    },
    /// Resolved: failed permanently.
    Failed {
        /// The error.
        error: ErrorInfo,
    },
}

/// The state of one delivery (token).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DispatchState {
    /// The attempt in flight.
    Current,
    /// Its attempt failed (reported, or timed out): the server no longer
    /// wants it, but a late success still counts.
    Failed,
    /// It became uncertain and was redelivered.
    Uncertain,
}

/// One delivery of a unit.
#[derive(Debug, Clone, PartialEq)]
pub struct Dispatch {
    /// Attempt number.
    pub attempt: u32,
    /// The receiving worker.
    pub worker_id: Name,
    /// When it was dispatched.
    pub at: Millis,
    /// True when it delivered a redelivery.
    pub redelivery: bool,
    /// Its state.
    pub state: DispatchState,
}

/// The folded state of one unit.
#[derive(Debug, Clone, PartialEq)]
pub struct Unit {
    /// The parsed name.
    pub name: UnitName,
    /// Task name (empty for a child unit).
    pub task: Name,
    /// The task's contract version.
    pub contract_version: Name,
    /// Current attempt number.
    pub attempt: u32,
    /// True while the current scheduling is a redelivery.
    pub redelivery: bool,
    /// The task's input, evaluated once (shared: the projection's
    /// copy-on-write maps clone units often, and the input never changes).
    pub input: std::sync::Arc<serde_json::Value>,
    /// The idempotency key, evaluated once.
    pub idempotency_key: Name,
    /// Time of the first `StepScheduled`.
    pub first_scheduled_at: Millis,
    /// Seq of the latest `StepScheduled` (it names the attempt's span).
    pub scheduled_seq: u64,
    /// True once any delivery left the server.
    pub dispatched: bool,
    /// Where it is.
    pub state: UnitState,
    /// Every delivery, by token.
    pub dispatches: BTreeMap<Name, Dispatch>,
    /// When it was resolved.
    pub resolved_at: Option<Millis>,
}

impl Unit {
    /// True once succeeded or failed.
    pub fn is_resolved(&self) -> bool {
        matches!(
            self.state,
            UnitState::Succeeded { .. } | UnitState::Failed { .. }
        )
    }

    /// The current delivery, while one is in flight.
    pub fn current_dispatch(&self) -> Option<(&str, &Dispatch)> {
        match &self.state {
            UnitState::InFlight { token } => {
                self.dispatches.get_key_value(token).map(|(t, d)| (&**t, d))
            }
            _ => None,
        }
    }

    /// True while work of this unit may be running somewhere and its outcome
    /// must be learned before compensation: a delivery in flight, a queued
    /// redelivery, or a running child.
    pub fn in_flight(&self) -> bool {
        match self.state {
            UnitState::InFlight { .. } | UnitState::Child { .. } => true,
            UnitState::Queued { .. } => self.redelivery,
            UnitState::Idle => self.redelivery,
            _ => false,
        }
    }
}
