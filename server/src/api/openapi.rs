//! The OpenAPI document, generated from the handlers' annotations with
//! utoipa and served at `/v1/openapi.json`.

use super::{definitions, executions, health, history, whoami, workers};
use axum::Json;
use utoipa::OpenApi;

/// ORBIT's HTTP API.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "ORBIT",
        description = "Durable workflow runtime: definitions, executions and the worker protocol."
    ),
    paths(
        definitions::deploy,
        definitions::list,
        definitions::get_one,
        executions::start,
        executions::get_one,
        executions::list,
        executions::signal,
        executions::cancel,
        executions::wait,
        history::history,
        workers::register,
        workers::list,
        workers::poll,
        workers::heartbeat,
        workers::unregister,
        workers::result,
        health::healthz,
        health::readyz,
        health::metrics,
        whoami::whoami,
    ),
    components(schemas(
        definitions::DeployBody,
        definitions::SourceFile,
        executions::StartBody,
        executions::SignalBody,
        executions::CancelBody,
        workers::RegisterBody,
        workers::PollBody,
        workers::HeartbeatBody,
        workers::ResultBody,
        workers::ReportedError,
        whoami::Identity,
        whoami::Permissions,
    ))
)]
pub struct ApiDoc;

/// `GET /v1/openapi.json`.
pub async fn serve() -> Json<utoipa::openapi::OpenApi> {
    Json(ApiDoc::openapi())
}
