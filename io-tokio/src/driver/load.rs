//! Fetches for the node loop ([`Io::Fetch`](orbit_core::node::Io::Fetch)):
//! the executions and idempotency records a parked request needs, read on
//! the store's reader connections, off the loop. A failed read is answered
//! as such; the node loop tries it again with backoff.

use crate::storage::{Storage, StorageError};
use orbit_core::engine::StoredExecution;
use orbit_core::history::Millis;
use orbit_core::node::Fetched;
use orbit_core::store::convert;

/// Reads the executions `ids` (whole histories) and the live idempotency
/// records of the scoped `keys` at `now`.
pub(super) async fn fetch(
    store: &dyn Storage,
    now: Millis,
    ids: &[String],
    keys: &[String],
) -> Result<Fetched, StorageError> {
    let mut executions = Vec::with_capacity(ids.len());
    for id in ids {
        let events = store
            .load_execution(id)
            .await?
            .map(|e| e.events)
            .unwrap_or_default();
        executions.push(StoredExecution {
            execution_id: id.clone(),
            events,
        });
    }
    let mut idempotency = Vec::with_capacity(keys.len());
    for key in keys {
        // The engine writes its records with an empty scope (the key is
        // already scoped to credential, method and path).
        let record = store
            .idempotency("", key, now)
            .await?
            .map(|r| convert::idempotency_from_store(&r));
        idempotency.push((key.clone(), record));
    }
    Ok(Fetched {
        executions,
        idempotency,
    })
}
