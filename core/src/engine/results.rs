//! Task results, reconciled against the history with the seed's rules and
//! reason strings (`003_…`, "Reconciliation").

use super::decide::{attempt_failed, call_for};
use super::effect::Response;
use super::input::{Outcome, Request, RequestId};
use super::state::pattern_matches;
use super::txn::Txn;
use super::{Bug, Engine};
use crate::eval::check_value;
use crate::history::{DispatchState, ErrorInfo, EventKind, StaleOutcome, UnitState};
use serde_json::json;

/// `{"accepted": false, "reason": ...}` for an unknown token.
pub const UNKNOWN_TOKEN: &str = "unknown token (execution finished or token invalid)";
/// … for a failure from an attempt that is not in flight.
pub const STALE_ATTEMPT: &str = "stale attempt";
/// … for a result of a resolved unit.
pub const DUPLICATE: &str = "duplicate result; step already resolved";
/// … for an output that violates the task contract.
pub const CONTRACT: &str = "output violates the task contract";

fn accepted() -> Response {
    Response::ok(200, json!({"accepted": true}))
}

/// `503 NOT_READY` for a token a shared-mode member cannot judge before
/// its reclaim: the worker reports the result again.
fn not_judged_yet() -> Response {
    Response::error(
        503,
        "NOT_READY",
        "this member is taking its executions back after a restart or an outage; \
         report the result again",
    )
}

fn refused(reason: &str) -> Response {
    Response::ok(200, json!({"accepted": false, "reason": reason}))
}

impl Engine {
    pub(super) fn result(&mut self, id: RequestId, request: Request) {
        let Request::Result {
            token,
            outcome,
            patterns,
        } = &request
        else {
            return;
        };
        if let Some(exec_id) = self.result_elsewhere(id, token) {
            if self.executions.get(&exec_id).is_some_and(|e| e.blocked()) && self.owns(&exec_id) {
                // Handed out here, its dispatch being recorded now: judged
                // once that commit is in.
                return self.park_behind(&exec_id, id, request.clone());
            }
            return self.forward(id, request.clone(), &exec_id);
        }
        let Some(t) = self.work.tokens.get(token.as_str()) else {
            // A past delivery of an execution evicted for idleness: read it
            // back, then judge the result as if it had stayed.
            if let Some(owner) = self.evicted_owner(token).map(str::to_owned) {
                if !self.loads.known.absent.contains(&owner)
                    && self.load_first(id, &request, Some(&owner), None)
                {
                    return;
                }
            }
            if self.may_know_later(id) {
                return self.reply(id, not_judged_yet());
            }
            self.refused_unknown(id, token);
            return self.reply(id, refused(UNKNOWN_TOKEN));
        };
        let exec_id = t.execution_id.to_string();
        let unit_name = t.unit.clone();
        let Some(e) = self.executions.get(&exec_id) else {
            return self.reply(id, refused(UNKNOWN_TOKEN));
        };
        if let (Some(patterns), Some(u)) = (patterns, e.proj.units.get(&*unit_name)) {
            if !patterns.iter().any(|p| pattern_matches(p, &u.task)) {
                return self.reply(
                    id,
                    Response::error(
                        403,
                        "FORBIDDEN",
                        format!("this token may not report results for task `{}`", u.task),
                    ),
                );
            }
        }
        if e.blocked() {
            return self.park_behind(&exec_id, id, request);
        }
        if e.proj.status.is_terminal() {
            return self.reply(id, refused(UNKNOWN_TOKEN));
        }
        // A result neither confirms its delivery nor clears it as orphaned:
        // its batch may fail, and a worker that then disappears would leave
        // the attempt in flight forever. While the batch is in flight the
        // execution is blocked, so an orphaned delivery waits; once the
        // result commits the delivery is no longer current and is dropped.
        let mut txn = Txn::default();
        if !self.draft(&mut txn, &exec_id) {
            return self.reply(id, refused(UNKNOWN_TOKEN));
        }
        let (events, response) = {
            let Some(d) = txn.drafts.get(&exec_id) else {
                return;
            };
            let p = &d.proj;
            if p.status.is_terminal() {
                // Ended by a request handled together with this one.
                return self.reply(id, refused(UNKNOWN_TOKEN));
            }
            let wf = &d.def.workflow;
            let Some(u) = p.units.get(&*unit_name) else {
                return self.reply(id, refused(UNKNOWN_TOKEN));
            };
            let Some(dispatch) = u.dispatches.get(token.as_str()) else {
                return self.reply(id, refused(UNKNOWN_TOKEN));
            };
            let attempt = dispatch.attempt;
            let current = dispatch.state == DispatchState::Current
                && matches!(&u.state, UnitState::InFlight { token: t } if **t == **token);
            let stale = |outcome| EventKind::StaleResultIgnored {
                step: unit_name.to_string(),
                attempt,
                outcome,
            };
            let final_now = p.winding_down() && !u.name.compensation;
            let policy = call_for(wf, &u.name)
                .map(|c| c.retry.clone())
                .unwrap_or_default();
            let in_flight = matches!(u.state, UnitState::InFlight { .. });
            let current = current || (in_flight && self.planted(Bug::StaleFailureAccepted));
            let resolved = u.is_resolved() && !self.planted(Bug::DoubleSuccess);
            if resolved {
                (vec![stale(StaleOutcome::Duplicate)], refused(DUPLICATE))
            } else {
                match outcome {
                    Outcome::Output(output) => {
                        let checked = match wf.tasks.get(&*u.task) {
                            Some(contract) => {
                                check_value(&contract.output, output).map_err(|v| v.to_string())
                            }
                            None => Ok(output.clone()),
                        };
                        match checked {
                            Ok(output) => (
                                vec![EventKind::StepSucceeded {
                                    step: unit_name.to_string(),
                                    attempt,
                                    output: output.into(),
                                }],
                                accepted(),
                            ),
                            Err(why) if current => {
                                let err = ErrorInfo {
                                    code: "OUTPUT_CONTRACT_VIOLATION".to_string(),
                                    message: format!("output violates the task contract: {why}"),
                                    retryable: true,
                                };
                                (
                                    attempt_failed(
                                        &unit_name, u, &policy, err, self.now, final_now,
                                    ),
                                    refused(CONTRACT),
                                )
                            }
                            Err(_) => (vec![stale(StaleOutcome::Failure)], refused(CONTRACT)),
                        }
                    }
                    Outcome::Error(err) if current => (
                        attempt_failed(&unit_name, u, &policy, err.clone(), self.now, final_now),
                        accepted(),
                    ),
                    Outcome::Error(_) => {
                        (vec![stale(StaleOutcome::Failure)], refused(STALE_ATTEMPT))
                    }
                }
            }
        };
        let mut seq = 0;
        for kind in events {
            seq = self.push(&mut txn, &exec_id, kind);
        }
        self.settle(&mut txn, &exec_id);
        txn.reply(id, response, Some((exec_id, seq)));
        self.submit(txn);
    }
}
