//! The event vocabulary of an execution's history. The serde encoding of
//! [`Event`] is ORBIT's on-disk history format: change it only with a
//! migration (a test pins the encoding of every kind).

use serde::{Deserialize, Serialize};

/// Milliseconds since the Unix epoch. The core never reads a clock; every
/// time it sees is given to it by its driver.
pub type Millis = u64;

/// One event of an execution's history.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Event {
    /// Per-execution sequence number, from 1, contiguous.
    pub seq: u64,
    /// When the event was recorded (driver time, ms since the epoch).
    pub at: Millis,
    /// What happened.
    #[serde(flatten)]
    pub kind: EventKind,
}

/// An error as recorded in the history and reported by workers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorInfo {
    /// `UPPER_SNAKE` code.
    pub code: String,
    /// Human-readable message (may be empty).
    #[serde(default)]
    pub message: String,
    /// Whether a retry may help.
    #[serde(default = "retryable_default")]
    pub retryable: bool,
}

fn retryable_default() -> bool {
    true
}

/// The error a workflow failed with.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkflowError {
    /// `UPPER_SNAKE` code.
    pub code: String,
    /// Human-readable message.
    #[serde(default)]
    pub message: String,
    /// The unit that failed, when one did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<String>,
}

/// Why a result was not applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StaleOutcome {
    /// A failure from an attempt that is not the one in flight.
    Failure,
    /// A result for a unit that is already resolved.
    Duplicate,
}

/// Why compensation started.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CompensationReason {
    /// A step failed permanently.
    Failed,
    /// The execution was cancelled.
    Cancelled,
}

