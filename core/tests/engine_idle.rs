//! Idle executions leave memory (`--idle-evict`) and come back when their
//! timer is due or a command names them — without a trace: every scenario
//! here, and the property at the end, runs the same inputs with eviction
//! off and on and demands the same replies and the same histories.

#![allow(clippy::unwrap_used)]

mod engine_support;

use engine_support::*;
use orbit_core::engine::Outcome;
use orbit_core::history::{ErrorInfo, Millis};
use orbit_core::{Config, Request};
use proptest::prelude::*;
use serde_json::{json, Value};

const SOURCE: &str = r#"
task "demo.work" version "1.0.0" {
    input { n: Int }
    output { n: Int }
}

workflow Nap version "1.0.0" {
    input { n: Int }
    step nap { sleep 1h }
    step work { worker "demo.work" with { n: input.n } after: [nap] }
    output { n: work.n }
}

workflow Gate version "1.0.0" {
    input { n: Int }
    step go { signal "go" }
    step work { worker "demo.work" with { n: input.n } after: [go] }
    output { n: work.n }
}

workflow Flaky version "1.0.0" {
    input { n: Int }
    step work {
        worker "demo.work"
        with { n: input.n }
        retry: { max_attempts: 3, backoff: 10m, factor: 1.0, max_backoff: 10m }
    }
    output { n: work.n }
}

workflow Either version "1.0.0" {
    input { n: Int }
    step nap { sleep 10m }
    step go { signal "go" }
    step work { worker "demo.work" with { n: input.n } after: [nap] }
    output { n: work.n }
}

workflow Parent version "1.0.0" {
    input { n: Int }
    step child { workflow Nap version "1.0.0" with { n: input.n } }
    output { n: child.n }
}

workflow Once version "1.0.0" {
    input { n: Int }
    step work { worker "demo.work" with { n: input.n } }
    output { n: work.n }
}

workflow Pair version "1.0.0" {
    input { n: Int }
    step quick { workflow Once version "1.0.0" with { n: input.n } }
    step slow { workflow Nap version "1.0.0" with { n: input.n } }
    output { n: slow.n }
}
"#;

fn world(idle_evict_ms: Option<Millis>) -> World {
    capped(idle_evict_ms, None)
}

/// A world whose engine holds at most `max_in_memory` running executions
/// (idle ones beyond it leave at once).
fn capped(idle_evict_ms: Option<Millis>, max_in_memory: Option<usize>) -> World {
    let mut w = World::new(Config {
        idle_evict_ms,
        max_in_memory,
        // Workers stay registered however far the clock jumps.
        session_timeout_ms: 24 * 3_600_000,
        ..Config::default()
    });
    w.deploy(SOURCE);
    w
}

fn signal(id: &str) -> Request {
    Request::Signal {
        execution_id: id.into(),
        name: "go".into(),
        payload: json!({"ok": true}),
        idempotency: None,
    }
}

fn late_success(token: &str) -> Request {
    Request::Result {
        token: token.into(),
        outcome: Outcome::Output(json!({"n": 7})),
        patterns: None,
    }
}

/// Runs `scenario` with eviction off and with a one-minute eviction, and
/// checks both give the same replies and histories; returns the evicting
/// world for more checks.
fn same_either_way(ids: &[&str], scenario: impl Fn(&mut World) -> Vec<Value>) -> World {
    let mut kept = world(None);
    let mut evicting = world(Some(60_000));
    let a = scenario(&mut kept);
    let b = scenario(&mut evicting);
    assert_eq!(a, b, "replies differ with eviction");
    for id in ids {
        assert_eq!(kept.logs(id), evicting.logs(id), "history of {id} differs");
    }
    assert_eq!(kept.engine.evicted(), 0);
    evicting
}

