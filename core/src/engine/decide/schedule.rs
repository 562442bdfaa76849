//! Normal progress: ready steps are skipped, fanned out, scheduled, timed
//! or matched with signals, and the workflow completes once every step is
//! resolved.

use super::outcome::{step_outputs, steps_read, unit_name};
use super::{eval_in, expression_error, ChildStart, Context, Decision};
use crate::history::{
    CompensationReason, ErrorInfo, EventKind, Projection, StepState, WorkflowError,
};
use crate::ir::{Step, StepKind, Workflow};
use serde_json::Value;
use std::cell::OnceCell;
use std::collections::BTreeMap;

/// Cheap resolution check: `Some(true)` succeeded or skipped, `Some(false)`
/// failed, `None` open.
pub fn resolved(step: &Step, p: &Projection) -> Option<bool> {
    let st = p.steps.get(step.name.as_str())?;
    if st.skipped {
        return Some(true);
    }
    if st.failed.is_some() {
        return Some(false);
    }
    let done = match &step.kind {
        StepKind::Sleep { .. } => st.timer_fired,
        StepKind::Signal { .. } => st.signal.is_some(),
        StepKind::Task(_) | StepKind::Workflow { .. } => match (&step.for_each, &st.items) {
            (Some(_), Some(items)) => st.units_succeeded >= items.len(),
            (Some(_), None) => false,
            (None, _) => st.units_succeeded >= 1,
        },
    };
    done.then_some(true)
}

/// Advances every ready step; completes the workflow when all are resolved.
pub fn advance(cx: &Context, p: &Projection, d: &mut Decision) {
    let wf = cx.workflow;
    let mut all_done = true;
    for step in &wf.steps {
        match resolved(step, p) {
            Some(true) => continue,
            Some(false) => {
                all_done = false;
                continue;
            }
            None => all_done = false,
        }
        let ready = step
            .depends_on
            .iter()
            .all(|dep| wf.step(dep).and_then(|s| resolved(s, p)) == Some(true));
        if ready {
            advance_step(cx, p, step, d);
        }
    }
    if all_done && d.events.is_empty() {
        complete(cx, p, d);
    }
}

fn fail_step(d: &mut Decision, step: &str, message: String) {
    d.events.push(EventKind::StepFailed {
        step: step.to_string(),
        error: expression_error(message),
    });
}

fn advance_step(cx: &Context, p: &Projection, step: &Step, d: &mut Decision) {
    let empty = StepState::default();
    let st = p.steps.get(step.name.as_str()).unwrap_or(&empty);
    let started = st.units_started > 0 || st.items.is_some() || st.timer.is_some();
    // The dependencies' outputs are gathered (copied) only when an
    // expression of the step is evaluated: most passes over a started step
    // evaluate none.
    let gathered = OnceCell::new();
    let deps = || gathered.get_or_init(|| step_outputs(cx.workflow, p, Some(&step.depends_on)));
    let no_vars = BTreeMap::new();
    if !started {
        if let Some(cond) = &step.condition {
            match eval_in(cond, p, deps(), &no_vars) {
                Ok(Value::Bool(true)) => {}
                Ok(Value::Bool(false)) | Ok(Value::Null) => {
                    d.events.push(EventKind::StepSkipped {
                        step: step.name.clone(),
                    });
                    return;
                }
                Ok(other) => {
                    return fail_step(d, &step.name, format!("`if:` is not a Bool: {other}"))
                }
                Err(e) => return fail_step(d, &step.name, e),
            }
        }
    }
    match &step.kind {
        StepKind::Sleep { duration } => match st.timer {
            None => match eval_in(duration, p, deps(), &no_vars) {
                Ok(v) => {
                    let ms = v.as_u64().unwrap_or(0);
                    d.events.push(EventKind::TimerStarted {
                        step: step.name.clone(),
                        fire_at: cx.now + ms,
                    });
                }
                Err(e) => fail_step(d, &step.name, e),
            },
            Some(t) if cx.now >= t => d.events.push(EventKind::TimerFired {
                step: step.name.clone(),
                fire_at: t,
            }),
            Some(t) => d.wake_at(t),
        },
        StepKind::Signal { name, timeout_ms } => {
            if let Some(seq) = p.signals.get(name).and_then(|b| b.keys().next()) {
                d.events.push(EventKind::SignalConsumed {
                    step: step.name.clone(),
                    signal_seq: *seq,
                });
            } else if let Some(t) = timeout_ms {
                let ready_at = step
                    .depends_on
                    .iter()
                    .filter_map(|dep| p.steps.get(dep.as_str()).map(|s| s.progress_at))
                    .max()
                    .unwrap_or(0)
                    .max(p.started_at.unwrap_or(0));
                let due = ready_at + t;
                if cx.now >= due {
                    d.events.push(EventKind::StepFailed {
                        step: step.name.clone(),
                        error: ErrorInfo {
                            code: "SIGNAL_TIMEOUT".to_string(),
                            message: format!("no `{name}` signal within {t}ms"),
                            retryable: false,
                        },
                    });
                } else {
                    d.wake_at(due);
                }
            }
        }
        StepKind::Task(_) | StepKind::Workflow { .. } => match &step.for_each {
            None => {
                if st.units_started == 0 {
                    schedule_unit(cx, p, step, None, deps(), &no_vars, d);
                }
            }
            Some(fe) => match &st.items {
                None => match eval_in(&fe.list, p, deps(), &no_vars) {
                    Ok(Value::Array(items)) => d.events.push(EventKind::StepFanOut {
                        step: step.name.clone(),
                        items,
                    }),
                    Ok(other) => {
                        fail_step(d, &step.name, format!("`for` list is not a list: {other}"))
                    }
                    Err(e) => fail_step(d, &step.name, e),
                },
                Some(items) => {
                    let limit = step
                        .max_concurrency
                        .map_or(usize::MAX, |m| m.max(1) as usize);
                    let mut in_flight = st.units_started.saturating_sub(st.units_resolved);
                    let mut next = st.units_started;
                    while next < items.len() && in_flight < limit {
                        let mut vars = BTreeMap::new();
                        vars.insert(fe.var.clone(), items[next].clone());
                        schedule_unit(cx, p, step, Some(next), deps(), &vars, d);
                        next += 1;
                        in_flight += 1;
                    }
                }
            },
        },
    }
}

