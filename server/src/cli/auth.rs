//! `orbit auth hash-token [TOKEN]`: prints the SHA-256 form of an API token,
//! the line that goes into `--auth FILE` as `sha256 = "…"`. The token comes
//! from the argument or, when none is given, from the first line of stdin
//! (so it stays out of the shell history); `--generate` makes a fresh random
//! token and prints it with its hash. `--json` prints `{"sha256"}` (with
//! `--generate`, `{"token", "sha256"}`) instead.

use crate::api::auth::hash_token;
use serde_json::json;
use std::io::BufRead;
use std::process::ExitCode;

/// `orbit auth` options.
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// What to do.
    #[command(subcommand)]
    pub command: Sub,
}

/// The subcommands of `orbit auth`.
#[derive(Debug, Clone, clap::Subcommand)]
pub enum Sub {
    /// Print the SHA-256 form of a token for the auth file (64 hex digits).
    HashToken(HashArgs),
}

/// `orbit auth hash-token` options.
#[derive(Debug, Clone, clap::Args)]
pub struct HashArgs {
    /// The token; read from the first line of stdin when absent.
    #[arg(value_name = "TOKEN", conflicts_with = "generate")]
    pub token: Option<String>,
    /// Make a new random token (256 bits, hex) and print `token = …` and
    /// `sha256 = …`.
    #[arg(long)]
    pub generate: bool,
    /// Print JSON on stdout instead of text: `{"sha256"}`, or `{"token",
    /// "sha256"}` with `--generate`.
    #[arg(long)]
    pub json: bool,
}

/// Runs `orbit auth`.
pub fn run(args: Args) -> ExitCode {
    match args.command {
        Sub::HashToken(a) => hash(a),
    }
}

fn hash(args: HashArgs) -> ExitCode {
    if args.generate {
        let token = format!(
            "{}{}",
            uuid::Uuid::new_v4().simple(),
            uuid::Uuid::new_v4().simple()
        );
        let sha256 = hash_token(&token);
        if args.json {
            out!("{}", json!({"token": token, "sha256": sha256}));
        } else {
            out!("token = \"{token}\"");
            out!("sha256 = \"{sha256}\"");
        }
        return ExitCode::SUCCESS;
    }
    let token = match args.token {
        Some(t) => t,
        None => {
            let mut line = String::new();
            if let Err(e) = std::io::stdin().lock().read_line(&mut line) {
                eprintln!("error: cannot read the token from stdin: {e}");
                return ExitCode::from(2);
            }
            line.trim_end_matches(['\r', '\n']).to_owned()
        }
    };
    if token.is_empty() {
        let message = "the token is empty (pass it as an argument or on stdin)";
        if args.json {
            out!(
                "{}",
                json!({"error": {"code": "INVALID_ARGUMENT", "message": message}})
            );
        }
        eprintln!("error: {message}");
        return ExitCode::from(2);
    }
    if args.json {
        out!("{}", json!({"sha256": hash_token(&token)}));
    } else {
        out!("{}", hash_token(&token));
    }
    ExitCode::SUCCESS
}
