//! Authentication and permissions (`--auth`): every endpoint × every role
//! (no token, a wrong token, admin, client, worker, another worker), worker
//! grants (register, sessions, results), idempotency scoped per credential,
//! and the binary's bind rules.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod guard_support;

use axum::http::{Method, StatusCode};
use guard_support::Harness;
use orbit_io_tokio::driver::Options;
use orbit_server::api::auth::{hash_token, AuthConfig};
use orbit_server::api::{self};
use serde_json::json;
use std::sync::Arc;

const ADMIN: &str = "admin-secret";
const CLIENT: &str = "client-secret";
const WORKER: &str = "worker-secret";
const PAYER: &str = "payer-secret";

fn auth_file() -> String {
    format!(
        r#"
[[tokens]]
name = "ops"
role = "admin"
sha256 = "{}"

[[tokens]]
name = "shop"
role = "client"
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
        hash_token(CLIENT),
        hash_token(WORKER),
        hash_token(PAYER)
    )
}

async fn harness() -> Harness {
    let config = AuthConfig::parse(&auth_file()).unwrap();
    let options = api::Options {
        auth: Some(Arc::new(config)),
        ..api::Options::default()
    };
    Harness::start_with(options, Options::default()).await
}

async fn call(
    h: &Harness,
    token: Option<&str>,
    method: Method,
    uri: &str,
    body: &str,
) -> guard_support::Reply {
    let bearer = token.map(|t| format!("Bearer {t}"));
    let headers: Vec<(&str, &str)> = bearer
        .as_deref()
        .map(|b| vec![("authorization", b)])
        .unwrap_or_default();
    h.send(method, uri, &headers, body).await
}

#[derive(Clone, Copy, PartialEq, Debug)]
enum Expect {
    Allowed,
    Unauthenticated,
    Forbidden,
}

