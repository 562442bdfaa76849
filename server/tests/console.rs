//! The web console's server side: every `/ui` page and every asset the pages
//! load is served from the binary with its content type and security
//! headers, open without a token; the API additions the console reads
//! (`GET /v1/whoami`, `GET /v1/workers`, the `version` and `id_prefix` list
//! filters, the `reader` role) answer as documented. The console itself is
//! driven in a browser by `.ci/console.sh`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod guard_support;

use axum::http::{Method, StatusCode};
use guard_support::{Harness, Reply};
use orbit_io_tokio::driver::Options;
use orbit_server::api;
use orbit_server::api::auth::{hash_token, AuthConfig};
use serde_json::{json, Value};
use std::sync::Arc;

const PAGES: &[&str] = &[
    "/ui",
    "/ui/",
    "/ui/executions/order-1",
    "/ui/definitions",
    "/ui/definitions/Order/1.0.0",
    "/ui/workers",
];

async fn get(h: &Harness, uri: &str, token: Option<&str>) -> Reply {
    let bearer = token.map(|t| format!("Bearer {t}"));
    let headers: Vec<(&str, &str)> = bearer
        .as_deref()
        .map(|b| vec![("authorization", b)])
        .unwrap_or_default();
    h.send(Method::GET, uri, &headers, "").await
}

fn header<'a>(r: &'a Reply, name: &str) -> &'a str {
    r.headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
}

/// Every `/ui/assets/…` name a text refers to (`src=`, `href=`, `from './x.js'`).
fn referenced_assets(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for marker in ["/ui/assets/", "from './"] {
        let mut rest = text;
        while let Some(i) = rest.find(marker) {
            rest = &rest[i + marker.len()..];
            let end = rest
                .find(|c: char| c == '"' || c == '\'' || c.is_whitespace())
                .unwrap_or(rest.len());
            out.push(rest[..end].to_owned());
        }
    }
    out.sort();
    out.dedup();
    out
}

