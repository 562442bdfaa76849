//! `orbit bench`: the load generator. Parses the flags into the
//! configuration of the workload asked for (`chain`: throughput and latency,
//! [`bench::Config`](orbit_server::bench::Config); `recovery`: kill -9 and
//! restart; `sleepers`: memory of sleeping executions), runs it, and prints
//! the result as one line of text (or JSON with `--json`); progress goes to
//! stderr.

use crate::cli::common::parse_duration;
use crate::cli::server::commits_in_flight;
use orbit_core::engine::Config as EngineConfig;
use orbit_io_tokio::driver;
use orbit_server::bench::{self, history, recovery, sleepers, takeover, BenchError, Config};
use serde::Serialize;
use std::process::ExitCode;
use std::time::Duration;

/// The workloads `orbit bench` runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Workload {
    /// A chain of task steps: steps/s, executions/s, latency percentiles.
    Chain,
    /// Executions in flight (10,000 by default), the server killed with
    /// SIGKILL and restarted: time to ready, then to every one completed.
    Recovery,
    /// Executions asleep in `sleep 1h` (100,000 by default): the server's
    /// resident memory.
    Sleepers,
    /// Three `orbit server --cluster` on one PostgreSQL (`--db`): the leader
    /// killed with SIGKILL `--rounds` times; time until a standby accepts a
    /// start (median, max).
    Takeover,
    /// Finished executions (100,000 by default) written straight into the
    /// store, then the server restarted: time to ready, memory at idle, and
    /// p50/p99 of status, history and list-page reads.
    History,
}

/// `orbit bench` options.
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// What to measure. `recovery` and `sleepers` run the server as a child
    /// process (this executable's `orbit server`), so they refuse `--server`.
    #[arg(long, value_enum, default_value_t = Workload::Chain)]
    pub workload: Workload,
    /// Store of the in-process server (`sqlite://PATH` or `postgres://...`);
    /// default: a fresh SQLite file in the temporary directory, removed after.
    #[arg(long, conflicts_with = "server")]
    pub db: Option<String>,
    /// Drive a running server at this URL instead of starting one; several
    /// comma-separated URLs drive the servers of a shared-mode cluster
    /// (starts and workers spread over them in turn).
    #[arg(long)]
    pub server: Option<String>,
    /// Executions to run in all (default 2,000; recovery 10,000; sleepers
    /// and history 100,000).
    #[arg(long)]
    pub executions: Option<u64>,
    /// Executions in flight at once (recovery, sleepers: start requests in
    /// flight at once).
    #[arg(long, default_value_t = 200)]
    pub concurrency: u32,
    /// Task steps per workflow, run one after another (default 3; recovery
    /// 4: two answered before the kill, the third held by a worker that
    /// never answers, about ten events per execution).
    #[arg(long)]
    pub steps: Option<u32>,
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
    /// Chain: about this many bytes of JSON in each execution's input (a
    /// `pad` list of short strings next to `n`, which no step reads), to
    /// see what an input of that size costs.
    #[arg(long, default_value_t = 0)]
    pub input_bytes: usize,
    /// Chain: the workers report each result with its own
    /// `POST /v1/tasks/{token}/result` instead of on their polls (the
    /// protocol before results rode on polls), for comparison.
    #[arg(long)]
    pub legacy_results: bool,
    /// In-process server: cap on running executions (`--max-active-executions`).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub max_active_executions: Option<u64>,
    /// In-process server: how often time is fed to the engine, in milliseconds.
    #[arg(long, default_value_t = 100)]
    pub tick_ms: u64,
    /// In-process server: group commits written at once
    /// (`--commits-in-flight`; default: 1 on SQLite, 2 on PostgreSQL).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=16))]
    pub commits_in_flight: Option<u64>,
    /// Recovery: session timeout of the restarted server, the grace before
    /// the killed run's held tasks are handed out again (500ms, 5s, 1m).
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    pub session_timeout: Duration,
    /// Takeover: leader kills to measure.
    #[arg(long, default_value_t = 5)]
    pub rounds: u32,
    /// Takeover: the servers' `--node-timeout`.
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    pub node_timeout: Duration,
    /// Sleepers: do not kill and restart the server after measuring it.
    #[arg(long)]
    pub no_restart: bool,
    /// Sleepers: the server's `--idle-evict`; the workload measures again
    /// once every sleeper has left memory.
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    pub idle_evict: Duration,
    /// Print the result as JSON instead of a line of text.
    #[arg(long)]
    pub json: bool,
    /// No progress lines on stderr.
    #[arg(long)]
    pub quiet: bool,
}

