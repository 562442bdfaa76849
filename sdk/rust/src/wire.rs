//! The wire types of ORBIT's HTTP API (`api.md`), defined once: the server
//! parses request bodies into them, its OpenAPI document is generated from
//! them (feature `utoipa`), and the SDK sends and reads them.
//!
//! Request bodies refuse unknown fields (the server answers
//! `400 INVALID_REQUEST`), so their schemas say `additionalProperties:
//! false`. Response bodies are read leniently: a newer server may add
//! fields without breaking an older client.
//!
//! The limits the server enforces are constants here, next to the schema
//! attributes that publish them, and [`text_ok`] is the one check of the
//! "1 to N characters without control characters" rule.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::collections::BTreeMap;

/// JSON-Schema pattern of a text without control characters (what
/// [`text_ok`] accepts, lengths aside).
pub const TEXT_PATTERN: &str = "^[^\\u0000-\\u001F\\u007F-\\u009F]*$";
/// JSON-Schema pattern of a client-chosen execution id.
pub const EXECUTION_ID_PATTERN: &str = "^[A-Za-z0-9_:-]{1,128}$";
/// JSON-Schema pattern of an `Idempotency-Key`.
pub const IDEMPOTENCY_KEY_PATTERN: &str = "^[A-Za-z0-9._:/-]{1,255}$";
/// JSON-Schema pattern of a worker's task pattern: `*`, or a task name
/// (no `*`, spaces or control characters) with an optional `.*` after it.
pub const TASK_PATTERN_PATTERN: &str = "^(\\*|[^*\\s\\u0000-\\u001F\\u007F-\\u009F]+(\\.\\*)?)$";

/// Longest path parameter (id, name, token), in characters.
pub const PATH_PARAM_MAX: usize = 512;
/// Longest workflow or task name, worker id, task pattern, file name or
/// error code, in characters.
pub const NAME_MAX: usize = 255;
/// Longest version, in characters.
pub const VERSION_MAX: usize = 128;
/// Longest cancellation reason, in characters.
pub const CANCEL_REASON_MAX: usize = 4096;
/// Longest `wait_ms` of a poll honoured (larger values are capped).
pub const POLL_WAIT_MS_MAX: u64 = 60_000;
/// Most tasks one poll hands out (larger `max_tasks` are capped).
pub const POLL_MAX_TASKS_MAX: u32 = 1_000;
/// Most results one poll may carry.
pub const POLL_RESULTS_MAX: usize = 1_000;
/// Longest `timeout_ms` of a wait honoured (larger values are capped).
pub const WAIT_TIMEOUT_MS_MAX: u64 = 300_000;
/// `timeout_ms` of a wait that names none.
pub const WAIT_TIMEOUT_MS_DEFAULT: u64 = 30_000;
/// Largest history page.
pub const HISTORY_LIMIT_MAX: usize = 10_000;
/// Largest page of executions (larger `limit`s are capped).
pub const LIST_LIMIT_MAX: usize = 1_000;

/// Whether `value` is 1 to `max` characters (Unicode scalar values, as JSON
/// Schema counts them) without control characters.
pub fn text_ok(value: &str, max: usize) -> bool {
    !value.is_empty() && value.chars().count() <= max && !value.chars().any(char::is_control)
}

/// Whether `id` is a valid client-chosen execution id: 1 to 128 of
/// `A-Z a-z 0-9 _ : -`.
pub fn execution_id_ok(id: &str) -> bool {
    (1..=128).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b':' | b'-'))
}

/// Whether `key` is a valid `Idempotency-Key`: 1 to 255 of
/// `A-Z a-z 0-9 - _ . : /`.
pub fn idempotency_key_ok(key: &str) -> bool {
    (1..=255).contains(&key.len())
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b':' | b'/'))
}

/// Integers as JSON Schema counts them: `5` and `5.0` are the same
/// integer, so the request bodies accept both.
pub mod integral {
    use serde::{Deserialize, Deserializer};
    use serde_json::Number;

    fn fit<E: serde::de::Error>(n: &Number, max: u64) -> Result<u64, E> {
        if let Some(u) = n.as_u64() {
            if u <= max {
                return Ok(u);
            }
        } else if let Some(f) = n.as_f64() {
            #[allow(clippy::cast_precision_loss)]
            let max_f = max as f64;
            if f.fract() == 0.0 && (0.0..=max_f).contains(&f) {
                #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
                return Ok((f as u64).min(max));
            }
        }
        Err(E::custom(format!(
            "expected an integer from 0 to {max}, found {n}"
        )))
    }

