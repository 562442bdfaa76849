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
//! Exit codes: 0 clean, 1 diagnostics, 2 usage or I/O error.

use orbit_core::diagnostic::render;
use orbit_core::{compile, Compiled, Source};
use serde_json::json;
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
                    println!(
                        "{}",
                        json!({"error": {"code": "IO_ERROR", "message": message}})
                    );
                }
                eprintln!("error: {message}");
                return ExitCode::from(2);
            }
        }
    }
    let compiled = compile(&sources, &|_, _| None);
    if args.json {
        println!("{}", to_json(&compiled));
    } else if compiled.is_ok() {
        for d in &compiled.definitions {
            println!("{} {} {}", d.workflow.name, d.workflow.version, d.hash);
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
