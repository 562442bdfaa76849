//! Shared cluster mode in the node loop: the rhythm of a member and the
//! bookkeeping of its inbox, on the node's own clock (every time is the
//! `now` of an input; every liveness judgement is the database's).
//!
//! - Every [`BEAT_MS`] the node writes its contact and learns who is live
//!   and which dead nodes still own executions ([`Io::Beat`]); it takes
//!   those over, a batch at a time ([`Io::TakeOver`]), reads what it took
//!   and hands it to the engine to adopt.
//! - After its first beat, and after losing the database for
//!   `--node-timeout` (then it drops what it owned first), it takes its
//!   own executions back with a new epoch ([`Io::Reclaim`]).
//! - Every [`INBOX_MS`] it reads its inbox ([`Io::ReadInbox`]) and feeds
//!   the engine the entries it has not fed yet; an entry stays known until
//!   a read issued after its deletion no longer returns it.
//! - Every [`TOUCH_MS`] it writes the contact of its worker sessions heard
//!   from since the last write ([`Io::TouchSessions`]), and every
//!   [`CONTACTS_MS`] it reads the contact of the other nodes' sessions that
//!   hold deliveries of its executions ([`Io::ReadSessions`]).

use super::{Io, Node, NodeInput};
use crate::engine::Input;
use crate::history::Millis;
use crate::store::shared::{Entry, Members, Taken};
use crate::store::StorageError;
use std::collections::BTreeMap;

/// How often a node writes its contact.
pub const BEAT_MS: Millis = 250;
/// How often a node reads its inbox.
pub const INBOX_MS: Millis = 50;
/// How often a node writes its sessions' contact.
pub const TOUCH_MS: Millis = 250;
/// How often a node reads the contact of other nodes' sessions.
pub const CONTACTS_MS: Millis = 500;
/// How often a node reads the definitions (those deployed through other
/// members register here too; a request naming an unknown one reads them
/// at once).
pub const DEFINITIONS_MS: Millis = 1_000;
/// Executions moved by one takeover or reclaim call.
pub const TAKE_LIMIT: u32 = 200;
/// Entries read from the inbox at once.
pub const INBOX_LIMIT: u32 = 256;

/// The settings of a shared-mode member.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    /// `--node-id`.
    pub node_id: String,
    /// `--advertise`.
    pub advertise: String,
    /// `--node-timeout`: a member silent for longer is dead; a member that
    /// cannot reach the database for longer drops what it owns.
    pub node_timeout_ms: Millis,
}

/// An entry fed to the engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fed {
    /// Being applied.
    Applying,
    /// Applied: its deletion committed before the read numbered this.
    Done(u64),
}

/// The shared-mode state of a node.
#[derive(Debug)]
pub(super) struct State {
    member: Member,
    next_beat: Millis,
    beating: bool,
    /// The last beat the database answered.
    beat_ok: Option<Millis>,
    /// The members of the last beat.
    members: Members,
    taking: bool,
    /// Own executions to take back, from after this id (`None`: nothing
    /// to take back).
    reclaim: Option<String>,
    reclaiming: bool,
    /// The engine was told the reclaim after the start (or the last drop)
    /// is over ([`Input::Reclaimed`]).
    reclaim_told: bool,
    /// What the node owned was dropped (the database was out of reach).
    dropped: bool,
    /// Bumped at every drop: a takeover, reclaim or read of owned
    /// executions issued before it answers for a node that no longer
    /// exists (what it moved, the reclaim after the drop finds).
    generation: u64,
    /// The generation the takeover or reclaim in flight was issued in.
    taking_generation: u64,
    /// The last batch handed to the store before the last drop. The
    /// reclaim after the drop waits until it and every earlier batch have
    /// answered: one that lands after the drop leaves a row naming this
    /// node that it no longer holds (a start, say), and only a reclaim
    /// issued after it landed finds it (seed 0x50).
    settle_through: Option<u64>,
    next_inbox: Millis,
    reading_inbox: bool,
    inbox_reads: u64,
    fed: BTreeMap<i64, Fed>,
    next_touch: Millis,
    touching: bool,
    touched_at: Millis,
    next_contacts: Millis,
    reading_contacts: bool,
    next_definitions: Millis,
    reading_definitions: bool,
}

