//! SDK client behaviour against a scripted fake server: idempotency keys,
//! the three-attempt retry on 429/5xx/connection errors, typed errors, and
//! the exact paths and bodies of `api.md`.

#![allow(clippy::unwrap_used)]

mod sdk_support;

use std::sync::Arc;
use std::time::Duration;

use orbit_sdk::{
    Backoff, Client, Error, ListOptions, ReqwestTransport, SourceFile, StartOptions, Status,
    TransportError,
};
use orbit_server::sdk::{core_event, logs};
use sdk_support::{dead_port, Fake, Reply};
use serde_json::json;

const FAST: Backoff = Backoff {
    initial: Duration::from_millis(5),
    factor: 2.0,
    max: Duration::from_millis(20),
};

fn client(fake: &Fake) -> Client {
    Client::connect(&fake.url()).unwrap().with_retries(3, FAST)
}

fn started() -> Reply {
    Reply::status(201, json!({"execution_id": "e-1", "created": true}))
}

#[tokio::test]
async fn start_retries_5xx_reusing_one_generated_uuid_key() {
    let fake = Fake::start(|_, earlier| match earlier.len() {
        0 => Reply::error(503, "STORAGE_ERROR"),
        1 => Reply::error(502, "BAD_GATEWAY"),
        _ => started(),
    })
    .await;
    let out = client(&fake)
        .start(StartOptions::new("Order", json!({"order_id": "o-1"})))
        .await
        .unwrap();
    assert_eq!(out.execution_id, "e-1");
    assert!(out.created);
    let reqs = fake.requests();
    assert_eq!(reqs.len(), 3);
    let key = reqs[0].idempotency_key.clone().unwrap();
    let parsed = uuid::Uuid::parse_str(&key).unwrap();
    assert_eq!(parsed.get_version_num(), 4);
    for r in &reqs {
        assert_eq!(r.method, "POST");
        assert_eq!(r.path, "/v1/executions");
        assert_eq!(r.idempotency_key.as_deref(), Some(key.as_str()));
        assert_eq!(
            r.body,
            json!({"workflow": "Order", "input": {"order_id": "o-1"}})
        );
    }
}

#[tokio::test]
async fn every_call_gets_a_fresh_key() {
    let fake = Fake::start(|_, _| started()).await;
    let c = client(&fake);
    c.start(StartOptions::new("A", json!({}))).await.unwrap();
    c.start(StartOptions::new("A", json!({}))).await.unwrap();
    let reqs = fake.requests();
    assert_ne!(reqs[0].idempotency_key, reqs[1].idempotency_key);
}

#[tokio::test]
async fn gives_up_after_three_attempts() {
    let fake = Fake::start(|_, _| Reply::error(500, "INTERNAL")).await;
    let err = client(&fake)
        .start(StartOptions::new("Order", json!({})))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some("INTERNAL"));
    assert_eq!(err.status(), Some(500));
    assert_eq!(fake.requests().len(), 3);
}

#[tokio::test]
async fn too_many_requests_is_retried() {
    let fake = Fake::start(|_, earlier| {
        if earlier.is_empty() {
            Reply::error(429, "RATE_LIMITED")
        } else {
            Reply::ok(json!({"seq": 7}))
        }
    })
    .await;
    let ack = client(&fake)
        .signal("e-1", "approve", json!({"by": "ann"}), None)
        .await
        .unwrap();
    assert_eq!(ack.seq, Some(7));
    let reqs = fake.requests();
    assert_eq!(reqs.len(), 2);
    assert_eq!(reqs[0].path, "/v1/executions/e-1/signals/approve");
    assert_eq!(reqs[0].body, json!({"payload": {"by": "ann"}}));
    assert_eq!(reqs[0].idempotency_key, reqs[1].idempotency_key);
}

#[tokio::test]
async fn refusals_are_not_retried_and_carry_the_server_error() {
    let fake = Fake::start(|_, _| {
        Reply::status(
            404,
            json!({"error": {"code": "UNKNOWN_WORKFLOW", "message": "no workflow `Nope`", "workflow": "Nope"}}),
        )
    })
    .await;
    let err = client(&fake)
        .start(StartOptions::new("Nope", json!({})))
        .await
        .unwrap_err();
    match &err {
        Error::Api {
            status,
            code,
            message,
            details,
        } => {
            assert_eq!(*status, 404);
            assert_eq!(code, "UNKNOWN_WORKFLOW");
            assert_eq!(message, "no workflow `Nope`");
            assert_eq!(details["workflow"], "Nope");
        }
        other => panic!("unexpected {other:?}"),
    }
    assert!(err.is_refusal());
    assert_eq!(fake.requests().len(), 1);
}

