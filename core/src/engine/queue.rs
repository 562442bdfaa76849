//! [`TaskQueue`]: the units waiting for a worker, oldest first, and by task
//! name.
//!
//! A poll looks only at the task names its session takes. Tasks no poll
//! takes (their workers are down, or not deployed yet) can pile up by the
//! thousand; with one ordered list every poll, and every input while polls
//! were parked, walked past all of them (20,000 such tasks took another
//! workflow's throughput from 18,900 steps/s to 1,260). Now a poll costs
//! one look per task name plus the entries it hands out.
//!
//! A unit handed out stays queued until the batch recording its dispatch
//! commits (then it leaves) or fails (then it is put back): under load
//! most of the queue is such units. They are marked, and a poll steps over
//! them without looking up their execution (a hash of its id and a
//! comparison each: 2.5 % of the server's engine thread went to walking
//! past them).

use super::state::Queued;
use crate::history::{Millis, Name};
use std::collections::{BTreeMap, BTreeSet};

/// A place in the queue: since when the unit waits, then the engine's
/// counter (ties in time keep their order).
pub(super) type Place = (Millis, u64);

/// A queued unit, and whether it is handed out in a batch not yet
/// committed.
#[derive(Debug)]
struct Entry {
    queued: Queued,
    handed: bool,
}

impl Entry {
    /// Can a poll take it: not handed out, and `ready`.
    fn open(&self, ready: impl Fn(&Queued) -> bool) -> bool {
        !self.handed && ready(&self.queued)
    }
}

/// The task queue (see the module docs).
#[derive(Default)]
pub(super) struct TaskQueue {
    by_place: BTreeMap<Place, Entry>,
    /// Task name → its places, oldest first.
    by_task: BTreeMap<Name, BTreeSet<Place>>,
}

impl TaskQueue {
    #[cfg(test)]
    pub(super) fn is_empty(&self) -> bool {
        self.by_place.is_empty()
    }

    /// True when `ready` accepts some queued unit not handed out (oldest
    /// first, stopping at the first).
    pub(super) fn any(&self, ready: impl Fn(&Queued) -> bool) -> bool {
        self.by_place.values().any(|e| e.open(&ready))
    }

    /// Marks the unit at `place` handed out: polls step over it until it
    /// leaves the queue or is [put back](TaskQueue::put_back).
    pub(super) fn hand_out(&mut self, place: &Place) {
        if let Some(e) = self.by_place.get_mut(place) {
            e.handed = true;
        }
    }

    /// The batch that handed out the unit at `place` did not commit: polls
    /// may take it again.
    pub(super) fn put_back(&mut self, place: &Place) {
        if let Some(e) = self.by_place.get_mut(place) {
            e.handed = false;
        }
    }

    pub(super) fn insert(&mut self, place: Place, queued: Queued) {
        self.remove(&place);
        // A task name new to the queue gets an entry of its own.
        match self.by_task.get_mut(&*queued.task) {
            Some(places) => {
                places.insert(place);
            }
            None => {
                self.by_task
                    .insert(queued.task.clone(), BTreeSet::from([place]));
            }
        }
        self.by_place.insert(
            place,
            Entry {
                queued,
                handed: false,
            },
        );
    }

    pub(super) fn remove(&mut self, place: &Place) -> Option<Queued> {
        let Entry { queued, .. } = self.by_place.remove(place)?;
        self.forget(*place, &queued.task);
        Some(queued)
    }

    fn forget(&mut self, place: Place, task: &str) {
        if let Some(places) = self.by_task.get_mut(task) {
            places.remove(&place);
            if places.is_empty() {
                self.by_task.remove(task);
            }
        }
    }

