//! The decider: a pure function of (projection = fold of the history,
//! definition, now) that proposes the next events and the next wake-up.
//!
//! The engine applies the proposed events to a draft projection and asks
//! again until nothing more is proposed, so one call only has to make some
//! progress; it never proposes two transitions of the same unit.

mod outcome;
mod retry;
mod schedule;
mod wind_down;

pub use outcome::{execution_value, step_outcome, step_outputs, unit_name, StepOutcome};
pub use retry::{attempt_failed, backoff};

use crate::eval::{self, Scope};
use crate::history::UnitName;
use crate::history::{
    ErrorInfo, EventKind, Millis, Name, Projection, Status, UnitState, WorkflowError,
};
use crate::ir::{StepKind, TaskCall, Workflow};
use std::collections::BTreeMap;

/// What the decider knows about a child execution.
#[derive(Debug, Clone, PartialEq)]
pub struct ChildView {
    /// Its status.
    pub status: Status,
    /// Its output, once completed.
    pub output: Option<serde_json::Value>,
    /// Its error, once failed.
    pub error: Option<WorkflowError>,
    /// True once a cancellation was requested.
    pub cancel_requested: bool,
}

/// A child execution to create (its parent records `ChildStarted` in the
/// same batch).
#[derive(Debug, Clone, PartialEq)]
pub struct ChildStart {
    /// The parent's unit that waits for the child.
    pub unit: String,
    /// `<parent>.<step>[.<i>]`.
    pub child_id: String,
    /// The pinned definition hash.
    pub definition_hash: String,
    /// The child's input.
    pub input: serde_json::Value,
}

/// The decider's proposal.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Decision {
    /// Events to append, in order.
    pub events: Vec<EventKind>,
    /// Children to create.
    pub start_children: Vec<ChildStart>,
    /// Children to cancel.
    pub cancel_children: Vec<String>,
    /// The earliest future time something is due.
    pub wake: Option<Millis>,
}

impl Decision {
    fn wake_at(&mut self, t: Millis) {
        self.wake = Some(self.wake.map_or(t, |w| w.min(t)));
    }
}

/// What the decider reads besides the projection.
pub struct Context<'a> {
    /// The pinned definition.
    pub workflow: &'a Workflow,
    /// The current time.
    pub now: Millis,
    /// Looks up a child execution by id.
    pub children: &'a dyn Fn(&str) -> Option<ChildView>,
}

/// The task call a unit runs: the step's own, or its compensation's.
pub fn call_for<'a>(wf: &'a Workflow, name: &UnitName) -> Option<&'a TaskCall> {
    let step = wf.step(&name.step)?;
    if name.compensation {
        step.compensate.as_ref().map(|c| &c.call)
    } else {
        match &step.kind {
            StepKind::Task(call) => Some(call),
            _ => None,
        }
    }
}

/// An `EXPRESSION_ERROR` (never retried).
pub fn expression_error(message: impl Into<String>) -> ErrorInfo {
    ErrorInfo {
        code: eval::EXPRESSION_ERROR.to_string(),
        message: message.into(),
        retryable: false,
    }
}

fn error(code: &str, message: impl Into<String>, retryable: bool) -> ErrorInfo {
    ErrorInfo {
        code: code.to_string(),
        message: message.into(),
        retryable,
    }
}

/// Proposes the next events for `p`.
pub fn decide(cx: &Context, p: &Projection) -> Decision {
    let mut d = Decision::default();
    if p.status.is_terminal() || p.status == Status::Pending || p.last_seq == 0 {
        return d;
    }
    let winding = p.winding_down();
    let busy = open_units(cx, p, winding, &mut d);
    if !winding {
        schedule::advance(cx, p, &mut d);
    } else if d.events.is_empty() && d.cancel_children.is_empty() {
        wind_down::advance(cx, p, busy, &mut d);
    }
    d
}

/// Time checks and reconciliation of unresolved units; returns true while
/// some original unit's outcome is still to be learned (computed only when
/// winding down). While running normally, only units that can be due are
/// visited, in time order, so the cost does not grow with fan-out width.
fn open_units(cx: &Context, p: &Projection, winding: bool, d: &mut Decision) -> bool {
    if winding {
        let mut busy = false;
        for name in &p.open_units {
            busy |= visit(cx, p, name, true, d);
        }
        return busy;
    }
    let now = cx.now;
    let idx = &p.index;
    for (t, name) in &idx.retrying {
        if *t > now {
            d.wake_at(*t);
            break;
        }
        visit(cx, p, name, false, d);
    }
    let (timeouts, queue_timeouts): (Vec<u64>, Vec<u64>) = {
        let calls = cx.workflow.steps.iter().flat_map(|s| {
            let own = match &s.kind {
                StepKind::Task(c) => Some(c),
                _ => None,
            };
            own.into_iter()
                .chain(s.compensate.as_ref().map(|c| &c.call))
        });
        let mut t = Vec::new();
        let mut q = Vec::new();
        for c in calls {
            t.extend(c.timeout_ms);
            q.extend(c.queue_timeout_ms);
        }
        (t, q)
    };
    let scan = |set: &imbl::OrdSet<(Millis, Name)>, min: Option<u64>, d: &mut Decision| {
        let Some(min) = min else { return };
        for (at, name) in set {
            let earliest = at + min;
            if earliest > now && d.wake.is_some_and(|w| earliest >= w) {
                break;
            }
            visit(cx, p, name, false, d);
        }
    };
    scan(&idx.in_flight, timeouts.iter().copied().min(), d);
    scan(&idx.undelivered, queue_timeouts.iter().copied().min(), d);
    for name in idx.children.iter().chain(idx.idle.iter()) {
        visit(cx, p, name, false, d);
    }
    false
}

