//! The node loop (`orbit_core::node`): group commits, the commits-in-flight
//! limit, one result per batch, the `Conflict` split and re-commit of the
//! batches it did not name, `Ambiguous` turned into loads, load retries
//! with a doubling delay, and ticks — inputs over time, and the I/O the
//! node asks for.

#![allow(clippy::unwrap_used)]

use orbit_core::engine::{CountingIds, DefinitionRecord, Request, Start, StoredExecution};
use orbit_core::history::{EventKind, Millis};
use orbit_core::node::{Fetched, GroupCommit, Io, Node, NodeConfig, NodeInput};
use orbit_core::store::StorageError;
use orbit_core::{Config, Engine, Source};
use serde_json::json;
use std::collections::BTreeMap;
use std::sync::Arc;

const T0: Millis = 1_700_000_000_000;

const NAP: &str = r#"
workflow Nap version "1.0.0" {
    input { }
    step rest { sleep 60s }
}
"#;

/// A node and what it asked for so far.
struct Harness {
    node: Node,
    now: Millis,
    commits: Vec<Arc<GroupCommit>>,
    loads: Vec<(u64, Vec<String>)>,
    replies: BTreeMap<u64, u16>,
    wake: Option<Millis>,
    next_id: u64,
    /// Fetches answered `Unavailable` while true (the store is down).
    store_down: bool,
    /// Fetches asked for so far.
    fetches: u64,
}

impl Harness {
    fn new(commits_in_flight: usize) -> Harness {
        let engine = Engine::new(Config::default(), Box::new(CountingIds::new(1)));
        let node = Node::new(
            engine,
            NodeConfig {
                commits_in_flight,
                ..NodeConfig::default()
            },
        );
        let mut h = Harness {
            node,
            now: T0,
            commits: Vec::new(),
            loads: Vec::new(),
            replies: BTreeMap::new(),
            wake: None,
            next_id: 1,
            store_down: false,
            fetches: 0,
        };
        h.deploy();
        h
    }

    fn feed(&mut self, input: NodeInput) {
        let mut fetches = Vec::new();
        for io in self.node.handle(self.now, input) {
            match io {
                Io::Commit(c) => self.commits.push(c),
                Io::Load { id, executions } => self.loads.push((id, executions)),
                Io::Fetch {
                    id,
                    executions,
                    idempotency,
                } => fetches.push((id, executions, idempotency)),
                Io::Reply { request, response } => {
                    self.replies.insert(request, response.status);
                }
                Io::WakeAt(t) => self.wake = Some(t),
                Io::Committed { .. } => {}
                other => panic!("a one-server node asked for {other:?}"),
            }
        }
        // What the engine does not hold is not in this harness's store
        // either: every fetch finds nothing.
        for (load, executions, keys) in fetches {
            self.fetches += 1;
            if self.store_down {
                let result = Err(StorageError::Unavailable("database down".into()));
                self.feed(NodeInput::Fetched { load, result });
                continue;
            }
            let result = Ok(Fetched {
                executions: executions
                    .into_iter()
                    .map(|execution_id| StoredExecution {
                        execution_id,
                        events: Vec::new(),
                    })
                    .collect(),
                idempotency: keys.into_iter().map(|k| (k, None)).collect(),
            });
            self.feed(NodeInput::Fetched { load, result });
        }
    }

    /// The oldest commit not answered yet.
    fn take_commit(&mut self) -> Arc<GroupCommit> {
        assert!(!self.commits.is_empty(), "no commit was asked for");
        self.commits.remove(0)
    }

    fn answer(&mut self, commit: &GroupCommit, result: Result<(), StorageError>) {
        self.feed(NodeInput::Committed {
            commit: commit.id,
            result,
        });
    }

    /// Answers every commit asked for with `Ok`, until none is left.
    fn settle(&mut self) {
        while !self.commits.is_empty() {
            let c = self.take_commit();
            self.answer(&c, Ok(()));
        }
    }

    fn deploy(&mut self) {
        let compiled = orbit_core::compile(
            &[Source {
                name: "nap.orbit".into(),
                text: NAP.into(),
            }],
            &|_, _| None,
        );
        let definitions = compiled
            .definitions
            .into_iter()
            .map(|d| DefinitionRecord {
                workflow: d.workflow,
                definition_hash: d.hash,
                source: NAP.into(),
                registered_at: 0,
            })
            .collect();
        self.feed(NodeInput::Request {
            id: 0,
            request: Request::Deploy {
                definitions,
                idempotency: None,
            },
        });
        let c = self.take_commit();
        self.answer(&c, Ok(()));
        assert_eq!(self.replies.remove(&0), Some(200));
    }

