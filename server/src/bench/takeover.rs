//! `orbit bench --workload takeover`: how long a `--cluster` is without a
//! leader. Three `orbit server --cluster` processes run on one PostgreSQL
//! database; each round starts some executions on the leader, kills it with
//! SIGKILL, and measures the time until one of the standbys accepts a start
//! (`201`); the killed node is then restarted as a standby. Reported: every
//! round's time, the median and the maximum, against the bar
//! `--node-timeout + 1 s`.

use super::process::{self, ServerProcess, Store};
use super::workload;
use super::BenchError;
use orbit_io_tokio::storage::is_postgres;
use serde::Serialize;
use serde_json::json;
use std::time::{Duration, Instant};

/// Servers in the cluster.
const NODES: usize = 3;

/// Executions started on each leader before it is killed (so the next one
/// has something to recover).
const PER_ROUND: u64 = 50;

/// How often the standbys are offered a start while no leader answers.
const PROBE_EVERY: Duration = Duration::from_millis(10);

/// What to run.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// The PostgreSQL database (it should be empty).
    pub db: Option<String>,
    /// Kills to measure.
    pub rounds: u32,
    /// The servers' `--node-timeout`.
    pub node_timeout: Duration,
    /// Print progress to stderr.
    pub progress: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            db: None,
            rounds: 5,
            node_timeout: Duration::from_secs(5),
            progress: false,
        }
    }
}

/// What a takeover run measured.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TakeoverReport {
    /// Always `takeover`.
    pub workload: String,
    /// Servers in the cluster.
    pub nodes: usize,
    /// The servers' `--node-timeout`, in milliseconds.
    pub node_timeout_ms: u64,
    /// SIGKILL of the leader → a standby answered a start `201`, per round,
    /// in milliseconds.
    pub takeover_ms: Vec<f64>,
    /// Their median.
    pub median_ms: f64,
    /// Their maximum.
    pub max_ms: f64,
    /// The bar: `--node-timeout` + 1 s, in milliseconds.
    pub bar_ms: f64,
    /// Whether the median is within the bar.
    pub within_bar: bool,
}

impl TakeoverReport {
    /// The one-line summary.
    pub fn line(&self) -> String {
        let rounds: Vec<String> = self.takeover_ms.iter().map(|t| format!("{t:.0}")).collect();
        format!(
            "orbit bench takeover: nodes={} node_timeout={}ms rounds={} | SIGKILL of the leader -> \
             a standby accepts a start: median {:.0}ms max {:.0}ms (bar {:.0}ms: {}) | rounds ms [{}]",
            self.nodes,
            self.node_timeout_ms,
            self.takeover_ms.len(),
            self.median_ms,
            self.max_ms,
            self.bar_ms,
            if self.within_bar { "met" } else { "missed" },
            rounds.join(", ")
        )
    }
}

/// The median of `values` (not empty).
fn median(values: &[f64]) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n == 0 {
        return 0.0;
    }
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

fn spawn(
    store: &Store,
    i: usize,
    generation: u32,
    node_timeout: Duration,
) -> Result<ServerProcess, BenchError> {
    let extra = vec![
        "--cluster".to_owned(),
        "--node-id".to_owned(),
        format!("bench-{i}"),
        "--node-timeout".to_owned(),
        format!("{}ms", node_timeout.as_millis()),
    ];
    let log = store.dir.join(format!("node-{i}-{generation}.log"));
    ServerProcess::spawn(&store.url, &extra, &log)
}

