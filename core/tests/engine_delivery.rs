//! Delivery and reconciliation scenarios (seed `003_…`): lost workers and
//! redelivery, late successes, stale failures, duplicates, unknown tokens,
//! output contracts, queue and attempt timeouts.

#![allow(clippy::unwrap_used)]

mod engine_support;

use engine_support::*;
use orbit_core::Config;
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
        retry: { max_attempts: 3, backoff: 100ms, factor: 2.0, max_backoff: 10s }
    }
}

workflow Timed version "1.0.0" {
    input { n: Int }
    step work {
        worker "demo.work"
        with { n: input.n }
        retry: { max_attempts: 3, backoff: 100ms, factor: 2.0, max_backoff: 10s }
        timeout: 1s
    }
}

workflow Two version "1.0.0" {
    input { n: Int }
    step work {
        worker "demo.work"
        with { n: input.n }
    }
    step more {
        worker "demo.work"
        with { n: work.v }
    }
}

workflow Queued version "1.0.0" {
    input { n: Int }
    step work {
        worker "demo.work"
        with { n: input.n }
        queue_timeout: 1s
    }
}
"#;

fn seed_world() -> World {
    let mut w = World::new(Config {
        session_timeout_ms: 5_000,
        ..Config::default()
    });
    w.grid = Some(100);
    w.deploy(PLAIN);
    w
}

/// Seed `003_…`: flaky-1 received the task and went silent; with
/// `--session-timeout 5` the attempt was redelivered to flaky-2. (The seed
/// shows #3 at `+ 1ms`, its offsets being an example; ORBIT schedules the
/// first step in the start's own batch, so #3 lands with the start even
/// though writes take 1 ms here.)
#[test]
fn session_timeout_redelivers_the_same_attempt() {
    let mut w = seed_world();
    w.latency = 1;
    w.start("Plain", "u-1", json!({"n": 1}));
    let flaky1 = w.register("flaky-1", &["demo.*"]);
    w.at(39);
    let first = w.take(&flaky1);
    w.at(6_600);
    let flaky2 = w.register("flaky-2", &["demo.*"]);
    let t = w.take(&flaky2);
    assert_eq!(
        serde_json::to_value(&t).unwrap(),
        json!({"token": t.token, "execution_id": "u-1", "workflow": "Plain", "workflow_version": "1.0.0",
               "step_id": "work", "task_name": "demo.work", "contract_version": "1.0.0", "input": {"n": 1},
               "idempotency_key": "u-1/work", "attempt": 1, "redelivery": true,
               // The seed's task plus its trace context: the redelivery's own
               // attempt span (its StepScheduled is #6).
               "traceparent": orbit_core::trace::task_traceparent(orbit_core::trace::trace_id("u-1", None), "u-1", 6)})
    );
    assert_ne!(t.token, first.token);
    w.at(6_700);
    assert_eq!(w.succeed(&t.token, json!({"v": 1})), accepted());
    assert_logs(
        &w.logs("u-1"),
        "
        + 0ms #1 WorkflowCreated
        + 0ms #2 WorkflowStarted
        + 0ms #3 StepScheduled step=work attempt=1
        + 39ms #4 StepDispatched step=work attempt=1 worker_id=flaky-1
        + 5.1s #5 StepAttemptUncertain step=work attempt=1 reason=worker `flaky-1` stopped responding
        + 5.1s #6 StepScheduled step=work attempt=1 redelivery=true
        + 6.6s #7 StepDispatched step=work attempt=1 worker_id=flaky-2
        + 6.7s #8 StepSucceeded step=work attempt=1
        + 6.7s #9 WorkflowCompleted
        ",
    );
    // flaky-1 is gone: its session is unknown.
    let r = w.call(orbit_core::Request::Heartbeat {
        session_id: flaky1,
        held: vec![],
    });
    assert_eq!(r.error_code(), Some("UNKNOWN_SESSION"));
    assert_eq!(r.status, 404);
}

