//! [`Listener`] and [`serve`]: the real router served over turmoil's
//! simulated TCP, each connection a task of the host's `LocalSet`.
//!
//! Why not `axum::serve`: it spawns each connection with `tokio::spawn`,
//! and a crashed host's runtime drops its tasks shard by shard, the shard
//! being the task's id modulo four. Task ids come from one counter for the
//! whole process, so the order in which a crash closes connections (and
//! so the order in which workers see their polls fail) depended on how
//! many tasks earlier runs in the same process had spawned: a seed replayed
//! in a fresh process and the same seed run second in a test binary could
//! take different paths. A `LocalSet` keeps its tasks in one list and
//! drops them oldest first, so a crash closes connections in the order
//! they were accepted, whatever ran before.

use axum::Router;
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use std::io;
use std::time::Duration;

/// A bound turmoil listener.
pub struct Listener(turmoil::net::TcpListener);

impl std::fmt::Debug for Listener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Listener")
            .field(&self.0.local_addr().ok())
            .finish()
    }
}

impl Listener {
    /// Binds `addr` (`0.0.0.0:7373`) on the current simulated host.
    pub async fn bind(addr: &str) -> io::Result<Listener> {
        Ok(Listener(turmoil::net::TcpListener::bind(addr).await?))
    }

    async fn accept(&self) -> turmoil::net::TcpStream {
        loop {
            match self.0.accept().await {
                Ok((stream, _)) => return stream,
                // An accept error concerns one connection: wait and go on.
                Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
            }
        }
    }
}

/// Serves `router` on `listener` over HTTP/1.1 until the host stops. Must
/// run inside a turmoil host (its software runs on a `LocalSet`).
pub async fn serve(listener: Listener, router: Router) {
    loop {
        let stream = listener.accept().await;
        let service = TowerToHyperService::new(router.clone());
        tokio::task::spawn_local(async move {
            // A failed connection concerns its own requests only.
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}
