//! Shared cluster mode in the engine (seed `003_…`, "Shared mode"): the
//! owner writes its queue rows with its events, polls claim from the
//! database, dispatch and result entries of its inbox apply in order and
//! are deleted with what they cause, and a member that does not own an
//! execution sends commands to the owner's inbox.

#![allow(clippy::unwrap_used)]

mod engine_support;

use engine_support::*;
use orbit_core::engine::{Effect, Outcome, Request, StoredExecution};
use orbit_core::store::shared::{Claimed, Dispatch, Entry, Kind, Sent};
use orbit_core::store::{Fence, QueueOp};
use orbit_core::{Config, Input};
use serde_json::json;

const PLAIN: &str = r#"
task "demo.work" version "1.0.0" {
    input { n: Int }
    output { v: Int }
}

workflow Plain version "1.0.0" {
    input { n: Int }
    step work {
        worker "demo.work"
        with { n: input.n }
    }
}
"#;

/// A member named `node` with the workflow deployed.
fn member(node: &str) -> World {
    let mut w = World::new(Config {
        node_id: Some(node.into()),
        ..Config::default()
    });
    w.at(0);
    assert_eq!(w.deploy(PLAIN).status, 200);
    w
}

fn entry(id: i64, execution: &str, kind: Kind, body: serde_json::Value) -> Entry {
    Entry {
        id,
        execution_id: execution.into(),
        kind,
        body,
        created_at: T0,
    }
}

/// The inbox outcomes reported so far, in order.
fn inbox_done(w: &World) -> Vec<(i64, bool)> {
    w.shared
        .iter()
        .filter_map(|e| match e {
            Effect::InboxDone { entry, applied } => Some((*entry, *applied)),
            _ => None,
        })
        .collect()
}

#[test]
fn the_member_that_starts_an_execution_owns_it_and_queues_its_task_in_the_database() {
    let mut w = member("a");
    assert_eq!(w.start("Plain", "x", json!({"n": 1})).status, 201);
    w.advance(100);
    // Every append carries the owner's epoch: 1 for an execution it made.
    assert!(w
        .written
        .iter()
        .flat_map(|b| &b.executions)
        .all(|a| a.epoch == Some(1)));
    // The task is queued in the database with the events that made it due.
    let queued: Vec<&QueueOp> = w.written.iter().flat_map(|b| &b.queue).collect();
    match queued.as_slice() {
        [QueueOp::Enqueue {
            execution_id,
            unit,
            task,
            body,
            ..
        }] => {
            assert_eq!((execution_id.as_str(), unit.as_str()), ("x", "work"));
            assert_eq!(task, "demo.work");
            assert_eq!(body["input"], json!({"n": 1}));
            assert_eq!(body["idempotency_key"], "x/work");
        }
        other => panic!("queue rows {other:?}"),
    }
}

#[test]
fn a_poll_claims_from_the_database_and_hands_out_what_the_claim_returns() {
    let mut w = member("b");
    let session = w.register("w1", &["demo.*"]);
    let poll = w.send(Request::Poll {
        session_id: session.clone(),
        max_tasks: Some(1),
        wait_ms: 0,
        held: vec![],
    });
    let (claim, token, tasks) = match w.shared.last() {
        Some(Effect::Claim { claim, poll }) => {
            assert_eq!(poll.tokens.len(), 1, "a poll for one task claims one row");
            (*claim, poll.tokens[0].clone(), poll.tasks.clone())
        }
        other => panic!("expected a claim, got {other:?}"),
    };
    assert_eq!(tasks, vec!["demo.work".to_string()]);
    w.feed(Input::Claimed {
        claim,
        result: Ok(vec![claimed_task(&token)]),
    });
    let reply = w.replies.get(&poll).expect("the poll is answered");
    assert_eq!(reply.body["tasks"][0]["token"], token);
    assert_eq!(reply.body["tasks"][0]["execution_id"], "x");
    // Its result goes to the owner's inbox, and is accepted once stored.
    let result = w.send(Request::Result {
        token: token.clone(),
        outcome: Outcome::Output(json!({"v": 2})),
        patterns: None,
    });
    let (send, kind, body) = match w.shared.last() {
        Some(Effect::Send {
            send,
            execution_id,
            kind,
            body,
        }) => {
            assert_eq!(execution_id, "x");
            (*send, *kind, body.clone())
        }
        other => panic!("expected a send, got {other:?}"),
    };
    assert_eq!(kind, Kind::Result);
    assert_eq!(body, json!({"token": token, "output": {"v": 2}}));
    assert!(!w.replies.contains_key(&result), "answered before stored");
    w.feed(Input::Sent {
        send,
        result: Ok(Sent::Queued {
            id: 8,
            owner: Fence {
                node_id: "a".into(),
                epoch: 1,
            },
        }),
    });
    assert_eq!(w.replies[&result].body, json!({"accepted": true}));
}