    /// Up to `max` of the oldest units whose task `takes` accepts, not
    /// handed out, and that `ready` accepts, oldest first: what one ordered
    /// walk of the whole queue would pick, looking only at the names taken.
    pub(super) fn oldest(
        &self,
        max: usize,
        takes: impl Fn(&str) -> bool,
        ready: impl Fn(&Queued) -> bool,
    ) -> Vec<Queued> {
        let mut places: Vec<Place> = Vec::new();
        for (task, of_task) in &self.by_task {
            if !takes(task) {
                continue;
            }
            // The oldest `max` ready ones of each name hold the oldest
            // `max` of all the names taken.
            places.extend(
                of_task
                    .iter()
                    .filter(|p| self.by_place.get(p).is_some_and(|e| e.open(&ready)))
                    .take(max),
            );
        }
        places.sort_unstable();
        places
            .iter()
            .take(max)
            .filter_map(|p| self.by_place.get(p).map(|e| e.queued.clone()))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::engine::state::pattern_matches;
    use proptest::prelude::*;

    fn unit(execution: u8, task: &str) -> Queued {
        Queued {
            execution_id: format!("e{execution}").into(),
            unit: "s1".into(),
            task: task.into(),
        }
    }

    /// What a poll picked before the index: one walk of the whole queue
    /// (a unit and whether it is handed out).
    fn walk(
        queue: &BTreeMap<Place, (Queued, bool)>,
        max: usize,
        takes: impl Fn(&str) -> bool,
        ready: impl Fn(&Queued) -> bool,
    ) -> Vec<Queued> {
        queue
            .values()
            .filter(|(q, handed)| !handed && takes(&q.task) && ready(q))
            .take(max)
            .map(|(q, _)| q.clone())
            .collect()
    }

    const TASKS: [&str; 4] = ["pay.charge", "pay.refund", "mail.send", "orbit.sleep"];
    const PATTERNS: [&str; 5] = ["pay.*", "mail.send", "*", "pay.charge", "none"];

    proptest! {
        #[test]
        fn a_poll_picks_what_a_walk_of_the_whole_queue_picks(
            ops in proptest::collection::vec((0u64..40, 0usize..4, 0u8..30, 0u8..4), 0..120),
            pattern in 0usize..5,
            blocked in proptest::collection::btree_set(0u8..30, 0..10),
            max in 1usize..8,
        ) {
            let mut queue = TaskQueue::default();
            let mut reference: BTreeMap<Place, (Queued, bool)> = BTreeMap::new();
            for (n, (at, task, execution, op)) in ops.into_iter().enumerate() {
                let place = (at, n as u64 % 7);
                match op {
                    0 => prop_assert_eq!(
                        queue.remove(&place),
                        reference.remove(&place).map(|(q, _)| q)
                    ),
                    1 => {
                        queue.hand_out(&place);
                        if let Some((_, handed)) = reference.get_mut(&place) {
                            *handed = true;
                        }
                    }
                    2 => {
                        queue.put_back(&place);
                        if let Some((_, handed)) = reference.get_mut(&place) {
                            *handed = false;
                        }
                    }
                    _ => {
                        queue.insert(place, unit(execution, TASKS[task]));
                        reference.insert(place, (unit(execution, TASKS[task]), false));
                    }
                }
            }
            let takes = |t: &str| pattern_matches(PATTERNS[pattern], t);
            let ready = |q: &Queued| !blocked.iter().any(|b| *q.execution_id == format!("e{b}"));
            prop_assert_eq!(
                queue.oldest(max, takes, ready),
                walk(&reference, max, takes, ready)
            );
            prop_assert_eq!(queue.is_empty(), reference.is_empty());
            prop_assert_eq!(
                queue.any(ready),
                reference.values().any(|(q, handed)| !handed && ready(q))
            );
            let indexed: usize = queue.by_task.values().map(BTreeSet::len).sum();
            prop_assert_eq!(indexed, reference.len());
        }
    }

    #[test]
    fn units_handed_out_are_stepped_over_until_put_back() {
        let mut queue = TaskQueue::default();
        queue.insert((1, 1), unit(1, "pay.charge"));
        queue.insert((2, 2), unit(2, "pay.charge"));
        queue.hand_out(&(1, 1));
        let looked = std::cell::Cell::new(0);
        let ready = |_: &Queued| {
            looked.set(looked.get() + 1);
            true
        };
        assert_eq!(
            queue.oldest(5, |_| true, ready),
            vec![unit(2, "pay.charge")]
        );
        assert_eq!(looked.get(), 1);
        queue.put_back(&(1, 1));
        assert_eq!(
            queue.oldest(5, |_| true, |_| true),
            vec![unit(1, "pay.charge"), unit(2, "pay.charge")]
        );
        // A unit queued again at its place (re-synced) is not handed out.
        queue.hand_out(&(2, 2));
        queue.insert((2, 2), unit(2, "pay.charge"));
        assert!(queue.any(|q| &*q.execution_id == "e2"));
    }

    #[test]
    fn tasks_nobody_takes_are_not_looked_at() {
        let mut queue = TaskQueue::default();
        for n in 0..10_000 {
            queue.insert((n, n), unit(1, "mail.send"));
        }
        queue.insert((20_000, 0), unit(2, "pay.charge"));
        let looked = std::cell::Cell::new(0);
        let picked = queue.oldest(
            5,
            |t| pattern_matches("pay.*", t),
            |_| {
                looked.set(looked.get() + 1);
                true
            },
        );
        assert_eq!(picked, vec![unit(2, "pay.charge")]);
        assert_eq!(looked.get(), 1);
    }
}
