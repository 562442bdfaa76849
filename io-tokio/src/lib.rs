//! `orbit-io-tokio`: the production driver.
//!
//! [`storage`] holds the storage trait ORBIT commits through and its SQLite
//! backend (WAL, `synchronous=FULL`, versioned migrations, one transaction
//! per group commit); [`driver`] is the tokio task that owns the core
//! `Engine`, feeds it requests and time, and executes its effects;
//! [`builtin`] runs the built-in task `orbit.http` beside it;
//! [`telemetry`] exports OTLP spans of what was committed.

pub mod builtin;
pub mod driver;
pub mod storage;
pub mod telemetry;
