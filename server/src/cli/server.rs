//! `orbit server`: opens the store, recovers, serves the HTTP API until
//! SIGTERM or ctrl-c, then finishes the commit in flight and exits.

use crate::api::auth::AuthConfig;
use crate::api::{self, limits, AppState, DEFAULT_MAX_BODY};
use crate::cli::common::parse_duration;
use orbit_core::engine::Config;
use orbit_io_tokio::builtin::{self, allow::AllowPattern};
use orbit_io_tokio::driver::{self, Clock, Driver};
pub(super) use orbit_io_tokio::storage::is_postgres;
use orbit_io_tokio::storage::{
    claim, PostgresOptions, PostgresStore, SqliteOptions, SqliteStore, Storage, StorageError,
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
    /// At least 1 (a workflow's `max_active` too): a cap of 0 would start
    /// nothing, ever.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub max_active_executions: Option<u64>,
    /// Group commits written at once [default: 1 on SQLite, 2 on
    /// PostgreSQL]. A SQLite commit waiting only for its WAL sync does not
    /// count, so one keeps SQLite's single writer busy; PostgreSQL writes
    /// each on a commit connection of its own.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=16))]
    pub commits_in_flight: Option<u64>,
    /// Threads that serve requests and run the engine [default: on
    /// SQLite, one fewer than the machine's cores (at least 1), leaving a
    /// core to the commit thread and the disk syncs, which run on threads
    /// of their own; on PostgreSQL, the machine's cores].
    #[arg(long, env = "ORBIT_THREADS", value_parser = clap::value_parser!(u64).range(1..=1024))]
    pub threads: Option<u64>,
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
    /// A running execution that has waited this long for nothing but a
    /// timer, a signal or a cancel (nothing handed out or queued) leaves
    /// memory until its timer is due or a command names it; `0` keeps every
    /// running execution in memory.
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    pub idle_evict: Duration,
    /// Once more running executions than this are in memory, idle ones
    /// leave before `--idle-evict` has passed, least recently active first
    /// (busy ones stay); `0`: no cap. Applies only with `--idle-evict` on.
    #[arg(long, default_value_t = orbit_core::engine::MAX_IN_MEMORY)]
    pub max_in_memory_executions: usize,
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
    /// Run as one of several servers on the same PostgreSQL database. In
    /// leader mode one leader at a time holds a lease and serves the API;
    /// the others are standbys that answer `503 NOT_LEADER` and take over
    /// when the lease runs out. In shared mode every server executes
    /// workflows. PostgreSQL only.
    #[arg(long)]
    pub cluster: bool,
    /// How the servers of a cluster share the work: `leader` (one leader,
    /// standbys) or `shared` (every server owns the executions it starts
    /// and takes over those of a server that died).
    #[arg(long, value_enum, default_value_t = ClusterMode::Leader, requires = "cluster")]
    pub cluster_mode: ClusterMode,
    /// This server's id in the cluster (default: generated at start, stored
    /// nowhere, printed).
    #[arg(long, requires = "cluster", value_parser = parse_node_id)]
    pub node_id: Option<String>,
    /// The URL clients are sent to when this server leads (default:
    /// `http://` and the `--listen` address).
    #[arg(long, value_name = "URL", requires = "cluster", value_parser = parse_advertise)]
    pub advertise: Option<String>,
    /// Length of the leader's lease: a leader silent for longer is replaced,
    /// and a leader that cannot reach the database for longer steps down.
    /// Renewed every quarter of it. In shared mode: a server silent for
    /// longer is dead and the others take over its executions; a server
    /// that cannot reach the database for longer drops them.
    #[arg(long, default_value = "5s", value_parser = parse_duration, requires = "cluster")]
    pub node_timeout: Duration,
}

/// `--cluster-mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum ClusterMode {
    /// One leader serves; standbys wait to take over.
    #[default]
    Leader,
    /// Every server executes workflows: each running execution has one
    /// owner, and the others take over a dead server's executions.
    Shared,
}

fn parse_node_id(text: &str) -> Result<String, String> {
    let ok = !text.is_empty()
        && text.len() <= 128
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | ':'));
    if ok {
        Ok(text.to_owned())
    } else {
        Err("1 to 128 characters of A-Z a-z 0-9 - _ . :".to_owned())
    }
}

fn parse_advertise(text: &str) -> Result<String, String> {
    let url = url_scheme_ok(text)?;
    Ok(url.trim_end_matches('/').to_owned())
}

