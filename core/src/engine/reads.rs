//! Reads: an execution as `GET` shows it, the list, the history, the worker
//! sessions, and parked waits.

use super::effect::Response;
use super::input::{ListFilter, Request, RequestId};
use super::state::ParkedWait;
use super::view::ExecutionView;
use super::{rfc3339, Engine};
use crate::history::{DispatchState, Event, Projection};
use serde_json::{json, Value};

/// An execution as `GET /v1/executions/{id}` shows it, as a JSON tree (the
/// engine's own answers keep it typed: [`ExecutionView`]).
pub fn execution_view(p: &Projection) -> Value {
    ExecutionView::of(p).to_json()
}

/// One event as the history API shows it: `{"seq", "at" (RFC 3339),
/// "type", ...fields}`.
pub fn event_view(e: &Event) -> Value {
    let mut v = serde_json::to_value(e).unwrap_or(Value::Null);
    v["at"] = json!(rfc3339(e.at));
    v
}

/// The error code of a [`Request::WaitHeld`] on an execution the engine
/// does not hold. Never sent to a client: the HTTP edge reads the store.
pub const NOT_HELD: &str = "NOT_HELD";

impl Engine {
    fn visible(&self, exec_id: &str) -> Option<&Projection> {
        self.executions
            .get(exec_id)
            .map(|e| &e.proj)
            .filter(|p| p.last_seq > 0)
    }

    /// Parks a read of an execution the engine does not hold until it is
    /// loaded. True when parked.
    fn read_first(&mut self, id: RequestId, exec_id: &str, request: Request) -> bool {
        self.load_first(id, &request, Some(exec_id), None)
    }

    pub(super) fn get_execution(&mut self, id: RequestId, exec_id: &str) {
        let request = Request::GetExecution {
            execution_id: exec_id.to_string(),
        };
        if self.read_first(id, exec_id, request) {
            return;
        }
        let response = match self.visible(exec_id) {
            Some(p) => Response::execution(ExecutionView::of(p)),
            None => Response::error(
                404,
                "UNKNOWN_EXECUTION",
                format!("no execution `{exec_id}`"),
            ),
        };
        self.reply(id, response);
    }

    pub(super) fn list_executions(&mut self, id: RequestId, filter: ListFilter) {
        let limit = filter.limit.unwrap_or(100).clamp(1, 1000);
        let cursor = filter.cursor.as_deref().and_then(|c| {
            let (t, rest) = c.split_once(':')?;
            Some((t.parse::<u64>().ok()?, rest.to_string()))
        });
        let mut rows: Vec<&Projection> = self
            .executions
            .values()
            .map(|e| &e.proj)
            .filter(|p| p.last_seq > 0)
            .filter(|p| filter.status.is_none_or(|s| p.status == s))
            .filter(|p| filter.workflow.as_ref().is_none_or(|w| *p.workflow == **w))
            .filter(|p| filter.version.as_ref().is_none_or(|v| *p.version == **v))
            .filter(|p| {
                filter
                    .id_prefix
                    .as_ref()
                    .is_none_or(|x| p.execution_id.starts_with(x.as_str()))
            })
            .filter(|p| {
                cursor
                    .as_ref()
                    .is_none_or(|(t, i)| (p.created_at, &*p.execution_id) < (*t, i.as_str()))
            })
            .collect();
        rows.sort_by(|a, b| (b.created_at, &b.execution_id).cmp(&(a.created_at, &a.execution_id)));
        let more = rows.len() > limit;
        rows.truncate(limit);
        let next = if more {
            rows.last()
                .map(|p| json!(format!("{}:{}", p.created_at, p.execution_id)))
                .unwrap_or(Value::Null)
        } else {
            Value::Null
        };
        let list: Vec<Value> = rows
            .iter()
            .map(|p| {
                json!({
                    "execution_id": p.execution_id,
                    "workflow": p.workflow,
                    "version": p.version,
                    "status": p.status.as_str(),
                    "parent": p.parent,
                    "created_at": rfc3339(p.created_at),
                    "updated_at": rfc3339(p.updated_at),
                })
            })
            .collect();
        self.reply(
            id,
            Response::ok(200, json!({"executions": list, "next_cursor": next})),
        );
    }

