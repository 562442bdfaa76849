//! Execution histories: the event vocabulary, and (later) the fold of a
//! history into an execution's projection and the `orbit logs` format.

mod event;

pub use event::{
    CompensationReason, ErrorInfo, Event, EventKind, Millis, StaleOutcome, WorkflowError,
};
