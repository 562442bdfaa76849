//! The passing of time: parked requests' deadlines, lost sessions and lost
//! poll responses, the recovery window, and executions with something due.

use super::decide::{self, attempt_failed, call_for, Context};
use super::state::Exec;
use super::txn::{child_view, Txn};
use super::{Bug, Engine, TICK_MS};
use crate::history::{ErrorInfo, EventKind, Millis, Name};
use std::collections::BTreeMap;

impl Engine {
    pub(super) fn tick(&mut self) {
        let now = self.now;
        self.ticked_at = now;
        self.expire_polls();
        self.expire_waits();
        let timeout = self.config.session_timeout_ms;
        let lost: Vec<(Name, Name)> = self
            .work
            .sessions
            .iter()
            .filter(|(_, s)| s.last_seen + timeout <= now)
            .map(|(id, s)| (id.clone(), s.worker_id.clone()))
            .collect();
        for (id, worker) in lost {
            self.end_session(&id, &format!("worker `{worker}` stopped responding"));
            let polls: Vec<_> = self
                .work
                .polls
                .iter()
                .filter(|(_, p)| p.session_id == id)
                .map(|(rid, _)| *rid)
                .collect();
            for rid in polls {
                self.work.polls.remove(&rid);
                self.reply(rid, super::worker::unknown_session(&id));
            }
        }
        while let Some((at, token)) = self.work.unconfirmed.first().cloned() {
            if at + timeout > now {
                break;
            }
            self.work.unconfirmed.pop_first();
            if let Some(t) = self.work.tokens.get(&token) {
                let alive = t
                    .session
                    .as_ref()
                    .is_some_and(|s| self.work.sessions.contains_key(s));
                let dead_ignored = !alive && self.planted(Bug::HandOutToDeadSession);
                if !t.confirmed && !self.work.orphans.contains_key(&*token) && !dead_ignored {
                    // Never listed nor reported: lost on the way, or its
                    // session is gone.
                    let reason = if alive {
                        format!("worker `{}` did not receive the task", t.worker_id)
                    } else {
                        format!("worker `{}` stopped responding", t.worker_id)
                    };
                    self.work.orphans.insert(token.to_string(), reason);
                }
            }
        }
        if self.recovery_until.is_some_and(|t| t <= now) {
            self.recovery_until = None;
            let silent: Vec<(String, Name)> = self
                .work
                .tokens
                .iter()
                .filter(|(_, t)| t.session.is_none() && !t.confirmed)
                .map(|(k, t)| (k.to_string(), t.worker_id.clone()))
                .collect();
            for (token, worker) in silent {
                self.work
                    .orphans
                    .insert(token, format!("worker `{worker}` stopped responding"));
            }
        }
        self.shared_tick();
        self.process_orphans();
        // Evicted executions due now are read back first, and what is due
        // is decided once they are in memory: in the order it would have
        // been had they never left.
        match self.wake_dormant() {
            Some(read) => self.tick_read = Some(read),
            None => self.decide_due(&[]),
        }
        self.evict_idle();
        self.settle_deploy();
    }

    /// Decides the executions whose wake-up has come, with `returned`
    /// (read back for it, with their wake-ups) among them in time order,
    /// then those asked to look again.
    pub(super) fn decide_due(&mut self, returned: &[(Millis, String)]) {
        let now = self.now;
        let mut due: Vec<(Millis, String)> = self
            .wakes
            .iter()
            .take_while(|(t, _)| *t <= now)
            .cloned()
            .collect();
        for (_, id) in &due {
            if !self.executions.contains_key(id) {
                self.wakes.retain(|(_, x)| x != id);
            }
        }
        due.extend(returned.iter().cloned());
        due.sort();
        due.dedup_by(|a, b| a.1 == b.1);
        let (soon, later): (BTreeMap<_, _>, BTreeMap<_, _>) = std::mem::take(&mut self.soon)
            .into_iter()
            .partition(|(_, at)| *at <= now);
        self.soon = later;
        for id in due.into_iter().map(|(_, id)| id).chain(soon.into_keys()) {
            self.refresh(&id);
        }
    }

