//! Command-line parsing (clap derive) and dispatch for the `orbit` binary.
//!
//! To add a subcommand: create `cli/<name>.rs` with `pub struct Args`
//! (`clap::Args`) and `pub fn run(args: Args) -> ExitCode`, then add one
//! `mod` line, one variant to [`Command`] and one arm to [`dispatch`].
//! Exit codes (api.md): 0 success, 1 the operation failed or was refused
//! (diagnostics from `check` included), 2 usage, I/O or connection error,
//! 3 a `--wait` timed out. clap's own usage errors exit with 2.

/// `println!` for a command's output. A reader that went away
/// (`orbit ls | head -1`) ends the command quietly, as it ends other Unix
/// tools, where `println!` would panic.
macro_rules! out {
    () => {
        $crate::cli::emit(format_args!("\n"))
    };
    ($($arg:tt)*) => {
        $crate::cli::emit(format_args!("{}\n", format_args!($($arg)*)))
    };
}

/// `print!` for a command's output (see [`out!`]).
macro_rules! out_raw {
    ($($arg:tt)*) => {
        $crate::cli::emit(format_args!($($arg)*))
    };
}

/// Writes to stdout; exits quietly (code 0) when stdout is a closed pipe,
/// and with code 2 on any other write error.
pub(crate) fn emit(text: std::fmt::Arguments<'_>) {
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    if let Err(e) = stdout.write_fmt(text).and_then(|()| stdout.flush()) {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(0);
        }
        eprintln!("error: cannot write the output: {e}");
        std::process::exit(2);
    }
}

mod auth;
mod bench;
mod cancel;
mod check;
mod cluster;
mod common;
mod deploy;
mod dev;
mod explain;
mod logs;
mod ls;
mod run;
mod server;
mod signal;
mod status;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

/// ORBIT: a durable workflow runtime.
#[derive(Debug, Parser)]
#[command(name = "orbit", version, propagate_version = true)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands of `orbit`.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Compile .orbit files and print diagnostics, or each workflow's name, version and hash.
    Check(check::Args),
    /// Print the long explanation of a diagnostic code (e.g. `orbit explain E0400`).
    Explain(explain::Args),
    /// Register .orbit files with the server (children before parents).
    Deploy(deploy::Args),
    /// Start an execution.
    Run(run::Args),
    /// Show an execution.
    Status(status::Args),
    /// List executions, newest first.
    ///
    /// Finished executions stay listed, with their histories, until the
    /// server's `--retention` deletes them; it is off by default, so the
    /// server keeps every history until told otherwise.
    Ls(ls::Args),
    /// Print an execution's history.
    Logs(logs::Args),
    /// Send a signal to an execution.
    Signal(signal::Args),
    /// Cancel an execution.
    Cancel(cancel::Args),
    /// Quick start: an embedded server, the example workers and a demo of the order example.
    Dev(dev::Args),
    /// Run the ORBIT server (HTTP API + engine on an embedded SQLite file, or
    /// PostgreSQL; `--cluster` for several servers on one PostgreSQL).
    Server(server::Args),
    /// Load-test a server: steps/s, executions/s and latency percentiles.
    Bench(bench::Args),
    /// API tokens for `--auth FILE` (`orbit auth hash-token`).
    Auth(auth::Args),
    /// Look at a `--cluster` (`orbit cluster status`).
    Cluster(cluster::Args),
}

/// Runs `command`, returning the process exit code.
pub fn dispatch(command: Command) -> ExitCode {
    match command {
        Command::Check(args) => check::run(args),
        Command::Explain(args) => explain::run(args),
        Command::Deploy(args) => deploy::run(args),
        Command::Run(args) => run::run(args),
        Command::Status(args) => status::run(args),
        Command::Ls(args) => ls::run(args),
        Command::Logs(args) => logs::run(args),
        Command::Signal(args) => signal::run(args),
        Command::Cancel(args) => cancel::run(args),
        Command::Dev(args) => dev::run(args),
        Command::Server(args) => server::run(args),
        Command::Bench(args) => bench::run(args),
        Command::Auth(args) => auth::run(args),
        Command::Cluster(args) => cluster::run(args),
    }
}
