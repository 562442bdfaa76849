//! The sans-I/O Engine: `handle(now, input) -> effects`.
//!
//! See [`Engine`] for how a driver uses it.

mod admission;
mod batch;
mod builtin;
mod config;
mod control;
pub mod decide;
mod deploy;
mod effect;
mod finished;
mod idempotency;
mod idle;
mod ids;
mod input;
pub mod json;
mod keyed;
mod load;
mod memory;
mod parts;
mod planted;
mod queue;
mod reads;
mod recovery;
mod results;
mod shared;
mod start;
mod state;
mod storage;
mod time;
mod timers;
mod together;
mod txn;
mod view;
mod waits;
mod worker;

pub use time::rfc3339;

pub use batch::{
    Batch, BatchId, ConsumedEntry, DefinitionRecord, ExecutionAppend, IdempotencyRecord,
    StorageResult, StoredExecution, Summary,
};
pub use config::{Config, FINISHED_CACHE, IDLE_EVICT_MS, MAX_IN_MEMORY};
pub use effect::{Body, Effect, Response, Task};
pub use ids::{CountingIds, IdSource};
pub use input::{IdempotencyScope, Input, ListFilter, Outcome, Request, RequestId, Start};
pub use load::LoadId;
pub use planted::Bug;
pub use reads::{event_view, execution_view, NOT_HELD};
pub use shared::{ClaimId, SendId, INBOX_REQUESTS};
pub use view::ExecutionView;

use crate::history::Millis;
use load::Loads;
use memory::Executions;
use std::collections::{BTreeMap, BTreeSet, VecDeque};

/// How often time-based rules are checked at most (`runtime.md`: every
/// 100 ms); also the retry delay after a failed write.
pub const TICK_MS: Millis = 100;

/// ORBIT's runtime as a deterministic state machine.
///
/// # How a driver uses it
///
/// The engine never performs I/O, never reads a clock and never draws
/// randomness. A driver (tokio in production, the seeded world in
/// simulation) owns it and loops:
///
/// 1. Feed one [`Input`] with the current time: `engine.handle(now, input)`
///    (the results of one group commit together: `engine.handle_all`).
///    Inputs are requests ([`Input::Request`]), storage results
///    ([`Input::Stored`], [`Input::Reloaded`]), startup state
///    ([`Input::Recover`], once, first) and the passing of time
///    ([`Input::Tick`]).
/// 2. Execute **every** returned [`Effect`], in order:
///    - [`Effect::Append`]: write the batch atomically, then feed
///      [`Input::Stored`] with its id and the outcome. Batches may be written
///      concurrently or grouped into one transaction; each gets its own
///      result.
///    - [`Effect::Reload`]: read those executions' histories from the store,
///      then feed [`Input::Reloaded`].
///    - [`Effect::Load`]: read those executions' histories and idempotency
///      records from the store, then feed [`Input::Loaded`] (a command
///      naming something the engine does not hold waits for it).
///    - [`Effect::Reply`]: answer the request with that id.
///    - [`Effect::WakeAt`]: arrange to feed [`Input::Tick`] at that time
///      (only the latest `WakeAt` counts).
///    - [`Effect::Committed`]: informational (follow streams, metrics).
///
/// "Events before effects": nothing the engine says is acted on before the
/// events that justify it are durable. Replies to creating requests and
/// task hand-outs come only after the driver fed back `StorageResult::Ok`
/// for the batch holding their events; `Unavailable` and `Conflict` leave
/// memory exactly as it was and fail the requests with `503 STORAGE_ERROR`;
/// after `Ambiguous` the engine reloads the executions concerned and answers
/// from what the store really holds.
///
/// At most one batch per execution is in flight: inputs for an execution
/// whose batch is uncommitted wait inside the engine and are handled after
/// its result.
///
/// Long polls and waits are parked in the engine and answered by a later
/// `Reply`: when tasks are dispatched to the poll (after their
/// `StepDispatched` commit), when the execution ends, or at their deadline
/// (the engine asks for a `Tick` then). [`Input::Abandoned`] forgets one.
pub struct Engine {
    config: Config,
    ids: Box<dyn IdSource>,
    now: Millis,
    out: Vec<Effect>,
    last_wake: Option<Millis>,
    ordinal: u64,
    /// Executions in memory, by id.
    executions: Executions,
    /// Executions to decide again before the next batch.
    dirty: BTreeSet<String>,
    /// (time, execution) of every timer, retry and deadline due.
    wakes: BTreeSet<(Millis, String)>,
    /// When the last tick ran: the entries of `wakes` due by then were
    /// looked at.
    ticked_at: Millis,
    /// Executions to look at again a tick after they asked, with when:
    /// inputs that come meanwhile do not put it off, and a tick that comes
    /// sooner for something else leaves it alone.
    soon: BTreeMap<String, Millis>,
    /// A tick's read of evicted executions whose wake-up came, and the
    /// wake-ups: the tick decides what is due once they are back.
    tick_read: Option<(load::LoadId, Vec<(Millis, String)>)>,
    /// Reads of evicted executions that the follow-up work of an input
    /// waits for (a parent whose child ended): until they are answered,
    /// nothing else is decided, so the parent is decided among the others
    /// as if it had never left.
    barrier: BTreeSet<load::LoadId>,
    /// Answers of other loads that came while a barrier held: they are
    /// handled once it is gone, after the work it held back, as they would
    /// have come had its executions never left memory.
    held_answers: VecDeque<Input>,
    /// Until then, hand-outs recovered from the store wait for their
    /// workers to report before they are redelivered.
    recovery_until: Option<Millis>,
    /// Finished executions still in memory, oldest first (see `finished`).
    finished: VecDeque<String>,
    /// Loads in progress and the requests parked on them.
    loads: Loads,
    /// Idle executions: when to look at them, and what is kept of the
    /// evicted ones (see `idle`).
    idle: idle::Idle,
    registry: parts::Registry,
    work: parts::Work,
    keys: parts::Keys,
    writes: parts::Writes,
    admission: parts::Admission,
    shared: shared::Shared,
    #[cfg_attr(not(feature = "planted-bugs"), allow(dead_code))]
    planted: planted::Planted,
}

