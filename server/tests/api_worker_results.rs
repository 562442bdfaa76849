//! Results on the poll (`POST /v1/workers/{session}/poll` with `results`):
//! each carried result is recorded exactly as `POST /v1/tasks/{token}/result`
//! records it and answered only after its commit, per result (the seed's
//! reasons for stale and duplicate tokens, `403` outside a worker's grant,
//! `503` when its commit fails), then the poll hands out tasks. A malformed
//! body is refused whole and changes nothing; the old calls keep working.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod guard_support;

use axum::http::{Method, StatusCode};
use guard_support::{Harness, Reply};
use orbit_io_tokio::driver::Options;
use orbit_server::api::auth::{hash_token, AuthConfig};
use orbit_server::api::{self};
use serde_json::{json, Value};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A chain of two steps, so a result schedules a next task.
const CHAIN: &str = r#"
task "demo.work" version "1.0.0" {
    input  { n: Int }
    output { n: Int }
}

task "payments.charge" version "1.0.0" {
    input  { n: Int }
    output { n: Int }
}

workflow Two version "1.0.0" {
    input { n: Int }
    step a {
        worker "demo.work"
        with { n: input.n }
    }
    step b {
        worker "demo.work"
        with { n: a.n }
    }
    output { n: b.n }
}

workflow Pay version "1.0.0" {
    input { n: Int }
    step charge {
        worker "payments.charge"
        with { n: input.n }
    }
    output { n: charge.n }
}
"#;

async fn post(h: &Harness, uri: &str, body: Value) -> Reply {
    h.send(Method::POST, uri, &[], &body.to_string()).await
}

async fn setup(h: &Harness) {
    let r = post(
        h,
        "/v1/definitions",
        json!({"source": CHAIN, "filename": "c.orbit"}),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.json);
}

async fn start(h: &Harness, workflow: &str, id: &str) {
    let r = post(
        h,
        "/v1/executions",
        json!({"workflow": workflow, "input": {"n": 1}, "execution_id": id}),
    )
    .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.json);
}

async fn register(h: &Harness, patterns: &[&str]) -> String {
    let r = post(
        h,
        "/v1/workers",
        json!({"worker_id": "w", "task_patterns": patterns}),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.json);
    r.json["session_id"].as_str().unwrap().to_owned()
}

async fn poll(h: &Harness, session: &str, body: Value) -> Reply {
    post(h, &format!("/v1/workers/{session}/poll"), body).await
}

/// Polls until `n` tasks came back; returns them.
async fn take(h: &Harness, session: &str, n: usize) -> Vec<Value> {
    let mut tasks = Vec::new();
    while tasks.len() < n {
        let r = poll(
            h,
            session,
            json!({"max_tasks": n - tasks.len(), "wait_ms": 2000}),
        )
        .await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.json);
        tasks.extend(r.json["tasks"].as_array().unwrap().iter().cloned());
    }
    tasks
}

