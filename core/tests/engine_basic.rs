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
    assert_eq!(&*t.idempotency_key, "p-1/work");
    w.at(30);
    assert_eq!(w.fail(&t.token, "FLAKY", true), accepted());
    w.at(130);
    w.at(131);
    let t2 = w.take(&s);
    assert_eq!((t2.attempt, t2.redelivery), (2, false));
    assert_eq!(&*t2.idempotency_key, "p-1/work");
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
    assert_eq!(
        w.engine.projection("p-1").unwrap().output,
        Some(json!({"v": 7}))
    );
}

const ORDER: &str = r#"
type Item = { sku: String, qty: Int }

task "inventory.reserve" version "1.0.0" {
    input { order_id: String, items: [Item] }
    output { reservation_id: String }
}
task "inventory.release" version "1.0.0" {
    input { reservation_id: String }
    output { }
}
task "payments.charge" version "1.0.0" {
    input { order_id: String }
    output { transaction_id: String }
}
task "payments.refund" version "1.0.0" {
    input { transaction_id: String }
    output { }
}
task "shipping.create" version "1.0.0" {
    input { order_id: String }
    output { tracking: String }
}

workflow Reserve version "1.0.0" {
    input { order_id: String, items: [Item] }
    step reserve {
        for item in input.items
        worker "inventory.reserve"
        with { order_id: input.order_id, items: [item] }
        idempotency_key: input.order_id + "/" + item.sku
    }
    output { ids: reserve }
}

workflow Order version "1.0.0" {
    input { order_id: String }
    step reserve {
        worker "inventory.reserve"
        with { order_id: input.order_id, items: [] }
        compensate {
            worker "inventory.release"
            with { reservation_id: reserve.reservation_id }
        }
    }
    step charge {
        worker "payments.charge"
        with { order_id: input.order_id }
        idempotency_key: "charge-" + input.order_id
        after: [reserve]
        compensate {
            worker "payments.refund"
            with { transaction_id: charge.transaction_id }
            idempotency_key: "refund-" + charge.transaction_id
        }
    }
    step ship {
        worker "shipping.create"
        with { order_id: input.order_id }
        retry: { max_attempts: 2, backoff: 1s, factor: 2.0, max_backoff: 10s }
        after: [charge]
    }
    output { tracking: ship.tracking }
}
"#;

#[test]
fn fan_out_with_custom_keys_keeps_index_order() {
    let mut w = World::default_world();
    w.deploy(ORDER);
    let items = json!([{"sku": "A", "qty": 1}, {"sku": "B", "qty": 2}]);
    w.start("Reserve", "r-1", json!({"order_id": "o-7", "items": items}));
    let inv1 = w.register("inv-1", &["inventory.*"]);
    let inv2 = w.register("inv-2", &["inventory.reserve"]);
    w.at(5);
    let a = w.take(&inv1);
    let b = w.take(&inv2);
    assert_eq!(
        (a.step_id.as_str(), &*a.idempotency_key),
        ("reserve[0]", "o-7/A")
    );
    assert_eq!(
        (b.step_id.as_str(), &*b.idempotency_key),
        ("reserve[1]", "o-7/B")
    );
    w.at(20);
    w.succeed(&b.token, json!({"reservation_id": "rb"}));
    w.at(25);
    w.succeed(&a.token, json!({"reservation_id": "ra"}));
    assert_logs(
        &w.logs("r-1"),
        "
        + 0ms #1 WorkflowCreated
        + 0ms #2 WorkflowStarted
        + 0ms #3 StepFanOut step=reserve items=2
        + 0ms #4 StepScheduled step=reserve[0] attempt=1 key=o-7/A
        + 0ms #5 StepScheduled step=reserve[1] attempt=1 key=o-7/B
        + 5ms #6 StepDispatched step=reserve[0] attempt=1 worker_id=inv-1
        + 5ms #7 StepDispatched step=reserve[1] attempt=1 worker_id=inv-2
        + 20ms #8 StepSucceeded step=reserve[1] attempt=1
        + 25ms #9 StepSucceeded step=reserve[0] attempt=1
        + 25ms #10 WorkflowCompleted
        ",
    );
    let out = w.engine.projection("r-1").unwrap().output.clone().unwrap();
    assert_eq!(
        out,
        json!({"ids": [{"reservation_id": "ra"}, {"reservation_id": "rb"}]})
    );
}

#[test]
fn empty_fan_out_succeeds_at_once() {
    let mut w = World::default_world();
    w.deploy(ORDER);
    w.start("Reserve", "r-0", json!({"order_id": "o-0", "items": []}));
    assert_logs(
        &w.logs("r-0"),
        "
        + 0ms #1 WorkflowCreated
        + 0ms #2 WorkflowStarted
        + 0ms #3 StepFanOut step=reserve items=0
        + 0ms #4 WorkflowCompleted
        ",
    );
    assert_eq!(
        w.engine.projection("r-0").unwrap().output,
        Some(json!({"ids": []}))
    );
}

