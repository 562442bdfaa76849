//! The networked simulation layer: the real axum server (`server::api`) over
//! the real io-tokio driver on the simulated store, real SDK workers and an
//! SDK client, all hosts of one seeded turmoil simulation. Faults are
//! network partitions that heal, held links that are released, message
//! delay, server crashes and bounces, a cluster's leader cut off from the
//! database and its workers, and storage faults under the real
//! driver ([`FaultyStore`]: unavailable and ambiguous commits, failed
//! reads); committed data lives in the
//! [`SimStore`](orbit_io_sim::store::SimStore), which survives the crash. At the end the core layer's
//! checkers run on the durable histories.
//!
//! Determinism: turmoil's network and the hosts' schedule come from the
//! seed, the driver reads turmoil's virtual clock and draws ids from a
//! seeded counter ([`Sources`]), and every id and key the client sends is
//! derived from the seed. The driver's `select!` is `biased;` (no random
//! branch order), and the API's idempotency edge reads the driver's clock
//! rather than the system's (see `docs/src/simulation/networked.md`).

mod faulty;
mod lease;
mod listener;
mod scenario;
mod transport;

pub use faulty::{FaultyStore, Link, StoreFaults};
pub use lease::SimLease;
pub use listener::{serve, Listener};
pub use scenario::{run, NetConfig, NetReport};
pub use transport::TurmoilTransport;

use orbit_io_tokio::driver::Sources;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// The simulation's clock origin: zero. Nothing in the server reads the
/// system clock — the engine, the idempotency edge and its purge, and the
/// metrics all read the driver's clock, which is turmoil's virtual time —
/// so a run's time starts where its virtual time does.
pub const NET_EPOCH_MS: u64 = 0;

/// The driver's clock, ids and hash seed for one run: turmoil's virtual
/// time since [`NET_EPOCH_MS`], UUID-shaped ids from `seed` and a counter
/// shared by every incarnation of the server (so a bounce never repeats an
/// id), and `seed` itself.
pub fn sources(seed: u64, counter: Arc<AtomicU64>) -> Sources {
    Sources {
        hash_seed: seed,
        clock: Arc::new(|| {
            turmoil::since_epoch()
                .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
                .unwrap_or(NET_EPOCH_MS)
        }),
        ids: Arc::new(move || {
            let n = counter.fetch_add(1, Ordering::Relaxed);
            format!(
                "{:08x}-{:04x}-4{:03x}-8{:03x}-{:012x}",
                (seed >> 32) as u32,
                (seed >> 16) as u16,
                seed & 0xfff,
                (n >> 48) & 0xfff,
                n & 0xffff_ffff_ffff
            )
        }),
    }
}
