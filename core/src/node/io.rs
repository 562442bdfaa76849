//! What goes into the node loop (time, requests, I/O completions) and what
//! comes out of it (I/O requests for the driver to perform).

use crate::engine::{
    Batch, DefinitionRecord, IdempotencyRecord, Request, RequestId, Response, StoredExecution,
};
use crate::history::{Event, Millis};
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
    /// The caller of a parked request went away.
    Abandoned {
        /// The request.
        id: RequestId,
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
