//! Invariant 4: well-formed histories. The execution starts with
//! `WorkflowCreated`, nothing follows its terminal event, and every task unit
//! follows the legal state machine: scheduled → dispatched →
//! succeeded | attempt failed (→ scheduled with the next attempt) |
//! uncertain (→ scheduled again as a redelivery of the same attempt), with
//! `StepFailed` allowed from any unresolved state. The same unit keeps its
//! key and input across schedulings (invariant 6's history half).

use super::{Invariant, Violation};
use orbit_core::history::{Event, EventKind};
use std::collections::{BTreeMap, BTreeSet};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Queued { attempt: u32 },
    InFlight { attempt: u32 },
    Retrying { attempt: u32 },
    Uncertain { attempt: u32 },
    Failed,
    Resolved,
}

struct Unit<'a> {
    state: State,
    attempt: u32,
    key: &'a str,
    input: &'a serde_json::Value,
    dispatched: BTreeSet<u32>,
}

/// Checks one execution's history.
pub fn check(id: &str, events: &[Event]) -> Result<(), Violation> {
    let mut units: BTreeMap<&str, Unit> = BTreeMap::new();
    let mut started = false;
    let mut terminal: Option<u64> = None;
    for (i, e) in events.iter().enumerate() {
        let bad = |msg: String| {
            Violation::new(Invariant::WellFormed, format!("#{} {msg}", e.seq))
                .in_execution(id, &events[..=i])
        };
        if let Some(t) = terminal {
            return Err(bad(format!("recorded after the terminal event #{t}")));
        }
        if i == 0 && !matches!(e.kind, EventKind::WorkflowCreated { .. }) {
            return Err(bad("the first event is not WorkflowCreated".into()));
        }
        match &e.kind {
            EventKind::WorkflowCreated { .. } if i > 0 => {
                return Err(bad("a second WorkflowCreated".into()));
            }
            EventKind::WorkflowStarted {} => {
                if started {
                    return Err(bad("a second WorkflowStarted".into()));
                }
                started = true;
            }
            EventKind::WorkflowCompleted { .. }
            | EventKind::WorkflowFailed { .. }
            | EventKind::WorkflowCancelled {} => terminal = Some(e.seq),
            EventKind::StepScheduled {
                step,
                attempt,
                redelivery,
                input,
                idempotency_key,
                ..
            } => {
                if !started {
                    return Err(bad(format!("{step} scheduled before WorkflowStarted")));
                }
                match units.get_mut(step.as_str()) {
                    None => {
                        if *attempt != 1 || *redelivery {
                            return Err(bad(format!(
                                "{step} first scheduled with attempt {attempt}, redelivery {redelivery}"
                            ))
                            .at_unit(step));
                        }
                        units.insert(
                            step,
                            Unit {
                                state: State::Queued { attempt: 1 },
                                attempt: 1,
                                key: idempotency_key,
                                input,
                                dispatched: BTreeSet::new(),
                            },
                        );
                    }
                    Some(u) => {
                        if u.key != idempotency_key || *u.input != **input {
                            return Err(Violation::new(
                                Invariant::StableKeys,
                                format!(
                                    "#{} {step} rescheduled with key {idempotency_key:?} / input {input} (first: {:?} / {})",
                                    e.seq, u.key, u.input
                                ),
                            )
                            .in_execution(id, &events[..=i])
                            .at_unit(step));
                        }
                        let legal = match u.state {
                            State::Uncertain { attempt: a } => *redelivery && a == *attempt,
                            State::Retrying { attempt: a } => !*redelivery && *attempt == a + 1,
                            _ => false,
                        };
                        if !legal {
                            return Err(bad(format!(
                                "{step} scheduled (attempt {attempt}, redelivery {redelivery}) from state {:?}",
                                u.state
                            ))
                            .at_unit(step));
                        }
                        u.state = State::Queued { attempt: *attempt };
                        u.attempt = *attempt;
                    }
                }
            }
            EventKind::StepDispatched { step, attempt, .. } => {
                let Some(u) = units.get_mut(step.as_str()) else {
                    return Err(bad(format!("{step} dispatched but never scheduled")).at_unit(step));
                };
                if u.state != (State::Queued { attempt: *attempt }) {
                    return Err(bad(format!(
                        "{step} dispatched (attempt {attempt}) from state {:?}",
                        u.state
                    ))
                    .at_unit(step));
                }
                u.state = State::InFlight { attempt: *attempt };
                u.dispatched.insert(*attempt);
            }
            EventKind::StepAttemptUncertain { step, attempt, .. } => {
                let Some(u) = units.get_mut(step.as_str()) else {
                    return Err(bad(format!("{step} uncertain but never scheduled")).at_unit(step));
                };
                if u.state != (State::InFlight { attempt: *attempt }) {
                    return Err(bad(format!(
                        "{step} uncertain (attempt {attempt}) from state {:?}",
                        u.state
                    ))
                    .at_unit(step));
                }
                u.state = State::Uncertain { attempt: *attempt };
            }
            EventKind::StepAttemptFailed {
                step,
                attempt,
                retry_at,
                ..
            } => {
                let Some(u) = units.get_mut(step.as_str()) else {
                    return Err(
                        bad(format!("{step} attempt failed but never scheduled")).at_unit(step)
                    );
                };
                if u.state != (State::InFlight { attempt: *attempt }) {
                    return Err(bad(format!(
                        "{step} attempt {attempt} failed from state {:?}",
                        u.state
                    ))
                    .at_unit(step));
                }
                u.state = match retry_at {
                    Some(_) => State::Retrying { attempt: *attempt },
                    None => State::Failed,
                };
            }
            EventKind::StepSucceeded { step, attempt, .. } => {
                if let Some(u) = units.get_mut(step.as_str()) {
                    if u.state == State::Resolved {
                        return Err(
                            bad(format!("{step} succeeded after it was resolved")).at_unit(step)
                        );
                    }
                    if !u.dispatched.contains(attempt) || *attempt > u.attempt {
                        return Err(bad(format!(
                            "{step} succeeded with attempt {attempt}, never dispatched"
                        ))
                        .at_unit(step));
                    }
                    u.state = State::Resolved;
                }
            }
            EventKind::StepFailed { step, .. } => {
                if let Some(u) = units.get_mut(step.as_str()) {
                    if u.state == State::Resolved {
                        return Err(
                            bad(format!("{step} failed after it was resolved")).at_unit(step)
                        );
                    }
                    u.state = State::Resolved;
                }
            }
            EventKind::StaleResultIgnored { step, attempt, .. } => {
                let known = units
                    .get(step.as_str())
                    .is_some_and(|u| u.dispatched.contains(attempt));
                if !known {
                    return Err(bad(format!(
                        "stale result for {step} attempt {attempt}, never dispatched"
                    ))
                    .at_unit(step));
                }
            }
            _ => {}
        }
    }
    Ok(())
}