#[test]
fn a_dispatch_and_the_result_behind_it_apply_in_order_each_deleted_with_its_events() {
    let mut w = member("a");
    assert_eq!(w.start("Plain", "x", json!({"n": 1})).status, 201);
    w.advance(100);
    let dispatch = Dispatch {
        unit: "work".into(),
        task: "demo.work".into(),
        token: "t-1".into(),
        session: "s-elsewhere".into(),
        node_id: "b".into(),
        worker_id: "w1".into(),
    };
    let before = w.written.len();
    w.feed(Input::Inbox {
        entries: vec![
            entry(
                1,
                "x",
                Kind::Dispatch,
                serde_json::to_value(&dispatch).unwrap(),
            ),
            entry(
                2,
                "x",
                Kind::Result,
                json!({"token": "t-1", "output": {"v": 2}}),
            ),
        ],
    });
    w.advance(100);
    assert_logs(
        &w.logs("x"),
        "
        + 0ms #1 WorkflowCreated
        + 0ms #2 WorkflowStarted
        + 0ms #3 StepScheduled step=work attempt=1
        + 100ms #4 StepDispatched step=work attempt=1 worker_id=w1
        + 100ms #5 StepSucceeded step=work attempt=1
        + 100ms #6 WorkflowCompleted
        ",
    );
    // Entry 1 went with StepDispatched, entry 2 with StepSucceeded.
    let consumed: Vec<(Vec<i64>, Vec<String>)> = w.written[before..]
        .iter()
        .map(|b| {
            let entries = b.consumed.iter().map(|c| c.entry).collect();
            let kinds = b
                .executions
                .iter()
                .flat_map(|a| a.events.iter())
                .map(|e| {
                    format!("{:?}", e.kind)
                        .split([' ', '{'])
                        .next()
                        .unwrap()
                        .to_owned()
                })
                .collect();
            (entries, kinds)
        })
        .collect();
    assert_eq!(consumed[0].0, vec![1]);
    assert_eq!(consumed[0].1, vec!["StepDispatched"]);
    assert_eq!(consumed[1].0, vec![2]);
    assert!(consumed[1].1.contains(&"StepSucceeded".to_string()));
    assert_eq!(inbox_done(&w), vec![(1, true), (2, true)]);
    // The queue row left with the dispatch.
    assert!(w.written[before].queue.iter().any(
        |op| matches!(op, QueueOp::Remove { execution_id, unit } if execution_id == "x" && unit == "work")
    ));
}

#[test]
fn an_entry_that_causes_nothing_is_deleted_on_its_own() {
    let mut w = member("a");
    assert_eq!(w.start("Plain", "x", json!({"n": 1})).status, 201);
    w.advance(100);
    let before = w.written.len();
    // A result for a token this execution never handed out.
    w.feed(Input::Inbox {
        entries: vec![entry(
            5,
            "x",
            Kind::Result,
            json!({"token": "unknown", "output": {"v": 2}}),
        )],
    });
    let batch = &w.written[before];
    assert!(batch.executions.is_empty(), "{batch:?}");
    assert_eq!(batch.consumed.len(), 1);
    assert_eq!(batch.consumed[0].entry, 5);
    assert_eq!(batch.consumed[0].epoch, 1);
    assert_eq!(inbox_done(&w), vec![(5, true)]);
}