/// The kinds of events, with their fields (`runtime.md`, "History").
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type")]
pub enum EventKind {
    /// The execution exists, pinned to a definition.
    WorkflowCreated {
        /// Workflow name.
        workflow: String,
        /// Workflow version.
        version: String,
        /// The pinned definition hash.
        definition_hash: String,
        /// The checked input.
        input: serde_json::Value,
        /// The parent execution id, for a child execution.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        parent: Option<String>,
        /// The W3C `traceparent` of the start request, when it carried a
        /// valid one (normalized); a child inherits its parent's. Absent in
        /// histories written before it existed.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        traceparent: Option<String>,
    },
    /// The execution was admitted and runs.
    WorkflowStarted {},
    /// A `for` step's list, evaluated once.
    StepFanOut {
        /// Step name.
        step: String,
        /// The evaluated list.
        items: Vec<serde_json::Value>,
    },
    /// A task unit is queued for delivery.
    StepScheduled {
        /// Unit (`charge`, `reserve[2]`, `compensate:charge`).
        step: String,
        /// Attempt number, from 1.
        attempt: u32,
        /// True when the same attempt is delivered again after an uncertain one.
        #[serde(default)]
        redelivery: bool,
        /// The task's input (evaluated once, at the first scheduling;
        /// shared with the unit's state once applied, not copied).
        input: std::sync::Arc<serde_json::Value>,
        /// The unit's idempotency key.
        idempotency_key: String,
        /// Task name.
        task: String,
        /// The task contract's version.
        contract_version: String,
    },
    /// A task left the server for a worker.
    StepDispatched {
        /// Unit.
        step: String,
        /// Attempt number.
        attempt: u32,
        /// The receiving worker.
        worker_id: String,
        /// The delivery's token.
        token: String,
    },
    /// The outcome of a dispatch is unknown; it will be redelivered.
    StepAttemptUncertain {
        /// Unit.
        step: String,
        /// Attempt number.
        attempt: u32,
        /// One of the seed's reason strings.
        reason: String,
    },
    /// A unit succeeded.
    StepSucceeded {
        /// Unit.
        step: String,
        /// Attempt number of the token that reported it.
        attempt: u32,
        /// The worker's output (shared with the unit's state once applied,
        /// not copied: outputs can be large).
        output: std::sync::Arc<serde_json::Value>,
    },
    /// An attempt failed.
    StepAttemptFailed {
        /// Unit.
        step: String,
        /// Attempt number.
        attempt: u32,
        /// The failure.
        error: ErrorInfo,
        /// When the next attempt is scheduled, if one follows.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        retry_at: Option<Millis>,
    },
    /// A unit (or a step) failed permanently.
    StepFailed {
        /// Unit or step.
        step: String,
        /// The final error.
        error: ErrorInfo,
    },
    /// A step's `if:` was false.
    StepSkipped {
        /// Step name.
        step: String,
    },
    /// A result that changed nothing.
    StaleResultIgnored {
        /// Unit.
        step: String,
        /// Attempt number of the reporting token.
        attempt: u32,
        /// Why it was ignored.
        outcome: StaleOutcome,
    },
    /// A sleep step started its timer.
    TimerStarted {
        /// Step name.
        step: String,
        /// When it fires.
        fire_at: Millis,
    },
    /// A sleep step's timer fired.
    TimerFired {
        /// Step name.
        step: String,
        /// When it was due.
        fire_at: Millis,
    },
    /// A signal arrived (its `seq` is the event's).
    SignalReceived {
        /// Signal name.
        name: String,
        /// Its payload.
        payload: serde_json::Value,
    },
    /// A signal step consumed a buffered signal.
    SignalConsumed {
        /// Step name.
        step: String,
        /// The `seq` of the consumed `SignalReceived`.
        signal_seq: u64,
    },
    /// A child execution was started for a workflow step (unit).
    ChildStarted {
        /// Unit.
        step: String,
        /// The child's id (`<parent>.<step>[.<i>]`).
        child_id: String,
    },
    /// A child execution completed.
    ChildCompleted {
        /// Unit.
        step: String,
        /// The child's id.
        child_id: String,
        /// The child's output.
        output: serde_json::Value,
    },
    /// A child execution failed or was cancelled.
    ChildFailed {
        /// Unit.
        step: String,
        /// The child's id.
        child_id: String,
        /// Its error (`CHILD_CANCELLED` for a cancelled child).
        error: ErrorInfo,
    },
    /// Compensation begins.
    CompensationStarted {
        /// Why.
        reason: CompensationReason,
        /// Units to compensate, in the order they will run.
        units: Vec<String>,
    },
    /// A cancellation was requested.
    WorkflowCancelRequested {
        /// The caller's reason.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
    /// Terminal: completed.
    WorkflowCompleted {
        /// The workflow's output.
        output: serde_json::Value,
    },
    /// Terminal: failed.
    WorkflowFailed {
        /// Why.
        error: WorkflowError,
    },
    /// Terminal: cancelled.
    WorkflowCancelled {},
}

impl EventKind {
    /// The kind's name, as its encoding's `type` tag writes it.
    pub fn type_name(&self) -> &'static str {
        match self {
            EventKind::WorkflowCreated { .. } => "WorkflowCreated",
            EventKind::WorkflowStarted { .. } => "WorkflowStarted",
            EventKind::StepFanOut { .. } => "StepFanOut",
            EventKind::StepScheduled { .. } => "StepScheduled",
            EventKind::StepDispatched { .. } => "StepDispatched",
            EventKind::StepAttemptUncertain { .. } => "StepAttemptUncertain",
            EventKind::StepSucceeded { .. } => "StepSucceeded",
            EventKind::StepAttemptFailed { .. } => "StepAttemptFailed",
            EventKind::StepFailed { .. } => "StepFailed",
            EventKind::StepSkipped { .. } => "StepSkipped",
            EventKind::StaleResultIgnored { .. } => "StaleResultIgnored",
            EventKind::TimerStarted { .. } => "TimerStarted",
            EventKind::TimerFired { .. } => "TimerFired",
            EventKind::SignalReceived { .. } => "SignalReceived",
            EventKind::SignalConsumed { .. } => "SignalConsumed",
            EventKind::ChildStarted { .. } => "ChildStarted",
            EventKind::ChildCompleted { .. } => "ChildCompleted",
            EventKind::ChildFailed { .. } => "ChildFailed",
            EventKind::CompensationStarted { .. } => "CompensationStarted",
            EventKind::WorkflowCancelRequested { .. } => "WorkflowCancelRequested",
            EventKind::WorkflowCompleted { .. } => "WorkflowCompleted",
            EventKind::WorkflowFailed { .. } => "WorkflowFailed",
            EventKind::WorkflowCancelled { .. } => "WorkflowCancelled",
        }
    }
}