#[tokio::test]
async fn caller_chosen_key_and_fields_are_sent() {
    let fake = Fake::start(|_, _| started()).await;
    let mut options = StartOptions::new("Order", json!({"n": 1}));
    options.version = Some("1.2.0".into());
    options.execution_id = Some("order-7".into());
    options.idempotency_key = Some("start-order-7".into());
    client(&fake).start(options).await.unwrap();
    let r = &fake.requests()[0];
    assert_eq!(r.idempotency_key.as_deref(), Some("start-order-7"));
    assert_eq!(
        r.body,
        json!({"workflow": "Order", "version": "1.2.0", "input": {"n": 1}, "execution_id": "order-7"})
    );
}

#[tokio::test]
async fn connection_refused_is_a_transport_error_after_retries() {
    let addr = dead_port().await;
    let c = Client::connect(&format!("http://{addr}"))
        .unwrap()
        .with_retries(3, FAST);
    let began = std::time::Instant::now();
    let err = c
        .start(StartOptions::new("A", json!({})))
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::Transport(TransportError::Connect { .. })),
        "{err:?}"
    );
    // Two backoff sleeps happened (5 ms + 10 ms).
    assert!(began.elapsed() >= Duration::from_millis(15));
}

/// Both transports the SDK chooses from, to the server at `url`.
fn both_transports(url: &str) -> [Arc<dyn orbit_sdk::Transport>; 2] {
    [
        Arc::new(ReqwestTransport::new(url).unwrap()),
        Arc::new(orbit_sdk::DirectTransport::new(url).unwrap()),
    ]
}

#[tokio::test]
async fn a_slow_answer_is_a_timeout() {
    use orbit_sdk::{HttpRequest, Method};
    let fake = Fake::start(|_, _| Reply::ok(json!({})).after(Duration::from_secs(2))).await;
    for transport in both_transports(&fake.url()) {
        let mut request = HttpRequest::new(Method::Get, "/v1/executions/e-1");
        request.timeout = Some(Duration::from_millis(100));
        let err = transport.send(request).await.unwrap_err();
        assert!(matches!(err, TransportError::Timeout(_)), "{err:?}");
        assert!(err.is_retryable());
    }
}

