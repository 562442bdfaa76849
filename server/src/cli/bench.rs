//! `orbit bench`: the load generator. Parses the flags into a
//! [`bench::Config`](crate::bench::Config), runs it, and prints the result as
//! one line of text (or JSON with `--json`); progress goes to stderr.

use orbit_core::engine::Config as EngineConfig;
use orbit_io_tokio::driver;
use orbit_server::bench::{self, Config};
use std::process::ExitCode;

/// `orbit bench` options.
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// Store of the in-process server (`sqlite://PATH` or `postgres://...`);
    /// default: a fresh SQLite file in the temporary directory, removed after.
    #[arg(long, conflicts_with = "server")]
    pub db: Option<String>,
    /// Drive a running server at this URL instead of starting one.
    #[arg(long)]
    pub server: Option<String>,
    /// Executions to run in all.
    #[arg(long, default_value_t = 2_000)]
    pub executions: u64,
    /// Executions in flight at once.
    #[arg(long, default_value_t = 200)]
    pub concurrency: u32,
    /// Task steps per workflow (run one after another).
    #[arg(long, default_value_t = 3)]
    pub steps: u32,
    /// Worker sessions.
    #[arg(long, default_value_t = 4)]
    pub workers: u32,
    /// Tasks one worker session holds at once (its polls' `max_tasks`).
    #[arg(long, default_value_t = 64)]
    pub worker_concurrency: u32,
    /// Workers' long-poll wait, in milliseconds.
    #[arg(long, default_value_t = 1_000)]
    pub poll_wait_ms: u64,
    /// Execution starts per second (default: as fast as the concurrency allows).
    #[arg(long)]
    pub rate: Option<f64>,
    /// In-process server: cap on running executions (`--max-active-executions`).
    #[arg(long)]
    pub max_active_executions: Option<u64>,
    /// In-process server: how often time is fed to the engine, in milliseconds.
    #[arg(long, default_value_t = 100)]
    pub tick_ms: u64,
    /// Print the result as JSON instead of a line of text.
    #[arg(long)]
    pub json: bool,
    /// No progress lines on stderr.
    #[arg(long)]
    pub quiet: bool,
}

/// Runs the benchmark: exit 0 when every execution completed, 1 when some
/// did not, 2 on usage or set-up errors.
pub fn run(args: Args) -> ExitCode {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("error")),
        )
        .with_writer(std::io::stderr)
        .try_init();
    let config = Config {
        db: args.db,
        server: args.server,
        executions: args.executions,
        concurrency: args.concurrency,
        steps: args.steps,
        workers: args.workers,
        worker_concurrency: args.worker_concurrency,
        poll_wait_ms: args.poll_wait_ms,
        rate: args.rate,
        progress: !args.quiet,
    };
    let options = driver::Options {
        engine: EngineConfig {
            max_active_executions: args.max_active_executions,
            ..EngineConfig::default()
        },
        tick: std::time::Duration::from_millis(args.tick_ms.max(1)),
    };
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            return ExitCode::from(2);
        }
    };
    match runtime.block_on(bench::run(&config, options)) {
        Ok(report) => {
            if args.json {
                match serde_json::to_string_pretty(&report) {
                    Ok(text) => println!("{text}"),
                    Err(e) => {
                        eprintln!("error: {e}");
                        return ExitCode::from(2);
                    }
                }
            } else {
                println!("{}", report.line());
            }
            if report.errors == 0 && report.completed == report.executions {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            }
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
    }
}