impl Engine {
    /// A new engine. Feed [`Input::Recover`] first when the store is not
    /// empty.
    pub fn new(mut config: Config, ids: Box<dyn IdSource>) -> Engine {
        if config.node_id.is_some() {
            // A shared-mode node keeps what it owns in memory: an owner
            // must know every execution it owns to judge its inbox.
            config.idle_evict_ms = None;
            config.max_in_memory = None;
        }
        let seed = config.hash_seed;
        Engine {
            config,
            ids,
            now: 0,
            out: Vec::new(),
            last_wake: None,
            ordinal: 0,
            executions: Executions::new(seed),
            dirty: BTreeSet::new(),
            wakes: BTreeSet::new(),
            ticked_at: 0,
            soon: BTreeMap::new(),
            tick_read: None,
            barrier: BTreeSet::new(),
            held_answers: VecDeque::new(),
            recovery_until: None,
            finished: VecDeque::new(),
            loads: Loads::default(),
            idle: idle::Idle::default(),
            registry: parts::Registry::default(),
            work: parts::Work::new(seed),
            keys: parts::Keys::default(),
            writes: parts::Writes::default(),
            admission: parts::Admission::default(),
            shared: shared::Shared::default(),
            planted: planted::Planted::default(),
        }
    }

    /// Handles one input at time `now` (ms since the epoch; an earlier `now`
    /// than one seen before is treated as the latest seen: time never goes
    /// back inside the engine) and returns the effects to execute.
    pub fn handle(&mut self, now: Millis, input: Input) -> Vec<Effect> {
        self.handle_all(now, [input])
    }

    /// Handles several inputs that arrived together (the results of the
    /// batches of one group commit), then does the follow-up work once:
    /// an execution that depends on several of them (a parent whose
    /// children ended in the same commit) is decided once, on all of them,
    /// as it is when it comes back from the store after them.
    pub fn handle_all(
        &mut self,
        now: Millis,
        inputs: impl IntoIterator<Item = Input>,
    ) -> Vec<Effect> {
        self.now = self.now.max(now);
        for input in inputs {
            self.apply(input);
        }
        self.after_input();
        while self.barrier.is_empty() {
            let Some(input) = self.held_answers.pop_front() else {
                break;
            };
            self.apply(input);
            self.after_input();
        }
        self.trim_finished();
        self.settle_inbox_replies();
        let wake = self.next_wake();
        if wake.is_some() && wake != self.last_wake {
            self.out.push(Effect::WakeAt(wake.unwrap_or_default()));
        }
        self.last_wake = wake;
        // The next call's effects start in a vector as large as this
        // call's: grown from empty on every call, it was reallocated and
        // copied several times per call.
        let room = self.out.len();
        std::mem::replace(&mut self.out, Vec::with_capacity(room))
    }

