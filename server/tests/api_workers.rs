//! The worker protocol: register, long-poll, heartbeat, results, unregister.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod api_support;

use api_support::{code, Server, PLAIN};
use axum::http::{Method, StatusCode};
use serde_json::json;
use std::time::Duration;

#[tokio::test]
async fn a_worker_runs_an_execution_to_completion() {
    let s = Server::start().await;
    s.deploy(PLAIN).await;
    let session = s.register("w-1", &["demo.*"]).await;
    s.start_plain("run-1").await;
    let tasks = s.poll(&session, 2_000).await;
    assert_eq!(tasks.len(), 1, "{tasks:?}");
    let t = &tasks[0];
    assert_eq!(t["execution_id"], "run-1");
    assert_eq!(t["workflow"], "Plain");
    assert_eq!(t["workflow_version"], "1.0.0");
    assert_eq!(t["step_id"], "work");
    assert_eq!(t["task_name"], "demo.work");
    assert_eq!(t["contract_version"], "1.0.0");
    assert_eq!(t["input"], json!({"n": 21}));
    assert_eq!(t["idempotency_key"], "run-1/work");
    assert_eq!(t["attempt"], 1);
    assert_eq!(t["redelivery"], false);
    let token = t["token"].as_str().unwrap();
    let (status, body) = s
        .post(
            &format!("/v1/tasks/{token}/result"),
            json!({"output": {"doubled": 42}}),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body, json!({"accepted": true}));
    let (_, e) = s
        .post("/v1/executions/run-1/wait?timeout_ms=5000", json!(null))
        .await;
    assert_eq!(e["status"], "completed", "{e}");
    assert_eq!(e["output"], json!({"doubled": 42}));
    // A second report of the same unit is a duplicate.
    let (_, dup) = s
        .post(
            &format!("/v1/tasks/{token}/result"),
            json!({"output": {"doubled": 42}}),
        )
        .await;
    assert_eq!(dup["accepted"], false, "{dup}");
    let types = s.types("run-1").await;
    assert_eq!(
        types,
        vec![
            "WorkflowCreated",
            "WorkflowStarted",
            "StepScheduled",
            "StepDispatched",
            "StepSucceeded",
            "WorkflowCompleted"
        ]
    );
}

