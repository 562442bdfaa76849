//! Bugs the simulator and a review found (issue 11), each as a scenario:
//! inputs over time, and the history the engine must write. Slow commits
//! are held in flight with `Mode::Hold` and answered by `release`.

#![allow(clippy::unwrap_used)]

mod engine_support;

use engine_support::*;
use orbit_core::engine::{IdempotencyScope, RequestId, Start};
use orbit_core::{Config, Request};
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
"#;

fn world() -> World {
    let mut w = World::new(Config {
        session_timeout_ms: 5_000,
        ..Config::default()
    });
    w.grid = Some(100);
    w.deploy(PLAIN);
    w
}

/// A poll takes the task; the worker unregisters (the SDK's shutdown:
/// drop the poll, then unregister) before the hand-out commits. Nobody
/// holds the task, so the attempt is uncertain at once and redelivered.
#[test]
fn a_hand_out_to_a_session_that_unregisters_before_its_commit_is_redelivered() {
    let mut w = world();
    w.start("Plain", "u-1", json!({"n": 1}));
    let s1 = w.register("w-1", &["demo.*"]);
    w.at(10);
    w.mode = Mode::Hold;
    let poll = w.send(Request::Poll {
        session_id: s1.clone(),
        max_tasks: Some(1),
        wait_ms: 0,
        held: vec![],
    });
    assert!(!w.replies.contains_key(&poll), "answered after the commit");
    let r = w.call(Request::Unregister {
        session_id: s1.clone(),
    });
    assert_eq!(r.status, 200);
    w.at(20);
    w.mode = Mode::Ok;
    w.release(Mode::Ok);
    w.at(300);
    let s2 = w.register("w-2", &["demo.*"]);
    let t = w.take(&s2);
    assert!(t.redelivery);
    assert_eq!(t.attempt, 1);
    assert_eq!(w.succeed(&t.token, json!({"v": 1})), accepted());
    assert_logs(
        &w.logs("u-1"),
        "
        + 0ms #1 WorkflowCreated
        + 0ms #2 WorkflowStarted
        + 0ms #3 StepScheduled step=work attempt=1
        + 10ms #4 StepDispatched step=work attempt=1 worker_id=w-1
        + 20ms #5 StepAttemptUncertain step=work attempt=1 reason=worker unregistered
        + 20ms #6 StepScheduled step=work attempt=1 redelivery=true
        + 300ms #7 StepDispatched step=work attempt=1 worker_id=w-2
        + 300ms #8 StepSucceeded step=work attempt=1
        + 300ms #9 WorkflowCompleted
        ",
    );
}

/// The same with a commit slower than the session timeout: the session
/// expires while its hand-out is being written.
#[test]
fn a_hand_out_to_a_session_that_expires_before_its_commit_is_redelivered() {
    let mut w = world();
    w.start("Plain", "u-2", json!({"n": 1}));
    let s1 = w.register("w-1", &["demo.*"]);
    w.at(10);
    w.mode = Mode::Hold;
    w.send(Request::Poll {
        session_id: s1,
        max_tasks: Some(1),
        wait_ms: 0,
        held: vec![],
    });
    w.at(6_000);
    w.mode = Mode::Ok;
    w.release(Mode::Ok);
    w.at(6_100);
    let s2 = w.register("w-2", &["demo.*"]);
    let t = w.take(&s2);
    assert!(t.redelivery);
    assert_logs(
        &w.logs("u-2"),
        "
        + 0ms #1 WorkflowCreated
        + 0ms #2 WorkflowStarted
        + 0ms #3 StepScheduled step=work attempt=1
        + 10ms #4 StepDispatched step=work attempt=1 worker_id=w-1
        + 6.0s #5 StepAttemptUncertain step=work attempt=1 reason=worker `w-1` stopped responding
        + 6.0s #6 StepScheduled step=work attempt=1 redelivery=true
        + 6.1s #7 StepDispatched step=work attempt=1 worker_id=w-2
        ",
    );
}

