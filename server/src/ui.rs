//! The web console (`/ui`): one HTML page and its scripts and styles, all
//! embedded in the binary with `include_str!` — no build step, no CDN. The
//! page routes on the client (`/ui`, `/ui/executions/{id}`,
//! `/ui/definitions`, `/ui/workers`); every data request it makes goes to the
//! public `/v1` API with the operator's token, so the console sees and may do
//! exactly what that token may. The files themselves hold no data and are
//! served without a token.

use axum::extract::Path;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;

/// One embedded file.
struct Asset {
    name: &'static str,
    content_type: &'static str,
    body: &'static str,
}

const HTML: &str = "text/html; charset=utf-8";
const JS: &str = "text/javascript; charset=utf-8";
const CSS: &str = "text/css; charset=utf-8";
const SVG: &str = "image/svg+xml";

/// The shell every console URL answers with.
const PAGE: &str = include_str!("../ui/index.html");

/// One file of `server/ui/assets/`, embedded.
macro_rules! asset {
    ($name:literal, $content_type:expr) => {
        Asset {
            name: $name,
            content_type: $content_type,
            body: include_str!(concat!("../ui/assets/", $name)),
        }
    };
}

/// The files under `/ui/assets/`.
const ASSETS: &[Asset] = &[
    asset!("app.css", CSS),
    asset!("favicon.svg", SVG),
    asset!("main.js", JS),
    asset!("api.js", JS),
    asset!("dom.js", JS),
    asset!("format.js", JS),
    asset!("list.js", JS),
    asset!("execution.js", JS),
    asset!("timeline.js", JS),
    asset!("graph.js", JS),
    asset!("history.js", JS),
    asset!("actions.js", JS),
    asset!("definitions.js", JS),
    asset!("workers.js", JS),
];

/// The console's routes, to merge into the API router.
pub fn routes<S: Clone + Send + Sync + 'static>() -> Router<S> {
    Router::new()
        .route("/ui", get(page))
        .route("/ui/", get(page))
        .route("/ui/executions/{id}", get(page))
        .route("/ui/definitions", get(page))
        .route("/ui/definitions/{name}/{version}", get(page))
        .route("/ui/workers", get(page))
        .route("/ui/assets/{file}", get(file))
}

/// The page itself may only load its own scripts and styles and talk to its
/// own origin.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
    img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'self'; \
    frame-ancestors 'none'";

fn respond(content_type: &'static str, body: &'static str) -> Response {
    let headers = [
        (header::CONTENT_TYPE, HeaderValue::from_static(content_type)),
        (header::CACHE_CONTROL, HeaderValue::from_static("no-cache")),
        (
            header::CONTENT_SECURITY_POLICY,
            HeaderValue::from_static(CSP),
        ),
        (
            header::X_CONTENT_TYPE_OPTIONS,
            HeaderValue::from_static("nosniff"),
        ),
        (
            header::REFERRER_POLICY,
            HeaderValue::from_static("no-referrer"),
        ),
    ];
    (headers, body).into_response()
}

async fn page() -> Response {
    respond(HTML, PAGE)
}

async fn file(Path(name): Path<String>) -> Response {
    match ASSETS.iter().find(|a| a.name == name) {
        Some(a) => respond(a.content_type, a.body),
        None => (
            StatusCode::NOT_FOUND,
            [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
            format!("no console asset `{name}`\n"),
        )
            .into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::ASSETS;

    #[test]
    fn asset_names_are_unique() {
        let mut names: Vec<&str> = ASSETS.iter().map(|a| a.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), ASSETS.len());
    }
}
