//! The JSON bodies of the ORBIT HTTP API (`api.md`), as the SDK sends and
//! reads them. Fields the SDK does not know are kept in `extra` maps so a
//! newer server never breaks an older client.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use orbit_core::history::{Event, EventKind};

/// One `.orbit` source file to deploy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SourceFile {
    /// The file's name, used in diagnostics (`order.orbit`).
    pub filename: String,
    /// Its text.
    pub source: String,
}

/// One workflow or task the server registered.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Registered {
    /// Name.
    pub name: String,
    /// Version.
    pub version: String,
    /// Content hash (workflows only).
    #[serde(default, alias = "hash", skip_serializing_if = "String::is_empty")]
    pub definition_hash: String,
    /// False when identical content was already registered.
    #[serde(default)]
    pub created: bool,
}

/// The answer to a deploy: everything registered.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Deployed {
    /// Workflows registered (or already there).
    #[serde(default)]
    pub workflows: Vec<Registered>,
    /// Tasks registered (or already there).
    #[serde(default)]
    pub tasks: Vec<Registered>,
    /// Other fields of the answer.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl Deployed {
    /// Every registered entry, workflows first.
    pub fn entries(&self) -> impl Iterator<Item = &Registered> {
        self.workflows.iter().chain(self.tasks.iter())
    }
}

/// What to start.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct StartOptions {
    /// Workflow name.
    pub workflow: String,
    /// Its input.
    pub input: Value,
    /// A version; none means the highest registered.
    pub version: Option<String>,
    /// A client-chosen execution id (starting is then idempotent on it).
    pub execution_id: Option<String>,
    /// The `Idempotency-Key`; generated (UUIDv4) when none.
    pub idempotency_key: Option<String>,
}

impl StartOptions {
    /// Start `workflow` with `input`, everything else defaulted.
    pub fn new(workflow: impl Into<String>, input: Value) -> Self {
        StartOptions {
            workflow: workflow.into(),
            input,
            ..StartOptions::default()
        }
    }
}

/// The body of `POST /v1/executions`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct StartBody<'a> {
    pub workflow: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub version: Option<&'a str>,
    pub input: &'a Value,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub execution_id: Option<&'a str>,
}

/// The answer to a start.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Started {
    /// The execution's id.
    pub execution_id: String,
    /// False when the execution already existed.
    pub created: bool,
}

/// An execution's status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// Created, waiting for a slot.
    Pending,
    /// Running.
    Running,
    /// Running its compensations.
    Compensating,
    /// Ended successfully.
    Completed,
    /// Ended in failure.
    Failed,
    /// Ended by a cancellation.
    Cancelled,
}

impl Status {
    /// Whether the execution has ended.
    pub fn is_terminal(self) -> bool {
        matches!(self, Status::Completed | Status::Failed | Status::Cancelled)
    }

    /// The status as the API spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Pending => "pending",
            Status::Running => "running",
            Status::Compensating => "compensating",
            Status::Completed => "completed",
            Status::Failed => "failed",
            Status::Cancelled => "cancelled",
        }
    }
}

impl std::fmt::Display for Status {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Status {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(match s {
            "pending" => Status::Pending,
            "running" => Status::Running,
            "compensating" => Status::Compensating,
            "completed" => Status::Completed,
            "failed" => Status::Failed,
            "cancelled" => Status::Cancelled,
            other => {
                return Err(format!(
                    "unknown status `{other}` (pending, running, compensating, completed, failed, cancelled)"
                ))
            }
        })
    }
}

/// An execution as `GET /v1/executions/{id}` shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Execution {
    /// Its id.
    #[serde(alias = "id")]
    pub execution_id: String,
    /// Its status.
    pub status: Status,
    /// Workflow name.
    #[serde(default)]
    pub workflow: String,
    /// Workflow version.
    #[serde(default)]
    pub version: String,
    /// The pinned definition hash.
    #[serde(default, alias = "hash", skip_serializing_if = "Option::is_none")]
    pub definition_hash: Option<String>,
    /// The input.
    #[serde(default)]
    pub input: Value,
    /// The output, once completed.
    #[serde(default)]
    pub output: Value,
    /// The error, once failed.
    #[serde(default)]
    pub error: Value,
    /// Everything else the server shows (timestamps, per-unit state).
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// Filters for listing executions.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ListOptions {
    /// Only executions with this status.
    pub status: Option<Status>,
    /// Only executions of this workflow.
    pub workflow: Option<String>,
    /// At most this many.
    pub limit: Option<u32>,
    /// Continue after this cursor.
    pub cursor: Option<String>,
}

/// One page of executions, newest first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExecutionPage {
    /// The executions.
    pub executions: Vec<Execution>,
    /// Cursor of the next page, if any.
    #[serde(default)]
    pub next_cursor: Option<String>,
}

/// One history event as the API returns it: `at` is RFC 3339.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RecordedEvent {
    /// Sequence number in the execution's history.
    pub seq: u64,
    /// When it was recorded (RFC 3339).
    pub at: String,
    /// What happened (`type` and its fields).
    #[serde(flatten)]
    pub kind: EventKind,
}

impl RecordedEvent {
    /// The core event, with `at` converted to milliseconds since the epoch.
    pub fn to_event(&self) -> Result<Event, String> {
        let at =
            time::OffsetDateTime::parse(&self.at, &time::format_description::well_known::Rfc3339)
                .map_err(|e| format!("event #{}: bad timestamp `{}`: {e}", self.seq, self.at))?;
        let millis = at.unix_timestamp_nanos() / 1_000_000;
        let at = u64::try_from(millis)
            .map_err(|_| format!("event #{}: timestamp `{}` before 1970", self.seq, self.at))?;
        Ok(Event {
            seq: self.seq,
            at,
            kind: self.kind.clone(),
        })
    }