    /// True when `exec_id` had orphaned dispatches (now in a batch).
    pub(super) fn orphans_of(&mut self, exec_id: &str) -> bool {
        if self.work.orphans.is_empty() {
            return false;
        }
        let Some(own) = self.executions.get(exec_id).map(|e| &e.proj.tokens) else {
            return false;
        };
        // Walk the smaller side: after a mass session loss every execution
        // has orphans, and scanning all of them per execution is quadratic.
        let tokens: Vec<(String, String)> = if own.len() < self.work.orphans.len() {
            own.keys()
                .filter_map(|t| {
                    let t: &str = t;
                    self.work.orphans.get(t).map(|r| (t.to_string(), r.clone()))
                })
                .collect()
        } else {
            self.work
                .orphans
                .iter()
                .filter(|(t, _)| own.contains_key(t.as_str()))
                .map(|(t, r)| (t.clone(), r.clone()))
                .collect()
        };
        // Only an orphan whose dispatch is still the unit's current one
        // has anything to record; the others are dropped. With none left
        // the execution is not drafted at all: an orphan that no longer
        // matters must not re-decide it, or whether it does would depend
        // on which tokens memory happened to hold (a session's hold on the
        // tokens of an execution is not kept across its eviction).
        let Some(p) = self.executions.get(exec_id).map(|e| &e.proj) else {
            return false;
        };
        let (current, stale): (Vec<_>, Vec<_>) = tokens.into_iter().partition(|(token, _)| {
            self.work.tokens.get(token.as_str()).is_some_and(|t| {
                p.units
                    .get(&*t.unit)
                    .and_then(|u| u.current_dispatch())
                    .is_some_and(|(cur, _)| cur == token)
            })
        });
        for (token, _) in stale {
            self.work.orphans.remove(&token);
        }
        if current.is_empty() {
            return false;
        }
        let mut txn = Txn::default();
        if !self.draft(&mut txn, exec_id) {
            return false;
        }
        // An orphan stays listed until its `StepAttemptUncertain` commits
        // (then its dispatch is no longer current and it is dropped above).
        for (token, reason) in current {
            let Some(unit) = self.work.tokens.get(token.as_str()).map(|t| t.unit.clone()) else {
                continue;
            };
            let attempt = txn.drafts.get(exec_id).and_then(|d| {
                let u = d.proj.units.get(&*unit)?;
                let (current, dispatch) = u.current_dispatch()?;
                (current == token).then_some(dispatch.attempt)
            });
            if attempt.is_some() && self.planted(Bug::UncertainAsFailed) {
                let events = txn.drafts.get(exec_id).and_then(|d| {
                    let u = d.proj.units.get(&*unit)?;
                    let policy = call_for(&d.def.workflow, &u.name)
                        .map(|c| c.retry.clone())
                        .unwrap_or_default();
                    let error = ErrorInfo {
                        code: "WORKER_LOST".to_string(),
                        message: reason.clone(),
                        retryable: true,
                    };
                    Some(attempt_failed(&unit, u, &policy, error, self.now, false))
                });
                for kind in events.unwrap_or_default() {
                    self.push(&mut txn, exec_id, kind);
                }
                continue;
            }
            if let Some(attempt) = attempt {
                self.push(
                    &mut txn,
                    exec_id,
                    EventKind::StepAttemptUncertain {
                        step: unit.to_string(),
                        attempt,
                        reason,
                    },
                );
            }
        }
        self.settle(&mut txn, exec_id);
        if txn.is_empty() {
            return false;
        }
        self.set_wake(exec_id, None);
        self.submit(txn);
        true
    }

    /// Turns orphaned dispatches into uncertain attempts, per execution.
    pub(super) fn process_orphans(&mut self) {
        let execs: std::collections::BTreeSet<String> = self
            .work
            .orphans
            .keys()
            .filter_map(|t| {
                self.work
                    .tokens
                    .get(t.as_str())
                    .map(|r| r.execution_id.to_string())
            })
            .collect();
        let stale: Vec<String> = self
            .work
            .orphans
            .keys()
            .filter(|t| !self.work.tokens.contains_key(t.as_str()))
            .cloned()
            .collect();
        for t in stale {
            self.work.orphans.remove(&t);
        }
        for id in execs {
            if self.executions.get(&id).is_some_and(|e| !e.blocked()) {
                self.orphans_of(&id);
            }
        }
    }

