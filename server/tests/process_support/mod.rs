//! Real `orbit server` processes for the integration tests, in one place:
//! a free loopback port, spawning the binary with any flags, waiting until
//! an endpoint answers 200, and SIGKILL / SIGSTOP / SIGCONT. The process
//! is killed when its value is dropped.

#![allow(clippy::unwrap_used, clippy::expect_used, dead_code)]

use std::net::{SocketAddr, TcpListener};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// The `orbit` binary under test.
pub const ORBIT: &str = env!("CARGO_BIN_EXE_orbit");

/// How long a spawned server gets to answer.
pub const READY_WITHIN: Duration = Duration::from_secs(30);

/// A loopback address nothing listens on right now (bound, then released).
pub fn free_addr() -> SocketAddr {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}

/// A loopback port nothing listens on right now.
pub fn free_port() -> u16 {
    free_addr().port()
}

/// Where a spawned server's stderr goes.
pub enum Log<'a> {
    /// The test's own stderr (shown when it fails).
    Inherit,
    /// Nowhere.
    Discard,
    /// A file, appended to (a restarted server keeps writing to it), to
    /// read back (`fenced:` lines and the like).
    File(&'a Path),
}

/// A running `orbit server`.
pub struct ServerProcess {
    child: Child,
    /// `127.0.0.1:PORT`.
    pub addr: SocketAddr,
    /// `http://127.0.0.1:PORT`.
    pub url: String,
    stopped: bool,
}

impl ServerProcess {
    /// `orbit server --listen <addr> ARGS` with `RUST_LOG=warn` (unless
    /// `ARGS` need more, pass `RUST_LOG` through `envs`), not yet ready.
    pub fn spawn_at(addr: SocketAddr, args: &[&str], log: Log<'_>) -> ServerProcess {
        ServerProcess::spawn_with(addr, args, log, &[])
    }

    /// [`ServerProcess::spawn_at`] on a free port.
    pub fn spawn(args: &[&str], log: Log<'_>) -> ServerProcess {
        ServerProcess::spawn_at(free_addr(), args, log)
    }

    /// [`ServerProcess::spawn_at`] with extra environment variables.
    pub fn spawn_with(
        addr: SocketAddr,
        args: &[&str],
        log: Log<'_>,
        envs: &[(&str, &str)],
    ) -> ServerProcess {
        let stderr = match log {
            Log::Inherit => Stdio::inherit(),
            Log::Discard => Stdio::null(),
            Log::File(path) => Stdio::from(
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(path)
                    .unwrap(),
            ),
        };
        let listen = addr.to_string();
        let child = Command::new(ORBIT)
            .arg("server")
            .args(["--listen", listen.as_str()])
            .args(args)
            .env("RUST_LOG", "warn")
            .envs(envs.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .expect("spawn orbit server");
        ServerProcess {
            child,
            addr,
            url: format!("http://{addr}"),
            stopped: false,
        }
    }

    /// Waits until `GET path` answers 200; panics after [`READY_WITHIN`]
    /// or when the process exits first.
    pub async fn wait_for(&mut self, path: &str) {
        let url = format!("{}{path}", self.url);
        // Each check ends within 5 s, so a check that never gets an answer
        // is tried again instead of outliving the deadline.
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(5))
            .build()
            .unwrap();
        let deadline = Instant::now() + READY_WITHIN;
        loop {
            if let Ok(r) = client.get(&url).send().await {
                if r.status().is_success() {
                    return;
                }
            }
            if let Some(status) = self.try_wait() {
                panic!(
                    "orbit server on {} exited with {status} before {path} answered",
                    self.url
                );
            }
            assert!(
                Instant::now() < deadline,
                "orbit server on {}: {path} did not answer 200 within {READY_WITHIN:?}",
                self.url
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Like [`ServerProcess::wait_for`], blocking the thread (for tests
    /// without a runtime): a bare HTTP/1.0 `GET path` until it answers 200.
    pub fn wait_for_blocking(&mut self, path: &str) {
        use std::io::{Read, Write};
        let deadline = Instant::now() + READY_WITHIN;
        loop {
            if let Ok(mut s) = std::net::TcpStream::connect(self.addr) {
                let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
                let _ = write!(s, "GET {path} HTTP/1.0\r\nHost: x\r\n\r\n");
                let mut text = String::new();
                let _ = s.read_to_string(&mut text);
                if text.starts_with("HTTP/1.0 200") || text.starts_with("HTTP/1.1 200") {
                    return;
                }
            }
            if let Some(status) = self.try_wait() {
                panic!(
                    "orbit server on {} exited with {status} before {path} answered",
                    self.url
                );
            }
            assert!(
                Instant::now() < deadline,
                "orbit server on {}: {path} did not answer 200 within {READY_WITHIN:?}",
                self.url
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits until `/readyz` answers 200.
    pub async fn ready(mut self) -> ServerProcess {
        self.wait_for("/readyz").await;
        self
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Kills it with SIGKILL and reaps it.
    pub fn kill(&mut self) {
        self.resume();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Freezes it (SIGSTOP), as a long GC pause or a VM freeze would.
    pub fn pause(&mut self) {
        self.signal("-STOP");
        self.stopped = true;
    }

    /// Lets a paused process run again (SIGCONT).
    pub fn resume(&mut self) {
        if std::mem::take(&mut self.stopped) {
            self.signal("-CONT");
        }
    }

    /// Asks it to shut down (SIGTERM).
    pub fn terminate(&self) {
        self.signal("-TERM");
    }

    fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .args([signal, &self.pid().to_string()])
            .status()
            .unwrap();
        assert!(status.success(), "kill {signal} {}", self.pid());
    }

    /// Its exit status, if it has exited.
    pub fn try_wait(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().unwrap()
    }

    /// Waits for it to exit by itself.
    pub fn wait(&mut self) -> ExitStatus {
        self.child.wait().unwrap()
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        self.kill();
    }
}
