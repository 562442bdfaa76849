//! Storage results: applying a committed batch to memory (and indexing its
//! events), failing requests on `Unavailable`/`Conflict`, reloading after
//! `Ambiguous`.

use super::batch::{BatchId, StorageResult, StoredExecution};
use super::effect::{Effect, Response};
use super::input::{Request, RequestId};
use super::parts::Work;
use super::shared::RemoteSession;
use super::state::{Exec, Queued, TokenRef};
use super::txn::{Settled, Txn};
use super::{Bug, Engine};
use crate::history::{Event, EventKind, Millis, Name, Projection, Status, UnitState};
use std::collections::{BTreeMap, BTreeSet, VecDeque};

/// The starts of `txn` that created an id the store turned out to hold
/// (`stale`): their replies are taken out of the batch, and they run again
/// behind the reload, to be answered from the stored execution
/// (`created: false`, or `409 EXECUTION_EXISTS`).
fn creates_to_run_again(txn: &mut Txn, stale: &[String]) -> Vec<(String, RequestId, Request)> {
    let (again, others): (Vec<_>, Vec<_>) = std::mem::take(&mut txn.unread_creates)
        .into_iter()
        .partition(|(id, _, _)| stale.contains(id));
    // Those of other ids stay: a refusal names fenced and stale ids apart,
    // and each list takes its own.
    txn.unread_creates = others;
    txn.replies
        .retain(|r| !again.iter().any(|(_, rid, _)| *rid == r.request));
    again
}

/// Removes every index entry of an execution (`p`, its projection) from
/// the workers' side.
fn unindex(work: &mut Work, exec_id: &str, p: &Projection) {
    for token in p.tokens.keys() {
        let token: &str = token;
        // The session that held it forgets it too: a long-lived worker
        // session must not keep every token it was ever handed.
        let session = work.tokens.remove(token).and_then(|t| t.session);
        if let Some(s) = session.as_ref().and_then(|s| work.sessions.get_mut(s)) {
            s.tokens.remove(token);
        }
        if let Some(s) = session {
            if let Some(r) = work.remote.get_mut(&*s) {
                r.tokens.remove(token);
                if r.tokens.is_empty() {
                    work.remote.remove(&*s);
                }
            }
        }
        work.orphans.remove(token);
    }
    // Its queue places (only units of `p` were ever queued).
    for pos in work
        .queued
        .remove(exec_id)
        .into_iter()
        .flat_map(|m| m.into_values())
    {
        work.queue.remove(&pos);
    }
}

/// Ends the waits for a listing of an ended execution's hand-outs (`p`,
/// its projection): none can be lost any more. A result often overtakes
/// its delivery's listing, so without this such a wait would last a whole
/// session timeout after its execution ended. (An evicted execution keeps
/// its waits: read back before they expire, it still finds a hand-out
/// never listed lost.)
fn unlisted_ended(work: &mut Work, p: &Projection) {
    for token in p.tokens.keys() {
        if let Some(t) = work.tokens.get(token).filter(|t| !t.confirmed) {
            work.unconfirmed.remove(&(t.dispatched_at, token.clone()));
        }
    }
}

/// Puts `unit` of `exec_id` in the task queue when it is `queued` (since
/// when, and the entry), behind everything queued before; takes it out
/// otherwise. `ordinal` is the engine's counter of queue places.
fn sync_queue(
    work: &mut Work,
    ordinal: &mut u64,
    exec_id: &str,
    unit: &str,
    queued: Option<(Millis, Queued)>,
) {
    let mut units = work.queued.get_mut(exec_id);
    if let Some(pos) = units.as_mut().and_then(|units| units.remove(unit)) {
        work.queue.remove(&pos);
    }
    if let Some((since, entry)) = queued {
        *ordinal += 1;
        let pos = (since, *ordinal);
        // The entry's names, shared with the projection.
        match units {
            Some(units) => {
                units.insert(entry.unit.clone(), pos);
            }
            None => {
                work.queued.insert(
                    entry.execution_id.clone(),
                    BTreeMap::from([(entry.unit.clone(), pos)]),
                );
            }
        }
        work.queue.insert(pos, entry);
    }
}

