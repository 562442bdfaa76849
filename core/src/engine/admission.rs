//! Admission under `--max-active-executions` and a workflow's `max_active`:
//! executions beyond a cap wait `pending` and start oldest first. Children
//! bypass both caps and are not counted.

use super::txn::Txn;
use super::Engine;
use crate::history::{EventKind, Status};
use crate::ir::Workflow;

impl Engine {
    /// Active top-level executions (committed or in a batch in flight),
    /// in total and of `workflow`.
    fn active_counts(&self, workflow: &str) -> (u64, u64) {
        let mut total = self.admission.active.len() as u64;
        let mut same = self
            .admission
            .active
            .values()
            .filter(|w| *w == workflow)
            .count() as u64;
        for txn in self.writes.batches.values() {
            for (id, d) in &txn.drafts {
                if d.proj.parent.is_none()
                    && d.proj.status.is_active()
                    && !self.admission.active.contains_key(id)
                {
                    total += 1;
                    if *d.proj.workflow == *workflow {
                        same += 1;
                    }
                }
            }
        }
        (total, same)
    }

    /// True when every cap that applies lets one more execution of `wf` run.
    pub(super) fn can_admit(&self, wf: &Workflow) -> bool {
        if self.config.max_active_executions.is_none() && wf.max_active.is_none() {
            // No cap applies: skip counting (it walks the batches in flight).
            return true;
        }
        let (total, same) = self.active_counts(&wf.name);
        let global = self.config.max_active_executions.is_none_or(|m| total < m);
        let own = wf.max_active.is_none_or(|m| same < m);
        global && own
    }

    /// True when an older execution waits for the slot a new start of `wf`
    /// would take: the new one waits behind it (admission is oldest first).
    /// Asks for an admission pass, so the older one starts if it can.
    pub(super) fn pending_ahead(&mut self, wf: &Workflow) -> bool {
        let global = self.config.max_active_executions.is_some();
        if !global && wf.max_active.is_none() {
            return false;
        }
        let ahead = self.admission.pending.iter().any(|(_, id)| {
            global
                || self
                    .executions
                    .get(id)
                    .is_some_and(|e| *e.proj.workflow == *wf.name)
        });
        self.admission.needed |= ahead;
        ahead
    }

    /// Keeps the active and pending sets in step with committed statuses.
    pub(super) fn status_changed(&mut self, exec_id: &str, was_new: bool, before: Status) {
        let Some(e) = self.executions.get(exec_id) else {
            return;
        };
        let p = &e.proj;
        let after = p.status;
        let top = p.parent.is_none();
        let created_at = p.created_at;
        let ended = after.is_terminal() && (was_new || !before.is_terminal());
        let parent = if ended { p.parent.clone() } else { None };
        // Most commits change neither set: nothing is allocated for them.
        if top && after.is_active() {
            if !self.admission.active.contains_key(exec_id) {
                let workflow = p.workflow.to_string();
                self.admission.active.insert(exec_id.to_string(), workflow);
            }
        } else if self.admission.active.remove(exec_id).is_some() {
            self.admission.needed = true;
        }
        if top && after == Status::Pending {
            self.admission
                .pending
                .insert((created_at, exec_id.to_string()));
        } else if !self.admission.pending.is_empty() {
            self.admission
                .pending
                .remove(&(created_at, exec_id.to_string()));
        }
        if ended {
            self.finish_waits(exec_id);
            if let Some(parent) = parent {
                self.dirty.insert(parent);
                self.child_ended(exec_id);
            }
        }
    }

    /// Starts pending executions, oldest first, while caps allow.
    pub(super) fn admit(&mut self) {
        self.admission.needed = false;
        let pending: Vec<(u64, String)> = self.admission.pending.iter().cloned().collect();
        let global = self.config.max_active_executions.is_some();
        // Workflows whose oldest pending execution cannot start right now
        // (its own batch is in flight): younger ones of them wait too, and
        // under a global cap everyone does. It comes back here when that
        // batch commits.
        let mut held_back = std::collections::BTreeSet::new();
        for (_, id) in pending {
            let Some(e) = self.executions.get(&id) else {
                continue;
            };
            if e.proj.status != Status::Pending || held_back.contains(&e.proj.workflow) {
                continue;
            }
            if e.blocked() {
                if global {
                    return;
                }
                held_back.insert(e.proj.workflow.clone());
                continue;
            }
            let def = e.def.clone();
            if !self.can_admit(&def.workflow) {
                if self.config.max_active_executions.is_some() && !self.global_room() {
                    return;
                }
                continue;
            }
            let mut txn = Txn::default();
            if !self.draft(&mut txn, &id) {
                continue;
            }
            self.push(&mut txn, &id, EventKind::WorkflowStarted {});
            self.settle(&mut txn, &id);
            self.submit(txn);
        }
    }

    fn global_room(&self) -> bool {
        let (total, _) = self.active_counts("");
        self.config.max_active_executions.is_none_or(|m| total < m)
    }
}
