//! The remaining runtime rules: `if:` skips, expression errors, signal
//! timeouts and ordering, `max_concurrency`, fan-out failure, compensation
//! failure, non-retryable codes, redeliveries surviving a cancellation.

#![allow(clippy::unwrap_used)]

mod engine_support;

use engine_support::*;
use orbit_core::Request;
use serde_json::json;

const RULES: &str = r#"
task "demo.work" version "1.0.0" {
    input { n: Int }
    output { v: Int }
}
task "demo.undo" version "1.0.0" {
    input { v: Int }
    output { }
}

workflow Maybe version "1.0.0" {
    input { go: Bool, n: Int, d: Int }
    step skipped {
        worker "demo.work"
        with { n: input.n }
        if: input.go
    }
    step keyed {
        worker "demo.work"
        with { n: input.n }
        idempotency_key: string(input.n / input.d)
        after: [skipped]
    }
}

workflow Divide version "1.0.0" {
    input { n: Int, d: Int }
    step work {
        worker "demo.work"
        with { n: input.n }
        compensate { worker "demo.undo" with { v: work.v } }
    }
    output { r: work.v / input.d }
}

workflow Approve version "1.0.0" {
    input { }
    step first { signal "go" timeout: 2s }
    step second { signal "go" after: [first] }
    output { a: first, b: second }
}

workflow Wide version "1.0.0" {
    input { ns: [Int] }
    step each {
        for n in input.ns
        worker "demo.work"
        with { n: n }
        max_concurrency: 2
        retry: { max_attempts: 1 }
        compensate { worker "demo.undo" with { v: each.v } }
    }
}

workflow Strict version "1.0.0" {
    input { n: Int }
    step work {
        worker "demo.work"
        with { n: input.n }
        retry: { max_attempts: 5, backoff: 1s, factor: 2.0, max_backoff: 10s, non_retryable: ["INVALID"] }
        compensate { worker "demo.undo" with { v: work.v } retry: { max_attempts: 1 } }
    }
    step next {
        worker "demo.work"
        with { n: work.v }
        retry: { max_attempts: 1 }
    }
}
"#;

fn world() -> World {
    let mut w = World::default_world();
    assert_eq!(w.deploy(RULES).status, 200);
    w
}

#[test]
fn if_false_skips_and_key_error_is_expression_error() {
    let mut w = world();
    w.start("Maybe", "m", json!({"go": false, "n": 1, "d": 0}));
    assert_logs(
        &w.logs("m"),
        "
        + 0ms #1 WorkflowCreated
        + 0ms #2 WorkflowStarted
        + 0ms #3 StepSkipped step=skipped
        + 0ms #4 StepFailed step=keyed code=EXPRESSION_ERROR
        + 0ms #5 WorkflowFailed code=EXPRESSION_ERROR step=keyed
        ",
    );
}

#[test]
fn output_expression_error_fails_and_compensates() {
    let mut w = world();
    w.start("Divide", "dv", json!({"n": 1, "d": 0}));
    let s = w.register("w", &["demo.*"]);
    let t = w.take(&s);
    w.succeed(&t.token, json!({"v": 4}));
    let undo = w.take(&s);
    assert_eq!(
        (undo.step_id.as_str(), (*undo.input).clone()),
        ("compensate:work", json!({"v": 4}))
    );
    w.succeed(&undo.token, json!({}));
    assert_logs(
        &w.logs("dv"),
        "
        + 0ms #1 WorkflowCreated
        + 0ms #2 WorkflowStarted
        + 0ms #3 StepScheduled step=work attempt=1
        + 0ms #4 StepDispatched step=work attempt=1 worker_id=w
        + 0ms #5 StepSucceeded step=work attempt=1
        + 0ms #6 CompensationStarted reason=failed units=work
        + 0ms #7 StepScheduled step=compensate:work attempt=1
        + 0ms #8 StepDispatched step=compensate:work attempt=1 worker_id=w
        + 0ms #9 StepSucceeded step=compensate:work attempt=1
        + 0ms #10 WorkflowFailed code=EXPRESSION_ERROR
        ",
    );
    let err = w.engine.projection("dv").unwrap().error.clone().unwrap();
    assert!(err.message.contains("division by zero"), "{}", err.message);
}

