//! Finished executions leave the engine's memory, and commands naming them
//! keep their exact answers: the engine loads what it needs from the store
//! (`Effect::Load`) and parks the request meanwhile. Every world here keeps
//! no recent finished execution (`finished_cache: 0`), so each command on a
//! finished one goes through a load.

#![allow(clippy::unwrap_used)]

mod engine_support;

use engine_support::*;
use orbit_core::engine::{IdempotencyScope, Outcome, Start};
use orbit_core::{Config, Request};
use serde_json::json;

const PLAIN: &str = r#"
task "demo.work" version "1.0.0" {
    input { n: Int }
    output { n: Int }
}

workflow Plain version "1.0.0" {
    input { n: Int }
    step work { worker "demo.work" with { n: input.n } }
    output { n: work.n }
}

workflow Other version "1.0.0" {
    input { n: Int }
    step work { worker "demo.work" with { n: input.n } }
    output { n: work.n }
}

workflow Parent version "1.0.0" {
    input { n: Int }
    step child { workflow Plain version "1.0.0" with { n: input.n } }
    output { n: child.n }
}
"#;

fn forgetful() -> World {
    let mut w = World::new(Config {
        finished_cache: 0,
        ..Config::default()
    });
    w.deploy(PLAIN);
    w
}

/// Runs `id` of Plain to completion; returns the task it was given.
fn finish(w: &mut World, id: &str) -> orbit_core::engine::Task {
    w.start("Plain", id, json!({"n": 1}));
    let s = w.register("w-1", &["demo.*"]);
    let t = w.take(&s);
    w.at(10);
    assert_eq!(w.succeed(&t.token, json!({"n": 2})), accepted());
    t
}

fn keyed_start(id: Option<&str>, workflow: &str, key: &str, fingerprint: &str) -> Request {
    Request::Start(Start {
        workflow: workflow.into(),
        version: None,
        input: json!({"n": 1}),
        execution_id: id.map(str::to_string),
        idempotency: Some(IdempotencyScope {
            key: key.into(),
            fingerprint: fingerprint.into(),
        }),
        traceparent: None,
    })
}

#[test]
fn a_finished_execution_leaves_memory_once_its_final_batch_commits() {
    let mut w = forgetful();
    finish(&mut w, "f-1");
    assert_eq!(w.status("f-1"), "completed");
    assert!(w.engine.projection("f-1").is_none(), "not in memory");
    assert_eq!(w.engine.executions_in_memory(), 0);
    assert_logs(
        &w.logs("f-1"),
        "
        + 0ms #1 WorkflowCreated
        + 0ms #2 WorkflowStarted
        + 0ms #3 StepScheduled step=work attempt=1
        + 0ms #4 StepDispatched step=work attempt=1 worker_id=w-1
        + 10ms #5 StepSucceeded step=work attempt=1
        + 10ms #6 WorkflowCompleted
        ",
    );
}

#[test]
fn a_worker_session_forgets_the_tokens_of_executions_that_left_memory() {
    let mut w = forgetful();
    let s = w.register("w-1", &["demo.*"]);
    for i in 0..20 {
        let id = format!("t-{i}");
        w.start("Plain", &id, json!({"n": i}));
        let t = w.take(&s);
        assert_eq!(w.engine.tokens_held(), 1, "the one task out");
        assert_eq!(w.succeed(&t.token, json!({"n": i})), accepted());
        assert_eq!(w.status(&id), "completed");
    }
    assert_eq!(w.engine.executions_in_memory(), 0);
    assert_eq!(w.engine.tokens_held(), 0, "nothing kept of 20 deliveries");
}

#[test]
fn a_result_that_overtakes_its_listing_leaves_no_wait_once_the_execution_ends() {
    // Each result arrives before any poll lists its token: the hand-out
    // waits for a listing until its execution ends, and no longer.
    let mut w = World::new(Config::default());
    w.deploy(PLAIN);
    let s = w.register("w-1", &["demo.*"]);
    for i in 0..20 {
        let id = format!("o-{i}");
        w.start("Plain", &id, json!({"n": i}));
        let t = w.take(&s);
        assert_eq!(w.engine.hand_outs_unlisted(), 1, "handed out, not listed");
        assert_eq!(w.succeed(&t.token, json!({"n": i})), accepted());
        assert_eq!(w.status(&id), "completed");
        assert_eq!(w.engine.hand_outs_unlisted(), 0, "{id} ended");
    }
}

#[test]
fn the_recent_finished_executions_stay_up_to_the_cache_size() {
    let mut w = World::new(Config {
        finished_cache: 2,
        ..Config::default()
    });
    w.deploy(PLAIN);
    for id in ["r-1", "r-2", "r-3"] {
        finish(&mut w, id);
    }
    assert!(w.engine.projection("r-1").is_none(), "the oldest went");
    assert!(w.engine.projection("r-2").is_some());
    assert!(w.engine.projection("r-3").is_some());
    assert_eq!(w.engine.finished_in_memory(), 2);
}

