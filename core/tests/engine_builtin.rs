//! The built-in HTTP task `orbit.http` at engine level: the compiler types
//! it without a `task` declaration, its units go to the built-in session
//! only, its results are reconciled like any worker's, an uncertain
//! outcome is redelivered with the same key, and a restart while it runs
//! records the seed's reason (`003_…`).

#![allow(clippy::unwrap_used)]

mod engine_support;

use engine_support::*;
use orbit_core::engine::{Request, Task};
use orbit_core::Config;
use serde_json::json;

const HTTP: &str = r#"
task "demo.work" version "1.0.0" {
    input { n: Int }
    output { v: Int }
}

workflow Call version "1.0.0" {
    input { url: String }
    step call {
        worker "orbit.http"
        with { method: "POST", url: input.url, body: { n: 1 }, timeout: 2s }
        retry: { max_attempts: 3, backoff: 100ms, factor: 2.0, max_backoff: 10s }
    }
    step use {
        worker "demo.work"
        with { n: call.status }
    }
}
"#;

fn world() -> World {
    let mut w = World::new(Config {
        session_timeout_ms: 5_000,
        ..Config::default()
    });
    w.grid = Some(100);
    w.deploy(HTTP);
    w
}

fn builtin_session(w: &mut World) -> String {
    let r = w.call(Request::RegisterBuiltin { max_tasks: Some(4) });
    assert_eq!(r.status, 200);
    r.body["session_id"].as_str().unwrap().to_string()
}

fn ok_output(status: i64) -> serde_json::Value {
    json!({"status": status, "headers": {"content-type": "application/json"}, "body": {"ok": true}})
}

#[test]
fn workers_never_receive_builtin_units_and_the_builtin_session_does() {
    let mut w = world();
    w.start("Call", "h-1", json!({"url": "http://127.0.0.1:9/x"}));
    let everything = w.register("greedy", &["*"]);
    let orbit = w.register("sneaky", &["orbit.*"]);
    assert!(w.poll(&everything, 5).is_empty());
    assert!(w.poll(&orbit, 5).is_empty());
    let b = builtin_session(&mut w);
    let task: Task = w.take(&b);
    assert_eq!(&*task.task_name, "orbit.http");
    assert_eq!(&*task.idempotency_key, "h-1/call");
    assert_eq!(&*task.contract_version, "1.0.0");
    assert_eq!(task.input["timeout"], json!(2000));
    assert_eq!(w.succeed(&task.token, ok_output(201)), accepted());
    // The next step is a worker's, never the built-in session's.
    assert!(w.poll(&b, 5).is_empty());
    let next = w.take(&everything);
    assert_eq!(*next.input, json!({"n": 201}));
}

#[test]
fn a_server_error_is_retried_per_the_step_policy() {
    let mut w = world();
    w.start("Call", "h-2", json!({"url": "http://127.0.0.1:9/x"}));
    let b = builtin_session(&mut w);
    let t1 = w.take(&b);
    assert_eq!(w.fail(&t1.token, "HTTP_503", true), accepted());
    w.at(200);
    let t2 = w.take(&b);
    assert_eq!(t2.attempt, 2);
    assert_eq!(t2.idempotency_key, t1.idempotency_key);
    assert_eq!(w.succeed(&t2.token, ok_output(200)), accepted());
    assert_logs(
        &w.logs("h-2"),
        "
        + 0ms #1 WorkflowCreated
        + 0ms #2 WorkflowStarted
        + 0ms #3 StepScheduled step=call attempt=1
        + 0ms #4 StepDispatched step=call attempt=1 worker_id=orbit
        + 0ms #5 StepAttemptFailed step=call attempt=1 code=HTTP_503 retry_at=+100ms
        + 100ms #6 StepScheduled step=call attempt=2
        + 200ms #7 StepDispatched step=call attempt=2 worker_id=orbit
        + 200ms #8 StepSucceeded step=call attempt=2
        + 200ms #9 StepScheduled step=use attempt=1
        ",
    );
}

#[test]
fn an_output_without_status_violates_the_builtin_contract() {
    let mut w = world();
    w.start("Call", "h-3", json!({"url": "http://127.0.0.1:9/x"}));
    let b = builtin_session(&mut w);
    let t = w.take(&b);
    let r = w.succeed(&t.token, json!({"headers": {}, "body": null}));
    assert_eq!(r["accepted"], json!(false));
    assert!(w.logs("h-3").contains("code=OUTPUT_CONTRACT_VIOLATION"));
}

