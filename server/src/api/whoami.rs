//! `GET /v1/whoami`: who the presented token is and what it may do, so that
//! a client (the web console) can hide what the caller may not perform.
//! Without `--auth` everyone may do everything and `auth` is false.

use super::auth::Caller;
use axum::http::request::Parts;
use axum::Json;
use serde::Serialize;
use utoipa::ToSchema;

/// What the caller may do, by kind of route.
#[derive(Debug, Serialize, ToSchema)]
pub struct Permissions {
    /// Read definitions, executions, histories and worker sessions.
    pub read: bool,
    /// Start, signal and cancel executions.
    pub control: bool,
    /// Deploy definitions.
    pub deploy: bool,
}

/// Body of `GET /v1/whoami`.
#[derive(Debug, Serialize, ToSchema)]
pub struct Identity {
    /// Whether the server checks tokens (`--auth`).
    pub auth: bool,
    /// The token's name in the auth file (null without auth).
    pub name: Option<String>,
    /// `admin`, `client`, `reader` or `worker` (null without auth).
    pub role: Option<String>,
    /// What the caller may do.
    pub permissions: Permissions,
}

/// The caller's identity and permissions.
#[utoipa::path(get, path = "/v1/whoami", tag = "health",
    responses((status = 200, description = "the caller", body = Identity)))]
pub async fn whoami(parts: Parts) -> Json<Identity> {
    let identity = match parts.extensions.get::<Caller>() {
        Some(caller) => Identity {
            auth: true,
            name: Some(caller.name.clone()),
            role: Some(caller.role.as_str().to_owned()),
            permissions: Permissions {
                read: caller.role.may_read(),
                control: caller.role.may_control(),
                deploy: caller.role.may_deploy(),
            },
        },
        None => Identity {
            auth: false,
            name: None,
            role: None,
            permissions: Permissions {
                read: true,
                control: true,
                deploy: true,
            },
        },
    };
    Json(identity)
}
