//! The Rust SDK for ORBIT: a [`Client`] to deploy definitions and drive
//! executions, and a [`Worker`] that runs task handlers. Both speak the HTTP
//! API of `api.md` through a pluggable [`Transport`]: reqwest by default,
//! or anything else that carries a request (the server crate adds an
//! in-process transport, the simulation its own network).
//!
//! [`wire`] holds the API's request and response bodies, defined once: the
//! server parses requests into them and generates its OpenAPI document from
//! them (feature `utoipa`), and this SDK sends and reads them. The crate
//! depends on reqwest, serde and tokio (plus small helpers: serde_json,
//! thiserror, tracing, uuid), not on the server.
//!
//! Every task carries the trace context of its attempt
//! ([`Task::trace_context`]): a handler that runs its own OpenTelemetry SDK
//! starts its span under it and joins the execution's trace.
//!
//! ```no_run
//! # async fn demo() -> Result<(), orbit_sdk::Error> {
//! use orbit_sdk::{Client, StartOptions, Worker};
//! use serde_json::json;
//!
//! let client = Client::connect("http://127.0.0.1:7373")?;
//! let started = client
//!     .start(StartOptions::new("Order", json!({"order_id": "o-1"})))
//!     .await?;
//!
//! let worker = Worker::builder("payments-1")
//!     .handler("payments.charge", |task| async move {
//!         // Pass task.idempotency_key to the payment provider.
//!         Ok(json!({"charge_id": format!("ch-{}", task.idempotency_key)}))
//!     })
//!     .connect("http://127.0.0.1:7373")?;
//! worker.run(async { let _ = tokio::signal::ctrl_c().await; }).await?;
//! # let _ = started;
//! # Ok(())
//! # }
//! ```

mod client;
mod direct;
mod error;
mod failover;
mod options;
mod retry;
mod trace;
mod transport;
pub mod wire;
mod worker;

pub use client::{Client, DEFAULT_ATTEMPTS, DEFAULT_SERVER};
pub use direct::{default_transport, DirectTransport};
pub use error::Error;
pub use failover::{split_urls, Connector, FailoverTransport, DEFAULT_FAILOVER_WINDOW};
pub use options::{ListOptions, StartOptions};
pub use retry::{retryable_status, Backoff};
pub use trace::TraceContext;
pub use transport::{
    BoxFuture, HttpRequest, HttpResponse, Method, ReqwestTransport, Transport, TransportError,
};
pub use wire::{
    ClusterNode, ClusterStatus, Deployed, Execution, ExecutionPage, ExecutionSummary, HistoryPage,
    Outcome, RecordedEvent, Registered, ResultAck, ResultAnswer, SignalAck, SourceFile, Started,
    Status, Task, TaskError, TaskResult, UnitView,
};
pub use worker::{Handler, Worker, WorkerBuilder};
