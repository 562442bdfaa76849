//! One `orbit.http` attempt against local servers on 127.0.0.1: how each
//! outcome is classified (result or uncertain, code, retryable), the
//! allow-list, redirects, the size cap and the request the endpoint sees.
#![allow(clippy::unwrap_used)]

use orbit_core::engine::{Outcome, Task};
use orbit_io_tokio::builtin::allow::AllowPattern;
use orbit_io_tokio::builtin::http::{client, perform, Verdict};
use orbit_io_tokio::builtin::HttpOptions;
use serde_json::{json, Value};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// A server that answers every connection with `answer` (a raw HTTP
/// response; `None`: read the request, then close without answering) and
/// hands back the first request it read.
async fn raw_server(
    answer: Option<String>,
) -> (String, tokio::sync::mpsc::UnboundedReceiver<String>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        loop {
            let Ok((mut s, _)) = listener.accept().await else {
                return;
            };
            // Read until the client pauses (headers and body may come in
            // separate packets).
            let mut request = Vec::new();
            let mut buf = vec![0u8; 65536];
            while let Ok(Ok(n)) =
                tokio::time::timeout(Duration::from_millis(100), s.read(&mut buf)).await
            {
                if n == 0 {
                    break;
                }
                request.extend_from_slice(&buf[..n]);
            }
            let _ = tx.send(String::from_utf8_lossy(&request).into_owned());
            if let Some(a) = &answer {
                let _ = s.write_all(a.as_bytes()).await;
            }
            let _ = s.shutdown().await;
        }
    });
    (addr.to_string(), rx)
}

fn options(allow: &[&str]) -> HttpOptions {
    HttpOptions {
        allow: allow
            .iter()
            .map(|p| AllowPattern::parse(p).unwrap())
            .collect(),
        max_response_bytes: 64,
        ..HttpOptions::default()
    }
}

fn task(input: Value) -> Task {
    Task {
        token: "t".into(),
        execution_id: "e".into(),
        workflow: "W".into(),
        workflow_version: "1.0.0".into(),
        step_id: "call".into(),
        task_name: "orbit.http".into(),
        contract_version: "1.0.0".into(),
        input: input.into(),
        idempotency_key: "e/call".into(),
        attempt: 1,
        redelivery: false,
        traceparent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".into(),
    }
}

async fn attempt(allow: &[&str], input: Value) -> Verdict {
    let o = options(allow);
    perform(&client(&o).unwrap(), &o, &task(input)).await
}

fn error_of(v: &Verdict) -> (String, bool) {
    match v {
        Verdict::Report(Outcome::Error(e)) => (e.code.clone(), e.retryable),
        other => panic!("expected a failure, got {other:?}"),
    }
}