    /// Whether this event ends the execution.
    pub fn is_terminal(&self) -> bool {
        matches!(
            self.kind,
            EventKind::WorkflowCompleted { .. }
                | EventKind::WorkflowFailed { .. }
                | EventKind::WorkflowCancelled {}
        )
    }
}

/// A page of history.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HistoryPage {
    /// Events in `seq` order.
    pub events: Vec<RecordedEvent>,
}

/// The answer to a signal.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SignalAck {
    /// The `seq` of its `SignalReceived` (null when not yet known, in shared mode).
    #[serde(default)]
    pub seq: Option<u64>,
}

/// A task handed to a worker (seed `003`'s JSON).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Task {
    /// Identifies this delivery; results are reported by it.
    pub token: String,
    /// The execution it belongs to.
    pub execution_id: String,
    /// Workflow name.
    pub workflow: String,
    /// Workflow version.
    pub workflow_version: String,
    /// The unit (`charge`, `reserve[2]`, `compensate:charge`).
    pub step_id: String,
    /// The task's name (`payments.charge`).
    pub task_name: String,
    /// The task contract's version.
    pub contract_version: String,
    /// Its input.
    pub input: Value,
    /// Stable across retries and redeliveries: pass it to external systems.
    pub idempotency_key: String,
    /// Attempt number, from 1.
    pub attempt: u32,
    /// True when this attempt was delivered before and its outcome is unknown.
    pub redelivery: bool,
}

/// A failure a task handler reports.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskError {
    /// `UPPER_SNAKE` code.
    pub code: String,
    /// Human-readable message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Whether a retry may help (the workflow's `non_retryable` list still applies).
    pub retryable: bool,
}

impl TaskError {
    /// A failure worth retrying.
    pub fn retryable(code: impl Into<String>, message: impl Into<String>) -> Self {
        TaskError {
            code: code.into(),
            message: Some(message.into()),
            retryable: true,
        }
    }

    /// A failure no retry can fix.
    pub fn fatal(code: impl Into<String>, message: impl Into<String>) -> Self {
        TaskError {
            code: code.into(),
            message: Some(message.into()),
            retryable: false,
        }
    }

    /// What a worker reports for a task it stopped on the server's request.
    pub fn cancelled() -> Self {
        TaskError {
            code: "CANCELLED".into(),
            message: None,
            retryable: false,
        }
    }
}

impl std::fmt::Display for TaskError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.message {
            Some(m) => write!(f, "{}: {m}", self.code),
            None => f.write_str(&self.code),
        }
    }
}

impl std::error::Error for TaskError {}

/// A task's outcome, as reported to `POST /v1/tasks/{token}/result`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// `{"output": ...}`
    Output(Value),
    /// `{"error": {...}}`
    Error(TaskError),
}

/// The server's answer to a result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResultAck {
    /// Whether the result was recorded.
    pub accepted: bool,
    /// Why not (seed reason strings).
    #[serde(default)]
    pub reason: Option<String>,
}

/// `POST /v1/workers` body.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct RegisterBody<'a> {
    pub worker_id: &'a str,
    pub task_patterns: &'a [String],
    pub max_tasks: usize,
}

/// `POST /v1/workers` answer.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub(crate) struct Session {
    pub session_id: String,
    #[serde(default)]
    pub session_timeout_ms: Option<u64>,
}

/// `POST /v1/workers/{session}/poll` body.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct PollBody {
    pub max_tasks: usize,
    pub wait_ms: u64,
    pub held: Vec<String>,
}

/// `POST /v1/workers/{session}/poll` answer.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub(crate) struct Polled {
    #[serde(default)]
    pub tasks: Vec<Task>,
}

/// `POST /v1/workers/{session}/heartbeat` body.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct HeartbeatBody {
    pub held: Vec<String>,
}

/// `POST /v1/workers/{session}/heartbeat` answer.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub(crate) struct HeartbeatAck {
    #[serde(default)]
    pub cancel: Vec<String>,
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    #[test]
    fn task_reads_the_seed_json() {
        let t: Task = serde_json::from_str(
            r#"{"token":"5503f137-059e-455a-92c1-e65fa3690962","execution_id":"u-1","workflow":"Plain","workflow_version":"1.0.0",
"step_id":"work","task_name":"demo.work","contract_version":"1.0.0","input":{"n":1},
"idempotency_key":"u-1/work","attempt":1,"redelivery":true}"#,
        )
        .unwrap();
        assert_eq!(t.idempotency_key, "u-1/work");
        assert!(t.redelivery);
        assert_eq!(t.input, json!({"n": 1}));
    }

    #[test]
    fn outcomes_encode_as_the_api_says() {
        let out = serde_json::to_value(Outcome::Output(json!({"ok": true}))).unwrap();
        assert_eq!(out, json!({"output": {"ok": true}}));
        let err = serde_json::to_value(Outcome::Error(TaskError::cancelled())).unwrap();
        assert_eq!(
            err,
            json!({"error": {"code": "CANCELLED", "retryable": false}})
        );
    }

    #[test]
    fn recorded_events_convert_to_core_events() {
        let e: RecordedEvent = serde_json::from_value(json!({
            "seq": 4, "at": "2026-01-02T03:04:05.123Z", "type": "StepDispatched",
            "step": "work", "attempt": 1, "worker_id": "flaky-1", "token": "t"
        }))
        .unwrap();
        let core = e.to_event().unwrap();
        assert_eq!(core.seq, 4);
        assert_eq!(core.at, 1_767_323_045_123);
        assert!(matches!(core.kind, EventKind::StepDispatched { .. }));
        assert!(!e.is_terminal());
    }
}
