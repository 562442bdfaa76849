//! Backoff schedules for the SDK's retries: a few attempts for client calls,
//! retry-until-answered with a capped delay for worker traffic.

use std::time::Duration;

/// An exponential backoff: `initial * factor^(n-1)`, capped at `max`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Backoff {
    /// Delay before the second attempt.
    pub initial: Duration,
    /// Growth per attempt.
    pub factor: f64,
    /// Upper bound of any delay.
    pub max: Duration,
}

impl Backoff {
    /// Client calls: 200 ms, 400 ms, … capped at 5 s.
    pub const CLIENT: Backoff = Backoff {
        initial: Duration::from_millis(200),
        factor: 2.0,
        max: Duration::from_secs(5),
    };

    /// Worker traffic: 100 ms doubling up to 5 s.
    pub const WORKER: Backoff = Backoff {
        initial: Duration::from_millis(100),
        factor: 2.0,
        max: Duration::from_secs(5),
    };

    /// The delay after the `failures`-th consecutive failure (from 1).
    pub fn delay(&self, failures: u32) -> Duration {
        let exp = failures.saturating_sub(1).min(60) as i32;
        let secs = self.initial.as_secs_f64() * self.factor.max(1.0).powi(exp);
        let capped = secs.min(self.max.as_secs_f64());
        Duration::from_secs_f64(capped.max(0.0))
    }
}

/// Whether an HTTP status is worth another attempt (429 and 5xx).
pub fn retryable_status(status: u16) -> bool {
    status == 429 || (500..600).contains(&status)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_grow_and_cap() {
        let b = Backoff {
            initial: Duration::from_millis(100),
            factor: 2.0,
            max: Duration::from_millis(500),
        };
        assert_eq!(b.delay(1), Duration::from_millis(100));
        assert_eq!(b.delay(2), Duration::from_millis(200));
        assert_eq!(b.delay(3), Duration::from_millis(400));
        assert_eq!(b.delay(4), Duration::from_millis(500));
        assert_eq!(b.delay(1000), Duration::from_millis(500));
    }

    #[test]
    fn statuses() {
        assert!(retryable_status(429));
        assert!(retryable_status(503));
        assert!(!retryable_status(404));
        assert!(!retryable_status(200));
    }
}
