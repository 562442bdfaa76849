//! The Rust SDK for ORBIT: a [`Client`] to deploy definitions and drive
//! executions, and a [`Worker`] that runs task handlers. Both speak the HTTP
//! API of `api.md` through a pluggable [`Transport`]: reqwest by default,
//! [`InProcessTransport`] straight into an axum router, or the simulation's
//! own network.
//!
//! ```no_run
//! # async fn demo() -> Result<(), orbit_server::sdk::Error> {
//! use orbit_server::sdk::{Client, StartOptions, Worker};
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
mod error;
mod in_process;
mod retry;
mod transport;
mod types;
mod worker;

pub use client::{Client, DEFAULT_ATTEMPTS, DEFAULT_SERVER};
pub use error::Error;
pub use in_process::InProcessTransport;
pub use retry::{retryable_status, Backoff};
pub use transport::{
    BoxFuture, HttpRequest, HttpResponse, Method, ReqwestTransport, Transport, TransportError,
};
pub use types::{
    Deployed, Execution, ExecutionPage, HistoryPage, ListOptions, Outcome, RecordedEvent,
    Registered, ResultAck, SignalAck, SourceFile, StartOptions, Started, Status, Task, TaskError,
};
pub use worker::{Handler, Worker, WorkerBuilder};