#[test]
fn late_success_after_redelivery_is_accepted_and_the_other_token_cancelled() {
    let mut w = seed_world();
    w.start("Plain", "u-2", json!({"n": 1}));
    let flaky1 = w.register("flaky-1", &["demo.*"]);
    w.at(39);
    let first = w.take(&flaky1);
    w.at(6_600);
    let flaky2 = w.register("flaky-2", &["demo.*"]);
    let second = w.take(&flaky2);
    assert_eq!(w.succeed(&first.token, json!({"v": 1})), accepted());
    assert_eq!(
        w.heartbeat(&flaky2, &[&second.token]),
        vec![second.token.clone()]
    );
    assert_logs(
        &w.logs("u-2"),
        "
        + 0ms #1 WorkflowCreated
        + 0ms #2 WorkflowStarted
        + 0ms #3 StepScheduled step=work attempt=1
        + 39ms #4 StepDispatched step=work attempt=1 worker_id=flaky-1
        + 5.1s #5 StepAttemptUncertain step=work attempt=1 reason=worker `flaky-1` stopped responding
        + 5.1s #6 StepScheduled step=work attempt=1 redelivery=true
        + 6.6s #7 StepDispatched step=work attempt=1 worker_id=flaky-2
        + 6.6s #8 StepSucceeded step=work attempt=1
        + 6.6s #9 WorkflowCompleted
        ",
    );
    // After the execution finished, its tokens are unknown.
    assert_eq!(
        w.succeed(&second.token, json!({"v": 1})),
        json!({"accepted": false, "reason": "unknown token (execution finished or token invalid)"})
    );
}

#[test]
fn stale_failure_and_duplicate_are_recorded_not_applied() {
    let mut w = World::default_world();
    w.deploy(PLAIN);
    w.start("Timed", "t-1", json!({"n": 1}));
    let s = w.register("w-1", &["demo.work"]);
    let first = w.take(&s);
    w.at(1_000);
    assert_eq!(
        w.heartbeat(&s, &[&first.token]),
        vec![first.token.clone()],
        "timed-out token cancelled"
    );
    assert_eq!(
        w.fail(&first.token, "BOOM", true),
        json!({"accepted": false, "reason": "stale attempt"})
    );
    w.at(1_100);
    let second = w.take(&s);
    assert_eq!(second.attempt, 2);
    assert_eq!(w.succeed(&second.token, json!({"v": 2})), accepted());
    assert_logs(
        &w.logs("t-1"),
        "
        + 0ms #1 WorkflowCreated
        + 0ms #2 WorkflowStarted
        + 0ms #3 StepScheduled step=work attempt=1
        + 0ms #4 StepDispatched step=work attempt=1 worker_id=w-1
        + 1.0s #5 StepAttemptFailed step=work attempt=1 code=ATTEMPT_TIMEOUT retry_at=+1.1s
        + 1.0s #6 StaleResultIgnored step=work attempt=1 outcome=failure
        + 1.1s #7 StepScheduled step=work attempt=2
        + 1.1s #8 StepDispatched step=work attempt=2 worker_id=w-1
        + 1.1s #9 StepSucceeded step=work attempt=2
        + 1.1s #10 WorkflowCompleted
        ",
    );
}

#[test]
fn duplicate_result_of_a_resolved_unit_is_recorded() {
    let mut w = World::default_world();
    w.deploy(PLAIN);
    w.start("Two", "d-1", json!({"n": 1}));
    let s = w.register("w-1", &["demo.work"]);
    let t = w.take(&s);
    assert_eq!(w.succeed(&t.token, json!({"v": 2})), accepted());
    assert_eq!(
        w.succeed(&t.token, json!({"v": 2})),
        json!({"accepted": false, "reason": "duplicate result; step already resolved"})
    );
    assert_eq!(
        w.fail(&t.token, "LATE", true),
        json!({"accepted": false, "reason": "duplicate result; step already resolved"})
    );
    let more = w.take(&s);
    assert_eq!(*more.input, json!({"n": 2}));
    assert_logs(
        &w.logs("d-1"),
        "
        + 0ms #1 WorkflowCreated
        + 0ms #2 WorkflowStarted
        + 0ms #3 StepScheduled step=work attempt=1
        + 0ms #4 StepDispatched step=work attempt=1 worker_id=w-1
        + 0ms #5 StepSucceeded step=work attempt=1
        + 0ms #6 StepScheduled step=more attempt=1
        + 0ms #7 StaleResultIgnored step=work attempt=1 outcome=duplicate
        + 0ms #8 StaleResultIgnored step=work attempt=1 outcome=duplicate
        + 0ms #9 StepDispatched step=more attempt=1 worker_id=w-1
        ",
    );
}

