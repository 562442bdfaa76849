//! `orbit server --retention D`: finished executions whose last event is
//! older than `D` are deleted from the store, each top-level execution
//! together with its children (only when all of them are finished), with
//! their histories and queue rows; expired idempotency records go in the
//! same chore. The work is done in small transactions with a pause between
//! them, so group commits are never held up for long.

use orbit_io_tokio::driver::Clock;
use orbit_io_tokio::storage::Storage;
use std::sync::Arc;
use std::time::Duration;

/// Top-level executions deleted per transaction.
pub const BATCH: u32 = 100;
/// Pause between two transactions of one round.
pub const PAUSE: Duration = Duration::from_millis(20);
/// How often a round runs.
pub const EVERY: Duration = Duration::from_secs(60);

/// One round: deletes everything finished before `now - retention`, a
/// batch at a time. Returns the executions deleted.
pub async fn round(store: &dyn Storage, retention: Duration, now: u64) -> u64 {
    let keep = u64::try_from(retention.as_millis()).unwrap_or(u64::MAX);
    let before = now.saturating_sub(keep);
    let mut total = 0;
    loop {
        match store.purge_finished(before, BATCH).await {
            Ok(p) => {
                total += p.executions;
                if p.scanned < u64::from(BATCH) || p.roots == 0 {
                    break;
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "retention: delete failed; next round retries");
                break;
            }
        }
        tokio::time::sleep(PAUSE).await;
    }
    total
}

/// Runs a round every [`EVERY`], forever, by the driver's clock (the one
/// the engine and the idempotency purge read).
pub async fn run(store: Arc<dyn Storage>, retention: Duration, clock: Clock) {
    let mut tick = tokio::time::interval(EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let deleted = round(store.as_ref(), retention, clock()).await;
        if deleted > 0 {
            tracing::info!(deleted, "retention: finished executions deleted");
        }
    }
}