#[test]
fn signal_and_cancel_of_a_forgotten_execution_are_execution_finished() {
    let mut w = forgetful();
    finish(&mut w, "f-2");
    let loads = w.loads;
    let r = w.call(Request::Signal {
        execution_id: "f-2".into(),
        name: "go".into(),
        payload: json!(null),
        idempotency: None,
    });
    assert_eq!(
        (r.status, r.error_code()),
        (409, Some("EXECUTION_FINISHED"))
    );
    let r = w.call(Request::Cancel {
        execution_id: "f-2".into(),
        reason: None,
        idempotency: None,
    });
    assert_eq!(
        (r.status, r.error_code()),
        (409, Some("EXECUTION_FINISHED"))
    );
    assert_eq!(w.loads, loads + 2, "each command loaded it");
    let r = w.call(Request::Signal {
        execution_id: "nobody".into(),
        name: "go".into(),
        payload: json!(null),
        idempotency: None,
    });
    assert_eq!((r.status, r.error_code()), (404, Some("UNKNOWN_EXECUTION")));
    assert_eq!(w.store.histories["f-2"].len(), 6, "nothing recorded");
}

#[test]
fn a_late_result_for_a_forgotten_execution_is_an_unknown_token() {
    let mut w = forgetful();
    let t = finish(&mut w, "f-3");
    let r = w.call(Request::Result {
        token: t.token.clone(),
        outcome: Outcome::Output(json!({"n": 2})),
        patterns: None,
    });
    assert_eq!(
        r.body,
        json!({"accepted": false, "reason": "unknown token (execution finished or token invalid)"})
    );
    assert_eq!(w.store.histories["f-3"].len(), 6, "not recorded");
}

/// A start that would create a client-chosen id is written without
/// reading the store first; the store refuses to create an id it holds,
/// and the start is answered from the stored execution instead.
#[test]
fn a_start_with_the_id_of_a_forgotten_execution_is_answered_from_the_store() {
    let mut w = forgetful();
    finish(&mut w, "f-4");
    let stored = w.store.histories["f-4"].clone();
    let r = w.start("Plain", "f-4", json!({"n": 9}));
    assert_eq!(
        (r.status, r.body.into_json()),
        (200, json!({"execution_id": "f-4", "created": false}))
    );
    let r = w.start("Other", "f-4", json!({"n": 9}));
    assert_eq!((r.status, r.error_code()), (409, Some("EXECUTION_EXISTS")));
    // An unknown workflow or a bad input: the answer depends on whether
    // the id exists, so those read the store first.
    let r = w.start("Nowhere", "f-4", json!({"n": 9}));
    assert_eq!((r.status, r.error_code()), (409, Some("EXECUTION_EXISTS")));
    let r = w.start("Plain", "f-4", json!({"n": "nine"}));
    assert_eq!(
        (r.status, r.body.into_json()),
        (200, json!({"execution_id": "f-4", "created": false}))
    );
    assert_eq!(w.store.histories["f-4"], stored, "nothing written");
    assert_eq!(w.store.histories.len(), 1);
}

/// The store's refusal of that create is a read in the form of a write:
/// the execution read back comes in idle, and the engine asks for no tick
/// for it. One kept in memory would have cost none, and an extra tick sees
/// a clock that jumped sooner than the server that kept it (seed
/// `0x21dd3220` of `eviction-invisible`).
#[test]
fn a_start_refused_for_a_forgotten_id_asks_for_no_wake() {
    let mut w = forgetful();
    finish(&mut w, "f-5");
    w.at(20);
    let before = w.wake;
    let r = w.start("Plain", "f-5", json!({"n": 9}));
    assert_eq!(
        (r.status, r.body.into_json()),
        (200, json!({"execution_id": "f-5", "created": false}))
    );
    assert_eq!(w.wake, before, "no wake-up of its own");
}

/// A new client-chosen id is created without a read of the store.
#[test]
fn a_start_with_a_new_id_reads_nothing() {
    let mut w = forgetful();
    let loads = w.loads;
    let r = w.start("Plain", "new-1", json!({"n": 1}));
    assert_eq!(
        (r.status, r.body.into_json()),
        (201, json!({"execution_id": "new-1", "created": true}))
    );
    assert_eq!(w.loads, loads, "no load");
}

#[test]
fn a_replayed_key_is_answered_byte_for_byte_from_the_stored_record() {
    let mut w = forgetful();
    let first = w.call(keyed_start(None, "Plain", "k-1", "f"));
    assert_eq!(first.status, 201);
    assert!(w.store.idempotency.contains_key("k-1"));
    let again = w.call(keyed_start(None, "Plain", "k-1", "f"));
    assert_eq!(
        (again.status, &again.body, again.replayed),
        (201, &first.body, true)
    );
    let other = w.call(keyed_start(None, "Plain", "k-1", "g"));
    assert_eq!(
        (other.status, other.error_code()),
        (409, Some("IDEMPOTENCY_KEY_REUSED"))
    );
    // And after a restart, which loads no record at all.
    w.restart();
    let after = w.call(keyed_start(None, "Plain", "k-1", "f"));
    assert_eq!((&after.body, after.replayed), (&first.body, true));
    assert_eq!(w.store.histories.len(), 1, "one execution");
}