#[test]
fn a_signal_for_an_execution_held_nowhere_here_goes_to_its_owners_inbox() {
    let mut w = member("b");
    let signal = w.send(Request::Signal {
        execution_id: "x".into(),
        name: "approve".into(),
        payload: json!({"ok": true}),
        idempotency: None,
    });
    let send = match w.shared.last() {
        Some(Effect::Send {
            send, kind, body, ..
        }) => {
            assert_eq!(*kind, Kind::Signal);
            assert_eq!(*body, json!({"name": "approve", "payload": {"ok": true}}));
            *send
        }
        other => panic!("expected a send, got {other:?}"),
    };
    w.feed(Input::Sent {
        send,
        result: Ok(Sent::Queued {
            id: 3,
            owner: Fence {
                node_id: "a".into(),
                epoch: 2,
            },
        }),
    });
    // Answered with the seq the owner recorded it at, once it did.
    let watch = match w.shared.last() {
        Some(Effect::FindSignal {
            watch,
            owner,
            entry,
            execution_id,
            ..
        }) => {
            assert_eq!(
                (owner.as_str(), *entry, execution_id.as_str()),
                ("a", 3, "x")
            );
            *watch
        }
        other => panic!("expected a look for the signal, got {other:?}"),
    };
    assert!(!w.replies.contains_key(&signal));
    w.feed(Input::SignalFound { watch, seq: None });
    assert!(!w.replies.contains_key(&signal), "not recorded yet");
    w.advance(200);
    let watch = match w.shared.last() {
        Some(Effect::FindSignal { watch, .. }) => *watch,
        other => panic!("expected another look, got {other:?}"),
    };
    w.feed(Input::SignalFound {
        watch,
        seq: Some(7),
    });
    assert_eq!(w.replies[&signal].body, json!({"seq": 7}));
}

#[test]
fn a_forwarded_signal_its_owner_does_not_record_within_ten_seconds_answers_seq_null() {
    let mut w = member("b");
    let signal = w.send(Request::Signal {
        execution_id: "x".into(),
        name: "approve".into(),
        payload: json!(null),
        idempotency: None,
    });
    let send = match w.shared.last() {
        Some(Effect::Send { send, .. }) => *send,
        other => panic!("expected a send, got {other:?}"),
    };
    w.feed(Input::Sent {
        send,
        result: Ok(Sent::Queued {
            id: 3,
            owner: Fence {
                node_id: "a".into(),
                epoch: 2,
            },
        }),
    });
    // Every look finds it still waiting in the owner's inbox.
    for _ in 0..120 {
        let looks: Vec<u64> = w
            .shared
            .drain(..)
            .filter_map(|e| match e {
                Effect::FindSignal { watch, .. } => Some(watch),
                _ => None,
            })
            .collect();
        for watch in looks {
            w.feed(Input::SignalFound { watch, seq: None });
        }
        if w.replies.contains_key(&signal) {
            break;
        }
        w.advance(100);
    }
    assert_eq!(w.replies[&signal].body, json!({"seq": null}));
    assert!(w.now >= T0 + 10_000, "answered after {} ms", w.now - T0);
}