#[test]
fn a_sleeping_execution_leaves_memory_and_wakes_on_time() {
    let w = same_either_way(&["n-1"], |w| {
        w.start("Nap", "n-1", json!({"n": 1}));
        w.at(59_000);
        let before = (w.engine.evicted(), w.engine.executions_in_memory());
        w.at(61_000);
        let during = (w.engine.evicted(), w.engine.executions_in_memory());
        if w.config.idle_evict_ms.is_some() {
            assert_eq!(before, (0, 1), "still in memory before a minute");
            assert_eq!(during, (1, 0), "evicted after a minute");
        }
        let loads = w.loads;
        w.at(3_600_000);
        if w.config.idle_evict_ms.is_some() {
            assert_eq!(w.loads, loads + 1, "read back once, when the timer is due");
            assert_eq!(w.engine.evicted(), 0);
        }
        let s = w.register("w-1", &["demo.*"]);
        let t = w.take(&s);
        vec![w.succeed(&t.token, json!({"n": 2}))]
    });
    assert_logs(
        &w.logs("n-1"),
        "
        + 0ms #1 WorkflowCreated
        + 0ms #2 WorkflowStarted
        + 0ms #3 TimerStarted step=nap fire_at=+3600.0s
        + 3600.0s #4 TimerFired step=nap
        + 3600.0s #5 StepScheduled step=work attempt=1
        + 3600.0s #6 StepDispatched step=work attempt=1 worker_id=w-1
        + 3600.0s #7 StepSucceeded step=work attempt=1
        + 3600.0s #8 WorkflowCompleted
        ",
    );
}

#[test]
fn a_signal_brings_an_evicted_execution_back() {
    same_either_way(&["g-1"], |w| {
        w.start("Gate", "g-1", json!({"n": 1}));
        w.at(120_000);
        let mut replies = vec![w.call(signal("g-1")).body.into_json()];
        let s = w.register("w-1", &["demo.*"]);
        let t = w.take(&s);
        replies.push(w.succeed(&t.token, json!({"n": 2})));
        replies.push(w.call(signal("g-1")).body.into_json());
        replies
    });
}

#[test]
fn a_late_success_of_a_failed_attempt_finds_its_evicted_execution() {
    let w = same_either_way(&["f-1"], |w| {
        w.start("Flaky", "f-1", json!({"n": 1}));
        let s = w.register("w-1", &["demo.*"]);
        let first = w.take(&s);
        let mut replies = vec![w.fail(&first.token, "BUSY", true)];
        // The retry is ten minutes away: evicted meanwhile.
        w.at(120_000);
        replies.push(json!(w.heartbeat(&s, &[&first.token])));
        replies.push(w.call(late_success(&first.token)).body.into_json());
        replies.push(w.call(late_success(&first.token)).body.into_json());
        replies.push(w.call(late_success("no-such-token")).body.into_json());
        replies
    });
    assert_eq!(w.status("f-1"), "completed");
}

#[test]
fn a_parent_waiting_for_its_child_leaves_and_returns_when_the_child_ends() {
    let w = same_either_way(&["p-1", "p-1.child"], |w| {
        w.start("Parent", "p-1", json!({"n": 1}));
        w.at(120_000);
        let away = (w.engine.evicted(), w.engine.executions_in_memory());
        if w.config.idle_evict_ms.is_some() {
            // The parent left; its child, asleep, stays.
            assert_eq!(away, (1, 1));
        }
        w.at(3_600_000);
        let s = w.register("w-1", &["demo.*"]);
        let t = w.take(&s);
        let reply = w.succeed(&t.token, json!({"n": 2}));
        // A tick: the child's end read the parent back, which records it.
        w.advance(100);
        vec![reply, json!(w.engine.evicted())]
    });
    assert_eq!(w.status("p-1.child"), "completed");
    assert_eq!(w.status("p-1"), "completed");
    assert_logs(
        &w.logs("p-1"),
        "
        + 0ms #1 WorkflowCreated
        + 0ms #2 WorkflowStarted
        + 0ms #3 ChildStarted step=child child_id=p-1.child
        + 3600.0s #4 ChildCompleted step=child child_id=p-1.child
        + 3600.0s #5 WorkflowCompleted
        ",
    );
}

/// A parent winding down while its child's commit is held: it tries to
/// tell the busy child at every tick; once the child's commit lands, its
/// next decision tells the child, and that write is in flight when
/// everything idle is evicted (with eviction on), then fails.
fn cancellation_fails_while_idle_ones_leave(w: &mut World) {
    w.mode = Mode::Hold;
    w.advance(100);
    w.release(Mode::Ok);
    w.advance(100);
    assert_eq!(w.held.len(), 1, "the child's cancellation is in flight");
    if w.config.idle_evict_ms.is_some() {
        w.engine.evict_idle_now();
    }
    w.release(Mode::Unavailable);
    w.mode = Mode::Ok;
    w.advance(1_000);
}

