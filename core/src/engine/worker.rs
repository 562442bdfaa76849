//! The worker protocol: sessions, polls (oldest matching task first; long
//! polls parked until tasks are dispatched to them), heartbeats (held tokens
//! re-attach; the cancel list) and unregistering.

use super::effect::{Response, Task};
use super::input::RequestId;
use super::state::{ParkedPoll, Queued, Session};
use super::txn::Txn;
use super::{Bug, Engine};
use crate::history::{unnamed, DispatchState, EventKind, Name, Projection, UnitState};
use serde_json::json;
use std::collections::{BTreeMap, BTreeSet};

pub(super) fn unknown_session(session_id: &str) -> Response {
    Response::error(
        404,
        "UNKNOWN_SESSION",
        format!("no worker session `{session_id}`; register again"),
    )
}

/// What one parked poll receives from a batch's hand-off.
struct HandOff {
    /// Tasks it can still take.
    left: u32,
    /// Tasks handed to it.
    tasks: Vec<Task>,
    /// `(execution, seq)` of one of the deliveries, proving the batch.
    proof: Option<(String, u64)>,
}

impl Engine {
    pub(super) fn register_worker(
        &mut self,
        id: RequestId,
        worker_id: String,
        patterns: Vec<String>,
        max_tasks: Option<u32>,
    ) {
        let session_id = self.ids.next_id();
        self.work.sessions.insert(
            session_id.as_str().into(),
            Session {
                worker_id: worker_id.into(),
                patterns,
                max_tasks: max_tasks.unwrap_or(1).max(1),
                last_seen: self.now,
                tokens: BTreeSet::new(),
                builtin: false,
            },
        );
        self.reply(
            id,
            Response::ok(
                200,
                json!({"session_id": session_id, "session_timeout_ms": self.config.session_timeout_ms}),
            ),
        );
    }

    /// Tokens noted as held, over every worker session: bounded by the
    /// deliveries of executions in memory, not by all a session was ever
    /// handed.
    pub fn tokens_held(&self) -> usize {
        self.work.sessions.values().map(|s| s.tokens.len()).sum()
    }

    /// Hand-outs waiting for their worker to list them: bounded by the
    /// deliveries of executions in memory, not by every hand-out of the
    /// last session timeout.
    pub fn hand_outs_unlisted(&self) -> usize {
        self.work.unconfirmed.len()
    }

    /// Marks `token` as held by `session` (a listing or a delivery).
    pub(super) fn attach(&mut self, token: &str, session_id: &str, confirmed: bool) {
        // The token's and the session's names, shared: attaching copies no
        // string.
        let Some(token) = self
            .work
            .tokens
            .get_key_value(token)
            .map(|(k, _)| k.clone())
        else {
            if confirmed && self.idle.tokens.contains_key(token) {
                // A past delivery of an evicted execution, listed: it
                // arrived, as it would have been noted had the execution
                // stayed in memory. Its wait for a listing ends here, or
                // it would expire a session timeout after its hand-out and
                // ask for a tick memory never asked for.
                self.work.unconfirmed.retain(|(_, t)| &**t != token);
            }
            return;
        };
        let session = self
            .work
            .sessions
            .get_key_value(session_id)
            .map(|(k, _)| k.clone());
        let Some(t) = self.work.tokens.get_mut(&token) else {
            return;
        };
        if t.session.as_deref() != Some(session_id) {
            let session = session.unwrap_or_else(|| session_id.into());
            if let Some(old) = t.session.replace(session) {
                if let Some(s) = self.work.sessions.get_mut(&old) {
                    s.tokens.remove(&token);
                }
            }
        }
        let at = t.dispatched_at;
        if confirmed {
            t.confirmed = true;
            self.work.unconfirmed.remove(&(at, token.clone()));
        } else if !t.confirmed {
            self.work.unconfirmed.insert((at, token.clone()));
        }
        if let Some(s) = self.work.sessions.get_mut(session_id) {
            s.tokens.insert(token);
        }
    }

    /// A session called: refresh it and re-attach what it holds.
    fn touch(&mut self, session_id: &str, held: &[String]) -> bool {
        let Some(s) = self.work.sessions.get_mut(session_id) else {
            return false;
        };
        s.last_seen = self.now;
        for token in held {
            if self.refused_here(token) {
                // Its result was refused (shared mode): the worker dropped
                // it, whatever this listing sent earlier says.
                continue;
            }
            self.attach(token, session_id, true);
            self.listed(token);
            self.confirm_handed(token);
        }
        true
    }