#[tokio::test]
async fn a_parked_poll_receives_a_task_scheduled_later() {
    let s = Server::start().await;
    s.deploy(PLAIN).await;
    let session = s.register("w-1", &["demo.work"]).await;
    let poll = {
        let router = s.router.clone();
        let driver = s.driver.clone();
        let session = session.clone();
        tokio::spawn(async move {
            let dir = tempfile::tempdir().unwrap();
            let s2 = api_support::Server {
                router,
                driver,
                dir,
            };
            s2.poll(&session, 5_000).await
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    s.start_plain("later-1").await;
    let tasks = tokio::time::timeout(Duration::from_secs(5), poll)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(tasks.len(), 1);
    assert_eq!(tasks[0]["execution_id"], "later-1");
}

#[tokio::test]
async fn an_empty_long_poll_returns_after_wait_ms() {
    let s = Server::start().await;
    let session = s.register("w-1", &["*"]).await;
    let started = std::time::Instant::now();
    let tasks = s.poll(&session, 300).await;
    assert!(tasks.is_empty());
    assert!(started.elapsed() >= Duration::from_millis(250));
}

#[tokio::test]
async fn register_answers_a_session_and_its_timeout() {
    let s = Server::start().await;
    let (status, body) = s
        .post(
            "/v1/workers",
            json!({"worker_id": "w", "task_patterns": ["*"], "max_tasks": 4}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(!body["session_id"].as_str().unwrap().is_empty());
    assert_eq!(body["session_timeout_ms"], 30_000);
}

#[tokio::test]
async fn unknown_sessions_are_404_unknown_session() {
    let s = Server::start().await;
    let (status, body) = s.post("/v1/workers/nope/poll", json!({"wait_ms": 0})).await;
    assert_eq!(
        (status, code(&body)),
        (StatusCode::NOT_FOUND, "UNKNOWN_SESSION")
    );
    let (status, body) = s
        .post("/v1/workers/nope/heartbeat", json!({"held": []}))
        .await;
    assert_eq!(
        (status, code(&body)),
        (StatusCode::NOT_FOUND, "UNKNOWN_SESSION")
    );
    let (status, body) = s
        .call(Method::DELETE, "/v1/workers/nope", json!(null))
        .await;
    assert_eq!(
        (status, code(&body)),
        (StatusCode::NOT_FOUND, "UNKNOWN_SESSION")
    );
}

#[tokio::test]
async fn heartbeat_accepts_tokens_as_a_synonym_and_answers_a_cancel_list() {
    let s = Server::start().await;
    s.deploy(PLAIN).await;
    let session = s.register("w-1", &["demo.*"]).await;
    s.start_plain("hb-1").await;
    let tasks = s.poll(&session, 2_000).await;
    let token = tasks[0]["token"].as_str().unwrap().to_owned();
    let (status, body) = s
        .post(
            &format!("/v1/workers/{session}/heartbeat"),
            json!({"tokens": [token]}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["cancel"], json!([]));
    // Once the execution is cancelled, the first delivery is on the cancel list.
    s.post("/v1/executions/hb-1/cancel", json!(null)).await;
    let (_, body) = s
        .post(
            &format!("/v1/workers/{session}/heartbeat"),
            json!({"held": [token]}),
        )
        .await;
    assert_eq!(body["cancel"], json!([token]), "{body}");
}

#[tokio::test]
async fn unknown_token_is_not_accepted() {
    let s = Server::start().await;
    let (status, body) = s
        .post(
            "/v1/tasks/00000000-0000-4000-8000-000000000000/result",
            json!({"output": {}}),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        body,
        json!({"accepted": false, "reason": "unknown token (execution finished or token invalid)"})
    );
}

#[tokio::test]
async fn a_failure_report_is_recorded_and_retried() {
    let s = Server::start().await;
    s.deploy(PLAIN).await;
    let session = s.register("w-1", &["demo.*"]).await;
    s.start_plain("f-1").await;
    let tasks = s.poll(&session, 2_000).await;
    let token = tasks[0]["token"].as_str().unwrap();
    let (_, body) = s
        .post(
            &format!("/v1/tasks/{token}/result"),
            json!({"error": {"code": "BOOM", "message": "it broke"}}),
        )
        .await;
    assert_eq!(body, json!({"accepted": true}));
    let types = s.types("f-1").await;
    assert_eq!(types.last().unwrap(), "StepAttemptFailed", "{types:?}");
}

#[tokio::test]
async fn output_violating_the_contract_is_not_accepted() {
    let s = Server::start().await;
    s.deploy(PLAIN).await;
    let session = s.register("w-1", &["demo.*"]).await;
    s.start_plain("o-1").await;
    let tasks = s.poll(&session, 2_000).await;
    let token = tasks[0]["token"].as_str().unwrap();
    let (_, body) = s
        .post(
            &format!("/v1/tasks/{token}/result"),
            json!({"output": {"doubled": "x"}}),
        )
        .await;
    assert_eq!(
        body,
        json!({"accepted": false, "reason": "output violates the task contract"})
    );
}

#[tokio::test]
async fn unregister_makes_held_tasks_uncertain_and_redelivers_them() {
    let s = Server::start().await;
    s.deploy(PLAIN).await;
    let session = s.register("w-1", &["demo.*"]).await;
    s.start_plain("u-1").await;
    let tasks = s.poll(&session, 2_000).await;
    assert_eq!(tasks.len(), 1);
    let (status, _) = s
        .call(
            Method::DELETE,
            &format!("/v1/workers/{session}"),
            json!(null),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    let other = s.register("w-2", &["demo.*"]).await;
    let again = s.poll(&other, 2_000).await;
    assert_eq!(again.len(), 1, "{again:?}");
    assert_eq!(again[0]["redelivery"], true);
    assert_eq!(again[0]["attempt"], 1);
    let (_, h) = s.get("/v1/executions/u-1/history").await;
    let uncertain = h["events"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["type"] == "StepAttemptUncertain")
        .unwrap()
        .clone();
    assert_eq!(uncertain["reason"], "worker unregistered");
}

#[tokio::test]
async fn metrics_count_dispatches_and_sessions() {
    let s = Server::start().await;
    s.deploy(PLAIN).await;
    let session = s.register("w-1", &["demo.*"]).await;
    s.start_plain("m-1").await;
    // The first step is scheduled in a batch of its own, right after the start.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        let (_, text) = s.get("/metrics").await;
        if text.as_str().unwrap().contains("orbit_queue_depth 1") {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{text}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let tasks = s.poll(&session, 2_000).await;
    let token = tasks[0]["token"].as_str().unwrap();
    s.post(
        &format!("/v1/tasks/{token}/result"),
        json!({"output": {"doubled": 42}}),
    )
    .await;
    let (_, text) = s.get("/metrics").await;
    let text = text.as_str().unwrap().to_owned();
    assert!(text.contains("orbit_steps_dispatched_total 1"), "{text}");
    assert!(text.contains("orbit_steps_succeeded_total 1"), "{text}");
    assert!(text.contains("orbit_worker_sessions 1"), "{text}");
    assert!(text.contains("orbit_queue_depth 0"), "{text}");
    assert!(
        text.contains("orbit_executions{status=\"completed\"} 1"),
        "{text}"
    );
    s.call(
        Method::DELETE,
        &format!("/v1/workers/{session}"),
        json!(null),
    )
    .await;
    let (_, text) = s.get("/metrics").await;
    assert!(
        text.as_str().unwrap().contains("orbit_worker_sessions 0"),
        "{text}"
    );
}

#[tokio::test]
async fn a_poll_whose_client_went_away_gets_no_task() {
    let s = Server::start().await;
    s.deploy(PLAIN).await;
    let gone = s.register("w-gone", &["demo.*"]).await;
    let parked = {
        let router = s.router.clone();
        let driver = s.driver.clone();
        tokio::spawn(async move {
            let dir = tempfile::tempdir().unwrap();
            let s2 = api_support::Server {
                router,
                driver,
                dir,
            };
            s2.poll(&gone, 10_000).await
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    parked.abort();
    let _ = parked.await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    s.start_plain("gone-1").await;
    let other = s.register("w-2", &["demo.*"]).await;
    let tasks = s.poll(&other, 2_000).await;
    assert_eq!(tasks.len(), 1, "the abandoned poll took the task");
    assert_eq!(tasks[0]["redelivery"], false);
    let (_, h) = s.get("/v1/executions/gone-1/history").await;
    let dispatches: Vec<&str> = h["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["type"] == "StepDispatched")
        .map(|e| e["worker_id"].as_str().unwrap())
        .collect();
    assert_eq!(dispatches, vec!["w-2"]);
}
