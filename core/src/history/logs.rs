//! `orbit logs`: one line per event, exactly as seed `003_…` prints them
//! (`+ 39ms #4 StepDispatched step=work attempt=1 worker_id=flaky-1`).
//!
//! Offsets count from the first event: whole milliseconds below one second,
//! else seconds with one decimal, tenths rounded half up.

use super::event::{Event, EventKind, Millis, StaleOutcome};
use super::CompensationReason;

/// Formats a duration offset: `39ms`, `5.1s`.
pub fn offset(ms: Millis) -> String {
    if ms < 1000 {
        format!("{ms}ms")
    } else {
        let tenths = (ms + 50) / 100;
        format!("{}.{}s", tenths / 10, tenths % 10)
    }
}

/// Formats a whole history, one line per event, each ending in `\n`.
pub fn format_history(execution_id: &str, events: &[Event]) -> String {
    let origin = events.first().map(|e| e.at).unwrap_or(0);
    let mut out = String::new();
    for e in events {
        out.push_str(&format_event(execution_id, origin, e));
        out.push('\n');
    }
    out
}

/// Formats one event; `origin` is the time of the history's first event.
pub fn format_event(execution_id: &str, origin: Millis, event: &Event) -> String {
    let rel = |t: Millis| format!("+{}", offset(t.saturating_sub(origin)));
    let mut fields: Vec<(&str, String)> = Vec::new();
    let name = match &event.kind {
        EventKind::WorkflowCreated { .. } => "WorkflowCreated",
        EventKind::WorkflowStarted {} => "WorkflowStarted",
        EventKind::WorkflowCompleted { .. } => "WorkflowCompleted",
        EventKind::WorkflowCancelled {} => "WorkflowCancelled",
        EventKind::StepFanOut { step, items } => {
            fields.push(("step", step.clone()));
            fields.push(("items", items.len().to_string()));
            "StepFanOut"
        }
        EventKind::StepScheduled {
            step,
            attempt,
            redelivery,
            idempotency_key,
            ..
        } => {
            fields.push(("step", step.clone()));
            fields.push(("attempt", attempt.to_string()));
            if *redelivery {
                fields.push(("redelivery", "true".to_string()));
            }
            if *idempotency_key != format!("{execution_id}/{step}") {
                fields.push(("key", idempotency_key.clone()));
            }
            "StepScheduled"
        }
        EventKind::StepDispatched {
            step,
            attempt,
            worker_id,
            ..
        } => {
            fields.push(("step", step.clone()));
            fields.push(("attempt", attempt.to_string()));
            fields.push(("worker_id", worker_id.clone()));
            "StepDispatched"
        }
        EventKind::StepAttemptUncertain {
            step,
            attempt,
            reason,
        } => {
            fields.push(("step", step.clone()));
            fields.push(("attempt", attempt.to_string()));
            fields.push(("reason", reason.clone()));
            "StepAttemptUncertain"
        }
        EventKind::StepSucceeded { step, attempt, .. } => {
            fields.push(("step", step.clone()));
            fields.push(("attempt", attempt.to_string()));
            "StepSucceeded"
        }
        EventKind::StepAttemptFailed {
            step,
            attempt,
            error,
            retry_at,
        } => {
            fields.push(("step", step.clone()));
            fields.push(("attempt", attempt.to_string()));
            fields.push(("code", error.code.clone()));
            if let Some(t) = retry_at {
                fields.push(("retry_at", rel(*t)));
            }
            "StepAttemptFailed"
        }
        EventKind::StepFailed { step, error } => {
            fields.push(("step", step.clone()));
            fields.push(("code", error.code.clone()));
            "StepFailed"
        }
        EventKind::StepSkipped { step } => {
            fields.push(("step", step.clone()));
            "StepSkipped"
        }
        EventKind::StaleResultIgnored {
            step,
            attempt,
            outcome,
        } => {
            fields.push(("step", step.clone()));
            fields.push(("attempt", attempt.to_string()));
            let o = match outcome {
                StaleOutcome::Failure => "failure",
                StaleOutcome::Duplicate => "duplicate",
            };
            fields.push(("outcome", o.to_string()));
            "StaleResultIgnored"
        }
        EventKind::TimerStarted { step, fire_at } => {
            fields.push(("step", step.clone()));
            fields.push(("fire_at", rel(*fire_at)));
            "TimerStarted"
        }
        EventKind::TimerFired { step, .. } => {
            fields.push(("step", step.clone()));
            "TimerFired"
        }
        EventKind::SignalReceived { name, .. } => {
            fields.push(("name", name.clone()));
            fields.push(("seq", event.seq.to_string()));
            "SignalReceived"
        }
        EventKind::SignalConsumed { step, signal_seq } => {
            fields.push(("step", step.clone()));
            fields.push(("signal_seq", signal_seq.to_string()));
            "SignalConsumed"
        }
        EventKind::ChildStarted { step, child_id } => {
            fields.push(("step", step.clone()));
            fields.push(("child_id", child_id.clone()));
            "ChildStarted"
        }
        EventKind::ChildCompleted { step, child_id, .. } => {
            fields.push(("step", step.clone()));
            fields.push(("child_id", child_id.clone()));
            "ChildCompleted"
        }
        EventKind::ChildFailed { step, child_id, .. } => {
            fields.push(("step", step.clone()));
            fields.push(("child_id", child_id.clone()));
            "ChildFailed"
        }
        EventKind::CompensationStarted { reason, units } => {
            let r = match reason {
                CompensationReason::Failed => "failed",
                CompensationReason::Cancelled => "cancelled",
            };
            fields.push(("reason", r.to_string()));
            fields.push(("units", units.join(",")));
            "CompensationStarted"
        }
        EventKind::WorkflowCancelRequested { reason } => {
            if let Some(r) = reason {
                fields.push(("reason", r.clone()));
            }
            "WorkflowCancelRequested"
        }
        EventKind::WorkflowFailed { error } => {
            fields.push(("code", error.code.clone()));
            if let Some(s) = &error.step {
                fields.push(("step", s.clone()));
            }
            "WorkflowFailed"
        }
    };
    let mut line = format!(
        "+ {} #{} {}",
        offset(event.at.saturating_sub(origin)),
        event.seq,
        name
    );
    for (k, v) in fields {
        line.push(' ');
        line.push_str(k);
        line.push('=');
        line.push_str(&v);
    }
    line
}
