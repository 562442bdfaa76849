//! `orbit-io-tokio`: the production driver.
//!
//! It will hold the tokio event loop that feeds the core `Engine` requests and
//! time and executes its effects, the storage backends over sqlx (SQLite in
//! WAL mode with `synchronous=FULL`, PostgreSQL) with group commit, timers,
//! and telemetry export. Nothing is implemented here yet.