impl State {
    pub(super) fn new(member: Member) -> State {
        State {
            member,
            next_beat: 0,
            beating: false,
            beat_ok: None,
            members: Members::default(),
            taking: false,
            reclaim: Some(String::new()),
            reclaiming: false,
            reclaim_told: false,
            dropped: false,
            generation: 0,
            taking_generation: 0,
            settle_through: None,
            next_inbox: 0,
            reading_inbox: false,
            inbox_reads: 0,
            fed: BTreeMap::new(),
            next_touch: 0,
            touching: false,
            touched_at: 0,
            next_contacts: 0,
            reading_contacts: false,
            next_definitions: 0,
            reading_definitions: false,
        }
    }

    /// The earliest time this state has something to do. A call in
    /// flight has nothing to do before it comes back (its completion is an
    /// input, after which the node asks for the time again): counting its
    /// deadline once passed would ask for `Time` at a time already come,
    /// again and again, for as long as the call takes.
    pub(super) fn next_due(&self) -> Millis {
        let due = |at: Millis, busy: bool| if busy { Millis::MAX } else { at };
        due(self.next_beat, self.beating)
            .min(due(self.next_inbox, self.reading_inbox))
            .min(due(self.next_touch, self.touching))
            .min(due(self.next_contacts, self.reading_contacts))
            .min(due(self.next_definitions, self.reading_definitions))
    }
}

impl Node {
    /// Shared mode: the periodic calls due at `now`.
    pub(super) fn shared_time(&mut self, now: Millis) {
        let Some(s) = self.shared.as_mut() else {
            return;
        };
        let mut out = Vec::new();
        if now >= s.next_beat && !s.beating {
            s.beating = true;
            s.next_beat = now + BEAT_MS;
            out.push(Io::Beat {
                node_id: s.member.node_id.clone(),
                advertise: s.member.advertise.clone(),
                timeout_ms: s.member.node_timeout_ms,
            });
        }
        let lost = s
            .beat_ok
            .is_some_and(|t| now.saturating_sub(t) > s.member.node_timeout_ms);
        let drop = lost && !s.dropped;
        if drop {
            s.dropped = true;
        }
        if now >= s.next_inbox && !s.reading_inbox {
            s.reading_inbox = true;
            s.next_inbox = now + INBOX_MS;
            s.inbox_reads += 1;
            out.push(Io::ReadInbox {
                node_id: s.member.node_id.clone(),
                read: s.inbox_reads,
                limit: INBOX_LIMIT,
            });
        }
        if now >= s.next_definitions && !s.reading_definitions {
            s.reading_definitions = true;
            s.next_definitions = now + DEFINITIONS_MS;
            out.push(Io::ReadDefinitions);
        }
        let touch = now >= s.next_touch && !s.touching;
        let contacts = now >= s.next_contacts && !s.reading_contacts;
        let since = s.touched_at;
        self.out.extend(out);
        if drop {
            self.drop_owned(now);
        }
        if touch {
            let sessions = self.engine.sessions_seen_since(since);
            if let Some(s) = self.shared.as_mut() {
                s.next_touch = now + TOUCH_MS;
                s.touched_at = now;
                if !sessions.is_empty() {
                    s.touching = true;
                    let node_id = s.member.node_id.clone();
                    self.out.push(Io::TouchSessions { node_id, sessions });
                }
            }
        }
        if contacts {
            let sessions = self.engine.remote_sessions();
            if let Some(s) = self.shared.as_mut() {
                s.next_contacts = now + CONTACTS_MS;
                if !sessions.is_empty() {
                    s.reading_contacts = true;
                    self.out.push(Io::ReadSessions { sessions });
                }
            }
        }
    }

