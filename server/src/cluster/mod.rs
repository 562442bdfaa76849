//! `orbit server --cluster` (leader mode): several servers on one PostgreSQL
//! database, one leader at a time. A [`Node`] is what one server knows of
//! the cluster; the [`supervisor`] runs its lease and, while it leads, a
//! driver built exactly like a restarted server's (a *term*); the
//! [`router`] sends API calls to that term, or answers `503 NOT_LEADER` on a
//! standby. The lease may live in PostgreSQL or, in the networked
//! simulation, in the simulated database: see [`lease::Store`].

pub mod router;
pub mod supervisor;

use crate::api::{rfc3339, ApiError};
use axum::http::StatusCode;
use axum::Router;
use orbit_io_tokio::storage::lease;
use orbit_sdk::wire::{ClusterNode, ClusterStatus};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

/// Default `--node-timeout`.
pub const DEFAULT_NODE_TIMEOUT: Duration = Duration::from_secs(5);

/// How long a node silent for good stays in `GET /v1/cluster`.
pub const FORGET_AFTER: Duration = Duration::from_secs(3600);

/// One node's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeConfig {
    /// `--node-id`.
    pub node_id: String,
    /// `--advertise`: the URL clients are sent to when this node leads.
    pub advertise: String,
    /// `--node-timeout`: the lease's length; renewed every quarter of it.
    pub node_timeout: Duration,
}

impl NodeConfig {
    /// How often the leader renews and a standby looks at the lease.
    pub fn renew_every(&self) -> Duration {
        (self.node_timeout / 4).max(Duration::from_millis(10))
    }
}

/// A node's role.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Holds the lease and has recovered: serves the API.
    Leader,
    /// Everything else (including a node that took the lease and is still
    /// recovering): answers `NOT_LEADER`.
    Standby,
}

impl Role {
    /// `leader` or `standby`.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Leader => "leader",
            Role::Standby => "standby",
        }
    }
}

/// What this node believes about the leadership right now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct View {
    /// This node's role.
    pub role: Role,
    /// The epoch of the lease last seen (or of this node's term).
    pub epoch: u64,
    /// The leader's node id, while its lease is live.
    pub leader_node_id: Option<String>,
    /// The leader's advertised URL, while its lease is live and known.
    pub leader_url: Option<String>,
}

/// One server's share of the cluster: settings, the lease calls, what it
/// believes, the API of its current term (if it leads) and its counters.
pub struct Node {
    config: NodeConfig,
    lease: Arc<dyn lease::Store>,
    view: RwLock<View>,
    term: RwLock<Option<Router>>,
    takeovers: AtomicU64,
}

impl std::fmt::Debug for Node {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Node")
            .field("config", &self.config)
            .field("view", &self.view())
            .finish_non_exhaustive()
    }
}

impl Node {
    /// A standby that knows no leader yet.
    pub fn new(config: NodeConfig, lease: Arc<dyn lease::Store>) -> Node {
        Node {
            config,
            lease,
            view: RwLock::new(View {
                role: Role::Standby,
                epoch: 0,
                leader_node_id: None,
                leader_url: None,
            }),
            term: RwLock::new(None),
            takeovers: AtomicU64::new(0),
        }
    }

    /// The settings.
    pub fn config(&self) -> &NodeConfig {
        &self.config
    }

    /// The lease calls.
    pub fn lease(&self) -> &dyn lease::Store {
        self.lease.as_ref()
    }

