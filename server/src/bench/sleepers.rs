//! `orbit bench --workload sleepers`: the memory bar. A server process gets
//! a workflow whose only step is `sleep 1h` and as many executions of it as
//! asked; once every one is running asleep (counted from `/metrics`, a
//! sample of histories checked for a started, unfired timer), the server's
//! resident memory is read from `/proc/<pid>/status`. Then the server is
//! killed and started again on the same store, and its memory read once it
//! has recovered every sleeper.

use super::process::{self, Counts, ServerProcess, Store};
use super::BenchError;
use serde::Serialize;
use serde_json::{json, Value};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The workflow's name.
pub const WORKFLOW: &str = "BenchSleep";

/// Histories checked for a started, unfired timer.
const SAMPLE: u64 = 20;

/// No progress for this long ends a phase with an error.
const STALL: Duration = Duration::from_secs(120);

/// The `.orbit` source: one step, asleep for an hour.
pub fn source() -> String {
    format!(
        "workflow {WORKFLOW} version \"1.0.0\" {{\n    input {{ n: Int }}\n\n    step pause {{ sleep 1h }}\n}}\n"
    )
}

/// What to run.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// Store (`sqlite://PATH`, `postgres://...`); `None`: a scratch SQLite
    /// file. A given store should be empty: its executions count too.
    pub db: Option<String>,
    /// Executions put to sleep.
    pub executions: u64,
    /// Start requests in flight at once.
    pub concurrency: u32,
    /// Also kill the server, restart it and measure it after recovery.
    pub restart: bool,
    /// The server's `--idle-evict`: once every execution is asleep, the
    /// workload waits until they have all left memory and measures again.
    pub idle_evict: Duration,
    /// Print progress to stderr.
    pub progress: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            db: None,
            executions: 100_000,
            concurrency: 200,
            restart: true,
            idle_evict: Duration::from_secs(60),
            progress: false,
        }
    }
}

/// What a sleepers run measured.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SleepersReport {
    /// Always `sleepers`.
    pub workload: String,
    /// `sqlite` or `postgres`.
    pub backend: String,
    /// Executions asked for.
    pub executions: u64,
    /// Executions counted `running` once every start was answered.
    pub asleep: u64,
    /// Sampled histories with a started and unfired timer (of `sampled`).
    pub sample_asleep: u64,
    /// Histories sampled.
    pub sampled: u64,
    /// Start requests that failed.
    pub errors: u64,
    /// Time to start them all, in seconds.
    pub start_s: f64,
    /// Starts answered per second.
    pub starts_per_s: f64,
    /// Resident memory of the server with the workflow deployed and nothing
    /// started, in MiB.
    pub idle_rss_mib: f64,
    /// Resident memory with every execution asleep, in MiB.
    pub rss_mib: f64,
    /// The most the server was resident while they were started, in MiB.
    pub peak_rss_mib: f64,
    /// Executions out of memory for idleness when measured again.
    pub evicted: u64,
    /// Resident memory once they have left memory (`--idle-evict`), in MiB.
    pub evicted_rss_mib: f64,
    /// (`rss` − `idle rss`) / executions, in bytes.
    pub bytes_per_execution: u64,
    /// After a SIGKILL and restart on the same store: spawn → `/readyz`, in
    /// milliseconds (`None` when not restarted).
    pub restart_ready_ms: Option<f64>,
    /// The restarted server's own load-and-replay time, in milliseconds.
    pub restart_recovery_ms: Option<u64>,
    /// Resident memory of the restarted server once ready, in MiB.
    pub restart_rss_mib: Option<f64>,
    /// The most the restarted server was resident while recovering, in MiB.
    pub restart_peak_rss_mib: Option<f64>,
}

impl SleepersReport {
    /// The one-line summary.
    pub fn line(&self) -> String {
        let restart = match (
            self.restart_ready_ms,
            self.restart_rss_mib,
            self.restart_peak_rss_mib,
        ) {
            (Some(ready), Some(rss), Some(peak)) => format!(
                " | after kill -9 and restart: ready in {ready:.0}ms (replay {}ms), rss {rss:.1} MiB (peak {peak:.1} MiB)",
                self.restart_recovery_ms.unwrap_or(0)
            ),
            _ => String::new(),
        };
        format!(
            "orbit bench sleepers: backend={} executions={} | {} asleep ({}/{} sampled histories) | \
             started in {:.2}s ({:.0} starts/s) | rss {:.1} MiB (idle {:.1}, peak {:.1}), {} bytes/execution | \
             {} evicted: rss {:.1} MiB{} | errors={}",
            self.backend,
            self.executions,
            self.asleep,
            self.sample_asleep,
            self.sampled,
            self.start_s,
            self.starts_per_s,
            self.rss_mib,
            self.idle_rss_mib,
            self.peak_rss_mib,
            self.bytes_per_execution,
            self.evicted,
            self.evicted_rss_mib,
            restart,
            self.errors,
        )
    }
}

