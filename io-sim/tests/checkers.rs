//! The checkers catch doctored histories: each test plants one bug in an
//! otherwise legal history and asserts the right invariant fires.
#![allow(clippy::unwrap_used)]

use orbit_core::history::{CompensationReason, ErrorInfo, Event, EventKind, WorkflowError};
use orbit_io_sim::check::{self, durability::Fact, Invariant};
use orbit_io_sim::payment::Payments;
use orbit_io_sim::workload;
use serde_json::json;

fn ev(seq: u64, kind: EventKind) -> Event {
    Event {
        seq,
        at: 1000 + seq,
        kind,
    }
}

fn scheduled(step: &str, attempt: u32, redelivery: bool) -> EventKind {
    EventKind::StepScheduled {
        step: step.into(),
        attempt,
        redelivery,
        input: json!({"n": 1}).into(),
        idempotency_key: format!("x/{step}"),
        task: "work.step".into(),
        contract_version: "1.0.0".into(),
    }
}

fn dispatched(step: &str, attempt: u32, token: &str) -> EventKind {
    EventKind::StepDispatched {
        step: step.into(),
        attempt,
        worker_id: "w".into(),
        token: token.into(),
    }
}

fn succeeded(step: &str, attempt: u32) -> EventKind {
    EventKind::StepSucceeded {
        step: step.into(),
        attempt,
        output: json!({"n": 1}).into(),
    }
}

fn history(kinds: Vec<EventKind>) -> Vec<Event> {
    let mut all = vec![
        EventKind::WorkflowCreated {
            workflow: "Plain".into(),
            version: "1.0.0".into(),
            definition_hash: "h".into(),
            input: json!({"n": 1}),
            parent: None,
            traceparent: None,
        },
        EventKind::WorkflowStarted {},
    ];
    all.extend(kinds);
    all.into_iter()
        .enumerate()
        .map(|(i, k)| ev(i as u64 + 1, k))
        .collect()
}

fn invariant_of(events: &[Event]) -> Option<Invariant> {
    check::history("x", events, None).err().map(|v| v.invariant)
}

#[test]
fn a_legal_history_passes() {
    let h = history(vec![
        scheduled("first", 1, false),
        dispatched("first", 1, "t1"),
        EventKind::StepAttemptUncertain {
            step: "first".into(),
            attempt: 1,
            reason: "worker `w` stopped responding".into(),
        },
        scheduled("first", 1, true),
        dispatched("first", 1, "t2"),
        succeeded("first", 1),
        EventKind::StaleResultIgnored {
            step: "first".into(),
            attempt: 1,
            outcome: orbit_core::history::StaleOutcome::Duplicate,
        },
        EventKind::WorkflowCompleted { output: json!({}) },
    ]);
    assert_eq!(invariant_of(&h), None);
}

#[test]
fn two_successes_for_one_unit_break_invariant_1() {
    let h = history(vec![
        scheduled("first", 1, false),
        dispatched("first", 1, "t1"),
        succeeded("first", 1),
        succeeded("first", 1),
    ]);
    let v = check::history("x", &h, None).unwrap_err();
    assert_eq!(v.invariant, Invariant::OneSuccess);
    assert_eq!(v.unit.as_deref(), Some("first"));
    assert!(!v.last_events.is_empty());
}

#[test]
fn a_gap_in_seq_breaks_invariant_3() {
    let mut h = history(vec![scheduled("first", 1, false)]);
    h[2].seq = 4;
    assert_eq!(invariant_of(&h), Some(Invariant::OneWriter));
}

#[test]
fn dispatching_an_unscheduled_unit_breaks_invariant_4() {
    let h = history(vec![dispatched("first", 1, "t1")]);
    assert_eq!(invariant_of(&h), Some(Invariant::WellFormed));
}

#[test]
fn an_uncertain_attempt_treated_as_failed_breaks_invariant_4() {
    // After an uncertain attempt the next scheduling must be a redelivery of
    // the same attempt, not attempt 2.
    let h = history(vec![
        scheduled("first", 1, false),
        dispatched("first", 1, "t1"),
        EventKind::StepAttemptUncertain {
            step: "first".into(),
            attempt: 1,
            reason: "worker `w` stopped responding".into(),
        },
        scheduled("first", 2, false),
    ]);
    assert_eq!(invariant_of(&h), Some(Invariant::WellFormed));
}