    /// What the decider proposes for the committed state of `exec_id`.
    pub(super) fn committed_decision(&self, exec_id: &str) -> Option<decide::Decision> {
        let e = self.executions.get(exec_id)?;
        Some(self.decision_on(e))
    }

    /// What the decider proposes for `e`, an execution in memory.
    pub(super) fn decision_on(&self, e: &Exec) -> decide::Decision {
        let execs = &self.executions;
        let children = |cid: &str| execs.get(cid).map(|c| child_view(&c.proj));
        let cx = Context {
            workflow: &e.def.workflow,
            now: self.now,
            children: &children,
        };
        decide::decide(&cx, &e.proj)
    }

    /// Records when `exec_id` next needs the decider.
    pub(super) fn set_wake(&mut self, exec_id: &str, wake: Option<Millis>) {
        let Some(e) = self.executions.get_mut(exec_id) else {
            return;
        };
        // The same wake-up again leaves its entry where it is.
        if e.wake == wake {
            return;
        }
        if let Some(old) = e.wake.take() {
            self.wakes.remove(&(old, exec_id.to_string()));
        }
        e.wake = wake;
        if let Some(t) = wake {
            self.wakes.insert((t, exec_id.to_string()));
        }
    }

    /// Follow-up work after every input.
    pub(super) fn after_input(&mut self) {
        if !self.barrier.is_empty() {
            return;
        }
        for _ in 0..1000 {
            let dirty = std::mem::take(&mut self.dirty);
            if dirty.is_empty() && !self.admission.needed {
                break;
            }
            for id in dirty {
                self.refresh(&id);
            }
            if self.admission.needed {
                self.admit();
            }
        }
        self.serve_polls();
    }

    /// True when a tick could record an orphaned dispatch. Those of an
    /// execution whose batch or reload is in flight wait for it instead:
    /// its commit re-decides it, and a failed write or a reload asks for
    /// it again ([`Engine::retry_soon`]), and the orphans are recorded (or
    /// dropped, if no longer current) then. Ticking for them meanwhile
    /// only does work a tick leaves for later earlier, and whether there
    /// are any depends on memory: a session's hold on the tokens of an
    /// execution is not kept across its eviction, so its end orphans the
    /// stale tokens of an execution that stayed in memory and not those
    /// of one read back.
    fn orphans_for_a_tick(&self) -> bool {
        self.work.orphans.keys().any(|token| {
            self.work
                .tokens
                .get(token.as_str())
                .and_then(|t| self.executions.get(&t.execution_id))
                .is_none_or(|e| !e.blocked())
        })
    }

    /// The earliest time a `Tick` has work to do.
    pub(super) fn next_wake(&self) -> Option<Millis> {
        let timeout = self.config.session_timeout_ms;
        // An entry the last tick already saw belongs to an execution that
        // tick could not decide (its batch in flight, a reload, orphans to
        // record): it is looked at again when its commit lands or on the
        // next tick. Asked for as the time it fell due, it would stay the
        // earliest deadline, the same from tick to tick, and hide every
        // later one (a parked poll's deadline among them) until the
        // periodic tick.
        let seen = self.ticked_at;
        let stale = self.wakes.first().is_some_and(|(t, _)| *t <= seen);
        [
            self.wakes
                .range((seen + 1, String::new())..)
                .next()
                .map(|(t, _)| *t),
            stale.then_some(self.now + TICK_MS),
            self.work.polls.values().map(|p| p.deadline).min(),
            self.work.waits.first_deadline(),
            self.work
                .sessions
                .values()
                .map(|s| s.last_seen + timeout)
                .min(),
            self.work.unconfirmed.first().map(|(t, _)| t + timeout),
            self.recovery_until,
            self.next_idle_wake(),
            self.soon.values().min().copied(),
            (self.orphans_for_a_tick() || self.registry.unsettled.is_some())
                .then_some(self.now + TICK_MS),
        ]
        .into_iter()
        .flatten()
        .min()
    }
}
