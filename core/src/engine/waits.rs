//! `wait` calls parked until their execution ends or their deadline,
//! indexed by execution and by deadline so that an execution's end and a
//! tick find theirs without reading every parked wait.

use super::input::RequestId;
use super::keyed::{id_map, IdMap};
use super::state::ParkedWait;
use crate::history::Millis;
use std::collections::{BTreeMap, BTreeSet};

/// The parked waits.
#[derive(Default)]
pub(crate) struct Waits {
    by_id: BTreeMap<RequestId, ParkedWait>,
    /// Execution → the waits on it.
    by_execution: IdMap<BTreeSet<RequestId>>,
    /// Deadline and wait, soonest first.
    deadlines: BTreeSet<(Millis, RequestId)>,
}

impl Waits {
    /// None yet, hashed with `seed`.
    pub fn new(seed: u64) -> Waits {
        Waits {
            by_execution: id_map(seed),
            ..Waits::default()
        }
    }

    /// Parks `wait` as request `id` (in place of one parked as `id`).
    pub fn insert(&mut self, id: RequestId, wait: ParkedWait) {
        self.remove(id);
        match self.by_execution.get_mut(wait.execution_id.as_str()) {
            Some(ids) => {
                ids.insert(id);
            }
            None => {
                self.by_execution
                    .insert(wait.execution_id.as_str().into(), BTreeSet::from([id]));
            }
        }
        self.deadlines.insert((wait.deadline, id));
        self.by_id.insert(id, wait);
    }

    /// Unparks request `id`.
    pub fn remove(&mut self, id: RequestId) -> Option<ParkedWait> {
        let wait = self.by_id.remove(&id)?;
        self.deadlines.remove(&(wait.deadline, id));
        if let Some(ids) = self.by_execution.get_mut(wait.execution_id.as_str()) {
            ids.remove(&id);
            if ids.is_empty() {
                self.by_execution.remove(wait.execution_id.as_str());
            }
        }
        Some(wait)
    }

    /// Whether a wait is parked on `execution_id`.
    pub fn on(&self, execution_id: &str) -> bool {
        self.by_execution.contains_key(execution_id)
    }

    /// Unparks every wait on `execution_id`, in request order.
    pub fn take(&mut self, execution_id: &str) -> Vec<RequestId> {
        let ids: Vec<RequestId> = self
            .by_execution
            .remove(execution_id)
            .map(|ids| ids.into_iter().collect())
            .unwrap_or_default();
        for &id in &ids {
            if let Some(wait) = self.by_id.remove(&id) {
                self.deadlines.remove(&(wait.deadline, id));
            }
        }
        ids
    }

    /// The soonest deadline.
    pub fn first_deadline(&self) -> Option<Millis> {
        self.deadlines.first().map(|(t, _)| *t)
    }

    /// The waits whose deadline is `now` or earlier, in request order.
    pub fn due(&self, now: Millis) -> Vec<RequestId> {
        let mut ids: Vec<RequestId> = self
            .deadlines
            .iter()
            .take_while(|(t, _)| *t <= now)
            .map(|(_, id)| *id)
            .collect();
        ids.sort_unstable();
        ids
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wait(execution_id: &str, deadline: Millis) -> ParkedWait {
        ParkedWait {
            execution_id: execution_id.into(),
            deadline,
        }
    }

    #[test]
    fn an_execution_and_a_deadline_find_their_waits() {
        let mut w = Waits::default();
        w.insert(3, wait("a", 500));
        w.insert(1, wait("b", 100));
        w.insert(2, wait("a", 100));
        assert!(w.on("a") && w.on("b") && !w.on("c"));
        assert_eq!(w.first_deadline(), Some(100));
        assert_eq!(w.due(99), Vec::<RequestId>::new());
        assert_eq!(w.due(100), vec![1, 2]);
        assert_eq!(w.take("a"), vec![2, 3]);
        assert!(!w.on("a"));
        assert_eq!(w.due(1_000), vec![1]);
        assert_eq!(w.remove(1).map(|w| w.execution_id), Some("b".into()));
        assert_eq!(w.first_deadline(), None);
        assert!(!w.on("b") && w.remove(1).is_none());
    }
}
