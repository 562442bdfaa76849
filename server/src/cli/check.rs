//! `orbit check FILE... [--json]`: compiles the files together and prints
//! diagnostics (rustc style, on stderr) or, when they compile, one line per
//! workflow on stdout: `<name> <version> <definition_hash>` (children first).
//!
//! `--json` prints one object on stdout instead:
//! `{"ok": bool, "workflows": [{"name", "version", "definition_hash"}],
//! "tasks": [{"name", "version"}], "diagnostics": [Diagnostic...]}`
//! (`workflows` and `tasks` are empty unless `ok`). An unreadable file is
//! `{"error": {"code": "IO_ERROR", "message"}}`.
//!
//! `--server URL` also resolves child workflows that the files use but do
//! not declare, from the definitions registered on that server
//! (`GET /v1/definitions/{name}/{version}`); their registered hash is pinned.
//!
//! Exit codes: 0 clean, 1 diagnostics, 2 usage, I/O or connection error.

use orbit_core::diagnostic::render;
use orbit_core::syntax::ast::{Clause, Decl};
use orbit_core::{compile, ir, Compiled, Definition, Source};
use orbit_sdk::{Client, HttpRequest, Method};
use serde_json::json;
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::ExitCode;

/// `orbit check` options.
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// The `.orbit` files to compile together.
    #[arg(required = true, value_name = "FILE")]
    pub files: Vec<PathBuf>,
    /// Print the result as JSON on stdout.
    #[arg(long)]
    pub json: bool,
    /// Also resolve child workflows registered on this server.
    #[arg(long, value_name = "URL")]
    pub server: Option<String>,
    /// API token for `--server`, sent as `Authorization: Bearer <token>`.
    #[arg(long, env = "ORBIT_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
}

/// Runs `orbit check`.
pub fn run(args: Args) -> ExitCode {
    let mut sources = Vec::new();
    for path in &args.files {
        match std::fs::read_to_string(path) {
            Ok(text) => sources.push(Source {
                name: path.display().to_string(),
                text,
            }),
            Err(e) => {
                let message = format!("cannot read {}: {e}", path.display());
                if args.json {
                    out!(
                        "{}",
                        json!({"error": {"code": "IO_ERROR", "message": message}})
                    );
                }
                eprintln!("error: {message}");
                return ExitCode::from(2);
            }
        }
    }
    let registered = match &args.server {
        Some(server) => match fetch_children(server, args.token.clone(), &sources) {
            Ok(found) => found,
            Err(message) => {
                if args.json {
                    out!(
                        "{}",
                        json!({"error": {"code": "CONNECTION_ERROR", "message": message}})
                    );
                }
                eprintln!("error: {message}");
                return ExitCode::from(2);
            }
        },
        None => BTreeMap::new(),
    };
    let compiled = compile(&sources, &|name, version| {
        registered
            .get(&(name.to_string(), version.to_string()))
            .cloned()
    });
    if args.json {
        out!("{}", to_json(&compiled));
    } else if compiled.is_ok() {
        for d in &compiled.definitions {
            out!("{} {} {}", d.workflow.name, d.workflow.version, d.hash);
        }
    } else {
        let files: Vec<(&str, &str)> = sources
            .iter()
            .map(|s| (s.name.as_str(), s.text.as_str()))
            .collect();
        eprint!("{}", render(&compiled.diagnostics, &files));
        let n = compiled.diagnostics.len();
        eprintln!(
            "error: could not compile: {n} error{}",
            if n == 1 { "" } else { "s" }
        );
    }
    if compiled.is_ok() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

/// The `--json` document.
fn to_json(compiled: &Compiled) -> serde_json::Value {
    let ok = compiled.is_ok();
    let workflows: Vec<serde_json::Value> = if ok {
        compiled
            .definitions
            .iter()
            .map(|d| json!({"name": d.workflow.name, "version": d.workflow.version, "definition_hash": d.hash}))
            .collect()
    } else {
        Vec::new()
    };
    let tasks: Vec<serde_json::Value> = if ok {
        compiled
            .tasks
            .iter()
            .map(|t| json!({"name": t.name, "version": t.version}))
            .collect()
    } else {
        Vec::new()
    };
    json!({
        "ok": ok,
        "workflows": workflows,
        "tasks": tasks,
        "diagnostics": orbit_core::diagnostic::to_json(&compiled.diagnostics),
    })
}

/// The child workflows `sources` start but do not declare, as registered on
/// `server` (absent ones are left out: the compiler reports them, E0103).
fn fetch_children(
    server: &str,
    token: Option<String>,
    sources: &[Source],
) -> Result<BTreeMap<(String, String), Definition>, String> {
    let mut declared = BTreeSet::new();
    let mut wanted = BTreeSet::new();
    for source in sources {
        let (tree, _) = orbit_core::syntax::parse(&source.name, &source.text);
        for decl in &tree.decls {
            let Decl::Workflow(w) = decl else { continue };
            if let Some(v) = &w.version {
                declared.insert((w.name.name.clone(), v.value.clone()));
            }
            for step in &w.steps {
                for clause in &step.clauses {
                    if let Clause::Workflow { name, version, .. } = clause {
                        wanted.insert((name.name.clone(), version.value.clone()));
                    }
                }
            }
        }
    }
    let missing: Vec<(String, String)> = wanted.difference(&declared).cloned().collect();
    let mut found = BTreeMap::new();
    if missing.is_empty() {
        return Ok(found);
    }
    let client = Client::connect(server).map_err(|e| format!("cannot use server {server}: {e}"))?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the async runtime: {e}"))?;
    for (name, version) in missing {
        let mut request = HttpRequest::new(
            Method::Get,
            format!("/v1/definitions/{}/{}", encode(&name), encode(&version)),
        );
        if let Some(token) = &token {
            request
                .headers
                .push(("authorization".into(), format!("Bearer {token}")));
        }
        let response = runtime
            .block_on(client.transport().send(request))
            .map_err(|e| format!("cannot reach {server}: {e}"))?;
        match response.status {
            200 => {
                let body: serde_json::Value =
                    serde_json::from_slice(&response.body).map_err(|e| {
                        format!("{server} sent an unreadable definition of {name} {version}: {e}")
                    })?;
                let workflow: ir::Workflow = serde_json::from_value(body["definition"].clone())
                    .map_err(|e| {
                        format!("{server} sent an unreadable definition of {name} {version}: {e}")
                    })?;
                let hash = body["definition_hash"]
                    .as_str()
                    .map(str::to_string)
                    .unwrap_or_else(|| orbit_core::definition_hash(&workflow));
                found.insert(
                    (name, version),
                    Definition {
                        workflow,
                        hash,
                        file: String::new(),
                    },
                );
            }
            404 => {}
            status => {
                let body: serde_json::Value =
                    serde_json::from_slice(&response.body).unwrap_or_default();
                let message = body["error"]["message"].as_str().unwrap_or("no message");
                return Err(format!(
                    "{server} answered {status} for workflow {name} version {version}: {message}"
                ));
            }
        }
    }
    Ok(found)
}

/// Percent-encodes a path segment (everything but unreserved characters).
fn encode(segment: &str) -> String {
    let mut out = String::new();
    for b in segment.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}
