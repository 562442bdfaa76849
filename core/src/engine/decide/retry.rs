//! What follows a failed attempt: a retry at `now + backoff`, or the unit's
//! permanent failure.

use crate::history::{ErrorInfo, EventKind, Millis, Unit};
use crate::ir::RetryPolicy;

/// The delay before attempt `attempt + 1`:
/// `min(backoff * factor^(attempt-1), max_backoff)`.
pub fn backoff(policy: &RetryPolicy, attempt: u32) -> Millis {
    let exp = i32::try_from(attempt.saturating_sub(1)).unwrap_or(i32::MAX);
    let delay = policy.backoff_ms as f64 * policy.factor.powi(exp);
    let max = policy.max_backoff_ms as f64;
    if delay.is_finite() && delay < max {
        delay.max(0.0) as Millis
    } else {
        policy.max_backoff_ms
    }
}

/// Events for a failed attempt of `unit` (named `name`): a retry when the
/// error is retryable, attempts remain and `final_now` is false; otherwise
/// the attempt's failure followed by the unit's.
pub fn attempt_failed(
    name: &str,
    unit: &Unit,
    policy: &RetryPolicy,
    error: ErrorInfo,
    now: Millis,
    final_now: bool,
) -> Vec<EventKind> {
    let retryable = error.retryable
        && !policy.non_retryable.contains(&error.code)
        && unit.attempt < policy.max_attempts
        && !final_now;
    if retryable {
        vec![EventKind::StepAttemptFailed {
            step: name.to_string(),
            attempt: unit.attempt,
            error,
            retry_at: Some(now + backoff(policy, unit.attempt)),
        }]
    } else {
        vec![
            EventKind::StepAttemptFailed {
                step: name.to_string(),
                attempt: unit.attempt,
                error: error.clone(),
                retry_at: None,
            },
            EventKind::StepFailed {
                step: name.to_string(),
                error,
            },
        ]
    }
}
