//! Issue 13 over the API: finished executions leave the engine, reads come
//! from the store (the same JSON), list pages are keyset pages under every
//! filter, a restarted server loads only work in progress and still answers
//! commands on finished executions exactly, and retention deletes finished
//! trees only.

#![allow(clippy::unwrap_used)]

mod api_support;

use api_support::{code, Server, PLAIN};
use axum::http::StatusCode;
use orbit_core::engine::Config;
use orbit_io_tokio::driver::{Driver, Options};
use orbit_io_tokio::storage::{SqliteOptions, SqliteStore, Storage};
use orbit_server::api::{app, AppState};
use serde_json::{json, Value};
use std::sync::Arc;

/// Options keeping no finished execution in the engine's memory.
fn forgetful() -> Options {
    Options {
        engine: Config {
            finished_cache: 0,
            ..Config::default()
        },
        ..Options::default()
    }
}

/// Runs `ids` of Plain to completion with one worker.
async fn complete(s: &Server, ids: &[&str]) {
    for id in ids {
        s.start_plain(id).await;
    }
    let session = s.register("w-1", &["demo.*"]).await;
    let mut left = ids.len();
    while left > 0 {
        for task in s.poll(&session, 1_000).await {
            let (status, body) = s
                .post(
                    &format!("/v1/tasks/{}/result", task["token"].as_str().unwrap()),
                    json!({"output": {"doubled": 42}}),
                )
                .await;
            assert_eq!((status, &body["accepted"]), (StatusCode::OK, &json!(true)));
            left -= 1;
        }
    }
    for id in ids {
        let (_, body) = s
            .post(
                &format!("/v1/executions/{id}/wait?timeout_ms=5000"),
                json!({}),
            )
            .await;
        assert_eq!(body["status"], "completed", "{body}");
    }
}

/// The same server's store, reopened by a new driver (a restart).
async fn restart(s: Server) -> Server {
    s.driver.shutdown().await;
    let url = format!("sqlite://{}", s.dir.path().join("orbit.db").display());
    let store = SqliteStore::open(&SqliteOptions::new(url)).await.unwrap();
    let driver = Driver::start(Arc::new(store), forgetful()).await.unwrap();
    Server {
        router: app(AppState::new(driver.clone())),
        driver,
        dir: s.dir,
    }
}

/// A POST with an `Idempotency-Key`.
async fn keyed(s: &Server, uri: &str, body: Value, key: &str) -> (StatusCode, Value) {
    use tower::ServiceExt;
    let request = axum::http::Request::builder()
        .method("POST")
        .uri(uri)
        .header("content-type", "application/json")
        .header("idempotency-key", key)
        .body(axum::body::Body::from(body.to_string()))
        .unwrap();
    let response = s.router.clone().oneshot(request).await.unwrap();
    let status = response.status();
    let bytes = http_body_util::BodyExt::collect(response.into_body())
        .await
        .unwrap()
        .to_bytes();
    (status, serde_json::from_slice(&bytes).unwrap())
}

