//! API-level idempotency (seed 002, api.md) against the in-process app:
//! replay byte for byte, reuse, key shape, required keys, racing requests,
//! unreadable records, expiry and purge, and the header being ignored where
//! nothing is created.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod guard_support;

use axum::http::{Method, StatusCode};
use guard_support::Harness;
use orbit_core::engine::Config;
use orbit_io_tokio::driver::Options;
use orbit_server::api;
use serde_json::json;
use std::sync::atomic::Ordering;
use std::time::Duration;

const START: &str = r#"{"workflow": "Plain", "input": {"n": 21}}"#;

#[tokio::test]
async fn same_key_same_body_replays_byte_for_byte() {
    let h = Harness::start().await;
    h.deploy().await;
    let first = h
        .post("/v1/executions", Some("order-conf-98421"), START)
        .await;
    assert_eq!(first.status, StatusCode::CREATED, "{}", first.json);
    assert!(!first.replayed());
    // Same JSON, other whitespace and member order.
    let again = h
        .post(
            "/v1/executions",
            Some("order-conf-98421"),
            r#"{ "input" : { "n" : 21 } , "workflow" : "Plain" }"#,
        )
        .await;
    assert_eq!(again.status, StatusCode::CREATED);
    assert!(again.replayed());
    assert_eq!(again.bytes, first.bytes);
    assert_eq!(
        again.headers.get("content-type").unwrap(),
        "application/json"
    );
    assert_eq!(h.count().await, 1);
    // Without a key the same body creates another execution.
    let other = h.post("/v1/executions", None, START).await;
    assert_eq!(other.status, StatusCode::CREATED);
    assert_ne!(other.json["execution_id"], first.json["execution_id"]);
    assert_eq!(h.count().await, 2);
}

#[tokio::test]
async fn same_key_other_body_is_reused() {
    let h = Harness::start().await;
    h.deploy().await;
    let first = h.post("/v1/executions", Some("k-1"), START).await;
    assert_eq!(first.status, StatusCode::CREATED);
    let other = h
        .post(
            "/v1/executions",
            Some("k-1"),
            r#"{"workflow": "Plain", "input": {"n": 22}}"#,
        )
        .await;
    assert_eq!(other.status, StatusCode::CONFLICT);
    assert_eq!(other.code(), "IDEMPOTENCY_KEY_REUSED");
    assert_eq!(h.count().await, 1);
}

#[tokio::test]
async fn key_shape_is_checked() {
    let h = Harness::start().await;
    h.deploy().await;
    let long = "k".repeat(256);
    for bad in [
        "",
        "has space",
        "semi;colon",
        "quote\"",
        long.as_str(),
        "ключ",
    ] {
        let r = h
            .send(
                Method::POST,
                "/v1/executions",
                &[("idempotency-key", bad)],
                START,
            )
            .await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "key {bad:?}");
        assert_eq!(r.code(), "INVALID_IDEMPOTENCY_KEY", "key {bad:?}");
    }
    assert_eq!(h.count().await, 0);
    let max = "A-z_0.9:/".repeat(28) + "abc";
    assert_eq!(max.len(), 255);
    let ok = h.post("/v1/executions", Some(&max), START).await;
    assert_eq!(ok.status, StatusCode::CREATED, "{}", ok.json);
}

#[tokio::test]
async fn required_key_for_declared_workflows() {
    let h = Harness::start().await;
    h.deploy().await;
    let body = r#"{"workflow": "Pay", "input": {"n": 1}}"#;
    let refused = h.post("/v1/executions", None, body).await;
    assert_eq!(refused.status, StatusCode::BAD_REQUEST);
    assert_eq!(refused.code(), "IDEMPOTENCY_KEY_REQUIRED");
    assert_eq!(h.count().await, 0);
    let keyed = h.post("/v1/executions", Some("pay-1"), body).await;
    assert_eq!(keyed.status, StatusCode::CREATED, "{}", keyed.json);
    let with_id = h
        .post(
            "/v1/executions",
            None,
            r#"{"workflow": "Pay", "input": {"n": 1}, "execution_id": "pay-by-id"}"#,
        )
        .await;
    assert_eq!(with_id.status, StatusCode::CREATED, "{}", with_id.json);
    // Plain workflows do not need one.
    let plain = h.post("/v1/executions", None, START).await;
    assert_eq!(plain.status, StatusCode::CREATED);
}