#[test]
fn a_changed_key_on_retry_breaks_invariant_6() {
    let mut retry = scheduled("first", 2, false);
    if let EventKind::StepScheduled {
        idempotency_key, ..
    } = &mut retry
    {
        *idempotency_key = "x/first#2".into();
    }
    let h = history(vec![
        scheduled("first", 1, false),
        dispatched("first", 1, "t1"),
        EventKind::StepAttemptFailed {
            step: "first".into(),
            attempt: 1,
            error: ErrorInfo {
                code: "TRANSIENT".into(),
                message: String::new(),
                retryable: true,
            },
            retry_at: Some(2000),
        },
        retry,
    ]);
    assert_eq!(invariant_of(&h), Some(Invariant::StableKeys));
}

#[test]
fn an_effect_applied_under_two_keys_breaks_invariant_6() {
    let mut p = Payments::default();
    p.perform("e", "charge", "k", || json!(1));
    p.perform("e", "charge", "k", || json!(2));
    assert!(check::keys::payments(&p).is_ok());
    p.perform("e", "charge", "k#2", || json!(3));
    let v = check::keys::payments(&p).unwrap_err();
    assert_eq!(v.invariant, Invariant::StableKeys);
    // A worker that does not deduplicate applies the effect each time: at
    // least once is what the runtime promises.
    let mut q = Payments::default();
    q.perform_each("e", "charge", "k", json!(1));
    q.perform_each("e", "charge", "k", json!(1));
    assert!(check::keys::payments(&q).is_ok());
}

#[test]
fn an_acknowledged_result_missing_from_history_breaks_invariant_2() {
    let h = history(vec![
        scheduled("first", 1, false),
        dispatched("first", 1, "t1"),
    ]);
    let ok = Fact::Dispatched {
        execution: "x".into(),
        unit: "first".into(),
        token: "t1".into(),
    };
    assert!(check::durability::check(&ok, &h).is_ok());
    let lost = Fact::Succeeded {
        execution: "x".into(),
        unit: "first".into(),
        attempt: 1,
        token: "t1".into(),
    };
    let v = check::durability::check(&lost, &h).unwrap_err();
    assert_eq!(v.invariant, Invariant::NoLostCommits);
}

#[test]
fn a_stored_projection_that_differs_from_the_fold_breaks_invariant_5() {
    let h = history(vec![EventKind::WorkflowCompleted {
        output: json!({"n": 1}),
    }]);
    let mut row = orbit_core::store::ExecutionRow {
        id: "x".into(),
        workflow: "Plain".into(),
        version: "1.0.0".into(),
        definition_hash: "h".into(),
        status: "completed".into(),
        parent: None,
        input: json!({"n": 1}).into(),
        output: Some(json!({"n": 1})),
        error: None,
        created_at: 1001,
        updated_at: 1003,
        last_seq: 3,
    };
    assert!(check::determinism::check(&row, &h, None).is_ok());
    row.status = "running".into();
    let v = check::determinism::check(&row, &h, None).unwrap_err();
    assert_eq!(v.invariant, Invariant::Determinism);
}

fn saga_workflow() -> orbit_core::ir::Workflow {
    workload::definitions()
        .unwrap()
        .into_iter()
        .find(|d| d.workflow.name == "Saga")
        .unwrap()
        .workflow
}

fn failed_saga(order: Vec<&str>, comp_ok: bool) -> Vec<Event> {
    let mut kinds = Vec::new();
    for (i, u) in ["reserve[0]", "reserve[1]"].iter().enumerate() {
        kinds.push(scheduled(u, 1, false));
        kinds.push(dispatched(u, 1, &format!("t{i}")));
        kinds.push(succeeded(u, 1));
    }
    kinds.push(scheduled("charge", 1, false));
    kinds.push(dispatched("charge", 1, "tc"));
    kinds.push(EventKind::StepAttemptFailed {
        step: "charge".into(),
        attempt: 1,
        error: ErrorInfo {
            code: "DECLINED".into(),
            message: String::new(),
            retryable: false,
        },
        retry_at: None,
    });
    kinds.push(EventKind::StepFailed {
        step: "charge".into(),
        error: ErrorInfo {
            code: "DECLINED".into(),
            message: String::new(),
            retryable: false,
        },
    });
    kinds.push(EventKind::CompensationStarted {
        reason: CompensationReason::Failed,
        units: order.iter().map(|s| s.to_string()).collect(),
    });
    for (i, u) in order.iter().enumerate() {
        let c = format!("compensate:{u}");
        kinds.push(scheduled(&c, 1, false));
        kinds.push(dispatched(&c, 1, &format!("c{i}")));
        kinds.push(succeeded(&c, 1));
    }
    kinds.push(EventKind::WorkflowFailed {
        error: WorkflowError {
            code: if comp_ok {
                "DECLINED"
            } else {
                "COMPENSATION_FAILED"
            }
            .into(),
            message: String::new(),
            step: Some("charge".into()),
        },
    });
    history(kinds)
}

