//! `orbit explain CODE`: prints the long explanation of a diagnostic code
//! (the book's `docs/src/errors/<CODE>.md`, compiled into the binary).

use orbit_core::diagnostic::explain::explanation;
use std::process::ExitCode;

/// `orbit explain` options.
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// A diagnostic code, e.g. `E0400` (case-insensitive).
    #[arg(value_name = "CODE")]
    pub code: String,
}

/// Runs `orbit explain`: exit 0 with the explanation on stdout, or exit 2
/// with a message on stderr for a code that does not exist.
pub fn run(args: Args) -> ExitCode {
    match explanation(&args.code) {
        Some(text) => {
            print!("{text}");
            if !text.ends_with('\n') {
                println!();
            }
            ExitCode::SUCCESS
        }
        None => {
            eprintln!(
                "error: `{}` is not a diagnostic code\n  codes look like `E0400`; `orbit check` prints them in brackets: error[E0400]",
                args.code.trim()
            );
            ExitCode::from(2)
        }
    }
}