#[tokio::test]
async fn rejected_requests_store_nothing() {
    let h = Harness::start().await;
    h.deploy().await;
    let bad = h
        .post(
            "/v1/executions",
            Some("fix-me"),
            r#"{"workflow": "Plain", "input": {"n": "x"}}"#,
        )
        .await;
    assert_eq!(bad.status, StatusCode::BAD_REQUEST);
    assert_eq!(bad.code(), "INPUT_CONTRACT_VIOLATION");
    // Fixed body, same key: runs (not IDEMPOTENCY_KEY_REUSED).
    let fixed = h.post("/v1/executions", Some("fix-me"), START).await;
    assert_eq!(fixed.status, StatusCode::CREATED, "{}", fixed.json);
    assert!(!fixed.replayed());
    // A compile error on deploy stores nothing either.
    let broken = json!({"source": "workflow {", "filename": "b.orbit"}).to_string();
    let r = h.post("/v1/definitions", Some("deploy-1"), &broken).await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY);
    let good = json!({"source": guard_support::SOURCE, "filename": "t.orbit"}).to_string();
    let r = h.post("/v1/definitions", Some("deploy-1"), &good).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.json);
    assert!(!r.replayed());
    let again = h.post("/v1/definitions", Some("deploy-1"), &good).await;
    assert!(again.replayed());
    assert_eq!(again.bytes, r.bytes);
}

#[tokio::test]
async fn a_keyed_start_does_not_wait() {
    let h = Harness::start().await;
    h.deploy().await;
    // No worker serves the task: a start that waited would be held the
    // whole second. With a key the answer is the start's own, at once.
    let begun = std::time::Instant::now();
    let first = h
        .post("/v1/executions?wait_ms=1000", Some("wait-1"), START)
        .await;
    assert!(begun.elapsed() < Duration::from_millis(900));
    assert_eq!(first.status, StatusCode::CREATED, "{}", first.json);
    assert_eq!(first.json.get("execution"), None, "{}", first.json);
    assert!(!first.replayed());
    // Replayed byte for byte, with or without the parameter.
    for path in ["/v1/executions?wait_ms=1000", "/v1/executions"] {
        let again = h.post(path, Some("wait-1"), START).await;
        assert!(again.replayed(), "{path}");
        assert_eq!(again.bytes, first.bytes, "{path}");
    }
    assert_eq!(h.count().await, 1);
}

