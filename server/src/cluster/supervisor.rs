//! The node supervisor of `--cluster` (leader mode). As a standby it
//! watches the lease and takes it once it has run out (epoch + 1); then it
//! renews it every `--node-timeout / 4`, recovers a driver over a store fenced
//! by that epoch — exactly as a restarted server does — and only then serves
//! the API. The term ends when a write or a renewal is fenced, or when the
//! lease could not be renewed for `--node-timeout`: the node drops the term
//! (its memory; parked requests get 503) and is a standby again.

use super::{Node, Role, View, FORGET_AFTER};
use crate::api::{self, AppState};
use axum::Extension;
use orbit_io_tokio::driver::{self, Driver, Sources};
use orbit_io_tokio::storage::lease::{LeaderFence, RenewError};
use orbit_io_tokio::storage::Storage;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tokio::task::AbortHandle;
use tokio::time::{timeout, Instant};

/// The shared database as one term writes to it: every commit checked
/// against the term's fence in its own transaction.
pub type FencedStore = Arc<dyn Fn(Arc<LeaderFence>) -> Arc<dyn Storage> + Send + Sync>;

/// Spawns a term's background chores for its driver (idempotency purge,
/// the built-in HTTP task, ...); they are aborted when the term ends.
pub type Chores = Arc<dyn Fn(&Driver) -> Vec<AbortHandle> + Send + Sync>;

/// What every term is built from.
#[derive(Clone)]
pub struct TermSettings {
    /// The shared database (each term fences it with its epoch).
    pub store: FencedStore,
    /// The clock and ids each term's driver reads.
    pub sources: Sources,
    /// The driver's settings (the engine's epoch is set per term).
    pub driver: driver::Options,
    /// The API's settings.
    pub api: api::Options,
    /// `--max-body`.
    pub max_body: usize,
    /// The term's chores.
    pub chores: Chores,
}

impl std::fmt::Debug for TermSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TermSettings")
            .field("driver", &self.driver)
            .field("max_body", &self.max_body)
            .finish_non_exhaustive()
    }
}

/// Resolves once `stop` is set.
async fn stopped(mut stop: watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}

/// Runs the node until `stop` is set: standby, leader, standby, ... On stop
/// a leader finishes its commit in flight and releases the lease, so a
/// standby takes over at once.
pub async fn run(node: Arc<Node>, settings: TermSettings, stop: watch::Receiver<bool>) {
    loop {
        let Some((epoch, taken_at)) = standby(&node, &stop).await else {
            break;
        };
        if !lead(&node, &settings, epoch, taken_at, &stop).await {
            break;
        }
    }
    let id = &node.config().node_id;
    let advertise = &node.config().advertise;
    let _ = timeout(
        Duration::from_secs(1),
        node.lease().touch(id, advertise, "stopped", FORGET_AFTER),
    )
    .await;
    node.lease().close().await;
}