#[test]
fn compensation_in_the_wrong_order_breaks_invariant_7() {
    let wf = saga_workflow();
    let good = failed_saga(vec!["reserve[1]", "reserve[0]"], true);
    assert!(check::history("x", &good, Some(&wf)).is_ok());
    let bad = failed_saga(vec!["reserve[0]", "reserve[1]"], true);
    let v = check::history("x", &bad, Some(&wf)).unwrap_err();
    assert_eq!(v.invariant, Invariant::Saga);
    let missing = failed_saga(vec!["reserve[1]"], true);
    assert_eq!(
        check::history("x", &missing, Some(&wf))
            .unwrap_err()
            .invariant,
        Invariant::Saga
    );
}

#[test]
fn an_unfinished_execution_breaks_invariant_8() {
    let h = history(vec![scheduled("first", 1, false)]);
    let v = check::liveness::check("x", &h, 1000).unwrap_err();
    assert_eq!(v.invariant, Invariant::Liveness);
}

#[test]
fn a_committed_execution_that_reads_back_differently_breaks_invariant_2() {
    let h = history(vec![]);
    let row = orbit_core::store::ExecutionRow {
        id: "x".into(),
        workflow: "Plain".into(),
        version: "1.0.0".into(),
        definition_hash: "h".into(),
        status: "running".into(),
        parent: None,
        input: json!({"n": 1}).into(),
        output: None,
        error: None,
        created_at: 1001,
        updated_at: 1002,
        last_seq: 2,
    };
    let ok = orbit_core::engine::Response::ok(200, json!({"status": "running"}));
    assert!(check::durability::read_back(&row, &h, &ok).is_ok());
    let gone = orbit_core::engine::Response::error(404, "UNKNOWN_EXECUTION", "no execution `x`");
    let v = check::durability::read_back(&row, &h, &gone).unwrap_err();
    assert_eq!(v.invariant, Invariant::NoLostCommits);
}

fn uncertain(step: &str, attempt: u32) -> EventKind {
    EventKind::StepAttemptUncertain {
        step: step.into(),
        attempt,
        reason: "worker `w` stopped responding".into(),
    }
}

fn attempt_failed(step: &str, attempt: u32, code: &str) -> EventKind {
    EventKind::StepAttemptFailed {
        step: step.into(),
        attempt,
        error: ErrorInfo {
            code: code.into(),
            message: String::new(),
            retryable: true,
        },
        retry_at: Some(5000),
    }
}

#[test]
fn an_uncertain_attempt_recorded_as_failed_breaks_invariant_4() {
    use check::tokens::{Report, Reports};
    // The worker holding t1 went silent; the runtime made up a failure.
    let h = history(vec![
        scheduled("first", 1, false),
        dispatched("first", 1, "t1"),
        attempt_failed("first", 1, "WORKER_LOST"),
    ]);
    let v = check::tokens::check("x", &h, &[], &Reports::new()).unwrap_err();
    assert_eq!(v.invariant, Invariant::WellFormed);
    // The same failure reported by t1 itself is legal, and so is a timeout.
    let reported = Reports::from([("t1".to_string(), vec![Report::Error("WORKER_LOST".into())])]);
    assert!(check::tokens::check("x", &h, &[], &reported).is_ok());
    let timed_out = history(vec![
        scheduled("first", 1, false),
        dispatched("first", 1, "t1"),
        attempt_failed("first", 1, "ATTEMPT_TIMEOUT"),
    ]);
    assert!(check::tokens::check("x", &timed_out, &[], &Reports::new()).is_ok());
}