#[tokio::test]
async fn signals_and_cancels_replay() {
    let h = Harness::start().await;
    h.deploy().await;
    let started = h
        .post(
            "/v1/executions",
            None,
            r#"{"workflow": "Plain", "input": {"n": 1}, "execution_id": "e1"}"#,
        )
        .await;
    assert_eq!(started.status, StatusCode::CREATED);
    let sig = r#"{"payload": {"ok": true}}"#;
    let first = h
        .post("/v1/executions/e1/signals/approve", Some("sig-1"), sig)
        .await;
    assert_eq!(first.status, StatusCode::OK, "{}", first.json);
    let again = h
        .post("/v1/executions/e1/signals/approve", Some("sig-1"), sig)
        .await;
    assert!(again.replayed());
    assert_eq!(again.bytes, first.bytes);
    // The same key on another path is another scope.
    let other = h
        .post("/v1/executions/e1/signals/reject", Some("sig-1"), sig)
        .await;
    assert_eq!(other.status, StatusCode::OK);
    assert!(!other.replayed());
    let history = h
        .send(Method::GET, "/v1/executions/e1/history", &[], "")
        .await;
    let signals = history.json["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["type"] == "SignalReceived")
        .count();
    assert_eq!(signals, 2);

    let cancel = h
        .post(
            "/v1/executions/e1/cancel",
            Some("c-1"),
            r#"{"reason": "x"}"#,
        )
        .await;
    assert_eq!(cancel.status, StatusCode::ACCEPTED, "{}", cancel.json);
    let cancel2 = h
        .post(
            "/v1/executions/e1/cancel",
            Some("c-1"),
            r#"{"reason": "x"}"#,
        )
        .await;
    assert_eq!(cancel2.status, StatusCode::ACCEPTED);
    assert!(cancel2.replayed());
    let reused = h
        .post(
            "/v1/executions/e1/cancel",
            Some("c-1"),
            r#"{"reason": "y"}"#,
        )
        .await;
    assert_eq!(reused.code(), "IDEMPOTENCY_KEY_REUSED");
    // Empty bodies are fine too (and replay after the execution finished).
    let started = h
        .post(
            "/v1/executions",
            None,
            r#"{"workflow": "Plain", "input": {"n": 1}, "execution_id": "e2"}"#,
        )
        .await;
    assert_eq!(started.status, StatusCode::CREATED);
    let empty = h.post("/v1/executions/e2/cancel", Some("c-2"), "").await;
    assert_eq!(empty.status, StatusCode::ACCEPTED, "{}", empty.json);
    let empty2 = h.post("/v1/executions/e2/cancel", Some("c-2"), "").await;
    assert!(empty2.replayed());
    assert_eq!(empty2.bytes, empty.bytes);
}

#[tokio::test]
async fn header_ignored_where_nothing_is_created() {
    let h = Harness::start().await;
    h.deploy().await;
    let bad_key = [("idempotency-key", "not a valid key!")];
    let list = h.send(Method::GET, "/v1/executions", &bad_key, "").await;
    assert_eq!(list.status, StatusCode::OK);
    let reg = h
        .send(
            Method::POST,
            "/v1/workers",
            &bad_key,
            r#"{"worker_id": "w", "task_patterns": ["demo.*"]}"#,
        )
        .await;
    assert_eq!(reg.status, StatusCode::OK, "{}", reg.json);
    let session = reg.json["session_id"].as_str().unwrap();
    for _ in 0..2 {
        let poll = h
            .send(
                Method::POST,
                &format!("/v1/workers/{session}/poll"),
                &[("idempotency-key", "same")],
                r#"{"max_tasks": 1, "wait_ms": 0}"#,
            )
            .await;
        assert_eq!(poll.status, StatusCode::OK);
        assert!(!poll.replayed());
    }
}

#[tokio::test]
async fn racing_requests_wait_then_replay() {
    let h = Harness::start().await;
    h.deploy().await;
    h.store.commit_delay_ms.store(400, Ordering::SeqCst);
    let (a, b) = tokio::join!(h.post("/v1/executions", Some("race-1"), START), async {
        tokio::time::sleep(Duration::from_millis(50)).await;
        h.post("/v1/executions", Some("race-1"), START).await
    });
    assert_eq!(a.status, StatusCode::CREATED, "{}", a.json);
    assert_eq!(b.status, StatusCode::CREATED, "{}", b.json);
    assert_eq!(a.json["execution_id"], b.json["execution_id"]);
    assert_eq!(a.replayed() as u8 + b.replayed() as u8, 1);
    h.store.commit_delay_ms.store(0, Ordering::SeqCst);
    assert_eq!(h.count().await, 1);
}

#[tokio::test]
async fn racing_request_gives_up_while_first_still_runs() {
    let options = api::Options {
        in_flight_wait: Duration::from_millis(200),
        ..api::Options::default()
    };
    let h = Harness::start_with(options, Options::default()).await;
    h.deploy().await;
    h.store.commit_delay_ms.store(1_000, Ordering::SeqCst);
    let (a, b) = tokio::join!(h.post("/v1/executions", Some("slow-1"), START), async {
        tokio::time::sleep(Duration::from_millis(50)).await;
        h.post("/v1/executions", Some("slow-1"), START).await
    });
    assert_eq!(a.status, StatusCode::CREATED, "{}", a.json);
    assert_eq!(b.status, StatusCode::CONFLICT, "{}", b.json);
    assert_eq!(b.code(), "IDEMPOTENCY_KEY_IN_FLIGHT");
    h.store.commit_delay_ms.store(0, Ordering::SeqCst);
    // Once the first finished, the retry replays it.
    let c = h.post("/v1/executions", Some("slow-1"), START).await;
    assert!(c.replayed());
    assert_eq!(c.bytes, a.bytes);
    assert_eq!(h.count().await, 1);
}

#[tokio::test]
async fn unreadable_records_refuse_instead_of_running_unguarded() {
    let h = Harness::start().await;
    h.deploy().await;
    h.store.fail_idempotency_reads.store(true, Ordering::SeqCst);
    let r = h.post("/v1/executions", Some("k"), START).await;
    assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(r.code(), "IDEMPOTENCY_UNAVAILABLE");
    assert_eq!(h.count().await, 0);
    // Requests without a key are not affected.
    let r = h.post("/v1/executions", None, START).await;
    assert_eq!(r.status, StatusCode::CREATED);
    h.store
        .fail_idempotency_reads
        .store(false, Ordering::SeqCst);
    let r = h.post("/v1/executions", Some("k"), START).await;
    assert_eq!(r.status, StatusCode::CREATED);
    assert!(!r.replayed());
}

#[tokio::test]
async fn expired_keys_are_fresh_and_purged() {
    let driver_options = Options {
        engine: Config {
            idempotency_ttl_ms: 300,
            ..Config::default()
        },
        ..Options::default()
    };
    let h = Harness::start_with(api::Options::default(), driver_options).await;
    h.deploy().await;
    let first = h.post("/v1/executions", Some("ttl-1"), START).await;
    assert_eq!(first.status, StatusCode::CREATED);
    let replay = h.post("/v1/executions", Some("ttl-1"), START).await;
    assert!(replay.replayed());
    tokio::time::sleep(Duration::from_millis(400)).await;
    let fresh = h.post("/v1/executions", Some("ttl-1"), START).await;
    assert_eq!(fresh.status, StatusCode::CREATED);
    assert!(!fresh.replayed());
    assert_ne!(fresh.json["execution_id"], first.json["execution_id"]);
    assert_eq!(h.count().await, 2);
    tokio::time::sleep(Duration::from_millis(400)).await;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    use orbit_io_tokio::storage::Storage;
    assert_eq!(h.store.purge_idempotency(now).await.unwrap(), 1);
    assert_eq!(h.store.purge_idempotency(now).await.unwrap(), 0);
}