/// Watches the lease until it can be taken. Returns the new epoch and when
/// the taking was sent (the term's lease runs from then at the latest), or
/// `None` on stop.
async fn standby(node: &Node, stop: &watch::Receiver<bool>) -> Option<(u64, Instant)> {
    let config = node.config();
    let every = config.renew_every();
    let mut reachable = true;
    // When the leader's lease, as last read, runs out.
    let mut leader_until: Option<Instant> = None;
    loop {
        if *stop.borrow() {
            return None;
        }
        let lease = node.lease();
        if let Ok(Err(e)) = timeout(
            every,
            lease.touch(&config.node_id, &config.advertise, "standby", FORGET_AFTER),
        )
        .await
        {
            tracing::debug!(error = %e, "cannot record this node's contact");
        }
        let mut wait = every;
        match timeout(every, lease.read()).await {
            Ok(Ok(state)) => {
                if !reachable {
                    tracing::info!("the database answers again");
                    reachable = true;
                }
                if state.expired() {
                    let sent = Instant::now();
                    match timeout(
                        every,
                        lease.try_acquire(&config.node_id, config.node_timeout),
                    )
                    .await
                    {
                        Ok(Ok(Some(epoch))) => return Some((epoch, sent)),
                        // Another standby was faster: learn who, soon.
                        Ok(Ok(None)) => wait = Duration::from_millis(20),
                        Ok(Err(e)) => tracing::warn!(error = %e, "cannot take the lease"),
                        Err(_) => tracing::warn!("taking the lease got no answer in time"),
                    }
                    node.set_view(View {
                        role: Role::Standby,
                        epoch: state.epoch,
                        leader_node_id: None,
                        leader_url: None,
                    });
                } else {
                    wait = every.min(Duration::from_millis(state.remaining_ms() + 5));
                    leader_until =
                        Some(Instant::now() + Duration::from_millis(state.remaining_ms()));
                    let known = node.view();
                    let leader_url = if known.leader_node_id.as_deref() == Some(&state.holder)
                        && known.leader_url.is_some()
                    {
                        known.leader_url
                    } else {
                        match timeout(every, lease.nodes()).await {
                            Ok(Ok(nodes)) => nodes
                                .into_iter()
                                .find(|n| n.node_id == state.holder)
                                .map(|n| n.advertise),
                            _ => None,
                        }
                    };
                    node.set_view(View {
                        role: Role::Standby,
                        epoch: state.epoch,
                        leader_node_id: Some(state.holder),
                        leader_url,
                    });
                }
            }
            Ok(Err(e)) => {
                if reachable {
                    tracing::warn!(error = %e, "cannot read the lease");
                    reachable = false;
                }
            }
            Err(_) => {
                if reachable {
                    tracing::warn!("reading the lease got no answer in time");
                    reachable = false;
                }
            }
        }
        // Unread, the leader's lease runs out like any other: past its end
        // this node no longer names a leader it cannot know is one.
        if !reachable && leader_until.is_some_and(|t| Instant::now() >= t) {
            leader_until = None;
            let known = node.view();
            node.set_view(View {
                leader_node_id: None,
                leader_url: None,
                ..known
            });
        }
        // `biased;` throughout: stopping is checked first, and a seeded
        // simulation must not depend on tokio's random branch order.
        tokio::select! {
            biased;
            () = stopped(stop.clone()) => return None,
            () = tokio::time::sleep(wait) => {}
        }
    }
}

/// One leadership term. Returns `false` when the node is stopping.
async fn lead(
    node: &Arc<Node>,
    settings: &TermSettings,
    epoch: u64,
    taken_at: Instant,
    stop: &watch::Receiver<bool>,
) -> bool {
    let config = node.config();
    tracing::info!(
        node_id = %config.node_id,
        epoch,
        "took the lease at epoch {epoch}; recovering before serving as leader"
    );
    let fence = Arc::new(LeaderFence::new(config.node_id.clone(), epoch));
    // Until recovery is done, clients are told no leader is known yet.
    node.set_view(View {
        role: Role::Standby,
        epoch,
        leader_node_id: Some(config.node_id.clone()),
        leader_url: None,
    });
    let renewer = tokio::spawn(renew(node.clone(), fence.clone(), taken_at));
    let store = (settings.store)(fence.clone());
    let mut options = settings.driver.clone();
    options.engine.epoch = Some(epoch);
    let started = Instant::now();
    let recovered = tokio::select! {
        biased;
        () = stopped(stop.clone()) => {
            renewer.abort();
            fence.depose();
            let _ = timeout(config.renew_every(), node.lease().release(&config.node_id, epoch)).await;
            return false;
        }
        () = fence.deposed() => {
            tracing::warn!(epoch, "deposed while recovering; back to standby");
            renewer.abort();
            return true;
        }
        d = Driver::start_with(store, options, settings.sources.clone()) => d,
    };
    let driver = match recovered {
        Ok(d) => d,
        Err(e) => {
            tracing::error!(error = %e, epoch, "recovery failed; giving the lease up");
            renewer.abort();
            fence.depose();
            let _ = timeout(
                config.renew_every(),
                node.lease().release(&config.node_id, epoch),
            )
            .await;
            tokio::time::sleep(config.renew_every()).await;
            return true;
        }
    };
    let chores = (settings.chores)(&driver);
    let router = api::app_with(
        AppState {
            driver: driver.clone(),
            max_body: settings.max_body,
        },
        settings.api.clone(),
    )
    .layer(Extension(node.clone()));
    node.set_term(Some(router));
    node.takeovers.fetch_add(1, Ordering::Relaxed);
    node.set_view(View {
        role: Role::Leader,
        epoch,
        leader_node_id: Some(config.node_id.clone()),
        leader_url: Some(config.advertise.clone()),
    });
    tracing::info!(
        node_id = %config.node_id,
        epoch,
        recovered_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
        "leader at epoch {epoch}"
    );
    let stopping = tokio::select! {
        biased;
        () = stopped(stop.clone()) => true,
        () = fence.deposed() => false,
    };
    // From here on, new calls are answered NOT_LEADER.
    node.set_term(None);
    node.set_view(View {
        role: Role::Standby,
        epoch,
        leader_node_id: None,
        leader_url: None,
    });
    for chore in chores {
        chore.abort();
    }
    if stopping {
        // The commit in flight is written while the lease is still ours.
        if timeout(config.node_timeout, driver.shutdown())
            .await
            .is_err()
        {
            tracing::warn!("the driver did not stop within --node-timeout");
        }
        renewer.abort();
        fence.depose();
        match timeout(
            config.renew_every(),
            node.lease().release(&config.node_id, epoch),
        )
        .await
        {
            Ok(Ok(true)) => tracing::info!(epoch, "lease released"),
            _ => tracing::warn!(epoch, "could not release the lease; it runs out by itself"),
        }
        return false;
    }
    renewer.abort();
    tracing::warn!(
        epoch,
        "stepped down from epoch {epoch}: memory dropped, parked requests answered 503 NOT_LEADER; now a standby"
    );
    // Every commit of this term is refused from now on, so this ends
    // quickly: batches waiting fail as fenced, parked requests get 503.
    if timeout(config.node_timeout, driver.depose()).await.is_err() {
        tracing::warn!("the deposed driver did not stop within --node-timeout");
    }
    true
}

