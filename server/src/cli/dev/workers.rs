//! The example workers `orbit dev` runs for `examples/order.orbit`, written
//! with the SDK the way a user would write them: every side effect is keyed
//! by the task's `idempotency_key`, so a redelivered or retried task returns
//! the result recorded the first time instead of doing the work twice.
//!
//! The payment provider is simulated by [`Wallet`], a small SQLite database
//! of its own: a charge or refund and its idempotency key are written in one
//! transaction, and a repeat of the key returns the recorded answer. It
//! declines amounts above [`CARD_LIMIT`] (a permanent failure, so the demo's
//! large order compensates).

use std::str::FromStr;
use std::sync::Arc;

use serde_json::{json, Value};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions};

use orbit_sdk::{Task, TaskError, Worker, WorkerBuilder};

/// Charges above this amount are declined with `CARD_DECLINED`.
pub const CARD_LIMIT: i64 = 1_000;

/// A pretend payment provider that deduplicates by idempotency key.
#[derive(Debug, Clone)]
pub struct Wallet {
    pool: SqlitePool,
}

impl Wallet {
    /// Opens (creating if needed) the wallet database at `url` (`sqlite://…`).
    pub async fn open(url: &str) -> Result<Wallet, sqlx::Error> {
        let options = SqliteConnectOptions::from_str(url)?
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal);
        let pool = SqlitePoolOptions::new()
            .max_connections(1)
            .connect_with(options)
            .await?;
        sqlx::query(
            "CREATE TABLE IF NOT EXISTS payments (
                idempotency_key TEXT PRIMARY KEY,
                kind TEXT NOT NULL,
                amount INTEGER NOT NULL,
                answer TEXT NOT NULL
            )",
        )
        .execute(&pool)
        .await?;
        Ok(Wallet { pool })
    }

    /// Records the effect `kind` of `amount` under `key` with `answer`, in
    /// one transaction; when `key` was seen before, nothing is written and
    /// the answer recorded then is returned.
    async fn once(
        &self,
        key: &str,
        kind: &str,
        amount: i64,
        answer: Value,
    ) -> Result<Value, TaskError> {
        let unavailable =
            |e: sqlx::Error| TaskError::retryable("WALLET_UNAVAILABLE", e.to_string());
        let mut tx = self.pool.begin().await.map_err(unavailable)?;
        sqlx::query(
            "INSERT INTO payments (idempotency_key, kind, amount, answer) VALUES (?, ?, ?, ?)
             ON CONFLICT (idempotency_key) DO NOTHING",
        )
        .bind(key)
        .bind(kind)
        .bind(amount)
        .bind(answer.to_string())
        .execute(&mut *tx)
        .await
        .map_err(unavailable)?;
        let recorded: String =
            sqlx::query_scalar("SELECT answer FROM payments WHERE idempotency_key = ?")
                .bind(key)
                .fetch_one(&mut *tx)
                .await
                .map_err(unavailable)?;
        tx.commit().await.map_err(unavailable)?;
        serde_json::from_str(&recorded)
            .map_err(|e| TaskError::fatal("WALLET_CORRUPT", e.to_string()))
    }

    /// How many distinct effects (charges and refunds) were recorded.
    pub async fn effects(&self) -> Result<i64, sqlx::Error> {
        sqlx::query_scalar("SELECT COUNT(*) FROM payments")
            .fetch_one(&self.pool)
            .await
    }

    /// Closes the database.
    pub async fn close(&self) {
        self.pool.close().await;
    }
}

/// The wallet's database URL for a store URL: `sqlite://orbit-dev.db` →
/// `sqlite://orbit-dev-wallet.db`.
pub fn wallet_url(store: &str) -> String {
    match store.strip_suffix(".db") {
        Some(stem) => format!("{stem}-wallet.db"),
        None => format!("{store}-wallet"),
    }
}

fn field<'a>(task: &'a Task, name: &str) -> Result<&'a Value, TaskError> {
    task.input.get(name).ok_or_else(|| {
        TaskError::fatal(
            "BAD_INPUT",
            format!("task {} has no `{name}` in its input", task.task_name),
        )
    })
}

fn text(task: &Task, name: &str) -> Result<String, TaskError> {
    field(task, name)?
        .as_str()
        .map(str::to_string)
        .ok_or_else(|| TaskError::fatal("BAD_INPUT", format!("`{name}` is not a string")))
}