async fn types(h: &Harness, id: &str) -> Vec<String> {
    let r = h
        .send(
            Method::GET,
            &format!("/v1/executions/{id}/history"),
            &[],
            "",
        )
        .await;
    r.json["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["type"].as_str().unwrap().to_owned())
        .collect()
}

fn token(task: &Value) -> String {
    task["token"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn a_result_rides_on_the_poll_and_the_next_task_comes_back() {
    let h = Harness::start().await;
    setup(&h).await;
    let session = register(&h, &["demo.*"]).await;
    start(&h, "Two", "e1").await;
    let a = take(&h, &session, 1).await.remove(0);
    assert_eq!(a["step_id"], "a");
    let r = poll(
        &h,
        &session,
        json!({"max_tasks": 1, "wait_ms": 2000, "results": [{"token": token(&a), "output": {"n": 2}}]}),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.json);
    assert_eq!(
        r.json["results"],
        json!([{"token": token(&a), "status": 200, "accepted": true}])
    );
    let tasks = r.json["tasks"].as_array().unwrap();
    assert_eq!(tasks.len(), 1, "{}", r.json);
    assert_eq!(tasks[0]["step_id"], "b");
    assert_eq!(tasks[0]["input"], json!({"n": 2}));
    // Both the result and the hand-out are durable by the time they answer.
    assert_eq!(
        types(&h, "e1").await,
        [
            "WorkflowCreated",
            "WorkflowStarted",
            "StepScheduled",
            "StepDispatched",
            "StepSucceeded",
            "StepScheduled",
            "StepDispatched"
        ]
    );
    // The last result on a poll that asks for nothing more to wait for.
    let b = &tasks[0];
    let r = poll(
        &h,
        &session,
        json!({"wait_ms": 0, "results": [{"token": token(b), "output": {"n": 3}}]}),
    )
    .await;
    assert_eq!(r.json["results"][0]["accepted"], true, "{}", r.json);
    assert_eq!(r.json["tasks"], json!([]));
    let r = post(&h, "/v1/executions/e1/wait?timeout_ms=5000", json!(null)).await;
    assert_eq!(r.json["status"], "completed", "{}", r.json);
    assert_eq!(r.json["output"], json!({"n": 3}));
}

#[tokio::test]
async fn each_carried_result_is_answered_only_after_its_commit() {
    let h = Harness::start().await;
    setup(&h).await;
    let session = register(&h, &["demo.*"]).await;
    for id in ["c1", "c2", "c3"] {
        start(&h, "Two", id).await;
    }
    let tasks = take(&h, &session, 3).await;
    h.store.commit_delay_ms.store(400, Ordering::SeqCst);
    let results: Vec<Value> = tasks
        .iter()
        .map(|t| json!({"token": token(t), "output": {"n": 5}}))
        .collect();
    let began = Instant::now();
    let r = poll(
        &h,
        &session,
        json!({"max_tasks": 3, "wait_ms": 0, "results": results}),
    )
    .await;
    assert!(
        began.elapsed() >= Duration::from_millis(400),
        "answered before the commit: {:?}",
        began.elapsed()
    );
    h.store.commit_delay_ms.store(0, Ordering::SeqCst);
    let answers = r.json["results"].as_array().unwrap();
    assert_eq!(answers.len(), 3, "{}", r.json);
    for (answer, task) in answers.iter().zip(&tasks) {
        assert_eq!(answer["token"], task["token"], "in the request's order");
        assert_eq!(answer["accepted"], true);
        let id = task["execution_id"].as_str().unwrap();
        assert!(
            types(&h, id).await.contains(&"StepSucceeded".to_owned()),
            "{id}"
        );
    }
}

#[tokio::test]
async fn stale_duplicate_and_unknown_tokens_are_answered_per_result() {
    let h = Harness::start().await;
    setup(&h).await;
    let session = register(&h, &["demo.*"]).await;
    start(&h, "Two", "d1").await;
    start(&h, "Two", "d2").await;
    let tasks = take(&h, &session, 2).await;
    let (first, second) = (&tasks[0], &tasks[1]);
    // The first result is recorded alone (the old call), then reported
    // again on a poll together with a fresh result, an unknown token and a
    // contract violation: only the fresh one counts, the others get the
    // seed's reasons, and none fails the rest.
    let r = post(
        &h,
        &format!("/v1/tasks/{}/result", token(first)),
        json!({"output": {"n": 2}}),
    )
    .await;
    assert_eq!(r.json, json!({"accepted": true}));
    let r = poll(
        &h,
        &session,
        json!({"max_tasks": 2, "wait_ms": 0, "results": [
            {"token": token(first), "output": {"n": 2}},
            {"token": "no-such-token", "output": {"n": 2}},
            {"token": token(second), "output": {"wrong": true}},
        ]}),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.json);
    assert_eq!(
        r.json["results"],
        json!([
            {"token": token(first), "status": 200, "accepted": false,
             "reason": "duplicate result; step already resolved"},
            {"token": "no-such-token", "status": 200, "accepted": false,
             "reason": "unknown token (execution finished or token invalid)"},
            {"token": token(second), "status": 200, "accepted": false,
             "reason": "output violates the task contract"},
        ])
    );
    // The contract violation failed `second`'s attempt 1; its retry is
    // attempt 2 (d1's next step may come first).
    let retry = loop {
        let t = take(&h, &session, 1).await.remove(0);
        if t["execution_id"] == "d2" {
            break t;
        }
    };
    assert_eq!(retry["attempt"], 2, "{retry}");
    // A failure from the older attempt is stale.
    let r = poll(
        &h,
        &session,
        json!({"wait_ms": 0, "results": [
            {"token": token(second), "error": {"code": "LATE"}},
        ]}),
    )
    .await;
    assert_eq!(
        r.json["results"],
        json!([{"token": token(second), "status": 200, "accepted": false, "reason": "stale attempt"}])
    );
    // The same token twice in one call: the first counts, the second is
    // the duplicate.
    let r = poll(
        &h,
        &session,
        json!({"wait_ms": 0, "results": [
            {"token": token(&retry), "output": {"n": 3}},
            {"token": token(&retry), "output": {"n": 3}},
        ]}),
    )
    .await;
    assert_eq!(r.json["results"][0]["accepted"], true, "{}", r.json);
    assert_eq!(r.json["results"][1]["accepted"], false, "{}", r.json);
    assert_eq!(
        r.json["results"][1]["reason"],
        "duplicate result; step already resolved"
    );
}

#[tokio::test]
async fn a_malformed_body_is_refused_whole_and_changes_nothing() {
    let h = Harness::start().await;
    setup(&h).await;
    let session = register(&h, &["demo.*"]).await;
    start(&h, "Two", "m1").await;
    let a = take(&h, &session, 1).await.remove(0);
    let good = json!({"token": token(&a), "output": {"n": 2}});
    for bad in [
        json!({"token": token(&a), "output": 1, "error": {"code": "X"}}),
        json!({"token": token(&a)}),
        json!({"output": 1}),
        json!({"token": 7, "output": 1}),
        json!({"token": "", "output": 1}),
        json!({"token": token(&a), "error": {"code": "A\u{1}B"}}),
        json!({"token": token(&a), "output": 1, "extra": 1}),
        json!("not an object"),
    ] {
        let r = poll(
            &h,
            &session,
            json!({"wait_ms": 0, "results": [good.clone(), bad.clone()]}),
        )
        .await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{bad}: {}", r.json);
        assert_eq!(r.code(), "INVALID_REQUEST", "{bad}");
    }
    let too_many: Vec<Value> = (0..1001).map(|_| good.clone()).collect();
    let r = poll(&h, &session, json!({"wait_ms": 0, "results": too_many})).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.json);
    // Nothing was recorded: the good result still counts.
    assert!(!types(&h, "m1").await.contains(&"StepSucceeded".to_owned()));
    let r = poll(&h, &session, json!({"wait_ms": 0, "results": [good]})).await;
    assert_eq!(r.json["results"][0]["accepted"], true, "{}", r.json);
}

#[tokio::test]
async fn a_failed_commit_is_answered_503_for_that_result_only() {
    let h = Harness::start().await;
    setup(&h).await;
    let session = register(&h, &["demo.*"]).await;
    start(&h, "Two", "f1").await;
    let a = take(&h, &session, 1).await.remove(0);
    h.store.fail_commits.store(true, Ordering::SeqCst);
    let r = poll(
        &h,
        &session,
        json!({"wait_ms": 0, "results": [{"token": token(&a), "output": {"n": 2}}]}),
    )
    .await;
    h.store.fail_commits.store(false, Ordering::SeqCst);
    assert_eq!(r.status, StatusCode::OK, "{}", r.json);
    let answer = &r.json["results"][0];
    assert_eq!(answer["status"], 503, "{}", r.json);
    assert_eq!(answer["error"]["code"], "STORAGE_ERROR", "{}", r.json);
    // Reported again, it counts.
    let r = poll(
        &h,
        &session,
        json!({"wait_ms": 0, "results": [{"token": token(&a), "output": {"n": 2}}]}),
    )
    .await;
    assert_eq!(r.json["results"][0]["accepted"], true, "{}", r.json);
}

#[tokio::test]
async fn an_unknown_session_still_records_the_results_and_says_so() {
    let h = Harness::start().await;
    setup(&h).await;
    let session = register(&h, &["demo.*"]).await;
    start(&h, "Two", "u1").await;
    let a = take(&h, &session, 1).await.remove(0);
    let r = poll(
        &h,
        "no-such-session",
        json!({"wait_ms": 0, "results": [{"token": token(&a), "output": {"n": 2}}]}),
    )
    .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "{}", r.json);
    assert_eq!(r.code(), "UNKNOWN_SESSION");
    assert_eq!(
        r.json["error"]["results"],
        json!([{"token": token(&a), "status": 200, "accepted": true}])
    );
    assert!(types(&h, "u1").await.contains(&"StepSucceeded".to_owned()));
}

#[tokio::test]
async fn the_old_calls_keep_working() {
    let h = Harness::start().await;
    setup(&h).await;
    let session = register(&h, &["demo.*"]).await;
    start(&h, "Two", "o1").await;
    // A poll without `results` answers `{"tasks"}` alone, as before.
    let r = poll(&h, &session, json!({"max_tasks": 1, "wait_ms": 2000})).await;
    assert_eq!(r.json.as_object().unwrap().len(), 1, "{}", r.json);
    let a = &r.json["tasks"][0];
    let r = post(
        &h,
        &format!("/v1/tasks/{}/result", token(a)),
        json!({"output": {"n": 2}}),
    )
    .await;
    assert_eq!(r.json, json!({"accepted": true}));
    let b = take(&h, &session, 1).await.remove(0);
    let r = post(
        &h,
        &format!("/v1/tasks/{}/result", token(&b)),
        json!({"output": {"n": 3}}),
    )
    .await;
    assert_eq!(r.json, json!({"accepted": true}));
    let r = post(&h, "/v1/executions/o1/wait?timeout_ms=5000", json!(null)).await;
    assert_eq!(r.json["status"], "completed", "{}", r.json);
    // An empty body is still a poll.
    let r = h
        .send(
            Method::POST,
            &format!("/v1/workers/{session}/poll"),
            &[],
            "",
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.json);
}

const ADMIN: &str = "admin-secret";
const DEMO: &str = "demo-secret";
const PAYER: &str = "payer-secret";

#[tokio::test]
async fn a_worker_token_reports_on_the_poll_only_within_its_grant() {
    let config = AuthConfig::parse(&format!(
        r#"
[[tokens]]
name = "ops"
role = "admin"
sha256 = "{}"

[[tokens]]
name = "demo-workers"
role = "worker"
task_patterns = ["demo.*"]
sha256 = "{}"

[[tokens]]
name = "payments-workers"
role = "worker"
task_patterns = ["payments.*"]
sha256 = "{}"
"#,
        hash_token(ADMIN),
        hash_token(DEMO),
        hash_token(PAYER)
    ))
    .unwrap();
    let h = Harness::start_with(
        api::Options {
            auth: Some(Arc::new(config)),
            ..api::Options::default()
        },
        Options::default(),
    )
    .await;
    let send = |token: &'static str, uri: String, body: Value| {
        let h = &h;
        async move {
            let bearer = format!("Bearer {token}");
            h.send(
                Method::POST,
                &uri,
                &[("authorization", bearer.as_str())],
                &body.to_string(),
            )
            .await
        }
    };
    let r = send(
        ADMIN,
        "/v1/definitions".into(),
        json!({"source": CHAIN, "filename": "c.orbit"}),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.json);
    for (workflow, id) in [("Pay", "p1"), ("Two", "t1")] {
        let r = send(
            ADMIN,
            "/v1/executions".into(),
            json!({"workflow": workflow, "input": {"n": 1}, "execution_id": id}),
        )
        .await;
        assert_eq!(r.status, StatusCode::CREATED, "{}", r.json);
    }
    let mut sessions = Vec::new();
    for (token, pattern) in [(PAYER, "payments.*"), (DEMO, "demo.*")] {
        let r = send(
            token,
            "/v1/workers".into(),
            json!({"worker_id": "w", "task_patterns": [pattern]}),
        )
        .await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.json);
        sessions.push(r.json["session_id"].as_str().unwrap().to_owned());
    }
    let pay_poll = format!("/v1/workers/{}/poll", sessions[0]);
    let demo_poll = format!("/v1/workers/{}/poll", sessions[1]);
    let r = send(
        PAYER,
        pay_poll.clone(),
        json!({"max_tasks": 1, "wait_ms": 2000}),
    )
    .await;
    let charge = token(&r.json["tasks"][0]);
    let r = send(
        DEMO,
        demo_poll.clone(),
        json!({"max_tasks": 1, "wait_ms": 2000}),
    )
    .await;
    let work = token(&r.json["tasks"][0]);
    // The demo worker reports its own result and the charge: the charge is
    // forbidden to it, its own counts.
    let r = send(
        DEMO,
        demo_poll,
        json!({"wait_ms": 0, "results": [
            {"token": charge, "output": {"n": 6}},
            {"token": work, "output": {"n": 2}},
        ]}),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.json);
    assert_eq!(r.json["results"][0]["status"], 403, "{}", r.json);
    assert_eq!(r.json["results"][0]["error"]["code"], "FORBIDDEN");
    assert_eq!(r.json["results"][1]["accepted"], true, "{}", r.json);
    // The payments worker's own report of the charge counts.
    let r = send(
        PAYER,
        pay_poll,
        json!({"wait_ms": 0, "results": [{"token": charge, "output": {"n": 6}}]}),
    )
    .await;
    assert_eq!(r.json["results"][0]["accepted"], true, "{}", r.json);
    let r = send(
        ADMIN,
        "/v1/executions/p1/wait?timeout_ms=5000".into(),
        json!(null),
    )
    .await;
    assert_eq!(r.json["status"], "completed", "{}", r.json);
}