#[test]
fn failure_compensates_newest_success_first() {
    let mut w = World::default_world();
    w.deploy(ORDER);
    w.start("Order", "o-7", json!({"order_id": "o-7"}));
    let inv = w.register("inv-1", &["inventory.*"]);
    let pay = w.register("pay-1", &["payments.*"]);
    let ship = w.register("ship-1", &["shipping.*"]);
    w.at(4);
    let t = w.take(&inv);
    w.at(9);
    w.succeed(&t.token, json!({"reservation_id": "res-1"}));
    w.at(10);
    let t = w.take(&pay);
    assert_eq!(&*t.idempotency_key, "charge-o-7");
    w.at(40);
    w.succeed(&t.token, json!({"transaction_id": "tx-91"}));
    w.at(41);
    let t = w.take(&ship);
    w.at(50);
    w.fail(&t.token, "NO_TRUCK", true);
    w.at(1050);
    let t = w.take(&ship);
    assert_eq!(t.attempt, 2);
    w.fail(&t.token, "NO_TRUCK", true);
    let t = w.take(&pay);
    assert_eq!(
        (t.step_id.as_str(), &*t.idempotency_key),
        ("compensate:charge", "refund-tx-91")
    );
    assert_eq!(*t.input, json!({"transaction_id": "tx-91"}));
    assert!(w.poll(&inv, 1).is_empty(), "one compensation at a time");
    w.succeed(&t.token, json!({}));
    let t = w.take(&inv);
    assert_eq!(
        (t.step_id.as_str(), &*t.idempotency_key),
        ("compensate:reserve", "o-7/compensate:reserve")
    );
    w.succeed(&t.token, json!({}));
    assert_logs(
        &w.logs("o-7"),
        "
        + 0ms #1 WorkflowCreated
        + 0ms #2 WorkflowStarted
        + 0ms #3 StepScheduled step=reserve attempt=1
        + 4ms #4 StepDispatched step=reserve attempt=1 worker_id=inv-1
        + 9ms #5 StepSucceeded step=reserve attempt=1
        + 9ms #6 StepScheduled step=charge attempt=1 key=charge-o-7
        + 10ms #7 StepDispatched step=charge attempt=1 worker_id=pay-1
        + 40ms #8 StepSucceeded step=charge attempt=1
        + 40ms #9 StepScheduled step=ship attempt=1
        + 41ms #10 StepDispatched step=ship attempt=1 worker_id=ship-1
        + 50ms #11 StepAttemptFailed step=ship attempt=1 code=NO_TRUCK retry_at=+1.1s
        + 1.1s #12 StepScheduled step=ship attempt=2
        + 1.1s #13 StepDispatched step=ship attempt=2 worker_id=ship-1
        + 1.1s #14 StepAttemptFailed step=ship attempt=2 code=NO_TRUCK
        + 1.1s #15 StepFailed step=ship code=NO_TRUCK
        + 1.1s #16 CompensationStarted reason=failed units=charge,reserve
        + 1.1s #17 StepScheduled step=compensate:charge attempt=1 key=refund-tx-91
        + 1.1s #18 StepDispatched step=compensate:charge attempt=1 worker_id=pay-1
        + 1.1s #19 StepSucceeded step=compensate:charge attempt=1
        + 1.1s #20 StepScheduled step=compensate:reserve attempt=1
        + 1.1s #21 StepDispatched step=compensate:reserve attempt=1 worker_id=inv-1
        + 1.1s #22 StepSucceeded step=compensate:reserve attempt=1
        + 1.1s #23 WorkflowFailed code=NO_TRUCK step=ship
        ",
    );
    assert_eq!(w.status("o-7"), "failed");
}

#[test]
fn failure_with_nothing_to_compensate_ends_at_once() {
    let mut w = World::default_world();
    w.deploy(PLAIN);
    w.start("Plain", "p-2", json!({"n": 1}));
    let s = w.register("w-1", &["*"]);
    let t = w.take(&s);
    w.fail(&t.token, "BAD", false);
    assert_logs(
        &w.logs("p-2"),
        "
        + 0ms #1 WorkflowCreated
        + 0ms #2 WorkflowStarted
        + 0ms #3 StepScheduled step=work attempt=1
        + 0ms #4 StepDispatched step=work attempt=1 worker_id=w-1
        + 0ms #5 StepAttemptFailed step=work attempt=1 code=BAD
        + 0ms #6 StepFailed step=work code=BAD
        + 0ms #7 WorkflowFailed code=BAD step=work
        ",
    );
}

