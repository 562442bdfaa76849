//! The server a benchmark drives: one started in this process (driver + API
//! on a loopback port, over the store named by `--db`), or a running one at
//! `--server URL`. A server started here runs on a runtime of its own, on a
//! thread of its own, sized as `orbit server` sizes its runtime: the load
//! and the server then meet over loopback HTTP as they would as two
//! processes, and the figures are the server's.

use super::BenchError;
use crate::api::{self, AppState};
use crate::runtime;
use orbit_io_tokio::driver::{self, Driver};
use orbit_io_tokio::storage::{
    claim, is_postgres, PostgresOptions, PostgresStore, SqliteOptions, SqliteStore, Storage,
};
use std::path::PathBuf;
use std::sync::Arc;

/// A server the load is sent to.
pub struct Target {
    /// Its base URL (`http://127.0.0.1:PORT`).
    pub url: String,
    /// `sqlite`, `postgres` or `remote`.
    pub backend: String,
    local: Option<Local>,
}

struct Local {
    shutdown: tokio::sync::oneshot::Sender<()>,
    /// The server's thread, which ends once the server has stopped.
    thread: std::thread::JoinHandle<()>,
    scratch: Option<PathBuf>,
}

/// Opens the store named by `url` (`sqlite://PATH` or `postgres://...`),
/// for a node writing up to `commits_in_flight` group commits at once.
pub async fn open_store(
    url: &str,
    commits_in_flight: usize,
) -> Result<(Arc<dyn Storage>, &'static str), BenchError> {
    if url.starts_with("sqlite:") {
        let store = SqliteStore::open(&SqliteOptions::new(url)).await?;
        Ok((Arc::new(store), "sqlite"))
    } else if is_postgres(url) {
        let options = PostgresOptions {
            writers: u32::try_from(commits_in_flight).unwrap_or(u32::MAX),
            ..PostgresOptions::new(url)
        };
        let store = PostgresStore::open(&options).await?;
        Ok((Arc::new(store), "postgres"))
    } else {
        Err(BenchError::Usage(format!(
            "--db `{url}`: expected sqlite://PATH or postgres://..."
        )))
    }
}

impl Target {
    /// A running server at `url`.
    pub fn remote(url: &str) -> Target {
        Target {
            url: url.trim_end_matches('/').to_owned(),
            backend: "remote".to_owned(),
            local: None,
        }
    }

    /// Starts a server in this process over `db` (a fresh SQLite file in the
    /// temporary directory when `None`), listening on 127.0.0.1:0.
    pub async fn start(db: Option<&str>, options: driver::Options) -> Result<Target, BenchError> {
        let (url, scratch) = match db {
            Some(url) => (url.to_owned(), None),
            None => {
                let dir =
                    std::env::temp_dir().join(format!("orbit-bench-{}", uuid::Uuid::new_v4()));
                std::fs::create_dir_all(&dir)?;
                (
                    format!("sqlite://{}", dir.join("bench.db").display()),
                    Some(dir),
                )
            }
        };
        let (ready, started) = tokio::sync::oneshot::channel();
        let (shutdown, stop) = tokio::sync::oneshot::channel::<()>();
        let runtime = runtime::build(&url, None)?;
        let thread = std::thread::Builder::new()
            .name("orbit-bench-server".into())
            .spawn(move || runtime.block_on(serve(url, options, ready, stop)))?;
        let (url, backend) = match started.await {
            Ok(Ok(started)) => started,
            Ok(Err(e)) => {
                let _ = tokio::task::spawn_blocking(move || thread.join()).await;
                return Err(e);
            }
            Err(_) => return Err(BenchError::Server("the server's thread ended".into())),
        };
        Ok(Target {
            url,
            backend: backend.to_owned(),
            local: Some(Local {
                shutdown,
                thread,
                scratch,
            }),
        })
    }

    /// Stops an in-process server (and removes its scratch database).
    pub async fn stop(self) {
        if let Some(local) = self.local {
            let _ = local.shutdown.send(());
            let thread = local.thread;
            let _ = tokio::task::spawn_blocking(move || thread.join()).await;
            if let Some(dir) = local.scratch {
                let _ = std::fs::remove_dir_all(dir);
            }
        }
    }
}

/// Opens the store at `url`, starts the node and serves the API on
/// 127.0.0.1:0 until `stop`; `ready` gets the base URL and the backend, or
/// why the server could not start. Runs on the server's own runtime.
async fn serve(
    url: String,
    options: driver::Options,
    ready: tokio::sync::oneshot::Sender<Result<(String, &'static str), BenchError>>,
    stop: tokio::sync::oneshot::Receiver<()>,
) {
    // On PostgreSQL, the claim of the only server on the database: a
    // benchmark never runs beside a server that uses it. Held until the
    // server has stopped.
    let started = async {
        let claim = if is_postgres(&url) {
            Some(claim::Claim::take(&url, claim::Use::Alone).await?)
        } else {
            None
        };
        let (store, backend) = open_store(&url, options.commits_in_flight).await?;
        let driver = Driver::start(store, options).await?;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        Ok::<_, BenchError>((claim, backend, driver, listener, addr))
    }
    .await;
    let (claim, backend, driver, listener, addr) = match started {
        Ok(started) => started,
        Err(e) => {
            let _ = ready.send(Err(e));
            return;
        }
    };
    let app = api::app(AppState::new(driver.clone()));
    let _ = ready.send(Ok((format!("http://{addr}"), backend)));
    let served = axum::serve(listener, app)
        .with_graceful_shutdown(async {
            let _ = stop.await;
        })
        .await;
    if let Err(e) = served {
        tracing::warn!(error = %e, "bench server stopped");
    }
    driver.shutdown().await;
    drop(claim);
}