/// A long poll is contact when it arrives, not while it is parked: a worker
/// that died with a task and a long poll open is lost one session timeout
/// after that poll, not after the poll's `wait_ms` too.
#[test]
fn a_parked_poll_does_not_keep_a_dead_session_alive() {
    let mut w = world();
    w.start("Plain", "u-3", json!({"n": 1}));
    let s1 = w.register("w-1", &["demo.*"]);
    w.at(10);
    let t = w.take(&s1);
    w.send(Request::Poll {
        session_id: s1.clone(),
        max_tasks: Some(1),
        wait_ms: 60_000,
        held: vec![t.token.clone()],
    });
    // The worker is gone: no further call.
    w.at(20_000);
    assert_logs(
        &w.logs("u-3"),
        "
        + 0ms #1 WorkflowCreated
        + 0ms #2 WorkflowStarted
        + 0ms #3 StepScheduled step=work attempt=1
        + 10ms #4 StepDispatched step=work attempt=1 worker_id=w-1
        + 5.1s #5 StepAttemptUncertain step=work attempt=1 reason=worker `w-1` stopped responding
        + 5.1s #6 StepScheduled step=work attempt=1 redelivery=true
        ",
    );
}

fn keyed_start(key: &str) -> Request {
    Request::Start(Start {
        workflow: "Plain".into(),
        version: None,
        input: json!({"n": 1}),
        execution_id: None,
        idempotency: Some(IdempotencyScope {
            key: key.into(),
            fingerprint: "fp-1".into(),
        }),
        traceparent: None,
    })
}

/// A start with an Idempotency-Key whose commit comes back `Ambiguous` (it
/// was in fact stored); a retry with the same key arrives meanwhile. The
/// key stays taken until the reload has decided, so the retry replays the
/// first answer instead of creating a second execution.
#[test]
fn an_ambiguous_start_keeps_its_idempotency_key_until_the_reload_decides() {
    let mut w = world();
    w.mode = Mode::Hold;
    let first = w.send(keyed_start("k-1"));
    let retry = w.send(keyed_start("k-1"));
    w.mode = Mode::Ok;
    w.release(Mode::AmbiguousApplied);
    let a = w.replies.remove(&first).unwrap();
    let b = w.replies.remove(&retry).unwrap();
    assert_eq!(a.status, 201, "{:?}", a.body);
    assert_eq!(b.status, 201, "{:?}", b.body);
    assert!(b.replayed, "the retry is a replay");
    assert_eq!(a.body, b.body);
    assert_eq!(w.store.histories.len(), 1, "one execution");
}

/// The same when the start was not stored: the retry then starts the
/// execution itself, once.
#[test]
fn an_ambiguous_start_that_was_lost_lets_the_retry_start_once() {
    let mut w = world();
    w.mode = Mode::Hold;
    let first = w.send(keyed_start("k-2"));
    let retry = w.send(keyed_start("k-2"));
    w.mode = Mode::Ok;
    w.release(Mode::AmbiguousLost);
    let a = w.replies.remove(&first).unwrap();
    let b = w.replies.remove(&retry).unwrap();
    assert_eq!(a.error_code(), Some("STORAGE_ERROR"));
    assert_eq!((b.status, b.replayed), (201, false));
    assert_eq!(w.store.histories.len(), 1, "one execution");
}

const V2: &str = r#"
task "demo.work" version "1.0.0" {
    input { n: Int }
    output { v: Int }
}

workflow Later version "1.0.0" {
    input { n: Int }
    step work {
        worker "demo.work"
        with { n: input.n }
    }
}
"#;

/// The compiled `V2` source, as a deploy carries it.
fn v2_definitions() -> Vec<orbit_core::engine::DefinitionRecord> {
    let compiled = orbit_core::compile(
        &[orbit_core::Source {
            name: "v2.orbit".into(),
            text: V2.into(),
        }],
        &|_, _| None,
    );
    compiled
        .definitions
        .into_iter()
        .map(|d| orbit_core::engine::DefinitionRecord {
            workflow: d.workflow,
            definition_hash: d.hash,
            source: V2.into(),
            registered_at: 0,
        })
        .collect()
}