    /// Sends a signal to `id`; returns the request id.
    fn signal(&mut self, id: &str) -> u64 {
        let rid = self.next_id;
        self.next_id += 1;
        self.feed(NodeInput::Request {
            id: rid,
            request: Request::Signal {
                execution_id: id.into(),
                name: "go".into(),
                payload: json!(null),
                idempotency: None,
            },
        });
        rid
    }

    /// Sends a start of `id`; returns the request id.
    fn start(&mut self, id: &str) -> u64 {
        let rid = self.next_id;
        self.next_id += 1;
        self.feed(NodeInput::Request {
            id: rid,
            request: Request::Start(Start {
                workflow: "Nap".into(),
                version: None,
                input: json!({}),
                execution_id: Some(id.into()),
                idempotency: None,
                traceparent: None,
            }),
        });
        rid
    }
}

fn executions(c: &GroupCommit) -> Vec<Vec<&str>> {
    c.batches
        .iter()
        .map(|b| {
            b.executions
                .iter()
                .map(|a| a.execution_id.as_str())
                .collect()
        })
        .collect()
}

#[test]
fn batches_wait_for_a_free_slot_and_go_out_together() {
    let mut h = Harness::new(1);
    let a = h.start("a");
    assert_eq!(h.commits.len(), 1, "the first start is written at once");
    let b = h.start("b");
    let c = h.start("c");
    assert_eq!(h.commits.len(), 1, "one commit in flight at most");
    let first = h.take_commit();
    assert_eq!(executions(&first), vec![vec!["a"]]);
    h.answer(&first, Ok(()));
    assert_eq!(h.replies.get(&a), Some(&201));
    // The two starts that waited go out together ("a" scheduled its
    // timer in its start's batch: it has nothing more to write).
    let group = h.take_commit();
    assert_eq!(executions(&group), vec![vec!["b"], vec!["c"]]);
    assert!(!h.replies.contains_key(&b), "no reply before the commit");
    h.answer(&group, Ok(()));
    assert_eq!(
        (h.replies.get(&b), h.replies.get(&c)),
        (Some(&201), Some(&201))
    );
    h.settle();
    assert!(h.node.is_idle());
    assert_eq!(h.node.stats().largest_group, 2);
}

#[test]
fn two_commits_fly_at_once_when_allowed() {
    let mut h = Harness::new(2);
    h.start("a");
    h.start("b");
    h.start("c");
    assert_eq!(h.commits.len(), 2);
    assert_eq!(h.node.commits_in_flight(), 2);
    let first = h.take_commit();
    h.answer(&first, Ok(()));
    // The slot freed: "c" goes out.
    assert_eq!(h.commits.len(), 2);
    assert_eq!(executions(&h.commits[1]), vec![vec!["c"]]);
}

#[test]
fn a_commit_reported_written_frees_its_slot_but_answers_only_when_durable() {
    let mut h = Harness::new(1);
    let a = h.start("a");
    let b = h.start("b");
    let first = h.take_commit();
    assert!(h.commits.is_empty(), "one commit being written at most");
    h.feed(NodeInput::Written { commit: first.id });
    // Written, not yet durable: the next commit goes out, and "a" waits.
    let second = h.take_commit();
    assert_eq!(executions(&second), vec![vec!["b"]]);
    assert!(!h.replies.contains_key(&a), "no reply before it is durable");
    assert_eq!(h.node.commits_in_flight(), 2);
    // A third start waits for the second to be written, not for the first
    // to be durable.
    let c = h.start("c");
    assert!(h.commits.is_empty());
    h.answer(&first, Ok(()));
    assert_eq!(h.replies.get(&a), Some(&201));
    assert!(h.commits.is_empty(), "the second is still being written");
    // A late or repeated report for a commit already answered changes
    // nothing.
    h.feed(NodeInput::Written { commit: first.id });
    assert!(h.commits.is_empty());
    h.feed(NodeInput::Written { commit: second.id });
    let third = h.take_commit();
    assert_eq!(executions(&third), vec![vec!["c"]]);
    h.answer(&second, Ok(()));
    assert_eq!(h.replies.get(&b), Some(&201));
    assert!(!h.replies.contains_key(&c));
    h.answer(&third, Ok(()));
    assert_eq!(h.replies.get(&c), Some(&201));
    h.settle();
    assert!(h.node.is_idle());
}

