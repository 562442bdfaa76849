//! Idle executions leave memory. A running execution that only waits —
//! for its timer, a signal or a cancel — with nothing queued, handed out
//! or parked on it, is evicted once [`super::Config::idle_evict_ms`] has
//! passed without a commit of its own. The engine keeps three small things
//! of it: its next wake-up (in `dormant`), the tokens of its past
//! deliveries (a late result must still find it), and its admission slot.
//! When the wake-up is due it is loaded back ([`super::load`]) and decided
//! as if it had never left; a command naming it loads it first.
//!
//! Memory is also capped ([`super::Config::max_in_memory`]): while more
//! executions than that are in memory, idle ones leave at once, least
//! recently active first, however briefly they have waited. A burst of
//! sleepers therefore never holds more than the cap, and since the same
//! eviction is invisible, the cap changes when the store is read, never
//! what happens.
//!
//! A parent waiting for its children leaves too: the engine notes which
//! running children it awaits, keeps them (children never leave, and a
//! finished one is not forgotten while its evicted parent awaits it), and
//! reads the parent back the moment one of them ends, so the parent records
//! the outcome from memory as if it had stayed.

use super::load::LoadId;
use super::state::Exec;
use super::{Engine, TICK_MS};
use crate::history::{DispatchState, Millis, Status, UnitState};
use std::collections::{BTreeMap, BTreeSet};

/// How many busy executions one tick looks at at most when memory is over
/// its cap.
const PRESSURE_LOOK: usize = 256;

/// [`Engine::watch_idle`] on `e` (`exec_id`), active at `now`, evicted
/// `after` that long idle.
pub(super) fn watch(idle: &mut Idle, e: &mut Exec, exec_id: &str, now: Millis, after: Millis) {
    e.active_at = now;
    if !e.idle_watched {
        e.idle_watched = true;
        idle.checks.insert((now + after, exec_id.to_string()));
    }
}

/// What the engine keeps of evicted executions, and when to look at the
/// others again.
#[derive(Default)]
pub(super) struct Idle {
    /// (when to look, execution): one entry per live execution in memory.
    pub checks: BTreeSet<(Millis, String)>,
    /// Evicted executions by their next wake-up.
    pub dormant: BTreeSet<(Millis, String)>,
    /// Evicted execution → its next wake-up (none: it waits for a command).
    pub evicted: BTreeMap<String, Option<Millis>>,
    /// Token of a past delivery of an evicted execution → the execution.
    pub tokens: BTreeMap<String, String>,
    /// Running child → its evicted parent, which awaits its outcome.
    pub awaited: BTreeMap<String, String>,
    /// The last tick over the cap stopped at [`PRESSURE_LOOK`] busy
    /// executions: the next one comes a tick later.
    pub pressed: bool,
}

impl Engine {
    /// Starts watching `exec_id` for idleness (once per stay in memory).
    pub(super) fn watch_idle(&mut self, exec_id: &str) {
        let Some(after) = self.config.idle_evict_ms else {
            return;
        };
        let now = self.now;
        let Some(e) = self.executions.get_mut(exec_id) else {
            return;
        };
        watch(&mut self.idle, e, exec_id, now, after);
    }

    /// Evicts the executions that have been idle long enough; looks again
    /// later at those still busy.
    pub(super) fn evict_idle(&mut self) {
        let Some(after) = self.config.idle_evict_ms else {
            return;
        };
        let now = self.now;
        // Looked at again no sooner than the next tick, even with an
        // eviction delay of zero.
        let again = now + after.max(TICK_MS);
        let mut due = Vec::new();
        while self.idle.checks.first().is_some_and(|(at, _)| *at <= now) {
            if let Some((_, id)) = self.idle.checks.pop_first() {
                due.push(id);
            }
        }
        for id in due {
            let Some(e) = self.executions.get_mut(&id) else {
                continue;
            };
            if e.proj.status.is_terminal() {
                e.idle_watched = false;
                continue;
            }
            let at = e.active_at + after;
            if at > now {
                self.idle.checks.insert((at, id));
            } else if self.evictable(&id, after) {
                self.evict(&id);
            } else {
                self.idle.checks.insert((again, id));
            }
        }
        self.evict_over_cap(after);
    }

