//! What a caller asks the client for: the options of a start and of a
//! listing. The bodies on the wire are in [`crate::wire`].

use serde_json::Value;

use crate::wire::Status;

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
    /// The caller's W3C trace context (`traceparent` header): the
    /// execution's spans, and its workers' tasks, join that trace. The server
    /// ignores an invalid one.
    pub traceparent: Option<String>,
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
