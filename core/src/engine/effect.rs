//! What [`super::Engine::handle`] asks its driver to do.

use super::batch::Batch;
use super::input::RequestId;
use super::json::Object;
use super::view::ExecutionView;
use crate::history::{Event, Millis};
use serde::{Deserialize, Serialize};
use std::sync::Arc;

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
        /// The newly committed events (those the batch wrote, shared with
        /// it).
        events: std::sync::Arc<[Event]>,
    },
    /// Shared cluster mode: store a command for an execution this node
    /// does not own in its owner's inbox (`shared::Store::send`), then feed
    /// [`super::Input::Sent`].
    Send {
        /// Echo it in `Sent`.
        send: super::SendId,
        /// The execution.
        execution_id: String,
        /// What the entry asks.
        kind: crate::store::shared::Kind,
        /// Its payload.
        body: serde_json::Value,
    },
    /// Shared cluster mode: claim the oldest queued task for a poll
    /// (`shared::Store::claim`), then feed [`super::Input::Claimed`].
    Claim {
        /// Echo it in `Claimed`.
        claim: super::ClaimId,
        /// The poll (node, session, token, task names, worker).
        poll: crate::store::shared::Poll,
    },
    /// Shared cluster mode: a signal went to another member's inbox as
    /// entry `entry`: once that entry is gone, find the seq of the last
    /// `SignalReceived` of `execution_id` with this name and payload, and
    /// feed [`super::Input::SignalFound`] (`None` while the entry is still
    /// there, or when the look failed).
    FindSignal {
        /// Echo it.
        watch: u64,
        /// The owner the entry was addressed to.
        owner: String,
        /// The entry.
        entry: i64,
        /// The execution.
        execution_id: String,
        /// The signal's name.
        name: String,
        /// Its payload.
        payload: serde_json::Value,
    },
    /// Shared cluster mode: read every registered definition and feed
    /// [`super::Input::Definitions`] (a request names a workflow, or an
    /// adopted execution a definition, deployed through another node).
    ReadDefinitions,
    /// Shared cluster mode: an entry fed with [`super::Input::Inbox`] is
    /// done: applied (its deletion committed with what it caused), or not
    /// (nothing written: feed it again when it is read again).
    InboxDone {
        /// The entry.
        entry: i64,
        /// Whether it was applied.
        applied: bool,
    },
}

/// An HTTP-like answer: status and JSON body. Error bodies are
/// `{"error": {"code", "message"}}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Response {
    /// HTTP status code.
    pub status: u16,
    /// JSON body.
    pub body: Body,
    /// True when this is a stored answer replayed for an idempotency key
    /// (header `Idempotent-Replayed: true`).
    pub replayed: bool,
}

impl Response {
    /// A success answer.
    pub fn ok(status: u16, body: serde_json::Value) -> Response {
        Response {
            status,
            body: Body::from(body),
            replayed: false,
        }
    }

    /// The `200` answer of a poll handing out `tasks`: `{"tasks": [...]}`,
    /// kept typed until the edge serializes it.
    pub fn tasks(tasks: Vec<Task>) -> Response {
        Response {
            status: 200,
            body: Body::tasks(tasks),
            replayed: false,
        }
    }

    /// The `200` answer showing an execution, kept typed until the edge
    /// serializes it.
    pub fn execution(view: ExecutionView) -> Response {
        Response {
            status: 200,
            body: Body::typed(Typed::Execution(view)),
            replayed: false,
        }
    }

    /// An error answer `{"error": {"code", "message"}}`.
    pub fn error(status: u16, code: &str, message: impl Into<String>) -> Response {
        Response {
            status,
            body: Body::from(
                serde_json::json!({"error": {"code": code, "message": message.into()}}),
            ),
            replayed: false,
        }
    }

    /// The error code of an error answer (a typed body, a hand-out or an
    /// execution's view, is never one: it is not built to look).
    pub fn error_code(&self) -> Option<&str> {
        if self.body.is_typed() {
            return None;
        }
        self.body.get("error")?.get("code")?.as_str()
    }
}

/// A reply's JSON body. Most answers are JSON trees; a poll's hand-out
/// (typed [`Task`]s) and an execution's view ([`ExecutionView`]) stay typed,
/// serialized once, where the answer leaves the process ([`Serialize`]
/// writes the same JSON the tree would hold).
///
/// It reads as a [`serde_json::Value`] (`Deref`): for a typed body the tree
/// is built on the first look, and a mutable look turns the body into that
/// tree for good. [`Body::field`] and [`Body::insert`] read and add fields
/// of a hand-out without building it.
#[derive(Clone, Default)]
pub struct Body {
    /// The tree (`Null` while `typed` holds the body).
    json: serde_json::Value,
    /// The answer as the engine made it, untouched since.
    typed: Option<Box<Typed>>,
    /// The tree of `typed`, once looked at.
    built: std::sync::OnceLock<serde_json::Value>,
}