/// Renews the term's lease every `--node-timeout / 4` until it is fenced or
/// has gone unrenewed for `--node-timeout`; either way, deposes the term.
async fn renew(node: Arc<Node>, fence: Arc<LeaderFence>, taken_at: Instant) {
    let config = node.config();
    let every = config.renew_every();
    let epoch = fence.epoch();
    let mut last_ok = taken_at;
    loop {
        let deadline = last_ok + config.node_timeout;
        tokio::time::sleep(every.min(deadline.saturating_duration_since(Instant::now()))).await;
        let sent = Instant::now();
        let budget = deadline.saturating_duration_since(sent).min(every);
        if !budget.is_zero() {
            let lease = node.lease();
            match timeout(
                budget,
                lease.renew(&config.node_id, epoch, config.node_timeout),
            )
            .await
            {
                Ok(Ok(())) => {
                    last_ok = sent;
                    let _ = timeout(
                        every,
                        lease.touch(&config.node_id, &config.advertise, "leader", FORGET_AFTER),
                    )
                    .await;
                }
                Ok(Err(RenewError::Fenced { holder, epoch: now })) => {
                    tracing::warn!(
                        epoch,
                        holder = %holder,
                        holder_epoch = now,
                        "fenced: lease renewal of epoch {epoch} refused, `{holder}` holds epoch {now}; stepping down"
                    );
                    fence.depose();
                    return;
                }
                Ok(Err(RenewError::Storage(e))) => {
                    tracing::warn!(error = %e, epoch, "cannot renew the lease");
                }
                Err(_) => tracing::warn!(epoch, "lease renewal got no answer in time"),
            }
        }
        if last_ok.elapsed() >= config.node_timeout {
            match timeout(Duration::from_secs(1), node.lease().read()).await {
                Ok(Ok(l)) if l.holder != config.node_id || l.epoch != epoch => tracing::warn!(
                    epoch,
                    "fenced: the lease of epoch {epoch} is now held by `{}` at epoch {}; stepping down",
                    l.holder,
                    l.epoch
                ),
                _ => tracing::warn!(
                    epoch,
                    "no lease renewal for --node-timeout ({:?}): the database is out of reach; stepping down",
                    config.node_timeout
                ),
            }
            fence.depose();
            return;
        }
    }
}