    /// Past the cap on executions in memory, evicts idle ones before their
    /// time, least recently active first. Each tick evicts as many as the
    /// excess, but looks at no more than [`PRESSURE_LOOK`] busy ones: a busy
    /// execution looked at is looked at again a delay later, so busy ones at
    /// the front cannot stall the others, and a server over its cap with
    /// executions that cannot leave (their tasks wait for workers that are
    /// down) pays a bounded cost per tick, not one that grows with them.
    fn evict_over_cap(&mut self, after: Millis) {
        let Some(cap) = self.config.max_in_memory else {
            return;
        };
        // Finished executions have their own cache (`finished`).
        let live = self.executions.len().saturating_sub(self.finished.len());
        let mut excess = live.saturating_sub(cap);
        let again = self.now + after.max(TICK_MS);
        let mut looks = PRESSURE_LOOK;
        let mut busy = Vec::new();
        while excess > 0 && looks > 0 {
            let Some((at, id)) = self.idle.checks.pop_first() else {
                break;
            };
            let Some(e) = self.executions.get_mut(&id) else {
                continue;
            };
            if e.proj.status.is_terminal() {
                e.idle_watched = false;
            } else if self.evictable(&id, after) {
                self.evict(&id);
                excess -= 1;
            } else {
                busy.push((at.max(again), id));
                looks -= 1;
            }
        }
        self.idle.checks.extend(busy);
        // Stopped by the bound with memory still over the cap: the next
        // tick goes on looking.
        self.idle.pressed = excess > 0 && looks == 0;
    }

    /// True when nothing but time or a command can move `exec_id`.
    fn evictable(&self, exec_id: &str, after: Millis) -> bool {
        let Some(e) = self.executions.get(exec_id) else {
            return false;
        };
        let p = &e.proj;
        let settled = |u: &crate::history::Unit| match &u.state {
            UnitState::Succeeded { .. } | UnitState::Failed { .. } => true,
            // A running child in memory: its end brings the parent back.
            // A parent winding down (cancelled, or failing) is not done
            // with a child it cancels until the child holds the
            // cancellation (a failed write of it is retried from the
            // parent's decision, which must stay in memory).
            UnitState::Child { child_id } => self.executions.get(child_id).is_some_and(|c| {
                !c.proj.status.is_terminal()
                    && !self.dirty.contains(child_id)
                    && (!p.winding_down() || u.name.compensation || c.proj.cancel.is_some())
            }),
            // A failed attempt waiting for its retry: none of its
            // deliveries is still wanted (a late success still counts, and
            // finds the execution through `Idle::tokens`).
            UnitState::Retrying { .. } => u
                .dispatches
                .values()
                .all(|d| d.state == DispatchState::Failed),
            _ => false,
        };
        matches!(p.status, Status::Running | Status::Compensating)
            && p.parent.is_none()
            && !e.blocked()
            && e.waiting.is_empty()
            && e.wake.is_none_or(|w| w > self.now + after)
            && p.units.values().all(|u| settled(u))
            && !self.dirty.contains(exec_id)
            && !self.soon.contains_key(exec_id)
            && !self.work.waits.on(exec_id)
    }

    fn evict(&mut self, exec_id: &str) {
        let wake = self.executions.get(exec_id).and_then(|e| e.wake);
        self.set_wake(exec_id, None);
        let Some(e) = self.executions.remove(exec_id) else {
            return;
        };
        for token in e.proj.tokens.keys() {
            self.idle
                .tokens
                .insert(token.to_string(), exec_id.to_string());
        }
        for u in e.proj.units.values() {
            if let UnitState::Child { child_id } = &u.state {
                self.idle
                    .awaited
                    .insert(child_id.clone(), exec_id.to_string());
            }
        }
        self.unindex(exec_id, &e.proj);
        if self.planted(super::Bug::EvictionFreesAdmissionSlot)
            && self.admission.active.remove(exec_id).is_some()
        {
            self.admission.needed = true;
        }
        self.loads.forgot(exec_id);
        if let Some(t) = wake.filter(|_| !self.planted(super::Bug::EvictionLosesTimer)) {
            self.idle.dormant.insert((t, exec_id.to_string()));
        }
        self.idle.evicted.insert(exec_id.to_string(), wake);
    }

