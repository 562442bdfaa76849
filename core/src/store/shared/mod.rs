//! Shared cluster mode (`--cluster --cluster-mode shared`) as storage sees
//! it: every server executes workflows, each running execution has one
//! owner `(node_id, epoch)`, commands that reach another server go to the
//! owner's inbox, and the task queue lives in the database. [`Store`] is
//! the set of calls a node makes besides [`Storage::commit`]; PostgreSQL
//! and the simulated store implement it (SQLite does not: `--cluster` is
//! PostgreSQL only), and both pass [`contract::run`].
//!
//! # Tables
//!
//! - `executions.owner_node`, `executions.owner_epoch`: the owner. Written
//!   by every fenced append (the [`conflict`](super::conflict) rule refuses
//!   a writer whose epoch is older, or equal under another node) and by
//!   [`Store::take_over`] and [`Store::reclaim`], which set `epoch + 1`.
//!   An execution written without a fence has the owner `""`, which is
//!   never alive: shared mode takes over what a single server left
//!   running.
//! - `nodes (node_id, advertise, last_seen)`: each server's contact, every
//!   250 ms, stamped with the *database's* clock; a node silent for
//!   `--node-timeout` by that clock is dead. Who is dead and what it owns
//!   is read from `executions`, so a node whose contact row is gone (beats
//!   forget long-silent ones) is still found by what it owns.
//! - `inbox (id, node_id, execution_id, kind, body, created_at)`: commands
//!   for an execution's owner, addressed to it by node and read in `id`
//!   order. The owner deletes an entry in the commit of the events it
//!   caused ([`Consumed`](super::Consumed), judged by the conflict rule).
//! - `task_queue`: the rows owners enqueue in their commits; any node's
//!   poll claims one ([`Store::claim`]).
//! - `worker_sessions (session, node_id, last_seen)`: the last contact of
//!   each worker session, written by the server it polls, read by owners.
//!
//! # Why each call is one transaction
//!
//! - [`Store::beat`] writes the contact and judges liveness at one
//!   database instant, so no node is judged by a clock but the database's.
//! - [`Store::take_over`] judges who is live, moves a batch of the dead
//!   node's executions to `epoch + 1`, and re-addresses their inbox entries,
//!   at once: an execution never has a new owner while its entries still go
//!   to the old one, and the old owner's later appends and inbox
//!   consumptions are fenced. Each row moves only if it still names the
//!   dead node at the epoch read (compare and set, rows locked), and the
//!   survivors split the executions by [`assignee`] over their member
//!   list, so two survivors never claim one execution. [`assignee`] spreads
//!   by [`family`], so a parent and its child executions move together.
//! - [`Store::reclaim`] bumps the epoch of a node's own executions (after a
//!   restart, or after it dropped them) with the same compare and set, so
//!   an older incarnation of the node is fenced like a dead owner.
//! - [`Store::send`] reads the owner with the row locked against a
//!   takeover and writes the entry to that owner: an entry is never
//!   addressed to an owner that has already lost the execution.
//! - [`Store::claim`] removes the queue row and writes the `dispatch` entry
//!   for the owner together, so a task is handed out only once its claim is
//!   durable, exactly one poller gets it, and the owner learns of it.
//!
//! # Faults
//!
//! Every call answers like a commit: `Unavailable` (nothing applied) or
//! `Ambiguous` (a write that may have applied; later calls of the same
//! store see its final outcome). Reads may fail `Unavailable`. Input a
//! call cannot take (an empty node id) is refused with `Unavailable` and
//! applies nothing.
//!
//! [`Storage::commit`]: super::Storage::commit

pub mod contract;

use super::{Fence, StorageError};
use crate::history::Millis;
use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// What an inbox entry asks of the owner.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    /// A start for an id that already exists (its answer comes from the
    /// owner's history).
    Start,
    /// A signal.
    Signal,
    /// A cancellation.
    Cancel,
    /// A worker's result.
    Result,
    /// A task handed out by some node's poll (body: [`Dispatch`]).
    Dispatch,
}

impl Kind {
    /// Every kind.
    pub const ALL: [Kind; 5] = [
        Kind::Start,
        Kind::Signal,
        Kind::Cancel,
        Kind::Result,
        Kind::Dispatch,
    ];

    /// The name stored in the `kind` column.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Start => "start",
            Kind::Signal => "signal",
            Kind::Cancel => "cancel",
            Kind::Result => "result",
            Kind::Dispatch => "dispatch",
        }
    }

    /// The kind stored as `name`, if any.
    pub fn parse(name: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.as_str() == name)
    }
}