/// Runs the benchmark: exit 0 when every execution completed (or, for
/// `sleepers`, fell asleep), 1 when some did not, 2 on usage or set-up
/// errors.
pub fn run(args: Args) -> ExitCode {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("error")),
        )
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr)
        .try_init();
    if args.workload != Workload::Chain && args.server.is_some() {
        eprintln!(
            "error: --server drives a running server; the recovery, sleepers, takeover and history workloads start their own"
        );
        return ExitCode::from(2);
    }
    let runtime = match orbit_server::runtime::build_load() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            return ExitCode::from(2);
        }
    };
    let json = args.json;
    match args.workload {
        Workload::Chain => {
            let (config, options) = chain_config(args);
            let result = runtime.block_on(bench::run(&config, options));
            finish(
                result,
                json,
                |r| r.line(),
                |r| r.errors == 0 && r.completed == r.executions,
            )
        }
        Workload::Recovery => {
            let config = recovery::Config {
                db: args.db,
                executions: args.executions.unwrap_or(10_000),
                steps: args.steps.unwrap_or(4),
                concurrency: args.concurrency,
                workers: args.workers,
                session_timeout: args.session_timeout,
                progress: !args.quiet,
            };
            let result = runtime.block_on(recovery::run(&config));
            finish(
                result,
                json,
                |r| r.line(),
                |r| r.errors == 0 && r.completed == r.executions,
            )
        }
        Workload::Sleepers => {
            let config = sleepers::Config {
                db: args.db,
                executions: args.executions.unwrap_or(100_000),
                concurrency: args.concurrency,
                restart: !args.no_restart,
                idle_evict: args.idle_evict,
                progress: !args.quiet,
            };
            let result = runtime.block_on(sleepers::run(&config));
            finish(
                result,
                json,
                |r| r.line(),
                |r| r.errors == 0 && r.asleep == r.executions && r.sample_asleep == r.sampled,
            )
        }
        Workload::Takeover => {
            let config = takeover::Config {
                db: args.db,
                rounds: args.rounds,
                node_timeout: args.node_timeout,
                progress: !args.quiet,
            };
            let rounds = args.rounds as usize;
            let result = runtime.block_on(takeover::run(&config));
            finish(
                result,
                json,
                |r| r.line(),
                |r| r.takeover_ms.len() == rounds,
            )
        }
        Workload::History => {
            let config = history::Config {
                db: args.db,
                executions: args.executions.unwrap_or(100_000),
                progress: !args.quiet,
            };
            let result = runtime.block_on(history::run(&config));
            finish(result, json, |r| r.line(), |r| r.errors == 0)
        }
    }
}

/// The chain workload's configuration and in-process server options.
fn chain_config(args: Args) -> (Config, driver::Options) {
    let in_flight = commits_in_flight(
        args.db.as_deref().unwrap_or("sqlite:"),
        args.commits_in_flight,
    );
    let config = Config {
        db: args.db,
        server: args.server,
        executions: args.executions.unwrap_or(2_000),
        concurrency: args.concurrency,
        steps: args.steps.unwrap_or(3),
        workers: args.workers,
        worker_concurrency: args.worker_concurrency,
        poll_wait_ms: args.poll_wait_ms,
        rate: args.rate,
        input_bytes: args.input_bytes,
        legacy_results: args.legacy_results,
        progress: !args.quiet,
    };
    let options = driver::Options {
        engine: EngineConfig {
            max_active_executions: args.max_active_executions,
            ..EngineConfig::default()
        },
        tick: std::time::Duration::from_millis(args.tick_ms.max(1)),
        commits_in_flight: usize::try_from(in_flight).unwrap_or(1),
        membership: None,
    };
    (config, options)
}

/// Prints a report (a line, or JSON) and picks the exit code.
fn finish<R: Serialize>(
    result: Result<R, BenchError>,
    json: bool,
    line: impl Fn(&R) -> String,
    success: impl Fn(&R) -> bool,
) -> ExitCode {
    match result {
        Ok(report) => {
            if json {
                match serde_json::to_string_pretty(&report) {
                    Ok(text) => out!("{text}"),
                    Err(e) => {
                        eprintln!("error: {e}");
                        return ExitCode::from(2);
                    }
                }
            } else {
                out!("{}", line(&report));
            }
            if success(&report) {
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