    /// A `u64`.
    pub fn u64<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
        fit(&Number::deserialize(d)?, u64::MAX)
    }

    /// An optional `u32` (null reads as absent).
    pub fn opt_u32<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u32>, D::Error> {
        Option::<Number>::deserialize(d)?
            .map(|n| fit(&n, u64::from(u32::MAX)).map(|v| u32::try_from(v).unwrap_or(u32::MAX)))
            .transpose()
    }
}

// ---------------------------------------------------------------- errors

/// Every error answer: `{"error": {"code", "message", ...details}}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct ErrorBody {
    /// The error.
    pub error: ErrorDetail,
}

/// The `error` object of an error answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct ErrorDetail {
    /// Stable `UPPER_SNAKE` code (`UNKNOWN_EXECUTION`), for programs.
    #[cfg_attr(feature = "utoipa", schema(example = "UNKNOWN_EXECUTION"))]
    pub code: String,
    /// Human-readable explanation; may change between versions.
    pub message: String,
    /// Extra members some codes carry: `diagnostics` (`COMPILE_ERROR`),
    /// `leader` (`NOT_LEADER`: the leader's advertised URL, or `null` while
    /// no node holds the lease).
    #[serde(flatten)]
    #[cfg_attr(feature = "utoipa", schema(additional_properties = true))]
    pub details: Map<String, Value>,
}

// ---------------------------------------------------------------- definitions

/// One `.orbit` source file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct SourceFile {
    /// File name shown in diagnostics (`order.orbit`): 1 to 255 characters
    /// without control characters.
    #[cfg_attr(
        feature = "utoipa",
        schema(
            min_length = 1,
            max_length = 255,
            pattern = "^[^\\u0000-\\u001F\\u007F-\\u009F]*$"
        )
    )]
    pub filename: String,
    /// The `.orbit` text.
    pub source: String,
}

/// Body of `POST /v1/definitions`: one file (`source`, optional
/// `filename`) or several compiled together (`files`), never both.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum DeployRequest {
    /// `{"source": "...", "filename"?: "order.orbit"}`.
    Source {
        /// The `.orbit` text.
        source: String,
        /// Its file name (default `main.orbit`).
        #[serde(skip_serializing_if = "Option::is_none")]
        filename: Option<String>,
    },
    /// `{"files": [{filename, source}, ...]}` (at least one).
    Files {
        /// The files.
        files: Vec<SourceFile>,
    },
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct OneSource {
    source: String,
    filename: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ManySources {
    files: Vec<SourceFile>,
}

impl<'de> Deserialize<'de> for DeployRequest {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        let map = Map::<String, Value>::deserialize(d)?;
        if map.contains_key("files") {
            let m: ManySources =
                serde_json::from_value(Value::Object(map)).map_err(D::Error::custom)?;
            if m.files.is_empty() {
                return Err(D::Error::custom("`files` must not be empty"));
            }
            Ok(DeployRequest::Files { files: m.files })
        } else if map.contains_key("source") {
            let o: OneSource =
                serde_json::from_value(Value::Object(map)).map_err(D::Error::custom)?;
            Ok(DeployRequest::Source {
                source: o.source,
                filename: o.filename,
            })
        } else {
            Err(D::Error::custom(
                "give `source` or a non-empty `files` list",
            ))
        }
    }
}

/// One workflow or task contract a deploy registered.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
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
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct Deployed {
    /// Workflows registered (or already there).
    #[serde(default)]
    pub workflows: Vec<Registered>,
    /// Task contracts registered (or already there).
    #[serde(default)]
    pub tasks: Vec<Registered>,
}

impl Deployed {
    /// Every registered entry, workflows first.
    pub fn entries(&self) -> impl Iterator<Item = &Registered> {
        self.workflows.iter().chain(self.tasks.iter())
    }
}

/// One registered definition in `GET /v1/definitions`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct DefinitionSummary {
    /// Workflow name.
    pub name: String,
    /// Version.
    pub version: String,
    /// Content hash.
    pub definition_hash: String,
    /// When it was registered (RFC 3339).
    pub registered_at: String,
}

/// `GET /v1/definitions`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct DefinitionList {
    /// Every registered workflow version.
    pub definitions: Vec<DefinitionSummary>,
}

