//! `GET /v1/cluster`: the nodes, the leader, the epoch and the lease's
//! expiry under `--cluster` (answered by the leader; a standby answers
//! `503 NOT_LEADER` like every other API call). A single server answers
//! `mode: single`.

use super::error::ApiError;
use crate::cluster::Node;
use axum::{Extension, Json};
use orbit_sdk::wire::ClusterStatus;
use std::sync::Arc;

/// The cluster as the leader sees it.
#[utoipa::path(get, path = "/v1/cluster", tag = "health",
    responses((status = 200, description = "the nodes, the leader's id and URL, the epoch and \
        the lease's expiry (`mode: leader`), or `mode: single` without `--cluster`; a standby \
        answers `503 NOT_LEADER` instead", body = ClusterStatus)))]
pub async fn status(node: Option<Extension<Arc<Node>>>) -> Result<Json<ClusterStatus>, ApiError> {
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