#[test]
fn result_for_a_finished_execution_is_unknown() {
    let mut w = World::default_world();
    w.deploy(PLAIN);
    w.start("Timed", "t-2", json!({"n": 1}));
    let s = w.register("w-1", &["demo.work"]);
    let first = w.take(&s);
    w.at(1_000);
    w.at(1_100);
    let second = w.take(&s);
    assert_eq!(w.succeed(&second.token, json!({"v": 2})), accepted());
    // Completed: every token of it is now unknown.
    assert_eq!(
        w.succeed(&first.token, json!({"v": 1}))["reason"],
        json!("unknown token (execution finished or token invalid)")
    );
}

#[test]
fn attempt_timeout_then_late_success_counts() {
    let mut w = World::default_world();
    w.deploy(PLAIN);
    w.start("Timed", "t-3", json!({"n": 1}));
    let s = w.register("w-1", &["demo.work"]);
    let first = w.take(&s);
    w.at(1_050);
    assert_eq!(w.succeed(&first.token, json!({"v": 1})), accepted());
    assert_logs(
        &w.logs("t-3"),
        "
        + 0ms #1 WorkflowCreated
        + 0ms #2 WorkflowStarted
        + 0ms #3 StepScheduled step=work attempt=1
        + 0ms #4 StepDispatched step=work attempt=1 worker_id=w-1
        + 1.0s #5 StepAttemptFailed step=work attempt=1 code=ATTEMPT_TIMEOUT retry_at=+1.1s
        + 1.1s #6 StepSucceeded step=work attempt=1
        + 1.1s #7 WorkflowCompleted
        ",
    );
}

#[test]
fn unknown_token_is_not_recorded() {
    let mut w = World::default_world();
    w.deploy(PLAIN);
    w.start("Plain", "k-1", json!({"n": 1}));
    assert_eq!(
        w.succeed("no-such-token", json!({"v": 1})),
        json!({"accepted": false, "reason": "unknown token (execution finished or token invalid)"})
    );
    assert_eq!(w.store.histories["k-1"].len(), 3);
}

#[test]
fn output_contract_violation_fails_the_attempt() {
    let mut w = World::default_world();
    w.deploy(PLAIN);
    w.start("Plain", "c-1", json!({"n": 1}));
    let s = w.register("w-1", &["demo.work"]);
    let t = w.take(&s);
    assert_eq!(
        w.succeed(&t.token, json!({"v": "seven"})),
        json!({"accepted": false, "reason": "output violates the task contract"})
    );
    w.at(100);
    let t = w.take(&s);
    assert_eq!(
        w.succeed(&t.token, json!({"v": 7, "extra": true})),
        accepted()
    );
    assert_logs(
        &w.logs("c-1"),
        "
        + 0ms #1 WorkflowCreated
        + 0ms #2 WorkflowStarted
        + 0ms #3 StepScheduled step=work attempt=1
        + 0ms #4 StepDispatched step=work attempt=1 worker_id=w-1
        + 0ms #5 StepAttemptFailed step=work attempt=1 code=OUTPUT_CONTRACT_VIOLATION retry_at=+100ms
        + 100ms #6 StepScheduled step=work attempt=2
        + 100ms #7 StepDispatched step=work attempt=2 worker_id=w-1
        + 100ms #8 StepSucceeded step=work attempt=2
        + 100ms #9 WorkflowCompleted
        ",
    );
}