/// The units whose state `events` may change (those `index` keeps the
/// queue and tokens of).
pub(super) fn units_touched(events: &[Event]) -> BTreeSet<&str> {
    events
        .iter()
        .filter_map(|ev| match &ev.kind {
            EventKind::StepDispatched { step, .. }
            | EventKind::StepScheduled { step, .. }
            | EventKind::StepSucceeded { step, .. }
            | EventKind::StepFailed { step, .. }
            | EventKind::StepAttemptFailed { step, .. }
            | EventKind::StepAttemptUncertain { step, .. } => Some(step.as_str()),
            _ => None,
        })
        .collect()
}

fn storage_error(message: &str) -> Response {
    Response::error(503, "STORAGE_ERROR", message)
}

impl Engine {
    pub(super) fn stored(&mut self, batch: BatchId, result: StorageResult) {
        let Some(mut txn) = self.writes.batches.remove(&batch) else {
            return;
        };
        // Shared mode: an execution adopted again while this batch was in
        // flight is held as read after the move, and this batch's outcome
        // is no longer its own to change.
        txn.drafts.retain(|id, d| {
            d.sent.is_empty()
                || self
                    .executions
                    .get(id)
                    .is_none_or(|e| e.busy == Some(batch))
        });
        let unknown = match &result {
            StorageResult::Ambiguous { .. } => true,
            StorageResult::Unavailable { .. } => txn.unsettled,
            StorageResult::Ok | StorageResult::Conflict { .. } => false,
        };
        if unknown && !txn.definitions.is_empty() {
            self.unsettle_deploy(txn);
            return;
        }
        for d in &txn.definitions {
            self.registry
                .deploying
                .remove(&(d.workflow.name.clone(), d.workflow.version.clone()));
        }
        let keys: Vec<String> = txn.idempotency.iter().map(|r| r.key.clone()).collect();
        let mut decided = true;
        match result {
            StorageResult::Ok => self.commit(txn),
            StorageResult::Unavailable { message } => {
                self.abort(txn, &format!("storage unavailable: {message}"))
            }
            StorageResult::Conflict {
                message,
                fenced,
                stale,
            } => {
                // A create of an id another node owns is refused as fenced:
                // the start is answered from the stored execution.
                let taken = if self.is_shared() {
                    creates_to_run_again(&mut txn, &fenced)
                } else {
                    Vec::new()
                };
                for id in &fenced {
                    // Taken back at a newer epoch since part of this batch
                    // was written (a reclaim; the epoch of an inbox entry
                    // it deletes counts too): that ownership stands. So
                    // does one the batch never wrote at all.
                    let appended = txn.epochs.get(id).copied();
                    let consumed = txn
                        .consumed
                        .iter()
                        .filter(|c| c.execution_id == *id)
                        .map(|c| c.epoch);
                    let written = appended.into_iter().chain(consumed).min();
                    let held = self.executions.get(id).and_then(|e| e.epoch);
                    let stands = self.is_shared()
                        && match (written, held) {
                            (Some(written), Some(held)) => held > written,
                            (None, _) => true,
                            (Some(_), None) => false,
                        };
                    if !stands {
                        self.give_up(id, &message);
                    }
                }
                let stale: Vec<String> = stale
                    .into_iter()
                    .filter(|id| self.executions.contains_key(id))
                    .collect();
                // Blocked before the abort: requests waiting on a stale
                // execution must wait for the reload, not run on memory the
                // store has moved past.
                for id in &stale {
                    if let Some(e) = self.executions.get_mut(id) {
                        e.reloading = true;
                    }
                }
                let again = creates_to_run_again(&mut txn, &stale);
                // Every id this batch created and the store refused (a
                // start's own, and the children its first decision started)
                // wrote nothing of memory's: each comes back as a load
                // brings one, without the re-decide a tick would ask for
                // (simulation, seed 0xdf847862f).
                let created = stale
                    .iter()
                    .filter(|id| txn.drafts.get(*id).is_some_and(|d| d.base_seq == 0));
                self.writes.read_back.extend(created.cloned());
                self.abort(txn, &message);
                for (exec_id, rid, request) in taken {
                    self.ask_load(
                        vec![exec_id],
                        Vec::new(),
                        Some(super::load::Parked::One(rid, request)),
                    );
                }
                for (exec_id, rid, request) in again {
                    match self.executions.get_mut(&exec_id) {
                        Some(e) => e.waiting.push_front((rid, request)),
                        // Not held any more (cannot happen: it is reloading):
                        // answered, never left hanging.
                        None => self.reply(rid, storage_error(&message)),
                    }
                }
                if !stale.is_empty() {
                    self.out.push(Effect::Reload { executions: stale });
                }
            }
            StorageResult::Ambiguous { .. } => {
                let ids: Vec<String> = txn
                    .drafts
                    .iter()
                    .filter(|(_, d)| !d.sent.is_empty())
                    .map(|(id, _)| id.clone())
                    .collect();
                if ids.is_empty() {
                    self.abort(txn, "storage outcome unknown; retry the request");
                } else {
                    for id in &ids {
                        if let Some(e) = self.executions.get_mut(id) {
                            e.busy = None;
                            e.reloading = true;
                        }
                    }
                    self.out.push(Effect::Reload { executions: ids });
                    self.writes.reloads.push(txn);
                    // Its Idempotency-Keys stay taken until the reload tells
                    // whether their records were stored.
                    decided = self.planted(Bug::KeyReleasedOnAmbiguous);
                }
            }
        }
        if decided {
            self.release_keys(keys);
        }
        self.deploy_next();
    }