/// Runs the sleepers workload.
pub async fn run(config: &Config) -> Result<SleepersReport, BenchError> {
    if config.executions == 0 || config.concurrency == 0 {
        return Err(BenchError::Usage(
            "--executions and --concurrency must be at least 1".into(),
        ));
    }
    let store = Store::new(config.db.as_deref())?;
    let http = process::client()?;
    let run_id = uuid::Uuid::new_v4().simple().to_string();
    let evict = vec![
        "--idle-evict".to_string(),
        format!("{}ms", config.idle_evict.as_millis()),
    ];
    let mut server = ServerProcess::spawn(&store.url, &evict, &store.dir.join("server.log"))?;
    server.wait_ready(&http).await?;
    process::deploy(&http, &server.url, &source()).await?;
    let base = process::counts(&http, &server.url).await?;
    let idle = server.memory()?;

    let began = Instant::now();
    let errors = start_all(&http, &server.url, config, &run_id, began).await;
    let start = began.elapsed();
    let asleep = wait_asleep(&http, &server.url, &base, config.executions - errors).await?;
    let (sample_asleep, sampled) = sample(&http, &server.url, &run_id, config.executions).await;
    // Let the last commits' buffers go before reading.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let memory = server.memory()?;
    if config.progress {
        eprintln!(
            "orbit bench sleepers: {asleep} asleep, rss {:.1} MiB",
            process::mib(memory.rss)
        );
    }
    let evicted = wait_evicted(&http, &server.url, asleep, config.idle_evict).await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let after_evict = server.memory()?;
    if config.progress {
        eprintln!(
            "orbit bench sleepers: {evicted} evicted, rss {:.1} MiB",
            process::mib(after_evict.rss)
        );
    }

    let mut restart = None;
    if config.restart {
        server.kill()?;
        let mut again = ServerProcess::spawn(&store.url, &evict, &store.dir.join("restart.log"))?;
        let ready = again.wait_ready(&http).await?;
        let after = again.memory()?;
        let recovered = again.recovered();
        restart = Some((ready, after, recovered));
        again.kill()?;
    } else {
        server.kill()?;
    }

    let secs = start.as_secs_f64().max(1e-9);
    let started = config.executions - errors;
    Ok(SleepersReport {
        workload: "sleepers".into(),
        backend: store.backend.into(),
        executions: config.executions,
        asleep,
        sample_asleep,
        sampled,
        errors,
        start_s: (secs * 1000.0).round() / 1000.0,
        starts_per_s: (started as f64 / secs).round(),
        idle_rss_mib: process::mib(idle.rss),
        rss_mib: process::mib(memory.rss),
        peak_rss_mib: process::mib(memory.peak),
        evicted,
        evicted_rss_mib: process::mib(after_evict.rss),
        bytes_per_execution: memory.rss.saturating_sub(idle.rss) / config.executions.max(1),
        restart_ready_ms: restart.map(|(ready, _, _)| process::millis(ready)),
        restart_recovery_ms: restart.and_then(|(_, _, r)| r.map(|r| r.elapsed_ms)),
        restart_rss_mib: restart.map(|(_, m, _)| process::mib(m.rss)),
        restart_peak_rss_mib: restart.map(|(_, m, _)| process::mib(m.peak)),
    })
}