#[test]
fn signals_are_consumed_oldest_first_and_time_out() {
    let mut w = world();
    w.start("Approve", "a", json!({}));
    for p in [1, 2] {
        w.call(Request::Signal {
            execution_id: "a".into(),
            name: "go".into(),
            payload: json!(p),
            idempotency: None,
        });
    }
    assert_eq!(
        w.engine.projection("a").unwrap().output,
        Some(json!({"a": 1, "b": 2}))
    );
    w.start("Approve", "b", json!({}));
    w.at(1_999);
    assert_eq!(w.status("b"), "running");
    w.at(2_000);
    assert_logs(
        &w.logs("b"),
        "
        + 0ms #1 WorkflowCreated
        + 0ms #2 WorkflowStarted
        + 2.0s #3 StepFailed step=first code=SIGNAL_TIMEOUT
        + 2.0s #4 WorkflowFailed code=SIGNAL_TIMEOUT step=first
        ",
    );
}

#[test]
fn max_concurrency_limits_elements_in_flight() {
    let mut w = world();
    w.start("Wide", "wd", json!({"ns": [1, 2, 3]}));
    let s = w.register("w", &["demo.work"]);
    let tasks = w.poll(&s, 10);
    assert_eq!(tasks.len(), 2);
    w.succeed(&tasks[1].token, json!({"v": 2}));
    let third = w.poll(&s, 10);
    assert_eq!(third.len(), 1);
    assert_eq!(third[0].step_id, "each[2]");
}

#[test]
fn a_failed_element_cancels_in_flight_siblings_whose_late_success_is_compensated() {
    let mut w = world();
    w.start("Wide", "wf", json!({"ns": [1, 2, 3]}));
    let s = w.register("w", &["demo.*"]);
    let tasks = w.poll(&s, 10);
    w.fail(&tasks[0].token, "BROKEN", true);
    assert_eq!(
        w.heartbeat(&s, &[&tasks[1].token]),
        vec![tasks[1].token.clone()]
    );
    w.succeed(&tasks[1].token, json!({"v": 2}));
    let undo = w.take(&s);
    assert_eq!(undo.step_id, "compensate:each[1]");
    w.succeed(&undo.token, json!({}));
    assert_logs(
        &w.logs("wf"),
        "
        + 0ms #1 WorkflowCreated
        + 0ms #2 WorkflowStarted
        + 0ms #3 StepFanOut step=each items=3
        + 0ms #4 StepScheduled step=each[0] attempt=1
        + 0ms #5 StepScheduled step=each[1] attempt=1
        + 0ms #6 StepDispatched step=each[0] attempt=1 worker_id=w
        + 0ms #7 StepDispatched step=each[1] attempt=1 worker_id=w
        + 0ms #8 StepAttemptFailed step=each[0] attempt=1 code=BROKEN
        + 0ms #9 StepFailed step=each[0] code=BROKEN
        + 0ms #10 StepSucceeded step=each[1] attempt=1
        + 0ms #11 CompensationStarted reason=failed units=each[1]
        + 0ms #12 StepScheduled step=compensate:each[1] attempt=1
        + 0ms #13 StepDispatched step=compensate:each[1] attempt=1 worker_id=w
        + 0ms #14 StepSucceeded step=compensate:each[1] attempt=1
        + 0ms #15 WorkflowFailed code=BROKEN step=each[0]
        ",
    );
}