#[test]
fn a_keyed_start_naming_a_forgotten_execution_records_created_false() {
    let mut w = forgetful();
    finish(&mut w, "f-5");
    let r = w.call(keyed_start(Some("f-5"), "Plain", "k-5", "f"));
    assert_eq!(r.body, json!({"execution_id": "f-5", "created": false}));
    assert_eq!(w.store.idempotency["k-5"].status, 200);
    let again = w.call(keyed_start(Some("f-5"), "Plain", "k-5", "f"));
    assert_eq!((&again.body, again.replayed), (&r.body, true));
}

#[test]
fn wait_get_and_history_of_a_forgotten_execution_load_it() {
    let mut w = forgetful();
    finish(&mut w, "f-6");
    let r = w.call(Request::Wait {
        execution_id: "f-6".into(),
        timeout_ms: 5_000,
    });
    assert_eq!(
        (r.status, r.body["status"].as_str()),
        (200, Some("completed"))
    );
    assert_eq!(r.body["output"], json!({"n": 2}));
    let r = w.call(Request::GetExecution {
        execution_id: "f-6".into(),
    });
    assert_eq!(r.body["units"]["work"]["status"], "succeeded");
    let r = w.call(Request::History {
        execution_id: "f-6".into(),
        after_seq: Some(4),
    });
    let types: Vec<&str> = r.body["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["type"].as_str().unwrap())
        .collect();
    assert_eq!(types, ["StepSucceeded", "WorkflowCompleted"]);
    assert!(w.engine.projection("f-6").is_none(), "forgotten again");
}

#[test]
fn a_finished_child_stays_until_its_parent_records_it_even_across_a_restart() {
    let mut w = forgetful();
    w.start("Parent", "p", json!({"n": 3}));
    let s = w.register("w-1", &["demo.*"]);
    let t = w.take(&s);
    assert_eq!(&*t.execution_id, "p.child");
    w.at(10);
    // The child's last batch commits; the parent's, recording it, is lost
    // in a crash.
    w.mode = Mode::Hold;
    w.send(Request::Result {
        token: t.token.clone(),
        outcome: Outcome::Output(json!({"n": 4})),
        patterns: None,
    });
    w.release(Mode::Ok);
    assert_eq!(w.held.len(), 1, "the parent's batch is in flight");
    assert!(
        w.engine.projection("p.child").is_some(),
        "the parent still needs it"
    );
    w.held.clear();
    w.mode = Mode::Ok;
    w.restart();
    // Recovery got the parent only, loaded the finished child, and the
    // parent recorded it.
    assert_eq!(w.status("p"), "completed");
    assert_logs(
        &w.logs("p"),
        "
        + 0ms #1 WorkflowCreated
        + 0ms #2 WorkflowStarted
        + 0ms #3 ChildStarted step=child child_id=p.child
        + 10ms #4 ChildCompleted step=child child_id=p.child
        + 10ms #5 WorkflowCompleted
        ",
    );
    assert_eq!(w.engine.executions_in_memory(), 0);
}

/// The HTTP edge's first ask: a wait on an execution in memory parks and
/// is answered when it ends, without a load; on one the engine does not
/// hold, it is refused at once with `NOT_HELD` (the edge reads the store),
/// again without a load.
#[test]
fn a_wait_only_if_held_never_loads() {
    let mut w = forgetful();
    w.start("Plain", "h-1", json!({"n": 1}));
    let waiting = w.send(Request::WaitHeld {
        execution_id: "h-1".into(),
        timeout_ms: 60_000,
    });
    assert!(!w.replies.contains_key(&waiting), "parked while running");
    let s = w.register("w-1", &["demo.*"]);
    let t = w.take(&s);
    w.at(10);
    assert_eq!(w.succeed(&t.token, json!({"n": 2})), accepted());
    let done = w.replies.remove(&waiting).expect("answered when it ended");
    assert_eq!(
        (done.status, done.body["output"].clone()),
        (200, json!({"n": 2}))
    );
    let loads = w.loads;
    for id in ["h-1", "never-started"] {
        let r = w.call(Request::WaitHeld {
            execution_id: id.into(),
            timeout_ms: 60_000,
        });
        assert_eq!(
            (r.status, r.error_code()),
            (404, Some(orbit_core::engine::NOT_HELD)),
            "{id}"
        );
    }
    assert_eq!(w.loads, loads, "no load for a wait only if held");
}