#[tokio::test]
async fn every_endpoint_times_every_role() {
    let h = harness().await;
    // Set up as admin: definitions, one execution, a worker session holding
    // a task.
    let deploy = json!({"source": guard_support::SOURCE, "filename": "t.orbit"}).to_string();
    let r = call(&h, Some(ADMIN), Method::POST, "/v1/definitions", &deploy).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.json);
    let start = r#"{"workflow": "Plain", "input": {"n": 1}, "execution_id": "e1"}"#;
    let r = call(&h, Some(ADMIN), Method::POST, "/v1/executions", start).await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.json);
    let r = call(
        &h,
        Some(WORKER),
        Method::POST,
        "/v1/workers",
        r#"{"worker_id": "w1", "task_patterns": ["demo.work"]}"#,
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.json);
    let session = r.json["session_id"].as_str().unwrap().to_owned();
    let r = call(
        &h,
        Some(WORKER),
        Method::POST,
        &format!("/v1/workers/{session}/poll"),
        r#"{"max_tasks": 1, "wait_ms": 2000}"#,
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.json);
    let task_token = r.json["tasks"][0]["token"].as_str().unwrap().to_owned();

    use Expect::*;
    // (method, uri, body, [none, wrong, client, payer, worker, admin]).
    let endpoints: Vec<(Method, String, &str, [Expect; 6])> = vec![
        (Method::GET, "/healthz".into(), "", [Allowed; 6]),
        (Method::GET, "/readyz".into(), "", [Allowed; 6]),
        (Method::GET, "/v1/openapi.json".into(), "", [Allowed; 6]),
        (
            Method::GET,
            "/metrics".into(),
            "",
            [
                Unauthenticated,
                Unauthenticated,
                Allowed,
                Allowed,
                Allowed,
                Allowed,
            ],
        ),
        (
            Method::POST,
            "/v1/definitions".into(),
            deploy.as_str(),
            [
                Unauthenticated,
                Unauthenticated,
                Forbidden,
                Forbidden,
                Forbidden,
                Allowed,
            ],
        ),
        (
            Method::GET,
            "/v1/definitions".into(),
            "",
            [
                Unauthenticated,
                Unauthenticated,
                Allowed,
                Forbidden,
                Forbidden,
                Allowed,
            ],
        ),
        (
            Method::GET,
            "/v1/definitions/Plain/1.0.0".into(),
            "",
            [
                Unauthenticated,
                Unauthenticated,
                Allowed,
                Forbidden,
                Forbidden,
                Allowed,
            ],
        ),
        (
            Method::POST,
            "/v1/executions".into(),
            r#"{"workflow": "Plain", "input": {"n": 2}}"#,
            [
                Unauthenticated,
                Unauthenticated,
                Allowed,
                Forbidden,
                Forbidden,
                Allowed,
            ],
        ),
        (
            Method::GET,
            "/v1/executions".into(),
            "",
            [
                Unauthenticated,
                Unauthenticated,
                Allowed,
                Forbidden,
                Forbidden,
                Allowed,
            ],
        ),
        (
            Method::GET,
            "/v1/executions/e1".into(),
            "",
            [
                Unauthenticated,
                Unauthenticated,
                Allowed,
                Forbidden,
                Forbidden,
                Allowed,
            ],
        ),
        (
            Method::GET,
            "/v1/executions/e1/history".into(),
            "",
            [
                Unauthenticated,
                Unauthenticated,
                Allowed,
                Forbidden,
                Forbidden,
                Allowed,
            ],
        ),
        (
            Method::POST,
            "/v1/executions/e1/wait?timeout_ms=1".into(),
            "",
            [
                Unauthenticated,
                Unauthenticated,
                Allowed,
                Forbidden,
                Forbidden,
                Allowed,
            ],
        ),
        (
            Method::POST,
            "/v1/executions/e1/signals/go".into(),
            r#"{"payload": 1}"#,
            [
                Unauthenticated,
                Unauthenticated,
                Allowed,
                Forbidden,
                Forbidden,
                Allowed,
            ],
        ),
        (
            Method::POST,
            "/v1/workers".into(),
            r#"{"worker_id": "w2", "task_patterns": ["demo.*"]}"#,
            [
                Unauthenticated,
                Unauthenticated,
                Forbidden,
                Forbidden,
                Allowed,
                Allowed,
            ],
        ),
        (
            Method::POST,
            format!("/v1/workers/{session}/heartbeat"),
            r#"{"held": []}"#,
            [
                Unauthenticated,
                Unauthenticated,
                Forbidden,
                Forbidden,
                Allowed,
                Allowed,
            ],
        ),
        (
            Method::POST,
            format!("/v1/workers/{session}/poll"),
            r#"{"max_tasks": 1, "wait_ms": 0}"#,
            [
                Unauthenticated,
                Unauthenticated,
                Forbidden,
                Forbidden,
                Allowed,
                Allowed,
            ],
        ),
        (
            Method::POST,
            format!("/v1/tasks/{task_token}/result"),
            r#"{"output": {"doubled": 2}}"#,
            [
                Unauthenticated,
                Unauthenticated,
                Forbidden,
                Forbidden,
                Allowed,
                Allowed,
            ],
        ),
        (
            Method::POST,
            "/v1/executions/e1/cancel".into(),
            "",
            [
                Unauthenticated,
                Unauthenticated,
                Allowed,
                Forbidden,
                Forbidden,
                Allowed,
            ],
        ),
        (
            Method::DELETE,
            format!("/v1/workers/{session}"),
            "",
            [
                Unauthenticated,
                Unauthenticated,
                Forbidden,
                Forbidden,
                Allowed,
                Allowed,
            ],
        ),
        (
            Method::GET,
            "/v1/nowhere".into(),
            "",
            [
                Unauthenticated,
                Unauthenticated,
                Allowed,
                Allowed,
                Allowed,
                Allowed,
            ],
        ),
    ];
    let roles = [
        None,
        Some("not-a-token"),
        Some(CLIENT),
        Some(PAYER),
        Some(WORKER),
        Some(ADMIN),
    ];
    for (method, uri, body, expect) in &endpoints {
        for (role, want) in roles.iter().zip(expect) {
            let r = call(&h, *role, method.clone(), uri, body).await;
            let got = match r.status {
                StatusCode::UNAUTHORIZED => Unauthenticated,
                StatusCode::FORBIDDEN => Forbidden,
                _ => Allowed,
            };
            assert_eq!(
                got, *want,
                "{method} {uri} as {role:?}: {} {}",
                r.status, r.json
            );
            match got {
                Unauthenticated => {
                    assert_eq!(r.code(), "UNAUTHENTICATED");
                    assert_eq!(r.headers.get("www-authenticate").unwrap(), "Bearer");
                }
                Forbidden => assert_eq!(r.code(), "FORBIDDEN"),
                Allowed => assert!(r.status.as_u16() < 500, "{method} {uri}: {}", r.status),
            }
        }
    }
}