#[test]
fn an_adopted_execution_writes_with_its_new_epoch() {
    let mut w = member("a");
    assert_eq!(w.start("Plain", "x", json!({"n": 1})).status, 201);
    w.advance(100);
    let history = w.store.histories["x"].clone();
    // Taken back at epoch 3 (after an outage): the copy in memory is
    // replaced, and every later write carries the new epoch.
    w.feed(Input::Adopt {
        executions: vec![(
            StoredExecution {
                execution_id: "x".into(),
                events: history,
            },
            3,
        )],
    });
    let before = w.written.len();
    let r = w.call(Request::Cancel {
        execution_id: "x".into(),
        reason: None,
        idempotency: None,
    });
    assert_eq!(r.status, 202);
    let epochs: Vec<Option<u64>> = w.written[before..]
        .iter()
        .flat_map(|b| &b.executions)
        .map(|a| a.epoch)
        .collect();
    assert!(!epochs.is_empty());
    assert!(epochs.iter().all(|e| *e == Some(3)), "{epochs:?}");
}

#[test]
fn a_fenced_write_gives_the_execution_up() {
    let mut w = member("a");
    assert_eq!(w.start("Plain", "x", json!({"n": 1})).status, 201);
    w.advance(100);
    assert!(w.engine.projection("x").is_some());
    w.mode = Mode::Fenced;
    let r = w.call(Request::Signal {
        execution_id: "x".into(),
        name: "late".into(),
        payload: json!(null),
        idempotency: None,
    });
    assert_eq!(r.status, 503);
    assert!(r.body["error"]["message"]
        .as_str()
        .is_some_and(|m| m.starts_with("fenced:")));
    assert!(
        w.engine.projection("x").is_none(),
        "still held after fenced"
    );
}

#[test]
fn before_its_reclaim_a_member_cannot_judge_an_unknown_token_and_says_so() {
    // A restarted member: its own executions are not held again yet.
    let mut w = member("a");
    let session = w.register("w1", &["demo.*"]);
    let result = Request::Result {
        token: "t-9".into(),
        outcome: Outcome::Output(json!({"v": 2})),
        patterns: None,
    };
    // Perhaps a task of one of them: the worker reports it again later.
    let r = w.call(result.clone());
    assert_eq!(r.status, 503);
    assert_eq!(r.body["error"]["code"], "NOT_READY");
    // And the heartbeat does not cancel it.
    assert!(w.heartbeat(&session, &["t-9"]).is_empty());
    // Once the reclaim is over, an unknown token is unknown for good.
    w.feed(Input::Reclaimed);
    let r = w.call(result);
    assert_eq!(r.status, 200);
    assert_eq!(
        r.body["reason"],
        "unknown token (execution finished or token invalid)"
    );
    assert_eq!(w.heartbeat(&session, &["t-9"]), vec!["t-9".to_string()]);
    // A drop opens the window again, until the next reclaim.
    w.feed(Input::DropOwned {
        reason: "fenced: out of touch".into(),
    });
    assert!(w.heartbeat(&session, &["t-8"]).is_empty());
}

/// Member `a`, its reclaim done, holding `x` (a `Plain` execution) and a
/// session of worker `w1`.
fn running_x() -> (World, String) {
    let mut w = member("a");
    w.feed(Input::Reclaimed);
    assert_eq!(w.start("Plain", "x", json!({"n": 1})).status, 201);
    w.advance(100);
    let session = w.register("w1", &["demo.*"]);
    (w, session)
}

/// Feeds member `w` the inbox entry of `x`'s `work` dispatched as `t-1` to
/// worker `w1`'s session `session` on member `node_id`.
fn dispatch_entry(w: &mut World, session: &str, node_id: &str) {
    let dispatch = Dispatch {
        unit: "work".into(),
        task: "demo.work".into(),
        token: "t-1".into(),
        session: session.into(),
        node_id: node_id.into(),
        worker_id: "w1".into(),
    };
    w.feed(Input::Inbox {
        entries: vec![entry(
            1,
            "x",
            Kind::Dispatch,
            serde_json::to_value(&dispatch).unwrap(),
        )],
    });
}

