//! `orbit server`: opens the store, recovers, serves the HTTP API until
//! SIGTERM or ctrl-c, then finishes the commit in flight and exits.

use crate::api::auth::AuthConfig;
use crate::api::{self, limits, AppState, DEFAULT_MAX_BODY};
use crate::cli::common::parse_duration;
use orbit_core::engine::Config;
use orbit_io_tokio::builtin::{self, allow::AllowPattern};
use orbit_io_tokio::driver::{self, Driver};
use orbit_io_tokio::storage::{
    PostgresOptions, PostgresStore, SqliteOptions, SqliteStore, Storage,
};
use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

/// `orbit server` options.
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// Database URL: `sqlite://PATH` (created on first start) or
    /// `postgres://USER@HOST:PORT/DB` (the database must exist).
    #[arg(long, env = "ORBIT_DB", default_value = "sqlite://orbit.db")]
    pub db: String,
    /// Address to listen on. Non-loopback addresses need `--auth` (or
    /// `--insecure`).
    #[arg(long, default_value = "127.0.0.1:7373")]
    pub listen: String,
    /// A worker session silent for longer is lost and its tasks redelivered
    /// (seconds, or with a unit: 500ms, 5s, 2m, 1h).
    #[arg(long, default_value = "30", value_parser = parse_duration)]
    pub session_timeout: Duration,
    /// Cap on running or compensating executions; more wait `pending`.
    #[arg(long)]
    pub max_active_executions: Option<u64>,
    /// Group commits written at once: 2 overlaps the store with the engine;
    /// 1 makes the fewest, largest transactions.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u64).range(1..=16))]
    pub commits_in_flight: u64,
    /// Largest request body accepted, in bytes.
    #[arg(long, default_value_t = DEFAULT_MAX_BODY)]
    pub max_body: usize,
    /// How long API idempotency records are kept.
    #[arg(long, default_value = "24h", value_parser = parse_duration)]
    pub idempotency_ttl: Duration,
    /// Delete finished executions (with their children, histories and
    /// queue rows) once their last event is older than this; `0` (the
    /// default) keeps every history forever.
    #[arg(long, default_value = "0", value_parser = parse_duration)]
    pub retention: Duration,
    /// How many finished executions stay in the engine's memory after they
    /// end (the most recent ones); the others are read from the store.
    #[arg(long, default_value_t = orbit_core::engine::FINISHED_CACHE)]
    pub finished_cache: usize,
    /// Auth file (TOML): named tokens with roles admin, client or worker,
    /// stored as SHA-256 hex. Without it every request is allowed.
    #[arg(long, env = "ORBIT_AUTH")]
    pub auth: Option<std::path::PathBuf>,
    /// Allow binding a non-loopback address without authentication.
    #[arg(long)]
    pub insecure: bool,
    /// Most client connections open at once (more wait to be accepted).
    #[arg(long, default_value_t = limits::DEFAULT_MAX_CONNECTIONS)]
    pub max_connections: usize,
    /// Time a client has to send a request's headers; idle keep-alive
    /// connections are closed after it too.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub header_timeout: Duration,
    /// Time a client has to send a request's body.
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    pub body_timeout: Duration,
    /// Hosts the built-in task `orbit.http` may call (repeatable): a host
    /// name or IP address, optionally `:port`; `*` stands for one DNS label
    /// (`*.example.com:443`). Nothing is allowed by default.
    #[arg(long = "http-allow", value_name = "PATTERN", value_parser = parse_allow)]
    pub http_allow: Vec<AllowPattern>,
    /// Requests of the built-in task `orbit.http` in flight at most.
    #[arg(long, default_value_t = builtin::DEFAULT_CONCURRENCY as u64, value_parser = clap::value_parser!(u64).range(1..=4096))]
    pub http_concurrency: u64,
    /// Cap on an `orbit.http` request's `timeout` (the default is 30s).
    #[arg(long, default_value = "5m", value_parser = parse_duration)]
    pub http_timeout_max: Duration,
    /// Largest `orbit.http` response body read, in bytes.
    #[arg(long, default_value_t = 1024 * 1024)]
    pub http_max_response: usize,
    /// Export trace spans with OTLP over HTTP/protobuf to `URL/v1/traces`
    /// (best effort; dropped spans are counted in /metrics).
    #[arg(long, value_name = "URL", env = "ORBIT_OTLP_ENDPOINT")]
    pub otlp_endpoint: Option<String>,
    /// Log lines as human-readable text or as one JSON object per line
    /// (lines about an execution carry `execution_id`).
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
}