#[tokio::test]
async fn every_page_and_every_asset_it_loads_is_served() {
    let h = Harness::start().await;
    let mut pending = Vec::new();
    for page in PAGES {
        let r = get(&h, page, None).await;
        assert_eq!(r.status, StatusCode::OK, "{page}");
        assert_eq!(header(&r, "content-type"), "text/html; charset=utf-8");
        assert!(header(&r, "content-security-policy").contains("script-src 'self'"));
        assert_eq!(header(&r, "x-content-type-options"), "nosniff");
        let text = String::from_utf8(r.bytes.clone()).unwrap();
        assert!(text.contains(r#"<script type="module" src="/ui/assets/main.js">"#));
        pending.extend(referenced_assets(&text));
    }
    // Follow the module graph: every import must be served too.
    let mut seen = Vec::new();
    while let Some(name) = pending.pop() {
        if seen.contains(&name) {
            continue;
        }
        let r = get(&h, &format!("/ui/assets/{name}"), None).await;
        assert_eq!(r.status, StatusCode::OK, "asset {name}");
        let expected = match name.rsplit('.').next() {
            Some("js") => "text/javascript; charset=utf-8",
            Some("css") => "text/css; charset=utf-8",
            Some("svg") => "image/svg+xml",
            other => panic!("unexpected asset kind {other:?}"),
        };
        assert_eq!(header(&r, "content-type"), expected, "{name}");
        pending.extend(referenced_assets(&String::from_utf8_lossy(&r.bytes)));
        seen.push(name);
    }
    assert!(seen.len() >= 10, "assets reached: {seen:?}");
    let r = get(&h, "/ui/assets/missing.js", None).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    let r = get(&h, "/ui/executions/a/b", None).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    let r = h.send(Method::POST, "/ui", &[], "").await;
    assert_eq!(r.status, StatusCode::METHOD_NOT_ALLOWED);
}

#[tokio::test]
async fn whoami_without_auth_may_do_everything() {
    let h = Harness::start().await;
    let r = get(&h, "/v1/whoami", None).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(
        r.json,
        json!({"auth": false, "name": null, "role": null,
               "permissions": {"read": true, "control": true, "deploy": true}})
    );
}

const ADMIN: &str = "admin-secret";
const CLIENT: &str = "client-secret";
const READER: &str = "reader-secret";
const WORKER: &str = "worker-secret";

async fn with_auth() -> Harness {
    let file = format!(
        "[[tokens]]\nname = \"ops\"\nrole = \"admin\"\nsha256 = \"{}\"\n\n\
         [[tokens]]\nname = \"shop\"\nrole = \"client\"\nsha256 = \"{}\"\n\n\
         [[tokens]]\nname = \"oncall\"\nrole = \"reader\"\nsha256 = \"{}\"\n\n\
         [[tokens]]\nname = \"w\"\nrole = \"worker\"\ntask_patterns = [\"demo.*\"]\nsha256 = \"{}\"\n",
        hash_token(ADMIN),
        hash_token(CLIENT),
        hash_token(READER),
        hash_token(WORKER)
    );
    let options = api::Options {
        auth: Some(Arc::new(AuthConfig::parse(&file).unwrap())),
        ..api::Options::default()
    };
    Harness::start_with(options, Options::default()).await
}

#[tokio::test]
async fn the_console_is_open_but_its_data_needs_a_token() {
    let h = with_auth().await;
    for page in PAGES {
        assert_eq!(get(&h, page, None).await.status, StatusCode::OK, "{page}");
    }
    assert_eq!(
        get(&h, "/ui/assets/main.js", None).await.status,
        StatusCode::OK
    );
    let r = get(&h, "/v1/whoami", None).await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED);
    assert_eq!(r.code(), "UNAUTHENTICATED");
    assert_eq!(
        get(&h, "/v1/whoami", Some("nope")).await.status,
        StatusCode::UNAUTHORIZED
    );
    let perms = |r: &Reply| {
        let p = &r.json["permissions"];
        (p["read"] == true, p["control"] == true, p["deploy"] == true)
    };
    for (token, name, role, expected) in [
        (ADMIN, "ops", "admin", (true, true, true)),
        (CLIENT, "shop", "client", (true, true, false)),
        (READER, "oncall", "reader", (true, false, false)),
        (WORKER, "w", "worker", (false, false, false)),
    ] {
        let r = get(&h, "/v1/whoami", Some(token)).await;
        assert_eq!(r.status, StatusCode::OK, "{role}");
        assert_eq!(r.json["auth"], true);
        assert_eq!(r.json["name"], name);
        assert_eq!(r.json["role"], role);
        assert_eq!(perms(&r), expected, "{role}");
    }
}

#[tokio::test]
async fn a_reader_reads_everything_and_changes_nothing() {
    let h = with_auth().await;
    let admin = [("authorization", "Bearer admin-secret")];
    let reader = [("authorization", "Bearer reader-secret")];
    let deploy = json!({"source": guard_support::SOURCE, "filename": "t.orbit"}).to_string();
    let r = h
        .send(Method::POST, "/v1/definitions", &admin, &deploy)
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.json);
    let start = r#"{"workflow": "Plain", "input": {"n": 1}, "execution_id": "e1"}"#;
    let r = h.send(Method::POST, "/v1/executions", &admin, start).await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.json);
    for uri in [
        "/v1/definitions",
        "/v1/definitions/Plain/1.0.0",
        "/v1/executions",
        "/v1/executions/e1",
        "/v1/executions/e1/history",
        "/v1/workers",
    ] {
        let r = get(&h, uri, Some(READER)).await;
        assert_eq!(r.status, StatusCode::OK, "{uri}: {}", r.json);
    }
    for (uri, body) in [
        ("/v1/executions/e1/signals/go", "{}"),
        ("/v1/executions/e1/cancel", "{}"),
        ("/v1/executions", start),
        ("/v1/definitions", deploy.as_str()),
    ] {
        let r = h.send(Method::POST, uri, &reader, body).await;
        assert_eq!(r.status, StatusCode::FORBIDDEN, "{uri}");
        assert_eq!(r.code(), "FORBIDDEN");
    }
    let r = get(&h, "/v1/workers", Some(WORKER)).await;
    assert_eq!(
        r.status,
        StatusCode::FORBIDDEN,
        "a worker may not list sessions"
    );
}

async fn list(h: &Harness, query: &str) -> Reply {
    get(h, &format!("/v1/executions?{query}"), None).await
}