#[test]
fn non_retryable_code_and_compensation_failure() {
    let mut w = world();
    w.start("Strict", "st", json!({"n": 1}));
    let s = w.register("w", &["demo.*"]);
    let t = w.take(&s);
    w.succeed(&t.token, json!({"v": 1}));
    let t = w.take(&s);
    w.fail(&t.token, "INVALID", true);
    let undo = w.take(&s);
    w.fail(&undo.token, "STUCK", true);
    let err = w.engine.projection("st").unwrap().error.clone().unwrap();
    assert_eq!(err.code, "COMPENSATION_FAILED");
    assert_eq!(err.step.as_deref(), Some("compensate:work"));
    assert!(err.message.contains("INVALID"), "{}", err.message);
    assert!(w.logs("st").ends_with(
        "StepFailed step=compensate:work code=STUCK\n+ 0ms #15 WorkflowFailed code=COMPENSATION_FAILED step=compensate:work\n"
    ), "{}", w.logs("st"));
}

#[test]
fn non_retryable_by_policy() {
    let mut w = world();
    w.start("Strict", "nr", json!({"n": 1}));
    let s = w.register("w", &["demo.*"]);
    let t = w.take(&s);
    w.fail(&t.token, "INVALID", true);
    assert!(w
        .logs("nr")
        .contains("#5 StepAttemptFailed step=work attempt=1 code=INVALID\n"));
    assert_eq!(w.status("nr"), "failed");
}

#[test]
fn cancel_does_not_withdraw_a_redelivery() {
    let mut w = World::new(orbit_core::Config {
        session_timeout_ms: 1_000,
        ..orbit_core::Config::default()
    });
    w.deploy(RULES);
    w.start("Strict", "rd", json!({"n": 1}));
    let s = w.register("w1", &["demo.*"]);
    let _lost = w.take(&s);
    w.at(2_000);
    w.call(Request::Cancel {
        execution_id: "rd".into(),
        reason: None,
        idempotency: None,
    });
    assert_eq!(
        w.status("rd"),
        "running",
        "the redelivery's outcome must be learned"
    );
    let s2 = w.register("w2", &["demo.*"]);
    let t = w.take(&s2);
    assert!(t.redelivery);
    assert!(
        w.heartbeat(&s2, &[&t.token]).is_empty(),
        "a redelivery is not cancelled"
    );
    w.succeed(&t.token, json!({"v": 1}));
    let undo = w.take(&s2);
    assert_eq!(undo.step_id, "compensate:work");
    w.succeed(&undo.token, json!({}));
    assert_eq!(w.status("rd"), "cancelled");
}

const LOOSE: &str = r#"
task "demo.work" version "1.0.0" {
    input { n: Int }
    output { v: Int }
}

workflow Loose version "1.0.0" {
    input { raw: Json }
    step work {
        worker "demo.work"
        with { n: input.raw }
    }
}
"#;

#[test]
fn a_json_task_input_is_held_to_the_contract_before_any_worker_sees_it() {
    let mut w = World::default_world();
    assert_eq!(w.deploy(LOOSE).status, 200);
    w.start("Loose", "bad", json!({"raw": "seven"}));
    assert_logs(
        &w.logs("bad"),
        "
        + 0ms #1 WorkflowCreated
        + 0ms #2 WorkflowStarted
        + 0ms #3 StepFailed step=work code=EXPRESSION_ERROR
        + 0ms #4 WorkflowFailed code=EXPRESSION_ERROR step=work
        ",
    );
    let err = w.engine.projection("bad").unwrap().error.clone().unwrap();
    assert!(
        err.message.contains("violates its contract"),
        "{}",
        err.message
    );

    // A Json value that satisfies the contract is normalized and delivered;
    // a workflow without an `output` block completes with `{}`.
    w.start("Loose", "good", json!({"raw": 7.0}));
    let s = w.register("w", &["demo.*"]);
    let t = w.take(&s);
    assert_eq!(*t.input, json!({"n": 7}));
    w.succeed(&t.token, json!({"v": 1}));
    assert_eq!(w.status("good"), "completed");
    assert_eq!(w.engine.projection("good").unwrap().output, Some(json!({})));
}