/// Simulation finding 8 (seed 0x2c7 of `eviction-invisible`): a parent
/// is cancelled while its child's commit is in flight, so it tells the
/// child later, in a decision of its own that writes nothing to the parent
/// itself. While that write was in flight the parent counted as idle (its
/// child was running) and left memory; the write failed, and the retry
/// that would have come from the parent's decision never came: the child
/// completed instead of being cancelled. A parent being cancelled now
/// stays until its children hold the cancellation.
#[test]
fn a_cancelled_parent_stays_until_its_child_holds_the_cancellation() {
    let w = same_either_way(&["p-1", "p-1.child"], |w| {
        w.start("Parent", "p-1", json!({"n": 1}));
        // The child's timer fires; its commit is slow, and the parent's
        // cancellation is recorded meanwhile.
        w.mode = Mode::Hold;
        w.at(3_600_000);
        w.mode = Mode::Ok;
        let cancel = w.send(Request::Cancel {
            execution_id: "p-1".into(),
            reason: None,
            idempotency: None,
        });
        cancellation_fails_while_idle_ones_leave(w);
        vec![w.replies.remove(&cancel).unwrap().body.into_json()]
    });
    assert_eq!(w.status("p-1.child"), "cancelled");
    assert_eq!(w.status("p-1"), "cancelled");
}

/// Simulation finding 36 (seed 0x64953e22a of `eviction-invisible`): the
/// same as finding 8 for a parent that fails because one child failed. It
/// cancels its other child in a decision of its own, and must stay in
/// memory until that child holds the cancellation.
#[test]
fn a_failing_parent_stays_until_the_child_it_cancels_holds_the_cancellation() {
    let w = same_either_way(&["p-2", "p-2.quick", "p-2.slow"], |w| {
        w.start("Pair", "p-2", json!({"n": 1}));
        let s = w.register("w-1", &["demo.*"]);
        let t = w.take(&s);
        // The slow child's timer fires; its commit is slow, and the quick
        // child fails meanwhile, which fails the parent.
        w.mode = Mode::Hold;
        w.at(3_600_000);
        w.mode = Mode::Ok;
        let failed = w.fail(&t.token, "DECLINED", false);
        cancellation_fails_while_idle_ones_leave(w);
        vec![failed]
    });
    assert_eq!(w.status("p-2.slow"), "cancelled");
    assert_eq!(w.status("p-2"), "failed");
}

/// Simulation finding 6 (seed 0x7ce of `eviction-invisible`): the clock
/// jumps past an evicted execution's timer before any tick, and a signal
/// reads it back; that signal's write fails. In memory its wake-up was
/// still due, so the next tick decided it; read back, it had none (a
/// decision taken then held the due timer and named no wake-up), and it
/// waited for the retry a tick later.
#[test]
fn a_timer_due_while_evicted_survives_a_failed_write_of_the_signal_that_read_it_back() {
    let w = same_either_way(&["e-1"], |w| {
        w.start("Either", "e-1", json!({"n": 1}));
        w.at(120_000);
        // The clock jumps past the timer; no tick has seen it yet.
        w.now = T0 + 600_050;
        w.mode = Mode::Unavailable;
        let refused = w.call(signal("e-1"));
        assert_eq!(refused.status, 503);
        w.mode = Mode::Ok;
        w.advance(0);
        let s = w.register("w-1", &["demo.*"]);
        let t = w.take(&s);
        vec![
            refused.body.into_json(),
            w.succeed(&t.token, json!({"n": 2})),
        ]
    });
    assert_logs(
        &w.logs("e-1"),
        "
        + 0ms #1 WorkflowCreated
        + 0ms #2 WorkflowStarted
        + 0ms #3 TimerStarted step=nap fire_at=+600.0s
        + 600.1s #4 TimerFired step=nap
        + 600.1s #5 StepScheduled step=work attempt=1
        + 600.1s #6 StepDispatched step=work attempt=1 worker_id=w-1
        + 600.1s #7 StepSucceeded step=work attempt=1
        ",
    );
}

