//! `orbit bench`, the load generator that is part of the product: it deploys
//! a chain workflow, keeps a number of executions in flight, answers their
//! tasks with real HTTP workers over loopback, and reports steps/s,
//! executions/s and latency percentiles. It starts its own server in this
//! process (over `--db`) or drives one at `--server URL`. The `recovery`,
//! `sleepers` and `takeover` workloads run servers as child processes
//! instead, to kill them and to read their memory.

pub mod history;
mod http;
mod load;
pub mod process;
pub mod recovery;
pub mod report;
pub mod sleepers;
pub mod takeover;
mod target;
pub mod workload;

pub use report::{Percentiles, Report};
pub use target::{open_store, Target};

use orbit_io_tokio::driver;
use orbit_io_tokio::storage::StorageError;

/// What to run.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// Store of the in-process server (`sqlite://PATH`, `postgres://...`);
    /// `None`: a fresh SQLite file in the temporary directory.
    pub db: Option<String>,
    /// Drive this running server instead of starting one (several,
    /// comma-separated: the servers of a shared-mode cluster, which starts
    /// and workers are spread over in turn).
    pub server: Option<String>,
    /// Executions to run in all.
    pub executions: u64,
    /// Executions in flight at once.
    pub concurrency: u32,
    /// Task steps per workflow (a chain).
    pub steps: u32,
    /// Worker sessions.
    pub workers: u32,
    /// Tasks one worker session holds at once (the `max_tasks` of its polls).
    pub worker_concurrency: u32,
    /// Long-poll wait of the workers, in milliseconds.
    pub poll_wait_ms: u64,
    /// Execution starts per second (`None`: as fast as the loop allows).
    pub rate: Option<f64>,
    /// About this many bytes of JSON padding in each execution's input (a
    /// `pad` list of short strings next to `n`; no step reads it).
    pub input_bytes: usize,
    /// Workers report each result with its own call (the protocol before
    /// results rode on polls), for comparison.
    pub legacy_results: bool,
    /// Print progress to stderr every second.
    pub progress: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            db: None,
            server: None,
            executions: 2_000,
            concurrency: 200,
            steps: 3,
            workers: 4,
            worker_concurrency: 64,
            poll_wait_ms: 1_000,
            rate: None,
            input_bytes: 0,
            legacy_results: false,
            progress: false,
        }
    }
}

/// Why a benchmark could not run.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// A setting is not usable.
    #[error("{0}")]
    Usage(String),
    /// The in-process server's store could not be opened.
    #[error("storage: {0}")]
    Storage(#[from] StorageError),
    /// A socket or file could not be used.
    #[error("io: {0}")]
    Io(#[from] std::io::Error),
    /// The server refused the set-up (deploy) or could not be reached.
    #[error("server: {0}")]
    Server(String),
}

impl Config {
    /// Checks the settings.
    pub fn validate(&self) -> Result<(), BenchError> {
        if self.db.is_some() && self.server.is_some() {
            return Err(BenchError::Usage(
                "--db and --server exclude each other: --server drives a running server".into(),
            ));
        }
        for (name, value) in [
            ("--concurrency", u64::from(self.concurrency)),
            ("--steps", u64::from(self.steps)),
            ("--workers", u64::from(self.workers)),
            ("--worker-concurrency", u64::from(self.worker_concurrency)),
            ("--executions", self.executions),
        ] {
            if value == 0 {
                return Err(BenchError::Usage(format!("{name} must be at least 1")));
            }
        }
        if let Some(rate) = self.rate {
            if !(rate.is_finite() && rate > 0.0) {
                return Err(BenchError::Usage("--rate must be a positive number".into()));
            }
        }
        Ok(())
    }
}

/// Runs one benchmark: starts (or reaches) the server, drives the load,
/// stops the in-process server, and returns what was measured.
pub async fn run(config: &Config, options: driver::Options) -> Result<Report, BenchError> {
    config.validate()?;
    let target = match &config.server {
        Some(urls) => Target::remote(urls.split(',').next().unwrap_or_default()),
        None => Target::start(config.db.as_deref(), options).await?,
    };
    // Several servers of a shared-mode cluster: starts and workers are
    // spread over them in turn.
    let bases: Vec<String> = match &config.server {
        Some(urls) => urls
            .split(',')
            .map(|u| u.trim().trim_end_matches('/').to_owned())
            .filter(|u| !u.is_empty())
            .collect(),
        None => vec![target.url.clone()],
    };
    let result = load::run(config, &bases, &target.backend).await;
    target.stop().await;
    result
}
