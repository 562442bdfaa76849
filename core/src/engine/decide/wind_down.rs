//! Winding down after a permanent failure or a cancellation: once nothing
//! is in flight, compensate succeeded units in reverse order of success,
//! one at a time, then end the execution.

use super::outcome::step_outputs;
use super::schedule::task_event;
use super::{eval_in, Context, Decision};
use crate::history::{CompensationReason, EventKind, Projection, UnitState, WorkflowError};
use crate::ir::Workflow;
use std::collections::BTreeMap;

/// Succeeded units that have a `compensate` block, newest success first.
pub fn compensable(wf: &Workflow, p: &Projection) -> Vec<String> {
    p.successes
        .iter()
        .rev()
        .filter(|unit| {
            p.units
                .get(unit.as_ref())
                .and_then(|u| wf.step(&u.name.step))
                .is_some_and(|s| s.compensate.is_some())
        })
        .map(|unit| unit.to_string())
        .collect()
}

/// The error the workflow fails with: the first permanent failure, or the
/// error evaluating its output.
pub fn original_error(cx: &Context, p: &Projection) -> WorkflowError {
    if let Some(f) = &p.failure {
        return f.error.clone();
    }
    let outputs = step_outputs(cx.workflow, p, None);
    let message = match &cx.workflow.output {
        Some(expr) => match eval_in(expr, p, &outputs, &BTreeMap::new()) {
            Err(e) => e,
            Ok(_) => "the workflow's output could not be evaluated".to_string(),
        },
        None => String::new(),
    };
    WorkflowError {
        code: crate::eval::EXPRESSION_ERROR.to_string(),
        message,
        step: None,
    }
}

fn reason(p: &Projection) -> CompensationReason {
    match (&p.compensation, &p.failure, &p.cancel) {
        (Some(c), _, _) => c.reason,
        (None, Some(_), _) => CompensationReason::Failed,
        (None, None, Some(_)) => CompensationReason::Cancelled,
        (None, None, None) => CompensationReason::Failed,
    }
}

fn terminal(cx: &Context, p: &Projection) -> EventKind {
    if let Some((unit, err)) = p.compensation.as_ref().and_then(|c| c.failed.as_ref()) {
        let original = match reason(p) {
            CompensationReason::Cancelled => "the execution was cancelled".to_string(),
            CompensationReason::Failed => {
                let e = original_error(cx, p);
                if e.message.is_empty() {
                    e.code
                } else {
                    format!("{}: {}", e.code, e.message)
                }
            }
        };
        return EventKind::WorkflowFailed {
            error: WorkflowError {
                code: "COMPENSATION_FAILED".to_string(),
                message: format!(
                    "compensation `{unit}` failed with {}; original error: {original}",
                    err.code
                ),
                step: Some(unit.clone()),
            },
        };
    }
    match reason(p) {
        CompensationReason::Cancelled => EventKind::WorkflowCancelled {},
        CompensationReason::Failed => EventKind::WorkflowFailed {
            error: original_error(cx, p),
        },
    }
}

/// Advances a winding-down execution; `busy` is true while some unit's
/// outcome is still to be learned.
pub fn advance(cx: &Context, p: &Projection, busy: bool, d: &mut Decision) {
    let Some(comp) = &p.compensation else {
        if busy {
            return;
        }
        let units = compensable(cx.workflow, p);
        if units.is_empty() {
            d.events.push(terminal(cx, p));
        } else {
            d.events.push(EventKind::CompensationStarted {
                reason: reason(p),
                units,
            });
        }
        return;
    };
    for unit in &comp.units {
        let cu = format!("compensate:{unit}");
        match p.units.get(cu.as_str()) {
            Some(u) if u.is_resolved() => continue,
            Some(_) => return,
            None => {
                schedule_compensation(cx, p, unit, &cu, d);
                return;
            }
        }
    }
    d.events.push(terminal(cx, p));
}

fn schedule_compensation(cx: &Context, p: &Projection, unit: &str, cu: &str, d: &mut Decision) {
    let Some(u) = p.units.get(unit) else { return };
    let Some(step) = cx.workflow.step(&u.name.step) else {
        return;
    };
    let Some(comp) = &step.compensate else { return };
    let UnitState::Succeeded { output } = &u.state else {
        return;
    };
    let steps = step_outputs(cx.workflow, p, None);
    let mut vars = BTreeMap::new();
    vars.insert(step.name.clone(), (**output).clone());
    if let (Some(fe), Some(i)) = (&step.for_each, u.name.index) {
        if let Some(item) = p
            .steps
            .get(step.name.as_str())
            .and_then(|s| s.items.as_ref())
            .and_then(|items| items.get(i))
        {
            vars.insert(fe.var.clone(), item.clone());
        }
    }
    d.events
        .push(task_event(cx.workflow, p, cu, &comp.call, &steps, &vars));
}
