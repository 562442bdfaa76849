//! Trace export end to end: `orbit server --otlp-endpoint` POSTs OTLP/HTTP
//! protobuf to a receiver in this test, which decodes it and checks the
//! tree of one execution — the execution span, a span per step attempt
//! (a failed one and its retry included) with their timings, attempt and
//! key, all in one trace under the execution — and, for `examples/order.orbit`
//! started with a caller's `traceparent`, one tree in the caller's trace of
//! the execution, every step, the child workflow and the spans the test's
//! worker emits itself under each task's `traceparent`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod cli_support;

use axum::body::Bytes;
use axum::extract::State;
use axum::routing::{get, post};
use axum::Router;
use cli_support::process_support::{Log, ServerProcess};
use cli_support::{orbit, Server};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue};
use opentelemetry_proto::tonic::trace::v1::span::SpanKind;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};
use orbit_sdk::{Client, SourceFile, StartOptions, Status, Task, Worker};
use prost::Message;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
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
    let db = format!("sqlite://{}/orbit.db", dir.path().display());
    let allow = target.to_string();
    let endpoint = format!("http://{target}");
    let server = ServerProcess::spawn(
        &[
            "--db",
            &db,
            "--http-allow",
            &allow,
            "--otlp-endpoint",
            &endpoint,
        ],
        Log::Inherit,
    )
    .ready()
    .await;
    let url = server.url.clone();
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
    drop(server);

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

/// The caller's trace context for the order test.
const CALLER: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";