/// Time checks and reconciliation of one unresolved unit; true while its
/// outcome is still to be learned.
fn visit(cx: &Context, p: &Projection, name: &Name, winding: bool, d: &mut Decision) -> bool {
    let now = cx.now;
    let mut busy = false;
    let Some(u) = p.units.get(name.as_ref()) else {
        return false;
    };
    let cancelling = winding && !u.name.compensation;
    let call = call_for(cx.workflow, &u.name);
    match &u.state {
        UnitState::Retrying { retry_at } => {
            if cancelling {
                d.events.push(cancelled(name));
            } else if now >= *retry_at {
                d.events.push(EventKind::StepScheduled {
                    step: name.to_string(),
                    attempt: u.attempt + 1,
                    redelivery: false,
                    input: u.input.clone(),
                    idempotency_key: u.idempotency_key.to_string(),
                    task: u.task.to_string(),
                    contract_version: u.contract_version.to_string(),
                });
            } else {
                d.wake_at(*retry_at);
            }
        }
        UnitState::Queued { .. } => {
            if u.redelivery {
                busy |= !u.name.compensation;
            } else if cancelling {
                d.events.push(cancelled(name));
            } else if let Some(qt) = call.and_then(|c| c.queue_timeout_ms) {
                if !u.dispatched {
                    let due = u.first_scheduled_at + qt;
                    if now >= due {
                        d.events.push(EventKind::StepFailed {
                            step: name.to_string(),
                            error: error(
                                "QUEUE_TIMEOUT",
                                format!("no worker took the task within {qt}ms"),
                                false,
                            ),
                        });
                    } else {
                        d.wake_at(due);
                    }
                }
            }
        }
        UnitState::InFlight { .. } => {
            busy |= !u.name.compensation;
            let (Some((_, dispatch)), Some(call)) = (u.current_dispatch(), call) else {
                return busy;
            };
            if let Some(t) = call.timeout_ms {
                let due = dispatch.at + t;
                if now >= due {
                    let err = error(
                        "ATTEMPT_TIMEOUT",
                        format!("attempt {} timed out after {t}ms", u.attempt),
                        true,
                    );
                    d.events
                        .extend(attempt_failed(name, u, &call.retry, err, now, cancelling));
                } else {
                    d.wake_at(due);
                }
            }
        }
        UnitState::Child { child_id } => {
            busy = true;
            match (cx.children)(child_id) {
                Some(v) if v.status.is_terminal() => {
                    d.events.push(child_resolution(name, child_id, &v))
                }
                Some(v) if cancelling && !v.cancel_requested => {
                    d.cancel_children.push(child_id.clone())
                }
                _ => {}
            }
        }
        UnitState::Idle => {
            if u.redelivery {
                busy |= !u.name.compensation;
                d.events.push(EventKind::StepScheduled {
                    step: name.to_string(),
                    attempt: u.attempt,
                    redelivery: true,
                    input: u.input.clone(),
                    idempotency_key: u.idempotency_key.to_string(),
                    task: u.task.to_string(),
                    contract_version: u.contract_version.to_string(),
                });
            }
        }
        UnitState::Succeeded { .. } | UnitState::Failed { .. } => {}
    }
    busy
}

fn cancelled(unit: &str) -> EventKind {
    EventKind::StepFailed {
        step: unit.to_string(),
        error: error(
            "CANCELLED",
            "withdrawn: the execution is winding down",
            false,
        ),
    }
}

fn child_resolution(unit: &str, child_id: &str, v: &ChildView) -> EventKind {
    match v.status {
        Status::Completed => EventKind::ChildCompleted {
            step: unit.to_string(),
            child_id: child_id.to_string(),
            output: v.output.clone().unwrap_or(serde_json::Value::Null),
        },
        Status::Cancelled => EventKind::ChildFailed {
            step: unit.to_string(),
            child_id: child_id.to_string(),
            error: error(
                "CHILD_CANCELLED",
                format!("child execution `{child_id}` was cancelled"),
                false,
            ),
        },
        _ => {
            let e = v.error.clone().unwrap_or(WorkflowError {
                code: "CHILD_FAILED".to_string(),
                message: String::new(),
                step: None,
            });
            EventKind::ChildFailed {
                step: unit.to_string(),
                child_id: child_id.to_string(),
                error: error(&e.code, e.message, false),
            }
        }
    }
}

/// Evaluates `expr` in a scope built from `p`.
pub(crate) fn eval_in(
    expr: &crate::ir::Expr,
    p: &Projection,
    steps: &BTreeMap<String, serde_json::Value>,
    vars: &BTreeMap<String, serde_json::Value>,
) -> Result<serde_json::Value, String> {
    // Most expressions never read `execution`: build it only for those.
    let execution = if outcome::reads_execution(expr) {
        execution_value(p)
    } else {
        serde_json::Value::Null
    };
    let scope = Scope {
        input: &p.input,
        execution: &execution,
        steps,
        vars,
    };
    eval::evaluate(expr, &scope).map_err(|e| e.to_string())
}