/// A live node, as the database saw it during a [`Store::beat`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    /// Its `--node-id`.
    pub node_id: String,
    /// Its `--advertise` URL.
    pub advertise: String,
    /// How long ago (database clock) its contact was written.
    pub silent_ms: Millis,
    /// How long ago (database clock) its contact was first written: it has
    /// been a member since (under this id, its contact never forgotten).
    pub up_ms: Millis,
}

/// The answer of a [`Store::beat`].
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Members {
    /// Nodes heard from within the timeout, this one included, by node id.
    pub live: Vec<Member>,
    /// Nodes not heard from within the timeout whose contact is not
    /// forgotten yet (silent for less than ten timeouts), by node id: what
    /// `GET /v1/cluster` lists as not live.
    pub silent: Vec<Member>,
    /// Nodes not heard from within the timeout (or never, or `""`) that
    /// still own non-terminal executions, by node id.
    pub dead: Vec<String>,
    /// How long the beating node had been silent before this beat, by the
    /// database's clock (`None`: it had no contact row — its first beat,
    /// or one so late that its row was forgotten). Longer than the
    /// timeout, and the others may have taken its executions over: it
    /// must drop what it holds and take back what is still its own.
    pub silence_ms: Option<Millis>,
}

impl Members {
    /// The live node ids, sorted: the list [`assignee`] spreads over.
    pub fn live_ids(&self) -> Vec<String> {
        self.live.iter().map(|m| m.node_id.clone()).collect()
    }
}

/// An execution moved to a new owner by [`Store::take_over`].
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Taken {
    /// The execution.
    pub execution_id: String,
    /// The new owner's epoch for it (the previous one plus one).
    pub epoch: u64,
}

/// The answer of a [`Store::send`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Sent {
    /// Stored as entry `id` in the inbox of `owner`.
    Queued {
        /// The entry.
        id: i64,
        /// The owner it is addressed to, at the epoch read.
        owner: Fence,
    },
    /// The execution has ended (`status`): nothing was stored.
    Finished {
        /// Its terminal status.
        status: String,
    },
    /// No such execution: nothing was stored.
    Missing,
}

/// One pending inbox entry.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    /// Its id: entries are applied in this order.
    pub id: i64,
    /// The execution it concerns.
    pub execution_id: String,
    /// What it asks.
    pub kind: Kind,
    /// Its payload.
    pub body: serde_json::Value,
    /// When it was stored (database clock, ms since the Unix epoch).
    pub created_at: Millis,
}

/// A worker's poll, served by any node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Poll {
    /// The node serving the poll (it hands the task out).
    pub node_id: String,
    /// The worker session polling.
    pub session: String,
    /// One delivery token per task the poll may take: at most this many
    /// rows are claimed, in one transaction, the first with the first
    /// token and so on.
    pub tokens: Vec<String>,
    /// The worker polling (its `worker_id`), written into the [`Dispatch`].
    pub worker_id: String,
    /// The tasks the worker takes.
    pub tasks: Vec<String>,
}

/// A task claimed by [`Store::claim`].
#[derive(Debug, Clone, PartialEq)]
pub struct Claimed {
    /// The execution.
    pub execution_id: String,
    /// The unit.
    pub unit: String,
    /// The task name.
    pub task: String,
    /// The delivery token it is handed out with (one of [`Poll::tokens`]).
    pub token: String,
    /// The task as delivered.
    pub body: serde_json::Value,
    /// When the owner queued it.
    pub enqueued_at: Millis,
    /// The `dispatch` entry written for the owner.
    pub entry: i64,
    /// The owner it was written to.
    pub owner: Fence,
}

/// The body of a `dispatch` inbox entry: which poll took the task.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Dispatch {
    /// The unit.
    pub unit: String,
    /// The task name.
    pub task: String,
    /// The delivery token.
    pub token: String,
    /// The worker session it went to.
    pub session: String,
    /// The node that handed it out.
    pub node_id: String,
    /// The worker it went to (`""` in entries written before the field).
    #[serde(default)]
    pub worker_id: String,
}

/// A worker session's last contact.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionContact {
    /// The session.
    pub session: String,
    /// The node it last polled.
    pub node_id: String,
    /// How long ago (database clock) that was.
    pub silent_ms: Millis,
}

