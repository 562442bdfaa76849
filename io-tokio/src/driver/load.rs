//! On-demand loads for the engine ([`Effect::Load`](orbit_core::engine::Effect::Load)):
//! the executions and idempotency records a parked request needs, read in a
//! task of their own on the store's reader connections and fed back as
//! [`Input::Loaded`]. A failed read is retried with backoff until the store
//! answers, like a reload.

use crate::storage::{Storage, StorageError};
use orbit_core::engine::{IdempotencyRecord, Input, StoredExecution};
use orbit_core::history::Millis;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;

use super::convert;

/// The channel that brings finished loads back to the loop.
pub(super) struct Loads {
    tx: mpsc::UnboundedSender<Input>,
    /// Finished loads, as `Input::Loaded`.
    pub done: mpsc::UnboundedReceiver<Input>,
}

impl Loads {
    pub(super) fn new() -> Loads {
        let (tx, done) = mpsc::unbounded_channel();
        Loads { tx, done }
    }

    /// Starts one load.
    pub(super) fn spawn(
        &self,
        store: Arc<dyn Storage>,
        clock: Arc<dyn Fn() -> Millis + Send + Sync>,
        load: u64,
        executions: Vec<String>,
        keys: Vec<String>,
    ) {
        let tx = self.tx.clone();
        tokio::spawn(async move {
            let mut delay = Duration::from_millis(20);
            loop {
                match read(store.as_ref(), clock(), &executions, &keys).await {
                    Ok((executions, idempotency)) => {
                        let _ = tx.send(Input::Loaded {
                            load,
                            executions,
                            idempotency,
                        });
                        return;
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "load failed; retrying");
                        tokio::time::sleep(delay).await;
                        delay = (delay * 2).min(Duration::from_secs(2));
                    }
                }
            }
        });
    }
}

type Loaded = (
    Vec<StoredExecution>,
    Vec<(String, Option<IdempotencyRecord>)>,
);

async fn read(
    store: &dyn Storage,
    now: Millis,
    ids: &[String],
    keys: &[String],
) -> Result<Loaded, StorageError> {
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
    let mut records = Vec::with_capacity(keys.len());
    for key in keys {
        // The engine writes its records with an empty scope (the key is
        // already scoped to credential, method and path).
        let record = store
            .idempotency("", key, now)
            .await?
            .map(|r| convert::idempotency_from_store(&r));
        records.push((key.clone(), record));
    }
    Ok((executions, records))
}
