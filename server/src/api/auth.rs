//! Authentication and permissions (`--auth FILE`, `api.md`): named API tokens
//! with a role — `admin` (everything), `client` (start, signal, cancel, read),
//! `reader` (read only: the console's look-but-don't-touch role) or `worker`
//! (register for patterns inside its `task_patterns`, poll and
//! heartbeat its own sessions, report results for tasks it may receive) —
//! stored as SHA-256 hex in a TOML file and compared in constant time.
//! Requests carry `Authorization: Bearer <token>`; a missing or unknown token
//! is `401 UNAUTHENTICATED`, a known token outside its role `403 FORBIDDEN`.
//! `/healthz`, `/readyz`, `/v1/openapi.json` and the console's pages and
//! assets (`GET /ui…`, which hold no data: the console calls the API with the
//! operator's token) are open; `/metrics` and `/v1/whoami` need any valid
//! token.

use super::error::ApiError;
use super::idempotency::read_body;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::collections::{BTreeSet, HashMap};
use std::path::Path;
use std::sync::{Arc, Mutex};
use subtle::ConstantTimeEq;

/// What a token may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Everything, deploys included.
    Admin,
    /// Start, signal, cancel and read.
    Client,
    /// Read only: definitions, executions, histories, worker sessions.
    Reader,
    /// The worker protocol, within its task patterns.
    Worker,
}

impl Role {
    /// The role's name as the auth file spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Admin => "admin",
            Role::Client => "client",
            Role::Reader => "reader",
            Role::Worker => "worker",
        }
    }

    /// Whether the role may read definitions, executions and sessions.
    pub fn may_read(self) -> bool {
        matches!(self, Role::Admin | Role::Client | Role::Reader)
    }

    /// Whether the role may start, signal and cancel executions.
    pub fn may_control(self) -> bool {
        matches!(self, Role::Admin | Role::Client)
    }

    /// Whether the role may deploy definitions.
    pub fn may_deploy(self) -> bool {
        self == Role::Admin
    }
}

/// The authenticated caller of a request (in the request's extensions).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    /// The token's name from the auth file (scopes idempotency keys).
    pub name: String,
    /// Its role.
    pub role: Role,
    /// For workers: the task patterns it is granted.
    pub task_patterns: Vec<String>,
}

/// Why an auth file was refused.
#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    /// The file could not be read.
    #[error("cannot read auth file {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// The cause.
        source: std::io::Error,
    },
    /// The file is not valid TOML of the expected shape.
    #[error("auth file: {0}")]
    Parse(String),
    /// An entry is not usable.
    #[error("auth file: {0}")]
    Invalid(String),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    tokens: Vec<Entry>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Entry {
    name: String,
    role: Role,
    sha256: String,
    #[serde(default)]
    task_patterns: Vec<String>,
}

/// The tokens of an auth file.
#[derive(Debug, Clone)]
pub struct AuthConfig {
    tokens: Vec<(Arc<Caller>, [u8; 32])>,
}

/// SHA-256 hex of a token, as the auth file stores it.
pub fn hash_token(token: &str) -> String {
    hex::encode(Sha256::digest(token.as_bytes()))
}

/// Whether `p` is a task pattern: an exact task name, `prefix.*` or `*`.
pub(crate) fn valid_pattern(p: &str) -> bool {
    if p == "*" {
        return true;
    }
    let name = p.strip_suffix(".*").unwrap_or(p);
    !name.is_empty()
        && name.len() <= 255
        && !name.contains('*')
        && !name.chars().any(|c| c.is_control() || c.is_whitespace())
}

impl AuthConfig {
    /// Reads and checks an auth file.
    pub fn load(path: &Path) -> Result<AuthConfig, AuthError> {
        let text = std::fs::read_to_string(path).map_err(|source| AuthError::Read {
            path: path.display().to_string(),
            source,
        })?;
        AuthConfig::parse(&text)
    }

