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
use serde::Deserialize;
use std::collections::BTreeMap;
use utoipa::ToSchema;

/// One source file of a deploy.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SourceFile {
    /// File name shown in diagnostics.
    pub filename: String,
    /// The `.orbit` text.
    pub source: String,
}

/// Body of `POST /v1/definitions`: one file (`source` + `filename`) or
/// several (`files`).
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DeployBody {
    /// The `.orbit` text of a single file.
    pub source: Option<String>,
    /// Its file name (default `main.orbit`).
    pub filename: Option<String>,
    /// Several files, compiled together.
    pub files: Option<Vec<SourceFile>>,
}

fn check_filename(name: &str) -> Result<(), ApiError> {
    if name.is_empty() || name.len() > 255 || name.chars().any(char::is_control) {
        return Err(ApiError::invalid(
            "filename must be 1 to 255 characters without control characters",
        ));
    }
    Ok(())
}

fn sources(body: DeployBody) -> Result<Vec<Source>, ApiError> {
    let mut out = Vec::new();
    if let Some(text) = body.source {
        let name = body.filename.unwrap_or_else(|| "main.orbit".to_owned());
        check_filename(&name)?;
        out.push(Source { name, text });
    } else if body.filename.is_some() {
        return Err(ApiError::invalid("`filename` given without `source`"));
    }
    for f in body.files.unwrap_or_default() {
        check_filename(&f.filename)?;
        out.push(Source {
            name: f.filename,
            text: f.source,
        });
    }
    if out.is_empty() {
        return Err(ApiError::invalid(
            "give `source` or a non-empty `files` list",
        ));
    }
    Ok(out)
}

/// Compiles the sources (children may refer to already registered
/// workflows) and registers every workflow.
#[utoipa::path(post, path = "/v1/definitions", request_body = DeployBody,
    responses((status = 200, description = "every workflow registered, with `created`"),
              (status = 422, description = "COMPILE_ERROR with `diagnostics`"),
              (status = 409, description = "DEFINITION_CONFLICT or CHILD_NOT_REGISTERED")))]
pub async fn deploy(
    State(state): State<AppState>,
    Scope(idempotency): Scope,
    Json(body): Json<DeployBody>,
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

/// Every registered definition: name, version, hash, registered_at.
#[utoipa::path(get, path = "/v1/definitions", responses((status = 200, description = "the definitions")))]
pub async fn list(State(state): State<AppState>) -> Response {
    respond(state.driver.call(Request::ListDefinitions).await)
}

/// One definition with its source and hash.
#[utoipa::path(get, path = "/v1/definitions/{name}/{version}",
    params(("name" = String, Path, description = "workflow name"), ("version" = String, Path, description = "version")),
    responses((status = 200, description = "the definition"), (status = 404, description = "UNKNOWN_WORKFLOW")))]
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
