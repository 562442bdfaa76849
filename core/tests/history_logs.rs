//! `orbit logs` formatting: offsets, the field table, and seed `003_…`'s
//! listing reproduced verbatim from its events.

#![allow(clippy::unwrap_used)]

use orbit_core::history::logs::{format_history, offset};
use orbit_core::history::{ErrorInfo, Event, EventKind};
use serde_json::json;

#[test]
fn offsets() {
    assert_eq!(offset(0), "0ms");
    assert_eq!(offset(39), "39ms");
    assert_eq!(offset(999), "999ms");
    assert_eq!(offset(1000), "1.0s");
    assert_eq!(offset(1049), "1.0s");
    assert_eq!(offset(1050), "1.1s", "tenths rounded half up");
    assert_eq!(offset(5_100), "5.1s");
    assert_eq!(offset(32_149), "32.1s");
    assert_eq!(offset(59_999), "60.0s");
}

fn ev(seq: u64, at: u64, kind: EventKind) -> Event {
    Event { seq, at, kind }
}

fn scheduled(step: &str, attempt: u32, redelivery: bool, key: &str) -> EventKind {
    EventKind::StepScheduled {
        step: step.into(),
        attempt,
        redelivery,
        input: json!({"n": 1}).into(),
        idempotency_key: key.into(),
        task: "demo.work".into(),
        contract_version: "1.0.0".into(),
    }
}

fn dispatched(attempt: u32, worker: &str) -> EventKind {
    EventKind::StepDispatched {
        step: "work".into(),
        attempt,
        worker_id: worker.into(),
        token: "t".into(),
    }
}

#[test]
fn seed_003_listing_verbatim() {
    let t0 = 1_700_000_000_000;
    let events = vec![
        ev(
            1,
            t0,
            EventKind::WorkflowCreated {
                workflow: "Plain".into(),
                version: "1.0.0".into(),
                definition_hash: "h".into(),
                input: json!({"n": 1}),
                parent: None,
                traceparent: None,
            },
        ),
        ev(2, t0, EventKind::WorkflowStarted {}),
        ev(3, t0 + 1, scheduled("work", 1, false, "u-1/work")),
        ev(4, t0 + 39, dispatched(1, "flaky-1")),
        ev(
            5,
            t0 + 5_100,
            EventKind::StepAttemptUncertain {
                step: "work".into(),
                attempt: 1,
                reason: "worker `flaky-1` stopped responding".into(),
            },
        ),
        ev(6, t0 + 5_100, scheduled("work", 1, true, "u-1/work")),
        ev(7, t0 + 6_600, dispatched(1, "flaky-2")),
        ev(
            8,
            t0 + 6_700,
            EventKind::StepSucceeded {
                step: "work".into(),
                attempt: 1,
                output: json!({}).into(),
            },
        ),
        ev(
            9,
            t0 + 6_700,
            EventKind::WorkflowCompleted { output: json!({}) },
        ),
    ];
    assert_eq!(
        format_history("u-1", &events),
        "+ 0ms #1 WorkflowCreated
+ 0ms #2 WorkflowStarted
+ 1ms #3 StepScheduled step=work attempt=1
+ 39ms #4 StepDispatched step=work attempt=1 worker_id=flaky-1
+ 5.1s #5 StepAttemptUncertain step=work attempt=1 reason=worker `flaky-1` stopped responding
+ 5.1s #6 StepScheduled step=work attempt=1 redelivery=true
+ 6.6s #7 StepDispatched step=work attempt=1 worker_id=flaky-2
+ 6.7s #8 StepSucceeded step=work attempt=1
+ 6.7s #9 WorkflowCompleted
"
    );
}

#[test]
fn field_table() {
    let err = |code: &str| ErrorInfo {
        code: code.into(),
        message: "ignored".into(),
        retryable: true,
    };
    let events = vec![
        ev(1, 0, scheduled("charge", 1, true, "charge-o-9")),
        ev(
            2,
            50,
            EventKind::StepAttemptFailed {
                step: "ship".into(),
                attempt: 1,
                error: err("NO_TRUCK"),
                retry_at: Some(1_050),
            },
        ),
        ev(
            3,
            60,
            EventKind::StepFailed {
                step: "ship".into(),
                error: err("NO_TRUCK"),
            },
        ),
        ev(
            4,
            70,
            EventKind::StepFanOut {
                step: "reserve".into(),
                items: vec![json!(1), json!(2)],
            },
        ),
        ev(
            5,
            80,
            EventKind::TimerStarted {
                step: "nap".into(),
                fire_at: 1_000,
            },
        ),
        ev(
            6,
            90,
            EventKind::StaleResultIgnored {
                step: "work".into(),
                attempt: 2,
                outcome: orbit_core::history::StaleOutcome::Failure,
            },
        ),
        ev(7, 95, EventKind::WorkflowCancelRequested { reason: None }),
        ev(
            8,
            99,
            EventKind::ChildStarted {
                step: "ship".into(),
                child_id: "x.ship".into(),
            },
        ),
        ev(
            9,
            100,
            EventKind::WorkflowFailed {
                error: orbit_core::history::WorkflowError {
                    code: "NO_TRUCK".into(),
                    message: "m".into(),
                    step: Some("ship".into()),
                },
            },
        ),
    ];
    assert_eq!(
        format_history("x", &events),
        "+ 0ms #1 StepScheduled step=charge attempt=1 redelivery=true key=charge-o-9
+ 50ms #2 StepAttemptFailed step=ship attempt=1 code=NO_TRUCK retry_at=+1.1s
+ 60ms #3 StepFailed step=ship code=NO_TRUCK
+ 70ms #4 StepFanOut step=reserve items=2
+ 80ms #5 TimerStarted step=nap fire_at=+1.0s
+ 90ms #6 StaleResultIgnored step=work attempt=2 outcome=failure
+ 95ms #7 WorkflowCancelRequested
+ 99ms #8 ChildStarted step=ship child_id=x.ship
+ 100ms #9 WorkflowFailed code=NO_TRUCK step=ship
"
    );
}
