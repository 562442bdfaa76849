//! What a driver feeds into [`super::Engine::handle`]: client and worker
//! requests, storage results, reloaded state, and the passing of time.

use super::batch::{BatchId, DefinitionRecord, IdempotencyRecord, StorageResult, StoredExecution};
use crate::history::{ErrorInfo, Status};
use serde::{Deserialize, Serialize};

/// The driver's handle on one request; every [`Request`] is answered by
/// exactly one [`super::Effect::Reply`] carrying the same id (possibly much
/// later: after a commit, or when a long poll or a wait ends).
pub type RequestId = u64;

/// One input of the engine.
#[derive(Debug, Clone, PartialEq)]
pub enum Input {
    /// Time passed: fire due timers, retries, timeouts, session and poll
    /// deadlines. The driver feeds it at (or after) every
    /// [`super::Effect::WakeAt`] time; extra ticks are harmless.
    Tick,
    /// A client or worker request.
    Request {
        /// Echoed in the reply.
        id: RequestId,
        /// What is asked.
        request: Request,
    },
    /// Requests that arrived together and are handled as one, in order:
    /// what they write goes in one batch, and a poll among them can take
    /// the tasks the others schedule (a worker's results and its next poll,
    /// answered after one commit). Each is still answered on its own id.
    Requests {
        /// `(id, request)`, handled in this order.
        requests: Vec<(RequestId, Request)>,
    },
    /// The outcome of writing an [`super::Effect::Append`] batch.
    Stored {
        /// The batch's id.
        batch: BatchId,
        /// What the store did.
        result: StorageResult,
    },
    /// What the store really holds for executions named in an
    /// [`super::Effect::Reload`] (after an ambiguous or stale write). An
    /// execution the store does not have is passed with no events.
    Reloaded {
        /// One entry per execution named in the `Reload`.
        executions: Vec<StoredExecution>,
    },
    /// What the store holds for an [`super::Effect::Load`]: one entry per
    /// execution named (no events: the store does not have it), and one per
    /// idempotency key named (`None`: no live record).
    Loaded {
        /// The load's id.
        load: super::LoadId,
        /// The executions named, with their full histories.
        executions: Vec<StoredExecution>,
        /// The keys named, with their live records.
        idempotency: Vec<(String, Option<IdempotencyRecord>)>,
    },
    /// An [`super::Effect::Load`] could not be read (the store is
    /// unavailable). The request waiting for it is answered
    /// `503 STORAGE_ERROR` at once, nothing applied; the driver keeps
    /// trying the read, and its eventual `Loaded` only warms memory.
    LoadFailed {
        /// The load's id.
        load: super::LoadId,
        /// Why the read failed.
        message: String,
    },
    /// Startup: everything the store holds that the engine must know. Feed
    /// it once, before any request. `executions` must include every
    /// non-terminal execution; finished ones are not needed (the engine
    /// loads what it needs of them, finished children of live parents
    /// included) and those passed are kept only as recent ones.
    Recover {
        /// Registered definitions.
        definitions: Vec<DefinitionRecord>,
        /// Executions with their full histories.
        executions: Vec<StoredExecution>,
        /// Unexpired API idempotency records. The engine does not keep
        /// them (it loads a key's record when a request carries it); pass
        /// none.
        idempotency: Vec<IdempotencyRecord>,
    },
    /// The client behind a parked request (long poll, wait) went away; the
    /// engine forgets it without replying.
    Abandoned {
        /// The parked request.
        id: RequestId,
    },
    /// Shared cluster mode: executions this node now owns (taken over from
    /// a dead node, or its own taken back after a restart), each with its
    /// whole history and the epoch it owns it at. They are recovered as
    /// after a restart; a copy already in memory is dropped first.
    Adopt {
        /// (history, epoch) of each.
        executions: Vec<(StoredExecution, u64)>,
    },
    /// Shared cluster mode: entries of this node's inbox, in id order, none
    /// fed before unless it came back [`super::Effect::InboxDone`] with
    /// `applied: false`.
    Inbox {
        /// The entries.
        entries: Vec<crate::store::shared::Entry>,
    },
    /// Shared cluster mode: the answer of a [`super::Effect::Send`].
    Sent {
        /// The send's id.
        send: super::SendId,
        /// What the store did, or why it could not.
        result: Result<crate::store::shared::Sent, String>,
    },
    /// Shared cluster mode: the answer of a [`super::Effect::Claim`].
    Claimed {
        /// The claim's id.
        claim: super::ClaimId,
        /// The task claimed (none matched), or why the claim failed.
        result: Result<Vec<crate::store::shared::Claimed>, crate::store::StorageError>,
    },
    /// Shared cluster mode: the last contact of worker sessions polling
    /// other nodes ([`super::Engine::remote_sessions`]), as the database
    /// last saw it.
    SessionContacts {
        /// One per session that has a contact.
        contacts: Vec<crate::store::shared::SessionContact>,
    },
    /// Shared cluster mode: the answer of a [`super::Effect::FindSignal`].
    SignalFound {
        /// Its watch.
        watch: u64,
        /// The signal's seq, once the owner recorded it.
        seq: Option<u64>,
    },
    /// Shared cluster mode: the definitions the store holds (asked for
    /// with [`super::Effect::ReadDefinitions`], or read now and then):
    /// those deployed through other nodes are registered here too.
    Definitions {
        /// Every registered definition.
        definitions: Vec<DefinitionRecord>,
    },
    /// Shared cluster mode: this node could not reach the database for
    /// `--node-timeout` (another may own its executions by now): it drops
    /// every execution it owns, answering what waits on them with
    /// `503 STORAGE_ERROR`, and takes back later what is still its own.
    DropOwned {
        /// For the answers.
        reason: String,
    },
    /// Shared cluster mode: the reclaim after this node's start (or after
    /// its last [`Input::DropOwned`]) is over and what it took back is
    /// adopted. Until then a token the engine does not know may be one of
    /// its own executions not held again yet: a result for it is answered
    /// `503 NOT_READY` (the worker reports it again) instead of `accepted:
    /// false`, and a heartbeat does not cancel it.
    Reclaimed,
}