fn ids(page: &Value) -> Vec<String> {
    page["executions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["execution_id"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn finished_executions_are_read_from_the_store_with_the_same_json() {
    let s = Server::start_with(forgetful(), orbit_server::api::DEFAULT_MAX_BODY).await;
    s.deploy(PLAIN).await;
    complete(&s, &["a-1"]).await;
    let (status, view) = s.get("/v1/executions/a-1").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(view["status"], "completed");
    assert_eq!(view["output"], json!({"doubled": 42}));
    assert_eq!(view["units"]["work"]["status"], "succeeded");
    assert_eq!(view["units"]["work"]["idempotency_key"], "a-1/work");
    assert_eq!(
        s.types("a-1").await,
        [
            "WorkflowCreated",
            "WorkflowStarted",
            "StepScheduled",
            "StepDispatched",
            "StepSucceeded",
            "WorkflowCompleted"
        ]
    );
    let (_, tail) = s
        .get("/v1/executions/a-1/history?after_seq=4&limit=1")
        .await;
    assert_eq!(tail["events"].as_array().unwrap().len(), 1);
    assert_eq!(tail["events"][0]["seq"], 5);
    let (status, body) = s.get("/v1/executions/nope").await;
    assert_eq!(
        (status, code(&body)),
        (StatusCode::NOT_FOUND, "UNKNOWN_EXECUTION")
    );
    let (status, body) = s.get("/v1/executions/nope/history").await;
    assert_eq!(
        (status, code(&body)),
        (StatusCode::NOT_FOUND, "UNKNOWN_EXECUTION")
    );
    // A wait on a finished execution is answered from the store at once.
    let (status, waited) = s.post("/v1/executions/a-1/wait", json!({})).await;
    assert_eq!((status, &waited), (StatusCode::OK, &view));
}

#[tokio::test]
async fn list_pages_follow_the_cursor_newest_first_under_every_filter() {
    let s = Server::start().await;
    s.deploy(PLAIN).await;
    for i in 0..5 {
        s.start_plain(&format!("l-{i}")).await;
        tokio::time::sleep(std::time::Duration::from_millis(3)).await;
    }
    let (_, first) = s.get("/v1/executions?limit=2").await;
    assert_eq!(ids(&first), ["l-4", "l-3"]);
    let cursor = first["next_cursor"].as_str().unwrap().to_owned();
    let (_, second) = s
        .get(&format!("/v1/executions?limit=2&cursor={cursor}"))
        .await;
    assert_eq!(ids(&second), ["l-2", "l-1"]);
    let cursor = second["next_cursor"].as_str().unwrap().to_owned();
    let (_, last) = s
        .get(&format!("/v1/executions?limit=2&cursor={cursor}"))
        .await;
    assert_eq!(
        (ids(&last), &last["next_cursor"]),
        (vec!["l-0".to_owned()], &Value::Null)
    );
    let item = &first["executions"][0];
    for field in [
        "workflow",
        "version",
        "status",
        "parent",
        "created_at",
        "updated_at",
    ] {
        assert!(item.get(field).is_some(), "{field} in {item}");
    }
    let (_, page) = s
        .get("/v1/executions?status=running&workflow=Plain&version=1.0.0&id_prefix=l-")
        .await;
    assert_eq!(ids(&page).len(), 5);
    let (_, page) = s.get("/v1/executions?status=completed").await;
    assert!(ids(&page).is_empty());
    let (_, page) = s.get("/v1/executions?version=2.0.0").await;
    assert!(ids(&page).is_empty());
    // The created range, strictly after and before.
    let (_, one) = s.get("/v1/executions/l-2").await;
    let at = one["created_at"].as_str().unwrap();
    let (_, newer) = s.get(&format!("/v1/executions?created_after={at}")).await;
    assert_eq!(ids(&newer), ["l-4", "l-3"]);
    let (_, older) = s.get(&format!("/v1/executions?created_before={at}")).await;
    assert_eq!(ids(&older), ["l-1", "l-0"]);
    // Lower-case letters are RFC 3339 too, and a time before 1970 bounds
    // the range like any earlier time.
    let lower = at.to_ascii_lowercase();
    let (_, newer) = s
        .get(&format!("/v1/executions?created_after={lower}"))
        .await;
    assert_eq!(ids(&newer), ["l-4", "l-3"]);
    let (_, all) = s
        .get("/v1/executions?created_after=0001-01-01T00:00:00%2B00:00")
        .await;
    assert_eq!(ids(&all).len(), 5);
    let (_, none) = s
        .get("/v1/executions?created_before=1969-12-31T23:59:59Z")
        .await;
    assert!(ids(&none).is_empty());
    let (status, body) = s.get("/v1/executions?created_after=yesterday").await;
    assert_eq!(
        (status, code(&body)),
        (StatusCode::BAD_REQUEST, "INVALID_REQUEST")
    );
}

#[tokio::test]
async fn a_restarted_server_loads_work_in_progress_only_and_answers_the_rest_exactly() {
    let s = Server::start_with(forgetful(), orbit_server::api::DEFAULT_MAX_BODY).await;
    s.deploy(PLAIN).await;
    complete(&s, &["done-1"]).await;
    s.start_plain("live-1").await;
    let (status, first) = keyed(
        &s,
        "/v1/executions",
        json!({"workflow": "Plain", "input": {"n": 1}}),
        "key-1",
    )
    .await;
    assert_eq!(status, StatusCode::CREATED);
    let s = restart(s).await;
    let (signal, body) = s
        .post("/v1/executions/done-1/signals/go", json!({"payload": 1}))
        .await;
    assert_eq!(
        (signal, code(&body)),
        (StatusCode::CONFLICT, "EXECUTION_FINISHED")
    );
    let (cancel, body) = s.post("/v1/executions/done-1/cancel", json!({})).await;
    assert_eq!(
        (cancel, code(&body)),
        (StatusCode::CONFLICT, "EXECUTION_FINISHED")
    );
    let (again, body) = s
        .post(
            "/v1/executions",
            json!({"workflow": "Plain", "input": {"n": 5}, "execution_id": "done-1"}),
        )
        .await;
    assert_eq!(
        (again, body),
        (
            StatusCode::OK,
            json!({"execution_id": "done-1", "created": false})
        )
    );
    let (replayed, body) = keyed(
        &s,
        "/v1/executions",
        json!({"workflow": "Plain", "input": {"n": 1}}),
        "key-1",
    )
    .await;
    assert_eq!((replayed, body), (StatusCode::CREATED, first));
    let (status, live) = s.get("/v1/executions/live-1").await;
    assert_eq!(
        (status, &live["status"]),
        (StatusCode::OK, &json!("running"))
    );
}

#[tokio::test]
async fn retention_deletes_finished_executions_only() {
    let s = Server::start().await;
    s.deploy(PLAIN).await;
    complete(&s, &["old-1", "old-2"]).await;
    s.start_plain("running-1").await;
    let store: Arc<dyn Storage> = s.driver.store().clone();
    let now = orbit_io_tokio::driver::now_ms();
    // Nothing is old enough with an hour's retention.
    let hour = std::time::Duration::from_secs(3600);
    assert_eq!(
        orbit_server::retention::round(store.as_ref(), hour, now).await,
        0
    );
    // A day later, the finished ones go and the running one stays.
    let later = now + 24 * 3_600_000;
    let deleted = orbit_server::retention::round(store.as_ref(), hour, later).await;
    assert_eq!(deleted, 2);
    let (status, _) = s.get("/v1/executions/old-1").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(store.history("old-2", 0, 100).await.unwrap().is_empty());
    let (status, _) = s.get("/v1/executions/running-1").await;
    assert_eq!(status, StatusCode::OK);
}
