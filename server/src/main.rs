//! The `orbit` binary: the server and the command-line client.
//!
//! Parsing and dispatch live in [`cli`]; each subcommand is one variant of
//! [`cli::Command`] and one file in `cli/` with an `Args` struct and a
//! `run(Args) -> ExitCode` function.

mod cli;

// The subcommands reach the library's modules as `crate::api` / `crate::sdk`.
#[allow(unused_imports)]
use orbit_server::{api, sdk};

use clap::Parser;
use std::process::ExitCode;

fn main() -> ExitCode {
    let cli = cli::Cli::parse();
    cli::dispatch(cli.command)
}