/// Simulation finding 26 (seed 0x204897fc of `eviction-invisible`): the
/// clock jumps past an evicted execution's timer before any tick, and a
/// start of its id reads it back. In memory nothing decides it before the
/// next tick (a start of an existing id writes nothing); read back, it was
/// decided at once, and its timer fired a tick early. It now keeps its
/// wake-up for that tick, as it would have in memory.
#[test]
fn a_timer_due_while_evicted_waits_for_the_tick_when_a_start_reads_it_back() {
    let w = same_either_way(&["n-1"], |w| {
        w.start("Nap", "n-1", json!({"n": 1}));
        w.at(120_000);
        // The clock jumps past the timer; no tick has seen it yet.
        w.now = T0 + 3_600_050;
        let again = w.start("Nap", "n-1", json!({"n": 1}));
        let view = w.call(Request::GetExecution {
            execution_id: "n-1".into(),
        });
        // The tick the wake-up asked for.
        w.advance(0);
        vec![again.body.into_json(), view.body.into_json()]
    });
    assert_logs(
        &w.logs("n-1"),
        "
        + 0ms #1 WorkflowCreated
        + 0ms #2 WorkflowStarted
        + 0ms #3 TimerStarted step=nap fire_at=+3600.0s
        + 3600.1s #4 TimerFired step=nap
        + 3600.1s #5 StepScheduled step=work attempt=1
        ",
    );
}

/// Runs `scenario` twice, with worker sessions that time out after
/// `session_timeout_ms` and without the eviction timer (whose own checks
/// ask for wake-ups): once as is, once with idle executions evicted where
/// `scenario` says (`evict`), as the simulator forces it. Both must give
/// the same answers, ask for the same wake-ups and store the same history
/// of `id`; returns the evicting world.
fn same_wakes_either_way(
    id: &str,
    session_timeout_ms: Millis,
    scenario: impl Fn(&mut World, bool) -> Vec<Value>,
) -> World {
    let run = |evict| {
        let mut w = World::new(Config {
            idle_evict_ms: None,
            session_timeout_ms,
            ..Config::default()
        });
        w.deploy(SOURCE);
        let answers = scenario(&mut w, evict);
        (answers, w)
    };
    let (a, kept) = run(false);
    let (b, evicting) = run(true);
    assert_eq!(a, b, "answers or wake-ups differ with eviction");
    assert_eq!(kept.logs(id), evicting.logs(id), "history of {id} differs");
    assert_eq!(kept.engine.evicted(), 0);
    evicting
}

/// Simulation finding 27 (seed 0x1e84a0 of `eviction-invisible`): a
/// session held the token of an attempt that had already failed when it
/// timed out, while the execution's next write was in flight. In memory
/// the token became an orphan, and the engine asked for a tick every
/// 100 ms until the write landed (only then can an orphan of a busy
/// execution be looked at, and this one, no longer current, is dropped).
/// Read back after an eviction, the token was no longer held by the
/// session, so there was no orphan and no such ticks; in the simulation
/// the extra ticks answered an expired long poll earlier and everything
/// after moved. Orphans of an execution whose write or read is in flight
/// no longer ask for ticks.
#[test]
fn a_stale_token_of_a_busy_execution_asks_for_no_ticks_when_its_session_ends() {
    let w = same_wakes_either_way("f-1", 660_000, |w, evict| {
        w.start("Flaky", "f-1", json!({"n": 1}));
        let s = w.register("w-1", &["demo.*"]);
        let t = w.take(&s);
        w.heartbeat(&s, &[&t.token]);
        let failed = w.fail(&t.token, "BOOM", true);
        w.at(60_000);
        if evict {
            assert_eq!(w.engine.evict_idle_now(), ["f-1"]);
        }
        // The retry is due at +10 min; its write stays in flight.
        w.at(599_000);
        w.mode = Mode::Hold;
        w.at(600_000);
        assert_eq!(w.held.len(), 1);
        // The session times out with the write still in flight.
        w.at(660_000);
        let wake = w.wake.map(|t| t - T0);
        w.release(Mode::Ok);
        w.mode = Mode::Ok;
        w.at(661_000);
        vec![failed, json!(wake)]
    });
    assert_logs(
        &w.logs("f-1"),
        "
        + 0ms #1 WorkflowCreated
        + 0ms #2 WorkflowStarted
        + 0ms #3 StepScheduled step=work attempt=1
        + 0ms #4 StepDispatched step=work attempt=1 worker_id=w-1
        + 0ms #5 StepAttemptFailed step=work attempt=1 code=BOOM retry_at=+600.0s
        + 600.0s #6 StepScheduled step=work attempt=2
        ",
    );
}