/// The stable slot of an execution id: the first four bytes of the SHA-256
/// of its UTF-8 bytes, big-endian. PostgreSQL computes the same in SQL.
pub fn slot(execution_id: &str) -> u32 {
    let digest = Sha256::digest(execution_id.as_bytes());
    u32::from_be_bytes([digest[0], digest[1], digest[2], digest[3]])
}

/// The family root of an execution id: the part before the first `.`.
/// Child executions are named `<parent>.<unit...>` and client ids never
/// contain `.`, so a parent and all its descendants share one root.
pub fn family(execution_id: &str) -> &str {
    execution_id
        .split_once('.')
        .map_or(execution_id, |(root, _)| root)
}

/// Which of the live nodes (sorted node ids) takes over `execution_id`:
/// `live[slot(family) % live.len()]`, so a parent and its descendants
/// always go to the same survivor; `None` when no node is live.
/// PostgreSQL computes the same in SQL (`orbit_slot(split_part(id, '.', 1))`).
pub fn assignee<'a>(execution_id: &str, live: &'a [String]) -> Option<&'a str> {
    if live.is_empty() {
        return None;
    }
    let i = slot(family(execution_id)) as usize % live.len();
    live.get(i).map(String::as_str)
}

/// The refusal of a call whose input is unusable (nothing applied).
pub fn invalid(what: &str) -> StorageError {
    StorageError::Unavailable(format!("refused: {what}"))
}

/// The calls of a node in shared cluster mode, besides commits. Each is
/// one atomic transaction (see the module docs for why); every time is the
/// database's.
#[async_trait]
pub trait Store: Send + Sync {
    /// Writes `node_id`'s contact (`advertise`) at the database's now, then
    /// answers, at that same instant, the members heard from within
    /// `timeout_ms` and the dead nodes that still own non-terminal
    /// executions. Contacts silent for ten timeouts are forgotten: they are
    /// dead to every node using the same timeout, and who is dead is read
    /// from the executions. An empty `node_id` is refused.
    async fn beat(
        &self,
        node_id: &str,
        advertise: &str,
        timeout_ms: Millis,
    ) -> Result<Members, StorageError>;

    /// Moves up to `limit` of `dead`'s non-terminal executions to
    /// `node_id`, each with its epoch plus one, and re-addresses their
    /// inbox entries to `node_id`, in one transaction. `live` is the
    /// caller's view of the live node ids ([`Members::live_ids`] of its
    /// last beat); only the executions whose [`assignee`] over it is
    /// `node_id` are taken, and each only if it still names `dead` at the
    /// epoch read, so survivors with the same view split the executions and
    /// survivors with different views still never both take one. Takes
    /// nothing unless, judged in the same transaction by the database's
    /// clock with `timeout_ms`, `node_id` is live and `dead` is not. Returns
    /// what moved, by id. Rows held at that instant by a commit, a send or
    /// a claim are passed over (PostgreSQL: `SKIP LOCKED`) and moved by a
    /// later call: the node calls again while [`Store::beat`] lists `dead`.
    async fn take_over(
        &self,
        node_id: &str,
        dead: &str,
        live: &[String],
        timeout_ms: Millis,
        limit: u32,
    ) -> Result<Vec<Taken>, StorageError>;

    /// Moves up to `limit` of `node_id`'s own non-terminal executions with
    /// an id above `after_id` (in id order) to its epoch plus one, in one
    /// transaction, and returns them by id (the store's order of ids, the
    /// one `after_id` pages by). Each moves only if it still names
    /// `node_id` at the epoch read (compare and set, rows locked). Takes
    /// nothing unless, judged in the same transaction by the database's
    /// clock with `timeout_ms`, `node_id` is live. Its inbox entries stay
    /// addressed to `node_id`.
    ///
    /// A node that restarts with the same `--node-id`, or that lost the
    /// database for `--node-timeout` and dropped what it held, takes its
    /// own executions back with a new epoch: any older incarnation of
    /// itself still writing at the old epoch is then fenced. The caller
    /// pages with the last id returned as `after_id` until a page comes
    /// back shorter than `limit`. An empty `node_id` is refused.
    async fn reclaim(
        &self,
        node_id: &str,
        after_id: &str,
        timeout_ms: Millis,
        limit: u32,
    ) -> Result<Vec<Taken>, StorageError>;

    /// Appends an entry (`kind`, `body`) to the inbox of the current owner
    /// of `execution_id`, read with the row locked against a takeover.
    /// Nothing is stored for a finished or unknown execution.
    async fn send(
        &self,
        execution_id: &str,
        kind: Kind,
        body: &serde_json::Value,
    ) -> Result<Sent, StorageError>;