/// A collector on a free port: every span POSTed to `/v1/traces`.
async fn collector() -> (std::net::SocketAddr, Arc<Mutex<Vec<Span>>>) {
    let spans: Arc<Mutex<Vec<Span>>> = Arc::default();
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
        .with_state(spans.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (addr, spans)
}

/// What the test's worker answers for each task of `examples/order.orbit`.
fn output(task: &Task) -> Value {
    match task.task_name.as_str() {
        "orders.validate" => json!({"ok": true}),
        "inventory.reserve" => json!({"reservation_id": format!("r-{}", task.step_id)}),
        "payments.charge" => json!({"transaction_id": "tx-1"}),
        "shipping.create" => json!({"tracking": "TRACK-1"}),
        other => panic!("unexpected task {other}"),
    }
}

/// The worker's own span for `task`, a child of the span its
/// `traceparent` names, POSTed to the collector as an SDK exporter would.
async fn export_worker_span(http: &reqwest::Client, collector: &str, task: &Task, n: u64) {
    let cx = task
        .trace_context()
        .expect("every task carries a traceparent");
    assert!(cx.sampled());
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    let span = Span {
        trace_id: hex::decode(cx.trace_id()).unwrap(),
        span_id: (0xabcd_0000_0000_0000 | n).to_be_bytes().to_vec(),
        parent_span_id: hex::decode(cx.span_id()).unwrap(),
        name: format!("worker {}", task.task_name),
        kind: SpanKind::Consumer as i32,
        start_time_unix_nano: now,
        end_time_unix_nano: now + 1_000,
        attributes: vec![KeyValue {
            key: "test.step".into(),
            value: Some(AnyValue {
                value: Some(Any::StringValue(task.step_id.clone())),
            }),
            ..Default::default()
        }],
        ..Default::default()
    };
    let body = ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            scope_spans: vec![ScopeSpans {
                spans: vec![span],
                ..Default::default()
            }],
            ..Default::default()
        }],
    };
    let r = http
        .post(format!("{collector}/v1/traces"))
        .header("content-type", "application/x-protobuf")
        .body(body.encode_to_vec())
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_order_started_with_a_traceparent_is_one_tree_with_the_worker_spans() {
    let (addr, spans) = collector().await;
    let endpoint = format!("http://{addr}");
    let e = endpoint.clone();
    let server = tokio::task::spawn_blocking(move || Server::start(&["--otlp-endpoint", &e]))
        .await
        .unwrap();
    let client = Client::connect(&server.url).unwrap();
    let source = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../examples/order.orbit"
    ))
    .unwrap();
    client
        .deploy(&[SourceFile {
            filename: "order.orbit".into(),
            source,
        }])
        .await
        .unwrap();

    // The test's worker: answers every task and emits a span of its own.
    let http = reqwest::Client::new();
    let count = Arc::new(AtomicU64::new(0));
    let mut builder = Worker::builder("traced-worker").poll_wait(Duration::from_millis(500));
    for name in [
        "orders.validate",
        "inventory.reserve",
        "payments.charge",
        "shipping.create",
    ] {
        let (http, endpoint, count) = (http.clone(), endpoint.clone(), count.clone());
        builder = builder.handler(name, move |task: Task| {
            let (http, endpoint, count) = (http.clone(), endpoint.clone(), count.clone());
            async move {
                let n = count.fetch_add(1, Ordering::SeqCst) + 1;
                export_worker_span(&http, &endpoint, &task, n).await;
                Ok(output(&task))
            }
        });
    }
    let worker = Arc::new(builder.connect(&server.url).unwrap());
    let stop = Arc::new(tokio::sync::Notify::new());
    let (w, s) = (worker.clone(), stop.clone());
    let running = tokio::spawn(async move { w.run(async move { s.notified().await }).await });

    let mut start = StartOptions::new(
        "Order",
        json!({"order_id": "o-1", "amount": 1200, "currency": "EUR",
               "items": [{"sku": "a", "qty": 1}, {"sku": "b", "qty": 2}]}),
    );
    start.execution_id = Some("o-1".into());
    start.traceparent = Some(CALLER.into());
    client.start(start).await.unwrap();
    let done = client.wait("o-1", Duration::from_secs(30)).await.unwrap();
    assert_eq!(done.status, Status::Completed, "{done:?}");
    stop.notify_one();
    running.await.unwrap().unwrap();

    let deadline = Instant::now() + Duration::from_secs(20);
    let all = loop {
        let got = spans.lock().unwrap().clone();
        if got.iter().any(|s| s.name == "execution Order") {
            break got;
        }
        assert!(Instant::now() < deadline, "no execution span; got {got:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    drop(server);

    // One trace, the caller's; one tree under the caller's span.
    let caller = hex::decode(&CALLER[3..35]).unwrap();
    let caller_span = hex::decode(&CALLER[36..52]).unwrap();
    let by_id: HashMap<&[u8], &Span> = all.iter().map(|s| (&s.span_id[..], s)).collect();
    assert_eq!(by_id.len(), all.len(), "span ids are unique");
    let named = |name: &str| -> Vec<&Span> { all.iter().filter(|s| s.name == name).collect() };
    let root = named("execution Order")[0];
    assert_eq!(root.parent_span_id, caller_span);
    for s in &all {
        assert_eq!(s.trace_id, caller, "{} is in the caller's trace", s.name);
        if s.span_id != root.span_id {
            assert!(
                by_id.contains_key(&s.parent_span_id[..]),
                "{}'s parent is in the tree",
                s.name
            );
        }
    }
    // Every step of Order under the execution, the child's own under it.
    for step in [
        "validate_order",
        "reserve[0]",
        "reserve[1]",
        "process_payment",
        "cool_off",
        "child ship",
        "execution Shipping",
    ] {
        let s = named(step);
        assert_eq!(s.len(), 1, "{step}: {all:#?}");
        assert_eq!(s[0].parent_span_id, root.span_id, "{step}");
    }
    let shipping = named("execution Shipping")[0];
    assert_eq!(named("label")[0].parent_span_id, shipping.span_id);
    // The worker's span of each task is a child of that task's attempt.
    let workers: Vec<&Span> = all
        .iter()
        .filter(|s| s.name.starts_with("worker "))
        .collect();
    assert_eq!(workers.len(), 5, "{workers:#?}");
    for w in workers {
        let attempt = by_id[&w.parent_span_id[..]];
        assert_eq!(text(w, "test.step"), attempt.name);
        assert_eq!(format!("worker {}", text(attempt, "orbit.task")), w.name);
        assert_eq!(text(attempt, "orbit.worker_id"), "traced-worker");
    }
}
