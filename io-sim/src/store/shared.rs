//! Shared cluster mode on the simulated store: the inbox, node and worker
//! contact tables beside the executions, and the calls of
//! [`shared::Store`], each applied at once under the store's lock (one
//! transaction), judged by the database's clock ([`SimStore::set_clock`]).
//! The store is honest; [`Faulty`] puts the commit fault model in front of
//! it: a call fails `Unavailable` with nothing applied, or `Ambiguous`
//! having applied whole or not at all.

use super::{SimStore, State, StoreBug};
use async_trait::async_trait;
use orbit_core::history::Millis;
use orbit_core::store::shared::{
    self, assignee, invalid, Claimed, Dispatch, Entry, Kind, Member, Members, Poll, Sent,
    SessionContact, Taken,
};
use orbit_core::store::{is_terminal, Fence, QueueOp, StorageError};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

/// One stored inbox entry.
#[derive(Debug, Clone)]
pub(super) struct Stored {
    node_id: String,
    pub(super) execution_id: String,
    kind: Kind,
    body: serde_json::Value,
    created_at: Millis,
}

/// The tables of shared mode.
#[derive(Debug, Clone, Default)]
pub(super) struct Tables {
    /// The inbox, by entry id.
    pub(super) inbox: BTreeMap<i64, Stored>,
    /// The last entry id handed out.
    last_id: i64,
    /// Node contacts, by node id.
    nodes: BTreeMap<String, Contact>,
    /// Worker sessions: the node last polled and when.
    sessions: BTreeMap<String, (String, Millis)>,
    /// The database's clock.
    clock: Millis,
}

/// A member's contact row.
#[derive(Debug, Clone)]
struct Contact {
    /// Its `--advertise` URL.
    advertise: String,
    /// Its last beat.
    seen: Millis,
    /// Its first beat since the row was last forgotten.
    since: Millis,
}

fn refuse_empty(node_id: &str) -> Result<(), StorageError> {
    if node_id.is_empty() {
        return Err(invalid("an empty node id"));
    }
    Ok(())
}

impl State {
    /// The store's clock (the shared tables' time).
    pub(crate) fn now(&self) -> Millis {
        self.shared.clock
    }

    /// Whether `node` was heard from within `timeout_ms` (the store's
    /// clock): a shared-mode member's writes pass only then.
    pub(crate) fn member_live(&self, node: &str, timeout_ms: Millis) -> bool {
        self.live(node, timeout_ms)
    }

    fn live(&self, node: &str, timeout_ms: Millis) -> bool {
        let t = &self.shared;
        t.nodes
            .get(node)
            .is_some_and(|c| t.clock.saturating_sub(c.seen) <= timeout_ms)
    }

    /// Stores an entry for `owner`, returning its id.
    fn push(
        &mut self,
        owner: &str,
        execution_id: &str,
        kind: Kind,
        body: serde_json::Value,
    ) -> i64 {
        let t = &mut self.shared;
        t.last_id += 1;
        t.inbox.insert(
            t.last_id,
            Stored {
                node_id: owner.to_owned(),
                execution_id: execution_id.to_owned(),
                kind,
                body,
                created_at: t.clock,
            },
        );
        t.last_id
    }
}

impl SimStore {
    /// Moves the database's clock to `now` (ms; it never goes back).
    pub fn set_clock(&self, now: Millis) {
        let mut s = self.lock();
        s.shared.clock = s.shared.clock.max(now);
    }

    /// The database's clock.
    pub fn clock(&self) -> Millis {
        self.lock().shared.clock
    }

    /// Every inbox entry still stored: `(id, node, execution)`, by id (for
    /// checkers).
    pub fn inbox_entries(&self) -> Vec<(i64, String, String)> {
        self.lock()
            .shared
            .inbox
            .iter()
            .map(|(id, e)| (*id, e.node_id.clone(), e.execution_id.clone()))
            .collect()
    }

    /// One stored inbox entry: `(node, execution, kind, body)` (for
    /// checkers).
    pub fn inbox_entry(&self, id: i64) -> Option<(String, String, Kind, serde_json::Value)> {
        self.lock().shared.inbox.get(&id).map(|e| {
            (
                e.node_id.clone(),
                e.execution_id.clone(),
                e.kind,
                e.body.clone(),
            )
        })
    }