    /// The worker id of a session (empty once the session is gone).
    pub(super) fn session_worker(&self, session_id: &str) -> Name {
        self.work
            .sessions
            .get(session_id)
            .map_or_else(unnamed, |s| s.worker_id.clone())
    }

    /// True while the server still wants the delivery with `token` to run
    /// (asked by the heartbeat `id`).
    pub(super) fn wanted(&self, id: RequestId, token: &str) -> bool {
        let Some(t) = self.work.tokens.get(token) else {
            // Shared mode: handed out here for an execution another member
            // owns, or whose dispatch this member has not recorded yet —
            // only its owner can judge it; or, before this member's
            // reclaim, perhaps one of its own not held again yet.
            return self.handed_here(token) || self.may_know_later(id);
        };
        let Some(e) = self.executions.get(&t.execution_id) else {
            return false;
        };
        let p = &e.proj;
        if p.status.is_terminal() {
            return false;
        }
        let Some(u) = p.units.get(&*t.unit) else {
            return false;
        };
        if u.is_resolved() {
            return false;
        }
        let Some(d) = u.dispatches.get(token) else {
            return false;
        };
        match d.state {
            DispatchState::Failed => false,
            DispatchState::Uncertain => true,
            DispatchState::Current => !(p.winding_down() && !u.name.compensation && !d.redelivery),
        }
    }

    pub(super) fn heartbeat(&mut self, id: RequestId, session_id: &str, held: &[String]) {
        if !self.touch(session_id, held) {
            return self.reply(id, unknown_session(session_id));
        }
        let cancel: Vec<&String> = held.iter().filter(|t| !self.wanted(id, t)).collect();
        let body = json!({"cancel": cancel});
        self.reply(id, Response::ok(200, body));
    }

    pub(super) fn unregister(&mut self, id: RequestId, session_id: &str) {
        if !self.end_session(session_id, "worker unregistered") {
            return self.reply(id, unknown_session(session_id));
        }
        let polls: Vec<RequestId> = self
            .work
            .polls
            .iter()
            .filter(|(_, p)| &*p.session_id == session_id)
            .map(|(id, _)| *id)
            .collect();
        for p in polls {
            self.work.polls.remove(&p);
            self.reply(p, Response::ok(200, json!({"tasks": []})));
        }
        self.reply(id, Response::ok(200, json!({"unregistered": true})));
        self.process_orphans();
    }

    /// Ends a session (unregistered or silent): what it holds becomes
    /// uncertain with `reason`, and so does every task handed to it in a
    /// batch not committed yet (it will never be attached). False when
    /// there is no such session.
    pub(super) fn end_session(&mut self, session_id: &str, reason: &str) -> bool {
        let Some(s) = self.work.sessions.remove(session_id) else {
            return false;
        };
        for token in s.tokens {
            if self
                .work
                .tokens
                .get(&token)
                .is_some_and(|t| t.session.as_deref() == Some(session_id))
            {
                self.work
                    .orphans
                    .insert(token.to_string(), reason.to_string());
            }
        }
        if self.planted(Bug::HandOutToDeadSession) {
            return true;
        }
        let pending = self
            .writes
            .batches
            .values()
            .chain(self.writes.reloads.iter())
            .flat_map(|txn| &txn.deliveries)
            .filter(|(_, s)| &**s == session_id)
            .map(|(token, _)| token.clone())
            .collect::<Vec<_>>();
        for token in pending {
            self.work.lost_handouts.insert(token, reason.to_string());
        }
        true
    }

    /// A batch handing `token` to `session_id` committed: the session holds
    /// it now, unless the session ended while the batch was in flight (then
    /// the delivery is uncertain at once).
    pub(super) fn handed_out(&mut self, token: &str, session_id: &str) {
        if self.is_shared() {
            return self.handed_to(token, session_id);
        }
        let ended = self.work.lost_handouts.remove(token);
        if self.planted(Bug::HandOutToDeadSession) {
            return self.attach(token, session_id, false);
        }
        let reason = ended.or_else(|| {
            if self.work.sessions.contains_key(session_id) {
                return None;
            }
            let worker = &self.work.tokens.get(token)?.worker_id;
            Some(format!("worker `{worker}` stopped responding"))
        });
        match reason {
            Some(reason) if self.work.tokens.contains_key(token) => {
                self.work.orphans.insert(token.to_string(), reason);
            }
            Some(_) => {}
            None => self.attach(token, session_id, false),
        }
    }