/// The answers kept typed (a body holds one in a `Box`, so the variants'
/// sizes do not add to every reply's).
#[derive(Clone)]
#[allow(clippy::large_enum_variant)]
enum Typed {
    HandOut(HandOut),
    Execution(ExecutionView),
}

impl Typed {
    /// The same JSON as a tree.
    fn into_tree(self) -> serde_json::Value {
        match self {
            Typed::HandOut(h) => h.into_tree(),
            Typed::Execution(v) => v.to_json(),
        }
    }
}

/// A poll's answer kept typed: `{"tasks": [...], ...beside}`.
#[derive(Clone, PartialEq, Serialize)]
struct HandOut {
    tasks: Vec<Task>,
    /// Fields beside `tasks` (the answers to the results a poll carried).
    #[serde(flatten)]
    beside: serde_json::Map<String, serde_json::Value>,
}

impl HandOut {
    /// The same JSON as its `Serialize` gives, written by hand (see
    /// [`super::json`]).
    fn write_json(&self, out: &mut Vec<u8>) -> serde_json::Result<()> {
        let mut o = Object::new(out);
        let list = o.key("tasks");
        list.push(b'[');
        for (i, task) in self.tasks.iter().enumerate() {
            if i > 0 {
                list.push(b',');
            }
            task.write_json(list)?;
        }
        list.push(b']');
        for (key, value) in &self.beside {
            serde_json::to_writer(o.name(key)?, value)?;
        }
        o.end();
        Ok(())
    }

    /// The same JSON as a tree.
    fn into_tree(self) -> serde_json::Value {
        let mut tree = Task::poll_body(self.tasks);
        if let serde_json::Value::Object(fields) = &mut tree {
            fields.extend(self.beside);
        }
        tree
    }
}

impl Body {
    /// The body `{"tasks": [...]}` of a poll handing out `tasks`.
    pub fn tasks(tasks: Vec<Task>) -> Body {
        Body::typed(Typed::HandOut(HandOut {
            tasks,
            beside: serde_json::Map::new(),
        }))
    }

    fn typed(typed: Typed) -> Body {
        Body {
            json: serde_json::Value::Null,
            typed: Some(Box::new(typed)),
            built: std::sync::OnceLock::new(),
        }
    }

    fn hand_out(&self) -> Option<&HandOut> {
        match self.typed.as_deref() {
            Some(Typed::HandOut(h)) => Some(h),
            _ => None,
        }
    }

    /// Whether the body is still typed (a hand-out or an execution's view
    /// not yet turned into a JSON tree).
    pub fn is_typed(&self) -> bool {
        self.typed.is_some()
    }

    /// The tasks of a poll's hand-out made with [`Body::tasks`] (`None` for
    /// any other body, or once it was changed as JSON).
    pub fn as_tasks(&self) -> Option<&[Task]> {
        self.hand_out().map(|h| h.tasks.as_slice())
    }

    /// A top-level field of the body. A hand-out's tree is built only
    /// when `key` is `tasks`: the other fields are read where they are.
    pub fn field(&self, key: &str) -> Option<&serde_json::Value> {
        match self.hand_out() {
            Some(h) if key != "tasks" => h.beside.get(key),
            _ => self.get(key),
        }
    }

    /// Sets the top-level field `key` (not `tasks`) of an object body; a
    /// hand-out stays typed. False, and nothing changed, when the body is
    /// not an object or `key` is a hand-out's `tasks`.
    pub fn insert(&mut self, key: &str, value: serde_json::Value) -> bool {
        let Some(Typed::HandOut(h)) = self.typed.as_deref_mut() else {
            let Some(fields) = (**self).as_object_mut() else {
                return false;
            };
            fields.insert(key.to_owned(), value);
            return true;
        };
        if key == "tasks" {
            return false;
        }
        if let Some(serde_json::Value::Object(tree)) = self.built.get_mut() {
            tree.insert(key.to_owned(), value.clone());
        }
        h.beside.insert(key.to_owned(), value);
        true
    }

    /// The body as a JSON tree.
    pub fn into_json(self) -> serde_json::Value {
        match self.typed {
            Some(t) => self.built.into_inner().unwrap_or_else(|| t.into_tree()),
            None => self.json,
        }
    }
}

impl From<serde_json::Value> for Body {
    fn from(json: serde_json::Value) -> Body {
        Body {
            json,
            typed: None,
            built: std::sync::OnceLock::new(),
        }
    }
}

impl std::ops::Deref for Body {
    type Target = serde_json::Value;

    fn deref(&self) -> &serde_json::Value {
        match &self.typed {
            Some(t) => self.built.get_or_init(|| (**t).clone().into_tree()),
            None => &self.json,
        }
    }
}

