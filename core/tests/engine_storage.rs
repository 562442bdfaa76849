//! Storage results and recovery: `Unavailable` leaves memory untouched and
//! fails the request, `Ambiguous` reloads and answers from the store, and a
//! restarted engine rebuilds from the store (seed `003_…`'s crash while a
//! payment is being charged).

#![allow(clippy::unwrap_used)]

mod engine_support;

use engine_support::*;
use orbit_core::{Config, Request};
use serde_json::json;

const PAY: &str = r#"
task "payments.charge" version "1.0.0" {
    input { order_id: String }
    output { transaction_id: String }
}

workflow Pay version "1.0.0" {
    input { order_id: String }
    step charge {
        worker "payments.charge"
        with { order_id: input.order_id }
        idempotency_key: "charge-" + input.order_id
    }
}
"#;

fn world() -> World {
    let mut w = World::new(Config {
        session_timeout_ms: 30_000,
        ..Config::default()
    });
    w.deploy(PAY);
    w
}

#[test]
fn unavailable_storage_leaves_memory_unchanged_and_replies_storage_error() {
    let mut w = world();
    w.mode = Mode::Unavailable;
    let r = w.start("Pay", "o-1", json!({"order_id": "o-1"}));
    assert_eq!((r.status, r.error_code()), (503, Some("STORAGE_ERROR")));
    assert!(w.engine.projection("o-1").is_none());
    let get = w.call(Request::GetExecution {
        execution_id: "o-1".into(),
    });
    assert_eq!(get.status, 404);
    w.mode = Mode::Ok;
    let r = w.start("Pay", "o-1", json!({"order_id": "o-1"}));
    assert_eq!(r.status, 201);
    let s = w.register("pay-1", &["payments.*"]);
    let t = w.take(&s);
    w.mode = Mode::Unavailable;
    let r = w.call(Request::Result {
        token: t.token.clone(),
        outcome: orbit_core::engine::Outcome::Output(json!({"transaction_id": "tx"})),
        patterns: None,
    });
    assert_eq!(r.error_code(), Some("STORAGE_ERROR"));
    assert_eq!(w.status("o-1"), "running");
    w.mode = Mode::Ok;
    assert_eq!(
        w.succeed(&t.token, json!({"transaction_id": "tx"})),
        accepted()
    );
    assert_eq!(w.status("o-1"), "completed");
}

#[test]
fn ambiguous_write_that_applied_gets_its_normal_answer() {
    let mut w = world();
    w.mode = Mode::AmbiguousApplied;
    let r = w.start("Pay", "o-2", json!({"order_id": "o-2"}));
    assert_eq!(r.status, 201, "{:?}", r.body);
    w.mode = Mode::Ok;
    assert_eq!(w.status("o-2"), "running");
    // After a reload the engine re-decides on the next tick.
    w.advance(100);
    let s = w.register("pay-1", &["payments.*"]);
    let t = w.take(&s);
    w.mode = Mode::AmbiguousApplied;
    assert_eq!(
        w.succeed(&t.token, json!({"transaction_id": "tx"})),
        accepted()
    );
    w.mode = Mode::Ok;
    assert_eq!(w.status("o-2"), "completed");
    assert_eq!(w.store.histories["o-2"].len(), 6);
}

#[test]
fn ambiguous_write_that_was_lost_answers_storage_error() {
    let mut w = world();
    w.mode = Mode::AmbiguousLost;
    let r = w.start("Pay", "o-3", json!({"order_id": "o-3"}));
    assert_eq!(r.error_code(), Some("STORAGE_ERROR"));
    w.mode = Mode::Ok;
    assert!(w.engine.projection("o-3").is_none());
    assert_eq!(
        w.start("Pay", "o-3", json!({"order_id": "o-3"})).status,
        201
    );
}

