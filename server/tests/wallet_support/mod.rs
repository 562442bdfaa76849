//! The order workload's workers for the cluster end-to-end tests: a
//! simulated wallet keyed by the idempotency key, the SDK worker that
//! reserves stock and charges it, and the wait for orders charged while a
//! server is paused.

use orbit_sdk::{TaskError, Worker};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The simulated wallet: one ledger entry per idempotency key; a repeated
/// key returns the first transaction and charges nothing.
#[derive(Default)]
pub struct Wallet {
    pub ledger: Mutex<BTreeMap<String, (String, i64)>>,
    pub calls: AtomicU64,
}

impl Wallet {
    fn charge(&self, key: &str, order: &str, amount: i64) -> String {
        self.calls.fetch_add(1, Ordering::Relaxed);
        let mut ledger = self.ledger.lock().unwrap();
        let entry = ledger
            .entry(key.to_owned())
            .or_insert_with(|| (format!("tx-{order}"), amount));
        entry.0.clone()
    }

    /// Orders charged so far.
    pub fn charged(&self) -> usize {
        self.ledger.lock().unwrap().len()
    }

    /// Waits (up to 90 s) until `more` orders are charged while `paused`
    /// is stopped: the workers and clients that were talking to it have
    /// moved on to the other servers.
    pub async fn charged_meanwhile(&self, more: usize, paused: &str) {
        let charged = self.charged();
        let deadline = Instant::now() + Duration::from_secs(90);
        while self.charged() < charged + more {
            assert!(
                Instant::now() < deadline,
                "no order charged while {paused} was paused ({charged} before)"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// An SDK worker for `stock.reserve` and `wallet.charge`, given every
/// server's URL.
pub fn worker(name: &str, urls: &str, wallet: Arc<Wallet>) -> Worker {
    Worker::builder(name)
        .max_tasks(32)
        .poll_wait(Duration::from_secs(1))
        .handler("stock.reserve", |task| async move {
            let order = task.input["order_id"].as_str().unwrap_or_default();
            Ok::<Value, TaskError>(json!({"reservation": format!("r-{order}")}))
        })
        .handler("wallet.charge", move |task| {
            let wallet = wallet.clone();
            async move {
                let order = task.input["order_id"].as_str().unwrap_or_default();
                let amount = task.input["amount"].as_i64().unwrap_or_default();
                let tx = wallet.charge(&task.idempotency_key, order, amount);
                Ok::<Value, TaskError>(json!({"transaction_id": tx}))
            }
        })
        .connect(urls)
        .unwrap()
}