    /// A deploy whose write may or may not have landed. Its callers are told
    /// so (`503`, retry), and the same definitions and records are written
    /// again at the next tick — identical definitions are a no-op in the
    /// store — until the store answers. Meanwhile no other deploy runs and
    /// its Idempotency-Keys stay taken, so nothing is answered from a
    /// registration memory does not hold (a replayed "registered" followed
    /// by `UNKNOWN_WORKFLOW`).
    fn unsettle_deploy(&mut self, mut txn: Txn) {
        for r in std::mem::take(&mut txn.replies) {
            self.out.push(Effect::Reply {
                request: r.request,
                response: storage_error("storage outcome unknown; retry the request"),
            });
        }
        txn.unsettled = true;
        self.registry.unsettled = Some(txn);
    }

    /// Writes the unsettled deploy again (at a tick).
    pub(super) fn settle_deploy(&mut self) {
        if let Some(txn) = self.registry.unsettled.take() {
            self.submit(txn);
        }
    }

    /// Lets requests queued behind these Idempotency-Keys run.
    fn release_keys(&mut self, keys: Vec<String>) {
        for key in keys {
            self.keys.inflight.remove(&key);
            if let Some(waiting) = self.keys.waiting.remove(&key) {
                for (id, request) in waiting {
                    self.request(id, request);
                }
            }
        }
    }

    /// Nothing of `txn` was applied: memory stays as it was.
    fn abort(&mut self, txn: Txn, message: &str) {
        for (token, _) in &txn.deliveries {
            self.work.lost_handouts.remove(token);
        }
        for r in txn.replies {
            self.out.push(Effect::Reply {
                request: r.request,
                response: storage_error(message),
            });
        }
        // Every execution this batch would have created leaves memory
        // before any request runs again: a start run again at once would
        // otherwise find the child its first decision created in this
        // batch still held, and not create it again (simulation, seed
        // 0xb450d18702dd).
        let mut again = Vec::new();
        let mut kept = Vec::new();
        for id in txn.drafts.keys() {
            self.work.put_back(id);
            let Some(e) = self.executions.get_mut(id) else {
                continue;
            };
            e.busy = None;
            if e.proj.last_seq == 0 && !e.reloading {
                again.extend(std::mem::take(&mut e.waiting));
                if let Some(old) = e.wake.take() {
                    self.wakes.remove(&(old, id.clone()));
                }
                self.executions.remove(id);
            } else {
                kept.push(id);
            }
        }
        for id in kept {
            if !self.writes.read_back.contains(id) {
                self.retry_soon(id);
            }
            self.release_parked_entries(id);
            self.drain_waiting(id);
        }
        for (rid, req) in again {
            self.request(rid, req);
        }
    }

    /// Shared mode: the batch still in flight of a copy of `exec_id` given
    /// up (at a drop, a fence or a take-back), written at the old epoch.
    /// It is refused as fenced, or it landed before the store was read
    /// again. Until it is back, the copy installed now writes nothing, and
    /// a start that would create the id again waits for it: two batches of
    /// one execution in flight could meet in one group commit, and the old
    /// one's refusal would refuse the new one with it, making this node
    /// forget an execution the store says it owns (seed 0x27f6d297).
    pub(super) fn given_up_batch(&self, exec_id: &str) -> Option<BatchId> {
        if !self.is_shared() {
            return None;
        }
        self.writes
            .batches
            .iter()
            .find(|(_, txn)| txn.drafts.get(exec_id).is_some_and(|d| !d.sent.is_empty()))
            .map(|(id, _)| *id)
    }

