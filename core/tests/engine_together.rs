//! A worker's results and its next poll handled as one
//! ([`orbit_core::engine::Input::Requests`]): one write for all of them, the
//! poll taking what is queued and then what the results schedule, every
//! answer after that write — and each result judged exactly as alone.

#![allow(clippy::unwrap_used)]

mod engine_support;

use engine_support::*;
use orbit_core::engine::Outcome;
use orbit_core::{Config, Request};
use serde_json::json;

const TWO: &str = r#"
task "demo.work" version "1.0.0" {
    input { n: Int }
    output { v: Int }
}

workflow One version "1.0.0" {
    input { n: Int }
    step work {
        worker "demo.work"
        with { n: input.n }
    }
}

workflow Two version "1.0.0" {
    input { n: Int }
    step work {
        worker "demo.work"
        with { n: input.n }
    }
    step more {
        worker "demo.work"
        with { n: work.v }
    }
}
"#;

fn world() -> World {
    let mut w = World::new(Config::default());
    assert_eq!(w.deploy(TWO).status, 200);
    w
}

fn success(token: &str, v: i64) -> Request {
    Request::Result {
        token: token.into(),
        outcome: Outcome::Output(json!({ "v": v })),
        patterns: None,
    }
}

fn poll(session: &str, max: u32, wait_ms: u64) -> Request {
    Request::Poll {
        session_id: session.into(),
        max_tasks: Some(max),
        wait_ms,
        held: Vec::new(),
    }
}

