//! Execution histories: the event vocabulary (the on-disk format), the fold
//! of a history into an execution's [`Projection`], and the `orbit logs`
//! format.

mod event;
pub mod logs;
mod projection;
pub(crate) use projection::unnamed;
mod status;
mod unit;

pub use event::{
    CompensationReason, ErrorInfo, Event, EventKind, Millis, StaleOutcome, WorkflowError,
};
pub use projection::{Cancel, Compensation, Failure, Name, Projection, StepState, UnitIndex};
pub use status::Status;
pub use unit::{Dispatch, DispatchState, Unit, UnitName, UnitState};
