//! `POST /v1/definitions`, `GET /v1/definitions`, `GET /v1/definitions/{name}/{version}`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod api_support;

use api_support::{code, Server, PLAIN};
use axum::http::StatusCode;
use serde_json::json;

#[tokio::test]
async fn deploy_registers_then_is_a_no_op_for_identical_content() {
    let s = Server::start().await;
    let first = s.deploy(PLAIN).await;
    let wf = &first["workflows"][0];
    assert_eq!(wf["name"], "Plain");
    assert_eq!(wf["version"], "1.0.0");
    assert_eq!(wf["created"], true);
    assert_eq!(wf["definition_hash"].as_str().unwrap().len(), 64);
    let again = s.deploy(PLAIN).await;
    assert_eq!(again["workflows"][0]["created"], false);
    assert_eq!(
        again["workflows"][0]["definition_hash"],
        wf["definition_hash"]
    );
}

#[tokio::test]
async fn deploy_of_several_files_compiles_them_together() {
    let s = Server::start().await;
    let (task, workflow) = PLAIN.split_at(PLAIN.find("workflow Plain").unwrap());
    let (status, body) = s
        .post(
            "/v1/definitions",
            json!({"files": [
                {"filename": "tasks.orbit", "source": task},
                {"filename": "plain.orbit", "source": workflow},
            ]}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["workflows"][0]["name"], "Plain");
}

#[tokio::test]
async fn compile_errors_are_422_with_diagnostics() {
    let s = Server::start().await;
    let broken = PLAIN.replace("input.n", "input.nope");
    let (status, body) = s
        .post(
            "/v1/definitions",
            json!({"source": broken, "filename": "bad.orbit"}),
        )
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert_eq!(code(&body), "COMPILE_ERROR");
    let diags = body["error"]["diagnostics"].as_array().unwrap();
    assert!(!diags.is_empty());
    assert_eq!(diags[0]["file"], "bad.orbit");
    assert!(diags[0]["code"].as_str().unwrap().starts_with('E'));
    let (_, list) = s.get("/v1/definitions").await;
    assert!(list["definitions"].as_array().unwrap().is_empty(), "{list}");
}

#[tokio::test]
async fn same_name_and_version_with_other_content_is_a_conflict() {
    let s = Server::start().await;
    s.deploy(PLAIN).await;
    let changed = PLAIN.replace("doubled: work.doubled", "twice: work.doubled");
    let (status, body) = s
        .post(
            "/v1/definitions",
            json!({"source": changed, "filename": "x.orbit"}),
        )
        .await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert_eq!(code(&body), "DEFINITION_CONFLICT");
}

#[tokio::test]
async fn definitions_are_listed_and_readable_with_their_source() {
    let s = Server::start().await;
    s.deploy(PLAIN).await;
    let (status, list) = s.get("/v1/definitions").await;
    assert_eq!(status, StatusCode::OK);
    let rows = list["definitions"].as_array().unwrap();
    assert_eq!(rows.len(), 1, "{list}");
    assert_eq!(rows[0]["name"], "Plain");
    assert!(rows[0]["registered_at"].is_string() || rows[0]["registered_at"].is_number());
    let (status, one) = s.get("/v1/definitions/Plain/1.0.0").await;
    assert_eq!(status, StatusCode::OK, "{one}");
    assert!(
        one["source"].as_str().unwrap().contains("workflow Plain"),
        "{one}"
    );
    let (status, missing) = s.get("/v1/definitions/Plain/9.9.9").await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{missing}");
}

#[tokio::test]
async fn definitions_survive_a_restart() {
    let s = Server::start().await;
    s.deploy(PLAIN).await;
    s.driver.shutdown().await;
    let url = format!("sqlite://{}", s.dir.path().join("orbit.db").display());
    let store = orbit_io_tokio::storage::SqliteStore::open(
        &orbit_io_tokio::storage::SqliteOptions::new(url),
    )
    .await
    .unwrap();
    let driver =
        orbit_io_tokio::driver::Driver::start(std::sync::Arc::new(store), Default::default())
            .await
            .unwrap();
    let router = orbit_server::api::app(orbit_server::api::AppState::new(driver));
    let restarted = Server {
        router,
        driver: s.driver.clone(),
        dir: s.dir,
    };
    let (status, one) = restarted.get("/v1/definitions/Plain/1.0.0").await;
    assert_eq!(status, StatusCode::OK, "{one}");
}

/// language.md: a deploy whose child workflow is neither in the request
/// nor registered is `409 CHILD_NOT_REGISTERED` naming the child; once the
/// child is registered, the same parent deploys; anything else wrong in the
/// sources stays a `422 COMPILE_ERROR`.
#[tokio::test]
async fn a_child_neither_sent_nor_registered_is_child_not_registered() {
    let s = Server::start().await;
    let parent = r#"
workflow Parent version "1.0.0" {
    input { n: Int }
    step child {
        workflow Plain version "1.0.0"
        with { n: input.n }
    }
}
"#;
    let (status, body) = s
        .post(
            "/v1/definitions",
            json!({"source": parent, "filename": "parent.orbit"}),
        )
        .await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert_eq!(code(&body), "CHILD_NOT_REGISTERED");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("Plain"), "{message}");
    assert_eq!(body["error"]["diagnostics"][0]["code"], "E0103", "{body}");
    let (_, list) = s.get("/v1/definitions").await;
    assert!(list["definitions"].as_array().unwrap().is_empty(), "{list}");

    // Another error beside the missing child: a compile error.
    let broken = parent.replace("input.n", "input.nope");
    let (status, body) = s
        .post(
            "/v1/definitions",
            json!({"source": broken, "filename": "parent.orbit"}),
        )
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert_eq!(code(&body), "COMPILE_ERROR");

    s.deploy(PLAIN).await;
    let (status, body) = s
        .post(
            "/v1/definitions",
            json!({"source": parent, "filename": "parent.orbit"}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["workflows"][0]["name"], "Parent");
}
