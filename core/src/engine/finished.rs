//! Finished executions leave memory. Once an execution's final batch has
//! committed, it joins a short queue of recent ones (at most
//! [`super::Config::finished_cache`]); the oldest beyond that are forgotten,
//! unless something still needs them (a parent that has not yet recorded
//! the child's outcome, a request queued behind it). Commands naming a
//! forgotten execution read it back first ([`super::load`]); reads are
//! served from the store by the driver.

use super::Engine;
use crate::history::UnitState;

impl Engine {
    /// Queues `exec_id` for forgetting if it is finished.
    pub(super) fn retire(&mut self, exec_id: &str) {
        if self
            .executions
            .get(exec_id)
            .is_some_and(|e| e.proj.status.is_terminal())
        {
            self.finished.push_back(exec_id.to_string());
        }
    }

    /// Forgets the oldest finished executions beyond the cache size. One
    /// still needed is skipped: it is queued again when what held it ends
    /// (its parent's record of it, its own next commit).
    pub(super) fn trim_finished(&mut self) {
        while self.finished.len() > self.config.finished_cache {
            let Some(id) = self.finished.pop_front() else {
                break;
            };
            if self.forgettable(&id) {
                self.forget(&id);
            }
        }
    }

    fn forgettable(&self, exec_id: &str) -> bool {
        let Some(e) = self.executions.get(exec_id) else {
            return false;
        };
        if !e.proj.status.is_terminal() || e.blocked() || !e.waiting.is_empty() {
            return false;
        }
        // A parent that has not recorded this child's outcome yet reads it
        // from memory.
        let parent_waits = e
            .proj
            .parent
            .as_ref()
            .and_then(|p| self.executions.get(p))
            .is_some_and(|p| {
                p.proj.units.values().any(
                    |u| matches!(&u.state, UnitState::Child { child_id } if child_id == exec_id),
                )
            });
        !parent_waits && !self.awaited(exec_id)
    }

    fn forget(&mut self, exec_id: &str) {
        self.set_wake(exec_id, None);
        if let Some(e) = self.executions.remove(exec_id) {
            self.unindex(exec_id, &e.proj);
        }
        self.loads.forgot(exec_id);
    }

    /// Finished executions held in memory (the recent ones and those still
    /// needed).
    pub fn finished_in_memory(&self) -> usize {
        self.executions
            .values()
            .filter(|e| e.proj.status.is_terminal())
            .count()
    }

    /// Executions held in memory, finished or not.
    pub fn executions_in_memory(&self) -> usize {
        self.executions.len()
    }
}