#[test]
fn a_stale_failure_answered_accepted_breaks_invariant_4() {
    use check::tokens::{Report, Reports};
    // t1 became uncertain and was redelivered as t2 (same attempt); t2's
    // attempt failed. A failure from t1 must not have been accepted.
    let h = history(vec![
        scheduled("first", 1, false),
        dispatched("first", 1, "t1"),
        uncertain("first", 1),
        scheduled("first", 1, true),
        dispatched("first", 1, "t2"),
        attempt_failed("first", 1, "TRANSIENT"),
    ]);
    let reports = Reports::from([
        ("t1".to_string(), vec![Report::Error("TRANSIENT".into())]),
        ("t2".to_string(), vec![Report::Error("TRANSIENT".into())]),
    ]);
    let fact = |token: &str| Fact::AttemptFailed {
        execution: "x".into(),
        unit: "first".into(),
        attempt: 1,
        token: token.into(),
    };
    let (stale, current) = (fact("t1"), fact("t2"));
    assert!(check::tokens::check("x", &h, &[&current], &reports).is_ok());
    let v = check::tokens::check("x", &h, &[&stale], &reports).unwrap_err();
    assert_eq!(v.invariant, Invariant::WellFormed);
}

fn throttled_workflow() -> orbit_core::ir::Workflow {
    workload::definitions()
        .unwrap()
        .into_iter()
        .find(|d| d.workflow.name == "Throttled")
        .unwrap()
        .workflow
}

fn limits_of(events: &[Event]) -> Option<Invariant> {
    check::history("x", events, Some(&throttled_workflow()))
        .err()
        .map(|v| v.invariant)
}

fn queue_timeout(step: &str) -> EventKind {
    EventKind::StepFailed {
        step: step.into(),
        error: ErrorInfo {
            code: "QUEUE_TIMEOUT".into(),
            message: "no worker took the task within 4000ms".into(),
            retryable: false,
        },
    }
}

/// [`history`] with each event's time given: `(at, kind)` pairs after the
/// start events (at 1000).
fn timed(kinds: Vec<(u64, EventKind)>) -> Vec<Event> {
    let start = history(Vec::new()).into_iter().map(|e| (1000, e.kind));
    start
        .chain(kinds)
        .enumerate()
        .map(|(i, (at, kind))| Event {
            seq: i as u64 + 1,
            at,
            kind,
        })
        .collect()
}

#[test]
fn max_concurrency_holds_for_a_legal_fan_out_and_fails_for_a_third_element() {
    let legal = history(vec![
        scheduled("each[0]", 1, false),
        scheduled("each[1]", 1, false),
        dispatched("each[0]", 1, "t0"),
        succeeded("each[0]", 1),
        scheduled("each[2]", 1, false),
    ]);
    assert_eq!(limits_of(&legal), None);
    let three = history(vec![
        scheduled("each[0]", 1, false),
        scheduled("each[1]", 1, false),
        scheduled("each[2]", 1, false),
    ]);
    assert_eq!(limits_of(&three), Some(Invariant::WellFormed));
}

#[test]
fn queue_timeout_only_strikes_an_undispatched_unit_after_its_time() {
    let start = |at| (at, scheduled("each[0]", 1, false));
    let legal = timed(vec![start(1000), (5000, queue_timeout("each[0]"))]);
    assert_eq!(limits_of(&legal), None);
    let early = timed(vec![start(1000), (4999, queue_timeout("each[0]"))]);
    assert_eq!(limits_of(&early), Some(Invariant::WellFormed));
    let after_dispatch = timed(vec![
        start(1000),
        (1100, dispatched("each[0]", 1, "t0")),
        (
            1200,
            EventKind::StepAttemptFailed {
                step: "each[0]".into(),
                attempt: 1,
                error: ErrorInfo {
                    code: "BUSY".into(),
                    message: String::new(),
                    retryable: true,
                },
                retry_at: Some(1300),
            },
        ),
        (1300, scheduled("each[0]", 2, false)),
        (9000, queue_timeout("each[0]")),
    ]);
    assert_eq!(limits_of(&after_dispatch), Some(Invariant::WellFormed));
}
