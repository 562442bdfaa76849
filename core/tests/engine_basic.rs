//! Engine scenarios: retries, fan-out, compensation, cancellation, signals
//! and sleep — each expected history written as `orbit logs` prints it.

#![allow(clippy::unwrap_used)]

mod engine_support;

use engine_support::*;
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
    output { v: work.v }
}
"#;

#[test]
fn retry_then_success() {
    let mut w = World::default_world();
    assert_eq!(w.deploy(PLAIN).status, 200);
    let r = w.start("Plain", "p-1", json!({"n": 1}));
    assert_eq!(r.status, 201);
    assert_eq!(r.body, json!({"execution_id": "p-1", "created": true}));
    let s = w.register("w-1", &["demo.*"]);
    w.at(12);
    let t = w.take(&s);
    assert_eq!(t.idempotency_key, "p-1/work");
    w.at(30);
    assert_eq!(w.fail(&t.token, "FLAKY", true), accepted());
    w.at(130);
    w.at(131);
    let t2 = w.take(&s);
    assert_eq!((t2.attempt, t2.redelivery), (2, false));
    assert_eq!(t2.idempotency_key, "p-1/work");
    w.at(140);
    assert_eq!(w.succeed(&t2.token, json!({"v": 7})), accepted());
    assert_logs(
        &w.logs("p-1"),
        "
        + 0ms #1 WorkflowCreated
        + 0ms #2 WorkflowStarted
        + 0ms #3 StepScheduled step=work attempt=1
        + 12ms #4 StepDispatched step=work attempt=1 worker_id=w-1
        + 30ms #5 StepAttemptFailed step=work attempt=1 code=FLAKY retry_at=+130ms
        + 130ms #6 StepScheduled step=work attempt=2
        + 131ms #7 StepDispatched step=work attempt=2 worker_id=w-1
        + 140ms #8 StepSucceeded step=work attempt=2
        + 140ms #9 WorkflowCompleted
        ",
    );
    assert_eq!(w.status("p-1"), "completed");
    assert_eq!(w.engine.projection("p-1").unwrap().output, Some(json!({"v": 7})));
}
