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

// glibc's allocator spent about a third of the server's CPU time in
// malloc/free under load (docs/src/benchmarks.md); mimalloc's thread-local
// free lists cut that to a few per cent. It is linked in with its
// `override` feature, as the process's `malloc`: Rust's default allocator
// calls `malloc` for every alignment `malloc` guarantees (mimalloc's own
// `GlobalAlloc` called its aligned entry points for every block, a slower
// path, and for blocks over 1 KiB an over-allocating one), and SQLite's
// own allocations come from mimalloc too.
use mimalloc as _;

fn main() -> ExitCode {
    let cli = cli::Cli::parse();
    cli::dispatch(cli.command)
}