#[tokio::test]
async fn a_json_answer_is_parsed_and_the_key_is_sent() {
    let body = r#"{"ok":true}"#;
    let (addr, mut seen) = raw_server(Some(format!(
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nx-a: 1\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )))
    .await;
    let v = attempt(
        &[&addr],
        json!({"method": "post", "url": format!("http://{addr}/x"), "headers": {"idempotency-key": "mine", "x-b": "2"}, "body": {"n": 1}}),
    )
    .await;
    let Verdict::Report(Outcome::Output(out)) = v else {
        panic!("{v:?}")
    };
    assert_eq!(out["status"], 200);
    assert_eq!(out["body"], json!({"ok": true}));
    assert_eq!(out["headers"]["x-a"], "1");
    let request = seen.recv().await.unwrap().to_ascii_lowercase();
    assert!(request.starts_with("post /x http/1.1"), "{request}");
    assert!(request.contains("idempotency-key: e/call"), "{request}");
    assert!(!request.contains("mine"), "{request}");
    assert!(request.contains("x-b: 2"), "{request}");
    assert!(
        request.contains("traceparent: 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"),
        "the attempt's trace context goes along: {request}"
    );
    assert!(
        request.contains("content-type: application/json"),
        "{request}"
    );
    assert!(request.ends_with(r#"{"n":1}"#), "{request}");
}

#[tokio::test]
async fn statuses_map_to_codes_retryable_for_429_and_5xx_only() {
    for (status, retryable) in [
        (500, true),
        (503, true),
        (429, true),
        (404, false),
        (400, false),
    ] {
        let (addr, _) = raw_server(Some(format!(
            "HTTP/1.1 {status} X\r\ncontent-length: 4\r\n\r\nnope"
        )))
        .await;
        let v = attempt(
            &[&addr],
            json!({"method": "GET", "url": format!("http://{addr}/")}),
        )
        .await;
        assert_eq!(error_of(&v), (format!("HTTP_{status}"), retryable));
    }
}

#[tokio::test]
async fn a_host_outside_the_allow_list_is_refused_without_a_request() {
    let (addr, mut seen) =
        raw_server(Some("HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n".into())).await;
    let v = attempt(
        &["example.com"],
        json!({"method": "GET", "url": format!("http://{addr}/")}),
    )
    .await;
    assert_eq!(error_of(&v), ("HTTP_HOST_NOT_ALLOWED".into(), false));
    assert!(
        tokio::time::timeout(Duration::from_millis(200), seen.recv())
            .await
            .is_err()
    );
}

#[tokio::test]
async fn a_redirect_to_a_host_not_allowed_is_not_followed() {
    let (addr, _) = raw_server(Some(
        "HTTP/1.1 302 Found\r\nlocation: http://169.254.169.254/latest/meta-data\r\ncontent-length: 0\r\n\r\n".into(),
    ))
    .await;
    let v = attempt(
        &[&addr],
        json!({"method": "GET", "url": format!("http://{addr}/")}),
    )
    .await;
    assert_eq!(error_of(&v), ("HTTP_302".into(), false));
}

#[tokio::test]
async fn a_refused_connection_is_an_ordinary_retryable_failure() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let addr = format!("127.0.0.1:{port}");
    let v = attempt(
        &[&addr],
        json!({"method": "GET", "url": format!("http://{addr}/")}),
    )
    .await;
    assert_eq!(error_of(&v), ("HTTP_CONNECTION_FAILED".into(), true));
}

#[tokio::test]
async fn a_connection_closed_after_the_request_is_uncertain() {
    let (addr, _) = raw_server(None).await;
    let v = attempt(
        &[&addr],
        json!({"method": "POST", "url": format!("http://{addr}/")}),
    )
    .await;
    assert!(
        matches!(&v, Verdict::Uncertain(r) if r.contains("after the request was sent")),
        "{v:?}"
    );
}

#[tokio::test]
async fn an_oversized_body_is_a_final_failure() {
    let body = "x".repeat(100);
    let (addr, _) = raw_server(Some(format!(
        "HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )))
    .await;
    let v = attempt(
        &[&addr],
        json!({"method": "GET", "url": format!("http://{addr}/")}),
    )
    .await;
    assert_eq!(error_of(&v), ("HTTP_RESPONSE_TOO_LARGE".into(), false));
}

#[tokio::test]
async fn unusable_input_is_a_final_failure() {
    for input in [
        json!({"method": "G E T", "url": "http://127.0.0.1/"}),
        json!({"method": "GET", "url": "ftp://127.0.0.1/"}),
        json!({"method": "GET", "url": "not a url"}),
        json!({"method": "GET", "url": "http://127.0.0.1/", "headers": {"a": 1}}),
        json!({"method": "GET", "url": "http://127.0.0.1/", "headers": ["a"]}),
        json!({"method": "GET", "url": "http://127.0.0.1/", "timeout": 0}),
    ] {
        let v = attempt(&["127.0.0.1"], input.clone()).await;
        assert_eq!(
            error_of(&v),
            ("HTTP_INVALID_REQUEST".into(), false),
            "{input}"
        );
    }
}
