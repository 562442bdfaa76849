//! `orbit dev`: the quick start in one command. Starts a server in this
//! process on an embedded SQLite file, runs the example workers (written
//! with the SDK) for `examples/order.orbit`, deploys it, and — unless
//! `--no-demo` — runs one order that completes and one whose payment is
//! declined so that its reservations are compensated, printing both
//! histories. Then it keeps serving until ctrl-c (or exits, with `--exit`).

mod workers;

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use orbit_core::engine::Config;
use orbit_io_tokio::driver::{self, Driver};
use serde_json::json;

use super::common::{parse_duration, EXIT_FAILED, EXIT_OK, EXIT_USAGE};
use super::run::{describe_error, wait_for};
use super::server::{commits_in_flight, is_postgres, listen_addr, open_store};
use crate::api::{self, AppState};
use orbit_io_tokio::storage::claim;
use orbit_sdk::{Client, SourceFile, StartOptions, Status, DEFAULT_SERVER};

/// The example workflow file, built into the binary so `orbit dev` works
/// from any directory.
const ORDER_EXAMPLE: &str = include_str!("../../../examples/order.orbit");

/// `orbit dev` options.
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// Database URL of the embedded store.
    #[arg(long, default_value = "sqlite://orbit-dev.db")]
    pub db: String,
    /// Address to listen on (loopback only).
    #[arg(long, default_value = "127.0.0.1:7373")]
    pub listen: String,
    /// Session timeout of the embedded server (seconds, or 500ms, 5s, 2m).
    #[arg(long, default_value = "10", value_parser = parse_duration)]
    pub session_timeout: Duration,
    /// Only deploy the example and serve; do not run the two demo orders.
    #[arg(long)]
    pub no_demo: bool,
    /// Exit after the demo instead of serving until ctrl-c.
    #[arg(long)]
    pub exit: bool,
    /// Use the server at this URL instead of starting one (the workers, the
    /// deploy and the demo run against it; `--db` then only places the
    /// example wallet).
    #[arg(long)]
    pub server: Option<String>,
}

/// Runs `orbit dev`: exit 0 when the demo went as expected, 1 when it did
/// not, 2 when the server could not start.
pub fn run(args: Args) -> ExitCode {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr)
        .try_init();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            return ExitCode::from(EXIT_USAGE);
        }
    };
    match runtime.block_on(dev(args)) {
        Ok(code) => ExitCode::from(code),
        Err(message) => {
            eprintln!("error: {message}");
            ExitCode::from(EXIT_USAGE)
        }
    }
}

async fn dev(args: Args) -> Result<u8, String> {
    let embedded = match &args.server {
        Some(_) => None,
        None => Some(Embedded::start(&args).await?),
    };
    let url = match (&embedded, &args.server) {
        (Some(e), _) => e.url.clone(),
        (None, Some(url)) => url.trim_end_matches('/').to_string(),
        (None, None) => return Err("no server".into()),
    };
    match &embedded {
        Some(_) => out!("orbit dev: server on {url}, store {}", args.db),
        None => out!("orbit dev: using the server at {url}"),
    }
    // Workers stop first (they unregister), then the server.
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);

    let wallet_url = workers::wallet_url(&args.db);
    let wallet = Arc::new(
        workers::Wallet::open(&wallet_url)
            .await
            .map_err(|e| format!("example wallet {wallet_url}: {e}"))?,
    );
    let mut running = Vec::new();
    for builder in workers::order_workers(&wallet) {
        let worker = builder
            .poll_wait(Duration::from_secs(5))
            .shutdown_grace(Duration::from_secs(5))
            .connect(&url)
            .map_err(|e| e.to_string())?;
        out!("  worker {} polling", worker.worker_id());
        let mut stop = stop_rx.clone();
        running.push(tokio::spawn(async move {
            let id = worker.worker_id().to_string();
            if let Err(e) = worker
                .run(async move {
                    let _ = stop.wait_for(|s| *s).await;
                })
                .await
            {
                eprintln!("worker {id} stopped: {e}");
            }
        }));
    }

    let client = Client::connect(&url).map_err(|e| e.to_string())?;
    let outcome = demo(&client, &args, &url, &wallet).await;

    let code = match outcome {
        Ok(code) => code,
        Err(message) => {
            eprintln!("error: {message}");
            EXIT_FAILED
        }
    };
    if !args.exit {
        let what = if embedded.is_some() {
            "serving on"
        } else {
            "workers polling"
        };
        out!("\n{what} {url}; press ctrl-c to stop");
        if embedded.is_some() {
            out!("web console: {url}/ui");
        }
        if let Err(e) = tokio::signal::ctrl_c().await {
            eprintln!("cannot listen for ctrl-c ({e}); stopping now");
        }
    }
    let _ = stop_tx.send(true);
    for worker in running {
        let _ = worker.await;
    }
    if let Some(embedded) = embedded {
        embedded.stop().await;
    }
    wallet.close().await;
    Ok(code)
}

/// The in-process server: driver, HTTP listener, and its stop switch.
struct Embedded {
    url: String,
    driver: Driver,
    server: tokio::task::JoinHandle<std::io::Result<()>>,
    stop: tokio::sync::watch::Sender<bool>,
    /// On PostgreSQL, the claim of the only server on the database.
    _claim: Option<claim::Claim>,
}

