//! The leader lease: one row `(holder, epoch, expires_at)` judged by the
//! database's clock only, and the timing rules a node follows around it.
//! Every time here is ms since the Unix epoch; which clock it comes from is
//! named on each rule.

use super::planted::{ClusterBug, Planted};
use crate::history::Millis;

/// The lease as the database reports it, with the database's own `now`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LeaseState {
    /// The node holding (or last holding) it; empty before the first leader.
    pub holder: String,
    /// The epoch of the current (or last) term; 0 before any.
    pub epoch: u64,
    /// When it expires (database clock).
    pub expires_at_ms: Millis,
    /// The database's `now` when this was read.
    pub db_now_ms: Millis,
}

impl LeaseState {
    /// Whether the lease has run out by the database's clock (nobody leads
    /// until a standby takes it).
    pub fn expired(&self) -> bool {
        self.expires_at_ms <= self.db_now_ms
    }

    /// Time left until it expires, in ms (0 once expired).
    pub fn remaining_ms(&self) -> Millis {
        self.expires_at_ms.saturating_sub(self.db_now_ms)
    }
}

/// The timing rules of one node, from its `--node-timeout`.
#[derive(Debug, Clone, Default)]
pub struct Rules {
    node_timeout_ms: Millis,
    planted: Planted,
}

impl Rules {
    /// The rules for `--node-timeout` of `node_timeout_ms`.
    pub fn new(node_timeout_ms: Millis) -> Rules {
        Rules {
            node_timeout_ms: node_timeout_ms.max(4),
            planted: Planted::default(),
        }
    }

    /// Plants `bug` (simulation teeth only).
    #[cfg(feature = "planted-bugs")]
    pub fn plant(&mut self, bug: ClusterBug) {
        self.planted.insert(bug);
    }

    /// `--node-timeout`: how long a term lasts without a renewal.
    pub fn node_timeout_ms(&self) -> Millis {
        self.node_timeout_ms
    }

    /// How often a leader renews and a standby looks at the lease: a
    /// quarter of `--node-timeout`, so three renewals may fail before the
    /// term runs out.
    pub fn renew_every_ms(&self) -> Millis {
        self.node_timeout_ms / 4
    }

    /// The time against which taking the lease judges `expires_at`: the
    /// database's `now`, never the node's own clock, whose skew would let a
    /// standby take a lease that still runs.
    pub fn expiry_judged_at(&self, db_now_ms: Millis, node_now_ms: Millis) -> Millis {
        if self.planted.has(ClusterBug::LeaseByOwnClock) {
            node_now_ms
        } else {
            db_now_ms
        }
    }

    /// Whether a leader whose last acknowledged renewal was *sent* at
    /// `renewed_at_ms` must step down at `now_ms` (both on its own clock).
    /// Counting from the sending keeps the node's belief shorter than the
    /// database's lease, whatever the answer's delay.
    pub fn lapsed(&self, renewed_at_ms: Millis, now_ms: Millis) -> bool {
        now_ms.saturating_sub(renewed_at_ms) >= self.node_timeout_ms
    }

    /// Whether a node that took the lease answers as leader only once its
    /// recovery finished (always, unless the tooth is planted).
    pub fn serves_after_recovery(&self) -> bool {
        !self.planted.has(ClusterBug::ServeBeforeRecovery)
    }

    /// Whether leader writes check the lease in their own transaction
    /// (always, unless the tooth is planted).
    pub fn fences_writes(&self) -> bool {
        !self.planted.has(ClusterBug::SkipEpochCheck)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_is_expired_by_the_database_clock() {
        let mut l = LeaseState {
            holder: "a".into(),
            epoch: 3,
            expires_at_ms: 1_000,
            db_now_ms: 999,
        };
        assert!(!l.expired());
        assert_eq!(l.remaining_ms(), 1);
        l.db_now_ms = 1_000;
        assert!(l.expired());
        assert_eq!(l.remaining_ms(), 0);
    }

    #[test]
    fn rules_renew_four_times_per_timeout_and_judge_by_the_database() {
        let r = Rules::new(5_000);
        assert_eq!(r.renew_every_ms(), 1_250);
        assert_eq!(r.expiry_judged_at(10, 99_999), 10);
        assert!(!r.lapsed(1_000, 5_999));
        assert!(r.lapsed(1_000, 6_000));
        assert!(r.serves_after_recovery());
        assert!(r.fences_writes());
    }
}