    /// What the node believes now.
    pub fn view(&self) -> View {
        match self.view.read() {
            Ok(v) => v.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    fn set_view(&self, view: View) {
        match self.view.write() {
            Ok(mut v) => *v = view,
            Err(poisoned) => *poisoned.into_inner() = view,
        }
    }

    /// The API router of the current term, while this node leads.
    pub fn term(&self) -> Option<Router> {
        match self.term.read() {
            Ok(t) => t.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    fn set_term(&self, term: Option<Router>) {
        match self.term.write() {
            Ok(mut t) => *t = term,
            Err(poisoned) => *poisoned.into_inner() = term,
        }
    }

    /// Times this node became leader.
    pub fn takeovers(&self) -> u64 {
        self.takeovers.load(Ordering::Relaxed)
    }

    /// The answer of a standby: `503 NOT_LEADER` naming the leader's URL.
    pub fn not_leader(&self) -> ApiError {
        let view = self.view();
        let message = match (&view.leader_node_id, &view.leader_url) {
            (Some(id), Some(url)) => {
                format!("this node is a standby; the leader is `{id}` at {url}")
            }
            (Some(id), None) => format!("this node is a standby; the leader is `{id}`"),
            _ => "this node is a standby and no node holds the lease right now \
                  (a takeover is under way); retry shortly"
                .to_owned(),
        };
        ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "NOT_LEADER", message)
            .with("leader", view.leader_url.into())
    }

    /// `GET /v1/cluster` as this (leading) node answers it: the lease and
    /// the node contacts, read from the database.
    pub async fn status(&self) -> Result<ClusterStatus, ApiError> {
        let lease = self.lease.read().await.map_err(ApiError::storage)?;
        let contacts = self.lease.nodes().await.map_err(ApiError::storage)?;
        let timeout = u64::try_from(self.config.node_timeout.as_millis()).unwrap_or(u64::MAX);
        let live_leader = !lease.holder.is_empty() && !lease.expired();
        let nodes: Vec<ClusterNode> = contacts
            .iter()
            .map(|c| ClusterNode {
                node_id: c.node_id.clone(),
                advertise: c.advertise.clone(),
                role: if live_leader && c.node_id == lease.holder {
                    "leader".to_owned()
                } else {
                    "standby".to_owned()
                },
                live: c.db_now_ms.saturating_sub(c.last_seen_ms) <= timeout,
                last_seen: rfc3339(c.last_seen_ms),
                started_at: rfc3339(c.started_at_ms),
            })
            .collect();
        let leader = contacts
            .iter()
            .find(|c| live_leader && c.node_id == lease.holder)
            .map(|c| c.advertise.clone());
        Ok(ClusterStatus {
            mode: "leader".to_owned(),
            node_id: Some(self.config.node_id.clone()),
            leader_node_id: live_leader.then(|| lease.holder.clone()),
            leader,
            epoch: Some(lease.epoch),
            lease_expires_at: (lease.epoch > 0).then(|| rfc3339(lease.expires_at_ms)),
            nodes,
        })
    }

    /// The cluster lines of `/metrics`.
    pub fn metrics_text(&self) -> String {
        let view = self.view();
        let leader = u8::from(view.role == Role::Leader);
        format!(
            "# HELP orbit_cluster_leader 1 while this node is the leader (lease held, recovered), else 0.\n\
             # TYPE orbit_cluster_leader gauge\n\
             orbit_cluster_leader {leader}\n\
             # HELP orbit_cluster_takeovers_total Times this node took the lease and became leader.\n\
             # TYPE orbit_cluster_takeovers_total counter\n\
             orbit_cluster_takeovers_total {}\n\
             # HELP orbit_cluster_epoch The leadership epoch this node last saw.\n\
             # TYPE orbit_cluster_epoch gauge\n\
             orbit_cluster_epoch {}\n",
            self.takeovers(),
            view.epoch
        )
    }
}

/// A generated `--node-id`: the host name (when known) and a random suffix.
pub fn generated_node_id() -> String {
    let suffix: String = uuid::Uuid::new_v4().simple().to_string()[..8].to_owned();
    let host = std::env::var("HOSTNAME")
        .ok()
        .filter(|h| !h.is_empty() && h.chars().all(|c| c.is_ascii_alphanumeric() || c == '-'))
        .map(|h| h.chars().take(40).collect::<String>());
    match host {
        Some(h) => format!("{h}-{suffix}"),
        None => format!("node-{suffix}"),
    }
}

/// The `--advertise` default: `http://` and the `--listen` address (an
/// unspecified address such as `0.0.0.0` becomes the loopback one, which
/// only suits a single machine — pass `--advertise` otherwise).
pub fn advertise_from_listen(addr: std::net::SocketAddr) -> String {
    let ip = if addr.ip().is_unspecified() {
        match addr {
            std::net::SocketAddr::V4(_) => std::net::IpAddr::from([127, 0, 0, 1]),
            std::net::SocketAddr::V6(_) => std::net::IpAddr::from(std::net::Ipv6Addr::LOCALHOST),
        }
    } else {
        addr.ip()
    };
    format!("http://{}", std::net::SocketAddr::new(ip, addr.port()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_advertised_url_comes_from_the_listen_address() {
        let a: std::net::SocketAddr = "127.0.0.1:7373".parse().unwrap_or_else(|_| unreachable!());
        assert_eq!(advertise_from_listen(a), "http://127.0.0.1:7373");
        let b: std::net::SocketAddr = "0.0.0.0:8080".parse().unwrap_or_else(|_| unreachable!());
        assert_eq!(advertise_from_listen(b), "http://127.0.0.1:8080");
        let c: std::net::SocketAddr = "[::]:9".parse().unwrap_or_else(|_| unreachable!());
        assert_eq!(advertise_from_listen(c), "http://[::1]:9");
    }

    #[test]
    fn generated_ids_differ() {
        assert_ne!(generated_node_id(), generated_node_id());
    }
}
