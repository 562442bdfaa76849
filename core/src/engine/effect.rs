//! What [`super::Engine::handle`] asks its driver to do.

use super::batch::Batch;
use super::input::RequestId;
use crate::history::{Event, Millis};
use serde::{Deserialize, Serialize};

/// One effect. A driver executes every effect returned by `handle`, in order.
#[derive(Debug, Clone, PartialEq)]
pub enum Effect {
    /// Write this batch atomically, then feed [`super::Input::Stored`].
    Append(Batch),
    /// Read these executions' histories from the store and feed
    /// [`super::Input::Reloaded`].
    Reload {
        /// Execution ids.
        executions: Vec<String>,
    },
    /// Read these executions (their whole histories) and the live
    /// idempotency records of these keys from the store, then feed
    /// [`super::Input::Loaded`] with the same `load`. A request that needs
    /// them waits meanwhile. Reads only: it may run concurrently with
    /// commits.
    Load {
        /// Echo it in `Loaded`.
        load: super::LoadId,
        /// Execution ids.
        executions: Vec<String>,
        /// Scoped idempotency keys ([`super::IdempotencyScope::key`]).
        idempotency: Vec<String>,
    },
    /// Answer a request (a long poll's tasks included).
    Reply {
        /// The request.
        request: RequestId,
        /// The answer.
        response: Response,
    },
    /// Feed [`super::Input::Tick`] at (or after) this time. Only the latest
    /// `WakeAt` matters; it is emitted whenever the earliest deadline changes.
    WakeAt(Millis),
    /// These events are now committed (for `orbit logs --follow`, metrics
    /// and span export).
    Committed {
        /// Execution id.
        execution_id: String,
        /// The newly committed events.
        events: Vec<Event>,
    },
}

/// An HTTP-like answer: status and JSON body. Error bodies are
/// `{"error": {"code", "message"}}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Response {
    /// HTTP status code.
    pub status: u16,
    /// JSON body.
    pub body: serde_json::Value,
    /// True when this is a stored answer replayed for an idempotency key
    /// (header `Idempotent-Replayed: true`).
    pub replayed: bool,
}

impl Response {
    /// A success answer.
    pub fn ok(status: u16, body: serde_json::Value) -> Response {
        Response {
            status,
            body,
            replayed: false,
        }
    }

    /// An error answer `{"error": {"code", "message"}}`.
    pub fn error(status: u16, code: &str, message: impl Into<String>) -> Response {
        Response {
            status,
            body: serde_json::json!({"error": {"code": code, "message": message.into()}}),
            replayed: false,
        }
    }

    /// The error code of an error answer.
    pub fn error_code(&self) -> Option<&str> {
        self.body.get("error")?.get("code")?.as_str()
    }
}

/// A task as a worker receives it (seed `003_…`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Task {
    /// The delivery's token.
    pub token: String,
    /// Execution id.
    pub execution_id: String,
    /// Workflow name.
    pub workflow: String,
    /// Workflow version.
    pub workflow_version: String,
    /// The unit (`reserve[2]`, `compensate:charge`).
    pub step_id: String,
    /// Task name.
    pub task_name: String,
    /// The task contract's version.
    pub contract_version: String,
    /// The task's input.
    pub input: serde_json::Value,
    /// The unit's idempotency key.
    pub idempotency_key: String,
    /// Attempt number.
    pub attempt: u32,
    /// True for a redelivery of an uncertain attempt.
    pub redelivery: bool,
    /// W3C trace context naming the attempt's span as parent, so a worker's
    /// own spans join the execution's trace ([`crate::trace`]).
    pub traceparent: String,
}

impl Task {
    /// The reply body of a poll handing out `tasks`: `{"tasks": [...]}`,
    /// built by moving each task's fields into the JSON tree (the same
    /// JSON its `Serialize` gives, without copying every string and input).
    pub fn poll_body(tasks: Vec<Task>) -> serde_json::Value {
        let tasks = tasks.into_iter().map(Task::into_json).collect();
        let mut body = serde_json::Map::new();
        body.insert("tasks".to_owned(), serde_json::Value::Array(tasks));
        serde_json::Value::Object(body)
    }

    fn into_json(self) -> serde_json::Value {
        use serde_json::Value;
        let fields: [(&str, Value); 12] = [
            ("token", Value::String(self.token)),
            ("execution_id", Value::String(self.execution_id)),
            ("workflow", Value::String(self.workflow)),
            ("workflow_version", Value::String(self.workflow_version)),
            ("step_id", Value::String(self.step_id)),
            ("task_name", Value::String(self.task_name)),
            ("contract_version", Value::String(self.contract_version)),
            ("input", self.input),
            ("idempotency_key", Value::String(self.idempotency_key)),
            ("attempt", Value::from(self.attempt)),
            ("redelivery", Value::Bool(self.redelivery)),
            ("traceparent", Value::String(self.traceparent)),
        ];
        Value::Object(fields.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::Task;
    use serde_json::json;

    #[test]
    fn a_poll_body_is_the_tasks_serialized() {
        let task = |n: u32| Task {
            token: format!("t{n}"),
            execution_id: "e".into(),
            workflow: "W".into(),
            workflow_version: "1.0.0".into(),
            step_id: "s[0]".into(),
            task_name: "x.y".into(),
            contract_version: "2.0.0".into(),
            input: json!({"n": n, "list": [1, null, "x"]}),
            idempotency_key: "e/s[0]".into(),
            attempt: n,
            redelivery: n.is_multiple_of(2),
            traceparent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".into(),
        };
        let tasks = vec![task(1), task(2)];
        assert_eq!(Task::poll_body(tasks.clone()), json!({ "tasks": tasks }));
        assert_eq!(Task::poll_body(Vec::new()), json!({"tasks": []}));
    }
}
