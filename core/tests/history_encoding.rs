//! Pins the on-disk JSON encoding of every event kind. Changing any line
//! here means changing the stored history format: that needs a migration.

#![allow(clippy::unwrap_used)]

use orbit_core::history::{
    CompensationReason, ErrorInfo, Event, EventKind, StaleOutcome, WorkflowError,
};
use serde_json::json;

fn err(code: &str) -> ErrorInfo {
    ErrorInfo {
        code: code.into(),
        message: "m".into(),
        retryable: true,
    }
}

fn every_kind() -> Vec<EventKind> {
    vec![
        EventKind::WorkflowCreated {
            workflow: "Order".into(),
            version: "1.0.0".into(),
            definition_hash: "h".into(),
            input: json!({"n": 1}),
            parent: Some("p".into()),
            traceparent: None,
        },
        EventKind::WorkflowStarted {},
        EventKind::StepFanOut {
            step: "reserve".into(),
            items: vec![json!("A")],
        },
        EventKind::StepScheduled {
            step: "reserve[0]".into(),
            attempt: 1,
            redelivery: false,
            input: json!({}).into(),
            idempotency_key: "o-7/A".into(),
            task: "inventory.reserve".into(),
            contract_version: "1.0.0".into(),
        },
        EventKind::StepDispatched {
            step: "work".into(),
            attempt: 1,
            worker_id: "flaky-1".into(),
            token: "t".into(),
        },
        EventKind::StepAttemptUncertain {
            step: "work".into(),
            attempt: 1,
            reason: "worker unregistered".into(),
        },
        EventKind::StepSucceeded {
            step: "work".into(),
            attempt: 1,
            output: json!({"v": 1}).into(),
        },
        EventKind::StepAttemptFailed {
            step: "work".into(),
            attempt: 1,
            error: err("FLAKY"),
            retry_at: Some(5),
        },
        EventKind::StepFailed {
            step: "work".into(),
            error: err("NO_TRUCK"),
        },
        EventKind::StepSkipped { step: "s".into() },
        EventKind::StaleResultIgnored {
            step: "work".into(),
            attempt: 1,
            outcome: StaleOutcome::Duplicate,
        },
        EventKind::TimerStarted {
            step: "nap".into(),
            fire_at: 9,
        },
        EventKind::TimerFired {
            step: "nap".into(),
            fire_at: 9,
        },
        EventKind::SignalReceived {
            name: "approve".into(),
            payload: json!(null),
        },
        EventKind::SignalConsumed {
            step: "approve".into(),
            signal_seq: 4,
        },
        EventKind::ChildStarted {
            step: "ship".into(),
            child_id: "p.ship".into(),
        },
        EventKind::ChildCompleted {
            step: "ship".into(),
            child_id: "p.ship".into(),
            output: json!({}),
        },
        EventKind::ChildFailed {
            step: "ship".into(),
            child_id: "p.ship".into(),
            error: err("CHILD_CANCELLED"),
        },
        EventKind::CompensationStarted {
            reason: CompensationReason::Cancelled,
            units: vec!["charge".into(), "reserve".into()],
        },
        EventKind::WorkflowCancelRequested {
            reason: Some("customer".into()),
        },
        EventKind::WorkflowCompleted { output: json!(1) },
        EventKind::WorkflowFailed {
            error: WorkflowError {
                code: "NO_TRUCK".into(),
                message: "m".into(),
                step: Some("ship".into()),
            },
        },
        EventKind::WorkflowCancelled {},
    ]
}

