//! The OpenAPI document, the API's contract: generated from the handlers'
//! annotations and the wire types of `orbit_sdk::wire` with utoipa, then
//! completed by [`Contract`] with what every route shares (the error
//! answers, the path parameters' limits, `Idempotency-Key`, bearer auth),
//! and served at `/v1/openapi.json`. Schemathesis checks the server
//! against it in CI (`.ci/schemathesis.sh`).

use super::{cluster, definitions, executions, health, history, whoami, workers};
use orbit_sdk::wire;
use utoipa::openapi::header::HeaderBuilder;
use utoipa::openapi::path::{Operation, ParameterBuilder, ParameterIn};
use utoipa::openapi::request_body::RequestBody;
use utoipa::openapi::response::ResponseBuilder;
use utoipa::openapi::schema::{ObjectBuilder, SchemaType, Type};
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityRequirement, SecurityScheme};
use utoipa::openapi::{Content, OpenApi as Document, Ref, RefOr, Required};
use utoipa::{Modify, OpenApi};

/// The name of the bearer security scheme.
pub const BEARER: &str = "bearer";

/// ORBIT's HTTP API.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "ORBIT",
        description = "Durable workflow runtime: definitions, executions and the worker protocol. \
            Every error answers `{\"error\": {\"code\", \"message\", ...}}` (schema `ErrorBody`); \
            programs branch on `code`."
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
        cluster::status,
    ),
    components(schemas(
        wire::ErrorBody,
        wire::ErrorDetail,
        wire::Task,
        wire::Status,
        wire::ClusterStatus,
        wire::ClusterNode,
        whoami::Identity,
        whoami::Permissions
    )),
    tags(
        (name = "definitions", description = "Compile and register `.orbit` sources."),
        (name = "executions", description = "Start, read and control executions."),
        (name = "workers", description = "The worker protocol: sessions, long polls, heartbeats, results."),
        (name = "health", description = "Liveness, readiness and metrics."),
    ),
    modifiers(&Contract)
)]
pub struct ApiDoc;

/// Completes the generated document with what every route shares.
#[derive(Debug, Clone, Copy)]
pub struct Contract;

/// The routes that create something and honour `Idempotency-Key`.
const CREATING: [&str; 4] = [
    "/v1/definitions",
    "/v1/executions",
    "/v1/executions/{id}/signals/{name}",
    "/v1/executions/{id}/cancel",
];

/// Routes answered without a token even under `--auth`.
const OPEN: [&str; 2] = ["/healthz", "/readyz"];

fn error_response(description: &str) -> RefOr<utoipa::openapi::Response> {
    ResponseBuilder::new()
        .description(description)
        .content(
            "application/json",
            Content::new(Some(RefOr::Ref(Ref::from_schema_name("ErrorBody")))),
        )
        .into()
}

/// Adds `status` to `op` unless it is listed; when it is, appends `also`
/// to its description.
fn add_error(op: &mut Operation, status: &str, description: &str, also: Option<&str>) {
    match op.responses.responses.get_mut(status) {
        Some(RefOr::T(existing)) => {
            if let Some(also) = also {
                existing.description = format!("{}; {also}", existing.description);
            }
        }
        Some(RefOr::Ref(_)) => {}
        None => {
            op.responses
                .responses
                .insert(status.to_owned(), error_response(description));
        }
    }
}

fn text_schema(max: usize, pattern: &str) -> ObjectBuilder {
    ObjectBuilder::new()
        .schema_type(SchemaType::new(Type::String))
        .min_length(Some(1))
        .max_length(Some(max))
        .pattern(Some(pattern))
}