/// Simulation finding 28 (seed 0x1e8669 of `eviction-invisible`): a
/// worker listed the token of an attempt that had already failed, after
/// its execution had been evicted. In memory the listing confirmed the
/// hand-out; evicted, the token was unknown, so its hand-out stayed
/// unconfirmed and asked for a tick a session timeout after it (earlier
/// than any other wake-up, in the simulation). A listed token of an
/// evicted execution now ends that wait too.
#[test]
fn a_listing_of_an_evicted_executions_token_confirms_its_hand_out() {
    same_wakes_either_way("f-1", 300_000, |w, evict| {
        w.start("Flaky", "f-1", json!({"n": 1}));
        let s = w.register("w-1", &["demo.*"]);
        let t = w.take(&s);
        let failed = w.fail(&t.token, "BOOM", true);
        w.at(60_000);
        if evict {
            assert_eq!(w.engine.evict_idle_now(), ["f-1"]);
        }
        // The worker still lists the token.
        w.at(62_000);
        let cancel = w.heartbeat(&s, &[&t.token]);
        let wake = w.wake.map(|t| t - T0);
        vec![failed, json!(cancel), json!(wake)]
    });
}

#[test]
fn an_execution_with_a_task_out_stays() {
    let w = same_either_way(&["f-1"], |w| {
        w.start("Flaky", "f-1", json!({"n": 1}));
        let s = w.register("w-1", &["demo.*"]);
        let t = w.take(&s);
        w.at(120_000);
        w.heartbeat(&s, &[&t.token]);
        vec![w.succeed(&t.token, json!({"n": 2}))]
    });
    assert_eq!(w.engine.evicted(), 0);
}

#[test]
fn beyond_the_cap_idle_executions_leave_at_once() {
    let ids = ["c-1", "c-2", "c-3", "c-4", "c-5"];
    let scenario = |w: &mut World| {
        for id in &ids[..4] {
            w.start("Nap", id, json!({"n": 1}));
        }
        // A busy one: its task is out, so it stays whatever the cap.
        w.start("Flaky", "c-5", json!({"n": 1}));
        let s = w.register("w-1", &["demo.*"]);
        let t = w.take(&s);
        w.at(1_000);
        let in_memory = w.engine.executions_in_memory();
        w.heartbeat(&s, &[&t.token]);
        let mut replies = vec![w.succeed(&t.token, json!({"n": 2}))];
        w.at(3_600_000);
        for _ in &ids[..4] {
            let t = w.take(&s);
            replies.push(w.succeed(&t.token, json!({"n": 2})));
        }
        (in_memory, replies)
    };
    let mut kept = world(None);
    let mut capped = capped(Some(60_000), Some(2));
    let (all, a) = scenario(&mut kept);
    let (some, b) = scenario(&mut capped);
    assert_eq!(a, b, "replies differ with the cap");
    for id in ids {
        assert_eq!(kept.logs(id), capped.logs(id), "history of {id} differs");
        assert_eq!(capped.status(id), "completed");
    }
    assert_eq!(all, 5);
    // Three sleepers left a second in, a minute before their delay: two
    // remain, the busy one among them.
    assert_eq!(some, 2);
}

#[test]
fn over_the_cap_a_tick_looks_at_a_bounded_number_of_busy_executions() {
    // 600 executions whose task no worker takes cannot leave memory; the
    // sleepers started after them can. A tick looks at no more than 256 of
    // the busy ones, so the sleepers behind them are not reached by the
    // first tick; the engine asks for the next tick itself, and they leave
    // within the next three.
    let busy: Vec<String> = (0..600).map(|n| format!("busy-{n:03}")).collect();
    let sleepers = ["nap-1", "nap-2", "nap-3"];
    let scenario = |w: &mut World| {
        for id in &busy {
            w.start("Once", id, json!({"n": 1}));
        }
        for id in sleepers {
            w.start("Nap", id, json!({"n": 1}));
        }
        w.at(100);
        let first = (w.engine.evicted(), w.wake.map(|t| t - T0));
        w.at(400);
        (first, w.engine.evicted())
    };
    let mut kept = world(None);
    let mut capped = capped(Some(60_000), Some(2));
    assert_eq!(scenario(&mut kept), ((0, Some(3_600_000)), 0));
    assert_eq!(scenario(&mut capped), ((0, Some(200)), 3));
    for id in busy.iter().map(String::as_str).chain(sleepers) {
        assert_eq!(kept.logs(id), capped.logs(id), "history of {id} differs");
    }
}

