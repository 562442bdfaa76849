//! Invariant 6: stable keys. Every delivery of a unit carries the key and
//! input of its `StepScheduled`, and the external payment model sees each
//! unit's effect applied once where its workers deduplicate by key (a unit
//! whose key changed between deliveries is charged twice), at least once
//! where they do not, and never lost: every recorded success has its effect.

use super::{Invariant, Violation};
use crate::payment::Payments;
use orbit_core::engine::Task;
use orbit_core::history::{Event, EventKind};

/// Checks a task a worker received against the durable history of its
/// execution.
pub fn delivery(task: &Task, events: &[Event]) -> Result<(), Violation> {
    // The scheduling this delivery carries is the last one before its own
    // `StepDispatched`: a delivery that reaches its worker late may find a
    // newer attempt already scheduled. (A delivery whose dispatch is not in
    // the history is invariant 2's to report; it is judged against the
    // unit's latest scheduling here.)
    let dispatched_at = events.iter().position(
        |e| matches!(&e.kind, EventKind::StepDispatched { token, .. } if *token == task.token),
    );
    let before = &events[..dispatched_at.unwrap_or(events.len())];
    let scheduled = before.iter().rev().find_map(|e| match &e.kind {
        EventKind::StepScheduled {
            step,
            attempt,
            input,
            idempotency_key,
            ..
        } if *step == task.step_id => Some((attempt, input, idempotency_key)),
        _ => None,
    });
    let Some((attempt, input, key)) = scheduled else {
        return Err(Violation::new(
            Invariant::StableKeys,
            format!(
                "task {} delivered but its unit was never scheduled",
                task.token
            ),
        )
        .in_execution(&task.execution_id, events)
        .at_unit(&task.step_id));
    };
    if **key != *task.idempotency_key || **input != *task.input || *attempt != task.attempt {
        return Err(Violation::new(
            Invariant::StableKeys,
            format!(
                "delivery {} carries key {:?}, attempt {}, input {}; the history scheduled key {key:?}, attempt {attempt}, input {input}",
                task.token, task.idempotency_key, task.attempt, task.input
            ),
        )
        .in_execution(&task.execution_id, events)
        .at_unit(&task.step_id));
    }
    Ok(())
}

/// Checks the payment model: each key's effect applied at most once, and
/// each unit's effect under at most one key.
pub fn payments(p: &Payments) -> Result<(), Violation> {
    for (key, n, undeduplicated) in p.effects_by_key() {
        if n > 1 && !undeduplicated {
            return Err(Violation::new(
                Invariant::StableKeys,
                format!("the effect of key {key:?} was applied {n} times"),
            ));
        }
    }
    for ((exec, unit), keys) in p.keys_by_unit() {
        if keys.len() > 1 {
            return Err(Violation::new(
                Invariant::StableKeys,
                format!("unit's effect applied under {} keys: {keys:?}", keys.len()),
            )
            .in_execution(exec, &[])
            .at_unit(unit));
        }
    }
    Ok(())
}

/// Checks that every task unit the history records as succeeded had its
/// effect applied at least once under its key (at-least-once: a success is
/// never recorded for work nobody did).
pub fn effects_applied(p: &Payments, id: &str, events: &[Event]) -> Result<(), Violation> {
    let mut keys = std::collections::BTreeMap::new();
    for e in events {
        match &e.kind {
            EventKind::StepScheduled {
                step,
                idempotency_key,
                ..
            } => {
                keys.insert(step.as_str(), idempotency_key.as_str());
            }
            EventKind::StepSucceeded { step, .. } => {
                let Some(key) = keys.get(step.as_str()) else {
                    continue;
                };
                if p.applied(key) == 0 {
                    return Err(Violation::new(
                        Invariant::StableKeys,
                        format!("success recorded but the effect of key {key:?} was never applied"),
                    )
                    .in_execution(id, events)
                    .at_unit(step));
                }
            }
            _ => {}
        }
    }
    Ok(())
}
