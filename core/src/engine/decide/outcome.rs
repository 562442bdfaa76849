//! A step's resolution, derived from its units and events (a step has no
//! resolution event of its own), and the scope expressions are evaluated in.

use crate::history::{Projection, StepState, UnitName, UnitState};
use crate::ir::{Expr, ExprKind, Step, StepKind, Workflow};
use serde_json::{json, Value};
use std::collections::BTreeMap;

/// Where a step is.
#[derive(Debug, Clone, PartialEq)]
pub enum StepOutcome {
    /// Not resolved yet.
    Open,
    /// Succeeded with this output (`null` for a skipped step).
    Done(Value),
    /// Failed.
    Failed,
}

/// The unit name of element `index` of `step` (or of the step itself).
pub fn unit_name(step: &str, index: Option<usize>) -> String {
    UnitName {
        step: step.into(),
        index,
        compensation: false,
    }
    .base()
}

/// The outcome of `step`.
pub fn step_outcome(step: &Step, p: &Projection) -> StepOutcome {
    let Some(st) = p.steps.get(step.name.as_str()) else {
        return StepOutcome::Open;
    };
    if st.skipped {
        return StepOutcome::Done(Value::Null);
    }
    if st.failed.is_some() {
        return StepOutcome::Failed;
    }
    match &step.kind {
        StepKind::Sleep { .. } if st.timer_fired => StepOutcome::Done(json!({})),
        StepKind::Signal { .. } => match &st.signal {
            Some(v) => StepOutcome::Done(v.clone()),
            None => StepOutcome::Open,
        },
        StepKind::Task(_) | StepKind::Workflow { .. } => units_outcome(step, st, p),
        StepKind::Sleep { .. } => StepOutcome::Open,
    }
}

fn units_outcome(step: &Step, st: &StepState, p: &Projection) -> StepOutcome {
    let output_of = |unit: &str| match p.units.get(unit).map(|u| &u.state) {
        Some(UnitState::Succeeded { output }) => Some((**output).clone()),
        _ => None,
    };
    match (&step.for_each, &st.items) {
        (Some(_), Some(items)) => {
            if st.units_succeeded < items.len() {
                return StepOutcome::Open;
            }
            let mut outputs = Vec::with_capacity(items.len());
            for i in 0..items.len() {
                match output_of(&unit_name(&step.name, Some(i))) {
                    Some(v) => outputs.push(v),
                    None => return StepOutcome::Open,
                }
            }
            StepOutcome::Done(Value::Array(outputs))
        }
        (Some(_), None) => StepOutcome::Open,
        (None, _) => match output_of(&step.name) {
            Some(v) => StepOutcome::Done(v),
            None => StepOutcome::Open,
        },
    }
}

/// Outputs of every resolved step (skipped ones as `null`), by name.
pub fn step_outputs(
    wf: &Workflow,
    p: &Projection,
    only: Option<&[String]>,
) -> BTreeMap<String, Value> {
    let mut out = BTreeMap::new();
    for step in &wf.steps {
        if let Some(names) = only {
            if !names.contains(&step.name) {
                continue;
            }
        }
        if let StepOutcome::Done(v) = step_outcome(step, p) {
            out.insert(step.name.clone(), v);
        }
    }
    out
}

/// Calls `f` on `expr` and on every expression inside it.
fn visit(expr: &Expr, f: &mut impl FnMut(&ExprKind)) {
    f(&expr.kind);
    match &expr.kind {
        ExprKind::Literal { .. }
        | ExprKind::Input
        | ExprKind::Execution
        | ExprKind::Step { .. }
        | ExprKind::Var { .. } => {}
        ExprKind::Member { base, .. } => visit(base, f),
        ExprKind::Index { base, index } => {
            visit(base, f);
            visit(index, f);
        }
        ExprKind::Unary { operand, .. } => visit(operand, f),
        ExprKind::Binary { left, right, .. } => {
            visit(left, f);
            visit(right, f);
        }
        ExprKind::Call { args: items, .. } | ExprKind::List { items } => {
            for e in items {
                visit(e, f);
            }
        }
        ExprKind::Record { fields } => {
            for (_, e) in fields {
                visit(e, f);
            }
        }
    }
}

/// The steps `expr` reads (`ExprKind::Step`), each once: the only entries
/// of a scope's step outputs its evaluation looks up.
pub(crate) fn steps_read(expr: &Expr) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    visit(expr, &mut |kind| {
        if let ExprKind::Step { name } = kind {
            if !out.contains(name) {
                out.push(name.clone());
            }
        }
    });
    out
}

/// True when `expr` reads `execution`.
pub(crate) fn reads_execution(expr: &Expr) -> bool {
    let mut reads = false;
    visit(expr, &mut |kind| {
        reads |= matches!(kind, ExprKind::Execution)
    });
    reads
}

/// The value of `execution` in expressions.
pub fn execution_value(p: &Projection) -> Value {
    json!({"id": p.execution_id, "workflow": p.workflow, "version": p.version})
}