    /// Shared mode: a completion of one of its calls.
    pub(super) fn shared_input(&mut self, now: Millis, input: NodeInput) {
        match input {
            NodeInput::Beat { result } => self.beaten(now, result),
            NodeInput::TakenOver { result } => {
                if let Some(s) = self.shared.as_mut() {
                    s.taking = false;
                }
                self.taken(result, false);
            }
            NodeInput::Reclaimed { result } => {
                if let Some(s) = self.shared.as_mut() {
                    s.reclaiming = false;
                }
                self.taken(result, true);
                self.reclaim_over(now);
            }
            NodeInput::InboxRead { read, result } => self.inbox_read(now, read, result),
            NodeInput::Sent { send, result } => self.engine_input(
                now,
                Input::Sent {
                    send,
                    result: result.map_err(|e| e.to_string()),
                },
            ),
            NodeInput::Claimed { claim, result } => {
                self.engine_input(now, Input::Claimed { claim, result })
            }
            NodeInput::Touched { .. } => {
                if let Some(s) = self.shared.as_mut() {
                    s.touching = false;
                }
            }
            NodeInput::SignalFound { watch, result } => self.engine_input(
                now,
                Input::SignalFound {
                    watch,
                    seq: result.ok().flatten(),
                },
            ),
            NodeInput::Definitions { result } => {
                if let Some(s) = self.shared.as_mut() {
                    s.reading_definitions = false;
                }
                if let Ok(definitions) = result {
                    self.engine_input(now, Input::Definitions { definitions });
                }
            }
            NodeInput::SessionContacts { result } => {
                if let Some(s) = self.shared.as_mut() {
                    s.reading_contacts = false;
                }
                if let Ok(contacts) = result {
                    self.engine_input(now, Input::SessionContacts { contacts });
                }
            }
            _ => {}
        }
    }

    fn beaten(&mut self, now: Millis, result: Result<Members, StorageError>) {
        let Some(s) = self.shared.as_mut() else {
            return;
        };
        s.beating = false;
        let Ok(members) = result else {
            return;
        };
        // Silent for longer than the timeout by the database's clock (or
        // forgotten): the others may have taken this node's executions,
        // whether or not it noticed the gap itself (a pause, a slow
        // database). What it holds may be stale: dropped, and what is still
        // its own taken back.
        let first = s.beat_ok.is_none();
        let silent = match members.silence_ms {
            Some(gap) => gap > s.member.node_timeout_ms,
            None => !first,
        };
        let drop = silent && !s.dropped;
        s.beat_ok = Some(now);
        if s.dropped || drop {
            // Back in touch: what is still this node's comes back.
            s.dropped = false;
            s.reclaim = Some(String::new());
        }
        s.members = members;
        if drop {
            self.drop_owned(now);
        }
        self.take_more();
    }

    /// Issues the next takeover or reclaim call, one at a time.
    pub(super) fn take_more(&mut self) {
        let unsettled = self.unsettled_through();
        let Some(s) = self.shared.as_mut() else {
            return;
        };
        if s.taking || s.reclaiming || s.beat_ok.is_none() {
            return;
        }
        if let (Some(last), Some(_)) = (s.settle_through, &s.reclaim) {
            if unsettled.is_some_and(|id| id <= last) {
                return; // a commit answering calls again
            }
            s.settle_through = None;
        }
        s.taking_generation = s.generation;
        if let Some(after) = s.reclaim.clone() {
            s.reclaiming = true;
            self.out.push(Io::Reclaim {
                node_id: s.member.node_id.clone(),
                after_id: after,
                timeout_ms: s.member.node_timeout_ms,
                limit: TAKE_LIMIT,
            });
            return;
        }
        let me = &s.member.node_id;
        let Some(dead) = s.members.dead.iter().find(|d| *d != me).cloned() else {
            return;
        };
        s.taking = true;
        self.out.push(Io::TakeOver {
            node_id: me.clone(),
            dead,
            live: s.members.live_ids(),
            timeout_ms: s.member.node_timeout_ms,
            limit: TAKE_LIMIT,
        });
    }

    /// A takeover or reclaim answered: read what moved, and go on while
    /// there may be more.
    fn taken(&mut self, result: Result<Vec<Taken>, StorageError>, reclaim: bool) {
        let taken = match result {
            Ok(taken) => taken,
            Err(StorageError::Ambiguous(_)) if !reclaim => {
                // The takeover may have landed: executions now this
                // member's that it does not know of. A reclaim takes back
                // everything that names it (those included), at a new
                // epoch.
                if let Some(s) = self.shared.as_mut() {
                    s.reclaim = Some(String::new());
                }
                return;
            }
            // Tried again after the next beat (a reclaim from where it was).
            Err(_) => return,
        };
        let generation = match self.shared.as_ref() {
            Some(s) if s.taking_generation == s.generation => s.generation,
            _ => {
                // Issued before a drop: what it moved is this node's
                // again only through the reclaim that follows the drop.
                self.take_more();
                return;
            }
        };
        let full = taken.len() >= TAKE_LIMIT as usize;
        if let Some(s) = self.shared.as_mut() {
            if reclaim {
                s.reclaim = full.then(|| {
                    taken
                        .last()
                        .map(|t| t.execution_id.clone())
                        .unwrap_or_default()
                });
            } else if !full {
                // This dead node is done for now; the next beat says
                // whether it still owns anything (rows passed over while
                // locked).
                let first = s.members.dead.iter().position(|d| *d != s.member.node_id);
                if let Some(i) = first {
                    s.members.dead.remove(i);
                }
            }
        }
        self.read_owned(taken, generation);
        self.take_more();
    }