/// `GET /v1/definitions/{name}/{version}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct DefinitionDetail {
    /// Workflow name.
    pub name: String,
    /// Version.
    pub version: String,
    /// Content hash.
    pub definition_hash: String,
    /// When it was registered (RFC 3339).
    pub registered_at: String,
    /// The `.orbit` source it was compiled from.
    pub source: String,
    /// The compiled definition.
    pub definition: Value,
}

// ---------------------------------------------------------------- executions

/// Body of `POST /v1/executions`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct StartRequest {
    /// Workflow name.
    #[cfg_attr(
        feature = "utoipa",
        schema(
            min_length = 1,
            max_length = 255,
            pattern = "^[^\\u0000-\\u001F\\u007F-\\u009F]*$"
        )
    )]
    pub workflow: String,
    /// Version; the highest registered when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(
        feature = "utoipa",
        schema(
            min_length = 1,
            max_length = 128,
            pattern = "^[^\\u0000-\\u001F\\u007F-\\u009F]*$"
        )
    )]
    pub version: Option<String>,
    /// The execution's input, checked against the workflow's input type
    /// (null when absent).
    #[serde(default)]
    pub input: Value,
    /// Client-chosen id (1 to 128 of `A-Z a-z 0-9 _ : -`); starting is then
    /// idempotent on it. A UUID is generated when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "utoipa", schema(pattern = "^[A-Za-z0-9_:-]{1,128}$"))]
    pub execution_id: Option<String>,
}

/// The answer to a start.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct Started {
    /// The execution's id.
    pub execution_id: String,
    /// False when the execution already existed.
    pub created: bool,
    /// A start that waited (`?wait_ms=`): the execution as `GET` shows it
    /// when the wait ended, finished or not (look at its `status`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub execution: Option<Box<Execution>>,
}

/// An execution's status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
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
    /// Every status, in lifecycle order.
    pub const ALL: [Status; 6] = [
        Status::Pending,
        Status::Running,
        Status::Compensating,
        Status::Completed,
        Status::Failed,
        Status::Cancelled,
    ];

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
        Status::ALL
            .into_iter()
            .find(|st| st.as_str() == s)
            .ok_or_else(|| {
                format!(
                    "unknown status `{s}` (pending, running, compensating, completed, failed, cancelled)"
                )
            })
    }
}

/// One unit (step, fan-out element, compensation) of an execution.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct UnitView {
    /// `queued`, `running`, `retrying`, `succeeded` or `failed`.
    pub status: String,
    /// The current attempt (0 before the first).
    #[serde(default)]
    pub attempt: u32,
    /// Its output, once succeeded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<Value>,
    /// Its error (`code`, `message`), once failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<Value>,
    /// The child execution, for a workflow step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub child_id: Option<String>,
    /// The task name, for a task unit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task: Option<String>,
    /// The unit's idempotency key, for a task unit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotency_key: Option<String>,
}

/// An execution as `GET /v1/executions/{id}` (and a wait) shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
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
    /// The parent execution, for a child workflow.
    #[serde(default)]
    pub parent: Option<String>,
    /// The input.
    #[serde(default)]
    pub input: Value,
    /// The output, once completed (null before).
    #[serde(default)]
    pub output: Value,
    /// The error (`code`, `message`, `step`), once failed (null before).
    #[serde(default)]
    pub error: Value,
    /// When it was created (RFC 3339).
    #[serde(default)]
    pub created_at: String,
    /// When it last changed (RFC 3339).
    #[serde(default)]
    pub updated_at: String,
    /// Its units by key (`charge`, `reserve[2]`, `compensate:charge`).
    #[serde(default)]
    pub units: BTreeMap<String, UnitView>,
}

/// One execution in a listing.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct ExecutionSummary {
    /// Its id.
    pub execution_id: String,
    /// Workflow name.
    pub workflow: String,
    /// Workflow version.
    pub version: String,
    /// Its status.
    pub status: Status,
    /// The parent execution, for a child workflow.
    #[serde(default)]
    pub parent: Option<String>,
    /// When it was created (RFC 3339).
    pub created_at: String,
    /// When it last changed (RFC 3339).
    pub updated_at: String,
}

/// One page of `GET /v1/executions`, newest first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct ExecutionPage {
    /// The executions.
    pub executions: Vec<ExecutionSummary>,
    /// Pass as `cursor` for the next page; null on the last page.
    #[serde(default)]
    pub next_cursor: Option<String>,
}