/// `--log-format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line: `timestamp`, `level`, `fields` (with
    /// `message`), `target`.
    Json,
}

fn parse_allow(text: &str) -> Result<AllowPattern, String> {
    AllowPattern::parse(text)
}

impl Args {
    /// The built-in HTTP task's settings from the `--http-*` flags.
    pub fn http_options(&self) -> Result<builtin::HttpOptions, ServerError> {
        if self.http_timeout_max.is_zero() || self.http_max_response == 0 {
            return Err(ServerError::Usage(
                "--http-timeout-max and --http-max-response must be positive".into(),
            ));
        }
        let defaults = builtin::HttpOptions::default();
        Ok(builtin::HttpOptions {
            allow: self.http_allow.clone(),
            concurrency: usize::try_from(self.http_concurrency).unwrap_or(1),
            default_timeout: defaults.default_timeout.min(self.http_timeout_max),
            max_timeout: self.http_timeout_max,
            max_response_bytes: self.http_max_response,
            ..defaults
        })
    }
}

/// Why the server could not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// A flag's value is not usable.
    #[error("{0}")]
    Usage(String),
    /// The store could not be opened or recovered.
    #[error("storage: {0}")]
    Storage(#[from] orbit_io_tokio::storage::StorageError),
    /// The socket could not be bound or served.
    #[error("network: {0}")]
    Io(#[from] std::io::Error),
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Resolves `--listen` and refuses non-loopback addresses unless `insecure`.
pub fn listen_addr(listen: &str, insecure: bool) -> Result<SocketAddr, ServerError> {
    let addr: SocketAddr = listen.parse().map_err(|_| {
        ServerError::Usage(format!(
            "--listen `{listen}` is not an address like 127.0.0.1:7373"
        ))
    })?;
    if !addr.ip().is_loopback() && !insecure {
        return Err(ServerError::Usage(format!(
            "refusing to listen on non-loopback address {addr} without authentication; \
             pass --insecure to do it anyway"
        )));
    }
    Ok(addr)
}

/// Opens the store named by `url`.
pub async fn open_store(url: &str) -> Result<Arc<dyn Storage>, ServerError> {
    if url.starts_with("sqlite:") {
        let store = SqliteStore::open(&SqliteOptions::new(url)).await?;
        Ok(Arc::new(store))
    } else if url.starts_with("postgres:") || url.starts_with("postgresql:") {
        let store = PostgresStore::open(&PostgresOptions::new(url)).await?;
        Ok(Arc::new(store))
    } else {
        Err(ServerError::Usage(format!(
            "--db `{url}`: expected sqlite://PATH or postgres://USER@HOST/DB"
        )))
    }
}

/// Runs the server until a shutdown signal.
pub async fn serve(args: Args) -> Result<(), ServerError> {
    if args.max_body == 0 {
        return Err(ServerError::Usage("--max-body must be at least 1".into()));
    }
    if args.session_timeout.is_zero() {
        return Err(ServerError::Usage(
            "--session-timeout must be positive".into(),
        ));
    }
    let auth = match &args.auth {
        Some(path) => Some(Arc::new(
            AuthConfig::load(path).map_err(|e| ServerError::Usage(e.to_string()))?,
        )),
        None => None,
    };
    let addr = listen_addr(&args.listen, args.insecure || auth.is_some())?;
    let http_options = args.http_options()?;
    let store = open_store(&args.db).await?;
    let options = driver::Options {
        engine: Config {
            session_timeout_ms: millis(args.session_timeout),
            max_active_executions: args.max_active_executions,
            idempotency_ttl_ms: millis(args.idempotency_ttl),
            epoch: None,
            finished_cache: args.finished_cache,
        },
        commits_in_flight: usize::try_from(args.commits_in_flight).unwrap_or(1),
        ..driver::Options::default()
    };
    let driver = Driver::start(store, options).await?;
    let state = AppState {
        driver: driver.clone(),
        max_body: args.max_body,
    };
    let purge = tokio::spawn(purge_expired(driver.store().clone()));
    let retention = (!args.retention.is_zero()).then(|| {
        tracing::info!(retention = ?args.retention, "deleting finished executions older than the retention");
        tokio::spawn(orbit_server::retention::run(
            driver.store().clone(),
            args.retention,
        ))
    });
    let allowed: Vec<String> = http_options.allow.iter().map(|p| p.to_string()).collect();
    let http = builtin::spawn(driver.clone(), http_options).map_err(ServerError::Usage)?;
    tracing::info!(allow = ?allowed, "built-in task orbit.http ready");
    if let Some(endpoint) = &args.otlp_endpoint {
        orbit_io_tokio::telemetry::spawn(
            &driver,
            orbit_io_tokio::telemetry::TraceOptions::new(endpoint),
        )
        .map_err(ServerError::Usage)?;
        tracing::info!(%endpoint, "exporting trace spans (OTLP/HTTP protobuf)");
    }
    if args.max_connections == 0 || args.header_timeout.is_zero() || args.body_timeout.is_zero() {
        return Err(ServerError::Usage(
            "--max-connections, --header-timeout and --body-timeout must be positive".into(),
        ));
    }
    let api_options = api::Options {
        auth,
        body_timeout: args.body_timeout,
        ..api::Options::default()
    };
    let connection_limits = limits::ConnectionLimits {
        max_connections: args.max_connections,
        header_timeout: args.header_timeout,
    };
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    tracing::info!(db = %args.db, "orbit server listening on http://{bound}");
    if args.log_format == LogFormat::Text {
        // With JSON logs, stderr holds JSON lines only (the line above).
        eprintln!("orbit server listening on http://{bound}");
        eprintln!("web console at http://{bound}/ui");
    }
    // On a signal, stop the engine first: parked long polls and waits are
    // answered 503 at once instead of holding the shutdown for minutes.
    let stopping = driver.clone();
    limits::serve(
        listener,
        api::app_with(state, api_options),
        connection_limits,
        async move {
            shutdown_signal().await;
            tracing::info!("shutting down");
            stopping.shutdown().await;
        },
    )
    .await;
    purge.abort();
    if let Some(r) = retention {
        r.abort();
    }
    driver.shutdown().await;
    http.abort();
    Ok(())
}

/// How often expired idempotency records are deleted.
const PURGE_EVERY: Duration = Duration::from_secs(60);

/// Deletes expired idempotency records now and then, off the request path.
async fn purge_expired(store: Arc<dyn Storage>) {
    let mut tick = tokio::time::interval(PURGE_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
            .unwrap_or(0);
        match store.purge_idempotency(now).await {
            Ok(0) => {}
            Ok(n) => tracing::debug!(purged = n, "expired idempotency records deleted"),
            Err(e) => tracing::warn!(error = %e, "cannot purge idempotency records"),
        }
    }
}

async fn shutdown_signal() {
    let ctrl_c = async {
        if let Err(e) = tokio::signal::ctrl_c().await {
            tracing::warn!(error = %e, "cannot listen for ctrl-c");
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {}
        _ = term => {}
    }
}

/// `orbit server`: exit 0 after a clean shutdown, 2 on usage, storage or
/// network errors.
pub fn run(args: Args) -> ExitCode {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let logs = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _ = match args.log_format {
        LogFormat::Text => logs.try_init(),
        LogFormat::Json => logs.json().try_init(),
    };
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            return ExitCode::from(2);
        }
    };
    match runtime.block_on(serve(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
    }
}
