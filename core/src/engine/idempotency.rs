//! API-level idempotency (seed `002_…`): replaying stored responses,
//! refusing a reused key, serializing racing requests, and recording 2xx
//! answers in the same batch as their effect.

use super::batch::IdempotencyRecord;
use super::effect::Response;
use super::input::{IdempotencyScope, Request, RequestId};
use super::txn::Txn;
use super::Engine;

/// Smallest table size at which expired records are swept.
pub(super) const IDEM_SWEEP_MIN: usize = 1024;

/// What to do with a creating request before running it.
pub(super) enum Gate {
    /// Run it.
    Proceed,
    /// Answered (replayed or refused) or queued behind a racing request.
    Done,
}

impl Engine {
    /// Checks the idempotency scope of a creating request.
    pub(super) fn gate(
        &mut self,
        id: RequestId,
        scope: &Option<IdempotencyScope>,
        request: &Request,
    ) -> Gate {
        let Some(scope) = scope else {
            return Gate::Proceed;
        };
        self.sweep_idempotency();
        if self.idem_inflight.contains_key(&scope.key) {
            self.idem_waiting
                .entry(scope.key.clone())
                .or_default()
                .push((id, request.clone()));
            return Gate::Done;
        }
        let now = self.now;
        match self.idempotency.get(&scope.key) {
            Some(rec) if rec.expires_at > now => {
                let response = if rec.fingerprint == scope.fingerprint {
                    Response {
                        status: rec.status,
                        body: rec.body.clone(),
                        replayed: true,
                    }
                } else {
                    Response::error(
                        409,
                        "IDEMPOTENCY_KEY_REUSED",
                        "this Idempotency-Key was used with a different request body",
                    )
                };
                self.reply(id, response);
                Gate::Done
            }
            Some(_) => {
                self.idempotency.remove(&scope.key);
                Gate::Proceed
            }
            None => Gate::Proceed,
        }
    }

    /// Forgets expired records once the table has doubled since the last
    /// sweep (amortized O(1) per request; the store purges its own copy).
    fn sweep_idempotency(&mut self) {
        if self.idempotency.len() < self.idem_sweep_at {
            return;
        }
        let now = self.now;
        self.idempotency.retain(|_, r| r.expires_at > now);
        self.idem_sweep_at = (self.idempotency.len() * 2).max(IDEM_SWEEP_MIN);
    }

    /// Records a 2xx answer in `txn` (nothing for other statuses).
    pub(super) fn record(
        &self,
        txn: &mut Txn,
        scope: &Option<IdempotencyScope>,
        response: &Response,
    ) {
        let Some(scope) = scope else { return };
        if !(200..300).contains(&response.status) {
            return;
        }
        txn.idempotency.push(IdempotencyRecord {
            key: scope.key.clone(),
            fingerprint: scope.fingerprint.clone(),
            status: response.status,
            body: response.body.clone(),
            expires_at: self.now + self.config.idempotency_ttl_ms,
        });
    }
}
