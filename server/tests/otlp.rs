//! Trace export end to end: `orbit server --otlp-endpoint` POSTs OTLP/HTTP
//! protobuf to a receiver in this test, which decodes it and checks the
//! tree of one execution — the execution span, a span per step attempt
//! (a failed one and its retry included) with their timings, attempt and
//! key, all in one trace under the execution.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod cli_support;

use axum::body::Bytes;
use axum::extract::State;
use axum::routing::{get, post};
use axum::Router;
use cli_support::{free_addr, orbit};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;
use serde_json::json;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const FLOW: &str = r#"
workflow Traced version "1.0.0" {
    input { base: String }
    step first {
        worker "orbit.http"
        with { method: "GET", url: input.base + "/flaky" }
        retry: { max_attempts: 3, backoff: 100ms, factor: 1.0, max_backoff: 1s }
    }
    step second {
        worker "orbit.http"
        with { method: "POST", url: input.base + "/ok", body: { got: first.body } }
    }
    output { status: second.status }
}
"#;

fn attr<'a>(s: &'a Span, key: &str) -> Option<&'a Any> {
    s.attributes
        .iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| kv.value.as_ref())
        .and_then(|v| v.value.as_ref())
}

fn text(s: &Span, key: &str) -> String {
    match attr(s, key) {
        Some(Any::StringValue(v)) => v.clone(),
        other => panic!("{key}: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_execution_is_one_trace_of_its_steps() {
    // The receiver (collector) and the target of the HTTP steps.
    let spans: Arc<Mutex<Vec<Span>>> = Arc::default();
    let flaky = Arc::new(AtomicU32::new(0));
    let f = flaky.clone();
    let app = Router::new()
        .route(
            "/v1/traces",
            post(
                |State(spans): State<Arc<Mutex<Vec<Span>>>>, body: Bytes| async move {
                    let req = ExportTraceServiceRequest::decode(body).expect("protobuf");
                    for rs in req.resource_spans {
                        for ss in rs.scope_spans {
                            spans.lock().unwrap().extend(ss.spans);
                        }
                    }
                    ""
                },
            ),
        )
        .route(
            "/flaky",
            get(move || async move {
                if f.fetch_add(1, Ordering::SeqCst) == 0 {
                    (axum::http::StatusCode::BAD_GATEWAY, "later")
                } else {
                    (axum::http::StatusCode::OK, "fine")
                }
            }),
        )
        .route("/ok", post(|| async { "ok" }))
        .with_state(spans.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let target = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });

    let dir = tempfile::tempdir().unwrap();
    let addr = free_addr();
    let mut child = Command::new(env!("CARGO_BIN_EXE_orbit"))
        .args([
            "server",
            "--db",
            &format!("sqlite://{}/orbit.db", dir.path().display()),
            "--listen",
            &addr.to_string(),
            "--http-allow",
            &target.to_string(),
            "--otlp-endpoint",
            &format!("http://{target}"),
        ])
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let url = format!("http://{addr}");
    let client = reqwest::Client::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !client
        .get(format!("{url}/readyz"))
        .send()
        .await
        .is_ok_and(|r| r.status().is_success())
    {
        assert!(Instant::now() < deadline, "server not ready");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let file = dir.path().join("flow.orbit");
    std::fs::write(&file, FLOW).unwrap();
    let (u, f) = (url.clone(), file.display().to_string());
    let r = tokio::task::spawn_blocking(move || orbit(&u, &["deploy", &f]))
        .await
        .unwrap();
    assert_eq!(r.code, 0, "{r:?}");
    let input = json!({"base": format!("http://{target}")}).to_string();
    let u = url.clone();
    let r = tokio::task::spawn_blocking(move || {
        orbit(
            &u,
            &["run", "Traced", "--input", &input, "--id", "t-1", "--wait"],
        )
    })
    .await
    .unwrap();
    assert_eq!(r.code, 0, "{r:?}");

    // The execution span is exported when the execution ends.
    let deadline = Instant::now() + Duration::from_secs(20);
    let all = loop {
        let got = spans.lock().unwrap().clone();
        if got.iter().any(|s| s.name == "execution Traced") {
            break got;
        }
        assert!(Instant::now() < deadline, "no execution span; got {got:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let _ = child.kill();
    let _ = child.wait();

    let root = all.iter().find(|s| s.name == "execution Traced").unwrap();
    assert!(root.parent_span_id.is_empty());
    assert_eq!(text(root, "orbit.status"), "completed");
    let steps: Vec<&Span> = all
        .iter()
        .filter(|s| s.name != "execution Traced")
        .collect();
    assert_eq!(steps.len(), 3, "{steps:#?}");
    for s in &steps {
        assert_eq!(s.trace_id, root.trace_id);
        assert_eq!(s.parent_span_id, root.span_id);
        assert!(root.start_time_unix_nano <= s.start_time_unix_nano);
        assert!(s.end_time_unix_nano <= root.end_time_unix_nano);
        assert_eq!(text(s, "orbit.task"), "orbit.http");
        assert_eq!(text(s, "orbit.worker_id"), "orbit");
        assert!(s.events.iter().any(|e| e.name == "dispatched"));
    }
    let first: Vec<&&Span> = steps.iter().filter(|s| s.name == "first").collect();
    assert_eq!(first.len(), 2);
    assert_eq!(text(first[0], "orbit.outcome"), "failed");
    assert!(first[0]
        .status
        .as_ref()
        .unwrap()
        .message
        .starts_with("HTTP_502"));
    assert_eq!(text(first[1], "orbit.outcome"), "succeeded");
    assert_eq!(attr(first[1], "orbit.attempt"), Some(&Any::IntValue(2)));
    assert_eq!(text(first[1], "orbit.idempotency_key"), "t-1/first");
    assert_ne!(first[0].span_id, first[1].span_id);
    let second = steps.iter().find(|s| s.name == "second").unwrap();
    assert_eq!(text(second, "orbit.outcome"), "succeeded");
}