#[test]
fn a_listing_of_a_token_whose_result_was_refused_does_not_keep_the_delivery() {
    let (mut w, session) = running_x();
    // The worker's result arrives before this member holds the delivery
    // (the execution was a dead member's, taken over just after): refused,
    // and the worker drops the task.
    assert_eq!(
        w.succeed("t-1", json!({"v": 2}))["reason"],
        "unknown token (execution finished or token invalid)"
    );
    // The delivery becomes known here: handed out by another member to a
    // session there.
    dispatch_entry(&mut w, "s-elsewhere", "b");
    w.advance(100);
    // A heartbeat sent before the refusal reached the worker still lists
    // it: it does not vouch for the task.
    w.heartbeat(&session, &["t-1"]);
    // The worker's session stays alive; the session the task was handed to
    // falls silent, and the attempt is redelivered.
    for _ in 0..4 {
        w.advance(10_000);
        w.heartbeat(&session, &[]);
    }
    assert!(
        w.logs("x")
            .contains("StepAttemptUncertain step=work attempt=1"),
        "{}",
        w.logs("x")
    );
}

#[test]
fn a_delivery_its_live_session_stops_listing_is_redelivered() {
    let (mut w, session) = running_x();
    // Handed out by another member to a session there; this member's own
    // session then lists it (a poll sent before the worker heard that its
    // result was refused elsewhere) and the worker drops it.
    dispatch_entry(&mut w, "s-elsewhere", "b");
    w.heartbeat(&session, &["t-1"]);
    // The session goes on calling without it: after a session timeout the
    // attempt is uncertain, and redelivered.
    for _ in 0..4 {
        w.advance(10_000);
        w.heartbeat(&session, &[]);
    }
    assert!(
        w.logs("x")
            .contains("reason=worker `w1` no longer lists the task"),
        "{}",
        w.logs("x")
    );
}

#[test]
fn a_delivery_its_session_keeps_listing_stays() {
    let (mut w, session) = running_x();
    dispatch_entry(&mut w, &session, "a");
    // A slow task: the worker heartbeats every third of the timeout.
    for _ in 0..9 {
        w.advance(10_000);
        w.heartbeat(&session, &["t-1"]);
    }
    assert!(
        !w.logs("x").contains("StepAttemptUncertain"),
        "{}",
        w.logs("x")
    );
}

/// The task a claim returned for `x`'s `work`, as token `token`.
fn claimed_task(token: &str) -> Claimed {
    Claimed {
        execution_id: "x".into(),
        unit: "work".into(),
        task: "demo.work".into(),
        token: token.into(),
        body: json!({
            "token": "", "execution_id": "x", "workflow": "Plain",
            "workflow_version": "1.0.0", "step_id": "work", "task_name": "demo.work",
            "contract_version": "1.0.0", "input": {"n": 1}, "idempotency_key": "x/work",
            "attempt": 1, "redelivery": false, "traceparent": ""
        }),
        enqueued_at: T0,
        entry: 7,
        owner: Fence {
            node_id: "a".into(),
            epoch: 1,
        },
    }
}

/// The last claim asked for: its id and the tokens it would hand out.
fn last_claim(w: &World) -> (u64, Vec<String>) {
    match w
        .shared
        .iter()
        .rev()
        .find(|e| matches!(e, Effect::Claim { .. }))
    {
        Some(Effect::Claim { claim, poll }) => (*claim, poll.tokens.clone()),
        _ => panic!("no claim was asked for"),
    }
}

