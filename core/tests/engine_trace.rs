//! Trace context (issue 17): a start's valid `traceparent` is kept on
//! `WorkflowCreated` and inherited by children; an invalid one is ignored;
//! every task names its attempt's span (the seq of its `StepScheduled`) in
//! the execution's trace, retries and restarts included. The histories read
//! as before: `orbit logs` does not show the trace context.

#![allow(clippy::unwrap_used)]

mod engine_support;

use engine_support::*;
use orbit_core::engine::Start;
use orbit_core::history::EventKind;
use orbit_core::trace::{attempt_span_id, task_traceparent, trace_id, TraceParent};
use orbit_core::{Config, Request};
use serde_json::json;

const CALLER: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";

const FLOWS: &str = r#"
task "demo.work" version "1.0.0" {
    input { n: Int }
    output { v: Int }
}

workflow Plain version "1.0.0" {
    input { n: Int }
    step work {
        worker "demo.work"
        with { n: input.n }
        retry: { max_attempts: 2, backoff: 100ms, factor: 1.0, max_backoff: 1s }
    }
}

workflow Parent version "1.0.0" {
    input { n: Int }
    step kid {
        workflow Plain version "1.0.0"
        with { n: input.n }
    }
}
"#;

fn world() -> World {
    let mut w = World::new(Config::default());
    w.deploy(FLOWS);
    w
}

fn start(w: &mut World, workflow: &str, id: &str, traceparent: Option<&str>) {
    let r = w.call(Request::Start(Start {
        workflow: workflow.into(),
        version: None,
        input: json!({"n": 1}),
        execution_id: Some(id.into()),
        idempotency: None,
        traceparent: traceparent.map(str::to_owned),
    }));
    assert_eq!(r.status, 201, "{:?}", r.body);
}

/// The `traceparent` kept on an execution's `WorkflowCreated`.
fn kept(w: &World, id: &str) -> Option<String> {
    match &w.store.histories[id][0].kind {
        EventKind::WorkflowCreated { traceparent, .. } => traceparent.clone(),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_started_trace_is_kept_and_each_task_names_its_attempt_span() {
    let mut w = world();
    start(&mut w, "Plain", "t-1", Some(CALLER));
    assert_eq!(kept(&w, "t-1").as_deref(), Some(CALLER));
    let s = w.register("w-1", &["demo.*"]);
    let first = w.take(&s);
    assert_eq!(
        first.traceparent,
        task_traceparent(trace_id("t-1", Some(CALLER)), "t-1", 3)
    );
    let tp = TraceParent::parse(&first.traceparent).unwrap();
    assert_eq!(tp.trace_id, TraceParent::parse(CALLER).unwrap().trace_id);
    assert_eq!(tp.parent_id, attempt_span_id("t-1", 3));

    // The retry is another attempt, so another span (its StepScheduled is #6).
    w.fail(&first.token, "BUSY", true);
    w.advance(100);
    let second = w.take(&s);
    assert_eq!(
        second.traceparent,
        task_traceparent(trace_id("t-1", Some(CALLER)), "t-1", 6)
    );
    assert_ne!(second.traceparent, first.traceparent);

    // The history reads as it always did.
    assert_logs(
        &w.logs("t-1"),
        "
        + 0ms #1 WorkflowCreated
        + 0ms #2 WorkflowStarted
        + 0ms #3 StepScheduled step=work attempt=1
        + 0ms #4 StepDispatched step=work attempt=1 worker_id=w-1
        + 0ms #5 StepAttemptFailed step=work attempt=1 code=BUSY retry_at=+100ms
        + 100ms #6 StepScheduled step=work attempt=2
        + 100ms #7 StepDispatched step=work attempt=2 worker_id=w-1
        ",
    );
}

#[test]
fn a_task_after_a_restart_keeps_the_trace() {
    let mut w = world();
    start(&mut w, "Plain", "t-2", Some(CALLER));
    w.restart();
    let s = w.register("w-1", &["demo.*"]);
    let t = w.take(&s);
    assert_eq!(
        t.traceparent,
        task_traceparent(trace_id("t-2", Some(CALLER)), "t-2", 3)
    );
}

#[test]
fn a_child_inherits_its_parents_trace() {
    let mut w = world();
    start(&mut w, "Parent", "p", Some(CALLER));
    assert_eq!(kept(&w, "p.kid").as_deref(), Some(CALLER));
    let s = w.register("w-1", &["demo.*"]);
    let t = w.take(&s);
    assert_eq!(&*t.execution_id, "p.kid");
    assert_eq!(
        t.traceparent,
        task_traceparent(trace_id("p.kid", Some(CALLER)), "p.kid", 3)
    );
}

#[test]
fn without_a_valid_traceparent_the_trace_is_derived_from_the_execution() {
    let mut w = world();
    for (id, header) in [
        ("n-1", None),
        // Upper-case hex, an all-zero trace id, another version: ignored.
        (
            "n-2",
            Some("00-0AF7651916CD43DD8448EB211C80319C-B7AD6B7169203331-01"),
        ),
        (
            "n-3",
            Some("00-00000000000000000000000000000000-b7ad6b7169203331-01"),
        ),
        (
            "n-4",
            Some("01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"),
        ),
    ] {
        start(&mut w, "Plain", id, header);
        assert_eq!(kept(&w, id), None, "{id}");
    }
    let s = w.register("w-1", &["demo.*"]);
    for _ in 0..4 {
        let t = w.take(&s);
        let tp = TraceParent::parse(&t.traceparent).unwrap();
        assert_eq!(tp.trace_id, trace_id(&t.execution_id, None));
        assert_eq!(tp.parent_id, attempt_span_id(&t.execution_id, 3));
        assert_eq!(tp.flags, 1);
    }
    // The stored event has no `traceparent` member at all.
    let json = serde_json::to_value(&w.store.histories["n-1"][0]).unwrap();
    assert!(json.get("traceparent").is_none(), "{json}");
}
