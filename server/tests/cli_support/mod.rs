//! Helpers for CLI tests: run the real `orbit` binary, and start a real
//! `orbit server` on a free port with a temporary SQLite file.

#![allow(clippy::unwrap_used, dead_code)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

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

/// A free loopback port (bound, then released).
pub fn free_addr() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap()
}

/// A running `orbit server`, killed on drop.
pub struct Server {
    pub url: String,
    pub addr: SocketAddr,
    child: Child,
    pub dir: tempfile::TempDir,
}

impl Server {
    /// Starts `orbit server` with `extra` flags and waits until it answers.
    pub fn start(extra: &[&str]) -> Server {
        let dir = tempfile::tempdir().unwrap();
        let addr = free_addr();
        let db = format!("sqlite://{}/orbit.db", dir.path().display());
        let listen = addr.to_string();
        let mut args = vec!["server", "--db", db.as_str(), "--listen", listen.as_str()];
        args.extend_from_slice(extra);
        let child = Command::new(env!("CARGO_BIN_EXE_orbit"))
            .args(&args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let server = Server {
            url: format!("http://{addr}"),
            addr,
            child,
            dir,
        };
        server.wait_ready();
        server
    }

    fn wait_ready(&self) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Ok(mut s) = TcpStream::connect(self.addr) {
                let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
                let _ = s.write_all(b"GET /readyz HTTP/1.0\r\nHost: x\r\n\r\n");
                let mut text = String::new();
                let _ = s.read_to_string(&mut text);
                if text.starts_with("HTTP/1.0 200") || text.starts_with("HTTP/1.1 200") {
                    return;
                }
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("orbit server did not become ready on {}", self.addr);
    }

    /// Writes `source` to a file in the server's temp dir and returns its path.
    pub fn file(&self, name: &str, source: &str) -> String {
        let path = self.dir.path().join(name);
        std::fs::write(&path, source).unwrap();
        path.display().to_string()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
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
