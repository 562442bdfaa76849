//! `GET /v1/cluster`: the nodes, the leader, the epoch and the lease's
//! expiry under `--cluster` (answered by the leader; a standby answers
//! `503 NOT_LEADER` like every other API call). A shared-mode member
//! answers `mode: shared` with the members of its last beat: the live ones
//! and those silent but not forgotten yet (`live: false`). A single server
//! answers `mode: single`.

use super::error::ApiError;
use super::AppState;
use crate::cluster::Node;
use axum::extract::State;
use axum::{Extension, Json};
use orbit_core::engine::rfc3339;
use orbit_sdk::wire::{ClusterNode, ClusterStatus};
use std::sync::Arc;

/// The cluster as the leader sees it.
#[utoipa::path(get, path = "/v1/cluster", tag = "health",
    responses((status = 200, description = "the nodes, the leader's id and URL, the epoch and \
        the lease's expiry (`mode: leader`), or `mode: single` without `--cluster`; a standby \
        answers `503 NOT_LEADER` instead", body = ClusterStatus)))]
pub async fn status(
    State(state): State<AppState>,
    node: Option<Extension<Arc<Node>>>,
) -> Result<Json<ClusterStatus>, ApiError> {
    if let Some(member) = state.driver.membership() {
        return Ok(Json(shared(&state, member)));
    }
    match node {
        Some(Extension(node)) => node.status().await.map(Json),
        None => Ok(Json(ClusterStatus {
            mode: "single".to_owned(),
            node_id: None,
            leader_node_id: None,
            leader: None,
            epoch: None,
            lease_expires_at: None,
            nodes: Vec::new(),
        })),
    }
}

/// Shared mode: the members this node's last beat found, live or silent
/// (not heard from within `--node-timeout`, kept for ten of them), by node
/// id, each with `role: member`. There is no leader, epoch or lease: each
/// execution has its own owner and epoch.
fn shared(state: &AppState, member: &orbit_core::node::Member) -> ClusterStatus {
    let (members, at) = state.driver.members().unwrap_or_default();
    let live = members.live.iter().map(|m| (m, true));
    let silent = members.silent.iter().map(|m| (m, false));
    let mut nodes: Vec<ClusterNode> = live
        .chain(silent)
        .map(|(m, live)| ClusterNode {
            node_id: m.node_id.clone(),
            advertise: m.advertise.clone(),
            role: "member".to_owned(),
            live,
            last_seen: rfc3339(at.saturating_sub(m.silent_ms)),
            started_at: rfc3339(at.saturating_sub(m.up_ms)),
        })
        .collect();
    nodes.sort_by(|a, b| a.node_id.cmp(&b.node_id));
    ClusterStatus {
        mode: "shared".to_owned(),
        node_id: Some(member.node_id.clone()),
        leader_node_id: None,
        leader: None,
        epoch: None,
        lease_expires_at: None,
        nodes,
    }
}