impl std::ops::DerefMut for Body {
    fn deref_mut(&mut self) -> &mut serde_json::Value {
        if let Some(t) = self.typed.take() {
            self.json = self.built.take().unwrap_or_else(|| t.into_tree());
        }
        &mut self.json
    }
}

impl PartialEq for Body {
    fn eq(&self, other: &Body) -> bool {
        match (self.hand_out(), other.hand_out()) {
            (Some(a), Some(b)) => a == b,
            _ => **self == **other,
        }
    }
}

impl PartialEq<serde_json::Value> for Body {
    fn eq(&self, other: &serde_json::Value) -> bool {
        **self == *other
    }
}

impl PartialEq<Body> for serde_json::Value {
    fn eq(&self, other: &Body) -> bool {
        *self == **other
    }
}

impl std::fmt::Debug for Body {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(&**self, f)
    }
}

impl std::fmt::Display for Body {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(&**self, f)
    }
}

impl Body {
    /// The body's JSON at the end of `out`: the bytes its `Serialize`
    /// gives, a typed body's written by hand (see [`super::json`]).
    pub fn write_json(&self, out: &mut Vec<u8>) -> serde_json::Result<()> {
        match self.typed.as_deref() {
            Some(Typed::HandOut(h)) => h.write_json(out),
            Some(Typed::Execution(v)) => v.write_json(out),
            None => serde_json::to_writer(out, &self.json),
        }
    }
}

impl Serialize for Body {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self.typed.as_deref() {
            // Straight from the typed answer.
            Some(Typed::HandOut(h)) => h.serialize(serializer),
            Some(Typed::Execution(v)) => v.serialize(serializer),
            None => self.json.serialize(serializer),
        }
    }
}

impl<'de> Deserialize<'de> for Body {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Body, D::Error> {
        serde_json::Value::deserialize(deserializer).map(Body::from)
    }
}

/// A task as a worker receives it (seed `003_…`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Task {
    /// The delivery's token.
    pub token: String,
    /// Execution id (shared with the execution's projection, like the
    /// workflow's name and version and the input).
    pub execution_id: Arc<str>,
    /// Workflow name.
    pub workflow: Arc<str>,
    /// Workflow version.
    pub workflow_version: Arc<str>,
    /// The unit (`reserve[2]`, `compensate:charge`).
    pub step_id: String,
    /// Task name (shared with the unit's, like the names below).
    pub task_name: Arc<str>,
    /// The task contract's version.
    pub contract_version: Arc<str>,
    /// The task's input.
    pub input: Arc<serde_json::Value>,
    /// The unit's idempotency key.
    pub idempotency_key: Arc<str>,
    /// Attempt number.
    pub attempt: u32,
    /// True for a redelivery of an uncertain attempt.
    pub redelivery: bool,
    /// W3C trace context naming the attempt's span as parent, so a worker's
    /// own spans join the execution's trace ([`crate::trace`]).
    pub traceparent: String,
}