#[test]
fn queue_timeout_fails_the_step() {
    let mut w = World::default_world();
    w.deploy(PLAIN);
    w.start("Queued", "q-1", json!({"n": 1}));
    w.at(999);
    assert_eq!(w.status("q-1"), "running");
    w.at(1_000);
    assert_logs(
        &w.logs("q-1"),
        "
        + 0ms #1 WorkflowCreated
        + 0ms #2 WorkflowStarted
        + 0ms #3 StepScheduled step=work attempt=1
        + 1.0s #4 StepFailed step=work code=QUEUE_TIMEOUT
        + 1.0s #5 WorkflowFailed code=QUEUE_TIMEOUT step=work
        ",
    );
}

#[test]
fn lost_poll_response_is_redelivered() {
    let mut w = seed_world();
    w.start("Plain", "l-1", json!({"n": 1}));
    let s = w.register("w-1", &["demo.*"]);
    let _lost = w.take(&s);
    for i in 1..=6 {
        w.at(i * 1_000);
        assert!(w.heartbeat(&s, &[]).is_empty());
    }
    let t = w.take(&s);
    assert!(t.redelivery);
    assert_logs(
        &w.logs("l-1"),
        "
        + 0ms #1 WorkflowCreated
        + 0ms #2 WorkflowStarted
        + 0ms #3 StepScheduled step=work attempt=1
        + 0ms #4 StepDispatched step=work attempt=1 worker_id=w-1
        + 5.0s #5 StepAttemptUncertain step=work attempt=1 reason=worker `w-1` did not receive the task
        + 5.0s #6 StepScheduled step=work attempt=1 redelivery=true
        + 6.0s #7 StepDispatched step=work attempt=1 worker_id=w-1
        ",
    );
}

#[test]
fn held_tokens_keep_a_long_task_alive() {
    let mut w = seed_world();
    w.start("Plain", "h-1", json!({"n": 1}));
    let s = w.register("w-1", &["demo.*"]);
    let t = w.take(&s);
    for i in 1..=12 {
        w.at(i * 1_000);
        assert!(w.heartbeat(&s, &[&t.token]).is_empty());
    }
    assert_eq!(w.store.histories["h-1"].len(), 4, "no redelivery");
}

#[test]
fn unregistering_while_holding_makes_the_attempt_uncertain() {
    let mut w = World::default_world();
    w.deploy(PLAIN);
    w.start("Plain", "x-1", json!({"n": 1}));
    let s = w.register("w-1", &["demo.*"]);
    let _t = w.take(&s);
    w.at(10);
    let r = w.call(orbit_core::Request::Unregister { session_id: s });
    assert_eq!(r.status, 200);
    assert_logs(
        &w.logs("x-1"),
        "
        + 0ms #1 WorkflowCreated
        + 0ms #2 WorkflowStarted
        + 0ms #3 StepScheduled step=work attempt=1
        + 0ms #4 StepDispatched step=work attempt=1 worker_id=w-1
        + 10ms #5 StepAttemptUncertain step=work attempt=1 reason=worker unregistered
        + 10ms #6 StepScheduled step=work attempt=1 redelivery=true
        ",
    );
}

#[test]
fn oldest_matching_task_first_and_patterns() {
    let mut w = World::default_world();
    w.deploy(PLAIN);
    w.start("Plain", "a", json!({"n": 1}));
    w.at(5);
    w.start("Plain", "b", json!({"n": 2}));
    let other = w.register("o-1", &["other.*", "demo"]);
    assert!(w.poll(&other, 5).is_empty());
    let s = w.register("w-1", &["demo.work"]);
    let tasks = w.poll(&s, 5);
    let ids: Vec<&str> = tasks.iter().map(|t| &*t.execution_id).collect();
    assert_eq!(ids, ["a", "b"]);
}

