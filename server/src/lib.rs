//! `orbit-server` as a library: the HTTP API, the web console, the `orbit`
//! command line, and the Rust SDK (client and worker) that talks to a server
//! over HTTP.

pub mod api;
pub mod bench;
pub mod cluster;
pub mod retention;
pub mod runtime;
pub mod sdk;
pub mod ui;
