//! What goes into the node loop (time, requests, I/O completions) and what
//! comes out of it (I/O requests for the driver to perform).

use crate::engine::{
    Batch, ClaimId, DefinitionRecord, IdempotencyRecord, Request, RequestId, Response, SendId,
    StoredExecution,
};
use crate::history::{Event, Millis};
use crate::store::shared::{Claimed, Entry, Kind, Members, Poll, Sent, SessionContact, Taken};
use crate::store::StorageError;
use std::sync::Arc;

/// Identifies a group commit in [`NodeInput::Committed`].
pub type CommitId = u64;

/// Identifies a load in [`NodeInput::Loaded`].
pub type LoadId = u64;

/// One transaction to write: the engine batches it groups, in order. The
/// driver writes them as one storage transaction
/// ([`crate::store::convert::group_transaction`]) and answers with one
/// result for all of them.
#[derive(Debug, Clone, PartialEq)]
pub struct GroupCommit {
    /// Echo it in [`NodeInput::Committed`].
    pub id: CommitId,
    /// The batches, each for executions no other batch in flight touches.
    pub batches: Vec<Batch>,
}

impl GroupCommit {
    /// Events in the whole transaction.
    pub fn events(&self) -> usize {
        self.batches
            .iter()
            .flat_map(|b| &b.executions)
            .map(|a| a.events.len())
            .sum()
    }
}

/// An input of the node loop, fed with the current time.
#[derive(Debug, Clone, PartialEq)]
pub enum NodeInput {
    /// Startup: what the store holds (fed once, first).
    Recover {
        /// Registered definitions.
        definitions: Vec<DefinitionRecord>,
        /// Executions with their full histories.
        executions: Vec<StoredExecution>,
        /// Unexpired API idempotency records.
        idempotency: Vec<IdempotencyRecord>,
    },
    /// A client or worker request.
    Request {
        /// Echoed in the reply.
        id: RequestId,
        /// What is asked.
        request: Request,
    },
    /// Requests handled as one, in order (see [`crate::engine::Input::Requests`]).
    Requests {
        /// `(id, request)`, each echoed in its own reply.
        requests: Vec<(RequestId, Request)>,
    },
    /// The caller of a parked request went away.
    Abandoned {
        /// The request.
        id: RequestId,
    },
    /// A group commit is written and waits only to be durable: it no
    /// longer takes one of the commit slots.
    Written {
        /// The commit.
        commit: CommitId,
    },
    /// A group commit finished: its one outcome.
    Committed {
        /// The commit.
        commit: CommitId,
        /// What the store answered (a commit task that died is `Ambiguous`).
        result: Result<(), StorageError>,
    },
    /// A load finished.
    Loaded {
        /// The load.
        load: LoadId,
        /// The executions named in the [`Io::Load`], one entry each (an
        /// execution the store does not hold has no events), or why the
        /// read failed (the node retries it with backoff).
        result: Result<Vec<StoredExecution>, StorageError>,
    },
    /// An [`Io::Fetch`] came back: what the store holds, or why it could
    /// not read (the node tries again later).
    Fetched {
        /// The fetch's id.
        load: LoadId,
        /// Its executions and idempotency records.
        result: Result<Fetched, StorageError>,
    },
    /// The time asked for with [`Io::WakeAt`] came (early or extra calls
    /// are harmless).
    Time,
    /// Shared mode: an [`Io::Beat`] came back.
    Beat {
        /// The members, or why the database did not answer.
        result: Result<Members, StorageError>,
    },
    /// Shared mode: an [`Io::TakeOver`] came back.
    TakenOver {
        /// What moved to this node.
        result: Result<Vec<Taken>, StorageError>,
    },
    /// Shared mode: an [`Io::Reclaim`] came back.
    Reclaimed {
        /// What this node took back.
        result: Result<Vec<Taken>, StorageError>,
    },
    /// Shared mode: an [`Io::ReadInbox`] came back.
    InboxRead {
        /// Echo of the read's number.
        read: u64,
        /// The entries, in id order.
        result: Result<Vec<Entry>, StorageError>,
    },
    /// Shared mode: an [`Io::Send`] came back.
    Sent {
        /// Echo of the send's id.
        send: SendId,
        /// Where the entry went.
        result: Result<Sent, StorageError>,
    },
    /// Shared mode: an [`Io::Claim`] came back.
    Claimed {
        /// Echo of the claim's id.
        claim: ClaimId,
        /// The task claimed, if any.
        result: Result<Vec<Claimed>, StorageError>,
    },
    /// Shared mode: an [`Io::TouchSessions`] came back.
    Touched {
        /// Whether it was written.
        result: Result<(), StorageError>,
    },
    /// Shared mode: an [`Io::FindSignal`] came back.
    SignalFound {
        /// Echo of its watch.
        watch: u64,
        /// The signal's seq once recorded (`None`: its entry is still in
        /// the owner's inbox).
        result: Result<Option<u64>, StorageError>,
    },
    /// Shared mode: an [`Io::ReadDefinitions`] came back.
    Definitions {
        /// Every registered definition.
        result: Result<Vec<DefinitionRecord>, StorageError>,
    },
    /// Shared mode: an [`Io::ReadSessions`] came back.
    SessionContacts {
        /// The contacts found.
        result: Result<Vec<SessionContact>, StorageError>,
    },
}

