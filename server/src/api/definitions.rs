//! `POST /v1/definitions` (compile and register), `GET /v1/definitions`,
//! `GET /v1/definitions/{name}/{version}`.

use super::error::ApiError;
use super::extract::{Json, Path};
use super::idempotency::Scope;
use super::reply::respond;
use super::AppState;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use orbit_core::check::{self, Definition, Source};
use orbit_core::engine::{DefinitionRecord, Request};
use orbit_sdk::wire::{self, DeployRequest, SourceFile};
use std::collections::BTreeMap;

fn check_filename(name: &str) -> Result<(), ApiError> {
    if !wire::text_ok(name, wire::NAME_MAX) {
        return Err(ApiError::invalid(
            "filename must be 1 to 255 characters without control characters",
        ));
    }
    Ok(())
}

fn sources(body: DeployRequest) -> Result<Vec<Source>, ApiError> {
    let files = match body {
        DeployRequest::Source { source, filename } => vec![SourceFile {
            filename: filename.unwrap_or_else(|| "main.orbit".to_owned()),
            source,
        }],
        DeployRequest::Files { files } => files,
    };
    files
        .into_iter()
        .map(|f| {
            check_filename(&f.filename)?;
            Ok(Source {
                name: f.filename,
                text: f.source,
            })
        })
        .collect()
}

/// Compiles the sources (children may refer to already registered
/// workflows) and registers every workflow.
#[utoipa::path(post, path = "/v1/definitions", tag = "definitions", request_body = DeployRequest,
    responses((status = 200, description = "every workflow and task contract registered; `created: false` for identical content already there", body = wire::Deployed),
              (status = 409, description = "`DEFINITION_CONFLICT` (same name and version, other content) or `CHILD_NOT_REGISTERED` (a child workflow neither in the request nor registered; with `diagnostics`)", body = wire::ErrorBody),
              (status = 422, description = "`COMPILE_ERROR`, with `diagnostics`", body = wire::ErrorBody)))]
pub async fn deploy(
    State(state): State<AppState>,
    Scope(idempotency): Scope,
    Json(body): Json<DeployRequest>,
) -> Result<Response, ApiError> {
    let sources = sources(body)?;
    let stored = state
        .driver
        .store()
        .load_definitions()
        .await
        .map_err(ApiError::storage)?;
    let registered: BTreeMap<(String, String), Definition> = stored
        .into_iter()
        .filter_map(|d| {
            let workflow = serde_json::from_value(d.body).ok()?;
            Some((
                (d.name, d.version),
                Definition {
                    workflow,
                    hash: d.hash,
                    file: String::new(),
                },
            ))
        })
        .collect();
    let lookup = |name: &str, version: &str| {
        registered
            .get(&(name.to_owned(), version.to_owned()))
            .cloned()
    };
    let compiled = check::compile(&sources, &lookup);
    if !compiled.is_ok() {
        let n = compiled.diagnostics.len();
        let diagnostics =
            serde_json::to_value(&compiled.diagnostics).map_err(ApiError::internal)?;
        if let Some(message) = unregistered_children(&compiled.diagnostics) {
            // language.md: a deploy whose child is neither in the request
            // nor registered is `409 CHILD_NOT_REGISTERED` naming the child
            // (the compiler's E0103, which `orbit check` prints).
            return Err(
                ApiError::new(StatusCode::CONFLICT, "CHILD_NOT_REGISTERED", message)
                    .with("diagnostics", diagnostics),
            );
        }
        return Err(ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "COMPILE_ERROR",
            format!("{n} error{} in the sources", if n == 1 { "" } else { "s" }),
        )
        .with("diagnostics", diagnostics));
    }
    let definitions = compiled
        .definitions
        .into_iter()
        .map(|d| {
            let source = sources
                .iter()
                .find(|s| s.name == d.file)
                .map(|s| s.text.clone())
                .unwrap_or_default();
            DefinitionRecord {
                workflow: d.workflow,
                definition_hash: d.hash,
                source,
                registered_at: 0,
            }
        })
        .collect();
    Ok(respond(
        state
            .driver
            .call(Request::Deploy {
                definitions,
                idempotency,
            })
            .await,
    ))
}

/// When the only errors are child workflows that are neither in the request
/// nor registered (E0103), the message of `409 CHILD_NOT_REGISTERED` naming
/// them; `None` when anything else is wrong too (then `422 COMPILE_ERROR`).
fn unregistered_children(diagnostics: &[orbit_core::diagnostic::Diagnostic]) -> Option<String> {
    if diagnostics.is_empty() || diagnostics.iter().any(|d| d.code != "E0103") {
        return None;
    }
    let children: Vec<&str> = diagnostics
        .iter()
        .map(|d| {
            d.message
                .strip_prefix("unknown workflow or version: ")
                .unwrap_or(&d.message)
        })
        .collect();
    Some(format!(
        "child workflow {} is not registered; deploy it first or in the same request",
        children.join(", ")
    ))
}

/// Every registered definition: name, version, hash, registered_at.
#[utoipa::path(get, path = "/v1/definitions", tag = "definitions",
    responses((status = 200, description = "the definitions", body = wire::DefinitionList)))]
pub async fn list(State(state): State<AppState>) -> Response {
    respond(state.driver.call(Request::ListDefinitions).await)
}

/// One definition with its source and hash.
#[utoipa::path(get, path = "/v1/definitions/{name}/{version}", tag = "definitions",
    params(("name" = String, Path, description = "workflow name"), ("version" = String, Path, description = "version")),
    responses((status = 200, description = "the definition", body = wire::DefinitionDetail),
              (status = 404, description = "`UNKNOWN_WORKFLOW`", body = wire::ErrorBody)))]
pub async fn get_one(
    State(state): State<AppState>,
    Path((name, version)): Path<(String, String)>,
) -> Response {
    respond(
        state
            .driver
            .call(Request::GetDefinition { name, version })
            .await,
    )
}
