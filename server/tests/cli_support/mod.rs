//! Helpers for CLI tests: run the real `orbit` binary, and start a real
//! `orbit server` on a free port with a temporary SQLite file.

#![allow(clippy::unwrap_used, dead_code, unused_imports)]

#[path = "../process_support/mod.rs"]
pub mod process_support;

pub use process_support::free_addr;
use process_support::{Log, ServerProcess};
use std::net::SocketAddr;
use std::process::{Command, Stdio};

/// What a finished `orbit` invocation printed.
#[derive(Debug)]
pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

/// Runs `orbit ARGS` against `server` (via `ORBIT_SERVER`).
pub fn orbit(server: &str, args: &[&str]) -> Run {
    let out = Command::new(env!("CARGO_BIN_EXE_orbit"))
        .args(args)
        .env("ORBIT_SERVER", server)
        .env_remove("ORBIT_TOKEN")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// A running `orbit server` on a temporary SQLite file, killed on drop.
pub struct Server {
    pub url: String,
    pub addr: SocketAddr,
    process: ServerProcess,
    pub dir: tempfile::TempDir,
}

impl Server {
    /// Starts `orbit server` with `extra` flags and waits until it answers.
    pub fn start(extra: &[&str]) -> Server {
        let dir = tempfile::tempdir().unwrap();
        let db = format!("sqlite://{}/orbit.db", dir.path().display());
        let mut args = vec!["--db", db.as_str()];
        args.extend_from_slice(extra);
        let mut process = ServerProcess::spawn(&args, Log::Discard);
        process.wait_for_blocking("/readyz");
        Server {
            url: process.url.clone(),
            addr: process.addr,
            process,
            dir,
        }
    }

    /// Writes `source` to a file in the server's temp dir and returns its path.
    pub fn file(&self, name: &str, source: &str) -> String {
        let path = self.dir.path().join(name);
        std::fs::write(&path, source).unwrap();
        path.display().to_string()
    }
}

/// A small definition file used by the CLI tests: `Plain` runs one task,
/// `Gate` waits for the signal `approve` and outputs its payload.
pub const PLAIN: &str = r#"task "demo.work" version "1.0.0" {
    input  { n: Int }
    output { doubled: Int }
}

workflow Plain version "1.0.0" {
    input { n: Int }

    step work {
        worker "demo.work"
        with { n: input.n }
    }

    output { doubled: work.doubled }
}

workflow Gate version "1.0.0" {
    input { n: Int }

    step approval {
        signal "approve"
    }

    output { payload: approval }
}
"#;

/// Strips the `+ <offset> ` prefix of an `orbit logs` line.
pub fn without_offset(line: &str) -> &str {
    let rest = line.strip_prefix("+ ").unwrap_or(line);
    match rest.split_once(' ') {
        Some((_, tail)) => tail,
        None => rest,
    }
}
