//! The sans-I/O Engine: `handle(now, input) -> effects`.
//!
//! See [`Engine`] for how a driver uses it.

mod batch;
mod config;
mod effect;
mod ids;
mod input;

pub use batch::{
    Batch, BatchId, DefinitionRecord, ExecutionAppend, IdempotencyRecord, StorageResult,
    StoredExecution, Summary,
};
pub use config::Config;
pub use effect::{Effect, Response, Task};
pub use ids::{CountingIds, IdSource};
pub use input::{IdempotencyScope, Input, ListFilter, Outcome, Request, RequestId, Start};

use crate::history::Millis;

/// ORBIT's runtime as a deterministic state machine.
///
/// # How a driver uses it
///
/// The engine never performs I/O, never reads a clock and never draws
/// randomness. A driver (tokio in production, the seeded world in
/// simulation) owns it and loops:
///
/// 1. Feed one [`Input`] with the current time: `engine.handle(now, input)`.
///    Inputs are requests ([`Input::Request`]), storage results
///    ([`Input::Stored`], [`Input::Reloaded`]), startup state
///    ([`Input::Recover`], once, first) and the passing of time
///    ([`Input::Tick`]).
/// 2. Execute **every** returned [`Effect`], in order:
///    - [`Effect::Append`]: write the batch atomically, then feed
///      [`Input::Stored`] with its id and the outcome. Batches may be written
///      concurrently or grouped into one transaction, each gets its own
///      result.
///    - [`Effect::Reload`]: read those executions' histories from the store,
///      then feed [`Input::Reloaded`].
///    - [`Effect::Reply`]: answer the request with that id.
///    - [`Effect::WakeAt`]: arrange to feed [`Input::Tick`] at that time
///      (only the latest `WakeAt` counts).
///    - [`Effect::Committed`]: informational (follow streams, metrics).
///
/// "Events before effects": nothing the engine says is acted on before the
/// events that justify it are durable. Replies to creating requests and
/// task hand-outs come only after the driver fed back `StorageResult::Ok`
/// for the batch holding their events. Long polls and waits are parked in
/// the engine and answered by a later `Reply` (when tasks are dispatched to
/// them, when the execution ends, or at their deadline via `Tick`).
pub struct Engine {
    config: Config,
    ids: Box<dyn IdSource>,
    now: Millis,
}

impl Engine {
    /// A new engine. Feed [`Input::Recover`] first when the store is not
    /// empty.
    pub fn new(config: Config, ids: Box<dyn IdSource>) -> Engine {
        Engine { config, ids, now: 0 }
    }

    /// Handles one input at time `now` (ms since the epoch; never goes back:
    /// an earlier `now` is treated as the latest seen) and returns the
    /// effects to execute.
    pub fn handle(&mut self, now: Millis, input: Input) -> Vec<Effect> {
        self.now = self.now.max(now);
        let _ = (&self.config, &mut self.ids);
        match input {
            Input::Request { id, .. } => vec![Effect::Reply {
                request: id,
                response: Response::error(503, "STORAGE_ERROR", "engine not implemented yet"),
            }],
            _ => Vec::new(),
        }
    }
}