/// One history event: `{"seq", "at", "type", ...the event's fields}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct RecordedEvent {
    /// Sequence number in the execution's history, from 1.
    pub seq: u64,
    /// When it was recorded (RFC 3339).
    pub at: String,
    /// The event type (`StepDispatched`).
    #[serde(rename = "type")]
    pub kind: String,
    /// The event's own fields.
    #[serde(flatten)]
    #[cfg_attr(feature = "utoipa", schema(additional_properties = true))]
    pub fields: Map<String, Value>,
}

impl RecordedEvent {
    /// Whether this event ends the execution.
    pub fn is_terminal(&self) -> bool {
        matches!(
            self.kind.as_str(),
            "WorkflowCompleted" | "WorkflowFailed" | "WorkflowCancelled"
        )
    }

    /// The event as one JSON object (`seq`, `at`, `type` and its fields).
    pub fn to_value(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }
}

/// A page of history.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct HistoryPage {
    /// Events in `seq` order.
    pub events: Vec<RecordedEvent>,
}

/// Body of `POST /v1/executions/{id}/signals/{name}` (optional).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct SignalRequest {
    /// The signal's payload (null when absent).
    #[serde(default)]
    pub payload: Value,
}

/// The answer to a signal.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct SignalAck {
    /// The `seq` of its `SignalReceived` (null when not yet known, in
    /// shared mode).
    #[serde(default)]
    pub seq: Option<u64>,
}

/// Body of `POST /v1/executions/{id}/cancel` (optional).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct CancelRequest {
    /// Why (at most 4096 characters).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "utoipa", schema(max_length = 4096))]
    pub reason: Option<String>,
}

/// The answer to a cancel.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct CancelAck {
    /// The execution.
    pub execution_id: String,
    /// Always true: the cancellation is recorded.
    pub cancel_requested: bool,
}

// ---------------------------------------------------------------- workers

/// Body of `POST /v1/workers`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct RegisterRequest {
    /// The worker's own id (`flaky-1`), shown in the history.
    #[cfg_attr(
        feature = "utoipa",
        schema(
            min_length = 1,
            max_length = 255,
            pattern = "^[^\\u0000-\\u001F\\u007F-\\u009F]*$"
        )
    )]
    pub worker_id: String,
    /// Exact task names, `*`, or `prefix.*`.
    #[cfg_attr(feature = "utoipa", schema(min_items = 1, inline, value_type = Vec<PatternText>))]
    pub task_patterns: Vec<String>,
    /// Default cap on tasks per poll (at least 1; more than 1000 is capped).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "integral::opt_u32"
    )]
    #[cfg_attr(feature = "utoipa", schema(minimum = 1, maximum = 4294967295_u64))]
    pub max_tasks: Option<u32>,
}

/// A task pattern in the OpenAPI document: 1 to 255 characters, `*` or a
/// task name with an optional `.*` ([`TASK_PATTERN_PATTERN`]).
#[cfg(feature = "utoipa")]
pub struct PatternText;

/// The answer to a registration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct Session {
    /// Use it in the session's paths.
    pub session_id: String,
    /// Poll or heartbeat more often than this.
    #[serde(default)]
    pub session_timeout_ms: Option<u64>,
}

/// Body of `POST /v1/workers/{session}/poll` (optional).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct PollRequest {
    /// At most this many tasks (at least 1; more than 1000 is capped).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "integral::opt_u32"
    )]
    #[cfg_attr(feature = "utoipa", schema(minimum = 1, maximum = 4294967295_u64))]
    pub max_tasks: Option<u32>,
    /// Park at most this long (ms) when nothing is queued; capped at 60 000.
    #[serde(default, deserialize_with = "integral::u64")]
    #[cfg_attr(
        feature = "utoipa",
        schema(minimum = 0, maximum = 18446744073709551615_u64)
    )]
    pub wait_ms: u64,
    /// Tokens of the tasks the worker is still working on.
    #[serde(default)]
    pub held: Vec<String>,
    /// Results to report before tasks are handed out (at most 1000): each
    /// is recorded exactly as `POST /v1/tasks/{token}/result` would record
    /// it, and answered in the reply's `results`, in the same order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[cfg_attr(feature = "utoipa", schema(max_items = 1000))]
    pub results: Vec<TaskResult>,
}

/// One result carried by a poll: the delivery's token and exactly one of
/// `output` and `error` (`{"token", "output"}` or `{"token", "error"}`).
#[derive(Debug, Clone, PartialEq)]
pub struct TaskResult {
    /// The delivery's token.
    pub token: String,
    /// What the worker reports.
    pub outcome: Outcome,
}