    fn apply(&mut self, input: Input) {
        if let Input::Loaded { load, .. } | Input::LoadFailed { load, .. } = &input {
            if !self.barrier.is_empty() && !self.barrier.contains(load) {
                self.held_answers.push_back(input);
                return;
            }
        }
        match input {
            Input::Tick => self.tick(),
            Input::Request { id, request } => self.request(id, request),
            Input::Requests { requests } => self.together(requests),
            Input::Stored { batch, result } => {
                self.stored(batch, result);
                for (id, request) in self.writes.after.remove(&batch).unwrap_or_default() {
                    self.request(id, request);
                }
            }
            Input::Reloaded { executions } => self.reloaded(executions),
            Input::Loaded {
                load,
                executions,
                idempotency,
            } => self.loaded(load, executions, idempotency),
            Input::LoadFailed { load, message } => self.load_failed(load, &message),
            Input::Recover {
                definitions,
                executions,
                idempotency,
            } => self.recover(definitions, executions, idempotency),
            Input::Abandoned { id } => {
                self.work.polls.remove(&id);
                self.work.waits.remove(id);
            }
            Input::Adopt { executions } => self.adopt(executions),
            Input::Inbox { entries } => self.inbox(entries),
            Input::Sent { send, result } => self.sent(send, result),
            Input::Claimed { claim, result } => self.claimed(claim, result),
            Input::SessionContacts { contacts } => self.session_contacts(contacts),
            Input::DropOwned { reason } => self.drop_owned(&reason),
            Input::Reclaimed => self.reclaimed(),
            Input::Definitions { definitions } => self.definitions_read(definitions),
            Input::SignalFound { watch, seq } => self.signal_found(watch, seq),
        }
    }

    /// The committed projection of an execution (for tests and reads).
    pub fn projection(&self, execution_id: &str) -> Option<&crate::history::Projection> {
        self.executions
            .get(execution_id)
            .map(|e| &e.proj)
            .filter(|p| p.last_seq > 0)
    }

    /// The current configuration.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Number of batches written but not yet answered.
    pub fn batches_in_flight(&self) -> usize {
        self.writes.batches.len()
    }

    fn request(&mut self, id: RequestId, request: Request) {
        match request {
            Request::Deploy {
                definitions,
                idempotency,
            } => self.deploy(id, definitions, idempotency),
            Request::ListDefinitions => self.list_definitions(id),
            Request::GetDefinition { name, version } => self.get_definition(id, &name, &version),
            request @ Request::Start(_) => self.start(id, request),
            Request::GetExecution { execution_id } => self.get_execution(id, &execution_id),
            Request::ListExecutions(filter) => self.list_executions(id, filter),
            Request::History {
                execution_id,
                after_seq,
            } => self.get_history(id, &execution_id, after_seq),
            r @ Request::Signal { .. } => self.signal(id, r),
            r @ Request::Cancel { .. } => self.cancel(id, r),
            Request::Wait {
                execution_id,
                timeout_ms,
            } => self.wait(id, &execution_id, timeout_ms),
            Request::WaitHeld {
                execution_id,
                timeout_ms,
            } => self.wait_held(id, &execution_id, timeout_ms),
            Request::RegisterWorker {
                worker_id,
                task_patterns,
                max_tasks,
            } => self.register_worker(id, worker_id, task_patterns, max_tasks),
            Request::ListWorkers => self.list_workers(id),
            Request::Poll {
                session_id,
                max_tasks,
                wait_ms,
                held,
            } => self.poll(id, &session_id, max_tasks, wait_ms, &held),
            Request::Heartbeat { session_id, held } => self.heartbeat(id, &session_id, &held),
            Request::Unregister { session_id } => self.unregister(id, &session_id),
            r @ Request::Result { .. } => self.result(id, r),
            Request::RegisterBuiltin { max_tasks } => self.register_builtin(id, max_tasks),
            Request::BuiltinUncertain {
                session_id,
                token,
                reason,
            } => self.builtin_uncertain(id, &session_id, &token, reason),
            Request::Dispatched {
                execution_id,
                dispatch,
            } => self.dispatched(id, &execution_id, dispatch),
            Request::Lost { token, reason } => self.lost(id, &token, reason),
        }
    }

    fn reply(&mut self, request: RequestId, response: Response) {
        if let Some(open) = &mut self.writes.open {
            // Handled together with others: judged on what they proposed,
            // so answered once that is durable (and `STORAGE_ERROR` if it
            // never is), like every answer of the batch.
            return open.reply(request, response, None);
        }
        self.out.push(Effect::Reply { request, response });
    }

    /// Queues `request` behind the batch in flight for `exec_id`.
    fn park_behind(&mut self, exec_id: &str, id: RequestId, request: Request) {
        if let Some(e) = self.executions.get_mut(exec_id) {
            e.waiting.push_back((id, request));
        }
    }

    /// Asks for another decider pass on `exec_id` one tick from now.
    fn retry_soon(&mut self, exec_id: &str) {
        let at = self.now + TICK_MS;
        self.soon.entry(exec_id.to_string()).or_insert(at);
    }
}
