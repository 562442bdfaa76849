//! Storage faults under the real driver: a [`Storage`] wrapper around the
//! simulated store that, while the run's faults are on, answers a commit
//! `Unavailable` (nothing applied) or `Ambiguous` (applied or not, even
//! odds) and fails reads, drawing from its own seeded stream. The driver's
//! group commits, reloads and their backoff, and the API's answers to
//! them, then meet the same faults as the core layer's node loop.
//!
//! In a cluster run each server host reaches the database over its own
//! [`Link`], which the schedule can cut (every call then fails
//! `Unavailable`), and each leadership term writes through a copy fenced by
//! the term's [`LeaderFence`]: the lease row is judged in the same step as
//! the write, so a deposed leader's commit applies nothing.

use async_trait::async_trait;
use orbit_core::history::Event;
use orbit_core::store::{
    DefinitionRecord, ExecutionRow, IdempotencyRecord, ListFilter, QueueOp, Storage, StorageError,
    StoredExecution, Transaction,
};
use orbit_io_sim::store::SimStore;
use orbit_io_tokio::storage::lease::LeaderFence;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// How often the store fails, and until when.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StoreFaults {
    /// A commit fails before applying.
    pub fail_probability: f64,
    /// A commit's outcome is unknown.
    pub ambiguous_probability: f64,
    /// Faults stop at this virtual time (ms since the run began).
    pub until_ms: u64,
}

impl StoreFaults {
    /// Failed and ambiguous commits each up to `max` of the time (rounded
    /// to 0.1 %), until `until_ms`.
    pub fn sample(rng: &mut ChaCha8Rng, max: f64, until_ms: u64) -> StoreFaults {
        let mut draw = || (rng.random_range(0.0..max) * 1000.0).round() / 1000.0;
        StoreFaults {
            fail_probability: draw(),
            ambiguous_probability: draw(),
            until_ms,
        }
    }
}

/// One server host's connection to the database: up, or cut by the
/// schedule.
#[derive(Debug, Default)]
pub struct Link(AtomicBool);

impl Link {
    /// Cuts the host off the database.
    pub fn cut(&self) {
        self.0.store(true, Ordering::SeqCst);
    }

    /// Joins it again.
    pub fn heal(&self) {
        self.0.store(false, Ordering::SeqCst);
    }

    /// Whether the host is cut off.
    pub fn is_cut(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }

    /// `Unavailable` while cut off.
    pub fn reach(&self) -> Result<(), StorageError> {
        if self.is_cut() {
            return Err(StorageError::Unavailable(
                "simulated: this node is cut off from the database".into(),
            ));
        }
        Ok(())
    }
}

/// The simulated store behind seeded faults.
#[derive(Clone)]
pub struct FaultyStore {
    inner: Arc<SimStore>,
    faults: StoreFaults,
    rng: Arc<Mutex<ChaCha8Rng>>,
    counts: Arc<Mutex<BTreeMap<&'static str, u32>>>,
    link: Arc<Link>,
    fence: Option<Arc<LeaderFence>>,
}

impl FaultyStore {
    /// Wraps `inner`; faults are drawn from `seed`.
    pub fn new(inner: Arc<SimStore>, faults: StoreFaults, seed: u64) -> FaultyStore {
        FaultyStore {
            inner,
            faults,
            rng: Arc::new(Mutex::new(ChaCha8Rng::seed_from_u64(
                seed ^ 0x5354_4f52_4500,
            ))),
            counts: Arc::new(Mutex::new(BTreeMap::new())),
            link: Arc::new(Link::default()),
            fence: None,
        }
    }

    /// The same store (faults, counts) reached over `link`.
    pub fn over(&self, link: Arc<Link>) -> FaultyStore {
        FaultyStore {
            link,
            ..self.clone()
        }
    }

    /// The same store, every commit judged by `fence` against the lease row
    /// in the step that applies it.
    pub fn fenced_by(&self, fence: Arc<LeaderFence>) -> FaultyStore {
        FaultyStore {
            fence: Some(fence),
            ..self.clone()
        }
    }

