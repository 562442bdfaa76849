//! `orbit-core`: the deterministic heart of ORBIT.
//!
//! It holds the `.orbit` language front end, the definition IR and its hash,
//! the expression evaluator, execution histories, the sans-I/O `Engine`, the
//! node loop around it ([`node`]: group commit, commit results, reloads,
//! ticks) and the storage contract ([`store`]) — all of which both the
//! production driver and the simulation run unchanged. Nothing
//! in this crate performs I/O, reads a clock or draws randomness: time and ids
//! are inputs.

pub mod builtin;
pub mod check;
pub mod cluster;
pub mod diagnostic;
pub mod engine;
pub mod eval;
pub mod history;
pub mod ir;
pub mod node;
pub mod store;
pub mod syntax;
pub mod trace;

pub use check::{compile, definition_hash, Compiled, Definition, Source};
pub use diagnostic::Diagnostic;
pub use engine::{Config, Effect, Engine, IdSource, Input, Request, Response, StorageResult};