impl Serialize for TaskResult {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = s.serialize_map(Some(2))?;
        map.serialize_entry("token", &self.token)?;
        match &self.outcome {
            Outcome::Output(v) => map.serialize_entry("output", v)?,
            Outcome::Error(e) => map.serialize_entry("error", e)?,
        }
        map.end()
    }
}

impl<'de> Deserialize<'de> for TaskResult {
    /// Read field by field: the output goes straight into its value, with
    /// no map of the whole result built first.
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_map(TaskResultVisitor)
    }
}

struct TaskResultVisitor;

/// A key of a [`TaskResult`], read without copying it (any other key is
/// refused as an unknown field).
#[derive(Deserialize)]
#[serde(field_identifier, rename_all = "snake_case")]
enum ResultKey {
    Token,
    Output,
    Error,
}

impl<'de> serde::de::Visitor<'de> for TaskResultVisitor {
    type Value = TaskResult;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a result: its `token` and exactly one of `output` and `error`")
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<TaskResult, A::Error> {
        use serde::de::Error;
        let malformed = |why: &dyn std::fmt::Display| {
            A::Error::custom(format!(
                "a result has its `token` and exactly one of `output` and `error`: {why}"
            ))
        };
        // A key given twice keeps its last value, as a JSON object read
        // into a map would.
        let (mut token, mut output, mut error) = (None, None, None);
        while let Some(key) = map.next_key::<ResultKey>()? {
            match key {
                ResultKey::Token => token = Some(map.next_value::<Value>()?),
                ResultKey::Output => output = Some(map.next_value::<Value>()?),
                ResultKey::Error => {
                    error = Some(map.next_value::<TaskError>().map_err(|e| malformed(&e))?)
                }
            }
        }
        let token = match token {
            Some(Value::String(t)) => t,
            Some(_) => return Err(A::Error::custom("`token` must be a string")),
            None => return Err(A::Error::custom("a result needs its `token`")),
        };
        let outcome = match (output, error) {
            (Some(output), None) => Outcome::Output(output),
            (None, Some(error)) => Outcome::Error(error),
            (Some(_), Some(_)) => return Err(malformed(&"both were given")),
            (None, None) => return Err(malformed(&"neither was given")),
        };
        Ok(TaskResult { token, outcome })
    }
}

/// A task handed to a worker (seed `003`'s JSON).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
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
    /// W3C trace context naming this attempt's span as parent
    /// (`00-<trace id>-<span id>-01`): start the handler's own span as its
    /// child and it joins the execution's trace. See [`Task::trace_context`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(
        feature = "utoipa",
        schema(example = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
    )]
    pub traceparent: Option<String>,
}

/// The answer to a poll.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct Polled {
    /// The tasks handed out (possibly none).
    #[serde(default)]
    pub tasks: Vec<Task>,
    /// When the poll carried results: one answer per result, in the
    /// request's order (absent otherwise).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub results: Vec<ResultAnswer>,
}

/// The answer to one result a poll carried: what `POST
/// /v1/tasks/{token}/result` would have answered, with its HTTP status.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct ResultAnswer {
    /// The result's token.
    pub token: String,
    /// The status the result endpoint would have answered: `200` (then
    /// `accepted` says whether it was recorded), `403 FORBIDDEN`, `503`
    /// (`STORAGE_ERROR`, ...: report it again later), ...
    pub status: u16,
    /// With status 200: whether the result was recorded (`false` is final).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub accepted: Option<bool>,
    /// With `accepted: false`: the seed's reason (`stale attempt`, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// With any other status: the error, as the result endpoint's body.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorDetail>,
}

impl ResultAnswer {
    /// Whether the result should be reported again later (a 5xx or 429:
    /// the server could not decide).
    pub fn retry(&self) -> bool {
        self.status == 429 || self.status >= 500
    }
}

/// Body of `POST /v1/workers/{session}/heartbeat` (optional).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct HeartbeatRequest {
    /// Tokens of the tasks the worker is still working on.
    #[serde(default)]
    pub held: Vec<String>,
    /// Another name for `held` (both lists count).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tokens: Vec<String>,
}

/// The answer to a heartbeat.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct HeartbeatAck {
    /// Held tokens the server no longer needs: stop them and report them.
    #[serde(default)]
    pub cancel: Vec<String>,
}

/// The answer to `DELETE /v1/workers/{session}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct Unregistered {
    /// Always true.
    pub unregistered: bool,
}

