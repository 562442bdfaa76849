//! `orbit-server` as a library: the HTTP API, the `orbit` command line, and
//! the Rust SDK (client and worker) that talks to a server over HTTP.

pub mod api;
pub mod bench;
pub mod sdk;