    /// Applies `tx`, after the fence (if any) judged the lease row. Nothing
    /// awaits between the two, so no takeover can slip in between.
    fn apply(&self, tx: &Transaction) -> Result<(), StorageError> {
        if let Some(fence) = &self.fence {
            let lease = self.inner.lease(0);
            if let Err(refused) = fence.judge(&lease.holder, lease.epoch) {
                self.count("store_fenced");
                return Err(refused);
            }
        }
        self.inner.apply(tx)
    }

    /// The faults injected so far, by kind (shared with the store).
    pub fn counts(&self) -> Arc<Mutex<BTreeMap<&'static str, u32>>> {
        self.counts.clone()
    }

    fn on(&self) -> bool {
        turmoil::sim_elapsed().is_some_and(|d| d.as_millis() < u128::from(self.faults.until_ms))
    }

    fn chance(&self, p: f64) -> bool {
        p > 0.0
            && self
                .rng
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .random_bool(p.min(1.0))
    }

    fn count(&self, kind: &'static str) {
        *self
            .counts
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(kind)
            .or_default() += 1;
    }

    /// A failed read, some of the time (as often as a failed commit).
    fn read_fault(&self) -> Result<(), StorageError> {
        self.link.reach()?;
        if self.on() && self.chance(self.faults.fail_probability) {
            self.count("store_read_unavailable");
            return Err(unreachable());
        }
        Ok(())
    }
}

fn unreachable() -> StorageError {
    StorageError::Unavailable("simulated: database unreachable".into())
}

#[async_trait]
impl Storage for FaultyStore {
    async fn commit(&self, tx: &Transaction) -> Result<(), StorageError> {
        self.link.reach()?;
        if self.on() {
            if self.chance(self.faults.fail_probability) {
                self.count("store_unavailable");
                return Err(unreachable());
            }
            if self.chance(self.faults.ambiguous_probability) {
                let lost =
                    StorageError::Ambiguous("simulated: connection lost during COMMIT".into());
                if self.chance(0.5) {
                    self.count("store_ambiguous_applied");
                    self.apply(tx)?;
                } else {
                    self.count("store_ambiguous_lost");
                }
                return Err(lost);
            }
        }
        self.apply(tx)
    }

    async fn load_definitions(&self) -> Result<Vec<DefinitionRecord>, StorageError> {
        self.link.reach()?;
        self.inner.load_definitions().await
    }

    async fn load_active(&self) -> Result<Vec<StoredExecution>, StorageError> {
        self.link.reach()?;
        self.inner.load_active().await
    }

    async fn load_all(&self) -> Result<Vec<StoredExecution>, StorageError> {
        self.link.reach()?;
        self.inner.load_all().await
    }

    async fn idempotency_records(&self, now: u64) -> Result<Vec<IdempotencyRecord>, StorageError> {
        self.link.reach()?;
        self.inner.idempotency_records(now).await
    }

    async fn count_by_status(&self) -> Result<Vec<(String, u64)>, StorageError> {
        self.link.reach()?;
        self.inner.count_by_status().await
    }

    async fn load_execution(&self, id: &str) -> Result<Option<StoredExecution>, StorageError> {
        self.read_fault()?;
        self.inner.load_execution(id).await
    }

    async fn execution(&self, id: &str) -> Result<Option<ExecutionRow>, StorageError> {
        self.link.reach()?;
        self.inner.execution(id).await
    }

    async fn history(
        &self,
        id: &str,
        after_seq: u64,
        limit: u32,
    ) -> Result<Vec<Event>, StorageError> {
        self.link.reach()?;
        self.inner.history(id, after_seq, limit).await
    }

    async fn list_executions(
        &self,
        filter: &ListFilter,
    ) -> Result<Vec<ExecutionRow>, StorageError> {
        self.link.reach()?;
        self.inner.list_executions(filter).await
    }

    async fn idempotency(
        &self,
        scope: &str,
        key: &str,
        now: u64,
    ) -> Result<Option<IdempotencyRecord>, StorageError> {
        self.link.reach()?;
        self.inner.idempotency(scope, key, now).await
    }

    async fn queue(&self) -> Result<Vec<QueueOp>, StorageError> {
        self.link.reach()?;
        self.inner.queue().await
    }

    async fn ping(&self) -> Result<(), StorageError> {
        self.link.reach()?;
        self.inner.ping().await
    }
}