    /// A fenced execution belongs to another node now: forget it.
    pub(super) fn give_up(&mut self, exec_id: &str, message: &str) {
        self.set_wake(exec_id, None);
        let Some(e) = self.executions.remove(exec_id) else {
            return;
        };
        self.unindex(exec_id, &e.proj);
        for (rid, _) in e.waiting {
            self.reply(rid, storage_error(message));
        }
        for id in self.work.waits.take(exec_id) {
            self.reply(id, storage_error(message));
        }
    }

    fn commit(&mut self, txn: Txn) {
        self.entries_committed(&txn.consumed);
        if txn.enqueues {
            self.tasks_enqueued();
        }
        let drafts = txn.drafts.len();
        let mut touched = Vec::with_capacity(drafts);
        // What the decider last said about each touched draft.
        let mut settled = Vec::with_capacity(drafts);
        // Finished children whose parent just recorded their outcome.
        let mut recorded = Vec::new();
        // The touched executions that ended (nothing below changes a
        // committed status or takes an execution out of memory).
        let mut ended = Vec::with_capacity(drafts);
        // A `Committed` per draft and a `Reply` per reply.
        self.out.reserve(drafts + txn.replies.len());
        for (exec_id, d) in txn.drafts {
            if d.sent.is_empty() {
                continue;
            }
            let Some(e) = self.executions.get_mut(&exec_id) else {
                continue;
            };
            let before = e.proj.status;
            let was_new = e.proj.last_seq == 0;
            let changed = was_new || d.proj.status != before;
            settled.push(d.settled);
            ended.push(d.proj.status.is_terminal());
            e.proj = d.proj;
            e.def = d.def;
            e.busy = None;
            self.index(&exec_id, &d.sent);
            for ev in d.sent.iter() {
                if let EventKind::ChildCompleted { child_id, .. }
                | EventKind::ChildFailed { child_id, .. } = &ev.kind
                {
                    recorded.push(child_id.clone());
                }
            }
            // The active and pending sets follow the status: an
            // execution whose status this batch left as it was keeps its
            // place in them (its first commit and every reload set it).
            if changed {
                self.status_changed(&exec_id, was_new, before);
            }
            // A pending execution that was busy may be next in line.
            self.admission.needed |=
                !self.admission.pending.is_empty() && !was_new && before == Status::Pending;
            self.out.push(Effect::Committed {
                execution_id: exec_id.clone(),
                events: d.sent,
            });
            touched.push(exec_id);
        }
        for r in txn.definitions {
            let r = std::sync::Arc::new(r);
            self.registry
                .by_hash
                .insert(r.definition_hash.clone(), r.clone());
            self.registry
                .by_name
                .insert((r.workflow.name.clone(), r.workflow.version.clone()), r);
        }
        for r in &txn.idempotency {
            self.loads.committed_key(r);
        }
        for (token, session) in txn.deliveries {
            self.handed_out(&token, &session);
        }
        for r in txn.replies {
            self.out.push(Effect::Reply {
                request: r.request,
                response: r.response,
            });
        }
        for (id, settled) in touched.iter().zip(settled) {
            self.refresh_settled(id, settled, true);
        }
        for (id, ended) in touched.into_iter().zip(ended) {
            if ended {
                self.finished.push_back(id);
            }
        }
        for id in &recorded {
            self.retire(id);
        }
    }

    /// Re-decides an execution after its batch: waiting requests first, then
    /// orphaned dispatches, then whatever the decider finds due.
    pub(super) fn refresh(&mut self, exec_id: &str) {
        self.refresh_settled(exec_id, None, false);
    }