/// A task a worker session holds, in `GET /v1/workers`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct HeldTask {
    /// The execution.
    pub execution_id: String,
    /// The unit (`charge`, `reserve[2]`).
    pub unit: String,
    /// The task name.
    pub task: String,
    /// The attempt.
    pub attempt: u32,
    /// When it was handed out (RFC 3339).
    pub dispatched_at: String,
    /// Whether the worker has confirmed holding it (a poll or heartbeat
    /// listed its token).
    pub confirmed: bool,
}

/// One live worker session, in `GET /v1/workers`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct SessionView {
    /// The session.
    pub session_id: String,
    /// The worker's own id.
    pub worker_id: String,
    /// The patterns it registered.
    pub task_patterns: Vec<String>,
    /// Its cap on tasks per poll.
    pub max_tasks: u32,
    /// Its last poll or heartbeat (RFC 3339).
    pub last_seen: String,
    /// The tasks it holds (delivery tokens are not shown).
    pub held: Vec<HeldTask>,
}

/// `GET /v1/workers`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct WorkerSessions {
    /// The live sessions.
    pub sessions: Vec<SessionView>,
    /// A session not heard from for this long ends.
    pub session_timeout_ms: u64,
}

/// A failure a task handler reports.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct TaskError {
    /// `UPPER_SNAKE` code: 1 to 255 characters without control characters.
    #[cfg_attr(
        feature = "utoipa",
        schema(
            min_length = 1,
            max_length = 255,
            pattern = "^[^\\u0000-\\u001F\\u007F-\\u009F]*$"
        )
    )]
    pub code: String,
    /// Human-readable message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Whether a retry may help (default true; the workflow's
    /// `non_retryable` list still applies).
    #[serde(default = "yes")]
    pub retryable: bool,
}

fn yes() -> bool {
    true
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

/// Body of `POST /v1/tasks/{token}/result`: exactly one of `output` and
/// `error`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Outcome {
    /// `{"output": ...}` (any JSON, null included).
    Output(Value),
    /// `{"error": {"code", "message"?, "retryable"?}}`.
    Error(TaskError),
}

/// The answer to a result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct ResultAck {
    /// Whether the result was recorded.
    pub accepted: bool,
    /// Why not: `stale attempt`, `duplicate result; step already resolved`,
    /// `unknown token (execution finished or token invalid)`, `output
    /// violates the task contract`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

// ---------------------------------------------------------------- health

/// `/healthz` and `/readyz`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct Health {
    /// `ok` (healthz) or `ready` (readyz).
    pub status: String,
    /// Under `--cluster`: this node's role, `leader` (`/readyz` answers 200
    /// only there) or `standby`; `member` in shared mode.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
}

// ---------------------------------------------------------------- cluster

/// `GET /v1/cluster`: the cluster as the leader sees it (a single server
/// answers `mode: single` and no nodes).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct ClusterStatus {
    /// `leader` (`--cluster`, leader/standby), `shared` (`--cluster
    /// --cluster-mode shared`) or `single` (no `--cluster`).
    pub mode: String,
    /// The node that answered (`--node-id`); `null` on a single server.
    pub node_id: Option<String>,
    /// The leader's `--node-id`, when a node holds a live lease.
    pub leader_node_id: Option<String>,
    /// The leader's advertised URL (`--advertise`), when known.
    pub leader: Option<String>,
    /// The current leadership epoch (raised by one at every takeover).
    pub epoch: Option<u64>,
    /// When the leader's lease runs out unless renewed (RFC 3339, the
    /// database's clock).
    pub lease_expires_at: Option<String>,
    /// Every node seen recently, by node id.
    pub nodes: Vec<ClusterNode>,
}

/// One node of [`ClusterStatus`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct ClusterNode {
    /// Its `--node-id`.
    pub node_id: String,
    /// Its `--advertise` URL.
    pub advertise: String,
    /// The role it last reported: `leader` or `standby`; `member` in
    /// shared mode.
    pub role: String,
    /// Whether it was in contact within `--node-timeout`.
    pub live: bool,
    /// Its last contact (RFC 3339, the database's clock).
    pub last_seen: String,
    /// When it started (RFC 3339).
    pub started_at: String,
}

#[cfg(feature = "utoipa")]
mod schemas {
    //! Schemas serde's derive cannot describe: bodies with one of two
    //! shapes.

    use super::{DeployRequest, Outcome};
    use utoipa::openapi::schema::{
        AdditionalProperties, ArrayBuilder, ObjectBuilder, OneOfBuilder, Schema, SchemaType, Type,
    };
    use utoipa::openapi::RefOr;
    use utoipa::{PartialSchema, ToSchema};

