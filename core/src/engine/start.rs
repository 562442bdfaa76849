//! Starting executions: id validation or generation, idempotent starts with
//! an existing id, the input contract, `requires_idempotency_key`, and
//! admission.

use super::batch::DefinitionRecord;
use super::effect::Response;
use super::idempotency::Gate;
use super::input::{Request, RequestId, Start};
use super::txn::Txn;
use super::Engine;
use crate::eval::{check_value, conforms};
use crate::history::EventKind;
use crate::trace::TraceParent;
use serde_json::json;
use std::cmp::Ordering;
use std::sync::Arc;

/// True for a valid client-chosen execution id: 1–128 of `A-Za-z0-9_:-`.
pub fn valid_execution_id(id: &str) -> bool {
    (1..=128).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b':' || b == b'-')
}

/// Semver order (`1.10.0` > `1.9.0`; a pre-release sorts before its release).
pub fn semver_cmp(a: &str, b: &str) -> Ordering {
    fn parts(v: &str) -> (Vec<u64>, Option<&str>) {
        let (core, pre) = match v.split_once('-') {
            Some((c, p)) => (c, Some(p)),
            None => (v.split('+').next().unwrap_or(v), None),
        };
        (
            core.split('.').map(|p| p.parse().unwrap_or(0)).collect(),
            pre,
        )
    }
    let (ca, pa) = parts(a);
    let (cb, pb) = parts(b);
    ca.cmp(&cb).then_with(|| match (pa, pb) {
        (None, None) => Ordering::Equal,
        (None, Some(_)) => Ordering::Greater,
        (Some(_), None) => Ordering::Less,
        (Some(x), Some(y)) => x.cmp(y),
    })
}

impl Engine {
    fn lookup_workflow(&self, name: &str, version: Option<&str>) -> Option<Arc<DefinitionRecord>> {
        match version {
            Some(v) => self
                .registry
                .by_name
                .get(&(name.to_string(), v.to_string()))
                .cloned(),
            None => self
                .registry
                .by_name
                .values()
                .filter(|d| d.workflow.name == name)
                .max_by(|a, b| semver_cmp(&a.workflow.version, &b.workflow.version))
                .cloned(),
        }
    }