#[test]
fn cancel_with_step_in_flight_counts_late_success_and_compensates() {
    let mut w = World::default_world();
    w.deploy(ORDER);
    w.start("Order", "o-8", json!({"order_id": "o-8"}));
    let inv = w.register("inv-1", &["inventory.*"]);
    let pay = w.register("pay-1", &["payments.*"]);
    w.at(4);
    let t = w.take(&inv);
    w.at(9);
    w.succeed(&t.token, json!({"reservation_id": "res-1"}));
    w.at(10);
    let charge = w.take(&pay);
    w.at(15);
    let r = w.call(orbit_core::Request::Cancel {
        execution_id: "o-8".into(),
        reason: Some("customer".into()),
        idempotency: None,
    });
    assert_eq!(r.status, 202);
    assert_eq!(
        w.heartbeat(&pay, &[&charge.token]),
        vec![charge.token.clone()]
    );
    let twice = w.call(orbit_core::Request::Cancel {
        execution_id: "o-8".into(),
        reason: Some("again".into()),
        idempotency: None,
    });
    assert_eq!(twice.status, 202, "cancelling twice is a no-op");
    w.at(60);
    assert_eq!(
        w.succeed(&charge.token, json!({"transaction_id": "tx-1"})),
        accepted()
    );
    let t = w.take(&pay);
    assert_eq!(t.step_id, "compensate:charge");
    w.at(70);
    w.succeed(&t.token, json!({}));
    let t = w.take(&inv);
    w.at(95);
    w.succeed(&t.token, json!({}));
    assert_logs(
        &w.logs("o-8"),
        "
        + 0ms #1 WorkflowCreated
        + 0ms #2 WorkflowStarted
        + 0ms #3 StepScheduled step=reserve attempt=1
        + 4ms #4 StepDispatched step=reserve attempt=1 worker_id=inv-1
        + 9ms #5 StepSucceeded step=reserve attempt=1
        + 9ms #6 StepScheduled step=charge attempt=1 key=charge-o-8
        + 10ms #7 StepDispatched step=charge attempt=1 worker_id=pay-1
        + 15ms #8 WorkflowCancelRequested reason=customer
        + 60ms #9 StepSucceeded step=charge attempt=1
        + 60ms #10 CompensationStarted reason=cancelled units=charge,reserve
        + 60ms #11 StepScheduled step=compensate:charge attempt=1 key=refund-tx-1
        + 60ms #12 StepDispatched step=compensate:charge attempt=1 worker_id=pay-1
        + 70ms #13 StepSucceeded step=compensate:charge attempt=1
        + 70ms #14 StepScheduled step=compensate:reserve attempt=1
        + 70ms #15 StepDispatched step=compensate:reserve attempt=1 worker_id=inv-1
        + 95ms #16 StepSucceeded step=compensate:reserve attempt=1
        + 95ms #17 WorkflowCancelled
        ",
    );
    assert_eq!(w.status("o-8"), "cancelled");
    let again = w.call(orbit_core::Request::Cancel {
        execution_id: "o-8".into(),
        reason: None,
        idempotency: None,
    });
    assert_eq!(again.error_code(), Some("EXECUTION_FINISHED"));
}

#[test]
fn cancel_withdraws_a_queued_first_delivery() {
    let mut w = World::default_world();
    w.deploy(ORDER);
    w.start("Order", "o-9", json!({"order_id": "o-9"}));
    w.at(15);
    let r = w.call(orbit_core::Request::Cancel {
        execution_id: "o-9".into(),
        reason: None,
        idempotency: None,
    });
    assert_eq!(r.status, 202);
    let twice = w.call(orbit_core::Request::Cancel {
        execution_id: "o-9".into(),
        reason: None,
        idempotency: None,
    });
    assert_eq!(
        twice.error_code(),
        Some("EXECUTION_FINISHED"),
        "it ended at once"
    );
    assert_logs(
        &w.logs("o-9"),
        "
        + 0ms #1 WorkflowCreated
        + 0ms #2 WorkflowStarted
        + 0ms #3 StepScheduled step=reserve attempt=1
        + 15ms #4 WorkflowCancelRequested
        + 15ms #5 StepFailed step=reserve code=CANCELLED
        + 15ms #6 WorkflowCancelled
        ",
    );
}

const NAP: &str = r#"
workflow Nap version "1.0.0" {
    input { }
    step nap { sleep 1s }
    step approve { signal "approve" after: [nap] }
    output { ok: approve }
}
"#;

#[test]
fn early_signal_is_buffered_and_sleep_never_fires_early() {
    let mut w = World::default_world();
    w.deploy(NAP);
    w.start("Nap", "n-1", json!({}));
    w.at(200);
    let r = w.call(orbit_core::Request::Signal {
        execution_id: "n-1".into(),
        name: "approve".into(),
        payload: json!({"by": "ann"}),
        idempotency: None,
    });
    assert_eq!(r.body, json!({"seq": 4}));
    w.at(999);
    assert_eq!(w.status("n-1"), "running");
    w.at(1000);
    assert_logs(
        &w.logs("n-1"),
        "
        + 0ms #1 WorkflowCreated
        + 0ms #2 WorkflowStarted
        + 0ms #3 TimerStarted step=nap fire_at=+1.0s
        + 200ms #4 SignalReceived name=approve seq=4
        + 1.0s #5 TimerFired step=nap
        + 1.0s #6 SignalConsumed step=approve signal_seq=4
        + 1.0s #7 WorkflowCompleted
        ",
    );
    assert_eq!(
        w.engine.projection("n-1").unwrap().output,
        Some(json!({"ok": {"by": "ann"}}))
    );
    let late = w.call(orbit_core::Request::Signal {
        execution_id: "n-1".into(),
        name: "approve".into(),
        payload: json!(null),
        idempotency: None,
    });
    assert_eq!(late.error_code(), Some("EXECUTION_FINISHED"));
}