    /// [`Engine::refresh`] right after a commit (`committed`: the
    /// execution was active now, see [`Engine::watch_idle`]): `settled`,
    /// the decider's last answer on the committed draft, stands for the
    /// decider's answer while it holds ([`Settled::decision`]).
    fn refresh_settled(&mut self, exec_id: &str, settled: Option<Settled>, committed: bool) {
        let (now, idle_after) = (self.now, self.config.idle_evict_ms);
        let Some(e) = self.executions.get_mut(exec_id) else {
            return;
        };
        if let Some(after) = idle_after.filter(|_| committed) {
            super::idle::watch(&mut self.idle, e, exec_id, now, after);
        }
        // Requests waiting for it run first.
        if !e.blocked() && !e.waiting.is_empty() {
            self.drain_waiting(exec_id);
        }
        let Some(e) = self.executions.get(exec_id) else {
            return;
        };
        if e.blocked() || e.proj.last_seq == 0 {
            return;
        }
        if e.proj.status == Status::Pending {
            // Its start is admission's to write (a failed write of it
            // comes back here on the next tick).
            self.admission.needed = true;
            return;
        }
        // Recording orphans changes no committed projection: the decision
        // is taken from this look-up when there are none to record.
        let known = settled.and_then(|s| s.decision(&e.proj, now));
        let fresh = (known.is_none() && self.work.orphans.is_empty()).then(|| self.decision_on(e));
        if self.orphans_of(exec_id) {
            return;
        }
        debug_assert!(
            known.is_none() || known == self.committed_decision(exec_id),
            "a settled draft's answer must be the decider's"
        );
        let decision = known.or(fresh).or_else(|| self.committed_decision(exec_id));
        if decision.as_ref().is_none_or(|d| {
            d.events.is_empty() && d.start_children.is_empty() && d.cancel_children.is_empty()
        }) {
            let wake = decision.and_then(|d| d.wake);
            self.set_wake(exec_id, wake);
            return;
        }
        let mut txn = Txn::default();
        if !self.draft(&mut txn, exec_id) {
            return;
        }
        // The draft is the committed state at this `now`: the decider's
        // first answer on it is the one just computed.
        self.settle_from(&mut txn, exec_id, decision);
        if txn.is_empty() {
            let wake = self.committed_decision(exec_id).and_then(|d| d.wake);
            self.set_wake(exec_id, wake);
        } else {
            self.set_wake(exec_id, None);
            self.submit(txn);
        }
    }

    /// Handles queued requests of `exec_id` until one starts a batch.
    pub(super) fn drain_waiting(&mut self, exec_id: &str) {
        loop {
            let Some(e) = self.executions.get_mut(exec_id) else {
                return;
            };
            if e.blocked() {
                return;
            }
            let Some((id, request)) = e.waiting.pop_front() else {
                return;
            };
            self.request(id, request);
        }
    }

    /// Updates the indexes (tokens, task queue) after committed events.
    pub(super) fn index(&mut self, exec_id: &str, events: &[Event]) {
        // A commit touches a unit or two of an execution: a vector, sorted
        // and deduplicated below, costs less than a set.
        let mut units: Vec<&str> = Vec::new();
        // One look-up of the execution for all its units.
        let e = self.executions.get(exec_id);
        for ev in events {
            match &ev.kind {
                EventKind::StepDispatched {
                    step,
                    worker_id,
                    token,
                    ..
                } => {
                    // The projection's names, shared.
                    let names = e.and_then(|e| {
                        let (unit, u) = e.proj.units.get_key_value(step.as_str())?;
                        let (token, d) = u.dispatches.get_key_value(token.as_str())?;
                        Some((
                            token.clone(),
                            e.proj.execution_id.clone(),
                            unit.clone(),
                            d.worker_id.clone(),
                        ))
                    });
                    let (token, execution_id, unit, worker_id) = names.unwrap_or_else(|| {
                        let name = |s: &str| Name::from(s);
                        (name(token), name(exec_id), name(step), name(worker_id))
                    });
                    self.work.tokens.insert(
                        token,
                        TokenRef {
                            execution_id,
                            unit,
                            worker_id,
                            session: None,
                            confirmed: false,
                            dispatched_at: ev.at,
                        },
                    );
                    units.push(step);
                }
                EventKind::StepScheduled { step, .. }
                | EventKind::StepSucceeded { step, .. }
                | EventKind::StepFailed { step, .. }
                | EventKind::StepAttemptFailed { step, .. }
                | EventKind::StepAttemptUncertain { step, .. } => {
                    units.push(step);
                }
                _ => {}
            }
        }
        // By name: units queued at the same instant take their queue
        // places in that order, as they did from a set.
        units.sort_unstable();
        units.dedup();
        for unit in units {
            let queued = e.and_then(|e| {
                let (name, u) = e.proj.units.get_key_value(unit)?;
                let UnitState::Queued { since } = u.state else {
                    return None;
                };
                let entry = Queued {
                    execution_id: e.proj.execution_id.clone(),
                    unit: name.clone(),
                    task: u.task.clone(),
                };
                Some((since, entry))
            });
            sync_queue(&mut self.work, &mut self.ordinal, exec_id, unit, queued);
        }
        if let Some(e) = e {
            if e.proj.status.is_terminal() {
                unlisted_ended(&mut self.work, &e.proj);
                unindex(&mut self.work, exec_id, &e.proj);
            }
        }
    }