#[tokio::test]
async fn an_unreachable_server_is_a_connect_error_and_an_answer_comes_back_whole() {
    use orbit_sdk::{HttpRequest, Method};
    let dead = format!("http://{}", dead_port().await);
    for transport in both_transports(&dead) {
        let err = transport
            .send(HttpRequest::new(Method::Get, "/v1/executions/e-1"))
            .await
            .unwrap_err();
        assert!(matches!(err, TransportError::Connect { .. }), "{err:?}");
        assert!(err.is_retryable());
    }
    let fake = Fake::start(|_, _| Reply::ok(json!({"answer": "ünïcode"}))).await;
    for transport in both_transports(&fake.url()) {
        let mut request = HttpRequest::new(Method::Post, "/v1/workers/s-1/poll");
        request.body = Some(br#"{"max_tasks": 2}"#.to_vec());
        let response = transport.send(request).await.unwrap();
        assert_eq!(response.status, 200);
        assert_eq!(response.header("Content-Type"), Some("application/json"));
        let body: serde_json::Value = serde_json::from_slice(&response.body).unwrap();
        assert_eq!(body, json!({"answer": "ünïcode"}));
    }
    let seen = fake.requests();
    assert_eq!(seen.len(), 2);
    assert!(seen.iter().all(|r| r.body == json!({"max_tasks": 2})));
}

#[tokio::test]
async fn wait_long_polls_with_timeout_ms() {
    let fake = Fake::start(|_, _| {
        Reply::ok(json!({"execution_id": "e-1", "status": "running"}))
            .after(Duration::from_millis(50))
    })
    .await;
    let e = client(&fake)
        .wait("e-1", Duration::from_millis(1500))
        .await
        .unwrap();
    assert_eq!(e.status, Status::Running);
    let reqs = fake.requests();
    assert_eq!(reqs.len(), 1);
    assert_eq!(reqs[0].method, "POST");
    assert_eq!(reqs[0].path, "/v1/executions/e-1/wait?timeout_ms=1500");
}

#[tokio::test]
async fn an_unreadable_answer_is_a_decode_error_and_not_retried() {
    let fake = Fake::start(|_, _| Reply::ok(json!({"nothing": "useful"}))).await;
    let err = client(&fake).get("e-1").await.unwrap_err();
    assert!(matches!(err, Error::Decode { status: 200, .. }), "{err:?}");
    assert_eq!(fake.requests().len(), 1);
}

#[tokio::test]
async fn creating_calls_send_keys_and_reads_do_not() {
    let fake = Fake::start(|req, _| match (req.method.as_str(), req.path.as_str()) {
        ("POST", "/v1/definitions") => Reply::ok(json!({
            "workflows": [{"name": "Order", "version": "1.0.0", "definition_hash": "ab", "created": true}],
            "tasks": [{"name": "payments.charge", "version": "1.0.0", "definition_hash": "cd", "created": false}]
        })),
        ("POST", p) if p.ends_with("/cancel") => Reply::status(202, json!({})),
        ("GET", "/v1/executions/e-1") => Reply::ok(json!({
            "execution_id": "e-1", "status": "failed", "workflow": "Order", "version": "1.0.0",
            "input": {}, "output": null, "error": {"code": "CARD_DECLINED", "step": "charge"},
            "created_at": "2026-01-01T00:00:00Z"
        })),
        ("GET", p) if p.starts_with("/v1/executions?") => Reply::ok(json!({
            "executions": [], "next_cursor": null
        })),
        ("GET", p) if p.starts_with("/v1/executions/e-1/history") => Reply::ok(json!({
            "events": [
                {"seq": 1, "at": "2026-01-01T00:00:00Z", "type": "WorkflowCreated", "workflow": "Order",
                 "version": "1.0.0", "definition_hash": "ab", "input": {}},
                {"seq": 2, "at": "2026-01-01T00:00:00.004Z", "type": "WorkflowStarted"}
            ]
        })),
        _ => Reply::error(404, "NOT_FOUND"),
    })
    .await;
    let c = client(&fake).with_token(Some("s3cret".into()));
    let deployed = c
        .deploy(&[SourceFile {
            filename: "order.orbit".into(),
            source: "workflow Order {}".into(),
        }])
        .await
        .unwrap();
    assert_eq!(deployed.entries().count(), 2);
    c.cancel("e-1", Some("customer asked"), None).await.unwrap();
    let e = c.get("e-1").await.unwrap();
    assert_eq!(e.status, Status::Failed);
    assert!(e.status.is_terminal());
    assert_eq!(e.created_at, "2026-01-01T00:00:00Z");
    c.list(&ListOptions {
        status: Some(Status::Running),
        workflow: Some("Order".into()),
        limit: Some(10),
        cursor: None,
    })
    .await
    .unwrap();
    let history = c.history("e-1", 0).await.unwrap();
    assert_eq!(history.events.len(), 2);
    assert_eq!(
        core_event(&history.events[1]).unwrap().at - core_event(&history.events[0]).unwrap().at,
        4
    );
    c.history("e-1", 2).await.unwrap();
    assert_eq!(
        logs(&c, "e-1").await.unwrap(),
        "+ 0ms #1 WorkflowCreated\n+ 4ms #2 WorkflowStarted\n"
    );

    let reqs = fake.requests();
    let paths: Vec<(&str, &str, bool)> = reqs
        .iter()
        .map(|r| {
            (
                r.method.as_str(),
                r.path.as_str(),
                r.idempotency_key.is_some(),
            )
        })
        .collect();
    assert_eq!(
        paths,
        vec![
            ("POST", "/v1/definitions", true),
            ("POST", "/v1/executions/e-1/cancel", true),
            ("GET", "/v1/executions/e-1", false),
            (
                "GET",
                "/v1/executions?status=running&workflow=Order&limit=10",
                false
            ),
            ("GET", "/v1/executions/e-1/history", false),
            ("GET", "/v1/executions/e-1/history?after_seq=2", false),
            ("GET", "/v1/executions/e-1/history", false),
        ]
    );
    assert_eq!(
        reqs[0].body,
        json!({"files": [{"filename": "order.orbit", "source": "workflow Order {}"}]})
    );
    assert_eq!(reqs[1].body, json!({"reason": "customer asked"}));
    assert!(reqs
        .iter()
        .all(|r| r.authorization.as_deref() == Some("Bearer s3cret")));
}

#[tokio::test]
async fn a_bad_server_url_is_refused_up_front() {
    assert!(ReqwestTransport::new("not a url").is_err());
    assert!(ReqwestTransport::new("ftp://x").is_err());
    let t = Arc::new(ReqwestTransport::new("http://127.0.0.1:1/").unwrap());
    assert_eq!(t.base_url(), "http://127.0.0.1:1");
}
