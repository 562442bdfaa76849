//! API-level idempotency (seed `002_…`): replaying stored responses,
//! refusing a reused key, serializing racing requests, and recording 2xx
//! answers in the same batch as their effect. Records are not kept in
//! memory once committed: a request carrying a key waits for the key's
//! record to be loaded from the store ([`super::load`]).

use super::batch::IdempotencyRecord;
use super::effect::Response;
use super::input::{IdempotencyScope, Request, RequestId};
use super::txn::Txn;
use super::Engine;

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
        if self.keys.inflight.contains_key(&scope.key) {
            self.keys
                .waiting
                .entry(scope.key.clone())
                .or_default()
                .push((id, request.clone()));
            return Gate::Done;
        }
        let now = self.now;
        let Some(known) = self.loads.known.keys.get(&scope.key) else {
            // Not loaded yet (callers load it with the execution first).
            self.ask_load(
                Vec::new(),
                vec![scope.key.clone()],
                Some(super::load::Parked::One(id, request.clone())),
            );
            return Gate::Done;
        };
        match known {
            Some(rec) if rec.expires_at > now => {
                let response = if rec.fingerprint == scope.fingerprint {
                    Response {
                        status: rec.status,
                        body: rec.body.clone().into(),
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
            _ => Gate::Proceed,
        }
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
            body: (*response.body).clone(),
            expires_at: self.now + self.config.idempotency_ttl_ms,
        });
    }
}
