//! `orbit explain CODE`: prints the long explanation of a diagnostic code
//! (the book's `docs/src/errors/<CODE>.md`, compiled into the binary), or
//! with `--json` an object `{"code", "title", "explanation"}`.

use orbit_core::diagnostic::codes::lookup;
use orbit_core::diagnostic::explain::explanation;
use serde_json::json;
use std::process::ExitCode;

/// `orbit explain` options.
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// A diagnostic code, e.g. `E0400` (case-insensitive).
    #[arg(value_name = "CODE")]
    pub code: String,
    /// Print `{"code", "title", "explanation"}` as JSON instead of text (an
    /// unknown code: `{"error": {"code": "UNKNOWN_CODE", "message"}}`).
    #[arg(long)]
    pub json: bool,
}

/// Runs `orbit explain`: exit 0 with the explanation on stdout, or exit 2
/// with a message on stderr for a code that does not exist.
pub fn run(args: Args) -> ExitCode {
    let code = args.code.trim();
    match (explanation(code), lookup(code)) {
        (Some(text), registered) if args.json => {
            let body = json!({
                "code": registered.map_or(code, |c| c.code),
                "title": registered.map(|c| c.title),
                "explanation": text,
            });
            out!("{body}");
            ExitCode::SUCCESS
        }
        (Some(text), _) => {
            out_raw!("{text}");
            if !text.ends_with('\n') {
                out!();
            }
            ExitCode::SUCCESS
        }
        (None, _) => {
            let message = format!("`{code}` is not a diagnostic code");
            if args.json {
                out!(
                    "{}",
                    json!({"error": {"code": "UNKNOWN_CODE", "message": message}})
                );
            }
            eprintln!(
                "error: {message}\n  codes look like `E0400`; `orbit check` prints them in brackets: error[E0400]"
            );
            ExitCode::from(2)
        }
    }
}