    pub(super) fn get_history(&mut self, id: RequestId, exec_id: &str, after_seq: Option<u64>) {
        let request = Request::History {
            execution_id: exec_id.to_string(),
            after_seq,
        };
        // The history is the store's, in memory or not: read it (what a
        // read sees is committed, as a reply is only sent after commit).
        let response = match self.loads.known.histories.get(exec_id) {
            Some(history) => {
                let after = after_seq.unwrap_or(0);
                let events: Vec<Value> = history
                    .iter()
                    .filter(|ev| ev.seq > after)
                    .map(event_view)
                    .collect();
                Response::ok(200, json!({"events": events}))
            }
            None if !self.loads.known.absent.contains(exec_id) => {
                let executions = vec![exec_id.to_string()];
                self.ask_load(
                    executions,
                    Vec::new(),
                    Some(super::load::Parked::One(id, request)),
                );
                return;
            }
            None => Response::error(
                404,
                "UNKNOWN_EXECUTION",
                format!("no execution `{exec_id}`"),
            ),
        };
        self.reply(id, response);
    }

    /// `GET /v1/workers`: every session the engine holds (a session leaves
    /// when it unregisters or misses its timeout), by session id, with the
    /// deliveries it holds whose outcome the server still awaits. Delivery
    /// tokens are not shown: they are a worker's credential for reporting a
    /// result.
    pub(super) fn list_workers(&mut self, id: RequestId) {
        let sessions: Vec<Value> = self
            .work
            .sessions
            .iter()
            .map(|(session_id, s)| {
                let held: Vec<Value> = s
                    .tokens
                    .iter()
                    .filter_map(|token| {
                        let t = self.work.tokens.get(token)?;
                        let p = &self.executions.get(&t.execution_id)?.proj;
                        let u = p.units.get(&*t.unit)?;
                        let outstanding = !p.status.is_terminal()
                            && !u.is_resolved()
                            && u.dispatches
                                .get(&**token)
                                .is_some_and(|d| d.state != DispatchState::Failed);
                        outstanding.then(|| {
                            json!({
                                "execution_id": t.execution_id,
                                "unit": t.unit,
                                "task": u.task,
                                "attempt": u.attempt,
                                "dispatched_at": rfc3339(t.dispatched_at),
                                "confirmed": t.confirmed,
                            })
                        })
                    })
                    .collect();
                json!({
                    "session_id": session_id,
                    "worker_id": s.worker_id,
                    "task_patterns": s.patterns,
                    "max_tasks": s.max_tasks,
                    "last_seen": rfc3339(s.last_seen),
                    "held": held,
                })
            })
            .collect();
        let body = json!({
            "sessions": sessions,
            "session_timeout_ms": self.config.session_timeout_ms,
        });
        self.reply(id, Response::ok(200, body));
    }

    pub(super) fn wait(&mut self, id: RequestId, exec_id: &str, timeout_ms: u64) {
        let request = Request::Wait {
            execution_id: exec_id.to_string(),
            timeout_ms,
        };
        if self.read_first(id, exec_id, request) {
            return;
        }
        let Some(p) = self.visible(exec_id) else {
            return self.reply(
                id,
                Response::error(
                    404,
                    "UNKNOWN_EXECUTION",
                    format!("no execution `{exec_id}`"),
                ),
            );
        };
        if p.status.is_terminal() || timeout_ms == 0 {
            let view = ExecutionView::of(p);
            return self.reply(id, Response::execution(view));
        }
        self.work.waits.insert(
            id,
            ParkedWait {
                execution_id: exec_id.to_string(),
                deadline: self.now + timeout_ms,
            },
        );
    }

    /// `wait`, if `exec_id` is in memory; else `NOT_HELD` at once.
    pub(super) fn wait_held(&mut self, id: RequestId, exec_id: &str, timeout_ms: u64) {
        if self.visible(exec_id).is_none() {
            return self.reply(
                id,
                Response::error(
                    404,
                    NOT_HELD,
                    format!("`{exec_id}` is not in memory: read the store"),
                ),
            );
        }
        self.wait(id, exec_id, timeout_ms);
    }

    /// Answers parked waits on `exec_id` (it is terminal).
    pub(super) fn finish_waits(&mut self, exec_id: &str) {
        for id in self.work.waits.take(exec_id) {
            if let Some(p) = self.visible(exec_id) {
                let view = ExecutionView::of(p);
                self.reply(id, Response::execution(view));
            }
        }
    }

    /// Answers waits whose deadline passed.
    pub(super) fn expire_waits(&mut self) {
        let now = self.now;
        for id in self.work.waits.due(now) {
            if let Some(w) = self.work.waits.remove(id) {
                let response = match self.visible(&w.execution_id) {
                    Some(p) => Response::execution(ExecutionView::of(p)),
                    None => Response::error(
                        404,
                        "UNKNOWN_EXECUTION",
                        format!("no execution `{}`", w.execution_id),
                    ),
                };
                self.reply(id, response);
            }
        }
    }
}