    /// Every stored inbox entry: `(id, node, execution, kind, body,
    /// created_at)`, by id (for checkers).
    #[allow(clippy::type_complexity)]
    pub fn inbox_rows(&self) -> Vec<(i64, String, String, Kind, serde_json::Value, Millis)> {
        self.lock()
            .shared
            .inbox
            .iter()
            .map(|(id, e)| {
                (
                    *id,
                    e.node_id.clone(),
                    e.execution_id.clone(),
                    e.kind,
                    e.body.clone(),
                    e.created_at,
                )
            })
            .collect()
    }

    /// Every queued task row: `(execution, unit)` (for checkers).
    pub fn queue_rows(&self) -> Vec<(String, String)> {
        self.lock()
            .queue
            .values()
            .filter_map(|op| match op {
                QueueOp::Enqueue {
                    execution_id, unit, ..
                } => Some((execution_id.clone(), unit.clone())),
                QueueOp::Remove { .. } => None,
            })
            .collect()
    }

    /// The owner `(node, epoch)` stored on an execution's row.
    pub fn owner(&self, execution_id: &str) -> Option<Fence> {
        self.lock().executions.get(execution_id).map(|r| Fence {
            node_id: r.owner_node.clone(),
            epoch: r.owner_epoch,
        })
    }

    /// [`shared::Store::beat`], applied now.
    pub fn beat_now(
        &self,
        node_id: &str,
        advertise: &str,
        timeout_ms: Millis,
    ) -> Result<Members, StorageError> {
        refuse_empty(node_id)?;
        let mut s = self.lock();
        let now = s.shared.clock;
        let forget = timeout_ms.saturating_mul(10);
        let silence = s
            .shared
            .nodes
            .get(node_id)
            .filter(|c| now.saturating_sub(c.seen) <= forget)
            .map(|c| now.saturating_sub(c.seen));
        s.shared
            .nodes
            .retain(|_, c| now.saturating_sub(c.seen) <= forget);
        let since = s.shared.nodes.get(node_id).map_or(now, |c| c.since);
        s.shared.nodes.insert(
            node_id.to_owned(),
            Contact {
                advertise: advertise.to_owned(),
                seen: now,
                since,
            },
        );
        let (live, silent): (Vec<Member>, Vec<Member>) = s
            .shared
            .nodes
            .iter()
            .map(|(id, c)| Member {
                node_id: id.clone(),
                advertise: c.advertise.clone(),
                silent_ms: now.saturating_sub(c.seen),
                up_ms: now.saturating_sub(c.since),
            })
            .partition(|m| m.silent_ms <= timeout_ms);
        let dead: BTreeSet<String> = s
            .executions
            .values()
            .filter(|r| !is_terminal(&r.row.status) && !s.live(&r.owner_node, timeout_ms))
            .map(|r| r.owner_node.clone())
            .collect();
        Ok(Members {
            live,
            silent,
            dead: dead.into_iter().collect(),
            silence_ms: silence,
        })
    }

    /// [`shared::Store::take_over`], applied now.
    pub fn take_over_now(
        &self,
        node_id: &str,
        dead: &str,
        live: &[String],
        timeout_ms: Millis,
        limit: u32,
    ) -> Result<Vec<Taken>, StorageError> {
        refuse_empty(node_id)?;
        let mut view: Vec<String> = live.to_vec();
        view.sort();
        view.dedup();
        let mut s = self.lock();
        if !view.iter().any(|n| n == node_id)
            || !s.live(node_id, timeout_ms)
            || s.live(dead, timeout_ms)
        {
            return Ok(Vec::new());
        }
        let ids: Vec<String> = s
            .executions
            .iter()
            .filter(|(id, r)| {
                r.owner_node == dead
                    && !is_terminal(&r.row.status)
                    && assignee(id, &view) == Some(node_id)
            })
            .map(|(id, _)| id.clone())
            .take(limit as usize)
            .collect();
        let mut taken = Vec::with_capacity(ids.len());
        for id in ids {
            if let Some(r) = s.executions.get_mut(&id) {
                r.owner_node = node_id.to_owned();
                if self.bug != StoreBug::TakeOverKeepsEpoch {
                    r.owner_epoch += 1;
                }
                taken.push(Taken {
                    execution_id: id.clone(),
                    epoch: r.owner_epoch,
                });
            }
        }
        let moved: BTreeSet<&str> = taken.iter().map(|t| t.execution_id.as_str()).collect();
        for e in s.shared.inbox.values_mut() {
            if moved.contains(e.execution_id.as_str()) {
                e.node_id = node_id.to_owned();
            }
        }
        Ok(taken)
    }