    /// The entries addressed to `node_id` with an id above `after_id`, in
    /// id order, at most `limit`. Ids are handed out as entries are
    /// written, and two senders may commit out of that order: a read with
    /// `after_id > 0` may miss an entry committed late below it, which a
    /// later read from 0 finds.
    async fn inbox(
        &self,
        node_id: &str,
        after_id: i64,
        limit: u32,
    ) -> Result<Vec<Entry>, StorageError>;

    /// Claims the oldest queue row (by `enqueued_at`, then execution and
    /// unit) of a non-terminal execution whose task is one of
    /// `poll.tasks`: removes it and writes the `dispatch` entry
    /// ([`Dispatch`]) to the execution's owner, in one transaction.
    /// Concurrent polls never get the same row (PostgreSQL: `FOR UPDATE
    /// SKIP LOCKED`), and a claim never waits for an owner's commit.
    /// Up to one row per token of [`Poll::tokens`] is claimed, oldest
    /// first, all in that one transaction. Empty when nothing matches —
    /// or, on PostgreSQL, when each of the oldest rows of every task (64
    /// of each) is being claimed, or its execution committed, at that
    /// instant: the poll asks again.
    async fn claim(&self, poll: &Poll) -> Result<Vec<Claimed>, StorageError>;

    /// Records the contact of every session in `sessions` as polling
    /// `node_id`, at the database's now.
    async fn touch_sessions(&self, node_id: &str, sessions: &[String]) -> Result<(), StorageError>;

    /// The last contact of each of `sessions` that has one, by session.
    async fn session_contacts(
        &self,
        sessions: &[String],
    ) -> Result<Vec<SessionContact>, StorageError>;

    /// Deletes the contacts of sessions silent for longer than `silent_ms`
    /// (a background chore: a session without a contact is lost to every
    /// owner anyway). Returns how many went.
    async fn forget_sessions(&self, silent_ms: Millis) -> Result<u64, StorageError>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_round_trip_through_their_names() {
        for k in Kind::ALL {
            assert_eq!(Kind::parse(k.as_str()), Some(k));
        }
        assert_eq!(Kind::parse("Signal"), None);
    }

    #[test]
    fn the_slot_is_the_head_of_the_sha256() {
        // sha256("") = e3b0c442…
        assert_eq!(slot(""), 0xe3b0_c442);
        // sha256("abc") = ba7816bf…
        assert_eq!(slot("abc"), 0xba78_16bf);
    }

    #[test]
    fn every_execution_has_one_assignee_among_the_live() {
        let live: Vec<String> = ["a", "b", "c"].map(String::from).to_vec();
        let mut counts = [0u32; 3];
        for i in 0..300 {
            let id = format!("x-{i}");
            let who = assignee(&id, &live).map(str::to_owned);
            let at = live.iter().position(|n| Some(n) == who.as_ref());
            match at {
                Some(at) => counts[at] += 1,
                None => panic!("{id} has no assignee"),
            }
            assert_eq!(assignee(&id, &live), assignee(&id, &live));
        }
        assert!(counts.iter().all(|&c| c > 50), "spread {counts:?}");
        assert_eq!(assignee("x", &[]), None);
    }

    #[test]
    fn a_family_is_the_id_before_the_first_dot() {
        assert_eq!(family("order-17"), "order-17");
        assert_eq!(family("order-17.charge"), "order-17");
        assert_eq!(family("order-17.charge.retry[2]"), "order-17");
        assert_eq!(family(""), "");
        assert_eq!(family(".x"), "");
    }

    #[test]
    fn a_family_has_one_assignee() {
        let live: Vec<String> = ["a", "b", "c", "d", "e"].map(String::from).to_vec();
        for i in 0..100 {
            let root = format!("x-{i}");
            let want = assignee(&root, &live);
            assert_eq!(want, live.get(slot(&root) as usize % 5).map(String::as_str));
            for child in ["a", "b[1]", "a.c", "a.c[3].d"] {
                let id = format!("{root}.{child}");
                assert_eq!(assignee(&id, &live), want, "{id}");
            }
        }
    }

    #[test]
    fn a_dispatch_without_a_worker_id_reads_as_empty() {
        let old = serde_json::json!({
            "unit": "u", "task": "t", "token": "k", "session": "s", "node_id": "n"
        });
        let d: Dispatch = serde_json::from_value(old).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(d.worker_id, "");
    }
}