#[tokio::test]
async fn worker_grants() {
    let h = harness().await;
    let deploy = json!({"source": guard_support::SOURCE, "filename": "t.orbit"}).to_string();
    call(&h, Some(ADMIN), Method::POST, "/v1/definitions", &deploy).await;
    for patterns in [
        r#"["payments.*"]"#,
        r#"["*"]"#,
        r#"["demo.*", "payments.charge"]"#,
        r#"["demo"]"#,
    ] {
        let body = format!(r#"{{"worker_id": "w", "task_patterns": {patterns}}}"#);
        let r = call(&h, Some(WORKER), Method::POST, "/v1/workers", &body).await;
        assert_eq!(r.status, StatusCode::FORBIDDEN, "{patterns}: {}", r.json);
        assert_eq!(r.code(), "FORBIDDEN");
    }
    // A pay worker gets a payments task; the demo worker cannot poll its
    // session nor report its result.
    let r = call(
        &h,
        Some(ADMIN),
        Method::POST,
        "/v1/executions",
        r#"{"workflow": "Pay", "input": {"n": 3}, "execution_id": "p1"}"#,
    )
    .await;
    assert_eq!(r.status, StatusCode::CREATED);
    let r = call(
        &h,
        Some(PAYER),
        Method::POST,
        "/v1/workers",
        r#"{"worker_id": "p", "task_patterns": ["payments.charge"]}"#,
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.json);
    let pay_session = r.json["session_id"].as_str().unwrap().to_owned();
    let poll = format!("/v1/workers/{pay_session}/poll");
    let r = call(&h, Some(WORKER), Method::POST, &poll, r#"{"wait_ms": 0}"#).await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    let r = call(
        &h,
        Some(PAYER),
        Method::POST,
        &poll,
        r#"{"max_tasks": 1, "wait_ms": 2000}"#,
    )
    .await;
    assert_eq!(r.status, StatusCode::OK);
    let token = r.json["tasks"][0]["token"].as_str().unwrap().to_owned();
    let result = format!("/v1/tasks/{token}/result");
    let r = call(
        &h,
        Some(WORKER),
        Method::POST,
        &result,
        r#"{"output": {"doubled": 6}}"#,
    )
    .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN, "{}", r.json);
    let r = call(
        &h,
        Some(PAYER),
        Method::POST,
        &result,
        r#"{"output": {"doubled": 6}}"#,
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.json);
    assert_eq!(r.json["accepted"], true);
    let r = call(
        &h,
        Some(ADMIN),
        Method::POST,
        "/v1/executions/p1/wait?timeout_ms=5000",
        "",
    )
    .await;
    assert_eq!(r.json["status"], "completed", "{}", r.json);
}

#[tokio::test]
async fn bearer_forms() {
    let h = harness().await;
    for header in [
        "Basic abc",
        "Bearer",
        "Bearer ",
        "bearer wrong",
        "admin-secret",
    ] {
        let r = h
            .send(
                Method::GET,
                "/v1/executions",
                &[("authorization", header)],
                "",
            )
            .await;
        assert_eq!(r.status, StatusCode::UNAUTHORIZED, "{header}");
    }
    let r = h
        .send(
            Method::GET,
            "/v1/executions",
            &[("authorization", "bearer client-secret")],
            "",
        )
        .await;
    assert_eq!(r.status, StatusCode::OK);
}

#[tokio::test]
async fn idempotency_keys_are_scoped_per_credential() {
    let h = harness().await;
    let deploy = json!({"source": guard_support::SOURCE, "filename": "t.orbit"}).to_string();
    call(&h, Some(ADMIN), Method::POST, "/v1/definitions", &deploy).await;
    let body = r#"{"workflow": "Plain", "input": {"n": 1}}"#;
    let send = |token: &'static str| {
        let h = &h;
        async move {
            let bearer = format!("Bearer {token}");
            h.send(
                Method::POST,
                "/v1/executions",
                &[
                    ("authorization", bearer.as_str()),
                    ("idempotency-key", "same-key"),
                ],
                body,
            )
            .await
        }
    };
    let a = send(CLIENT).await;
    let b = send(ADMIN).await;
    let a2 = send(CLIENT).await;
    assert_eq!(a.status, StatusCode::CREATED);
    assert_eq!(b.status, StatusCode::CREATED);
    assert!(!b.replayed());
    assert_ne!(a.json["execution_id"], b.json["execution_id"]);
    assert!(a2.replayed());
    assert_eq!(a2.bytes, a.bytes);
}

fn orbit() -> std::process::Command {
    std::process::Command::new(env!("CARGO_BIN_EXE_orbit"))
}

#[test]
fn binary_refuses_open_non_loopback_without_auth() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("o.db").display());
    let out = orbit()
        .args(["server", "--db", &db, "--listen", "0.0.0.0:0"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("non-loopback"), "{stderr}");

    // A bad auth file is a usage error.
    let bad = dir.path().join("bad.toml");
    std::fs::write(
        &bad,
        "[[tokens]]\nname = \"x\"\nrole = \"root\"\nsha256 = \"00\"\n",
    )
    .unwrap();
    let out = orbit()
        .args(["server", "--db", &db, "--auth", bad.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("auth file"));
}

#[test]
fn binary_with_auth_binds_anywhere_and_checks_tokens() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("o.db").display());
    let auth = dir.path().join("auth.toml");
    std::fs::write(&auth, auth_file()).unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut child = orbit()
        .args([
            "server",
            "--db",
            &db,
            "--listen",
            &format!("0.0.0.0:{port}"),
            "--auth",
            auth.to_str().unwrap(),
        ])
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let base = format!("http://127.0.0.1:{port}");
    let rt = tokio::runtime::Runtime::new().unwrap();
    let outcome = rt.block_on(async {
        let http = reqwest::Client::new();
        for _ in 0..200 {
            if http.get(format!("{base}/healthz")).send().await.is_ok() {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        let none = http
            .get(format!("{base}/v1/executions"))
            .send()
            .await
            .unwrap();
        let ok = http
            .get(format!("{base}/v1/executions"))
            .bearer_auth(CLIENT)
            .send()
            .await
            .unwrap();
        (none.status().as_u16(), ok.status().as_u16())
    });
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(outcome, (401, 200));
}
