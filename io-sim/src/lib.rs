//! `orbit-io-sim`: the deterministic simulation driver of ORBIT.
//!
//! A single-threaded, seeded world ([`World`]) drives the core's node loop
//! (`orbit_core::node::Node`: the same group commits, `Conflict` splits,
//! reloads and ticks as production) around the unchanged
//! `orbit_core::Engine` under virtual time. Everything random — the sampled
//! configuration, message delays and losses, which fault strikes and when,
//! tokens and generated ids — comes from one ChaCha8 stream seeded with the
//! run's `u64` seed, so a seed reproduces a run exactly. The world holds a
//! crash-consistent simulated store ([`store::SimStore`], which also
//! implements the core's `Storage` trait and passes its contract suite),
//! simulated workers and clients, an external payment model, and invariant
//! checkers ([`check`]) run after every commit and acknowledgement. The
//! crate depends on `orbit-core` alone (no tokio, sqlx or HTTP stack); the
//! networked layer that runs the real server lives in `sim-tests`.
//!
//! ```no_run
//! use orbit_io_sim::{run, Scenario};
//! let report = run(0x1234, Scenario::CrashStorm);
//! println!("{}\n{report}", report.config);
//! assert_eq!(report.outcome.exit_code(), 0);
//! ```

pub mod bugs;
mod builtin;
pub mod check;
mod client;
pub mod config;
pub mod convert;
pub mod payment;
pub mod report;
pub mod rng;
pub mod store;
mod worker;
pub mod workload;
mod world;

pub use bugs::Bugs;
pub use config::{Faults, Scenario, SimConfig};
pub use orbit_core::cluster::ClusterBug;
pub use orbit_core::engine::Bug;
pub use orbit_core::node::NodeStats;
pub use report::{Outcome, Report};
pub use world::lockstep::without_eviction;
pub use world::{RunOptions, World, EPOCH_MS};

/// Runs one seed of `scenario` and reports. A panic inside the engine or
/// the simulator is caught and reported as a crash.
pub fn run(seed: u64, scenario: Scenario) -> Report {
    run_with(SimConfig::sample(seed, scenario), RunOptions::default())
}

/// Runs `config` with `options` (tracing, planted bugs).
pub fn run_with(config: SimConfig, options: RunOptions) -> Report {
    let cfg = config.clone();
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
        if config.scenario == Scenario::EvictionInvisible {
            world::lockstep::run_pair(config, options)
        } else {
            World::new(config, options).map(World::run)
        }
    }));
    let crash = |message: String| Report {
        config: cfg.clone(),
        outcome: Outcome::Crash(message),
        trace_hash: 0,
        virtual_ms: 0,
        stats: report::Stats::default(),
    };
    match result {
        Ok(Ok(report)) => report,
        Ok(Err(message)) => crash(format!("setup failed: {message}")),
        Err(panic) => {
            let message = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                .unwrap_or_else(|| "panic".to_owned());
            crash(message)
        }
    }
}