/// The start is written without a read (the engine cannot know the id
/// exists); the store refuses the create as stale, the engine reads the
/// execution back and answers from it.
#[test]
fn a_start_with_an_id_only_in_the_store_is_refused_by_the_store_and_finds_it() {
    let mut w = world();
    w.start("Pay", "o-4", json!({"order_id": "o-4"}));
    // A fresh engine that did not load o-4 (as if it were only in the store).
    let store = w.store.clone();
    w.engine = orbit_core::Engine::new(
        Config::default(),
        Box::new(orbit_core::engine::CountingIds::new(3)),
    );
    w.feed(orbit_core::Input::Recover {
        definitions: store.definitions.clone(),
        executions: vec![],
        idempotency: vec![],
    });
    let stored = w.store.histories["o-4"].clone();
    let appends = w.appends;
    let r = w.start("Pay", "o-4", json!({"order_id": "o-4"}));
    assert_eq!(r.body, json!({"execution_id": "o-4", "created": false}));
    assert_eq!(w.appends, appends + 1, "one create, refused");
    assert_eq!(w.store.histories["o-4"], stored, "nothing written");
}

/// `histories.md`: the server is killed while pay-1 charges; pay-1's SDK
/// keeps retrying its result and gets through once the server is back.
#[test]
fn crash_mid_charge_result_after_restart_is_accepted() {
    let mut w = world();
    w.start("Pay", "o-9", json!({"order_id": "o-9"}));
    let s = w.register("pay-1", &["payments.*"]);
    w.at(40);
    let t = w.take(&s);
    w.at(300);
    w.restart();
    w.at(2_300);
    assert_eq!(
        w.succeed(&t.token, json!({"transaction_id": "tx-9"})),
        accepted()
    );
    assert_logs(
        &w.logs("o-9"),
        "
        + 0ms #1 WorkflowCreated
        + 0ms #2 WorkflowStarted
        + 0ms #3 StepScheduled step=charge attempt=1 key=charge-o-9
        + 40ms #4 StepDispatched step=charge attempt=1 worker_id=pay-1
        + 2.3s #5 StepSucceeded step=charge attempt=1
        + 2.3s #6 WorkflowCompleted
        ",
    );
}

#[test]
fn crash_mid_charge_unreported_dispatch_is_redelivered_after_one_session_timeout() {
    let mut w = world();
    w.start("Pay", "o-10", json!({"order_id": "o-10"}));
    let s = w.register("pay-1", &["payments.*"]);
    w.at(40);
    let _t = w.take(&s);
    w.at(2_100);
    w.restart();
    w.at(32_099);
    assert_eq!(w.store.histories["o-10"].len(), 4, "grace window");
    w.at(32_100);
    assert_logs(
        &w.logs("o-10"),
        "
        + 0ms #1 WorkflowCreated
        + 0ms #2 WorkflowStarted
        + 0ms #3 StepScheduled step=charge attempt=1 key=charge-o-10
        + 40ms #4 StepDispatched step=charge attempt=1 worker_id=pay-1
        + 32.1s #5 StepAttemptUncertain step=charge attempt=1 reason=worker `pay-1` stopped responding
        + 32.1s #6 StepScheduled step=charge attempt=1 redelivery=true key=charge-o-10
        ",
    );
    let s2 = w.register("pay-2", &["payments.*"]);
    let t = w.take(&s2);
    assert_eq!(
        (t.attempt, t.redelivery, &*t.idempotency_key),
        (1, true, "charge-o-10")
    );
}

#[test]
fn re_attached_token_after_restart_is_not_redelivered() {
    let mut w = world();
    w.start("Pay", "o-11", json!({"order_id": "o-11"}));
    let s = w.register("pay-1", &["payments.*"]);
    let t = w.take(&s);
    w.restart();
    w.at(1_000);
    let unknown = w.call(Request::Heartbeat {
        session_id: s,
        held: vec![t.token.clone()],
    });
    assert_eq!(unknown.error_code(), Some("UNKNOWN_SESSION"));
    let s2 = w.register("pay-1", &["payments.*"]);
    for i in 1..=4 {
        w.at(i * 20_000);
        assert!(w.heartbeat(&s2, &[&t.token]).is_empty());
    }
    assert_eq!(w.store.histories["o-11"].len(), 4);
    assert_eq!(
        w.succeed(&t.token, json!({"transaction_id": "x"})),
        accepted()
    );
}

#[test]
fn recovery_fires_overdue_timers() {
    let mut w = world();
    w.deploy(
        r#"workflow Nap version "1.0.0" {
            input { }
            step nap { sleep 1s }
        }"#,
    );
    w.start("Nap", "n", json!({}));
    w.restart();
    w.now += 5_000;
    w.restart();
    assert_logs(
        &w.logs("n"),
        "
        + 0ms #1 WorkflowCreated
        + 0ms #2 WorkflowStarted
        + 0ms #3 TimerStarted step=nap fire_at=+1.0s
        + 5.0s #4 TimerFired step=nap
        + 5.0s #5 WorkflowCompleted
        ",
    );
}