#[test]
fn parked_poll_is_answered_when_a_task_arrives_or_at_its_deadline() {
    let mut w = World::default_world();
    w.deploy(PLAIN);
    let s = w.register("w-1", &["*"]);
    let parked = w.send(orbit_core::Request::Poll {
        session_id: s.clone(),
        max_tasks: Some(1),
        wait_ms: 10_000,
        held: vec![],
    });
    assert!(!w.replies.contains_key(&parked));
    w.at(50);
    w.start("Plain", "pp-1", json!({"n": 1}));
    let r = w
        .replies
        .remove(&parked)
        .expect("delivered to the parked poll");
    assert_eq!(r.body["tasks"][0]["execution_id"], json!("pp-1"));
    let empty = w.send(orbit_core::Request::Poll {
        session_id: s,
        max_tasks: Some(1),
        wait_ms: 1_000,
        held: vec![],
    });
    w.at(1_049);
    assert!(!w.replies.contains_key(&empty));
    w.at(1_050);
    assert_eq!(w.replies[&empty].body, json!({"tasks": []}));
}

/// A worker already long-polling gets the next step in the same commit as
/// the result that made it due: `StepSucceeded`, the next `StepScheduled` and
/// its `StepDispatched` share one write, and the parked poll is answered when
/// that write is durable.
#[test]
fn a_parked_poll_gets_the_next_step_in_the_results_commit() {
    let mut w = seed_world();
    w.latency = 1;
    w.start("Two", "h-1", json!({"n": 1}));
    let s = w.register("w-1", &["demo.*"]);
    w.at(10);
    let first = w.take(&s);
    w.at(20);
    let poll = w.send(orbit_core::Request::Poll {
        session_id: s.clone(),
        max_tasks: Some(4),
        wait_ms: 10_000,
        held: vec![first.token.clone()],
    });
    assert!(
        !w.replies.contains_key(&poll),
        "nothing is due yet: the poll waits"
    );
    w.at(30);
    let writes = w.appends;
    assert_eq!(w.succeed(&first.token, json!({"v": 7})), accepted());
    assert_eq!(
        w.appends - writes,
        1,
        "result, scheduling and hand-off: one write"
    );
    let answer = w
        .replies
        .remove(&poll)
        .expect("the parked poll is answered");
    let tasks = answer.body["tasks"].as_array().unwrap();
    assert_eq!(tasks.len(), 1);
    assert_eq!(tasks[0]["step_id"], "more");
    assert_eq!(tasks[0]["input"], json!({"n": 7}));
    assert_logs(
        &w.logs("h-1"),
        "
        + 0ms #1 WorkflowCreated
        + 0ms #2 WorkflowStarted
        + 0ms #3 StepScheduled step=work attempt=1
        + 10ms #4 StepDispatched step=work attempt=1 worker_id=w-1
        + 30ms #5 StepSucceeded step=work attempt=1
        + 30ms #6 StepScheduled step=more attempt=1
        + 30ms #7 StepDispatched step=more attempt=1 worker_id=w-1
        ",
    );
    // The handed-off task is held like any other delivery.
    let token = tasks[0]["token"].as_str().unwrap();
    assert!(w.heartbeat(&s, &[token]).is_empty());
    w.at(40);
    assert_eq!(w.succeed(token, json!({"v": 8})), accepted());
    assert_eq!(w.status("h-1"), "completed");
}

/// A worker waiting in a long poll, for the two starts below.
fn parked_poll(w: &mut World) -> orbit_core::engine::RequestId {
    let s = w.register("w-1", &["demo.*"]);
    let poll = w.send(orbit_core::Request::Poll {
        session_id: s,
        max_tasks: Some(4),
        wait_ms: 10_000,
        held: vec![],
    });
    assert!(
        !w.replies.contains_key(&poll),
        "nothing is due: the poll waits"
    );
    poll
}

/// The one task a parked poll was answered with: its step.
fn handed_step(w: &mut World, poll: orbit_core::engine::RequestId) -> String {
    let answer = w
        .replies
        .remove(&poll)
        .expect("the parked poll is answered");
    let tasks = answer.body["tasks"].as_array().unwrap();
    assert_eq!(tasks.len(), 1);
    tasks[0]["step_id"].as_str().unwrap().to_owned()
}