impl Embedded {
    async fn start(args: &Args) -> Result<Embedded, String> {
        let addr = listen_addr(&args.listen, false).map_err(|e| e.to_string())?;
        let claim = if is_postgres(&args.db) {
            let claim = claim::Claim::take(&args.db, claim::Use::Alone).await;
            Some(claim.map_err(|e| e.to_string())?)
        } else {
            None
        };
        let in_flight = commits_in_flight(&args.db, None);
        let store = open_store(&args.db, in_flight)
            .await
            .map_err(|e| e.to_string())?;
        let options = driver::Options {
            engine: Config {
                session_timeout_ms: u64::try_from(args.session_timeout.as_millis())
                    .unwrap_or(u64::MAX),
                ..Config::default()
            },
            commits_in_flight: usize::try_from(in_flight).unwrap_or(1),
            ..driver::Options::default()
        };
        let driver = Driver::start(store, options)
            .await
            .map_err(|e| format!("storage: {e}"))?;
        // `orbit.http` with the defaults: no host allowed (a step gets
        // HTTP_HOST_NOT_ALLOWED); use `orbit server --http-allow` for more.
        orbit_io_tokio::builtin::spawn(driver.clone(), Default::default())?;
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|e| format!("cannot listen on {addr}: {e}"))?;
        let bound = listener.local_addr().map_err(|e| e.to_string())?;
        let (stop, mut stopped) = tokio::sync::watch::channel(false);
        let app = api::app(AppState::new(driver.clone()));
        let server = tokio::spawn(async move {
            axum::serve(listener, app)
                .with_graceful_shutdown(async move {
                    let _ = stopped.wait_for(|s| *s).await;
                })
                .await
        });
        Ok(Embedded {
            url: format!("http://{bound}"),
            driver,
            server,
            stop,
            _claim: claim,
        })
    }

    async fn stop(self) {
        let _ = self.stop.send(true);
        match self.server.await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => eprintln!("server stopped with an error: {e}"),
            Err(e) => eprintln!("server task failed: {e}"),
        }
        self.driver.shutdown().await;
    }
}

/// Deploys the example and, unless `--no-demo`, runs the two orders.
async fn demo(
    client: &Client,
    args: &Args,
    url: &str,
    wallet: &workers::Wallet,
) -> Result<u8, String> {
    let deployed = client
        .deploy(&[SourceFile {
            filename: "examples/order.orbit".into(),
            source: ORDER_EXAMPLE.into(),
        }])
        .await
        .map_err(|e| format!("deploying the example: {e}"))?;
    out!("\ndeployed examples/order.orbit:");
    for w in &deployed.workflows {
        out!("  workflow {} {} {}", w.name, w.version, w.definition_hash);
    }
    let tasks: Vec<&str> = deployed.tasks.iter().map(|t| t.name.as_str()).collect();
    out!("  tasks {}", tasks.join(", "));

    if args.no_demo {
        print_next_steps(url, None);
        return Ok(EXIT_OK);
    }

    let good = run_order(
        client,
        "an order that completes",
        json!({
            "order_id": "o-1001", "amount": 250, "currency": "EUR",
            "items": [{"sku": "mug", "qty": 2}, {"sku": "tea", "qty": 1}]
        }),
        Status::Completed,
    )
    .await?;
    let bad = run_order(
        client,
        format!(
            "an order whose payment is declined (amount over {}): its reservations are released",
            workers::CARD_LIMIT
        )
        .as_str(),
        json!({
            "order_id": "o-1002", "amount": 5000, "currency": "EUR",
            "items": [{"sku": "lamp", "qty": 1}, {"sku": "desk", "qty": 1}]
        }),
        Status::Failed,
    )
    .await?;
    match wallet.effects().await {
        Ok(n) => out!(
            "\nthe example wallet ({}) holds {n} payment effect(s), one per idempotency key",
            workers::wallet_url(&args.db)
        ),
        Err(e) => eprintln!("cannot read the example wallet: {e}"),
    }
    print_next_steps(url, Some(&good.0));
    Ok(if good.1 && bad.1 {
        EXIT_OK
    } else {
        EXIT_FAILED
    })
}

/// Starts one order, waits for it, prints its outcome and history. Returns
/// its id and whether it ended as `expected`.
async fn run_order(
    client: &Client,
    title: &str,
    input: serde_json::Value,
    expected: Status,
) -> Result<(String, bool), String> {
    out!("\n== {title}");
    let started = client
        .start(StartOptions::new("Order", input))
        .await
        .map_err(|e| format!("starting an order: {e}"))?;
    let id = started.execution_id;
    out!("started {id}; waiting for it to end…");
    let execution = wait_for(client, &id, Duration::from_secs(60), false)
        .await
        .map_err(|e| format!("waiting for {id}: {e}"))?
        .ok_or_else(|| format!("{id} did not finish within 60 s"))?;
    match execution.status {
        Status::Completed => out!("{id} completed: {}", execution.output),
        other => out!("{id} {other}: {}", describe_error(&execution.error)),
    }
    let logs = crate::sdk::logs(client, &id)
        .await
        .map_err(|e| format!("reading the history of {id}: {e}"))?;
    out!("$ orbit logs {id}");
    out_raw!("{logs}");
    Ok((id, execution.status == expected))
}

fn print_next_steps(url: &str, example_id: Option<&str>) {
    let server = if url == DEFAULT_SERVER {
        String::new()
    } else {
        format!(" --server {url}")
    };
    out!("\nnext, in another terminal:");
    out!(
        "  orbit run Order{server} --wait --input '{{\"order_id\":\"o-7\",\"amount\":120,\"currency\":\"EUR\",\"items\":[{{\"sku\":\"pen\",\"qty\":3}}]}}'"
    );
    if let Some(id) = example_id {
        out!("  orbit logs {id}{server}");
    }
    out!("  orbit ls{server}");
    out!(
        "  (amounts over {} are declined and compensated)",
        workers::CARD_LIMIT
    );
}
