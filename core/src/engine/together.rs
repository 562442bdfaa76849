//! Requests that arrived together, handled as one batch: a worker's
//! results and its next poll. Each request runs as it would alone, but what
//! it writes joins one open batch instead of a batch of its own, and the
//! poll, handled last, can take the tasks the results just scheduled. The
//! result, the next step and its hand-out then share one commit, and the
//! worker gets its answers and its next tasks after that one commit.
//!
//! Nothing of the seed's order changes: every answer, the hand-out
//! included, still waits for the commit that holds its events.

use super::input::{Request, RequestId};
use super::load::Parked;
use super::state::Queued;
use super::txn::Txn;
use super::Engine;
use crate::history::{EventKind, UnitState};
use std::collections::BTreeSet;

impl Engine {
    /// Handles `requests` in order, writing into one batch. In shared mode
    /// (where a poll claims from the database's queue) each is handled
    /// alone, as if it had come by itself.
    pub(super) fn together(&mut self, requests: Vec<(RequestId, Request)>) {
        if self.is_shared() || self.writes.open.is_some() {
            for (id, request) in requests {
                self.request(id, request);
            }
            return;
        }
        // Results for executions evicted for idleness read them back
        // first, all of them at once: the requests then run together as
        // they would have had the executions stayed in memory.
        let evicted: BTreeSet<String> = requests
            .iter()
            .filter_map(|(_, request)| match request {
                Request::Result { token, .. } if !self.work.tokens.contains_key(token.as_str()) => {
                    self.evicted_owner(token)
                }
                _ => None,
            })
            .filter(|owner| {
                !self.executions.contains_key(owner) && !self.loads.known.absent.contains(*owner)
            })
            .map(str::to_owned)
            .collect();
        if !evicted.is_empty() {
            let executions = evicted.into_iter().collect();
            self.ask_load(executions, Vec::new(), Some(Parked::Together(requests)));
            return;
        }
        self.writes.open = Some(Txn::default());
        for (id, request) in requests {
            self.request(id, request);
        }
        if let Some(txn) = self.writes.open.take() {
            self.submit(txn);
        }
    }

    /// While requests are handled together, keeps `txn` in the open batch
    /// and returns `None`; otherwise gives it back to be submitted.
    pub(super) fn join_open(&mut self, txn: Txn) -> Option<Txn> {
        match &mut self.writes.open {
            Some(open) => {
                open.absorb(txn);
                None
            }
            None => Some(txn),
        }
    }

    /// Copies the open batch's draft of `exec_id` into `txn`, so a request
    /// builds on what the requests before it proposed. The open batch keeps
    /// its own until `txn` is submitted and replaces it: a request that
    /// gives up half-way (and drops `txn`) leaves the others' work whole.
    /// False when the open batch has none.
    pub(super) fn take_open_draft(&self, txn: &mut Txn, exec_id: &str) -> bool {
        let Some(d) = self
            .writes
            .open
            .as_ref()
            .and_then(|open| open.drafts.get(exec_id))
        else {
            return false;
        };
        txn.drafts.insert(exec_id.to_string(), d.clone());
        true
    }

    /// Tasks the open batch has scheduled and not handed out (by
    /// execution, then as proposed), for a poll handled after the requests
    /// that scheduled them.
    pub(super) fn open_queued(&self) -> Vec<Queued> {
        let Some(open) = &self.writes.open else {
            return Vec::new();
        };
        let mut fresh = Vec::new();
        for d in open.drafts.values() {
            for event in &d.events {
                let EventKind::StepScheduled { step, .. } = &event.kind else {
                    continue;
                };
                let queued = d
                    .proj
                    .units
                    .get_key_value(step.as_str())
                    .filter(|(_, u)| matches!(u.state, UnitState::Queued { .. }));
                if let Some((name, u)) = queued {
                    fresh.push(Queued {
                        execution_id: d.proj.execution_id.clone(),
                        unit: name.clone(),
                        task: u.task.clone(),
                    });
                }
            }
        }
        fresh
    }
}

impl Engine {
    /// The open batch's new tasks a poll handled with it may take: those
    /// no poll already waiting at the server will take. Waiting polls come
    /// first, oldest first, as the batch's hand-off serves them
    /// (`hand_off`): a worker's newest poll taking every step its results
    /// make due would leave its older polls and other workers' waiting
    /// until their deadline, to come back empty and be sent again.
    pub(super) fn fresh_for_poll(&self) -> Vec<Queued> {
        let fresh = self.open_queued();
        if self.work.polls.is_empty() {
            return fresh;
        }
        let mut left: Vec<(&str, u32)> = self
            .work
            .polls
            .values()
            .map(|p| (&*p.session_id, p.max_tasks))
            .collect();
        fresh
            .into_iter()
            .filter(|q| {
                let waiting = left.iter_mut().find(|(session, room)| {
                    *room > 0
                        && self
                            .work
                            .sessions
                            .get(*session)
                            .is_some_and(|s| s.takes(&q.task))
                });
                match waiting {
                    Some((_, room)) => {
                        *room -= 1;
                        false
                    }
                    None => true,
                }
            })
            .collect()
    }
}

impl Txn {
    /// Takes in everything `other` would write and answer. A draft of `other`
    /// replaces the open batch's draft of the same execution: it began as a
    /// copy of it ([`Engine::take_open_draft`]) and only grew since.
    fn absorb(&mut self, other: Txn) {
        let Txn {
            drafts,
            definitions,
            idempotency,
            replies,
            deliveries,
            unsettled,
            proved,
            unread_creates,
            consumed,
            enqueues,
            epochs,
        } = other;
        self.drafts.extend(drafts);
        self.definitions.extend(definitions);
        self.idempotency.extend(idempotency);
        self.replies.extend(replies);
        self.deliveries.extend(deliveries);
        self.unsettled |= unsettled;
        self.proved.extend(proved);
        self.unread_creates.extend(unread_creates);
        self.consumed.extend(consumed);
        self.enqueues |= enqueues;
        self.epochs.extend(epochs);
    }
}