    fn closed(builder: ObjectBuilder) -> ObjectBuilder {
        builder.additional_properties(Some(AdditionalProperties::FreeForm(false)))
    }

    impl PartialSchema for DeployRequest {
        fn schema() -> RefOr<Schema> {
            let text = ObjectBuilder::new()
                .schema_type(SchemaType::new(Type::String))
                .description(Some("The `.orbit` text."));
            let filename = ObjectBuilder::new()
                .schema_type(SchemaType::from_iter([Type::String, Type::Null]))
                .min_length(Some(1))
                .max_length(Some(super::NAME_MAX))
                .pattern(Some(super::TEXT_PATTERN))
                .description(Some("Its file name (default `main.orbit`)."));
            let one = closed(
                ObjectBuilder::new()
                    .title(Some("One file"))
                    .property("source", text)
                    .property("filename", filename)
                    .required("source"),
            );
            let many = closed(
                ObjectBuilder::new()
                    .title(Some("Several files"))
                    .property(
                        "files",
                        ArrayBuilder::new()
                            .items(super::SourceFile::schema())
                            .min_items(Some(1)),
                    )
                    .required("files"),
            );
            OneOfBuilder::new()
                .item(one)
                .item(many)
                .description(Some(
                    "One file (`source`, optional `filename`) or several compiled together (`files`).",
                ))
                .into()
        }
    }

    impl ToSchema for DeployRequest {
        fn schemas(schemas: &mut Vec<(String, RefOr<Schema>)>) {
            schemas.push(("SourceFile".into(), super::SourceFile::schema()));
        }
    }

    impl PartialSchema for Outcome {
        fn schema() -> RefOr<Schema> {
            let output = closed(
                ObjectBuilder::new()
                    .title(Some("Success"))
                    .property(
                        "output",
                        ObjectBuilder::new()
                            .schema_type(SchemaType::AnyValue)
                            .description(Some("The task's output (any JSON, null included).")),
                    )
                    .required("output"),
            );
            let error = closed(
                ObjectBuilder::new()
                    .title(Some("Failure"))
                    .property("error", super::TaskError::schema())
                    .required("error"),
            );
            OneOfBuilder::new()
                .item(output)
                .item(error)
                .description(Some("Exactly one of `output` and `error`."))
                .into()
        }
    }

    impl PartialSchema for super::TaskResult {
        fn schema() -> RefOr<Schema> {
            let token = || {
                ObjectBuilder::new()
                    .schema_type(SchemaType::new(Type::String))
                    .min_length(Some(1))
                    .max_length(Some(super::PATH_PARAM_MAX))
                    .pattern(Some(super::TEXT_PATTERN))
                    .description(Some("The delivery's token."))
            };
            let output = closed(
                ObjectBuilder::new()
                    .title(Some("Success"))
                    .property("token", token())
                    .property(
                        "output",
                        ObjectBuilder::new()
                            .schema_type(SchemaType::AnyValue)
                            .description(Some("The task's output (any JSON, null included).")),
                    )
                    .required("token")
                    .required("output"),
            );
            let error = closed(
                ObjectBuilder::new()
                    .title(Some("Failure"))
                    .property("token", token())
                    .property("error", super::TaskError::schema())
                    .required("token")
                    .required("error"),
            );
            OneOfBuilder::new()
                .item(output)
                .item(error)
                .description(Some(
                    "One result: its `token` and exactly one of `output` and `error`.",
                ))
                .into()
        }
    }

    impl ToSchema for super::TaskResult {
        fn schemas(schemas: &mut Vec<(String, RefOr<Schema>)>) {
            schemas.push(("TaskError".into(), super::TaskError::schema()));
        }
    }

    impl PartialSchema for super::PatternText {
        fn schema() -> RefOr<Schema> {
            ObjectBuilder::new()
                .schema_type(SchemaType::new(Type::String))
                .min_length(Some(1))
                .max_length(Some(super::NAME_MAX))
                .pattern(Some(super::TASK_PATTERN_PATTERN))
                .into()
        }
    }

    impl ToSchema for super::PatternText {}