    /// Loads back the evicted executions whose wake-up is due: the load,
    /// and the wake-ups it is for.
    pub(super) fn wake_dormant(&mut self) -> Option<(LoadId, Vec<(Millis, String)>)> {
        let now = self.now;
        let mut due = Vec::new();
        while let Some((at, id)) = self.idle.dormant.first().cloned() {
            if at > now {
                break;
            }
            self.idle.dormant.pop_first();
            self.idle.evicted.insert(id.clone(), None);
            due.push((at, id));
        }
        if due.is_empty() {
            return None;
        }
        let ids = due.iter().map(|(_, id)| id.clone()).collect();
        Some((self.ask_load(ids, Vec::new(), None), due))
    }

    /// `exec_id` is in memory again: forget what eviction kept of it.
    pub(super) fn returned(&mut self, exec_id: &str) {
        if let Some(wake) = self.idle.evicted.remove(exec_id) {
            if let Some(t) = wake {
                self.idle.dormant.remove(&(t, exec_id.to_string()));
            }
            if let Some(e) = self.executions.get(exec_id) {
                for token in e.proj.tokens.keys() {
                    self.idle.tokens.remove(token.as_ref());
                }
                // Its history is as it left it (only it writes there), so
                // these are the children noted at eviction.
                for u in e.proj.units.values() {
                    if let UnitState::Child { child_id } = &u.state {
                        self.idle.awaited.remove(child_id);
                    }
                }
            }
        }
    }

    /// `child` has ended: an evicted parent awaiting it is read back now,
    /// to record the outcome (the child stays noted, so kept in memory,
    /// until the parent is back).
    pub(super) fn child_ended(&mut self, child: &str) {
        let Some(parent) = self.idle.awaited.get(child).cloned() else {
            return;
        };
        let Some(wake) = self.idle.evicted.get(&parent) else {
            return;
        };
        // Read back now, not at its wake-up (which it keeps: see `install`).
        if let Some(t) = *wake {
            self.idle.dormant.remove(&(t, parent.clone()));
        }
        let load = self.ask_load(vec![parent], Vec::new(), None);
        self.barrier.insert(load);
    }

    /// True while an evicted parent awaits `child`'s outcome: the finished
    /// child must stay in memory for it.
    pub(super) fn awaited(&self, child: &str) -> bool {
        self.idle.awaited.contains_key(child)
    }

    /// The evicted execution a past delivery's token belongs to.
    pub(super) fn evicted_owner(&self, token: &str) -> Option<&str> {
        self.idle.tokens.get(token).map(String::as_str)
    }

    /// The earliest dormant wake-up or idleness check.
    pub(super) fn next_idle_wake(&self) -> Option<Millis> {
        let check = self
            .config
            .idle_evict_ms
            .and_then(|_| self.idle.checks.first().map(|(t, _)| *t));
        let pressed = self.idle.pressed.then_some(self.now + TICK_MS);
        [check, self.idle.dormant.first().map(|(t, _)| *t), pressed]
            .into_iter()
            .flatten()
            .min()
    }

    /// Evicts now every execution that could leave memory, however briefly
    /// it has been idle; returns those that left. For tests and simulations
    /// that show eviction cannot be observed: it never changes what the
    /// engine does or answers, only when it reads the store.
    pub fn evict_idle_now(&mut self) -> Vec<String> {
        let ids: Vec<String> = self
            .executions
            .sorted_ids()
            .into_iter()
            .filter(|id| self.evictable(id, 0))
            .collect();
        for id in &ids {
            self.evict(id);
        }
        ids
    }

    /// Executions evicted for idleness (not in memory).
    pub fn evicted(&self) -> usize {
        self.idle.evicted.len()
    }
}