/// The API-level idempotency scope of a creating request (seed `002_…`).
/// The driver builds `key` from the caller's credential, the method, the
/// concrete path and the `Idempotency-Key` header, and `fingerprint` from the
/// canonical JSON of the body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IdempotencyScope {
    /// The scoped key.
    pub key: String,
    /// SHA-256 of the canonical request body.
    pub fingerprint: String,
}

/// A client or worker request (the HTTP API of `api.md`, parsed).
#[derive(Debug, Clone, PartialEq)]
pub enum Request {
    /// `POST /v1/definitions` with already compiled definitions (children
    /// before parents, as `check::compile` returns them).
    Deploy {
        /// What to register.
        definitions: Vec<DefinitionRecord>,
        /// Optional idempotency scope.
        idempotency: Option<IdempotencyScope>,
    },
    /// `GET /v1/definitions`.
    ListDefinitions,
    /// `GET /v1/definitions/{name}/{version}`.
    GetDefinition {
        /// Workflow name.
        name: String,
        /// Version.
        version: String,
    },
    /// `POST /v1/executions`.
    Start(Start),
    /// `GET /v1/executions/{id}`.
    GetExecution {
        /// Execution id.
        execution_id: String,
    },
    /// `GET /v1/executions?status=&workflow=&limit=&cursor=`.
    ListExecutions(ListFilter),
    /// `GET /v1/executions/{id}/history?after_seq=`.
    History {
        /// Execution id.
        execution_id: String,
        /// Only events with a larger seq.
        after_seq: Option<u64>,
    },
    /// `POST /v1/executions/{id}/signals/{name}`.
    Signal {
        /// Execution id.
        execution_id: String,
        /// Signal name.
        name: String,
        /// Payload (null when absent).
        payload: serde_json::Value,
        /// Optional idempotency scope.
        idempotency: Option<IdempotencyScope>,
    },
    /// `POST /v1/executions/{id}/cancel`.
    Cancel {
        /// Execution id.
        execution_id: String,
        /// The caller's reason.
        reason: Option<String>,
        /// Optional idempotency scope.
        idempotency: Option<IdempotencyScope>,
    },
    /// `POST /v1/executions/{id}/wait?timeout_ms=`: answered when the
    /// execution is terminal or the timeout passed, with the execution as
    /// `GetExecution` shows it.
    Wait {
        /// Execution id.
        execution_id: String,
        /// How long to wait at most.
        timeout_ms: u64,
    },
    /// `Wait`, only if the engine holds the execution in memory (running,
    /// or finished a moment ago); otherwise answered at once with
    /// `NOT_HELD`, and the caller reads the store instead. The HTTP edge
    /// asks this first: waiting on a running execution then costs no read
    /// of the store, and a finished one is still read outside the engine.
    WaitHeld {
        /// Execution id.
        execution_id: String,
        /// How long to wait at most.
        timeout_ms: u64,
    },
    /// `POST /v1/workers`.
    RegisterWorker {
        /// The worker's self-chosen id (`flaky-1`).
        worker_id: String,
        /// Exact names, `*`, or `prefix.*`.
        task_patterns: Vec<String>,
        /// Default cap on tasks per poll.
        max_tasks: Option<u32>,
    },
    /// `GET /v1/workers`: the live worker sessions, with their patterns, last
    /// contact and the deliveries they hold.
    ListWorkers,
    /// `POST /v1/workers/{session}/poll` (long poll).
    Poll {
        /// Session id.
        session_id: String,
        /// At most this many tasks.
        max_tasks: Option<u32>,
        /// Park for at most this long when nothing is queued.
        wait_ms: u64,
        /// Tokens the worker holds.
        held: Vec<String>,
    },
    /// `POST /v1/workers/{session}/heartbeat`.
    Heartbeat {
        /// Session id.
        session_id: String,
        /// Tokens the worker holds.
        held: Vec<String>,
    },
    /// `DELETE /v1/workers/{session}`.
    Unregister {
        /// Session id.
        session_id: String,
    },
    /// `POST /v1/tasks/{token}/result`.
    Result {
        /// The delivery's token.
        token: String,
        /// What the worker reports.
        outcome: Outcome,
        /// The task patterns the caller's credentials allow (a worker token
        /// under auth); `None` allows any task. The engine checks them
        /// against the token's task, so the check holds for tokens handed
        /// out before a restart too.
        patterns: Option<Vec<String>>,
    },
    /// The runtime's own executor of built-in tasks (`orbit.http`) opens
    /// its session: it takes `orbit.*` units only, and workers never do.
    /// In-process only; the HTTP API has no route to it. Answered like
    /// `RegisterWorker`.
    RegisterBuiltin {
        /// Default cap on tasks per poll.
        max_tasks: Option<u32>,
    },
    /// Shared cluster mode, from the inbox: a poll on some node claimed a
    /// queued unit of this execution and handed it out; record
    /// `StepDispatched`. The engine's own request (never from HTTP).
    Dispatched {
        /// The execution.
        execution_id: String,
        /// Which poll took it.
        dispatch: crate::store::shared::Dispatch,
    },
    /// Shared cluster mode, from the inbox: the node that handed out the
    /// delivery with `token` learned that its worker may not have it (the
    /// session ended, or never listed it): the attempt becomes uncertain
    /// with `reason`. The engine's own request (never from HTTP).
    Lost {
        /// The delivery.
        token: String,
        /// The reason recorded in `StepAttemptUncertain`.
        reason: String,
    },
    /// The built-in executor cannot know whether a delivery took effect (a
    /// timeout or a lost connection after the request was sent): the
    /// attempt becomes `StepAttemptUncertain` with `reason` and is
    /// redelivered with the same key. Answered `{"accepted": true}`.
    BuiltinUncertain {
        /// The built-in session.
        session_id: String,
        /// The delivery's token.
        token: String,
        /// The reason recorded.
        reason: String,
    },
}

