//! [`SimLease`]: the `--cluster` lease calls ([`lease::Store`]) of one server
//! host over the simulated database. The lease row is the [`SimStore`]'s own
//! (the one its fenced commits judge); the database's clock is turmoil's
//! virtual time; the node contacts are a table shared by every host; and
//! every call fails `Unavailable` while the host's [`Link`] is cut.

use super::faulty::Link;
use async_trait::async_trait;
use orbit_core::cluster::LeaseState;
use orbit_io_sim::store::SimStore;
use orbit_io_tokio::storage::lease::{self, NodeContact, RenewError};
use orbit_io_tokio::storage::StorageError;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The `cluster_nodes` table of the simulated database.
pub type Contacts = Arc<Mutex<BTreeMap<String, NodeContact>>>;

/// One host's lease calls.
#[derive(Debug)]
pub struct SimLease {
    store: Arc<SimStore>,
    contacts: Contacts,
    link: Arc<Link>,
}

impl SimLease {
    /// The lease of `store`, the contacts table `contacts`, reached over
    /// `link`.
    pub fn new(store: Arc<SimStore>, contacts: Contacts, link: Arc<Link>) -> SimLease {
        SimLease {
            store,
            contacts,
            link,
        }
    }

    fn contacts(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, NodeContact>> {
        self.contacts.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The database's clock: turmoil's virtual time, in ms.
pub fn db_now() -> u64 {
    turmoil::since_epoch()
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

#[async_trait]
impl lease::Store for SimLease {
    async fn read(&self) -> Result<LeaseState, StorageError> {
        self.link.reach()?;
        Ok(self.store.lease(db_now()))
    }

    async fn try_acquire(&self, node: &str, ttl: Duration) -> Result<Option<u64>, StorageError> {
        self.link.reach()?;
        let now = db_now();
        Ok(self.store.lease_take(node, millis(ttl), now, now))
    }

    async fn renew(&self, node: &str, epoch: u64, ttl: Duration) -> Result<(), RenewError> {
        self.link.reach()?;
        self.store
            .lease_renew(node, epoch, millis(ttl), db_now())
            .map_err(|now| RenewError::Fenced {
                holder: now.holder,
                epoch: now.epoch,
            })
    }

    async fn release(&self, node: &str, epoch: u64) -> Result<bool, StorageError> {
        self.link.reach()?;
        Ok(self.store.lease_release(node, epoch, db_now()))
    }

    async fn touch(
        &self,
        node: &str,
        advertise: &str,
        role: &str,
        forget_after: Duration,
    ) -> Result<(), StorageError> {
        self.link.reach()?;
        let now = db_now();
        let mut contacts = self.contacts();
        let started_at_ms = contacts.get(node).map_or(now, |c| c.started_at_ms);
        contacts.insert(
            node.to_owned(),
            NodeContact {
                node_id: node.to_owned(),
                advertise: advertise.to_owned(),
                role: role.to_owned(),
                started_at_ms,
                last_seen_ms: now,
                db_now_ms: now,
            },
        );
        contacts.retain(|_, c| now.saturating_sub(c.last_seen_ms) <= millis(forget_after));
        Ok(())
    }

    async fn nodes(&self) -> Result<Vec<NodeContact>, StorageError> {
        self.link.reach()?;
        let now = db_now();
        Ok(self
            .contacts()
            .values()
            .map(|c| NodeContact {
                db_now_ms: now,
                ..c.clone()
            })
            .collect())
    }

    async fn close(&self) {}
}