    fn inbox_read(&mut self, now: Millis, read: u64, result: Result<Vec<Entry>, StorageError>) {
        let Some(s) = self.shared.as_mut() else {
            return;
        };
        s.reading_inbox = false;
        let Ok(entries) = result else {
            return;
        };
        // Entries done before this read was issued and not returned by it
        // are deleted for good.
        let returned: std::collections::BTreeSet<i64> = entries.iter().map(|e| e.id).collect();
        s.fed.retain(|id, f| match f {
            Fed::Applying => true,
            Fed::Done(at) => *at > read || returned.contains(id),
        });
        let fresh: Vec<Entry> = entries
            .into_iter()
            .filter(|e| !s.fed.contains_key(&e.id))
            .collect();
        if fresh.is_empty() {
            return;
        }
        for e in &fresh {
            s.fed.insert(e.id, Fed::Applying);
        }
        self.engine_input(now, Input::Inbox { entries: fresh });
    }

    /// The engine is done with an entry.
    pub(super) fn inbox_done(&mut self, entry: i64, applied: bool) {
        let Some(s) = self.shared.as_mut() else {
            return;
        };
        if applied {
            // Reads issued from now on no longer return it.
            s.fed.insert(entry, Fed::Done(s.inbox_reads + 1));
        } else {
            s.fed.remove(&entry);
        }
    }

    /// Tells the engine, once, that the reclaim after the start (or after
    /// the last drop) is over: no reclaim left to issue or in flight, and
    /// what it took back read and handed over to adopt.
    pub(super) fn reclaim_over(&mut self, now: Millis) {
        let adopting = self.loads.adopting();
        let Some(s) = self.shared.as_mut() else {
            return;
        };
        let over = s.beat_ok.is_some() && !s.dropped && s.reclaim.is_none() && !s.reclaiming;
        if s.reclaim_told || !over || adopting {
            return;
        }
        s.reclaim_told = true;
        self.engine_input(now, Input::Reclaimed);
    }

    /// Drops what the engine owns: this node was out of touch with the
    /// database for longer than `--node-timeout`.
    fn drop_owned(&mut self, now: Millis) {
        self.stats.drops += 1;
        let last = self.last_unanswered();
        if let Some(s) = self.shared.as_mut() {
            s.reclaim_told = false;
            s.generation += 1;
            s.settle_through = last.max(s.settle_through);
        }
        let reason = "fenced: this node was out of touch with the database for --node-timeout";
        self.engine_input(
            now,
            Input::DropOwned {
                reason: reason.to_owned(),
            },
        );
    }

    /// The highest batch id waiting to be written or being written.
    fn last_unanswered(&self) -> Option<u64> {
        self.unanswered().max()
    }

    /// The lowest batch id waiting to be written or being written.
    fn unsettled_through(&self) -> Option<u64> {
        self.unanswered().min()
    }

    fn unanswered(&self) -> impl Iterator<Item = u64> + '_ {
        let written = self.in_flight.values().flat_map(|c| c.batches.iter());
        self.pending.iter().chain(written).map(|b| b.id)
    }

    /// The engine asked for the definitions (one read at a time).
    pub(super) fn read_definitions(&mut self) {
        if let Some(s) = self.shared.as_mut() {
            if !s.reading_definitions {
                s.reading_definitions = true;
                self.out.push(Io::ReadDefinitions);
            }
        }
    }

    /// Whether a read of owned executions issued in `generation` may still
    /// be adopted.
    pub(super) fn adoptable(&self, generation: u64) -> bool {
        self.shared
            .as_ref()
            .is_some_and(|s| s.generation == generation)
    }

    /// The next shared-mode deadline, if in shared mode.
    pub(super) fn shared_due(&self) -> Option<Millis> {
        self.shared.as_ref().map(State::next_due)
    }
}