    /// [`shared::Store::reclaim`], applied now.
    pub fn reclaim_now(
        &self,
        node_id: &str,
        after_id: &str,
        timeout_ms: Millis,
        limit: u32,
    ) -> Result<Vec<Taken>, StorageError> {
        refuse_empty(node_id)?;
        let mut s = self.lock();
        if !s.live(node_id, timeout_ms) {
            return Ok(Vec::new());
        }
        let mut taken = Vec::new();
        for (id, r) in s.executions.range_mut::<str, _>((
            std::ops::Bound::Excluded(after_id),
            std::ops::Bound::Unbounded,
        )) {
            if taken.len() >= limit as usize {
                break;
            }
            if r.owner_node == node_id && !is_terminal(&r.row.status) {
                r.owner_epoch += 1;
                taken.push(Taken {
                    execution_id: id.clone(),
                    epoch: r.owner_epoch,
                });
            }
        }
        Ok(taken)
    }

    /// [`shared::Store::send`], applied now.
    pub fn send_now(
        &self,
        execution_id: &str,
        kind: Kind,
        body: &serde_json::Value,
    ) -> Result<Sent, StorageError> {
        let mut s = self.lock();
        let Some(r) = s.executions.get(execution_id) else {
            return Ok(Sent::Missing);
        };
        if is_terminal(&r.row.status) {
            return Ok(Sent::Finished {
                status: r.row.status.clone(),
            });
        }
        let owner = Fence {
            node_id: r.owner_node.clone(),
            epoch: r.owner_epoch,
        };
        let id = s.push(&owner.node_id, execution_id, kind, body.clone());
        Ok(Sent::Queued { id, owner })
    }

    /// [`shared::Store::inbox`], read now.
    pub fn inbox_now(&self, node_id: &str, after_id: i64, limit: u32) -> Vec<Entry> {
        let s = self.lock();
        s.shared
            .inbox
            .range(after_id.saturating_add(1)..)
            .filter(|(_, e)| e.node_id == node_id)
            .take(limit as usize)
            .map(|(id, e)| Entry {
                id: *id,
                execution_id: e.execution_id.clone(),
                kind: e.kind,
                body: e.body.clone(),
                created_at: e.created_at,
            })
            .collect()
    }

    /// [`shared::Store::claim`], applied now.
    pub fn claim_now(&self, poll: &Poll) -> Result<Vec<Claimed>, StorageError> {
        refuse_empty(&poll.node_id)?;
        let mut claimed = Vec::new();
        for token in &poll.tokens {
            match self.claim_one(poll, token)? {
                Some(c) => claimed.push(c),
                None => break,
            }
            if self.bug == StoreBug::ClaimNotApplied {
                break; // nothing was written: the same row would come again
            }
        }
        Ok(claimed)
    }

    /// One row of [`Self::claim_now`], handed out with `token`.
    fn claim_one(&self, poll: &Poll, token: &str) -> Result<Option<Claimed>, StorageError> {
        let mut s = self.lock();
        let oldest = s
            .queue
            .values()
            .filter_map(|op| match op {
                QueueOp::Enqueue {
                    execution_id,
                    unit,
                    task,
                    enqueued_at,
                    body,
                } => Some((*enqueued_at, execution_id, unit, task, body)),
                QueueOp::Remove { .. } => None,
            })
            .filter(|(_, id, _, task, _)| {
                poll.tasks.contains(task)
                    && s.executions
                        .get(id.as_str())
                        .is_some_and(|r| !is_terminal(&r.row.status))
            })
            .min_by(|a, b| (a.0, a.1, a.2).cmp(&(b.0, b.1, b.2)))
            .map(|(at, id, unit, task, body)| {
                (at, id.clone(), unit.clone(), task.clone(), body.clone())
            });
        let Some((enqueued_at, execution_id, unit, task, body)) = oldest else {
            return Ok(None);
        };
        let Some(owner) = s.executions.get(&execution_id).map(|r| Fence {
            node_id: r.owner_node.clone(),
            epoch: r.owner_epoch,
        }) else {
            return Ok(None);
        };
        let dispatch = Dispatch {
            unit: unit.clone(),
            task: task.clone(),
            token: token.to_owned(),
            session: poll.session.clone(),
            node_id: poll.node_id.clone(),
            worker_id: poll.worker_id.clone(),
        };
        let dispatch = serde_json::to_value(&dispatch)
            .map_err(|e| StorageError::Unavailable(format!("encode: {e}")))?;
        if self.bug == StoreBug::ClaimNotApplied {
            // Planted: answered as claimed, nothing written.
            return Ok(Some(Claimed {
                execution_id,
                unit,
                task,
                token: token.to_owned(),
                body,
                enqueued_at,
                entry: s.shared.last_id + 1,
                owner,
            }));
        }
        s.queue.remove(&(execution_id.clone(), unit.clone()));
        let entry = s.push(&owner.node_id, &execution_id, Kind::Dispatch, dispatch);
        Ok(Some(Claimed {
            execution_id,
            unit,
            task,
            token: token.to_owned(),
            body,
            enqueued_at,
            entry,
            owner,
        }))
    }