#[test]
fn an_uncertain_builtin_attempt_is_redelivered_with_the_same_key() {
    let mut w = world();
    w.start("Call", "h-4", json!({"url": "http://127.0.0.1:9/x"}));
    let b = builtin_session(&mut w);
    let t1 = w.take(&b);
    w.at(50);
    let r = w.call(Request::BuiltinUncertain {
        session_id: b.clone(),
        token: t1.token.clone(),
        reason: "orbit.http: no response within 2s after the request was sent".into(),
    });
    assert_eq!(r.body, accepted());
    let t2 = w.take(&b);
    assert!(t2.redelivery);
    assert_eq!((t2.attempt, &t2.idempotency_key), (1, &t1.idempotency_key));
    assert_eq!(w.succeed(&t2.token, ok_output(200)), accepted());
    assert_logs(
        &w.logs("h-4"),
        "
        + 0ms #1 WorkflowCreated
        + 0ms #2 WorkflowStarted
        + 0ms #3 StepScheduled step=call attempt=1
        + 0ms #4 StepDispatched step=call attempt=1 worker_id=orbit
        + 50ms #5 StepAttemptUncertain step=call attempt=1 reason=orbit.http: no response within 2s after the request was sent
        + 50ms #6 StepScheduled step=call attempt=1 redelivery=true
        + 50ms #7 StepDispatched step=call attempt=1 worker_id=orbit
        + 50ms #8 StepSucceeded step=call attempt=1
        + 50ms #9 StepScheduled step=use attempt=1
        ",
    );
}

#[test]
fn only_the_builtin_session_may_declare_an_attempt_uncertain() {
    let mut w = world();
    w.start("Call", "h-5", json!({"url": "http://127.0.0.1:9/x"}));
    let b = builtin_session(&mut w);
    let t = w.take(&b);
    let worker = w.register("w", &["*"]);
    let r = w.call(Request::BuiltinUncertain {
        session_id: worker,
        token: t.token.clone(),
        reason: "nope".into(),
    });
    assert_eq!(r.status, 404);
    assert!(!w.logs("h-5").contains("Uncertain"));
}

#[test]
fn a_restart_while_the_builtin_task_runs_records_the_seeds_reason() {
    let mut w = world();
    w.start("Call", "h-6", json!({"url": "http://127.0.0.1:9/x"}));
    let b = builtin_session(&mut w);
    let t1 = w.take(&b);
    w.at(300);
    w.restart();
    // At once, without waiting a session timeout for anyone to report.
    assert!(w.logs("h-6").contains(
        "#5 StepAttemptUncertain step=call attempt=1 reason=runtime restarted while the built-in task was running"
    ));
    let b2 = builtin_session(&mut w);
    let t2 = w.take(&b2);
    assert!(t2.redelivery);
    assert_eq!((t2.attempt, &t2.idempotency_key), (1, &t1.idempotency_key));
    // The old delivery's late success would still count; here the new one wins.
    assert_eq!(w.succeed(&t2.token, ok_output(200)), accepted());
    assert_eq!(
        w.succeed(&t1.token, ok_output(200))["reason"],
        json!("duplicate result; step already resolved")
    );
    assert_logs(
        &w.logs("h-6"),
        "
        + 0ms #1 WorkflowCreated
        + 0ms #2 WorkflowStarted
        + 0ms #3 StepScheduled step=call attempt=1
        + 0ms #4 StepDispatched step=call attempt=1 worker_id=orbit
        + 300ms #5 StepAttemptUncertain step=call attempt=1 reason=runtime restarted while the built-in task was running
        + 300ms #6 StepScheduled step=call attempt=1 redelivery=true
        + 300ms #7 StepDispatched step=call attempt=1 worker_id=orbit
        + 300ms #8 StepSucceeded step=call attempt=1
        + 300ms #9 StepScheduled step=use attempt=1
        + 300ms #10 StaleResultIgnored step=call attempt=1 outcome=duplicate
        ",
    );
}

#[test]
fn the_builtin_session_is_lost_like_any_other_when_silent() {
    let mut w = world();
    w.start("Call", "h-7", json!({"url": "http://127.0.0.1:9/x"}));
    let b = builtin_session(&mut w);
    let t = w.take(&b);
    w.heartbeat(&b, &[&t.token]);
    w.at(6_000);
    assert!(w.logs("h-7").contains(
        "StepAttemptUncertain step=call attempt=1 reason=worker `orbit` stopped responding"
    ));
}
