//! Invariant 9, eviction is invisible: a seed run twice in lockstep, once
//! with eviction of idle executions off and once with executions leaving
//! memory at random points, must end with the same durable history for
//! every execution and must have given every worker and client the same
//! replies, in the same order, at the same virtual instants. The world
//! keeps both runs in step (see `lockstep`), so the first difference is the
//! engine's doing, and this observer reports it: the execution and `seq`,
//! or the actor and its request, with both sides.

use super::{Invariant, Violation};
use orbit_core::history::{logs, Event, Millis};
use std::collections::BTreeMap;

/// One reply an actor received.
#[derive(Debug, Clone, PartialEq)]
pub struct Received {
    /// When it arrived (virtual ms since the run started).
    pub at: Millis,
    /// The actor's number for the request it answers.
    pub req: u64,
    /// Its HTTP status.
    pub status: u16,
    /// Its body, as JSON text.
    pub body: String,
}

impl Received {
    fn line(&self) -> String {
        format!(
            "at +{}ms request #{}: {} {}",
            self.at, self.req, self.status, self.body
        )
    }
}

/// What one run showed the outside world.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Observed {
    /// Every execution's durable history at the end, by id.
    pub histories: BTreeMap<String, Vec<Event>>,
    /// Every reply each actor received (`Worker(0)`, `Client(1)`), in
    /// order.
    pub replies: BTreeMap<String, Vec<Received>>,
}

/// A difference, with when it happened (the earliest is reported).
struct Difference {
    at: Millis,
    violation: Violation,
}

/// Compares the run without eviction (`off`) with the run with it (`on`).
pub fn check(off: &Observed, on: &Observed, origin: Millis) -> Result<(), Violation> {
    let mut found: Option<Difference> = None;
    let mut keep = |d: Difference| {
        if found.as_ref().is_none_or(|f| d.at < f.at) {
            found = Some(d);
        }
    };
    if let Some(d) = history_difference(off, on, origin) {
        keep(d);
    }
    if let Some(d) = reply_difference(off, on) {
        keep(d);
    }
    match found {
        Some(d) => Err(d.violation),
        None => Ok(()),
    }
}

fn history_difference(off: &Observed, on: &Observed, origin: Millis) -> Option<Difference> {
    let mut first: Option<Difference> = None;
    let ids = off.histories.keys().chain(on.histories.keys());
    let mut seen = std::collections::BTreeSet::new();
    for id in ids {
        if !seen.insert(id) {
            continue;
        }
        let empty = Vec::new();
        let a = off.histories.get(id).unwrap_or(&empty);
        let b = on.histories.get(id).unwrap_or(&empty);
        let Some(i) = (0..a.len().max(b.len())).find(|i| a.get(*i) != b.get(*i)) else {
            continue;
        };
        let side = |h: &[Event]| match h.get(i) {
            Some(e) => {
                let start = h.first().map_or(0, |f| f.at);
                format!(
                    "{}\n      {}",
                    logs::format_event(id, start, e),
                    serde_json::to_string(e).unwrap_or_default()
                )
            }
            None => "(no such event)".to_owned(),
        };
        let at = [a.get(i), b.get(i)]
            .into_iter()
            .flatten()
            .map(|e| e.at)
            .min()
            .unwrap_or(0)
            .saturating_sub(origin);
        let message = format!(
            "the history of {id} differs at seq {} (+{at}ms):\n    without eviction: {}\n    with eviction:    {}",
            i + 1,
            side(a),
            side(b)
        );
        let violation = Violation::new(Invariant::EvictionInvisible, message).in_execution(id, b);
        if first.as_ref().is_none_or(|f| at < f.at) {
            first = Some(Difference { at, violation });
        }
    }
    first
}

fn reply_difference(off: &Observed, on: &Observed) -> Option<Difference> {
    let mut first: Option<Difference> = None;
    let mut seen = std::collections::BTreeSet::new();
    for actor in off.replies.keys().chain(on.replies.keys()) {
        if !seen.insert(actor) {
            continue;
        }
        let empty = Vec::new();
        let a = off.replies.get(actor).unwrap_or(&empty);
        let b = on.replies.get(actor).unwrap_or(&empty);
        let Some(i) = (0..a.len().max(b.len())).find(|i| a.get(*i) != b.get(*i)) else {
            continue;
        };
        let side = |r: Option<&Received>| r.map_or("(no such reply)".to_owned(), Received::line);
        let at = [a.get(i), b.get(i)]
            .into_iter()
            .flatten()
            .map(|r| r.at)
            .min()
            .unwrap_or(0);
        let message = format!(
            "{actor} received different replies (its reply {} of the run, +{at}ms):\n    without eviction: {}\n    with eviction:    {}",
            i + 1,
            side(a.get(i)),
            side(b.get(i))
        );
        let violation = Violation::new(Invariant::EvictionInvisible, message);
        if first.as_ref().is_none_or(|f| at < f.at) {
            first = Some(Difference { at, violation });
        }
    }
    first
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use orbit_core::history::EventKind;

    fn event(seq: u64, at: Millis) -> Event {
        Event {
            seq,
            at,
            kind: EventKind::WorkflowStarted {},
        }
    }

    #[test]
    fn equal_runs_pass_and_the_earliest_difference_is_reported() {
        let mut off = Observed::default();
        off.histories
            .insert("e1".into(), vec![event(1, 1000), event(2, 1500)]);
        let reply = |at, body: &str| Received {
            at,
            req: 3,
            status: 200,
            body: body.into(),
        };
        off.replies
            .insert("Client(0)".into(), vec![reply(200, "{\"a\":1}")]);
        assert_eq!(check(&off, &off.clone(), 1000), Ok(()));

        let mut on = off.clone();
        on.histories.insert("e1".into(), vec![event(1, 1000)]);
        on.replies
            .insert("Client(0)".into(), vec![reply(200, "{\"a\":2}")]);
        let v = check(&off, &on, 1000).err().unwrap();
        assert_eq!(v.invariant, Invariant::EvictionInvisible);
        // The reply (at +200ms) differs before the history (+500ms).
        assert!(v.message.contains("Client(0)"), "{}", v.message);
        assert!(v.message.contains("{\"a\":2}"), "{}", v.message);

        on.replies = off.replies.clone();
        let v = check(&off, &on, 1000).err().unwrap();
        assert!(v.message.contains("e1 differs at seq 2"), "{}", v.message);
        assert!(v.message.contains("(no such event)"), "{}", v.message);
        assert_eq!(v.execution.as_deref(), Some("e1"));
    }
}