fn int(task: &Task, name: &str) -> Result<i64, TaskError> {
    field(task, name)?
        .as_i64()
        .ok_or_else(|| TaskError::fatal("BAD_INPUT", format!("`{name}` is not an integer")))
}

/// A short, stable suffix derived from a key (for readable ids).
fn tag(key: &str) -> String {
    let sum = key.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    });
    format!("{:08x}", sum & 0xffff_ffff)
}

/// A fresh random id for a new transaction or refund.
fn short_id() -> String {
    uuid::Uuid::new_v4().simple().to_string()[..12].to_string()
}

/// The workers for the example order workflow, one per service, sharing
/// one [`Wallet`].
pub fn order_workers(wallet: &Arc<Wallet>) -> Vec<WorkerBuilder> {
    let orders = Worker::builder("orders-1").handler("orders.validate", |task: Task| async move {
        let order_id = text(&task, "order_id")?;
        if order_id.is_empty() {
            return Err(TaskError::fatal("INVALID_ORDER", "empty order id"));
        }
        Ok(json!({ "ok": true }))
    });

    let inventory = Worker::builder("inventory-1")
        .handler("inventory.reserve", |task: Task| async move {
            field(&task, "items")?;
            Ok(json!({ "reservation_id": format!("rsv-{}", tag(&task.idempotency_key)) }))
        })
        .handler("inventory.release", |task: Task| async move {
            text(&task, "reservation_id")?;
            Ok(json!({}))
        });

    let charge_wallet = Arc::clone(wallet);
    let refund_wallet = Arc::clone(wallet);
    let payments = Worker::builder("payments-1")
        .handler("payments.charge", move |task: Task| {
            let wallet = Arc::clone(&charge_wallet);
            async move {
                let amount = int(&task, "amount")?;
                if amount > CARD_LIMIT {
                    return Err(TaskError::fatal(
                        "CARD_DECLINED",
                        format!("amount {amount} is over the card limit of {CARD_LIMIT}"),
                    ));
                }
                if amount <= 0 {
                    return Err(TaskError::fatal(
                        "INVALID_AMOUNT",
                        "amount must be positive",
                    ));
                }
                let fresh = json!({ "transaction_id": format!("tx-{}", short_id()) });
                wallet
                    .once(&task.idempotency_key, "charge", amount, fresh)
                    .await
            }
        })
        .handler("payments.refund", move |task: Task| {
            let wallet = Arc::clone(&refund_wallet);
            async move {
                text(&task, "transaction_id")?;
                let amount = int(&task, "amount")?;
                let fresh = json!({ "refund_id": format!("rf-{}", short_id()) });
                wallet
                    .once(&task.idempotency_key, "refund", amount, fresh)
                    .await
            }
        });

    let shipping =
        Worker::builder("shipping-1").handler("shipping.create", |task: Task| async move {
            let order_id = text(&task, "order_id")?;
            Ok(json!({ "tracking": format!("TRK-{}-{}", order_id, tag(&task.idempotency_key)) }))
        });

    vec![orders, inventory, payments, shipping]
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[tokio::test]
    async fn the_wallet_records_each_key_once_and_survives_reopening() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}/w.db", dir.path().display());
        let w = Wallet::open(&url).await.unwrap();
        let a = w
            .once("charge-o-1", "charge", 5, json!({"t": 1}))
            .await
            .unwrap();
        let b = w
            .once("charge-o-1", "charge", 5, json!({"t": 2}))
            .await
            .unwrap();
        let c = w
            .once("charge-o-2", "charge", 5, json!({"t": 3}))
            .await
            .unwrap();
        assert_eq!(a, json!({"t": 1}));
        assert_eq!(b, json!({"t": 1}));
        assert_eq!(c, json!({"t": 3}));
        assert_eq!(w.effects().await.unwrap(), 2);
        w.close().await;
        let again = Wallet::open(&url).await.unwrap();
        let d = again
            .once("charge-o-1", "charge", 5, json!({"t": 9}))
            .await
            .unwrap();
        assert_eq!(d, json!({"t": 1}));
    }

    #[test]
    fn wallet_urls() {
        assert_eq!(
            wallet_url("sqlite://orbit-dev.db"),
            "sqlite://orbit-dev-wallet.db"
        );
        assert_eq!(wallet_url("sqlite://x"), "sqlite://x-wallet");
    }

    #[test]
    fn tags_are_stable() {
        assert_eq!(tag("x"), tag("x"));
        assert_ne!(tag("x"), tag("y"));
        assert_eq!(tag("x").len(), 8);
    }
}
