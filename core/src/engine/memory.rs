//! [`Executions`]: the executions the engine holds in memory, by id.
//!
//! Every input looks several of them up, so they are hashed rather than
//! kept in an ordered map (whose look-ups compared ids a dozen times
//! each: 12 % of the engine's instructions went to comparing strings).
//! The table is seeded ([`super::keyed`]): clients choose the ids. Ids
//! with a `.` (child executions, `parent.…`) are also kept in order, so a
//! parent's children are found without a scan.

use super::keyed::{id_map, IdMap};
use super::state::Exec;
use crate::history::Name;
use std::collections::BTreeSet;

/// The executions in memory (boxed: a rehash moves only pointers).
#[derive(Default)]
pub(super) struct Executions {
    by_id: IdMap<Box<Exec>>,
    /// The ids of `by_id` that contain a `.`, in order.
    dotted: BTreeSet<String>,
}

impl Executions {
    /// None yet, hashed with `seed`.
    pub(super) fn new(seed: u64) -> Executions {
        Executions {
            by_id: id_map(seed),
            dotted: BTreeSet::new(),
        }
    }

    pub(super) fn get(&self, id: &str) -> Option<&Exec> {
        self.by_id.get(id).map(|e| &**e)
    }

    pub(super) fn get_mut(&mut self, id: &str) -> Option<&mut Exec> {
        self.by_id.get_mut(id).map(|e| &mut **e)
    }

    pub(super) fn contains_key(&self, id: &str) -> bool {
        self.by_id.contains_key(id)
    }

    /// Holds `exec` under its projection's id (the key shares it).
    pub(super) fn insert(&mut self, exec: Box<Exec>) -> Option<Box<Exec>> {
        let id = exec.proj.execution_id.clone();
        if id.contains('.') {
            self.dotted.insert(id.to_string());
        }
        self.by_id.insert(id, exec)
    }

    pub(super) fn remove(&mut self, id: &str) -> Option<Box<Exec>> {
        let removed = self.by_id.remove(id);
        if removed.is_some() && id.contains('.') {
            self.dotted.remove(id);
        }
        removed
    }

    pub(super) fn len(&self) -> usize {
        self.by_id.len()
    }

    /// Every execution, in no particular order.
    pub(super) fn iter(&self) -> impl Iterator<Item = (&Name, &Exec)> {
        self.by_id.iter().map(|(id, e)| (id, &**e))
    }

    /// Every execution, in no particular order.
    pub(super) fn values(&self) -> impl Iterator<Item = &Exec> {
        self.by_id.values().map(|e| &**e)
    }

    /// The ids of every execution, sorted.
    pub(super) fn sorted_ids(&self) -> Vec<String> {
        let mut ids: Vec<String> = self.by_id.keys().map(|id| id.to_string()).collect();
        ids.sort_unstable();
        ids
    }

    /// The executions whose id starts with `parent.`, in id order.
    pub(super) fn children_of<'a>(
        &'a self,
        parent: &str,
    ) -> impl Iterator<Item = (&'a String, &'a Exec)> + 'a {
        let prefix = format!("{parent}.");
        self.dotted
            .range(prefix.clone()..)
            .take_while(move |id| id.starts_with(&prefix))
            .filter_map(|id| Some((id, self.get(id)?)))
    }
}