impl Task {
    /// The same JSON as its `Serialize` gives, written by hand (see
    /// [`super::json`]).
    pub fn write_json(&self, out: &mut Vec<u8>) -> serde_json::Result<()> {
        let mut o = Object::new(out);
        o.str("token", &self.token)?;
        o.str("execution_id", &self.execution_id)?;
        o.str("workflow", &self.workflow)?;
        o.str("workflow_version", &self.workflow_version)?;
        o.str("step_id", &self.step_id)?;
        o.str("task_name", &self.task_name)?;
        o.str("contract_version", &self.contract_version)?;
        o.value("input", &*self.input)?;
        o.str("idempotency_key", &self.idempotency_key)?;
        o.value("attempt", &self.attempt)?;
        o.bool("redelivery", self.redelivery);
        o.str("traceparent", &self.traceparent)?;
        o.end();
        Ok(())
    }

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
            ("execution_id", Value::from(&*self.execution_id)),
            ("workflow", Value::from(&*self.workflow)),
            ("workflow_version", Value::from(&*self.workflow_version)),
            ("step_id", Value::String(self.step_id)),
            ("task_name", Value::from(&*self.task_name)),
            ("contract_version", Value::from(&*self.contract_version)),
            ("input", Arc::unwrap_or_clone(self.input)),
            ("idempotency_key", Value::from(&*self.idempotency_key)),
            ("attempt", Value::from(self.attempt)),
            ("redelivery", Value::Bool(self.redelivery)),
            ("traceparent", Value::String(self.traceparent)),
        ];
        Value::Object(fields.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::{Body, Response, Task};
    use serde_json::json;

    /// A task as a poll hands it out (odd `n`: a first delivery).
    fn task(n: u32) -> Task {
        Task {
            token: format!("t{n}"),
            execution_id: "e".into(),
            workflow: "W".into(),
            workflow_version: "1.0.0".into(),
            step_id: "s[0]".into(),
            task_name: "x.y".into(),
            contract_version: "2.0.0".into(),
            input: json!({"n": n, "list": [1, null, "x"]}).into(),
            idempotency_key: "e/s[0]".into(),
            attempt: n,
            redelivery: n.is_multiple_of(2),
            traceparent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".into(),
        }
    }

    #[test]
    fn a_poll_body_is_the_tasks_serialized() {
        let tasks = vec![task(1), task(2)];
        assert_eq!(Task::poll_body(tasks.clone()), json!({ "tasks": tasks }));
        assert_eq!(Task::poll_body(Vec::new()), json!({"tasks": []}));
    }

    #[test]
    fn a_typed_hand_out_reads_and_serializes_as_its_json() {
        let task = task(1);
        let tree = json!({ "tasks": [task.clone()] });
        let body = Body::tasks(vec![task]);
        assert_eq!(body, tree);
        assert_eq!(body.to_string(), tree.to_string());
        let bytes = serde_json::to_vec(&body).unwrap_or_default();
        let parsed: serde_json::Value = serde_json::from_slice(&bytes).unwrap_or_default();
        assert_eq!(parsed, tree);
        assert_eq!(body.clone().into_json(), tree);
        let mut changed = body;
        changed["extra"] = json!(true);
        assert!(changed.as_tasks().is_none());
        assert_eq!(changed["tasks"], tree["tasks"]);
        assert_eq!(
            serde_json::to_value(&changed).unwrap_or_default()["extra"],
            json!(true)
        );
    }

    #[test]
    fn results_beside_a_hand_out_keep_it_typed_and_serialize_with_it() {
        let task = task(1);
        let results = json!([{"token": "t0", "status": 200, "accepted": true}]);
        let tree = json!({ "tasks": [task.clone()], "results": results });
        let mut body = Body::tasks(vec![task]);
        assert!(body.insert("results", results.clone()));
        assert!(!body.insert("tasks", json!([])));
        assert!(body.as_tasks().is_some());
        assert_eq!(body.field("results"), Some(&results));
        assert_eq!(body.field("unregistered"), None);
        assert_eq!(body, tree);
        let bytes = serde_json::to_vec(&body).unwrap_or_default();
        let parsed: serde_json::Value = serde_json::from_slice(&bytes).unwrap_or_default();
        assert_eq!(parsed, tree);
        assert_eq!(body.clone().into_json(), tree);
        // Looked at first, then given a field: the tree follows.
        let mut looked = Body::tasks(Vec::new());
        assert_eq!(looked["tasks"], json!([]));
        assert!(looked.insert("results", json!([])));
        assert_eq!(*looked, json!({"tasks": [], "results": []}));
        // Other bodies take a field when they are objects.
        let mut plain = Body::from(json!({"error": {"code": "X"}}));
        assert!(plain.insert("results", json!([])));
        assert_eq!(plain.field("results"), Some(&json!([])));
        assert!(!Body::from(json!([1])).insert("results", json!([])));
    }

    #[test]
    fn a_typed_answer_has_no_error_code_and_is_not_built_to_say_so() {
        let hand_out = Response {
            status: 200,
            body: Body::tasks(vec![task(1)]),
            replayed: false,
        };
        assert_eq!(hand_out.error_code(), None);
        assert!(hand_out.body.built.get().is_none());
        let refused = Response::error(404, "UNKNOWN_EXECUTION", "no such execution");
        assert_eq!(refused.error_code(), Some("UNKNOWN_EXECUTION"));
    }

    fn written(body: &Body) -> Vec<u8> {
        let mut out = Vec::new();
        assert!(body.write_json(&mut out).is_ok());
        out
    }

    #[test]
    fn a_body_written_by_hand_is_its_serialization_byte_for_byte() {
        let mut odd = task(3);
        odd.step_id = "say \"hi\"\n".into();
        odd.workflow = "Wörkflow\u{1}".into();
        odd.input = json!({"text": "a\tb", "x": 1.5e300, "list": [true, null]}).into();
        let mut with_results = Body::tasks(vec![task(1), odd, task(2)]);
        assert!(with_results.insert("results", json!([{"token": "t\"0", "accepted": true}])));
        assert!(with_results.insert("a key\n", json!(7)));
        for body in [
            Body::tasks(Vec::new()),
            Body::tasks(vec![task(1)]),
            with_results,
            Body::from(json!({"error": {"code": "X", "message": "m\u{7}"}})),
        ] {
            let serialized = serde_json::to_vec(&body).unwrap_or_default();
            assert_eq!(
                String::from_utf8(written(&body)).unwrap_or_default(),
                String::from_utf8(serialized).unwrap_or_default()
            );
        }
    }
}
