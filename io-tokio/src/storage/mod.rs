//! Storage: the backends (SQLite, PostgreSQL) of the storage contract that
//! lives in `orbit_core::store` (the trait, the records, the conflict rule
//! and the conformance suite), re-exported here. A commit is a
//! [`Transaction`] given as data; the store applies all of it atomically or
//! none of it, and answers with one of the outcomes of [`StorageError`] when
//! it cannot.

pub mod lease;
mod postgres;
mod rows;
mod sqlite;

pub use orbit_core::store::{
    check, check_appends, contract, is_terminal, shared, Append, Consumed, DefinitionRecord,
    ExecutionRow, Fence, IdempotencyRecord, ListFilter, ListPage, MakeTransaction, Owner, Purged,
    QueueOp, Storage, StorageError, StoredExecution, Transaction,
};
pub use postgres::{claim, InDoubt, Outcome, PostgresOptions, PostgresStore};
pub use sqlite::{SqliteOptions, SqliteStore};

/// Whether the store URL `url` names a PostgreSQL database
/// (`postgres://…` or `postgresql://…`); SQLite's are `sqlite://…`.
pub fn is_postgres(url: &str) -> bool {
    url.starts_with("postgres:") || url.starts_with("postgresql:")
}