    /// Removes every index entry of an execution.
    pub(super) fn unindex(&mut self, exec_id: &str, p: &Projection) {
        unindex(&mut self.work, exec_id, p);
    }

    /// Installs an execution rebuilt from its stored history.
    pub(super) fn install(&mut self, stored: StoredExecution) -> bool {
        let mut again = Vec::new();
        let installed = self.install_holding(stored, &mut again);
        for (rid, req) in again {
            self.request(rid, req);
        }
        installed
    }

    /// [`Engine::install`], the requests that waited on an execution the
    /// store turned out not to hold added to `again` instead of run.
    fn install_holding(
        &mut self,
        stored: StoredExecution,
        again: &mut Vec<(RequestId, Request)>,
    ) -> bool {
        let id = stored.execution_id.clone();
        // Sessions holding this execution's tokens keep holding them.
        // So do orphaned dispatches whose uncertain event is not stored yet.
        let mut holders = Vec::new();
        let mut orphans = Vec::new();
        if let Some(old) = self.executions.get(&id) {
            let p = old.proj.clone();
            for token in p.tokens.keys() {
                let token: &str = token;
                if let Some(t) = self.work.tokens.get(token) {
                    if let Some(s) = &t.session {
                        // A session of another node: followed through its
                        // contact, which it keeps.
                        let contact = self.work.remote.get(&**s).map(|r| r.last_contact);
                        holders.push((token.to_string(), s.clone(), t.confirmed, contact));
                    }
                }
                if let Some(reason) = self.work.orphans.get(token) {
                    orphans.push((token.to_string(), reason.clone()));
                }
            }
            self.unindex(&id, &p);
        }
        let (waiting, busy, idle_watched, epoch) = self
            .executions
            .get_mut(&id)
            .map(|e| {
                (
                    std::mem::take(&mut e.waiting),
                    e.busy,
                    e.idle_watched,
                    e.epoch,
                )
            })
            .unwrap_or_else(|| (VecDeque::new(), self.given_up_batch(&id), false, None));
        if stored.events.is_empty() {
            self.set_wake(&id, None);
            self.executions.remove(&id);
            again.extend(waiting);
            return false;
        }
        let proj = Projection::fold(&id, &stored.events);
        let Some(def) = self.registry.by_hash.get(&*proj.definition_hash).cloned() else {
            return false;
        };
        let before = self.executions.get(&id).map(|e| e.proj.status);
        // Back from eviction, it wakes when it would have in memory: its
        // history has not moved since, so the wake-up it left with stands,
        // even once due (a decision taken now would already hold the due
        // work, and name no wake-up).
        let left_with = self.idle.evicted.get(&id).copied().flatten();
        // The copy it replaces leaves no wake-up behind.
        self.set_wake(&id, None);
        self.executions.insert(Box::new(Exec {
            proj,
            def,
            busy,
            reloading: false,
            waiting,
            wake: None,
            active_at: self.now,
            idle_watched,
            epoch,
        }));
        self.index(&id, &stored.events);
        self.returned(&id);
        self.watch_idle(&id);
        // Its next timer is due when it was, whether the reload's own
        // re-decide comes sooner or later.
        let wake = left_with.or_else(|| self.committed_decision(&id).and_then(|d| d.wake));
        self.set_wake(&id, wake);
        for (token, reason) in orphans {
            if self.work.tokens.contains_key(token.as_str()) {
                self.work.orphans.insert(token, reason);
            }
        }
        for (token, session, confirmed, contact) in holders {
            // The held token's own name, shared with the session.
            let Some(token) = self
                .work
                .tokens
                .get_key_value(token.as_str())
                .map(|(k, _)| k.clone())
            else {
                continue;
            };
            let Some(t) = self.work.tokens.get_mut(&token) else {
                continue;
            };
            t.session = Some(session.clone());
            t.confirmed = confirmed;
            if let Some(s) = self.work.sessions.get_mut(&session) {
                s.tokens.insert(token);
            } else if let Some(last_contact) = contact {
                // Still followed, or it would never be found lost (seed
                // 0x222: a reload forgot the remote session of a delivery,
                // which then waited forever).
                self.work
                    .remote
                    .entry(session.to_string())
                    .or_insert_with(|| RemoteSession {
                        tokens: BTreeSet::new(),
                        last_contact,
                    })
                    .tokens
                    .insert(token.to_string());
            }
        }
        match before {
            Some(b) => self.status_changed(&id, false, b),
            None => self.status_changed(&id, true, crate::history::Status::Pending),
        }
        true
    }