fn url_scheme_ok(text: &str) -> Result<&str, String> {
    let parsed = reqwest::Url::parse(text).map_err(|e| format!("not a URL: {e}"))?;
    if !matches!(parsed.scheme(), "http" | "https") || parsed.host_str().is_none() {
        return Err("expected http://HOST:PORT or https://HOST:PORT".to_owned());
    }
    Ok(text)
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

/// The listening socket; an error names the address it could not take.
async fn bind(addr: SocketAddr) -> Result<tokio::net::TcpListener, ServerError> {
    tokio::net::TcpListener::bind(addr).await.map_err(|e| {
        ServerError::Io(std::io::Error::new(
            e.kind(),
            format!("cannot listen on {addr}: {e}"),
        ))
    })
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

/// PostgreSQL settings for `url`: a commit connection per group commit in
/// flight.
fn postgres_options(url: &str, commits_in_flight: u64) -> PostgresOptions {
    PostgresOptions {
        writers: u32::try_from(commits_in_flight).unwrap_or(u32::MAX),
        ..PostgresOptions::new(url)
    }
}

/// Opens the store named by `url`, for a node that writes up to
/// `commits_in_flight` group commits at once.
pub async fn open_store(
    url: &str,
    commits_in_flight: u64,
) -> Result<Arc<dyn Storage>, ServerError> {
    if url.starts_with("sqlite:") {
        let store = SqliteStore::open(&SqliteOptions::new(url)).await?;
        Ok(Arc::new(store))
    } else if is_postgres(url) {
        let store = PostgresStore::open(&postgres_options(url, commits_in_flight)).await?;
        Ok(Arc::new(store))
    } else {
        Err(ServerError::Usage(format!(
            "--db `{url}`: expected sqlite://PATH or postgres://USER@HOST/DB"
        )))
    }
}

/// Group commits written at once on the store `url` unless `--commits-in-flight`
/// says otherwise: SQLite's one writer takes one at a time (the next starts
/// while the last waits for its sync); PostgreSQL gets two commit
/// connections.
pub fn commits_in_flight(url: &str, flag: Option<u64>) -> u64 {
    flag.unwrap_or(if is_postgres(url) { 2 } else { 1 })
}

/// Refuses flag combinations `--cluster` cannot run with.
fn check_cluster(args: &Args) -> Result<(), ServerError> {
    if !args.cluster {
        return Ok(());
    }
    if !is_postgres(&args.db) {
        return Err(ServerError::Usage(format!(
            "--cluster needs PostgreSQL: servers of a cluster share one PostgreSQL database \
             (--db postgres://USER@HOST/DB); `{}` cannot be shared",
            args.db
        )));
    }
    if args.node_timeout < Duration::from_millis(100) {
        return Err(ServerError::Usage(
            "--node-timeout must be at least 100ms".into(),
        ));
    }
    Ok(())
}

/// The driver's settings from the flags.
fn driver_options(args: &Args) -> driver::Options {
    driver::Options {
        engine: Config {
            session_timeout_ms: millis(args.session_timeout),
            max_active_executions: args.max_active_executions,
            idempotency_ttl_ms: millis(args.idempotency_ttl),
            epoch: None,
            node_id: None,
            finished_cache: args.finished_cache,
            idle_evict_ms: (!args.idle_evict.is_zero()).then(|| millis(args.idle_evict)),
            max_in_memory: (args.max_in_memory_executions > 0)
                .then_some(args.max_in_memory_executions),
            // The driver draws it (see `driver::Sources`).
            hash_seed: 0,
        },
        commits_in_flight: usize::try_from(commits_in_flight(&args.db, args.commits_in_flight))
            .unwrap_or(1),
        ..driver::Options::default()
    }
}

/// Starts what runs beside a driver: the idempotency purge, the built-in
/// task `orbit.http` and, with `--otlp-endpoint`, the trace export.
fn spawn_chores(
    driver: &Driver,
    http_options: &builtin::HttpOptions,
    otlp: Option<&str>,
    retention: Duration,
) -> Result<Vec<tokio::task::AbortHandle>, ServerError> {
    let purge = tokio::spawn(purge_expired(driver.store().clone(), driver.clock()));
    let mut chores = vec![purge.abort_handle()];
    if !retention.is_zero() {
        tracing::info!(retention = ?retention, "deleting finished executions older than the retention");
        let run = orbit_server::retention::run(driver.store().clone(), retention, driver.clock());
        chores.push(tokio::spawn(run).abort_handle());
    }
    let allowed: Vec<String> = http_options.allow.iter().map(|p| p.to_string()).collect();
    let http = builtin::spawn(driver.clone(), http_options.clone()).map_err(ServerError::Usage)?;
    tracing::info!(allow = ?allowed, "built-in task orbit.http ready");
    if let Some(endpoint) = otlp {
        orbit_io_tokio::telemetry::spawn(
            driver,
            orbit_io_tokio::telemetry::TraceOptions::new(endpoint),
        )
        .map_err(ServerError::Usage)?;
        tracing::info!(%endpoint, "exporting trace spans (OTLP/HTTP protobuf)");
    }
    chores.push(http.abort_handle());
    Ok(chores)
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
    check_cluster(&args)?;
    let auth = match &args.auth {
        Some(path) => Some(Arc::new(
            AuthConfig::load(path).map_err(|e| ServerError::Usage(e.to_string()))?,
        )),
        None => None,
    };
    let addr = listen_addr(&args.listen, args.insecure || auth.is_some())?;
    let http_options = args.http_options()?;
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
    if args.cluster && args.cluster_mode == ClusterMode::Shared {
        return serve_shared(args, addr, http_options, api_options, connection_limits).await;
    }
    if args.cluster {
        return serve_cluster(args, addr, http_options, api_options, connection_limits).await;
    }
    // One server without --cluster per PostgreSQL database (see `claim`).
    let claim = if is_postgres(&args.db) {
        Some(claim::Claim::take(&args.db, claim::Use::Alone).await?)
    } else {
        None
    };
    let store = open_store(
        &args.db,
        commits_in_flight(&args.db, args.commits_in_flight),
    )
    .await?;
    let driver = Driver::start(store, driver_options(&args)).await?;
    let state = AppState {
        driver: driver.clone(),
        max_body: args.max_body,
    };
    let chores = spawn_chores(
        &driver,
        &http_options,
        args.otlp_endpoint.as_deref(),
        args.retention,
    )?;
    let listener = bind(addr).await?;
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
    let (lost_tx, lost_rx) = tokio::sync::oneshot::channel();
    limits::serve(
        listener,
        api::app_with(state, api_options),
        connection_limits,
        async move {
            let lost = async {
                match claim {
                    Some(claim) => claim.lost(CLAIM_CHECK).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                () = shutdown_signal() => tracing::info!("shutting down"),
                why = lost => {
                    tracing::error!("{why}; stopping");
                    let _ = lost_tx.send(why);
                }
            }
            stopping.shutdown().await;
        },
    )
    .await;
    driver.shutdown().await;
    for chore in chores {
        chore.abort();
    }
    match lost_rx.await {
        Ok(why) => Err(StorageError::Unavailable(why).into()),
        Err(_) => Ok(()),
    }
}

/// How often a server checks the connection holding its claim on a
/// PostgreSQL database.
const CLAIM_CHECK: Duration = Duration::from_secs(5);

/// A `--cluster` member's shared claim on the database, kept (and taken
/// again after the database comes back) while the process runs.
async fn claim_as_member(db: &str) -> Result<(), ServerError> {
    let claim = claim::Claim::take(db, claim::Use::Cluster).await?;
    tokio::spawn(async move {
        let why = claim.lost(CLAIM_CHECK).await;
        tracing::error!("{why}");
    });
    Ok(())
}

/// `--cluster`: serves the node's front router while its supervisor runs
/// the lease and, when this node leads, a driver.
async fn serve_cluster(
    args: Args,
    addr: SocketAddr,
    http_options: builtin::HttpOptions,
    api_options: api::Options,
    connection_limits: limits::ConnectionLimits,
) -> Result<(), ServerError> {
    use orbit_io_tokio::storage::lease::{self, Store};
    use orbit_server::cluster::{self, supervisor, Node, NodeConfig};
    claim_as_member(&args.db).await?;
    let pg = PostgresStore::open(&postgres_options(
        &args.db,
        commits_in_flight(&args.db, args.commits_in_flight),
    ))
    .await?;
    // Fail on a bad URL now, not at the first renewal.
    let lease = lease::Postgres::connect(&args.db, args.node_timeout / 4)?;
    lease.read().await?;
    let listener = bind(addr).await?;
    let bound = listener.local_addr()?;
    let config = NodeConfig {
        node_id: args
            .node_id
            .clone()
            .unwrap_or_else(cluster::generated_node_id),
        advertise: args
            .advertise
            .clone()
            .unwrap_or_else(|| cluster::advertise_from_listen(bound)),
        node_timeout: args.node_timeout,
    };
    let node = Arc::new(Node::new(config.clone(), Arc::new(lease)));
    let otlp = args.otlp_endpoint.clone();
    let retention = args.retention;
    let chores: supervisor::Chores = Arc::new(move |driver: &Driver| {
        match spawn_chores(driver, &http_options, otlp.as_deref(), retention) {
            Ok(handles) => handles,
            Err(e) => {
                tracing::error!(error = %e, "cannot start the term's chores");
                Vec::new()
            }
        }
    });
    let settings = supervisor::TermSettings {
        store: Arc::new(move |fence| Arc::new(pg.fenced_by(fence)) as Arc<dyn Storage>),
        sources: driver::Sources::default(),
        driver: driver_options(&args),
        api: api_options.clone(),
        max_body: args.max_body,
        chores,
    };
    tracing::info!(
        node_id = %config.node_id,
        advertise = %config.advertise,
        node_timeout_ms = millis(config.node_timeout),
        "orbit server (cluster, leader mode) listening on http://{bound}"
    );
    if args.log_format == LogFormat::Text {
        eprintln!("orbit server listening on http://{bound}");
        eprintln!(
            "cluster node `{}` (leader mode), advertised as {}, --node-timeout {:?}",
            config.node_id, config.advertise, config.node_timeout
        );
    }
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let supervisor = tokio::spawn(supervisor::run(node.clone(), settings, stop_rx));
    let stop = stop_tx.clone();
    limits::serve(
        listener,
        cluster::router::router(node, api_options.auth.is_some()),
        connection_limits,
        async move {
            shutdown_signal().await;
            tracing::info!("shutting down");
            stop.send_replace(true);
        },
    )
    .await;
    stop_tx.send_replace(true);
    let _ = supervisor.await;
    Ok(())
}

/// `--cluster --cluster-mode shared`: one driver whose node loop is a
/// member of the shared cluster (it owns what it starts, reads its inbox,
/// claims tasks from the database's queue and takes over dead members'
/// executions), serving the whole API.
async fn serve_shared(
    args: Args,
    addr: SocketAddr,
    http_options: builtin::HttpOptions,
    api_options: api::Options,
    connection_limits: limits::ConnectionLimits,
) -> Result<(), ServerError> {
    use orbit_server::cluster;
    claim_as_member(&args.db).await?;
    let pg = Arc::new(
        PostgresStore::open(&postgres_options(
            &args.db,
            commits_in_flight(&args.db, args.commits_in_flight),
        ))
        .await?,
    );
    let listener = bind(addr).await?;
    let bound = listener.local_addr()?;
    let member = orbit_core::node::Member {
        node_id: args
            .node_id
            .clone()
            .unwrap_or_else(cluster::generated_node_id),
        advertise: args
            .advertise
            .clone()
            .unwrap_or_else(|| cluster::advertise_from_listen(bound)),
        node_timeout_ms: millis(args.node_timeout),
    };
    let mut options = driver_options(&args);
    options.membership = Some(driver::Membership {
        member: member.clone(),
        store: pg.clone(),
    });
    let driver = Driver::start(pg, options).await?;
    let state = AppState {
        driver: driver.clone(),
        max_body: args.max_body,
    };
    let chores = spawn_chores(
        &driver,
        &http_options,
        args.otlp_endpoint.as_deref(),
        args.retention,
    )?;
    tracing::info!(
        node_id = %member.node_id,
        advertise = %member.advertise,
        node_timeout_ms = member.node_timeout_ms,
        "orbit server (cluster, shared mode) listening on http://{bound}"
    );
    if args.log_format == LogFormat::Text {
        eprintln!("orbit server listening on http://{bound}");
        eprintln!(
            "cluster node `{}` (shared mode), advertised as {}, --node-timeout {:?}",
            member.node_id, member.advertise, args.node_timeout
        );
    }
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
    driver.shutdown().await;
    for chore in chores {
        chore.abort();
    }
    Ok(())
}

/// How often expired idempotency records are deleted.
const PURGE_EVERY: Duration = Duration::from_secs(60);

/// Deletes expired idempotency records now and then, off the request path,
/// judging expiry on the driver's clock.
async fn purge_expired(store: Arc<dyn Storage>, clock: Clock) {
    let mut tick = tokio::time::interval(PURGE_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        match store.purge_idempotency(clock()).await {
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
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr);
    let _ = match args.log_format {
        LogFormat::Text => logs.try_init(),
        LogFormat::Json => logs.json().try_init(),
    };
    let runtime = match orbit_server::runtime::build(&args.db, args.threads) {
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

#[cfg(test)]
mod tests {
    use super::commits_in_flight;

    #[test]
    fn one_commit_written_at_a_time_on_sqlite_two_on_postgres_unless_told() {
        assert_eq!(commits_in_flight("sqlite:///var/lib/orbit.db", None), 1);
        assert_eq!(commits_in_flight("postgres://orbit@db/orbit", None), 2);
        assert_eq!(commits_in_flight("postgresql://orbit@db/orbit", None), 2);
        assert_eq!(commits_in_flight("sqlite:///var/lib/orbit.db", Some(3)), 3);
        assert_eq!(commits_in_flight("postgres://orbit@db/orbit", Some(1)), 1);
    }
}