    /// Parses and checks the TOML text of an auth file.
    pub fn parse(text: &str) -> Result<AuthConfig, AuthError> {
        let file: File = toml::from_str(text).map_err(|e| AuthError::Parse(e.to_string()))?;
        if file.tokens.is_empty() {
            return Err(AuthError::Invalid("no [[tokens]] entries".into()));
        }
        let mut names = BTreeSet::new();
        let mut tokens: Vec<(Arc<Caller>, [u8; 32])> = Vec::new();
        for e in file.tokens {
            if e.name.is_empty()
                || e.name.len() > 128
                || e.name.chars().any(|c| c.is_control() || c.is_whitespace())
            {
                return Err(AuthError::Invalid(format!(
                    "token name `{}` must be 1 to 128 characters without spaces or control characters",
                    e.name
                )));
            }
            if !names.insert(e.name.clone()) {
                return Err(AuthError::Invalid(format!(
                    "token name `{}` appears twice",
                    e.name
                )));
            }
            let mut hash = [0u8; 32];
            hex::decode_to_slice(e.sha256.trim().to_ascii_lowercase(), &mut hash).map_err(
                |_| {
                    AuthError::Invalid(format!(
                        "token `{}`: sha256 must be 64 hex digits (printf %s TOKEN | sha256sum)",
                        e.name
                    ))
                },
            )?;
            if let Some((other, _)) = tokens.iter().find(|(_, h)| *h == hash) {
                return Err(AuthError::Invalid(format!(
                    "tokens `{}` and `{}` have the same sha256: one token would hold two roles",
                    other.name, e.name
                )));
            }
            match e.role {
                Role::Worker if e.task_patterns.is_empty() => {
                    return Err(AuthError::Invalid(format!(
                        "worker token `{}` needs task_patterns",
                        e.name
                    )))
                }
                Role::Admin | Role::Client | Role::Reader if !e.task_patterns.is_empty() => {
                    return Err(AuthError::Invalid(format!(
                        "token `{}`: task_patterns apply to worker tokens only",
                        e.name
                    )))
                }
                _ => {}
            }
            if let Some(p) = e.task_patterns.iter().find(|p| !valid_pattern(p)) {
                return Err(AuthError::Invalid(format!(
                    "token `{}`: `{p}` is not a task pattern (an exact name, `prefix.*` or `*`)",
                    e.name
                )));
            }
            tokens.push((
                Arc::new(Caller {
                    name: e.name,
                    role: e.role,
                    task_patterns: e.task_patterns,
                }),
                hash,
            ));
        }
        Ok(AuthConfig { tokens })
    }

    /// The caller presenting `token`, comparing its hash with every stored
    /// hash in constant time.
    pub fn authenticate(&self, token: &str) -> Option<Arc<Caller>> {
        let presented = Sha256::digest(token.as_bytes());
        let mut found = None;
        for (caller, hash) in &self.tokens {
            let same: bool = presented.as_slice().ct_eq(hash.as_slice()).into();
            if same && found.is_none() {
                found = Some(caller.clone());
            }
        }
        found
    }
}

/// Whether a task named `task` matches `pattern` (an exact name, `prefix.*`
/// or `*`), as the engine matches sessions.
pub fn task_within(task: &str, pattern: &str) -> bool {
    if pattern == "*" {
        return true;
    }
    match pattern.strip_suffix(".*") {
        Some(prefix) => task
            .strip_prefix(prefix)
            .is_some_and(|rest| rest.starts_with('.') && rest.len() > 1),
        None => pattern == task,
    }
}

/// Whether every task `requested` can match also matches `grant`.
pub fn pattern_within(requested: &str, grant: &str) -> bool {
    if grant == "*" {
        return true;
    }
    if requested == "*" {
        return false;
    }
    match requested.strip_suffix(".*") {
        // `a.b.*` lies inside `a.*` (and `a.b.*`), not inside an exact name.
        Some(prefix) => {
            grant == requested
                || grant
                    .strip_suffix(".*")
                    .is_some_and(|g| prefix.strip_prefix(g).is_some_and(|r| r.starts_with('.')))
        }
        None => task_within(requested, grant),
    }
}

/// What a route needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Access {
    /// No token.
    Open,
    /// Any valid token.
    Any,
    /// Reads (reader, client, admin).
    Read,
    /// Start, signal, cancel (client, admin).
    Control,
    /// Deploy definitions (admin).
    Deploy,
    /// Register a worker session (worker within its grant, admin).
    Register,
    /// Poll, heartbeat or end a session (its owner, admin).
    Session(String),
    /// Report a result by token (a worker that may receive the task, admin).
    Result(String),
}

