//! Invariant 4, the definition's limits: a `for` step with
//! `max_concurrency: N` never has more than N elements started and not yet
//! resolved; a `QUEUE_TIMEOUT` failure strikes only a unit that was never
//! dispatched, not before its `queue_timeout` elapsed since the unit was
//! first scheduled, and never while a redelivery is queued.

use super::{Invariant, Violation};
use orbit_core::history::{Event, EventKind, Millis, UnitName};
use orbit_core::ir::{self, StepKind};
use std::collections::{BTreeMap, BTreeSet};

/// The error code of a unit that waited in the queue too long.
const QUEUE_TIMEOUT: &str = "QUEUE_TIMEOUT";

/// What the checker remembers of one unit.
#[derive(Default)]
struct Unit {
    first_scheduled_at: Option<Millis>,
    dispatched: bool,
    redelivery_queued: bool,
    resolved: bool,
}

/// Checks one execution's history against its definition's limits.
pub fn check(id: &str, events: &[Event], wf: &ir::Workflow) -> Result<(), Violation> {
    let bad = |unit: &str, msg: String| {
        Violation::new(Invariant::WellFormed, msg)
            .in_execution(id, events)
            .at_unit(unit)
    };
    let mut units: BTreeMap<&str, Unit> = BTreeMap::new();
    // for step -> its elements started and not yet resolved
    let mut open: BTreeMap<&str, BTreeSet<usize>> = BTreeMap::new();
    for e in events {
        match &e.kind {
            EventKind::StepScheduled {
                step, redelivery, ..
            } => {
                let u = units.entry(step).or_default();
                u.first_scheduled_at.get_or_insert(e.at);
                u.redelivery_queued = *redelivery;
                start(&mut open, step);
            }
            EventKind::ChildStarted { step, .. } => start(&mut open, step),
            EventKind::StepDispatched { step, .. } => {
                let u = units.entry(step).or_default();
                u.dispatched = true;
                u.redelivery_queued = false;
            }
            EventKind::StepFailed { step, error } => {
                let u = units.entry(step).or_default();
                if error.code == QUEUE_TIMEOUT && !u.resolved {
                    queue_timeout_legal(wf, step, u, e.at).map_err(|m| {
                        bad(
                            step,
                            format!("#{} {step} failed {QUEUE_TIMEOUT}: {m}", e.seq),
                        )
                    })?;
                }
                u.resolved = true;
                resolve(&mut open, step);
            }
            EventKind::StepSucceeded { step, .. }
            | EventKind::ChildCompleted { step, .. }
            | EventKind::ChildFailed { step, .. } => {
                units.entry(step).or_default().resolved = true;
                resolve(&mut open, step);
            }
            _ => continue,
        }
        for (step, elements) in &open {
            let limit = wf.step(step).and_then(|s| s.max_concurrency);
            if let Some(limit) = limit {
                if elements.len() > limit.max(1) as usize {
                    return Err(bad(
                        step,
                        format!(
                            "#{} {} elements of {step} in flight at once, max_concurrency is {limit}",
                            e.seq,
                            elements.len()
                        ),
                    ));
                }
            }
        }
    }
    Ok(())
}

/// Why a `QUEUE_TIMEOUT` of `unit` at `at` is illegal, if it is.
fn queue_timeout_legal(wf: &ir::Workflow, unit: &str, u: &Unit, at: Millis) -> Result<(), String> {
    let name = UnitName::parse(unit);
    let call = wf.step(&name.step).and_then(|s| {
        if name.compensation {
            s.compensate.as_ref().map(|c| &c.call)
        } else if let StepKind::Task(call) = &s.kind {
            Some(call)
        } else {
            None
        }
    });
    let Some(limit) = call.and_then(|c| c.queue_timeout_ms) else {
        return Err("the unit has no queue_timeout".into());
    };
    if u.dispatched {
        return Err("the unit was dispatched before".into());
    }
    if u.redelivery_queued {
        return Err("a redelivery is exempt from queue_timeout".into());
    }
    let Some(first) = u.first_scheduled_at else {
        return Err("the unit was never scheduled".into());
    };
    if at < first + limit {
        return Err(format!(
            "only {}ms after its first scheduling, queue_timeout is {limit}ms",
            at.saturating_sub(first)
        ));
    }
    Ok(())
}

/// Counts a first start of a `for` element.
fn start<'a>(open: &mut BTreeMap<&'a str, BTreeSet<usize>>, unit: &'a str) {
    if let Some((step, index)) = element(unit) {
        open.entry(step).or_default().insert(index);
    }
}

/// Stops counting a `for` element once it is resolved.
fn resolve(open: &mut BTreeMap<&str, BTreeSet<usize>>, unit: &str) {
    if let Some((step, index)) = element(unit) {
        if let Some(set) = open.get_mut(step) {
            set.remove(&index);
        }
    }
}

/// The step and index of an ordinary `for` element (`reserve[2]`).
fn element(unit: &str) -> Option<(&str, usize)> {
    if unit.starts_with("compensate:") {
        return None;
    }
    let open = unit.find('[')?;
    let index = unit[open + 1..].strip_suffix(']')?.parse().ok()?;
    Some((&unit[..open], index))
}