fn ids(r: &Reply) -> Vec<&str> {
    r.json["executions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["execution_id"].as_str().unwrap())
        .collect()
}

#[tokio::test]
async fn the_list_filters_by_version_and_id_prefix() {
    let h = Harness::start().await;
    h.deploy().await;
    let v2 = guard_support::SOURCE.replace(
        "workflow Plain version \"1.0.0\"",
        "workflow Plain version \"2.0.0\"",
    );
    let body = json!({"source": v2, "filename": "v2.orbit"}).to_string();
    let r = h.post("/v1/definitions", None, &body).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.json);
    for (id, version) in [
        ("order-1", "1.0.0"),
        ("order-2", "2.0.0"),
        ("order-10", "2.0.0"),
        ("refund-1", "1.0.0"),
    ] {
        let start =
            json!({"workflow": "Plain", "version": version, "input": {"n": 1}, "execution_id": id});
        let r = h.post("/v1/executions", None, &start.to_string()).await;
        assert_eq!(r.status, StatusCode::CREATED, "{}", r.json);
    }
    let r = list(&h, "version=2.0.0").await;
    let mut got = ids(&r);
    got.sort_unstable();
    assert_eq!(got, ["order-10", "order-2"]);
    let r = list(&h, "id_prefix=order-1").await;
    let mut got = ids(&r);
    got.sort_unstable();
    assert_eq!(got, ["order-1", "order-10"]);
    assert_eq!(
        ids(&list(&h, "id_prefix=order-1&version=1.0.0").await),
        ["order-1"]
    );
    assert_eq!(ids(&list(&h, "id_prefix=refund-1").await), ["refund-1"]);
    assert!(ids(&list(&h, "id_prefix=nothing").await).is_empty());
    assert_eq!(
        ids(&list(&h, "id_prefix=&version=").await).len(),
        4,
        "empty is no filter"
    );
    // Paging keeps the filters.
    let first = list(&h, "version=2.0.0&limit=1").await;
    assert_eq!(ids(&first).len(), 1);
    let cursor = first.json["next_cursor"].as_str().unwrap().to_owned();
    let second = list(&h, &format!("version=2.0.0&limit=1&cursor={cursor}")).await;
    assert_eq!(ids(&second).len(), 1);
    assert_ne!(ids(&first), ids(&second));
    assert_eq!(second.json["next_cursor"], Value::Null);
    let bad = list(&h, "id_prefix=%01").await;
    assert_eq!(bad.status, StatusCode::BAD_REQUEST);
    assert_eq!(bad.code(), "INVALID_REQUEST");
    let long = format!("version={}", "9".repeat(200));
    assert_eq!(list(&h, &long).await.status, StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn workers_lists_sessions_with_what_they_hold() {
    let h = Harness::start().await;
    h.deploy().await;
    let r = get(&h, "/v1/workers", None).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.json["sessions"], json!([]));
    assert!(r.json["session_timeout_ms"].as_u64().unwrap() > 0);
    let start = r#"{"workflow": "Plain", "input": {"n": 1}, "execution_id": "e1"}"#;
    assert_eq!(
        h.post("/v1/executions", None, start).await.status,
        StatusCode::CREATED
    );
    let r = h
        .post(
            "/v1/workers",
            None,
            r#"{"worker_id": "w-1", "task_patterns": ["demo.*"]}"#,
        )
        .await;
    let session = r.json["session_id"].as_str().unwrap().to_owned();
    let r = h
        .post(
            &format!("/v1/workers/{session}/poll"),
            None,
            r#"{"max_tasks": 1, "wait_ms": 2000}"#,
        )
        .await;
    assert_eq!(r.json["tasks"].as_array().unwrap().len(), 1, "{}", r.json);
    let r = get(&h, "/v1/workers", None).await;
    let sessions = r.json["sessions"].as_array().unwrap();
    assert_eq!(sessions.len(), 1, "{}", r.json);
    let s = &sessions[0];
    assert_eq!(s["session_id"], session.as_str());
    assert_eq!(s["worker_id"], "w-1");
    assert_eq!(s["task_patterns"], json!(["demo.*"]));
    assert!(s["last_seen"].as_str().unwrap().ends_with('Z'));
    let held = s["held"].as_array().unwrap();
    assert_eq!(held.len(), 1);
    assert_eq!(held[0]["execution_id"], "e1");
    assert_eq!(held[0]["unit"], "work");
    assert_eq!(held[0]["task"], "demo.work");
    assert_eq!(held[0]["attempt"], 1);
    assert!(held[0].get("token").is_none(), "tokens are not shown");
    let r = h
        .send(Method::DELETE, &format!("/v1/workers/{session}"), &[], "")
        .await;
    assert_eq!(r.status, StatusCode::OK);
    let r = get(&h, "/v1/workers", None).await;
    assert_eq!(r.json["sessions"], json!([]));
}

#[tokio::test]
async fn the_openapi_document_lists_the_console_reads() {
    let h = Harness::start().await;
    let r = get(&h, "/v1/openapi.json", None).await;
    let paths = &r.json["paths"];
    assert!(paths["/v1/whoami"]["get"].is_object());
    assert!(paths["/v1/workers"]["get"].is_object());
    let params: Vec<&str> = paths["/v1/executions"]["get"]["parameters"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert!(
        params.contains(&"version") && params.contains(&"id_prefix"),
        "{params:?}"
    );
}
