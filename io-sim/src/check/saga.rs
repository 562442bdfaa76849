//! Invariant 7: saga correctness. A failed or cancelled execution
//! compensated exactly the units that succeeded and have a `compensate`
//! block, in reverse order of success, one at a time, each to success — or
//! the execution ended `COMPENSATION_FAILED`. A completed execution ran no
//! compensation, and no ordinary unit succeeds once compensation started.

use super::{Invariant, Violation};
use orbit_core::history::{Event, EventKind, UnitName};
use orbit_core::ir;
use std::collections::{BTreeMap, BTreeSet};

/// Checks one execution's history against its definition.
pub fn check(id: &str, events: &[Event], wf: &ir::Workflow) -> Result<(), Violation> {
    let bad = |msg: String| Violation::new(Invariant::Saga, msg).in_execution(id, events);
    let compensable: BTreeSet<&str> = wf
        .steps
        .iter()
        .filter(|s| s.compensate.is_some())
        .map(|s| s.name.as_str())
        .collect();
    let mut successes: Vec<String> = Vec::new();
    let mut planned: Option<(u64, Vec<String>)> = None;
    // compensation unit -> (first scheduled seq, resolved seq, succeeded)
    let mut comp: BTreeMap<String, (u64, Option<(u64, bool)>)> = BTreeMap::new();
    let mut end: Option<&EventKind> = None;
    for e in events {
        match &e.kind {
            EventKind::StepSucceeded { step, .. } => {
                let name = UnitName::parse(step);
                if name.compensation {
                    if let Some(c) = comp.get_mut(step) {
                        c.1.get_or_insert((e.seq, true));
                    }
                } else {
                    if planned.is_some() {
                        return Err(bad(format!(
                            "#{} {step} succeeded after compensation started",
                            e.seq
                        )));
                    }
                    if compensable.contains(&*name.step) {
                        successes.push(step.clone());
                    }
                }
            }
            EventKind::StepFailed { step, .. } => {
                if let Some(c) = comp.get_mut(step) {
                    c.1.get_or_insert((e.seq, false));
                }
            }
            EventKind::CompensationStarted { units, .. } => {
                if planned.is_some() {
                    return Err(bad(format!("#{} a second CompensationStarted", e.seq)));
                }
                planned = Some((e.seq, units.clone()));
            }
            EventKind::StepScheduled { step, .. } if step.starts_with("compensate:") => {
                let Some((_, units)) = &planned else {
                    return Err(bad(format!(
                        "#{} {step} scheduled before CompensationStarted",
                        e.seq
                    )));
                };
                let base = UnitName::parse(step).base();
                let Some(pos) = units.iter().position(|u| *u == base) else {
                    return Err(bad(format!(
                        "#{} {step} scheduled but {base} is not in CompensationStarted {units:?}",
                        e.seq
                    )));
                };
                if !comp.contains_key(step) {
                    // The previous compensation must be resolved first.
                    if pos > 0 {
                        let prev = format!("compensate:{}", units[pos - 1]);
                        let done = comp.get(&prev).is_some_and(|c| c.1.is_some());
                        if !done {
                            return Err(bad(format!(
                                "#{} {step} started before {prev} was resolved",
                                e.seq
                            )));
                        }
                    }
                    comp.insert(step.clone(), (e.seq, None));
                }
            }
            EventKind::WorkflowCompleted { .. }
            | EventKind::WorkflowFailed { .. }
            | EventKind::WorkflowCancelled {} => end = Some(&e.kind),
            _ => {}
        }
    }
    let Some(end) = end else {
        return Ok(());
    };
    let expected: Vec<String> = successes.iter().rev().cloned().collect();
    match end {
        EventKind::WorkflowCompleted { .. } if planned.is_some() => {
            return Err(bad("a completed execution ran compensation".into()));
        }
        EventKind::WorkflowFailed { .. } | EventKind::WorkflowCancelled {} => {
            let units = planned.as_ref().map(|(_, u)| u.clone()).unwrap_or_default();
            if units != expected {
                return Err(bad(format!(
                    "compensated {units:?}, but the succeeded compensable units in reverse order of success are {expected:?}"
                )));
            }
            let mut first_failed: Option<String> = None;
            for u in &units {
                let c = format!("compensate:{u}");
                match comp.get(&c).and_then(|x| x.1) {
                    None => {
                        return Err(bad(format!("{c} never ran to resolution")));
                    }
                    Some((_, false)) => {
                        first_failed.get_or_insert(c);
                    }
                    Some((_, true)) => {}
                }
            }
            match (first_failed, end) {
                (None, _) => {}
                (Some(c), EventKind::WorkflowFailed { error }) => {
                    if error.code != "COMPENSATION_FAILED"
                        || error.step.as_deref() != Some(c.as_str())
                    {
                        return Err(bad(format!(
                            "{c} failed but the execution failed with {} at {:?}",
                            error.code, error.step
                        )));
                    }
                }
                (Some(c), _) => {
                    return Err(bad(format!(
                        "{c} failed but the execution ended cancelled, not COMPENSATION_FAILED"
                    )));
                }
            }
        }
        _ => {}
    }
    Ok(())
}
