//! Translation between the engine's batch format and the core storage contract
//! records: the production driver's own mapping, so the simulated store
//! speaks exactly the `Storage` contract.

pub use orbit_core::store::convert::*;

/// The node name written with fenced appends (single node).
pub const NODE: &str = "sim-node";