    pub(super) fn poll(
        &mut self,
        id: RequestId,
        session_id: &str,
        max_tasks: Option<u32>,
        wait_ms: u64,
        held: &[String],
    ) {
        if !self.touch(session_id, held) {
            return self.reply(id, unknown_session(session_id));
        }
        let max = max_tasks
            .or_else(|| self.work.sessions.get(session_id).map(|s| s.max_tasks))
            .unwrap_or(1)
            .max(1);
        if self.is_shared() {
            return self.claim_poll(id, session_id, max, wait_ms);
        }
        if self.dispatch(id, session_id, max) {
            return;
        }
        if wait_ms == 0 {
            return self.reply(id, Response::ok(200, json!({"tasks": []})));
        }
        // A parked poll is contact when it arrives, not while it waits: it
        // is answered within half a session timeout, so a live worker polls
        // again before its session could expire and a dead one's expires on
        // time.
        let wait_ms = wait_ms.min(self.config.session_timeout_ms / 2).max(1);
        let session = self.work.sessions.get_key_value(session_id);
        let session = session.map_or_else(|| session_id.into(), |(name, _)| name.clone());
        self.work.polls.insert(
            id,
            ParkedPoll {
                session_id: session,
                max_tasks: max,
                deadline: self.now + wait_ms,
            },
        );
    }

    /// Dispatches up to `max` of the oldest queued tasks matching the
    /// session's patterns; the reply goes out after the batch commits.
    /// False when nothing matched.
    fn dispatch(&mut self, request: RequestId, session_id: &str, max: u32) -> bool {
        let Some((session, s)) = self.work.sessions.get_key_value(session_id) else {
            return false;
        };
        let (session, worker_id) = (session.clone(), s.worker_id.clone());
        let mut picked =
            self.work
                .queue
                .oldest(max as usize, |task| s.takes(task), |q| self.ready(q));
        // Then what the requests handled with this poll just scheduled,
        // less what polls already waiting will take (see `fresh_for_poll`).
        let room = (max as usize).saturating_sub(picked.len());
        picked.extend(
            self.fresh_for_poll()
                .into_iter()
                .filter(|q| s.takes(&q.task))
                .take(room),
        );
        if picked.is_empty() {
            return false;
        }
        let mut txn = Txn::default();
        let mut tasks = Vec::with_capacity(picked.len());
        let mut proofs = Vec::with_capacity(picked.len());
        for q in picked {
            if !self.draft(&mut txn, &q.execution_id) {
                continue;
            }
            if let Some((task, seq)) =
                self.deliver(&mut txn, &q.execution_id, &q.unit, &worker_id, &session)
            {
                proofs.push((q.execution_id.to_string(), seq));
                tasks.push(task);
            }
        }
        if tasks.is_empty() {
            return false;
        }
        let response = Response::tasks(tasks);
        if self.planted(Bug::DispatchBeforeCommit) {
            self.out.push(super::Effect::Reply { request, response });
            self.submit(txn);
            return true;
        }
        txn.reply(request, response, proofs.into_iter().next());
        self.submit(txn);
        true
    }

    /// Records the delivery of a drafted, queued `unit` to `session_id`
    /// (`StepDispatched` with a fresh token); the task and the event's seq.
    /// `None` when the unit is not queued in the draft.
    fn deliver(
        &mut self,
        txn: &mut Txn,
        exec_id: &str,
        unit: &str,
        worker_id: &str,
        session: &Name,
    ) -> Option<(Task, u64)> {
        let d = txn.drafts.get(exec_id)?;
        let queued = d.proj.units.get(unit)?;
        if !matches!(queued.state, UnitState::Queued { .. }) {
            return None;
        }
        let token = self.ids.next_id();
        let task = task_of(&d.proj, exec_id, unit, token.clone())?;
        let seq = self.push(
            txn,
            exec_id,
            EventKind::StepDispatched {
                step: unit.to_string(),
                attempt: task.attempt,
                worker_id: worker_id.to_string(),
                token: token.clone(),
            },
        );
        txn.deliveries.push((token, session.clone()));
        // Polls step over it until the batch commits or is put back.
        if let Some(place) = self.work.place_of(exec_id, unit) {
            self.work.queue.hand_out(&place);
        }
        Some((task, seq))
    }