    /// A `Request::Start`. The request is kept whole, its fields read in
    /// place: the paths that park it, and an unread create (which may run
    /// again), keep the request itself rather than a copy of its input.
    pub(super) fn start(&mut self, id: RequestId, request: Request) {
        let Request::Start(start) = &request else {
            return self.reply(id, Response::error(500, "INTERNAL", "not a start"));
        };
        if let Some(exec_id) = &start.execution_id {
            if !valid_execution_id(exec_id) {
                return self.reply(
                    id,
                    Response::error(
                        400,
                        "INVALID_EXECUTION_ID",
                        "an execution id is 1-128 characters of A-Z a-z 0-9 _ : -",
                    ),
                );
            }
            if self.executions.get(exec_id).is_some_and(|e| e.blocked()) {
                let exec_id = exec_id.clone();
                return self.park_behind(&exec_id, id, request);
            }
            // Given up (dropped, fenced) while a batch of it was in flight,
            // a create say: this start waits for that batch, or a second
            // create of the id would be in flight beside it.
            if !self.executions.contains_key(exec_id) {
                if let Some(batch) = self.given_up_batch(exec_id) {
                    self.writes
                        .after
                        .entry(batch)
                        .or_default()
                        .push((id, request));
                    return;
                }
            }
        }
        // An id the engine does not hold may be a finished execution. A
        // start that would create it is written without asking the store
        // first: the store refuses the create if the id exists, and the
        // start then runs again on the stored execution. Any other answer
        // (an unknown workflow, a bad input) depends on whether the id
        // exists, and a keyed start needs its key's record: those read
        // first.
        let unread = self.creates_unread(start);
        if !unread
            && self.load_first(
                id,
                &request,
                start.execution_id.as_deref(),
                start.idempotency.as_ref(),
            )
        {
            return;
        }
        if let Gate::Done = self.gate(id, &start.idempotency, &request) {
            return;
        }
        // An existing id is answered from the execution itself, whatever
        // is registered now.
        if let Some(exec_id) = &start.execution_id {
            let held = self
                .executions
                .get(exec_id)
                .filter(|e| e.proj.last_seq > 0)
                .map(|e| (&*e.proj.workflow, &*e.proj.version));
            if let Some((workflow, version)) = held.or_else(|| {
                let (w, v) = self.loads.known.foreign.get(exec_id)?;
                Some((w.as_str(), v.as_str()))
            }) {
                let same = *workflow == start.workflow
                    && start.version.as_ref().is_none_or(|v| v == version);
                let response = if same {
                    Response::ok(200, json!({"execution_id": exec_id, "created": false}))
                } else {
                    Response::error(
                        409,
                        "EXECUTION_EXISTS",
                        format!(
                            "execution `{exec_id}` exists for workflow {workflow} version {version}"
                        ),
                    )
                };
                let mut txn = Txn::default();
                self.record(&mut txn, &start.idempotency, &response);
                txn.reply(id, response, None);
                return self.submit(txn);
            }
        }
        let Some(def) = self.lookup_workflow(&start.workflow, start.version.as_deref()) else {
            if self.definitions_first(id, &request) {
                return;
            }
            let what = match &start.version {
                Some(v) => format!("{} version {v}", start.workflow),
                None => start.workflow.clone(),
            };
            return self.reply(
                id,
                Response::error(
                    404,
                    "UNKNOWN_WORKFLOW",
                    format!("no workflow {what} is registered"),
                ),
            );
        };
        if def.workflow.requires_idempotency_key
            && start.idempotency.is_none()
            && start.execution_id.is_none()
        {
            return self.reply(
                id,
                Response::error(
                    400,
                    "IDEMPOTENCY_KEY_REQUIRED",
                    format!(
                        "workflow {} requires an Idempotency-Key header or a client-chosen execution_id",
                        def.workflow.name
                    ),
                ),
            );
        }
        let input = match check_value(&def.workflow.input, &start.input) {
            Ok(v) => v,
            Err(v) => {
                return self.reply(
                    id,
                    Response::error(400, "INPUT_CONTRACT_VIOLATION", format!("input: {v}")),
                )
            }
        };
        let exec_id = match start.execution_id.clone() {
            Some(x) => x,
            None => self.ids.next_id(),
        };
        let mut txn = Txn::default();
        self.draft_new(&mut txn, &exec_id, def.clone());
        let mut seq = self.push(
            &mut txn,
            &exec_id,
            EventKind::WorkflowCreated {
                workflow: def.workflow.name.clone(),
                version: def.workflow.version.clone(),
                definition_hash: def.definition_hash.clone(),
                input,
                parent: None,
                traceparent: start
                    .traceparent
                    .as_deref()
                    .and_then(TraceParent::parse)
                    .map(|t| t.to_string()),
            },
        );
        if self.can_admit(&def.workflow) && !self.pending_ahead(&def.workflow) {
            // The first steps are scheduled in the start's own batch, as
            // an admitted pending execution's are: one commit instead of
            // two before its first task can be handed out.
            seq = self.push(&mut txn, &exec_id, EventKind::WorkflowStarted {});
            self.settle(&mut txn, &exec_id);
        }
        let response = Response::ok(201, json!({"execution_id": exec_id, "created": true}));
        self.record(&mut txn, &start.idempotency, &response);
        if unread {
            txn.unread_creates.push((exec_id.clone(), id, request));
        }
        txn.reply(id, response, Some((exec_id, seq)));
        self.submit(txn);
    }

    /// True when `start` creates a client-chosen id the engine neither
    /// holds, nor evicted (that one exists: it is read back, as if it had
    /// stayed), nor knows to be absent, and would create it whether or not
    /// the store holds it: no Idempotency-Key, a registered workflow, a
    /// valid input.
    fn creates_unread(&self, start: &Start) -> bool {
        let Some(exec_id) = &start.execution_id else {
            return false;
        };
        start.idempotency.is_none()
            && !self.executions.contains_key(exec_id)
            && !self.idle.evicted.contains_key(exec_id)
            && !self.loads.known.absent.contains(exec_id)
            && !self.loads.known.foreign.contains_key(exec_id)
            && self
                .lookup_workflow(&start.workflow, start.version.as_deref())
                .is_some_and(|def| conforms(&def.workflow.input, &start.input))
    }
}

#[cfg(test)]
mod tests {
    use super::{semver_cmp, valid_execution_id};
    use std::cmp::Ordering;

    #[test]
    fn ids() {
        assert!(valid_execution_id("order-1002:a_b"));
        assert!(!valid_execution_id(""));
        assert!(!valid_execution_id("a.b"));
        assert!(!valid_execution_id(&"x".repeat(129)));
        assert!(valid_execution_id(&"x".repeat(128)));
    }

    #[test]
    fn semver() {
        assert_eq!(semver_cmp("1.10.0", "1.9.0"), Ordering::Greater);
        assert_eq!(semver_cmp("1.0.0-rc1", "1.0.0"), Ordering::Less);
        assert_eq!(semver_cmp("2.0.0", "2.0.0"), Ordering::Equal);
    }
}