    /// [`shared::Store::touch_sessions`], applied now.
    pub fn touch_sessions_now(
        &self,
        node_id: &str,
        sessions: &[String],
    ) -> Result<(), StorageError> {
        refuse_empty(node_id)?;
        let mut s = self.lock();
        let now = s.shared.clock;
        for session in sessions {
            s.shared
                .sessions
                .insert(session.clone(), (node_id.to_owned(), now));
        }
        Ok(())
    }

    /// [`shared::Store::session_contacts`], read now.
    pub fn session_contacts_now(&self, sessions: &[String]) -> Vec<SessionContact> {
        let s = self.lock();
        let asked: BTreeSet<&String> = sessions.iter().collect();
        asked
            .into_iter()
            .filter_map(|session| {
                s.shared
                    .sessions
                    .get(session)
                    .map(|(node, seen)| SessionContact {
                        session: session.clone(),
                        node_id: node.clone(),
                        silent_ms: s.shared.clock.saturating_sub(*seen),
                    })
            })
            .collect()
    }

    /// [`shared::Store::forget_sessions`], applied now.
    pub fn forget_sessions_now(&self, silent_ms: Millis) -> u64 {
        let mut s = self.lock();
        let now = s.shared.clock;
        let before = s.shared.sessions.len();
        s.shared
            .sessions
            .retain(|_, (_, seen)| now.saturating_sub(*seen) <= silent_ms);
        (before - s.shared.sessions.len()) as u64
    }
}

#[async_trait]
impl shared::Store for SimStore {
    async fn beat(
        &self,
        node_id: &str,
        advertise: &str,
        timeout_ms: Millis,
    ) -> Result<Members, StorageError> {
        self.beat_now(node_id, advertise, timeout_ms)
    }

    async fn take_over(
        &self,
        node_id: &str,
        dead: &str,
        live: &[String],
        timeout_ms: Millis,
        limit: u32,
    ) -> Result<Vec<Taken>, StorageError> {
        self.take_over_now(node_id, dead, live, timeout_ms, limit)
    }

    async fn reclaim(
        &self,
        node_id: &str,
        after_id: &str,
        timeout_ms: Millis,
        limit: u32,
    ) -> Result<Vec<Taken>, StorageError> {
        self.reclaim_now(node_id, after_id, timeout_ms, limit)
    }

    async fn send(
        &self,
        execution_id: &str,
        kind: Kind,
        body: &serde_json::Value,
    ) -> Result<Sent, StorageError> {
        self.send_now(execution_id, kind, body)
    }

    async fn inbox(
        &self,
        node_id: &str,
        after_id: i64,
        limit: u32,
    ) -> Result<Vec<Entry>, StorageError> {
        Ok(self.inbox_now(node_id, after_id, limit))
    }

    async fn claim(&self, poll: &Poll) -> Result<Vec<Claimed>, StorageError> {
        self.claim_now(poll)
    }

    async fn touch_sessions(&self, node_id: &str, sessions: &[String]) -> Result<(), StorageError> {
        self.touch_sessions_now(node_id, sessions)
    }

    async fn session_contacts(
        &self,
        sessions: &[String],
    ) -> Result<Vec<SessionContact>, StorageError> {
        Ok(self.session_contacts_now(sessions))
    }

    async fn forget_sessions(&self, silent_ms: Millis) -> Result<u64, StorageError> {
        Ok(self.forget_sessions_now(silent_ms))
    }
}

/// How often the shared-mode calls fail.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Faults {
    /// Probability that a call fails with nothing applied (`Unavailable`).
    pub fail_probability: f64,
    /// Probability that a write's outcome is unknown (`Ambiguous`); such a
    /// write applied whole or not at all, with even odds.
    pub ambiguous_probability: f64,
}