const PINNED: &str = r#"{"seq":1,"at":100,"type":"WorkflowCreated","workflow":"Order","version":"1.0.0","definition_hash":"h","input":{"n":1},"parent":"p"}
{"seq":2,"at":100,"type":"WorkflowStarted"}
{"seq":3,"at":100,"type":"StepFanOut","step":"reserve","items":["A"]}
{"seq":4,"at":100,"type":"StepScheduled","step":"reserve[0]","attempt":1,"redelivery":false,"input":{},"idempotency_key":"o-7/A","task":"inventory.reserve","contract_version":"1.0.0"}
{"seq":5,"at":100,"type":"StepDispatched","step":"work","attempt":1,"worker_id":"flaky-1","token":"t"}
{"seq":6,"at":100,"type":"StepAttemptUncertain","step":"work","attempt":1,"reason":"worker unregistered"}
{"seq":7,"at":100,"type":"StepSucceeded","step":"work","attempt":1,"output":{"v":1}}
{"seq":8,"at":100,"type":"StepAttemptFailed","step":"work","attempt":1,"error":{"code":"FLAKY","message":"m","retryable":true},"retry_at":5}
{"seq":9,"at":100,"type":"StepFailed","step":"work","error":{"code":"NO_TRUCK","message":"m","retryable":true}}
{"seq":10,"at":100,"type":"StepSkipped","step":"s"}
{"seq":11,"at":100,"type":"StaleResultIgnored","step":"work","attempt":1,"outcome":"duplicate"}
{"seq":12,"at":100,"type":"TimerStarted","step":"nap","fire_at":9}
{"seq":13,"at":100,"type":"TimerFired","step":"nap","fire_at":9}
{"seq":14,"at":100,"type":"SignalReceived","name":"approve","payload":null}
{"seq":15,"at":100,"type":"SignalConsumed","step":"approve","signal_seq":4}
{"seq":16,"at":100,"type":"ChildStarted","step":"ship","child_id":"p.ship"}
{"seq":17,"at":100,"type":"ChildCompleted","step":"ship","child_id":"p.ship","output":{}}
{"seq":18,"at":100,"type":"ChildFailed","step":"ship","child_id":"p.ship","error":{"code":"CHILD_CANCELLED","message":"m","retryable":true}}
{"seq":19,"at":100,"type":"CompensationStarted","reason":"cancelled","units":["charge","reserve"]}
{"seq":20,"at":100,"type":"WorkflowCancelRequested","reason":"customer"}
{"seq":21,"at":100,"type":"WorkflowCompleted","output":1}
{"seq":22,"at":100,"type":"WorkflowFailed","error":{"code":"NO_TRUCK","message":"m","step":"ship"}}
{"seq":23,"at":100,"type":"WorkflowCancelled"}"#;

#[test]
fn every_event_kind_has_a_pinned_encoding_that_round_trips() {
    let events: Vec<Event> = every_kind()
        .into_iter()
        .enumerate()
        .map(|(i, kind)| Event {
            seq: i as u64 + 1,
            at: 100,
            kind,
        })
        .collect();
    let lines: Vec<String> = events
        .iter()
        .map(|e| serde_json::to_string(e).unwrap())
        .collect();
    assert_eq!(lines.join("\n"), PINNED);
    for (line, event) in PINNED.lines().zip(&events) {
        let back: Event = serde_json::from_str(line).unwrap();
        assert_eq!(&back, event);
        let tag = format!(r#""type":"{}""#, event.kind.type_name());
        assert!(line.contains(&tag), "{line} has no {tag}");
    }
}

#[test]
fn optional_fields_default_when_absent() {
    let e: Event = serde_json::from_str(
        r#"{"seq":1,"at":0,"type":"StepAttemptFailed","step":"w","attempt":1,"error":{"code":"X"}}"#,
    )
    .unwrap();
    assert_eq!(
        e.kind,
        EventKind::StepAttemptFailed {
            step: "w".into(),
            attempt: 1,
            error: ErrorInfo {
                code: "X".into(),
                message: String::new(),
                retryable: true
            },
            retry_at: None
        }
    );
}

#[test]
fn a_created_event_keeps_a_traceparent_and_loads_without_one() {
    // Histories written before trace propagation have no `traceparent`.
    let old = r#"{"seq":1,"at":0,"type":"WorkflowCreated","workflow":"W","version":"1.0.0","definition_hash":"h","input":{}}"#;
    let e: Event = serde_json::from_str(old).unwrap();
    assert!(matches!(
        &e.kind,
        EventKind::WorkflowCreated {
            traceparent: None,
            ..
        }
    ));
    assert_eq!(serde_json::to_string(&e).unwrap(), old);
    let with = r#"{"seq":1,"at":0,"type":"WorkflowCreated","workflow":"W","version":"1.0.0","definition_hash":"h","input":{},"traceparent":"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}"#;
    let e: Event = serde_json::from_str(with).unwrap();
    assert!(matches!(
        &e.kind,
        EventKind::WorkflowCreated { traceparent: Some(t), .. }
            if t == "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    ));
    assert_eq!(serde_json::to_string(&e).unwrap(), with);
}