/// Two clients deploy the same definition at once and the first write
/// fails: the second is not told "registered" on the strength of the first,
/// it waits and writes the definition itself.
#[test]
fn a_deploy_waits_for_the_one_in_flight_instead_of_trusting_it() {
    let mut w = world();
    w.mode = Mode::Hold;
    let defs = v2_definitions();
    let deploy = || Request::Deploy {
        definitions: defs.clone(),
        idempotency: None,
    };
    let first = w.send(deploy());
    let second = w.send(deploy());
    assert!(!w.replies.contains_key(&second), "waits for the first");
    w.release(Mode::Unavailable);
    assert_eq!(
        w.replies.remove(&first).unwrap().error_code(),
        Some("STORAGE_ERROR")
    );
    assert!(!w.replies.contains_key(&second), "now writing its own");
    w.mode = Mode::Ok;
    w.release(Mode::Ok);
    let r = w.replies.remove(&second).unwrap();
    assert_eq!(r.status, 200);
    assert_eq!(r.body["workflows"][0]["created"], json!(true));
    assert_eq!(w.start("Later", "l-1", json!({"n": 1})).status, 201);
}

/// A deploy with an Idempotency-Key whose commit comes back `Ambiguous`:
/// it was in fact stored, with its key's record, but memory does not know.
/// (Found by the networked cluster simulation, seed 0x54: the retry was
/// replayed "registered" from the stored record, then the start was
/// answered `UNKNOWN_WORKFLOW`.) The caller is told the outcome is unknown;
/// the engine writes the same definitions again at the next tick, and the
/// retry waits for that, then replays, and the workflow starts.
#[test]
fn an_ambiguous_deploy_is_written_again_before_its_key_replays() {
    for landed in [Mode::AmbiguousApplied, Mode::AmbiguousLost] {
        let mut w = world();
        let deploy = || Request::Deploy {
            definitions: v2_definitions(),
            idempotency: Some(IdempotencyScope {
                key: "deploy-1".into(),
                fingerprint: "fp-deploy".into(),
            }),
        };
        w.mode = Mode::Hold;
        let first = w.send(deploy());
        w.release(landed);
        assert_eq!(
            w.replies.remove(&first).unwrap().error_code(),
            Some("STORAGE_ERROR"),
            "{landed:?}"
        );
        let retry = w.send(deploy());
        assert!(!w.replies.contains_key(&retry), "waits for the re-write");
        // The re-write happens at the next tick; its first try fails.
        w.advance(100);
        w.release(Mode::Unavailable);
        assert!(!w.replies.contains_key(&retry), "still unsettled");
        w.mode = Mode::Ok;
        w.advance(100);
        let r = w.replies.remove(&retry).unwrap();
        assert_eq!(r.status, 200, "{landed:?}: {:?}", r.body);
        assert!(
            r.replayed,
            "{landed:?}: the retry replays the stored answer"
        );
        assert_eq!(r.body["workflows"][0]["created"], json!(true));
        assert_eq!(w.start("Later", "l-1", json!({"n": 1})).status, 201);
    }
}

/// Starts `id`, and holds the commit of a poll that takes its first task.
fn hold_a_hand_out(w: &mut World, id: &str) -> RequestId {
    w.start("Plain", id, json!({"n": 1}));
    let s = w.register("w-1", &["demo.*"]);
    w.at(10);
    w.mode = Mode::Hold;
    w.send(Request::Poll {
        session_id: s,
        max_tasks: Some(1),
        wait_ms: 0,
        held: vec![],
    })
}

/// Another writer (another node) appends a signal of its own to `id`.
fn another_writer_appends(w: &mut World, id: &str) {
    let mut theirs = w.store.histories[id].last().unwrap().clone();
    theirs.seq += 1;
    theirs.kind = orbit_core::history::EventKind::SignalReceived {
        name: "theirs".into(),
        payload: json!({}),
    };
    w.store.histories.get_mut(id).unwrap().push(theirs);
}