/// A start schedules its first step in its own batch, and a worker already
/// long-polling gets that step in the same write: the client's answer and
/// the poll's both come when that one write is durable.
#[test]
fn a_start_schedules_and_hands_out_its_first_step_in_one_write() {
    let mut w = seed_world();
    w.latency = 1;
    let poll = parked_poll(&mut w);
    w.at(5);
    let writes = w.appends;
    let r = w.call(orbit_core::Request::Start(orbit_core::engine::Start {
        workflow: "Two".into(),
        version: None,
        input: json!({"n": 1}),
        execution_id: None,
        idempotency: None,
        traceparent: None,
    }));
    assert_eq!(r.status, 201);
    assert_eq!(
        w.appends - writes,
        1,
        "start, first step and its hand-out: one write"
    );
    assert_eq!(handed_step(&mut w, poll), "work");
    assert_logs(
        &w.logs(r.body["execution_id"].as_str().unwrap()),
        "
        + 0ms #1 WorkflowCreated
        + 0ms #2 WorkflowStarted
        + 0ms #3 StepScheduled step=work attempt=1
        + 0ms #4 StepDispatched step=work attempt=1 worker_id=w-1
        ",
    );
}

/// A start with an id of the client's that the engine does not hold creates
/// it without reading the store, which may refuse it (the id exists after
/// all). Its first step is scheduled in the start's write but handed out
/// only once that write is durable, so a refusal takes nothing from a
/// waiting poll (simulation finding 38).
#[test]
fn an_unread_create_hands_out_its_first_step_after_its_write() {
    let mut w = seed_world();
    w.latency = 1;
    let poll = parked_poll(&mut w);
    w.at(5);
    let writes = w.appends;
    assert_eq!(w.start("Two", "f-1", json!({"n": 1})).status, 201);
    assert_eq!(
        w.appends - writes,
        2,
        "the start with its first step, then the hand-out"
    );
    assert_eq!(handed_step(&mut w, poll), "work");
    assert_logs(
        &w.logs("f-1"),
        "
        + 0ms #1 WorkflowCreated
        + 0ms #2 WorkflowStarted
        + 0ms #3 StepScheduled step=work attempt=1
        + 1ms #4 StepDispatched step=work attempt=1 worker_id=w-1
        ",
    );
}

/// A write that fails takes the hand-off with it: the parked poll is
/// answered `STORAGE_ERROR`, nothing was delivered, and the step is handed
/// out again by the next poll once storage is back.
#[test]
fn a_failed_write_answers_the_parked_poll_and_delivers_nothing() {
    let mut w = seed_world();
    w.start("Two", "h-2", json!({"n": 1}));
    let s = w.register("w-1", &["demo.*"]);
    w.at(10);
    let first = w.take(&s);
    let poll = w.send(orbit_core::Request::Poll {
        session_id: s.clone(),
        max_tasks: Some(1),
        wait_ms: 10_000,
        held: vec![first.token.clone()],
    });
    w.mode = Mode::Unavailable;
    let r = w.call(orbit_core::Request::Result {
        token: first.token.clone(),
        outcome: orbit_core::engine::Outcome::Output(json!({"v": 7})),
        patterns: None,
    });
    assert_eq!(r.error_code(), Some("STORAGE_ERROR"));
    let answer = w
        .replies
        .remove(&poll)
        .expect("the parked poll is answered");
    assert_eq!(answer.error_code(), Some("STORAGE_ERROR"));
    w.mode = Mode::Ok;
    assert_eq!(w.succeed(&first.token, json!({"v": 7})), accepted());
    let next = w.take(&s);
    assert_eq!(next.step_id, "more");
    assert_logs(
        &w.logs("h-2"),
        "
        + 0ms #1 WorkflowCreated
        + 0ms #2 WorkflowStarted
        + 0ms #3 StepScheduled step=work attempt=1
        + 10ms #4 StepDispatched step=work attempt=1 worker_id=w-1
        + 10ms #5 StepSucceeded step=work attempt=1
        + 10ms #6 StepScheduled step=more attempt=1
        + 10ms #7 StepDispatched step=more attempt=1 worker_id=w-1
        ",
    );
}
