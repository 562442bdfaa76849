//! Invariant 2: no lost commits. Every answer a client or worker received
//! that says something happened — an execution created, a signal's `seq`, a
//! `202` cancel, a task handed out, a result `accepted: true` — must be in
//! the durable history, after every crash and at the end of the run.

use super::{Invariant, Violation};
use orbit_core::history::{Event, EventKind};

/// Something a client or worker was told.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fact {
    /// A start answered with this execution id.
    Created {
        /// Execution id.
        execution: String,
    },
    /// A signal answered with its `seq`.
    Signal {
        /// Execution id.
        execution: String,
        /// Signal name.
        name: String,
        /// The answered seq.
        seq: u64,
    },
    /// A cancel answered `202`.
    CancelRequested {
        /// Execution id.
        execution: String,
    },
    /// A task handed to a worker.
    Dispatched {
        /// Execution id.
        execution: String,
        /// Unit.
        unit: String,
        /// The delivery's token.
        token: String,
    },
    /// A success answered `accepted: true`.
    Succeeded {
        /// Execution id.
        execution: String,
        /// Unit.
        unit: String,
        /// Attempt of the reporting token.
        attempt: u32,
        /// The reporting delivery's token.
        token: String,
    },
    /// A failure answered `accepted: true`.
    AttemptFailed {
        /// Execution id.
        execution: String,
        /// Unit.
        unit: String,
        /// Attempt of the reporting token.
        attempt: u32,
        /// The reporting delivery's token.
        token: String,
    },
}

impl Fact {
    /// The execution it concerns.
    pub fn execution(&self) -> &str {
        match self {
            Fact::Created { execution }
            | Fact::Signal { execution, .. }
            | Fact::CancelRequested { execution }
            | Fact::Dispatched { execution, .. }
            | Fact::Succeeded { execution, .. }
            | Fact::AttemptFailed { execution, .. } => execution,
        }
    }
}

/// Checks that `events` (the durable history of the fact's execution)
/// holds what `fact` says.
pub fn check(fact: &Fact, events: &[Event]) -> Result<(), Violation> {
    let found = match fact {
        Fact::Created { .. } => matches!(
            events.first().map(|e| &e.kind),
            Some(EventKind::WorkflowCreated { .. })
        ),
        Fact::Signal { name, seq, .. } => events.iter().any(|e| {
            e.seq == *seq && matches!(&e.kind, EventKind::SignalReceived { name: n, .. } if n == name)
        }),
        Fact::CancelRequested { .. } => events
            .iter()
            .any(|e| matches!(e.kind, EventKind::WorkflowCancelRequested { .. })),
        Fact::Dispatched { unit, token, .. } => events.iter().any(|e| {
            matches!(&e.kind, EventKind::StepDispatched { step, token: t, .. } if step == unit && t == token)
        }),
        Fact::Succeeded { unit, attempt, .. } => events.iter().any(|e| {
            matches!(&e.kind, EventKind::StepSucceeded { step, attempt: a, .. } if step == unit && a == attempt)
        }),
        Fact::AttemptFailed { unit, attempt, .. } => events.iter().any(|e| {
            matches!(&e.kind, EventKind::StepAttemptFailed { step, attempt: a, .. } if step == unit && a == attempt)
        }),
    };
    if found {
        return Ok(());
    }
    let v = Violation::new(
        Invariant::NoLostCommits,
        format!("acknowledged but not in the durable history: {fact:?}"),
    )
    .in_execution(fact.execution(), events);
    Err(match fact {
        Fact::Dispatched { unit, .. }
        | Fact::Succeeded { unit, .. }
        | Fact::AttemptFailed { unit, .. } => v.at_unit(unit),
        _ => v,
    })
}

/// Checks that the server's answer to `GET /v1/executions/{id}` agrees with
/// the committed row: the execution exists and has the stored status.
pub fn read_back(
    row: &orbit_core::store::ExecutionRow,
    events: &[Event],
    response: &orbit_core::engine::Response,
) -> Result<(), Violation> {
    let status = response.body.get("status").and_then(|s| s.as_str());
    if response.status == 200 && status == Some(row.status.as_str()) {
        return Ok(());
    }
    Err(Violation::new(
        Invariant::NoLostCommits,
        format!(
            "committed as {} but the server reads it back as {} {}",
            row.status, response.status, response.body
        ),
    )
    .in_execution(&row.id, events))
}