/// Classifies `method path`.
pub fn access(method: &Method, path: &str) -> Access {
    let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let get = method == Method::GET;
    let post = method == Method::POST;
    match parts.as_slice() {
        ["healthz"] | ["readyz"] | ["v1", "openapi.json"] if get => Access::Open,
        ["ui", ..] if get => Access::Open,
        ["v1", "workers"] if get => Access::Read,
        ["v1", "cluster"] if get => Access::Read,
        ["v1", "definitions"] if post => Access::Deploy,
        ["v1", "definitions", ..] if get => Access::Read,
        ["v1", "executions"] if post => Access::Control,
        ["v1", "executions", _, "signals", _] | ["v1", "executions", _, "cancel"] if post => {
            Access::Control
        }
        ["v1", "executions", _, "wait"] if post => Access::Read,
        ["v1", "executions", ..] if get => Access::Read,
        ["v1", "workers"] if post => Access::Register,
        ["v1", "workers", s, "poll" | "heartbeat"] if post => Access::Session((*s).to_owned()),
        ["v1", "workers", s] if method == Method::DELETE => Access::Session((*s).to_owned()),
        ["v1", "tasks", t, "result"] if post => Access::Result((*t).to_owned()),
        _ => Access::Any,
    }
}

/// The auth middleware's state: the tokens and which token opened each
/// worker session. (Whether a worker token may report a delivery's result is
/// checked by the engine, which knows each token's task across restarts.)
#[derive(Debug, Clone)]
pub struct Auth {
    config: Arc<AuthConfig>,
    sessions: Arc<Mutex<HashMap<String, String>>>,
    max_body: usize,
}

impl Auth {
    /// State over `config`; bodies read for checks are capped at `max_body`.
    pub fn new(config: Arc<AuthConfig>, max_body: usize) -> Auth {
        Auth {
            config,
            sessions: Arc::default(),
            max_body,
        }
    }
}

fn forbidden(message: impl Into<String>) -> Response {
    ApiError::new(StatusCode::FORBIDDEN, "FORBIDDEN", message).into_response()
}

fn unauthenticated(message: &str) -> Response {
    let mut r = ApiError::new(StatusCode::UNAUTHORIZED, "UNAUTHENTICATED", message).into_response();
    r.headers_mut()
        .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    r
}

fn bearer(request: &Request) -> Option<&str> {
    let value = request
        .headers()
        .get(header::AUTHORIZATION)?
        .to_str()
        .ok()?;
    let (scheme, token) = value.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim())
        .filter(|t| !t.is_empty())
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The middleware: see the module documentation.
pub async fn middleware(State(auth): State<Auth>, mut request: Request, next: Next) -> Response {
    let route = access(request.method(), request.uri().path());
    if route == Access::Open {
        return next.run(request).await;
    }
    let Some(token) = bearer(&request) else {
        return unauthenticated("this server needs `Authorization: Bearer <token>`");
    };
    let Some(caller) = auth.config.authenticate(token) else {
        return unauthenticated("unknown token");
    };
    request.extensions_mut().insert((*caller).clone());
    let role = caller.role;
    match (&route, role) {
        (_, Role::Admin) | (Access::Any, _) => {}
        (Access::Read | Access::Control, Role::Client) => {}
        (Access::Read, Role::Reader) => {}
        (Access::Register, Role::Worker) => {
            let (parts, body) = request.into_parts();
            let bytes = match read_body(body, auth.max_body).await {
                Ok(b) => b,
                Err(e) => return e.into_response(),
            };
            let asked: Vec<String> = serde_json::from_slice::<Value>(&bytes)
                .ok()
                .and_then(|v| v.get("task_patterns").cloned())
                .and_then(|v| serde_json::from_value(v).ok())
                .unwrap_or_default();
            if let Some(p) = asked
                .iter()
                .find(|p| !caller.task_patterns.iter().any(|g| pattern_within(p, g)))
            {
                return forbidden(format!(
                    "token `{}` may not register for task pattern `{p}`",
                    caller.name
                ));
            }
            request = Request::from_parts(parts, Body::from(bytes));
        }
        (Access::Session(s), Role::Worker) => {
            let owner = lock(&auth.sessions).get(s).cloned();
            if owner.is_some_and(|o| o != caller.name) {
                return forbidden(format!("session `{s}` was opened with another token"));
            }
        }
        (Access::Result(_), Role::Worker) => {}
        _ => {
            return forbidden(format!(
                "a {} token may not use {} {}",
                role.as_str(),
                request.method(),
                request.uri().path()
            ))
        }
    }
    let is_delete = request.method() == Method::DELETE;
    let response = next.run(request).await;
    if !response.status().is_success() {
        return response;
    }
    match route {
        Access::Register => remember(&auth, &caller.name, response).await,
        Access::Session(s) if is_delete => {
            lock(&auth.sessions).remove(&s);
            response
        }
        _ => response,
    }
}