#[test]
fn a_task_claimed_for_a_poll_that_ended_meanwhile_is_reported_lost_naming_its_worker() {
    let mut w = member("b");
    let session = w.register("w1", &["demo.*"]);
    let poll = w.send(Request::Poll {
        session_id: session.clone(),
        max_tasks: Some(1),
        wait_ms: 1_000,
        held: vec![],
    });
    // Nothing queued yet: the poll parks.
    let (first, _) = last_claim(&w);
    w.feed(Input::Claimed {
        claim: first,
        result: Ok(vec![]),
    });
    // A parked poll claims again at a tick; the worker unregisters while
    // that claim is in flight, which ends the poll.
    w.advance(500);
    let (again, tokens) = last_claim(&w);
    assert_ne!(again, first, "the parked poll claims again");
    w.send(Request::Unregister {
        session_id: session,
    });
    assert_eq!(w.replies[&poll].body, json!({"tasks": []}));
    // The claim took a task its worker will never get: the owner is told,
    // and the reason names the worker, not the delivery's token.
    w.feed(Input::Claimed {
        claim: again,
        result: Ok(vec![claimed_task(&tokens[0])]),
    });
    w.advance(500);
    let lost: Vec<&serde_json::Value> = w
        .shared
        .iter()
        .filter_map(|e| match e {
            Effect::Send {
                kind: Kind::Result,
                body,
                ..
            } => Some(body),
            _ => None,
        })
        .collect();
    assert_eq!(
        lost,
        vec![&json!({"token": tokens[0], "lost": "worker `w1` did not receive the task"})]
    );
}

#[test]
fn a_start_waits_for_the_create_of_a_copy_dropped_while_it_was_written() {
    let mut w = member("a");
    w.feed(Input::Reclaimed);
    let start = || {
        Request::Start(orbit_core::engine::Start {
            workflow: "Plain".into(),
            version: None,
            input: json!({"n": 1}),
            execution_id: Some("x".into()),
            idempotency: None,
            traceparent: None,
        })
    };
    w.mode = Mode::Hold;
    let first = w.send(start());
    assert_eq!(w.held.len(), 1, "the create is being written");
    // Out of touch with the database meanwhile: everything held is dropped.
    w.feed(Input::DropOwned {
        reason: "out of touch".into(),
    });
    // The client retries: no second create of `x` while the first is in
    // flight.
    let again = w.send(start());
    assert_eq!(w.held.len(), 1, "{:?}", w.held);
    // The first lands; the retry's create is then refused (the id exists)
    // and it runs again on what the store holds.
    w.mode = Mode::Ok;
    w.release(Mode::Ok);
    assert_eq!(w.replies[&first].status, 201);
    assert_eq!(
        w.replies[&again].body,
        json!({"execution_id": "x", "created": false})
    );
}

#[test]
fn a_copy_taken_back_writes_nothing_until_the_old_copys_batch_is_back() {
    let mut w = member("a");
    assert_eq!(w.start("Plain", "x", json!({"n": 1})).status, 201);
    w.advance(100);
    let history = w.store.histories["x"].clone();
    // A cancel is being written at epoch 1 ...
    w.mode = Mode::Hold;
    let cancel = w.send(Request::Cancel {
        execution_id: "x".into(),
        reason: None,
        idempotency: None,
    });
    assert_eq!(w.held.len(), 1);
    // ... when the member takes `x` back at epoch 3 (seed 0x27f6d297).
    w.feed(Input::Adopt {
        executions: vec![(
            StoredExecution {
                execution_id: "x".into(),
                events: history,
            },
            3,
        )],
    });
    // A signal for the adopted copy waits: no second batch of `x` is in
    // flight beside the first.
    let signal = w.send(Request::Signal {
        execution_id: "x".into(),
        name: "go".into(),
        payload: json!(null),
        idempotency: None,
    });
    assert_eq!(w.held.len(), 1, "{:?}", w.held);
    // The old batch is refused (its epoch is gone); the adopted copy
    // stands, and the signal is then written at the new epoch.
    w.release(Mode::Fenced);
    assert_eq!(w.replies[&cancel].status, 503);
    assert!(
        w.engine.projection("x").is_some(),
        "the adopted copy stands"
    );
    assert_eq!(w.held.len(), 1);
    assert!(w.held[0].executions.iter().all(|a| a.epoch == Some(3)));
    w.mode = Mode::Ok;
    w.release(Mode::Ok);
    assert_eq!(w.replies[&signal].status, 200);
}
