//! Protection against slow and idle clients: the connection loop of
//! `orbit server` (HTTP/1.1 with a cap on open connections and a deadline
//! for each request's headers, which also closes idle keep-alive
//! connections) and a deadline for reading each request's body, so a body
//! trickled byte by byte or a crowd of silent sockets cannot hold the server.

use axum::body::Body;
use axum::extract::Request;
use axum::middleware::Next;
use axum::response::Response;
use axum::Router;
use futures_util::{FutureExt, StreamExt};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

/// Default cap on open connections.
pub const DEFAULT_MAX_CONNECTIONS: usize = 1024;
/// Default time a client has to send a request's headers (and how long an
/// idle keep-alive connection is kept).
pub const DEFAULT_HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// Default time a client has to send a request's whole body.
pub const DEFAULT_BODY_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a shutdown waits for open requests.
const DRAIN: Duration = Duration::from_secs(10);

/// Connection limits of the server loop.
#[derive(Debug, Clone, Copy)]
pub struct ConnectionLimits {
    /// Most connections open at once; more wait in the listen backlog.
    pub max_connections: usize,
    /// Deadline for a request's headers, counted from when the connection
    /// is ready for them.
    pub header_timeout: Duration,
}

impl Default for ConnectionLimits {
    fn default() -> ConnectionLimits {
        ConnectionLimits {
            max_connections: DEFAULT_MAX_CONNECTIONS,
            header_timeout: DEFAULT_HEADER_TIMEOUT,
        }
    }
}

/// The body read timed out.
#[derive(Debug, thiserror::Error)]
#[error("the request body did not arrive within the server's body timeout")]
pub struct BodyTimeout;

/// Middleware: the request body must arrive within `timeout` of the
/// request reaching the router; past it, reading fails (the extractors
/// answer `400 INVALID_BODY`).
pub async fn body_deadline(timeout: Duration, request: Request, next: Next) -> Response {
    let deadline = tokio::time::Instant::now() + timeout;
    let (parts, body) = request.into_parts();
    let stream = body.into_data_stream();
    let timed = futures_util::stream::unfold(Some(stream), move |state| async move {
        let mut stream = state?;
        // A chunk already here is taken without arming a timer (most
        // bodies arrive with their headers); `next` is cancel-safe.
        if let Some(ready) = stream.next().now_or_never() {
            return ready.map(|item| (item, Some(stream)));
        }
        match tokio::time::timeout_at(deadline, stream.next()).await {
            Ok(Some(item)) => Some((item, Some(stream))),
            Ok(None) => None,
            Err(_) => Some((Err(axum::Error::new(BodyTimeout)), None)),
        }
    })
    .boxed();
    next.run(Request::from_parts(parts, Body::from_stream(timed)))
        .await
}

/// Serves `router` on `listener` over HTTP/1.1 until `shutdown` resolves,
/// then stops accepting and gives open requests a while to finish.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    limits: ConnectionLimits,
    shutdown: impl Future<Output = ()>,
) {
    let permits = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let graceful = GracefulShutdown::new();
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout)
        .keep_alive(true);
    tokio::pin!(shutdown);
    loop {
        // `biased;`: shutdown first, and no random branch order.
        let permit = tokio::select! {
            biased;
            () = &mut shutdown => break,
            p = permits.clone().acquire_owned() => match p {
                Ok(p) => p,
                Err(_) => break,
            },
        };
        let stream = tokio::select! {
            biased;
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    // Out of descriptors and the like: back off briefly.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let _ = stream.set_nodelay(true);
        let service = TowerToHyperService::new(router.clone());
        let connection = builder.serve_connection(TokioIo::new(stream), service);
        let connection = graceful.watch(connection);
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!(error = %e, "connection ended with an error");
            }
            drop(permit);
        });
    }
    drop(listener);
    if tokio::time::timeout(DRAIN, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("shutdown: some connections were still open");
    }
}