    impl ToSchema for Outcome {
        fn schemas(schemas: &mut Vec<(String, RefOr<Schema>)>) {
            schemas.push(("TaskError".into(), super::TaskError::schema()));
        }
    }
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
        // Exactly one key; null is a real output.
        let null: Outcome = serde_json::from_value(json!({"output": null})).unwrap();
        assert_eq!(null, Outcome::Output(Value::Null));
        assert!(serde_json::from_value::<Outcome>(json!({"output": 1, "error": null})).is_err());
        assert!(serde_json::from_value::<Outcome>(json!({})).is_err());
        let e: Outcome = serde_json::from_value(json!({"error": {"code": "X"}})).unwrap();
        assert_eq!(
            e,
            Outcome::Error(TaskError {
                code: "X".into(),
                message: None,
                retryable: true
            })
        );
    }

    #[test]
    fn results_on_a_poll_encode_as_the_api_says() {
        let poll = PollRequest {
            max_tasks: Some(2),
            wait_ms: 0,
            held: vec![],
            results: vec![
                TaskResult {
                    token: "t1".into(),
                    outcome: Outcome::Output(json!({"n": 1})),
                },
                TaskResult {
                    token: "t2".into(),
                    outcome: Outcome::Error(TaskError::fatal("NO", "no")),
                },
            ],
        };
        let v = serde_json::to_value(&poll).unwrap();
        assert_eq!(
            v["results"],
            json!([{"token": "t1", "output": {"n": 1}},
                   {"token": "t2", "error": {"code": "NO", "message": "no", "retryable": false}}])
        );
        assert_eq!(serde_json::from_value::<PollRequest>(v).unwrap(), poll);
        // No results: the body is the old one.
        let old = serde_json::to_value(PollRequest::default()).unwrap();
        assert_eq!(old, json!({"wait_ms": 0, "held": []}));
        for bad in [
            json!({"token": "t"}),
            json!({"output": 1}),
            json!({"token": 1, "output": 1}),
            json!({"token": "t", "output": 1, "error": {"code": "X"}}),
            json!({"token": "t", "output": 1, "other": 1}),
        ] {
            assert!(
                serde_json::from_value::<TaskResult>(bad.clone()).is_err(),
                "{bad}"
            );
        }
        let answer: Polled = serde_json::from_value(json!({"tasks": [], "results": [
            {"token": "t1", "status": 200, "accepted": true},
            {"token": "t2", "status": 503, "error": {"code": "STORAGE_ERROR", "message": "down"}}
        ]}))
        .unwrap();
        assert!(!answer.results[0].retry());
        assert!(answer.results[1].retry());
        assert_eq!(
            answer.results[1].error.as_ref().unwrap().code,
            "STORAGE_ERROR"
        );
    }

    #[test]
    fn deploy_bodies_have_one_of_two_shapes() {
        let one: DeployRequest =
            serde_json::from_value(json!({"source": "x", "filename": "a.orbit"})).unwrap();
        assert!(matches!(one, DeployRequest::Source { .. }));
        let many: DeployRequest =
            serde_json::from_value(json!({"files": [{"filename": "a", "source": "x"}]})).unwrap();
        assert!(matches!(many, DeployRequest::Files { .. }));
        for bad in [
            json!({}),
            json!({"filename": "a"}),
            json!({"source": "x", "files": []}),
            json!({"files": []}),
            json!({"source": "x", "other": 1}),
        ] {
            assert!(
                serde_json::from_value::<DeployRequest>(bad.clone()).is_err(),
                "{bad}"
            );
        }
    }

    #[test]
    fn integers_may_be_written_as_floats() {
        let p: PollRequest =
            serde_json::from_value(json!({"max_tasks": 5.0, "wait_ms": 100.0})).unwrap();
        assert_eq!((p.max_tasks, p.wait_ms), (Some(5), 100));
        let p: PollRequest = serde_json::from_value(json!({"max_tasks": null})).unwrap();
        assert_eq!(p.max_tasks, None);
        for bad in [
            json!({"max_tasks": 1.5}),
            json!({"max_tasks": -1}),
            json!({"max_tasks": 4294967296_u64}),
            json!({"wait_ms": "1"}),
        ] {
            assert!(
                serde_json::from_value::<PollRequest>(bad.clone()).is_err(),
                "{bad}"
            );
        }
    }

    #[test]
    fn text_rule_counts_characters() {
        assert!(text_ok("é", 1));
        assert!(!text_ok("", 5));
        assert!(!text_ok("a\u{7f}", 5));
        assert!(!text_ok("a\u{85}", 5));
        assert!(execution_id_ok("order-1:a_b"));
        assert!(!execution_id_ok("order 1"));
        assert!(idempotency_key_ok("a/b.c"));
        assert!(!idempotency_key_ok("a b"));
    }
}
