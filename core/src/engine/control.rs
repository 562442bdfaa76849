//! Signals and cancellation of running executions.

use super::effect::Response;
use super::idempotency::Gate;
use super::input::{IdempotencyScope, Request, RequestId};
use super::txn::Txn;
use super::Engine;
use crate::history::EventKind;
use serde_json::json;

fn unknown(exec_id: &str) -> Response {
    Response::error(
        404,
        "UNKNOWN_EXECUTION",
        format!("no execution `{exec_id}`"),
    )
}

fn finished(exec_id: &str) -> Response {
    Response::error(
        409,
        "EXECUTION_FINISHED",
        format!("execution `{exec_id}` has already finished"),
    )
}

impl Engine {
    /// Common checks: known (loaded from the store first when not in
    /// memory, with the request's idempotency record), not blocked (else
    /// queued). Returns true when the request may proceed.
    fn control_gate(
        &mut self,
        id: RequestId,
        exec_id: &str,
        request: &Request,
        scope: Option<&IdempotencyScope>,
    ) -> bool {
        if self.elsewhere(id, exec_id) {
            // Another node's (or nobody's): its owner's inbox, once the
            // request's key is known.
            if let Gate::Proceed = self.gate(id, &scope.cloned(), request) {
                self.forward(id, request.clone(), exec_id);
            }
            return false;
        }
        let Some(e) = self.executions.get(exec_id) else {
            if !self.load_first(id, request, Some(exec_id), scope) {
                self.reply(id, unknown(exec_id));
            }
            return false;
        };
        if e.blocked() {
            self.park_behind(exec_id, id, request.clone());
            return false;
        }
        if e.proj.last_seq == 0 {
            self.reply(id, unknown(exec_id));
            return false;
        }
        !self.load_first(id, request, None, scope)
    }

    pub(super) fn signal(&mut self, id: RequestId, request: Request) {
        let Request::Signal {
            execution_id,
            name,
            payload,
            idempotency,
        } = &request
        else {
            return;
        };
        if !self.control_gate(id, execution_id, &request, idempotency.as_ref()) {
            return;
        }
        if let Gate::Done = self.gate(id, idempotency, &request) {
            return;
        }
        if self
            .executions
            .get(execution_id)
            .is_some_and(|e| e.proj.status.is_terminal())
        {
            return self.reply(id, finished(execution_id));
        }
        let mut txn = Txn::default();
        if !self.draft(&mut txn, execution_id) {
            return self.reply(id, unknown(execution_id));
        }
        let seq = self.push(
            &mut txn,
            execution_id,
            EventKind::SignalReceived {
                name: name.clone(),
                payload: payload.clone(),
            },
        );
        self.settle(&mut txn, execution_id);
        let response = Response::ok(200, json!({"seq": seq}));
        self.record(&mut txn, idempotency, &response);
        txn.reply(id, response, Some((execution_id.clone(), seq)));
        self.submit(txn);
    }

    pub(super) fn cancel(&mut self, id: RequestId, request: Request) {
        let Request::Cancel {
            execution_id,
            reason,
            idempotency,
        } = &request
        else {
            return;
        };
        if !self.control_gate(id, execution_id, &request, idempotency.as_ref()) {
            return;
        }
        if let Gate::Done = self.gate(id, idempotency, &request) {
            return;
        }
        let Some(e) = self.executions.get(execution_id) else {
            return self.reply(id, unknown(execution_id));
        };
        if e.proj.status.is_terminal() {
            return self.reply(id, finished(execution_id));
        }
        let response = Response::ok(
            202,
            json!({"execution_id": execution_id, "cancel_requested": true}),
        );
        let mut txn = Txn::default();
        if e.proj.cancel.is_some() {
            self.record(&mut txn, idempotency, &response);
            txn.reply(id, response, None);
            return self.submit(txn);
        }
        if !self.draft(&mut txn, execution_id) {
            return self.reply(id, unknown(execution_id));
        }
        let seq = self.cancel_events(&mut txn, execution_id, reason.clone());
        self.settle(&mut txn, execution_id);
        self.record(&mut txn, idempotency, &response);
        txn.reply(id, response, Some((execution_id.clone(), seq)));
        self.submit(txn);
    }
}