/// Notes the session a registration opened.
async fn remember(auth: &Auth, caller: &str, response: Response) -> Response {
    let (parts, body) = response.into_parts();
    let Ok(bytes) = read_body(body, usize::MAX).await else {
        return (StatusCode::INTERNAL_SERVER_ERROR, "").into_response();
    };
    if let Ok(v) = serde_json::from_slice::<Value>(&bytes) {
        if let Some(session) = v.get("session_id").and_then(Value::as_str) {
            lock(&auth.sessions).insert(session.to_owned(), caller.to_owned());
        }
    }
    Response::from_parts(parts, Body::from(bytes))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn patterns() {
        assert!(pattern_within("payments.charge", "payments.*"));
        assert!(pattern_within("payments.*", "payments.*"));
        assert!(pattern_within("payments.eu.*", "payments.*"));
        assert!(!pattern_within("payments.*", "payments.charge"));
        assert!(!pattern_within("*", "payments.*"));
        assert!(!pattern_within("paymentsx.*", "payments.*"));
        assert!(!pattern_within("email.send", "payments.*"));
        assert!(pattern_within("*", "*"));
        assert!(task_within("payments.charge", "payments.*"));
        assert!(!task_within("payments", "payments.*"));
    }

    #[test]
    fn tokens_hashed_and_checked() {
        let text = format!(
            "[[tokens]]\nname = \"ops\"\nrole = \"admin\"\nsha256 = \"{}\"\n\n\
             [[tokens]]\nname = \"pay\"\nrole = \"worker\"\nsha256 = \"{}\"\ntask_patterns = [\"payments.*\"]\n",
            hash_token("s3cret"),
            hash_token("w0rker")
        );
        let cfg = AuthConfig::parse(&text).unwrap();
        assert_eq!(cfg.authenticate("s3cret").unwrap().role, Role::Admin);
        assert_eq!(cfg.authenticate("w0rker").unwrap().name, "pay");
        assert!(cfg.authenticate("nope").is_none());
        assert!(
            AuthConfig::parse("[[tokens]]\nname=\"w\"\nrole=\"worker\"\nsha256=\"00\"\n").is_err()
        );
        assert!(AuthConfig::parse("").is_err());
        let twice = format!(
            "[[tokens]]\nname = \"ops\"\nrole = \"admin\"\nsha256 = \"{0}\"\n\n\
             [[tokens]]\nname = \"view\"\nrole = \"reader\"\nsha256 = \"{0}\"\n",
            hash_token("s3cret")
        );
        let err = AuthConfig::parse(&twice).err().unwrap().to_string();
        assert!(
            err.contains("`ops` and `view` have the same sha256"),
            "{err}"
        );
        assert!(
            AuthConfig::parse("[[tokens]]\nname=\"x\"\nrole=\"root\"\nsha256=\"00\"\n").is_err()
        );
    }

    #[test]
    fn routes() {
        assert_eq!(access(&Method::GET, "/healthz"), Access::Open);
        assert_eq!(access(&Method::GET, "/metrics"), Access::Any);
        assert_eq!(access(&Method::GET, "/v1/whoami"), Access::Any);
        assert_eq!(access(&Method::GET, "/ui"), Access::Open);
        assert_eq!(access(&Method::GET, "/ui/assets/app.js"), Access::Open);
        assert_eq!(access(&Method::POST, "/ui"), Access::Any);
        assert_eq!(access(&Method::GET, "/v1/workers"), Access::Read);
        assert_eq!(access(&Method::POST, "/v1/definitions"), Access::Deploy);
        assert_eq!(access(&Method::POST, "/v1/executions/x/wait"), Access::Read);
        assert_eq!(
            access(&Method::DELETE, "/v1/workers/s1"),
            Access::Session("s1".into())
        );
        assert_eq!(
            access(&Method::POST, "/v1/tasks/t1/result"),
            Access::Result("t1".into())
        );
    }
}
