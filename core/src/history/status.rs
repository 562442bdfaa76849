//! The status of an execution.

use serde::{Deserialize, Serialize};

/// Where an execution is in its life (`runtime.md`, "Executions").
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// Created, waiting for an admission slot.
    #[default]
    Pending,
    /// Admitted and running.
    Running,
    /// Running its compensations.
    Compensating,
    /// Terminal: completed.
    Completed,
    /// Terminal: failed.
    Failed,
    /// Terminal: cancelled.
    Cancelled,
}

impl Status {
    /// True for `completed`, `failed` and `cancelled`.
    pub fn is_terminal(self) -> bool {
        matches!(self, Status::Completed | Status::Failed | Status::Cancelled)
    }

    /// True for `running` and `compensating` (what admission caps count).
    pub fn is_active(self) -> bool {
        matches!(self, Status::Running | Status::Compensating)
    }

    /// The lower-case name used in the API.
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

    /// Parses the lower-case name (`?status=` of the list API).
    pub fn parse(text: &str) -> Option<Status> {
        Some(match text {
            "pending" => Status::Pending,
            "running" => Status::Running,
            "compensating" => Status::Compensating,
            "completed" => Status::Completed,
            "failed" => Status::Failed,
            "cancelled" => Status::Cancelled,
            _ => return None,
        })
    }
}