/// The body of a start request.
#[derive(Debug, Clone, PartialEq)]
pub struct Start {
    /// Workflow name.
    pub workflow: String,
    /// Version; `None` = the highest registered (semver order).
    pub version: Option<String>,
    /// The execution's input.
    pub input: serde_json::Value,
    /// Client-chosen id; `None` = generated.
    pub execution_id: Option<String>,
    /// Optional idempotency scope.
    pub idempotency: Option<IdempotencyScope>,
    /// The request's W3C `traceparent` header; kept on the execution when
    /// valid, ignored otherwise.
    pub traceparent: Option<String>,
}

/// Filters of a list request.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ListFilter {
    /// Only executions with this status.
    pub status: Option<Status>,
    /// Only executions of this workflow.
    pub workflow: Option<String>,
    /// Only executions pinned to this workflow version.
    pub version: Option<String>,
    /// Only executions whose id starts with this (an exact id included).
    pub id_prefix: Option<String>,
    /// Page size (default 100, at most 1000).
    pub limit: Option<usize>,
    /// The `next_cursor` of the previous page.
    pub cursor: Option<String>,
}

/// A worker's task result.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// `{"output": ...}`.
    Output(serde_json::Value),
    /// `{"error": {code, message?, retryable?}}`.
    Error(ErrorInfo),
}
