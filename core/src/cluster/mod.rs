//! The rules of `--cluster` leader mode, free of I/O and clocks, followed by
//! both drivers — the production supervisor over PostgreSQL and the
//! simulated cluster of `orbit-io-sim`: the lease as the database reports
//! it and when a standby may take it ([`lease`]), when a leader renews or
//! must step down, and the fence every leader write checks inside its own
//! transaction ([`fence`]). Deliberate mistakes for the simulator's teeth
//! live in [`planted`], behind the `planted-bugs` feature.

pub mod fence;
pub mod lease;
pub mod planted;

pub use fence::check_leader;
pub use lease::{LeaseState, Rules};
pub use planted::ClusterBug;