/// An I/O request of the node loop. The driver performs every one, in
/// order, and feeds the completions back as [`NodeInput`]s.
#[derive(Debug, Clone, PartialEq)]
pub enum Io {
    /// Write this transaction, then feed [`NodeInput::Committed`].
    Commit(Arc<GroupCommit>),
    /// Read these executions' histories, then feed [`NodeInput::Loaded`].
    Load {
        /// Echo it in [`NodeInput::Loaded`].
        id: LoadId,
        /// The executions to read.
        executions: Vec<String>,
    },
    /// Read these executions (whole histories; none when the store does not
    /// have one) and the live idempotency records of these scoped keys, on
    /// reader connections, and answer with [`NodeInput::Fetched`]. Reads
    /// only: it may run beside commits.
    Fetch {
        /// Echo it in [`NodeInput::Fetched`].
        id: LoadId,
        /// Execution ids.
        executions: Vec<String>,
        /// Scoped idempotency keys.
        idempotency: Vec<String>,
    },
    /// Feed [`NodeInput::Time`] at this time (only the latest counts).
    WakeAt(Millis),
    /// Answer the request with this id.
    Reply {
        /// The request.
        request: RequestId,
        /// The answer.
        response: Response,
    },
    /// Shared mode: write this node's contact and read the members
    /// (`shared::Store::beat`), then feed [`NodeInput::Beat`]. One at a
    /// time.
    Beat {
        /// This node.
        node_id: String,
        /// Its advertised URL.
        advertise: String,
        /// `--node-timeout`.
        timeout_ms: Millis,
    },
    /// Shared mode: take over a batch of a dead node's executions
    /// (`shared::Store::take_over`), then feed [`NodeInput::TakenOver`].
    TakeOver {
        /// This node.
        node_id: String,
        /// The dead node.
        dead: String,
        /// The live node ids of the last beat.
        live: Vec<String>,
        /// `--node-timeout`.
        timeout_ms: Millis,
        /// At most this many.
        limit: u32,
    },
    /// Shared mode: take this node's own executions back at a new epoch
    /// (`shared::Store::reclaim`), then feed [`NodeInput::Reclaimed`].
    Reclaim {
        /// This node.
        node_id: String,
        /// From after this execution id.
        after_id: String,
        /// `--node-timeout`.
        timeout_ms: Millis,
        /// At most this many.
        limit: u32,
    },
    /// Shared mode: read this node's inbox from the start
    /// (`shared::Store::inbox` with `after_id` 0), then feed
    /// [`NodeInput::InboxRead`].
    ReadInbox {
        /// This node.
        node_id: String,
        /// The read's number, echoed.
        read: u64,
        /// At most this many entries.
        limit: u32,
    },
    /// Shared mode: store an entry in the inbox of an execution's owner
    /// (`shared::Store::send`), then feed [`NodeInput::Sent`].
    Send {
        /// Echo it.
        send: SendId,
        /// The execution.
        execution_id: String,
        /// What it asks.
        kind: Kind,
        /// Its payload.
        body: serde_json::Value,
    },
    /// Shared mode: claim a queued task (`shared::Store::claim`), then
    /// feed [`NodeInput::Claimed`].
    Claim {
        /// Echo it.
        claim: ClaimId,
        /// The poll.
        poll: Poll,
    },
    /// Shared mode: write these sessions' contact
    /// (`shared::Store::touch_sessions`), then feed [`NodeInput::Touched`].
    TouchSessions {
        /// This node.
        node_id: String,
        /// The sessions.
        sessions: Vec<String>,
    },
    /// Shared mode: is inbox entry `entry` of `owner` still there
    /// (`shared::Store::inbox` from `entry - 1`, one entry)? If not, the
    /// seq of the last `SignalReceived` of `execution_id` with this name
    /// and payload; then feed [`NodeInput::SignalFound`].
    FindSignal {
        /// Echo it.
        watch: u64,
        /// The owner the entry went to.
        owner: String,
        /// The entry.
        entry: i64,
        /// The execution.
        execution_id: String,
        /// The signal's name.
        name: String,
        /// Its payload.
        payload: serde_json::Value,
    },
    /// Shared mode: read every registered definition (`load_definitions`,
    /// decoded), then feed [`NodeInput::Definitions`].
    ReadDefinitions,
    /// Shared mode: read these sessions' contact
    /// (`shared::Store::session_contacts`), then feed
    /// [`NodeInput::SessionContacts`].
    ReadSessions {
        /// The sessions.
        sessions: Vec<String>,
    },
    /// Events of an execution just became durable (follow streams,
    /// telemetry, metrics).
    Committed {
        /// The execution.
        execution_id: String,
        /// Its new events, by `seq`.
        events: std::sync::Arc<[Event]>,
    },
}

/// What an [`Io::Fetch`] read.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Fetched {
    /// One entry per execution named (no events: the store does not have
    /// it).
    pub executions: Vec<StoredExecution>,
    /// One entry per key named (`None`: no live record).
    pub idempotency: Vec<(String, Option<IdempotencyRecord>)>,
}
