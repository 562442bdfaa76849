//! Child workflow scenarios: completion, failure, cancellation (of the
//! child, and of the parent), deterministic ids, and admission bypass.

#![allow(clippy::unwrap_used)]

mod engine_support;

use engine_support::*;
use orbit_core::{Config, Request};
use serde_json::json;

const FAMILY: &str = r#"
task "shipping.create" version "1.0.0" {
    input { order_id: String }
    output { tracking: String }
}

workflow Shipping version "1.0.0" {
    input { order_id: String }
    step label {
        worker "shipping.create"
        with { order_id: input.order_id }
        retry: { max_attempts: 1 }
    }
    output { tracking: label.tracking }
}

workflow Parent version "1.0.0" {
    input { order_id: String }
    step ship {
        workflow Shipping version "1.0.0"
        with { order_id: input.order_id }
    }
    output { tracking: ship.tracking }
}

workflow Fleet version "1.0.0" {
    input { orders: [String] }
    step ship {
        for o in input.orders
        workflow Shipping version "1.0.0"
        with { order_id: o }
    }
    output { all: ship }
}
"#;

#[test]
fn child_completes_and_its_output_is_the_steps() {
    let mut w = World::default_world();
    w.deploy(FAMILY);
    w.start("Parent", "p", json!({"order_id": "o-1"}));
    let s = w.register("ship-1", &["shipping.*"]);
    let t = w.take(&s);
    assert_eq!(&*t.execution_id, "p.ship");
    assert_eq!(&*t.idempotency_key, "p.ship/label");
    w.at(10);
    w.succeed(&t.token, json!({"tracking": "TR-1"}));
    assert_logs(
        &w.logs("p"),
        "
        + 0ms #1 WorkflowCreated
        + 0ms #2 WorkflowStarted
        + 0ms #3 ChildStarted step=ship child_id=p.ship
        + 10ms #4 ChildCompleted step=ship child_id=p.ship
        + 10ms #5 WorkflowCompleted
        ",
    );
    assert_eq!(
        w.engine.projection("p").unwrap().output,
        Some(json!({"tracking": "TR-1"}))
    );
    let child = w.engine.projection("p.ship").unwrap();
    assert_eq!(child.parent.as_deref(), Some("p"));
    assert_eq!(child.status.as_str(), "completed");
}

#[test]
fn child_failure_fails_the_step_with_its_code() {
    let mut w = World::default_world();
    w.deploy(FAMILY);
    w.start("Parent", "pf", json!({"order_id": "o-1"}));
    let s = w.register("ship-1", &["shipping.*"]);
    let t = w.take(&s);
    w.fail(&t.token, "NO_TRUCK", true);
    assert_logs(
        &w.logs("pf"),
        "
        + 0ms #1 WorkflowCreated
        + 0ms #2 WorkflowStarted
        + 0ms #3 ChildStarted step=ship child_id=pf.ship
        + 0ms #4 ChildFailed step=ship child_id=pf.ship
        + 0ms #5 WorkflowFailed code=NO_TRUCK step=ship
        ",
    );
}

#[test]
fn cancelled_child_fails_the_step_with_child_cancelled() {
    let mut w = World::default_world();
    w.deploy(FAMILY);
    w.start("Parent", "pc", json!({"order_id": "o-1"}));
    let r = w.call(Request::Cancel {
        execution_id: "pc.ship".into(),
        reason: None,
        idempotency: None,
    });
    assert_eq!(r.status, 202);
    assert_eq!(w.status("pc.ship"), "cancelled");
    let p = w.engine.projection("pc").unwrap();
    assert_eq!(p.error.as_ref().unwrap().code, "CHILD_CANCELLED");
}

#[test]
fn cancelling_the_parent_cancels_running_children() {
    let mut w = World::default_world();
    w.deploy(FAMILY);
    w.start("Fleet", "f", json!({"orders": ["a", "b"]}));
    let s = w.register("ship-1", &["shipping.*"]);
    let t = w.take(&s);
    assert_eq!(&*t.execution_id, "f.ship.0");
    w.at(5);
    w.call(Request::Cancel {
        execution_id: "f".into(),
        reason: Some("stop".into()),
        idempotency: None,
    });
    // f.ship.1's task was never dispatched: withdrawn at once; f.ship.0's is
    // in flight and must settle first.
    assert_eq!(w.status("f.ship.1"), "cancelled");
    assert_eq!(w.status("f"), "running");
    w.at(8);
    w.fail(&t.token, "CANCELLED", false);
    assert_eq!(w.status("f.ship.0"), "cancelled");
    assert_eq!(w.status("f"), "cancelled");
    assert_logs(
        &w.logs("f"),
        "
        + 0ms #1 WorkflowCreated
        + 0ms #2 WorkflowStarted
        + 0ms #3 StepFanOut step=ship items=2
        + 0ms #4 ChildStarted step=ship[0] child_id=f.ship.0
        + 0ms #5 ChildStarted step=ship[1] child_id=f.ship.1
        + 5ms #6 WorkflowCancelRequested reason=stop
        + 5ms #7 ChildFailed step=ship[1] child_id=f.ship.1
        + 8ms #8 ChildFailed step=ship[0] child_id=f.ship.0
        + 8ms #9 WorkflowCancelled
        ",
    );
}

#[test]
fn children_bypass_admission_caps() {
    let mut w = World::new(Config {
        max_active_executions: Some(1),
        ..Config::default()
    });
    w.deploy(FAMILY);
    w.start("Parent", "a", json!({"order_id": "o-1"}));
    assert_eq!(w.status("a.ship"), "running");
    w.start("Parent", "b", json!({"order_id": "o-2"}));
    assert_eq!(w.status("b"), "pending");
    let s = w.register("ship-1", &["shipping.*"]);
    let t = w.take(&s);
    w.at(10);
    w.succeed(&t.token, json!({"tracking": "T"}));
    assert_eq!(w.status("a"), "completed");
    assert_eq!(w.status("b"), "running", "admitted when a slot freed");
    assert_logs(
        &w.logs("b"),
        "
        + 0ms #1 WorkflowCreated
        + 10ms #2 WorkflowStarted
        + 10ms #3 ChildStarted step=ship child_id=b.ship
        ",
    );
}