#[test]
fn fenced_execution_is_given_up() {
    let mut w = world();
    w.start("Pay", "o-12", json!({"order_id": "o-12"}));
    w.mode = Mode::Fenced;
    let r = w.call(Request::Signal {
        execution_id: "o-12".into(),
        name: "x".into(),
        payload: json!(null),
        idempotency: None,
    });
    assert_eq!((r.status, r.error_code()), (503, Some("STORAGE_ERROR")));
    assert!(r.body["error"]["message"]
        .as_str()
        .unwrap()
        .starts_with("fenced:"));
    assert!(w.engine.projection("o-12").is_none(), "no longer ours");
    let s = w.register("pay-1", &["payments.*"]);
    w.mode = Mode::Ok;
    assert!(w.poll(&s, 1).is_empty(), "its queued task left with it");
}

#[test]
fn racing_requests_with_one_key_are_applied_once() {
    use orbit_core::engine::{IdempotencyScope, Start};
    let mut w = world();
    let keyed = || {
        Request::Start(Start {
            workflow: "Pay".into(),
            version: None,
            input: json!({"order_id": "o-13"}),
            execution_id: None,
            idempotency: Some(IdempotencyScope {
                key: "k".into(),
                fingerprint: "f".into(),
            }),
            traceparent: None,
        })
    };
    // The first request's batch is held in flight while the second comes.
    w.mode = Mode::Hold;
    let first = w.send(keyed());
    let second = w.send(keyed());
    assert_eq!(w.held.len(), 1, "the second waits behind the first");
    assert!(w.replies.is_empty());
    w.mode = Mode::Ok;
    w.release(Mode::Ok);
    let (a, b) = (&w.replies[&first], &w.replies[&second]);
    assert_eq!(a.status, 201);
    assert_eq!((&b.body, b.replayed), (&a.body, true));
    assert_eq!(w.store.histories.len(), 1);
}

#[test]
fn a_reload_keeps_tokens_with_their_sessions() {
    let mut w = World::new(Config {
        session_timeout_ms: 1_000,
        ..Config::default()
    });
    w.deploy(PAY);
    w.start("Pay", "o-14", json!({"order_id": "o-14"}));
    let s = w.register("pay-1", &["payments.*"]);
    let t = w.take(&s);
    assert!(w.heartbeat(&s, &[&t.token]).is_empty());
    // An ambiguous write reloads the execution...
    w.mode = Mode::AmbiguousLost;
    w.call(Request::Signal {
        execution_id: "o-14".into(),
        name: "x".into(),
        payload: json!(null),
        idempotency: None,
    });
    w.mode = Mode::Ok;
    // ...and the silent worker is still detected afterwards.
    w.at(1_500);
    assert!(
        w.logs("o-14")
            .contains("reason=worker `pay-1` stopped responding"),
        "{}",
        w.logs("o-14")
    );
}

/// Simulation finding 2: the batch carrying `StepAttemptUncertain` for a
/// lost poll response comes back `Ambiguous` (not applied); after the
/// reload the dispatch must still be made uncertain.
#[test]
fn an_uncertain_event_lost_in_an_ambiguous_write_is_proposed_again() {
    let mut w = World::new(Config {
        session_timeout_ms: 1_000,
        ..Config::default()
    });
    w.deploy(PAY);
    w.start("Pay", "o-15", json!({"order_id": "o-15"}));
    w.advance(10);
    let s = w.register("pay-1", &["payments.*"]);
    let _lost = w.take(&s);
    w.at(900);
    assert!(w.heartbeat(&s, &[]).is_empty());
    w.mode = Mode::AmbiguousLost;
    w.at(1_015);
    assert!(!w.logs("o-15").contains("Uncertain"));
    w.mode = Mode::Ok;
    w.at(1_500);
    assert!(
        w.logs("o-15")
            .contains("reason=worker `pay-1` did not receive the task"),
        "{}",
        w.logs("o-15")
    );
}
