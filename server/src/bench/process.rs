//! The server as a separate process, for the workloads that kill it or read
//! its memory (`recovery`, `sleepers`): spawns `orbit server` (this same
//! executable) on a free loopback port over a store, waits for `/readyz`,
//! reads its resident memory from `/proc`, and kills it with SIGKILL. Also
//! the small JSON-over-HTTP helper those workloads share.

use super::BenchError;
use orbit_io_tokio::storage::is_postgres;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Longest wait for a spawned server to answer `/readyz`.
pub const READY_TIMEOUT: Duration = Duration::from_secs(300);

/// The store a workload runs on (a scratch SQLite file, or the URL the user
/// gave) and a scratch directory for the servers' logs, removed on drop.
pub struct Store {
    /// `sqlite://...` or `postgres://...`.
    pub url: String,
    /// `sqlite` or `postgres`.
    pub backend: &'static str,
    /// The scratch directory (the SQLite file when no `--db` was given, and
    /// the servers' logs).
    pub dir: PathBuf,
}

impl Store {
    /// `db`, or a fresh SQLite file in the temporary directory when `None`.
    pub fn new(db: Option<&str>) -> Result<Store, BenchError> {
        let backend = match db {
            None => "sqlite",
            Some(url) if url.starts_with("sqlite:") => "sqlite",
            Some(url) if is_postgres(url) => "postgres",
            Some(url) => {
                return Err(BenchError::Usage(format!(
                    "--db `{url}`: expected sqlite://PATH or postgres://..."
                )))
            }
        };
        let dir = std::env::temp_dir().join(format!("orbit-bench-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir)?;
        let url = match db {
            Some(url) => url.to_owned(),
            None => format!("sqlite://{}", dir.join("bench.db").display()),
        };
        Ok(Store { url, backend, dir })
    }
}

impl Drop for Store {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A running `orbit server` child process.
pub struct ServerProcess {
    child: Child,
    /// Its base URL (`http://127.0.0.1:PORT`).
    pub url: String,
    /// When it was spawned.
    pub spawned: Instant,
    log: PathBuf,
}

/// A loopback port nothing listens on right now.
fn free_port() -> Result<u16, BenchError> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok(listener.local_addr()?.port())
}

impl ServerProcess {
    /// Spawns `orbit server --db <db> --listen 127.0.0.1:<free port>` plus
    /// `extra` flags, its stderr going to `log`.
    pub fn spawn(db: &str, extra: &[String], log: &Path) -> Result<ServerProcess, BenchError> {
        let exe = std::env::current_exe()?;
        let port = free_port()?;
        let stderr = std::fs::File::create(log)?;
        let spawned = Instant::now();
        let child = Command::new(exe)
            .arg("server")
            .arg("--db")
            .arg(db)
            .arg("--listen")
            .arg(format!("127.0.0.1:{port}"))
            .args(extra)
            .env("RUST_LOG", "info")
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()?;
        Ok(ServerProcess {
            child,
            url: format!("http://127.0.0.1:{port}"),
            spawned,
            log: log.to_owned(),
        })
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Polls `/readyz` until it answers 200; the time since the spawn.
    pub async fn wait_ready(&mut self, http: &reqwest::Client) -> Result<Duration, BenchError> {
        let url = format!("{}/readyz", self.url);
        loop {
            if let Ok(r) = http.get(&url).send().await {
                if r.status().is_success() {
                    return Ok(self.spawned.elapsed());
                }
            }
            if let Some(status) = self.child.try_wait()? {
                return Err(BenchError::Server(format!(
                    "the server exited with {status} before it was ready: {}",
                    self.log_tail()
                )));
            }
            if self.spawned.elapsed() > READY_TIMEOUT {
                return Err(BenchError::Server(format!(
                    "the server was not ready after {}s: {}",
                    READY_TIMEOUT.as_secs(),
                    self.log_tail()
                )));
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }

    /// Kills the process with SIGKILL and reaps it.
    pub fn kill(&mut self) -> Result<(), BenchError> {
        self.child.kill()?;
        self.child.wait()?;
        Ok(())
    }

    /// Its resident memory now.
    pub fn memory(&self) -> Result<Memory, BenchError> {
        Memory::of(self.pid())
    }

    /// What the server logged when it finished recovering, if it did.
    pub fn recovered(&self) -> Option<Recovered> {
        let text = std::fs::read_to_string(&self.log).ok()?;
        text.lines()
            .find(|l| l.contains(" recovered"))
            .and_then(Recovered::parse)
    }

    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(5)..].join("\n")
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// The server's `recovered` log line: what it loaded and how long it took.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Recovered {
    /// Executions loaded.
    pub executions: u64,
    /// Events replayed.
    pub events: u64,
    /// Load and replay time, in milliseconds.
    pub elapsed_ms: u64,
}

impl Recovered {
    /// Reads `executions=N events=N elapsed_ms=N` from a log line.
    pub fn parse(line: &str) -> Option<Recovered> {
        let field = |name: &str| -> Option<u64> {
            let at = line.find(&format!("{name}="))? + name.len() + 1;
            let digits: String = line[at..]
                .chars()
                .take_while(char::is_ascii_digit)
                .collect();
            digits.parse().ok()
        };
        Some(Recovered {
            executions: field("executions")?,
            events: field("events")?,
            elapsed_ms: field("elapsed_ms")?,
        })
    }
}

/// Resident memory of a process (`/proc/<pid>/status`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Memory {
    /// `VmRSS`: resident now, in bytes.
    pub rss: u64,
    /// `VmHWM`: the most it was resident, in bytes.
    pub peak: u64,
}

impl Memory {
    /// Reads `VmRSS` and `VmHWM` of `pid`.
    pub fn of(pid: u32) -> Result<Memory, BenchError> {
        let text = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
        Memory::parse(&text).ok_or_else(|| {
            BenchError::Server(format!("no VmRSS in /proc/{pid}/status (not Linux?)"))
        })
    }

    /// Parses the text of a `/proc/<pid>/status` file.
    pub fn parse(status: &str) -> Option<Memory> {
        let kib = |name: &str| -> Option<u64> {
            let line = status.lines().find(|l| l.starts_with(name))?;
            line[name.len()..]
                .split_whitespace()
                .next()?
                .parse::<u64>()
                .ok()
                .map(|k| k * 1024)
        };
        Some(Memory {
            rss: kib("VmRSS:")?,
            peak: kib("VmHWM:").unwrap_or(0),
        })
    }
}

/// Bytes as MiB, one decimal.
pub fn mib(bytes: u64) -> f64 {
    (bytes as f64 / (1024.0 * 1024.0) * 10.0).round() / 10.0
}

/// A duration in milliseconds, one decimal.
pub fn millis(d: Duration) -> f64 {
    (d.as_secs_f64() * 10_000.0).round() / 10.0
}

/// The HTTP client the workloads use.
pub fn client() -> Result<reqwest::Client, BenchError> {
    reqwest::Client::builder()
        .pool_max_idle_per_host(usize::MAX)
        .tcp_nodelay(true)
        .timeout(Duration::from_secs(120))
        .build()
        .map_err(|e| BenchError::Server(e.to_string()))
}

/// An HTTP call answering JSON; a non-2xx answer is an error with its body.
pub async fn call(
    http: &reqwest::Client,
    method: reqwest::Method,
    url: &str,
    body: Option<&Value>,
) -> Result<Value, String> {
    let mut request = http.request(method, url);
    if let Some(b) = body {
        request = request.json(b);
    }
    let response = request.send().await.map_err(|e| format!("{url}: {e}"))?;
    let status = response.status();
    let text = response.text().await.map_err(|e| format!("{url}: {e}"))?;
    if !status.is_success() {
        return Err(format!("{url}: {status} {text}"));
    }
    if text.is_empty() {
        return Ok(Value::Null);
    }
    serde_json::from_str(&text).map_err(|e| format!("{url}: bad JSON: {e}"))
}

/// Deploys `.orbit` source on `base`.
pub async fn deploy(http: &reqwest::Client, base: &str, source: &str) -> Result<(), BenchError> {
    let body = serde_json::json!({"source": source, "filename": "bench.orbit"});
    call(
        http,
        reqwest::Method::POST,
        &format!("{base}/v1/definitions"),
        Some(&body),
    )
    .await
    .map(|_| ())
    .map_err(BenchError::Server)
}

/// Executions by status, from `/metrics`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Counts {
    /// `pending`.
    pub pending: u64,
    /// `running`.
    pub running: u64,
    /// `completed`.
    pub completed: u64,
    /// `failed`, `cancelled` or `compensating`.
    pub other: u64,
}

impl Counts {
    /// Every execution counted.
    pub fn total(&self) -> u64 {
        self.pending + self.running + self.completed + self.other
    }

    /// Reads the `orbit_executions{status="..."}` gauges of a `/metrics` text.
    pub fn parse(text: &str) -> Counts {
        let mut counts = Counts::default();
        for line in text.lines() {
            let Some(rest) = line.strip_prefix("orbit_executions{status=\"") else {
                continue;
            };
            let Some((status, value)) = rest.split_once("\"}") else {
                continue;
            };
            let n = value.trim().parse::<u64>().unwrap_or(0);
            match status {
                "pending" => counts.pending += n,
                "running" => counts.running += n,
                "completed" => counts.completed += n,
                _ => counts.other += n,
            }
        }
        counts
    }

    /// The counts `base` did not have yet (executions of earlier runs on
    /// the same store are not this run's).
    pub fn since(&self, base: &Counts) -> Counts {
        Counts {
            pending: self.pending.saturating_sub(base.pending),
            running: self.running.saturating_sub(base.running),
            completed: self.completed.saturating_sub(base.completed),
            other: self.other.saturating_sub(base.other),
        }
    }
}

/// The execution counts of the server at `base` (asked up to five times: a
/// busy server may close an idle pooled connection as it is reused).
pub async fn counts(http: &reqwest::Client, base: &str) -> Result<Counts, BenchError> {
    Ok(Counts::parse(&metrics(http, base).await?))
}

/// The server's `/metrics` text (a few retries).
pub async fn metrics(http: &reqwest::Client, base: &str) -> Result<String, BenchError> {
    let url = format!("{base}/metrics");
    let mut failures = 0;
    loop {
        match metrics_text(http, &url).await {
            Ok(text) => return Ok(text),
            Err(e) => {
                failures += 1;
                if failures >= 5 {
                    return Err(BenchError::Server(e));
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

async fn metrics_text(http: &reqwest::Client, url: &str) -> Result<String, String> {
    let response = http
        .get(url)
        .send()
        .await
        .map_err(|e| format!("{url}: {e}"))?;
    if !response.status().is_success() {
        return Err(format!("{url}: {}", response.status()));
    }
    response.text().await.map_err(|e| format!("{url}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_recovered_line() {
        let line = "2026-11-30T08:00:00.000Z  INFO orbit_io_tokio::driver: recovered executions=10000 events=100000 elapsed_ms=1234";
        assert_eq!(
            Recovered::parse(line),
            Some(Recovered {
                executions: 10_000,
                events: 100_000,
                elapsed_ms: 1234
            })
        );
        assert_eq!(Recovered::parse("recovered executions=3"), None);
    }

    #[test]
    fn reads_resident_memory() {
        let status = "Name:\torbit\nVmHWM:\t  204800 kB\nVmRSS:\t  102400 kB\nThreads:\t3\n";
        assert_eq!(
            Memory::parse(status),
            Some(Memory {
                rss: 100 * 1024 * 1024,
                peak: 200 * 1024 * 1024
            })
        );
        assert_eq!(Memory::parse("Name:\tx\n"), None);
        assert_eq!(mib(150 * 1024 * 1024), 150.0);
    }

    #[test]
    fn reads_execution_counts_from_metrics() {
        let text = "# HELP orbit_executions Executions by status.\n\
                    orbit_executions{status=\"pending\"} 1\n\
                    orbit_executions{status=\"running\"} 20\n\
                    orbit_executions{status=\"completed\"} 300\n\
                    orbit_executions{status=\"failed\"} 4\n\
                    orbit_steps_dispatched_total 9\n";
        let c = Counts::parse(text);
        assert_eq!(
            c,
            Counts {
                pending: 1,
                running: 20,
                completed: 300,
                other: 4
            }
        );
        assert_eq!(c.total(), 325);
        let base = Counts {
            completed: 100,
            ..Counts::default()
        };
        assert_eq!(c.since(&base).completed, 200);
    }
}