/// Starts every execution (`concurrency` requests at once); the number of
/// starts that failed.
async fn start_all(
    http: &reqwest::Client,
    base: &str,
    config: &Config,
    run_id: &str,
    began: Instant,
) -> u64 {
    let next = Arc::new(AtomicU64::new(0));
    let errors = Arc::new(AtomicU64::new(0));
    let mut starters = Vec::new();
    for _ in 0..config.concurrency {
        let (http, base, next, errors, run_id) = (
            http.clone(),
            base.to_owned(),
            next.clone(),
            errors.clone(),
            run_id.to_owned(),
        );
        let total = config.executions;
        starters.push(tokio::spawn(async move {
            let url = format!("{base}/v1/executions");
            loop {
                let n = next.fetch_add(1, Ordering::SeqCst);
                if n >= total {
                    return;
                }
                let body = json!({"workflow": WORKFLOW, "input": {"n": n}, "execution_id": format!("sleep-{run_id}-{n}")});
                if let Err(e) = process::call(&http, reqwest::Method::POST, &url, Some(&body)).await
                {
                    tracing::warn!(error = %e, "start failed");
                    errors.fetch_add(1, Ordering::SeqCst);
                }
            }
        }));
    }
    let progress = config.progress.then(|| {
        let (next, total) = (next.clone(), config.executions);
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_secs(1)).await;
                eprintln!(
                    "orbit bench sleepers: {:>6.1}s {}/{total} started",
                    began.elapsed().as_secs_f64(),
                    next.load(Ordering::Relaxed).min(total)
                );
            }
        })
    });
    for s in starters {
        let _ = s.await;
    }
    if let Some(p) = progress {
        p.abort();
    }
    errors.load(Ordering::SeqCst)
}

/// Waits until `want` more executions than `base` are running; how many are.
async fn wait_asleep(
    http: &reqwest::Client,
    url: &str,
    base: &Counts,
    want: u64,
) -> Result<u64, BenchError> {
    let mut last = (0, Instant::now());
    loop {
        let now = process::counts(http, url).await?.since(base);
        if now.running >= want {
            return Ok(now.running);
        }
        if now.running > last.0 {
            last = (now.running, Instant::now());
        } else if last.1.elapsed() > STALL {
            return Err(BenchError::Server(format!(
                "only {} of {want} executions are running ({} pending, {} ended)",
                now.running,
                now.pending,
                now.completed + now.other
            )));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits until `want` executions have left memory for idleness (at most
/// `idle_evict` and half a minute more); how many have.
async fn wait_evicted(
    http: &reqwest::Client,
    url: &str,
    want: u64,
    idle_evict: Duration,
) -> Result<u64, BenchError> {
    let deadline = Instant::now() + idle_evict + Duration::from_secs(30);
    loop {
        let text = process::metrics(http, url).await?;
        let evicted = text
            .lines()
            .find_map(|l| l.strip_prefix("orbit_executions_evicted "))
            .and_then(|v| v.trim().parse::<u64>().ok())
            .unwrap_or(0);
        if evicted >= want || Instant::now() >= deadline {
            return Ok(evicted);
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Reads up to [`SAMPLE`] histories spread over the run (each again for a
/// few seconds while its timer is not started yet: the timer may commit
/// after the execution is counted running); how many show a started timer
/// that has not fired, and how many were read.
async fn sample(http: &reqwest::Client, url: &str, run_id: &str, total: u64) -> (u64, u64) {
    let count = SAMPLE.min(total);
    let mut asleep = 0;
    for i in 0..count {
        let n = i * total / count;
        let history = format!("{url}/v1/executions/sleep-{run_id}-{n}/history");
        for _ in 0..50 {
            if let Some(sleeping) = timer_pending(http, &history).await {
                if sleeping {
                    asleep += 1;
                }
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    (asleep, count)
}

/// Whether the history at `url` shows a started timer that has not fired;
/// `None` while it can not be read or its timer has not started.
async fn timer_pending(http: &reqwest::Client, url: &str) -> Option<bool> {
    let history = process::call(http, reqwest::Method::GET, url, None)
        .await
        .ok()?;
    let kinds: Vec<&str> = match history.get("events") {
        Some(Value::Array(events)) => events
            .iter()
            .filter_map(|e| e.get("type").and_then(Value::as_str))
            .collect(),
        _ => Vec::new(),
    };
    if kinds.contains(&"TimerFired") {
        return Some(false);
    }
    kinds.contains(&"TimerStarted").then_some(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sleeper_workflow_compiles() {
        let compiled = orbit_core::check::compile(
            &[orbit_core::check::Source {
                name: "sleep.orbit".into(),
                text: source(),
            }],
            &|_, _| None,
        );
        assert!(compiled.is_ok(), "{:?}", compiled.diagnostics);
        assert_eq!(compiled.definitions.len(), 1);
    }
}
