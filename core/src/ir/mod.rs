//! The definition IR: what the compiler produces from `.orbit` source and what
//! the engine executes. Everything here is plain data with source spans
//! removed, so its canonical JSON encoding is the input of `definition_hash`.

mod expr;
mod types;

pub use expr::{BinaryOp, Expr, ExprKind, Function, UnaryOp};
pub use types::Type;

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// A task contract: `task "name" version "x.y.z" { input .. output .. }`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskContract {
    /// Dotted task name, e.g. `payments.charge`.
    pub name: String,
    /// The contract version delivered with every task (`contract_version`).
    pub version: String,
    /// The record type the task's input must have.
    pub input: Type,
    /// The record type the worker's output is checked against.
    pub output: Type,
}

/// Retry policy of a task unit. Durations are milliseconds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RetryPolicy {
    /// Attempts in total, the first included (>= 1).
    pub max_attempts: u32,
    /// Delay before the second attempt.
    pub backoff_ms: u64,
    /// Multiplier applied per further attempt.
    pub factor: f64,
    /// Upper bound of any single delay.
    pub max_backoff_ms: u64,
    /// Error codes that are never retried.
    pub non_retryable: Vec<String>,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_attempts: 3,
            backoff_ms: 1_000,
            factor: 2.0,
            max_backoff_ms: 60_000,
            non_retryable: Vec::new(),
        }
    }
}

/// A compiled workflow definition.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Workflow {
    /// Workflow name.
    pub name: String,
    /// Semver version string.
    pub version: String,
    /// The resolved input record type.
    pub input: Type,
    /// The workflow's output expression, if it declares one. Without one the
    /// execution's output is the empty record `{}` (that is the type a
    /// parent's child step reads).
    pub output: Option<Expr>,
    /// Steps in declaration order (the order is semantic: it breaks
    /// scheduling ties).
    pub steps: Vec<Step>,
    /// `requires_idempotency_key: true`.
    pub requires_idempotency_key: bool,
    /// Default retry policy of task steps and compensations.
    pub retry: RetryPolicy,
    /// Cap on active executions of this workflow.
    pub max_active: Option<u64>,
    /// Every task contract a step or compensation of this workflow uses,
    /// by task name.
    pub tasks: BTreeMap<String, TaskContract>,
}

/// One step of a workflow.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Step {
    /// Step name, unique in its workflow.
    pub name: String,
    /// What the step does.
    pub kind: StepKind,
    /// `for VAR in EXPR`: fan-out over a list.
    pub for_each: Option<ForEach>,
    /// `if: EXPR` (a `Bool`); false skips the step.
    pub condition: Option<Expr>,
    /// Names of the steps this step depends on (read by its expressions, or
    /// named in `after`), in declaration order, without duplicates.
    pub depends_on: Vec<String>,
    /// `max_concurrency` of a `for` step.
    pub max_concurrency: Option<u32>,
    /// `compensate { .. }` of a task step.
    pub compensate: Option<Compensation>,
}

/// `for VAR in LIST`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ForEach {
    /// The loop variable's name.
    pub var: String,
    /// The list to iterate (evaluated once, stored in `StepFanOut`).
    pub list: Expr,
}

/// The settings of a task unit: a task step's own, or a compensation's.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskCall {
    /// Task name (key into [`Workflow::tasks`]).
    pub task: String,
    /// The `with` expression: the task's input.
    pub input: Expr,
    /// `idempotency_key: EXPR` (a `String`); `None` = the default key.
    pub idempotency_key: Option<Expr>,
    /// Effective retry policy (the step's, else the workflow's).
    pub retry: RetryPolicy,
    /// Attempt timeout from each dispatch, in milliseconds.
    pub timeout_ms: Option<u64>,
    /// From first scheduling until first dispatch, in milliseconds.
    pub queue_timeout_ms: Option<u64>,
}

/// The kind of a step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum StepKind {
    /// `worker "task.name" with EXPR`.
    Task(TaskCall),
    /// `workflow Name version "X" with EXPR`.
    Workflow {
        /// Child workflow name.
        workflow: String,
        /// Child workflow version.
        version: String,
        /// The child's `definition_hash`, pinned at compile time.
        definition_hash: String,
        /// The child's input.
        input: Expr,
    },
    /// `sleep DURATION_EXPR`.
    Sleep {
        /// A `Duration` expression.
        duration: Expr,
    },
    /// `signal "name"` with an optional `timeout`.
    Signal {
        /// Signal name.
        name: String,
        /// Give up waiting after this long (`SIGNAL_TIMEOUT`).
        timeout_ms: Option<u64>,
    },
}

/// `compensate { worker .. with .. }` of a task step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Compensation {
    /// The compensating task call. Its expressions may read the compensated
    /// step's own name (the unit's output) and the loop variable.
    pub call: TaskCall,
}

impl Workflow {
    /// The step called `name`.
    pub fn step(&self, name: &str) -> Option<&Step> {
        self.steps.iter().find(|s| s.name == name)
    }
}