/// The simulated store's shared-mode calls behind seeded faults: the same
/// model as its commits. Reads only fail; writes fail or are ambiguous.
#[derive(Debug)]
pub struct Faulty {
    store: Arc<SimStore>,
    faults: Faults,
    rng: Mutex<ChaCha8Rng>,
    counts: Mutex<BTreeMap<&'static str, u32>>,
}

impl Faulty {
    /// `store`, with faults drawn from `seed`.
    pub fn new(store: Arc<SimStore>, faults: Faults, seed: u64) -> Faulty {
        Faulty {
            store,
            faults,
            rng: Mutex::new(ChaCha8Rng::seed_from_u64(seed)),
            counts: Mutex::new(BTreeMap::new()),
        }
    }

    /// The store behind the faults.
    pub fn store(&self) -> &SimStore {
        &self.store
    }

    /// The faults injected so far, by kind.
    pub fn counts(&self) -> BTreeMap<&'static str, u32> {
        self.counts
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    fn chance(&self, p: f64) -> bool {
        p > 0.0
            && self
                .rng
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .random_bool(p.min(1.0))
    }

    fn count(&self, kind: &'static str) {
        *self
            .counts
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(kind)
            .or_default() += 1;
    }

    fn read<T>(&self, f: impl FnOnce(&SimStore) -> T) -> Result<T, StorageError> {
        if self.chance(self.faults.fail_probability) {
            self.count("read_unavailable");
            return Err(StorageError::Unavailable(
                "simulated: database unreachable".into(),
            ));
        }
        Ok(f(&self.store))
    }

    fn write<T>(
        &self,
        f: impl FnOnce(&SimStore) -> Result<T, StorageError>,
    ) -> Result<T, StorageError> {
        if self.chance(self.faults.fail_probability) {
            self.count("unavailable");
            return Err(StorageError::Unavailable(
                "simulated: database unreachable".into(),
            ));
        }
        if self.chance(self.faults.ambiguous_probability) {
            if self.chance(0.5) {
                self.count("ambiguous_applied");
                f(&self.store)?;
            } else {
                self.count("ambiguous_lost");
            }
            return Err(StorageError::Ambiguous(
                "simulated: connection lost during COMMIT".into(),
            ));
        }
        f(&self.store)
    }
}

#[async_trait]
impl shared::Store for Faulty {
    async fn beat(
        &self,
        node_id: &str,
        advertise: &str,
        timeout_ms: Millis,
    ) -> Result<Members, StorageError> {
        self.write(|s| s.beat_now(node_id, advertise, timeout_ms))
    }

    async fn take_over(
        &self,
        node_id: &str,
        dead: &str,
        live: &[String],
        timeout_ms: Millis,
        limit: u32,
    ) -> Result<Vec<Taken>, StorageError> {
        self.write(|s| s.take_over_now(node_id, dead, live, timeout_ms, limit))
    }

    async fn reclaim(
        &self,
        node_id: &str,
        after_id: &str,
        timeout_ms: Millis,
        limit: u32,
    ) -> Result<Vec<Taken>, StorageError> {
        self.write(|s| s.reclaim_now(node_id, after_id, timeout_ms, limit))
    }

    async fn send(
        &self,
        execution_id: &str,
        kind: Kind,
        body: &serde_json::Value,
    ) -> Result<Sent, StorageError> {
        self.write(|s| s.send_now(execution_id, kind, body))
    }

    async fn inbox(
        &self,
        node_id: &str,
        after_id: i64,
        limit: u32,
    ) -> Result<Vec<Entry>, StorageError> {
        self.read(|s| s.inbox_now(node_id, after_id, limit))
    }

    async fn claim(&self, poll: &Poll) -> Result<Vec<Claimed>, StorageError> {
        self.write(|s| s.claim_now(poll))
    }

    async fn touch_sessions(&self, node_id: &str, sessions: &[String]) -> Result<(), StorageError> {
        self.write(|s| s.touch_sessions_now(node_id, sessions))
    }

    async fn session_contacts(
        &self,
        sessions: &[String],
    ) -> Result<Vec<SessionContact>, StorageError> {
        self.read(|s| s.session_contacts_now(sessions))
    }

    async fn forget_sessions(&self, silent_ms: Millis) -> Result<u64, StorageError> {
        self.write(|s| Ok(s.forget_sessions_now(silent_ms)))
    }
}