/// Schedules one unit of a task or workflow step for the first time.
fn schedule_unit(
    cx: &Context,
    p: &Projection,
    step: &Step,
    index: Option<usize>,
    deps: &BTreeMap<String, Value>,
    vars: &BTreeMap<String, Value>,
    d: &mut Decision,
) {
    let unit = unit_name(&step.name, index);
    match &step.kind {
        StepKind::Task(call) => {
            d.events
                .push(task_event(cx.workflow, p, &unit, call, deps, vars));
        }
        StepKind::Workflow {
            definition_hash,
            input,
            ..
        } => match eval_in(input, p, deps, vars) {
            Ok(input) => {
                let child_id = match index {
                    Some(i) => format!("{}.{}.{}", p.execution_id, step.name, i),
                    None => format!("{}.{}", p.execution_id, step.name),
                };
                d.events.push(EventKind::ChildStarted {
                    step: unit.clone(),
                    child_id: child_id.clone(),
                });
                d.start_children.push(ChildStart {
                    unit,
                    child_id,
                    definition_hash: definition_hash.clone(),
                    input,
                });
            }
            Err(e) => fail_step(d, &unit, e),
        },
        StepKind::Sleep { .. } | StepKind::Signal { .. } => {}
    }
}

/// The first `StepScheduled` of a task unit, or the `StepFailed` its
/// expressions cause.
pub fn task_event(
    wf: &Workflow,
    p: &Projection,
    unit: &str,
    call: &crate::ir::TaskCall,
    steps: &BTreeMap<String, Value>,
    vars: &BTreeMap<String, Value>,
) -> EventKind {
    let failed = |message: String| EventKind::StepFailed {
        step: unit.to_string(),
        error: expression_error(message),
    };
    let contract = wf.tasks.get(&call.task);
    let input = match eval_in(&call.input, p, steps, vars) {
        Ok(v) => v,
        Err(e) => return failed(e),
    };
    // A `Json` value inside `with` is only known at run time: hold the task's
    // input to its contract before any worker sees it.
    let input = match contract.map(|c| crate::eval::check_value(&c.input, &input)) {
        None => input,
        Some(Ok(checked)) => checked,
        Some(Err(violation)) => {
            return failed(format!(
                "the input of task `{}` violates its contract: {violation}",
                call.task
            ))
        }
    };
    // `{execution id}/{unit}`, put together without the formatting
    // machinery (this is on every step's path).
    let default_key = || [&p.execution_id[..], "/", unit].concat();
    let key = match &call.idempotency_key {
        None => default_key(),
        Some(expr) => match eval_in(expr, p, steps, vars) {
            Ok(Value::Null) => default_key(),
            Ok(Value::String(s)) => s,
            Ok(other) => return failed(format!("idempotency_key is not a String: {other}")),
            Err(e) => return failed(e),
        },
    };
    EventKind::StepScheduled {
        step: unit.to_string(),
        attempt: 1,
        redelivery: false,
        input: input.into(),
        idempotency_key: key,
        task: call.task.clone(),
        contract_version: contract.map(|t| t.version.clone()).unwrap_or_default(),
    }
}

/// Evaluates the workflow's output once every step is resolved.
fn complete(cx: &Context, p: &Projection, d: &mut Decision) {
    let result = match &cx.workflow.output {
        // Without an `output` block a workflow's output is the empty record.
        None => Ok(Value::Object(serde_json::Map::new())),
        Some(expr) => {
            // Only the outputs the expression reads are gathered.
            let outputs = step_outputs(cx.workflow, p, Some(&steps_read(expr)));
            eval_in(expr, p, &outputs, &BTreeMap::new())
        }
    };
    match result {
        Ok(output) => d.events.push(EventKind::WorkflowCompleted { output }),
        Err(message) => {
            let units = super::wind_down::compensable(cx.workflow, p);
            if units.is_empty() {
                d.events.push(EventKind::WorkflowFailed {
                    error: WorkflowError {
                        code: crate::eval::EXPRESSION_ERROR.to_string(),
                        message,
                        step: None,
                    },
                });
            } else {
                d.events.push(EventKind::CompensationStarted {
                    reason: CompensationReason::Failed,
                    units,
                });
            }
        }
    }
}