fn tasks(w: &mut World, id: u64) -> Vec<(String, String)> {
    let r = w.replies.remove(&id).expect("the poll is answered");
    assert_eq!(r.status, 200, "{:?}", r.body);
    r.body["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            (
                t["execution_id"].as_str().unwrap().to_string(),
                t["step_id"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

fn storage_errors(w: &mut World, ids: Vec<u64>) {
    for id in ids {
        let r = w.replies.remove(&id).expect("answered");
        assert_eq!(r.error_code(), Some("STORAGE_ERROR"), "{:?}", r.body);
    }
}

#[test]
fn results_and_the_next_poll_share_one_write() {
    let mut w = world();
    w.latency = 1;
    w.start("Two", "a", json!({"n": 1}));
    w.start("Two", "b", json!({"n": 2}));
    let s = w.register("w-1", &["demo.*"]);
    w.at(10);
    let first = w.poll(&s, 2);
    assert_eq!(first.len(), 2);
    // A third execution's first step waits in the queue meanwhile.
    w.start("Two", "c", json!({"n": 3}));
    w.at(20);
    let writes = w.appends;
    let ids = w.send_together(vec![
        success(&first[0].token, 10),
        success(&first[1].token, 20),
        poll(&s, 8, 0),
    ]);
    assert_eq!(
        w.appends - writes,
        1,
        "two results, their next steps, three hand-outs: one write"
    );
    assert_eq!(
        w.replies.remove(&ids[0]).unwrap().body.into_json(),
        accepted()
    );
    assert_eq!(
        w.replies.remove(&ids[1]).unwrap().body.into_json(),
        accepted()
    );
    assert_eq!(
        tasks(&mut w, ids[2]),
        [("c", "work"), ("a", "more"), ("b", "more")].map(|(e, s)| (e.to_string(), s.to_string())),
        "what was queued first, then what the results scheduled"
    );
    assert_logs(
        &w.logs("a"),
        "
        + 0ms #1 WorkflowCreated
        + 0ms #2 WorkflowStarted
        + 0ms #3 StepScheduled step=work attempt=1
        + 10ms #4 StepDispatched step=work attempt=1 worker_id=w-1
        + 20ms #5 StepSucceeded step=work attempt=1
        + 20ms #6 StepScheduled step=more attempt=1
        + 20ms #7 StepDispatched step=more attempt=1 worker_id=w-1
        ",
    );
}

#[test]
fn the_poll_takes_no_more_than_it_asked_for() {
    let mut w = world();
    w.start("Two", "a", json!({"n": 1}));
    w.start("Two", "b", json!({"n": 2}));
    let s = w.register("w-1", &["demo.*"]);
    let first = w.poll(&s, 2);
    let ids = w.send_together(vec![
        success(&first[0].token, 10),
        success(&first[1].token, 20),
        poll(&s, 1, 0),
    ]);
    assert_eq!(tasks(&mut w, ids[2]).len(), 1);
    // The other next step stays queued for the next poll.
    let rest = w.poll(&s, 8);
    assert_eq!(rest.len(), 1);
    assert_eq!(rest[0].step_id, "more");
}

#[test]
fn each_result_is_judged_as_if_alone() {
    let mut w = world();
    w.start("Two", "a", json!({"n": 1}));
    let s = w.register("w-1", &["demo.*"]);
    let first = w.take(&s);
    let ids = w.send_together(vec![
        success(&first.token, 10),
        success("no-such-token", 1),
        success(&first.token, 11),
        poll(&s, 4, 0),
    ]);
    assert_eq!(
        w.replies.remove(&ids[0]).unwrap().body.into_json(),
        accepted()
    );
    assert_eq!(
        w.replies.remove(&ids[1]).unwrap().body.into_json(),
        json!({"accepted": false, "reason": "unknown token (execution finished or token invalid)"})
    );
    assert_eq!(
        w.replies.remove(&ids[2]).unwrap().body.into_json(),
        json!({"accepted": false, "reason": "duplicate result; step already resolved"})
    );
    assert_eq!(
        tasks(&mut w, ids[3]),
        [("a".to_string(), "more".to_string())]
    );
    assert_logs(
        &w.logs("a"),
        "
        + 0ms #1 WorkflowCreated
        + 0ms #2 WorkflowStarted
        + 0ms #3 StepScheduled step=work attempt=1
        + 0ms #4 StepDispatched step=work attempt=1 worker_id=w-1
        + 0ms #5 StepSucceeded step=work attempt=1
        + 0ms #6 StepScheduled step=more attempt=1
        + 0ms #7 StaleResultIgnored step=work attempt=1 outcome=duplicate
        + 0ms #8 StepDispatched step=more attempt=1 worker_id=w-1
        ",
    );
}

#[test]
fn a_failed_write_fails_every_answer_and_hands_out_nothing() {
    let mut w = world();
    w.start("Two", "a", json!({"n": 1}));
    let s = w.register("w-1", &["demo.*"]);
    let first = w.take(&s);
    w.mode = Mode::Unavailable;
    let ids = w.send_together(vec![success(&first.token, 10), poll(&s, 4, 0)]);
    storage_errors(&mut w, ids);
    w.mode = Mode::Ok;
    assert_eq!(w.status("a"), "running");
    // Reported again, the result lands and the next step goes out.
    let ids = w.send_together(vec![success(&first.token, 10), poll(&s, 4, 0)]);
    assert_eq!(
        w.replies.remove(&ids[0]).unwrap().body.into_json(),
        accepted()
    );
    assert_eq!(
        tasks(&mut w, ids[1]),
        [("a".to_string(), "more".to_string())]
    );
}

#[test]
fn a_waiting_poll_with_nothing_to_take_parks() {
    let mut w = world();
    w.start("Two", "a", json!({"n": 1}));
    let s = w.register("w-1", &["demo.*"]);
    let first = w.take(&s);
    let ids = w.send_together(vec![
        Request::Result {
            token: first.token.clone(),
            outcome: Outcome::Error(orbit_core::history::ErrorInfo {
                code: "NOPE".into(),
                message: String::new(),
                retryable: false,
            }),
            patterns: None,
        },
        poll(&s, 4, 5_000),
    ]);
    assert_eq!(
        w.replies.remove(&ids[0]).unwrap().body.into_json(),
        accepted()
    );
    assert!(
        !w.replies.contains_key(&ids[1]),
        "nothing to take: the poll waits"
    );
    assert_eq!(w.status("a"), "failed");
    w.start("Two", "b", json!({"n": 2}));
    assert_eq!(
        tasks(&mut w, ids[1]),
        [("b".to_string(), "work".to_string())]
    );
}

/// A worker that reports twice, in one poll, the result that ends its
/// execution: the second copy is judged on the first's uncommitted success
/// (the execution has ended there). That judgment too waits for the write;
/// answered at once, it would tell the worker to drop a result that then
/// never landed.
#[test]
fn a_judgment_on_what_others_proposed_waits_for_their_write() {
    let mut w = world();
    w.start("One", "a", json!({"n": 1}));
    let s = w.register("w-1", &["demo.*"]);
    let first = w.take(&s);
    w.mode = Mode::Unavailable;
    let ids = w.send_together(vec![
        success(&first.token, 10),
        success(&first.token, 10),
        poll(&s, 4, 0),
    ]);
    storage_errors(&mut w, ids);
    w.mode = Mode::Ok;
    let ids = w.send_together(vec![success(&first.token, 10), success(&first.token, 10)]);
    assert_eq!(
        w.replies.remove(&ids[0]).unwrap().body.into_json(),
        accepted()
    );
    assert_eq!(
        w.replies.remove(&ids[1]).unwrap().body.into_json(),
        json!({"accepted": false, "reason": "unknown token (execution finished or token invalid)"})
    );
    assert_eq!(w.status("a"), "completed");
}