    /// Hands the tasks a batch schedules straight to parked polls (oldest
    /// first), inside the same batch: the result that finished one step, the
    /// scheduling of the next and its delivery to a waiting worker share one
    /// commit. The polls are answered when the batch commits.
    ///
    /// A batch with a start that creates its id without reading the store
    /// first (see `creates_unread`) hands nothing out: the store may refuse
    /// the create (the id exists after all), and a poll handed one of its
    /// first steps, or one of the children it started, would be failed
    /// with the batch, where an engine that had held the execution would
    /// have left it waiting. They stay queued, and a parked poll is served
    /// from the queue once the start commits.
    pub(super) fn hand_off(&mut self, txn: &mut Txn) {
        if self.work.polls.is_empty() || self.is_shared() || !txn.unread_creates.is_empty() {
            return;
        }
        let mut fresh = Vec::new();
        for (exec_id, d) in &txn.drafts {
            for event in &d.events {
                if let EventKind::StepScheduled { step, task, .. } = &event.kind {
                    fresh.push((exec_id.clone(), step.clone(), task.clone()));
                }
            }
        }
        let mut answers: BTreeMap<RequestId, HandOff> = BTreeMap::new();
        for (exec_id, unit, task_name) in fresh {
            let taker = self.work.polls.iter().find_map(|(id, p)| {
                let left = answers.get(id).map_or(p.max_tasks, |a| a.left);
                let session = self.work.sessions.get(&p.session_id)?;
                (left > 0 && session.takes(&task_name))
                    .then(|| (*id, p.max_tasks, p.session_id.clone()))
            });
            let Some((poll, max, session_id)) = taker else {
                continue;
            };
            let worker_id = self.session_worker(&session_id);
            let Some((task, seq)) = self.deliver(txn, &exec_id, &unit, &worker_id, &session_id)
            else {
                continue;
            };
            let answer = answers.entry(poll).or_insert(HandOff {
                left: max,
                tasks: Vec::new(),
                proof: None,
            });
            answer.left -= 1;
            answer.tasks.push(task);
            answer.proof.get_or_insert((exec_id, seq));
        }
        let now = self.now;
        for (poll, HandOff { tasks, proof, .. }) in answers {
            if let Some(p) = self.work.polls.remove(&poll) {
                if let Some(s) = self.work.sessions.get_mut(&p.session_id) {
                    s.last_seen = now;
                }
            }
            txn.reply(poll, Response::tasks(tasks), proof);
        }
    }

    /// Serves parked polls (oldest first) from the queue.
    pub(super) fn serve_polls(&mut self) {
        if self.is_shared() {
            return self.claim_if_enqueued();
        }
        if self.work.polls.is_empty() || !self.any_ready() {
            return;
        }
        let parked: Vec<RequestId> = self.work.polls.keys().copied().collect();
        for id in parked {
            // A unit handed out stays queued, its execution busy, until
            // its dispatch commits: under load most of the queue is such
            // units, and without this look each parked poll would walk
            // past all of them to find nothing.
            if !self.any_ready() {
                return;
            }
            let Some(p) = self.work.polls.get(&id) else {
                continue;
            };
            let (session, max) = (p.session_id.clone(), p.max_tasks);
            if self.dispatch(id, &session, max) {
                self.work.polls.remove(&id);
                let now = self.now;
                if let Some(s) = self.work.sessions.get_mut(&session) {
                    s.last_seen = now;
                }
            }
        }
    }

    /// True when some queued unit can be handed out now.
    fn any_ready(&self) -> bool {
        self.work.queue.any(|q| self.ready(q))
    }

    /// True when queued unit `q` can be handed out now: its execution is
    /// in memory and not waiting for a batch of its own.
    fn ready(&self, q: &Queued) -> bool {
        self.executions
            .get(&q.execution_id)
            .is_some_and(|e| !e.blocked())
    }

    /// Answers parked polls whose wait ended with no task.
    pub(super) fn expire_polls(&mut self) {
        let now = self.now;
        let ids: Vec<RequestId> = self
            .work
            .polls
            .iter()
            .filter(|(id, p)| p.deadline <= now && !self.poll_claiming(**id))
            .map(|(id, _)| *id)
            .collect();
        for id in ids {
            self.work.polls.remove(&id);
            self.reply(id, Response::ok(200, json!({"tasks": []})));
        }
    }
}

/// The task a poll hands out for `unit` of `p` (queued) with `token`;
/// `None` when the unit is not queued.
pub(super) fn task_of(p: &Projection, exec_id: &str, unit: &str, token: String) -> Option<Task> {
    let u = p.units.get(unit)?;
    if !matches!(u.state, UnitState::Queued { .. }) {
        return None;
    }
    Some(Task {
        token,
        execution_id: p.execution_id.clone(),
        workflow: p.workflow.clone(),
        workflow_version: p.version.clone(),
        step_id: unit.to_string(),
        task_name: u.task.clone(),
        contract_version: u.contract_version.clone(),
        input: u.input.clone(),
        idempotency_key: u.idempotency_key.clone(),
        attempt: u.attempt,
        redelivery: u.redelivery,
        traceparent: crate::trace::task_traceparent(p.trace_id, exec_id, u.scheduled_seq),
    })
}