/// Waits until the process answers `/healthz`.
async fn wait_up(http: &reqwest::Client, node: &ServerProcess) -> Result<(), BenchError> {
    let deadline = Instant::now() + process::READY_TIMEOUT;
    while Instant::now() < deadline {
        if let Ok(r) = http.get(format!("{}/healthz", node.url)).send().await {
            if r.status().is_success() {
                return Ok(());
            }
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Err(BenchError::Server(format!("{} did not come up", node.url)))
}

/// The index of the node answering `/readyz` 200 (the leader), waiting up
/// to `within`.
async fn leader(
    http: &reqwest::Client,
    nodes: &[ServerProcess],
    within: Duration,
) -> Result<usize, BenchError> {
    let deadline = Instant::now() + within;
    loop {
        for (i, n) in nodes.iter().enumerate() {
            if let Ok(r) = http.get(format!("{}/readyz", n.url)).send().await {
                if r.status().is_success() {
                    return Ok(i);
                }
            }
        }
        if Instant::now() >= deadline {
            return Err(BenchError::Server("no node became leader".into()));
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Runs the takeover workload.
pub async fn run(config: &Config) -> Result<TakeoverReport, BenchError> {
    let db = match config.db.as_deref() {
        Some(url) if is_postgres(url) => url,
        _ => {
            return Err(BenchError::Usage(
                "the takeover workload runs a --cluster, which needs PostgreSQL: \
                 --db postgres://USER@HOST/DB (an empty database)"
                    .into(),
            ))
        }
    };
    if config.rounds == 0 {
        return Err(BenchError::Usage("--rounds must be at least 1".into()));
    }
    let store = Store::new(Some(db))?;
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(2))
        .build()
        .map_err(|e| BenchError::Server(e.to_string()))?;
    let mut nodes = Vec::with_capacity(NODES);
    for i in 0..NODES {
        let node = spawn(&store, i, 0, config.node_timeout)?;
        wait_up(&http, &node).await?;
        nodes.push(node);
    }
    let settle = config.node_timeout * 4 + Duration::from_secs(30);
    let mut current = leader(&http, &nodes, settle).await?;
    process::deploy(&http, &nodes[current].url, &workload::source(1)).await?;
    let workflow = workload::workflow_name(1);
    let mut times = Vec::new();
    let mut started = 0u64;
    for round in 1..=config.rounds {
        for _ in 0..PER_ROUND {
            started += 1;
            let body = json!({"workflow": workflow, "input": {"n": started}});
            process::call(
                &http,
                reqwest::Method::POST,
                &format!("{}/v1/executions", nodes[current].url),
                Some(&body),
            )
            .await
            .map_err(BenchError::Server)?;
        }
        // Kill at a random point of the renewal period, as a crash would.
        let phase = config.node_timeout / 4;
        let jitter = u64::try_from(phase.as_millis()).unwrap_or(1).max(1);
        let offset = uuid::Uuid::new_v4().as_u128() as u64 % jitter;
        tokio::time::sleep(Duration::from_millis(offset)).await;
        let killed = Instant::now();
        nodes[current].kill()?;
        let taken = 'probe: loop {
            for (i, n) in nodes.iter().enumerate() {
                if i == current {
                    continue;
                }
                started += 1;
                let body = json!({"workflow": workflow, "input": {"n": started}});
                let answer = http
                    .post(format!("{}/v1/executions", n.url))
                    .json(&body)
                    .send()
                    .await;
                if answer.is_ok_and(|r| r.status().as_u16() == 201) {
                    break 'probe (i, killed.elapsed());
                }
            }
            if killed.elapsed() > settle {
                return Err(BenchError::Server(format!(
                    "no standby took over within {}s",
                    settle.as_secs()
                )));
            }
            tokio::time::sleep(PROBE_EVERY).await;
        };
        let (next, elapsed) = taken;
        times.push(process::millis(elapsed));
        if config.progress {
            eprintln!(
                "round {round}: bench-{current} killed, bench-{next} accepted a start after {:.0}ms",
                process::millis(elapsed)
            );
        }
        let restarted = spawn(&store, current, round, config.node_timeout)?;
        wait_up(&http, &restarted).await?;
        nodes[current] = restarted;
        current = next;
        // Let the restarted node settle as a standby before the next kill.
        tokio::time::sleep(config.node_timeout / 2).await;
    }
    let node_timeout_ms = u64::try_from(config.node_timeout.as_millis()).unwrap_or(u64::MAX);
    let bar_ms = node_timeout_ms as f64 + 1_000.0;
    let median_ms = median(&times);
    Ok(TakeoverReport {
        workload: "takeover".to_owned(),
        nodes: NODES,
        node_timeout_ms,
        max_ms: times.iter().copied().fold(0.0, f64::max),
        takeover_ms: times,
        median_ms,
        bar_ms,
        within_bar: median_ms <= bar_ms,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert_eq!(median(&[]), 0.0);
    }
}