/// A hand-out whose commit comes back `Ambiguous` after another writer —
/// a new leader after a takeover — wrote a different event at the same
/// seq. (Found by the cluster simulation, seed 0x134371ab6: a deposed
/// leader resumed from a pause, its `StepDispatched` write was refused and
/// answered ambiguous, and the reload found the new leader's `StepFailed`
/// at that seq; judged by the seq count alone, the task was handed out
/// with nothing durable behind it.) The poll is answered only when the
/// reload finds this batch's own event there.
#[test]
fn an_ambiguous_hand_out_is_not_answered_from_another_writers_event() {
    let mut w = world();
    let poll = hold_a_hand_out(&mut w, "h-1");
    another_writer_appends(&mut w, "h-1");
    w.mode = Mode::Ok;
    w.release(Mode::AmbiguousLost);
    let r = w.replies.remove(&poll).unwrap();
    assert_eq!(r.error_code(), Some("STORAGE_ERROR"), "{:?}", r.body);
}

/// Another writer moved an execution on while our batch for it was in
/// flight: the `Conflict` names it stale. A signal that waited behind that
/// batch runs only after the reload, on what the store really holds, and
/// never beside a second batch of the same execution.
#[test]
fn a_stale_conflict_holds_waiting_requests_until_the_reload() {
    let mut w = world();
    let poll = hold_a_hand_out(&mut w, "c-1");
    let signal = w.send(Request::Signal {
        execution_id: "c-1".into(),
        name: "go".into(),
        payload: json!({}),
        idempotency: None,
    });
    another_writer_appends(&mut w, "c-1");
    w.release(Mode::Ok);
    assert_eq!(
        w.replies.remove(&poll).unwrap().error_code(),
        Some("STORAGE_ERROR")
    );
    assert!(w.held.len() <= 1, "one batch of c-1 in flight at most");
    w.mode = Mode::Ok;
    while !w.held.is_empty() {
        w.release(Mode::Ok);
    }
    let r = w.replies.remove(&signal).unwrap();
    assert_eq!(r.status, 200, "{:?}", r.body);
    let names: Vec<String> = w.store.histories["c-1"]
        .iter()
        .filter_map(|e| match &e.kind {
            orbit_core::history::EventKind::SignalReceived { name, .. } => Some(name.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(names, ["theirs", "go"]);
}

/// Under a cap, a slot that frees while the oldest pending execution is
/// busy (a signal of its own being written) is not taken by a newer start:
/// the newer one waits, and the oldest starts once its write commits.
#[test]
fn admission_keeps_the_oldest_pending_first_while_it_is_busy() {
    let mut w = World::new(Config {
        session_timeout_ms: 5_000,
        max_active_executions: Some(1),
        ..Config::default()
    });
    w.deploy(PLAIN);
    w.start("Plain", "a", json!({"n": 1}));
    w.start("Plain", "b", json!({"n": 2}));
    assert_eq!(
        (w.status("a"), w.status("b")),
        ("running".into(), "pending".into())
    );
    let s = w.register("w-1", &["demo.*"]);
    let t = w.take(&s);
    w.mode = Mode::Hold;
    w.send(Request::Result {
        token: t.token,
        outcome: orbit_core::engine::Outcome::Output(json!({"v": 1})),
        patterns: None,
    });
    w.send(Request::Signal {
        execution_id: "b".into(),
        name: "hello".into(),
        payload: json!({}),
        idempotency: None,
    });
    w.release(Mode::Ok);
    assert_eq!(w.status("a"), "completed");
    w.mode = Mode::Ok;
    let c = w.start("Plain", "c", json!({"n": 3}));
    assert_eq!(c.status, 201);
    assert_eq!(w.status("c"), "pending", "c waits behind b");
    w.release(Mode::Ok);
    assert_eq!(
        (w.status("b"), w.status("c")),
        ("running".into(), "pending".into())
    );
}

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
"#;

/// A child whose definition the store no longer has fails its unit with
/// `CHILD_NOT_REGISTERED`, so the parent fails instead of waiting forever.
#[test]
fn a_child_whose_definition_is_unknown_fails_its_unit() {
    let mut w = World::default_world();
    w.deploy(FAMILY);
    w.store
        .definitions
        .retain(|d| d.workflow.name != "Shipping");
    w.restart();
    w.start("Parent", "p", json!({"order_id": "o-1"}));
    assert_logs(
        &w.logs("p"),
        "
        + 0ms #1 WorkflowCreated
        + 0ms #2 WorkflowStarted
        + 0ms #3 ChildStarted step=ship child_id=p.ship
        + 0ms #4 ChildFailed step=ship child_id=p.ship
        + 0ms #5 WorkflowFailed code=CHILD_NOT_REGISTERED step=ship
        ",
    );
    assert_eq!(w.status("p"), "failed");
}

/// A worker credential reports only for tasks within its patterns, also for
/// deliveries made before a restart (the engine knows each token's task).
#[test]
fn result_patterns_are_checked_for_tokens_handed_out_before_a_restart() {
    let mut w = world();
    w.start("Plain", "r-1", json!({"n": 1}));
    let s = w.register("w-1", &["demo.*"]);
    let t = w.take(&s);
    w.restart();
    let report = |patterns: &[&str]| Request::Result {
        token: t.token.clone(),
        outcome: orbit_core::engine::Outcome::Output(json!({"v": 1})),
        patterns: Some(patterns.iter().map(|p| p.to_string()).collect()),
    };
    let r = w.call(report(&["payments.*"]));
    assert_eq!((r.status, r.error_code()), (403, Some("FORBIDDEN")));
    assert!(r.body["error"]["message"]
        .as_str()
        .unwrap()
        .contains("demo.work"));
    let r = w.call(report(&["demo.*"]));
    assert_eq!(r.body, accepted());
}

/// Found by the simulator once admission caps were sampled (seed `0x5c` of
/// swarm): the write that starts a pending execution fails, and nothing
/// tried again, so it stayed pending forever. It is retried on the next
/// tick now.
#[test]
fn a_failed_admission_write_is_retried() {
    let mut w = World::new(Config {
        session_timeout_ms: 5_000,
        max_active_executions: Some(1),
        ..Config::default()
    });
    w.grid = Some(100);
    w.deploy(PLAIN);
    w.start("Plain", "a", json!({"n": 1}));
    w.start("Plain", "b", json!({"n": 2}));
    let s = w.register("w-1", &["demo.*"]);
    let t = w.take(&s);
    w.mode = Mode::Hold;
    w.send(Request::Result {
        token: t.token,
        outcome: orbit_core::engine::Outcome::Output(json!({"v": 1})),
        patterns: None,
    });
    w.release(Mode::Ok);
    assert_eq!(w.status("a"), "completed");
    w.mode = Mode::Ok;
    w.release(Mode::Unavailable);
    assert_eq!(w.status("b"), "pending");
    w.at(200);
    assert_eq!(w.status("b"), "running");
}

/// A retry falls due while its execution's batch is still being written,
/// so the tick that sees it cannot act on it. That overdue entry must not
/// stay the engine's earliest deadline: a poll parked meanwhile is woken at
/// its own deadline, not left for whatever tick comes next (found by the
/// eviction-invisible simulation, where only the run without eviction
/// answered such a poll late).
#[test]
fn an_overdue_retry_of_a_busy_execution_does_not_hide_a_later_deadline() {
    let mut w = world();
    w.grid = None;
    w.start("Plain", "u-1", json!({"n": 1}));
    let s = w.register("w-1", &["demo.*"]);
    let t = w.take(&s);
    assert_eq!(w.fail(&t.token, "FLAKY", true), accepted());
    // The retry is due 100 ms after the failure; a signal's batch is held
    // in flight across that moment.
    w.mode = Mode::Hold;
    w.send(Request::Signal {
        execution_id: "u-1".into(),
        name: "nudge".into(),
        payload: json!({}),
        idempotency: None,
    });
    w.advance(150);
    // Another worker's poll parks for 300 ms.
    let other = w.register("w-2", &["other.*"]);
    let deadline = w.now + 300;
    let poll = w.send(Request::Poll {
        session_id: other,
        max_tasks: Some(1),
        wait_ms: 300,
        held: vec![],
    });
    assert!(!w.replies.contains_key(&poll));
    assert!(
        w.wake.is_some_and(|at| at <= deadline),
        "the engine asks to be woken by the poll's deadline ({deadline}), asked {:?}",
        w.wake
    );
    w.mode = Mode::Ok;
    w.release(Mode::Ok);
    w.advance_to(deadline);
    assert_eq!(
        w.replies.remove(&poll).unwrap().body.into_json(),
        json!({"tasks": []})
    );
}
