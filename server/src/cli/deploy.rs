//! `orbit deploy FILE...`: registers `.orbit` files with the server in one
//! request (the server registers children before their parents).

use std::path::PathBuf;
use std::process::ExitCode;

use orbit_core::diagnostic::{render, Diagnostic};

use super::common::{execute, print_json, ClientArgs, Failure, Outcome, EXIT_OK};
use orbit_sdk::{Error, SourceFile};

/// `orbit deploy` options.
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// The `.orbit` files to register.
    #[arg(required = true, value_name = "FILE")]
    pub files: Vec<PathBuf>,
    /// The `Idempotency-Key` to send (a UUIDv4 is generated otherwise).
    #[arg(long)]
    pub idempotency_key: Option<String>,
    /// Server, token and output options.
    #[command(flatten)]
    pub client: ClientArgs,
}

/// Runs `orbit deploy`.
pub fn run(args: Args) -> ExitCode {
    execute(&args.client, deploy(&args))
}

async fn deploy(args: &Args) -> Outcome {
    let mut files = Vec::new();
    for path in &args.files {
        let source = std::fs::read_to_string(path).map_err(|e| {
            Failure::usage("IO_ERROR", format!("cannot read {}: {e}", path.display()))
        })?;
        files.push(SourceFile {
            filename: path.display().to_string(),
            source,
        });
    }
    let client = args.client.client()?;
    let deployed = match client
        .deploy_with_key(&files, args.idempotency_key.clone())
        .await
    {
        Ok(d) => d,
        Err(e) => {
            if !args.client.json {
                print_diagnostics(&e, &files);
            }
            return Err(e.into());
        }
    };
    if args.client.json {
        print_json(&deployed)?;
    } else {
        let state = |created: bool| if created { "registered" } else { "unchanged" };
        for w in &deployed.workflows {
            out!(
                "workflow {} {} {} {}",
                w.name,
                w.version,
                w.definition_hash,
                state(w.created)
            );
        }
        for t in &deployed.tasks {
            out!("task {} {} {}", t.name, t.version, state(t.created));
        }
    }
    Ok(EXIT_OK)
}

/// Renders the diagnostics of a `422 COMPILE_ERROR` (or of a `409
/// CHILD_NOT_REGISTERED`, which carries its E0103) against the local files.
fn print_diagnostics(error: &Error, files: &[SourceFile]) {
    let Error::Api { details, .. } = error else {
        return;
    };
    let Some(list) = details.get("diagnostics") else {
        return;
    };
    let Ok(diagnostics) = serde_json::from_value::<Vec<Diagnostic>>(list.clone()) else {
        return;
    };
    let sources: Vec<(&str, &str)> = files
        .iter()
        .map(|f| (f.filename.as_str(), f.source.as_str()))
        .collect();
    eprint!("{}", render(&diagnostics, &sources));
}
