//! The example workers `orbit dev` runs for `examples/order.orbit`, written
//! with the SDK the way a user would write them: every side effect is keyed
//! by the task's `idempotency_key`, so a redelivered or retried task returns
//! the result recorded the first time instead of doing the work twice.
//!
//! The payment provider is simulated by [`Wallet`]: it declines amounts
//! above [`CARD_LIMIT`] (a permanent failure, so the demo's large order
//! compensates) and remembers every charge and refund by key.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use serde_json::{json, Value};

use crate::sdk::{Task, TaskError, Worker, WorkerBuilder};

/// Charges above this amount are declined with `CARD_DECLINED`.
pub const CARD_LIMIT: i64 = 1_000;

/// A pretend payment provider that deduplicates by idempotency key.
#[derive(Debug, Default)]
pub struct Wallet {
    /// Recorded effects by idempotency key: the answer given the first time.
    effects: Mutex<BTreeMap<String, Value>>,
}

impl Wallet {
    /// Performs `effect` once per `key`; a repeat returns the recorded answer.
    fn once(&self, key: &str, effect: impl FnOnce(usize) -> Value) -> Value {
        let mut effects = self.effects.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(done) = effects.get(key) {
            return done.clone();
        }
        let answer = effect(effects.len() + 1);
        effects.insert(key.to_string(), answer.clone());
        answer
    }

    /// How many distinct effects (charges and refunds) were recorded.
    pub fn effects(&self) -> usize {
        self.effects.lock().map(|e| e.len()).unwrap_or_default()
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
                Ok(wallet.once(&task.idempotency_key, |n| {
                    json!({ "transaction_id": format!("tx-{n}-{}", tag(&task.idempotency_key)) })
                }))
            }
        })
        .handler("payments.refund", move |task: Task| {
            let wallet = Arc::clone(&refund_wallet);
            async move {
                text(&task, "transaction_id")?;
                Ok(wallet.once(
                    &task.idempotency_key,
                    |n| json!({ "refund_id": format!("rf-{n}-{}", tag(&task.idempotency_key)) }),
                ))
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

    #[test]
    fn the_wallet_charges_once_per_key() {
        let w = Wallet::default();
        let a = w.once("charge-o-1", |n| json!(n));
        let b = w.once("charge-o-1", |n| json!(n + 100));
        let c = w.once("charge-o-2", |n| json!(n));
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert_eq!(w.effects(), 2);
    }

    #[test]
    fn tags_are_stable() {
        assert_eq!(tag("x"), tag("x"));
        assert_ne!(tag("x"), tag("y"));
        assert_eq!(tag("x").len(), 8);
    }
}
