//! The HTTP API of `api.md` over axum: definitions, executions, the worker
//! protocol, health, metrics and the OpenAPI document, with the web console
//! ([`crate::ui`]) merged in at `/ui`. [`app`] builds the
//! router from an [`AppState`] without binding a socket, so tests drive it
//! with `tower::ServiceExt::oneshot`.

pub mod auth;
mod cluster;
mod definitions;
pub mod error;
mod executions;
pub mod extract;
mod health;
mod history;
pub mod idempotency;
pub mod limits;
pub mod openapi;
mod reads;
mod reply;
mod whoami;
mod workers;

pub use error::ApiError;
pub use reply::{event_json, rfc3339};

use axum::extract::DefaultBodyLimit;
use axum::middleware::{from_fn, from_fn_with_state};
use axum::routing::{delete, get, post};
use axum::Router;
use orbit_io_tokio::driver::Driver;
use std::sync::Arc;
use std::time::Duration;
use tower::ServiceBuilder;

/// Default `--max-body`: 4 MiB.
pub const DEFAULT_MAX_BODY: usize = 4 * 1024 * 1024;

/// What every handler shares.
#[derive(Debug, Clone)]
pub struct AppState {
    /// The running driver (engine + storage).
    pub driver: Driver,
    /// Largest request body accepted, in bytes.
    pub max_body: usize,
}

impl AppState {
    /// State over `driver` with the default body limit.
    pub fn new(driver: Driver) -> AppState {
        AppState {
            driver,
            max_body: DEFAULT_MAX_BODY,
        }
    }
}

/// What the router guards beyond [`AppState`]: authentication and the
/// idempotency edge.
#[derive(Debug, Clone)]
pub struct Options {
    /// `--auth`: the tokens; `None` allows everything (loopback quick start).
    pub auth: Option<Arc<auth::AuthConfig>>,
    /// How long a request waits for a racing request with the same
    /// `Idempotency-Key` before `409 IDEMPOTENCY_KEY_IN_FLIGHT`.
    pub in_flight_wait: Duration,
    /// Deadline for receiving a request's whole body.
    pub body_timeout: Duration,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            auth: None,
            in_flight_wait: idempotency::IN_FLIGHT_WAIT,
            body_timeout: limits::DEFAULT_BODY_TIMEOUT,
        }
    }
}

/// The API router without authentication.
pub fn app(state: AppState) -> Router {
    app_with(state, Options::default())
}

/// The API router with `options`.
pub fn app_with(state: AppState, options: Options) -> Router {
    let max_body = state.max_body;
    let guard = idempotency::Guard {
        store: state.driver.store().clone(),
        in_flight: idempotency::InFlight::default(),
        wait: options.in_flight_wait,
        max_body,
        clock: state.driver.clock(),
    };
    let document = openapi::serve(options.auth.is_some());
    let routes = Router::new()
        .route(
            "/v1/definitions",
            post(definitions::deploy).get(definitions::list),
        )
        .route(
            "/v1/definitions/{name}/{version}",
            get(definitions::get_one),
        )
        .route(
            "/v1/executions",
            post(executions::start).get(executions::list),
        )
        .route("/v1/executions/{id}", get(executions::get_one))
        .route("/v1/executions/{id}/history", get(history::history))
        .route(
            "/v1/executions/{id}/signals/{name}",
            post(executions::signal),
        )
        .route("/v1/executions/{id}/cancel", post(executions::cancel))
        .route("/v1/executions/{id}/wait", post(executions::wait))
        .route("/v1/whoami", get(whoami::whoami))
        .route("/v1/cluster", get(cluster::status))
        .route("/v1/workers", post(workers::register).get(workers::list))
        .route("/v1/workers/{session}", delete(workers::unregister))
        .route("/v1/workers/{session}/poll", post(workers::poll))
        .route("/v1/workers/{session}/heartbeat", post(workers::heartbeat))
        .route("/v1/tasks/{token}/result", post(workers::result))
        .route("/healthz", get(health::healthz))
        .route("/readyz", get(health::readyz))
        .route("/metrics", get(health::metrics))
        .route("/v1/openapi.json", get(document))
        .merge(crate::ui::routes())
        .fallback(error::not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .with_state(state);
    // The middleware wraps the router once, outermost first: the body's
    // deadline, the caller (the idempotency scope needs it), idempotency,
    // the body limit. Given to `Router::layer` instead, each layer would
    // wrap every route and be boxed and cloned again on every request.
    let body_timeout = options.body_timeout;
    let api =
        ServiceBuilder::new()
            .layer(from_fn(move |request, next| {
                limits::body_deadline(body_timeout, request, next)
            }))
            .option_layer(options.auth.map(|config| {
                from_fn_with_state(auth::Auth::new(config, max_body), auth::middleware)
            }))
            .layer(from_fn_with_state(guard, idempotency::middleware))
            .layer(DefaultBodyLimit::max(max_body))
            .service(routes);
    Router::new().fallback_service(api)
}

async fn method_not_allowed() -> ApiError {
    ApiError::new(
        axum::http::StatusCode::METHOD_NOT_ALLOWED,
        "METHOD_NOT_ALLOWED",
        "this route does not accept that method",
    )
}