#[test]
fn a_conflict_fails_the_batches_it_names_and_recommits_the_others() {
    let mut h = Harness::new(1);
    h.start("a");
    let b = h.start("b");
    let c = h.start("c");
    let d = h.start("d");
    let first = h.take_commit();
    h.answer(&first, Ok(()));
    let group = h.take_commit();
    assert_eq!(executions(&group), vec![vec!["b"], vec!["c"], vec!["d"]]);
    h.answer(
        &group,
        Err(StorageError::Conflict {
            fenced: vec![],
            stale: vec!["c".into()],
        }),
    );
    // The others are written again, in order, and answered only after that
    // write. "c" was created without a read of the store, which turned out
    // to hold it: its start waits for "c" to be read back and runs again on
    // what the store holds.
    assert!(!h.replies.contains_key(&c), "not failed: run again");
    assert_eq!(h.loads.len(), 1);
    assert_eq!(h.loads[0].1, vec!["c".to_string()]);
    assert!(!h.replies.contains_key(&b) && !h.replies.contains_key(&d));
    let again = h.take_commit();
    assert_eq!(executions(&again), vec![vec!["b"], vec!["d"]]);
    let ids: Vec<u64> = again.batches.iter().map(|x| x.id).collect();
    let before: Vec<u64> = [0, 2].iter().map(|i| group.batches[*i].id).collect();
    assert_eq!(ids, before, "the same batches, not new ones");
    h.answer(&again, Ok(()));
    // This harness's store holds nothing: read back, "c" is absent, and
    // its start creates it.
    let (load, _) = h.loads.remove(0);
    h.feed(NodeInput::Loaded {
        load,
        result: Ok(vec![StoredExecution {
            execution_id: "c".into(),
            events: Vec::new(),
        }]),
    });
    h.settle();
    assert_eq!(h.replies.get(&c), Some(&201));
    assert_eq!(
        (h.replies.get(&b), h.replies.get(&d)),
        (Some(&201), Some(&201))
    );
    let s = h.node.stats();
    assert_eq!((s.conflict.commits, s.conflict.of_many_batches), (1, 1));
    assert_eq!(s.recommitted, 2);
}

#[test]
fn an_ambiguous_group_commit_reloads_every_execution_in_it() {
    let mut h = Harness::new(1);
    h.start("a");
    let b = h.start("b");
    let c = h.start("c");
    // A second batch of "a", drafted once its first is durable, goes out
    // in the same group as "b" and "c".
    h.signal("a");
    let first = h.take_commit();
    h.answer(&first, Ok(()));
    let group = h.take_commit();
    h.answer(
        &group,
        Err(StorageError::Ambiguous("lost during COMMIT".into())),
    );
    assert_eq!(h.loads.len(), 3, "one load per batch: {:?}", h.loads);
    let named: Vec<&str> = h
        .loads
        .iter()
        .flat_map(|(_, e)| e.iter().map(String::as_str))
        .collect();
    assert_eq!(named, vec!["b", "c", "a"]);
    // The store holds "b" (it landed) but not "c"; "a" stays as it was.
    let landed = group.batches[0].executions[0].events.clone();
    let (lb, lc, la) = (h.loads[0].0, h.loads[1].0, h.loads[2].0);
    h.feed(NodeInput::Loaded {
        load: la,
        result: Ok(vec![StoredExecution {
            execution_id: "a".into(),
            events: first.batches[0].executions[0].events.to_vec(),
        }]),
    });
    h.feed(NodeInput::Loaded {
        load: lb,
        result: Ok(vec![StoredExecution {
            execution_id: "b".into(),
            events: landed.to_vec(),
        }]),
    });
    h.feed(NodeInput::Loaded {
        load: lc,
        result: Ok(vec![StoredExecution {
            execution_id: "c".into(),
            events: vec![],
        }]),
    });
    assert_eq!(h.replies.get(&b), Some(&201));
    assert_eq!(h.replies.get(&c), Some(&503));
    assert_eq!(h.node.stats().ambiguous.of_many_batches, 1);
}