    /// Judges, for every batch waiting on a reload, the proofs that name
    /// `stored`'s execution: proved when the store holds *this batch's*
    /// event at the proof's seq. After a takeover another writer may have
    /// written a different event there, and a seq count alone would take
    /// its history for ours. The latest reload of an execution decides.
    fn note_proofs(&mut self, stored: &StoredExecution) {
        let id = &stored.execution_id;
        for txn in &mut self.writes.reloads {
            let Some(draft) = txn.drafts.get(id) else {
                continue;
            };
            for r in &txn.replies {
                let Some(proof @ (pid, seq)) = &r.proof else {
                    continue;
                };
                if pid != id {
                    continue;
                }
                let ours = draft.sent.iter().find(|e| e.seq == *seq);
                let theirs = usize::try_from(seq.saturating_sub(1))
                    .ok()
                    .and_then(|at| stored.events.get(at))
                    .filter(|ev| ev.seq == *seq);
                if ours.is_some() && ours == theirs {
                    txn.proved.insert(proof.clone());
                } else {
                    txn.proved.remove(proof);
                }
            }
        }
    }

    pub(super) fn reloaded(&mut self, executions: Vec<StoredExecution>) {
        let mut ids = Vec::new();
        // Requests that waited on an execution the store does not hold run
        // again once every execution read back is in place: a start run
        // again at once would find the child its lost batch created still
        // held, and not create it again (simulation, seed 0x91494f09c).
        let mut again = Vec::new();
        for stored in executions {
            ids.push(stored.execution_id.clone());
            self.note_proofs(&stored);
            if self.is_shared() && !self.owns(&stored.execution_id) {
                // Given up while it was read (fenced, or dropped): another
                // node's now.
                continue;
            }
            self.install_holding(stored, &mut again);
        }
        for (rid, req) in again {
            self.request(rid, req);
        }
        let reloads = std::mem::take(&mut self.writes.reloads);
        for txn in reloads {
            let ready = txn
                .drafts
                .keys()
                .all(|id| self.executions.get(id).is_none_or(|e| !e.reloading));
            if !ready {
                self.writes.reloads.push(txn);
                continue;
            }
            let stored = |proof: &Option<(String, u64)>| {
                proof.as_ref().is_some_and(|p| txn.proved.contains(p))
            };
            for r in &txn.replies {
                let response = if stored(&r.proof) {
                    r.response.clone()
                } else {
                    storage_error("storage outcome unknown; the request did not take effect")
                };
                self.out.push(Effect::Reply {
                    request: r.request,
                    response,
                });
            }
            for (token, session) in &txn.deliveries {
                self.handed_out(token, session);
            }
            let proved = txn.replies.iter().any(|r| stored(&r.proof));
            if !proved {
                for id in txn.drafts.keys() {
                    self.release_parked_entries(id);
                }
            }
            let keys: Vec<String> = txn.idempotency.iter().map(|r| r.key.clone()).collect();
            if proved {
                // The whole transaction landed: the inbox entries it
                // consumed are gone with it.
                self.entries_committed(&txn.consumed);
                for rec in &txn.idempotency {
                    self.loads.committed_key(rec);
                }
            }
            if !self.planted(Bug::KeyReleasedOnAmbiguous) {
                self.release_keys(keys);
            }
        }
        // Re-decide on the next tick, not now: a store that keeps failing
        // must not turn into a hot loop of writes. An id read back after
        // its create was refused wrote nothing of memory's: it comes in
        // idle, as a load brings one, and a tick for it would be a tick
        // that a server which had kept it in memory does not take.
        for id in ids {
            self.drain_waiting(&id);
            if !self.writes.read_back.remove(&id) {
                self.retry_soon(&id);
            }
            self.retire(&id);
        }
    }
}