fn complete(path: &str, op: &mut Operation) {
    let health = path.starts_with("/healthz") || path == "/readyz" || path == "/metrics";
    let has_body = op.request_body.is_some();
    // Path parameters: what `extract::Path` accepts.
    for p in op.parameters.iter_mut().flatten() {
        if p.parameter_in == ParameterIn::Path {
            p.schema = Some(text_schema(wire::PATH_PARAM_MAX, wire::TEXT_PATTERN).into());
        }
    }
    // An optional body may be left out entirely.
    if let Some(RequestBody {
        description: Some(d),
        required,
        ..
    }) = op.request_body.as_mut()
    {
        if d == "optional" {
            *d = "Optional: an empty body reads as `{}`.".to_owned();
            *required = Some(Required::False);
        }
    }
    if CREATING.contains(&path) && op.request_body.is_some() {
        let key = ParameterBuilder::new()
            .name("Idempotency-Key")
            .parameter_in(ParameterIn::Header)
            .required(Required::False)
            .description(Some(
                "Makes the request safe to retry: the first complete 2xx answer is stored \
                 against the key (scoped to the caller, the method and the path) for the \
                 server's --idempotency-ttl and replayed for the same key and body.",
            ))
            .schema(Some(text_schema(255, wire::IDEMPOTENCY_KEY_PATTERN)))
            .build();
        op.parameters.get_or_insert_with(Vec::new).push(key);
        let replayed = HeaderBuilder::new()
            .schema(
                ObjectBuilder::new()
                    .schema_type(SchemaType::new(Type::String))
                    .enum_values(Some(["true"])),
            )
            .description(Some(
                "`true` when this is the stored answer to an earlier request with the same \
                 Idempotency-Key.",
            ))
            .build();
        for (status, response) in op.responses.responses.iter_mut() {
            if let (true, RefOr::T(r)) = (status.starts_with('2'), response) {
                r.headers
                    .insert("Idempotent-Replayed".to_owned(), replayed.clone());
            }
        }
        add_error(
            op,
            "400",
            "a malformed request (`INVALID_JSON`, `INVALID_REQUEST`, `INVALID_BODY`) or \
             `INVALID_IDEMPOTENCY_KEY`",
            Some("`INVALID_IDEMPOTENCY_KEY`"),
        );
        add_error(
            op,
            "409",
            "`IDEMPOTENCY_KEY_REUSED` (same key, other body) or `IDEMPOTENCY_KEY_IN_FLIGHT`",
            Some("`IDEMPOTENCY_KEY_REUSED` (same key, other body) or `IDEMPOTENCY_KEY_IN_FLIGHT`"),
        );
    }
    if !health {
        add_error(
            op,
            "400",
            "a malformed request: `INVALID_JSON`, `INVALID_REQUEST` (wrong shape, unknown \
             field, bad parameter) or `INVALID_BODY`",
            None,
        );
        add_error(
            op,
            "503",
            "nothing was changed; retry later: `STORAGE_ERROR`, `SHUTTING_DOWN`, \
             `IDEMPOTENCY_UNAVAILABLE`, or `NOT_LEADER` from a `--cluster` standby (its \
             `error.leader` is the leader's advertised URL, or `null` during a takeover: \
             send the request there)",
            None,
        );
    }
    if !OPEN.contains(&path) {
        add_error(
            op,
            "401",
            "`UNAUTHENTICATED`: under `--auth`, no bearer token or an unknown one",
            None,
        );
        add_error(
            op,
            "403",
            "`FORBIDDEN`: the token's role does not allow this",
            None,
        );
    }
    if has_body {
        add_error(
            op,
            "413",
            "`BODY_TOO_LARGE`: the body is over the server's --max-body",
            None,
        );
    }
}

impl Modify for Contract {
    fn modify(&self, doc: &mut Document) {
        let components = doc.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            BEARER,
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some(
                        "An API token from the server's --auth file, as \
                         `Authorization: Bearer <token>`.",
                    ))
                    .build(),
            ),
        );
        for (path, item) in doc.paths.paths.iter_mut() {
            for op in [
                item.get.as_mut(),
                item.post.as_mut(),
                item.delete.as_mut(),
                item.put.as_mut(),
                item.patch.as_mut(),
            ]
            .into_iter()
            .flatten()
            {
                complete(path, op);
            }
        }
    }
}

/// The document as this server serves it. With `auth`, every route but
/// `/healthz` and `/readyz` requires the bearer token; without, a token is
/// accepted and not required (the loopback quick start).
pub fn document(auth: bool) -> Document {
    let mut doc = ApiDoc::openapi();
    let bearer = SecurityRequirement::new(BEARER, Vec::<String>::new());
    doc.security = Some(if auth {
        vec![bearer]
    } else {
        vec![SecurityRequirement::default(), bearer]
    });
    for (path, item) in doc.paths.paths.iter_mut() {
        if OPEN.contains(&path.as_str()) {
            if let Some(op) = item.get.as_mut() {
                op.security = Some(vec![SecurityRequirement::default()]);
            }
        }
    }
    doc
}

/// The handler of `GET /v1/openapi.json`: the document, serialized once.
pub fn serve(
    auth: bool,
) -> impl Fn() -> std::future::Ready<axum::response::Response> + Clone + Send + Sync + 'static {
    use axum::response::IntoResponse;
    let body = axum::body::Bytes::from(serde_json::to_vec(&document(auth)).unwrap_or_default());
    move || {
        std::future::ready(
            (
                [(axum::http::header::CONTENT_TYPE, "application/json")],
                body.clone(),
            )
                .into_response(),
        )
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn every_operation_lists_its_errors_with_the_error_schema() {
        let doc = serde_json::to_value(document(true)).unwrap();
        let paths = doc["paths"].as_object().unwrap();
        assert!(paths.len() >= 17, "{}", paths.len());
        for (path, item) in paths {
            for (method, op) in item.as_object().unwrap() {
                let responses = op["responses"].as_object().unwrap();
                for (status, r) in responses {
                    if status.starts_with('2') {
                        assert!(r.get("content").is_some(), "{method} {path} {status}");
                    } else {
                        assert_eq!(
                            r["content"]["application/json"]["schema"]["$ref"],
                            "#/components/schemas/ErrorBody",
                            "{method} {path} {status}"
                        );
                    }
                }
                if !OPEN.contains(&path.as_str()) {
                    assert!(responses.contains_key("401"), "{method} {path}");
                }
            }
        }
        for path in CREATING {
            let op = &doc["paths"][path]["post"];
            let params = op["parameters"].as_array().unwrap();
            assert!(
                params.iter().any(|p| p["name"] == "Idempotency-Key"),
                "{path}"
            );
        }
        assert_eq!(
            doc["components"]["securitySchemes"][BEARER]["scheme"],
            "bearer"
        );
    }
}