#[test]
fn a_failed_load_is_tried_again_with_a_doubling_delay() {
    let mut h = Harness::new(1);
    let a = h.start("a");
    let first = h.take_commit();
    h.answer(&first, Err(StorageError::Ambiguous("lost".into())));
    let (id, names) = h.loads.remove(0);
    assert_eq!(names, vec!["a".to_owned()]);
    let fail = || Err(StorageError::Unavailable("down".into()));
    h.feed(NodeInput::Loaded {
        load: id,
        result: fail(),
    });
    assert_eq!(h.wake, Some(T0 + 50), "first retry after 50 ms");
    h.now = T0 + 49;
    h.feed(NodeInput::Time);
    assert!(h.loads.is_empty(), "not before its time");
    h.now = T0 + 50;
    h.feed(NodeInput::Time);
    assert_eq!(h.loads.len(), 1);
    let (again, _) = h.loads.remove(0);
    assert_eq!(again, id);
    h.feed(NodeInput::Loaded {
        load: id,
        result: fail(),
    });
    // Then after 100 ms (the periodic tick at +100 does not try it).
    h.now = T0 + 100;
    h.feed(NodeInput::Time);
    assert!(h.loads.is_empty(), "tried again too soon");
    assert_eq!(h.wake, Some(T0 + 50 + 100));
    h.now = T0 + 150;
    h.feed(NodeInput::Time);
    let (id, _) = h.loads.remove(0);
    h.feed(NodeInput::Loaded {
        load: id,
        result: Ok(vec![StoredExecution {
            execution_id: "a".into(),
            events: first.batches[0].executions[0].events.to_vec(),
        }]),
    });
    assert_eq!(h.replies.get(&a), Some(&201));
    assert_eq!(h.node.stats().load_retries, 2);
}

#[test]
fn time_ticks_the_engine_periodically_and_at_its_wake_ups() {
    let mut h = Harness::new(1);
    // Periodic: a tick period (100 ms) after the first input.
    assert_eq!(h.wake, Some(T0 + 100));
    h.start("a");
    h.settle();
    let ticks = h.node.stats().ticks;
    h.now = T0 + 100;
    h.feed(NodeInput::Time);
    assert_eq!(h.node.stats().ticks, ticks + 1);
    assert_eq!(h.wake, Some(T0 + 200));
    // An extra call before anything is due ticks nothing.
    h.now = T0 + 150;
    h.feed(NodeInput::Time);
    assert_eq!(h.node.stats().ticks, ticks + 1);
    // The nap of 60 s ends on a tick: its timer fires and is written.
    h.now = T0 + 61_000;
    h.feed(NodeInput::Time);
    let fired = h.take_commit();
    let events = &fired.batches[0].executions[0].events;
    assert!(
        events
            .iter()
            .any(|e| matches!(e.kind, EventKind::TimerFired { .. })),
        "{events:?}"
    );
}

#[test]
fn a_clock_that_steps_back_still_gets_ticks() {
    let mut h = Harness::new(1);
    h.now = T0 + 100;
    h.feed(NodeInput::Time);
    assert_eq!(h.wake, Some(T0 + 200));
    h.now = T0 - 10_000;
    h.feed(NodeInput::Time);
    assert_eq!(
        h.wake,
        Some(T0 - 10_000 + 100),
        "ticks resume a period later"
    );
}

#[test]
fn a_fetch_the_store_cannot_answer_fails_its_request_and_is_tried_again() {
    let mut h = Harness::new(1);
    h.store_down = true;
    // A signal naming an execution the engine does not hold reads the
    // store first.
    let rid = h.signal("outage-1");
    assert_eq!(h.fetches, 1);
    assert_eq!(h.replies.remove(&rid), Some(503), "answered at once");
    assert!(h.commits.is_empty(), "nothing written");
    // The read is tried again after the backoff; the store is back, and the
    // retry only warms memory: the same signal now learns the execution
    // does not exist.
    h.store_down = false;
    h.now += 50;
    h.feed(NodeInput::Time);
    assert_eq!(h.fetches, 2, "the read was tried again");
    let rid = h.signal("outage-1");
    assert_eq!(h.replies.remove(&rid), Some(404));
}

#[test]
fn a_timer_that_fires_early_is_asked_for_again() {
    let mut h = Harness::new(1);
    assert_eq!(h.wake, Some(T0 + 100));
    // The driver's timer fires a millisecond before the node's clock says
    // the time came (a wall clock slewed slower than the timer's): nothing
    // is due, and the same time is asked for again.
    h.wake = None;
    h.now = T0 + 99;
    let ticks = h.node.stats().ticks;
    h.feed(NodeInput::Time);
    assert_eq!(h.node.stats().ticks, ticks, "nothing was due");
    assert_eq!(h.wake, Some(T0 + 100), "the time is asked for again");
    h.now = T0 + 100;
    h.feed(NodeInput::Time);
    assert_eq!(h.node.stats().ticks, ticks + 1);
}
