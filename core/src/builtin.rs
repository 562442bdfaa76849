//! Built-in tasks: the `orbit.*` task names the runtime declares and runs
//! itself. Only the HTTP task `orbit.http` exists. The compiler takes its
//! contract from here; the engine hands its units to the built-in session
//! only (never to a worker), and the production driver's executor
//! (`orbit_io_tokio::builtin`) performs the requests.

use crate::ir::{TaskContract, Type};
use std::collections::BTreeMap;

/// Prefix of every built-in task name.
pub const PREFIX: &str = "orbit.";

/// The HTTP task.
pub const HTTP_TASK: &str = "orbit.http";

/// The contract version delivered with `orbit.http` units.
pub const HTTP_CONTRACT_VERSION: &str = "1.0.0";

/// The `worker_id` recorded in `StepDispatched` for built-in deliveries.
pub const WORKER_ID: &str = "orbit";

/// The reason of `StepAttemptUncertain` for a built-in attempt that was
/// running when the runtime restarted (seed `003_…`).
pub const RESTART_REASON: &str = "runtime restarted while the built-in task was running";

/// True for a name in the reserved `orbit.` space.
pub fn is_reserved(task: &str) -> bool {
    task.starts_with(PREFIX)
}

/// The contract of the built-in task `name`, if there is one.
///
/// `orbit.http`: input `{method: String, url: String, headers: Json?,
/// body: Json?, timeout: Duration?}`, output `{status: Int, headers: Json,
/// body: Json}`.
pub fn contract(name: &str) -> Option<TaskContract> {
    if name != HTTP_TASK {
        return None;
    }
    let optional = |t: Type| Type::Optional(Box::new(t));
    let input = BTreeMap::from([
        ("method".to_string(), Type::String),
        ("url".to_string(), Type::String),
        ("headers".to_string(), optional(Type::Json)),
        ("body".to_string(), optional(Type::Json)),
        ("timeout".to_string(), optional(Type::Duration)),
    ]);
    let output = BTreeMap::from([
        ("status".to_string(), Type::Int),
        ("headers".to_string(), Type::Json),
        ("body".to_string(), Type::Json),
    ]);
    Some(TaskContract {
        name: HTTP_TASK.to_string(),
        version: HTTP_CONTRACT_VERSION.to_string(),
        input: Type::Record(input),
        output: Type::Record(output),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_orbit_http_is_built_in() {
        assert!(contract(HTTP_TASK).is_some());
        assert!(contract("orbit.smtp").is_none());
        assert!(is_reserved("orbit.smtp"));
        assert!(!is_reserved("orbitx.http"));
    }
}