/// One input of the property below.
#[derive(Debug, Clone)]
enum Action {
    Start(u8, u8),
    Advance(Millis),
    Signal(u8),
    Cancel(u8),
    Take,
    Succeed(u8),
    Fail(u8),
    Heartbeat,
    Evict,
}

fn action() -> impl Strategy<Value = Action> {
    prop_oneof![
        (0u8..4, 0u8..6).prop_map(|(w, i)| Action::Start(w, i)),
        prop_oneof![0u64..2_000, 0u64..200_000, 0u64..4_000_000].prop_map(Action::Advance),
        (0u8..6).prop_map(Action::Signal),
        (0u8..6).prop_map(Action::Cancel),
        Just(Action::Take),
        (0u8..8).prop_map(Action::Succeed),
        (0u8..8).prop_map(Action::Fail),
        Just(Action::Heartbeat),
        Just(Action::Evict),
    ]
}

/// Runs `actions`; `evict` says whether `Evict` forces eviction. Returns
/// every reply in order and the histories of all executions.
fn run(
    actions: &[Action],
    idle_evict_ms: Option<Millis>,
    max_in_memory: Option<usize>,
    evict: bool,
) -> (Vec<Value>, String) {
    let mut w = capped(idle_evict_ms, max_in_memory);
    let session = w.register("w-1", &["demo.*"]);
    let mut tokens: Vec<String> = Vec::new();
    let mut replies = Vec::new();
    let id = |i: u8| format!("x-{i}");
    for a in actions {
        // Every action at its own millisecond, so no two timers fall due
        // at the same instant: the order in which executions due together
        // are handed out is not defined, and a load may change it.
        w.advance(1);
        match a {
            Action::Start(wf, i) => {
                let workflow = ["Nap", "Gate", "Flaky", "Parent"][usize::from(*wf)];
                replies.push(w.start(workflow, &id(*i), json!({"n": 1})).body.into_json());
            }
            Action::Advance(ms) => w.advance(*ms),
            Action::Signal(i) => replies.push(w.call(signal(&id(*i))).body.into_json()),
            Action::Cancel(i) => replies.push(
                w.call(Request::Cancel {
                    execution_id: id(*i),
                    reason: None,
                    idempotency: None,
                })
                .body
                .into_json(),
            ),
            Action::Take => {
                let tasks = w.poll(&session, 2);
                tokens.extend(tasks.iter().map(|t| t.token.clone()));
                replies.push(json!(tasks.len()));
            }
            Action::Succeed(t) | Action::Fail(t) if tokens.is_empty() => {
                let _ = t;
            }
            Action::Succeed(t) => {
                let token = tokens[usize::from(*t) % tokens.len()].clone();
                replies.push(w.succeed(&token, json!({"n": 2})));
            }
            Action::Fail(t) => {
                let token = tokens[usize::from(*t) % tokens.len()].clone();
                replies.push(
                    w.call(Request::Result {
                        token,
                        outcome: Outcome::Error(ErrorInfo {
                            code: "BUSY".into(),
                            message: String::new(),
                            retryable: true,
                        }),
                        patterns: None,
                    })
                    .body
                    .into_json(),
                );
            }
            Action::Heartbeat => {
                let held: Vec<&str> = tokens.iter().map(String::as_str).collect();
                replies.push(json!(w.heartbeat(&session, &held)));
            }
            Action::Evict => {
                if evict {
                    w.engine.evict_idle_now();
                }
            }
        }
    }
    let histories = (0..6)
        .flat_map(|i| [w.logs(&id(i)), w.logs(&format!("{}.child", id(i)))])
        .collect::<Vec<_>>()
        .join("\n");
    (replies, histories)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, .. ProptestConfig::default() })]

    /// Eviction — on a timer, under a cap of one execution in memory, or
    /// forced at any point — changes neither a reply nor an event.
    #[test]
    fn eviction_is_invisible(actions in proptest::collection::vec(action(), 1..60)) {
        let (kept_replies, kept_histories) = run(&actions, None, None, false);
        let (replies, histories) = run(&actions, Some(10_000), None, true);
        prop_assert_eq!(&kept_replies, &replies);
        prop_assert_eq!(&kept_histories, &histories);
        let (replies, histories) = run(&actions, Some(10_000), Some(1), false);
        prop_assert_eq!(&kept_replies, &replies);
        prop_assert_eq!(&kept_histories, &histories);
    }
}
