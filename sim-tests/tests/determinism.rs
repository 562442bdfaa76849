//! Invariant 5's other half: the same seed gives the same trace, byte for
//! byte (compared by hash), whatever the scenario.
#![allow(clippy::unwrap_used)]

use orbit_io_sim::{run, Scenario};

#[test]
fn same_seed_gives_the_same_trace_hash() {
    for scenario in Scenario::ALL {
        for seed in [7, 0xdead_beef] {
            let a = run(seed, scenario);
            let b = run(seed, scenario);
            assert_eq!(a.trace_hash, b.trace_hash, "{scenario} seed {seed:#x}");
            assert_eq!(a.outcome, b.outcome, "{scenario} seed {seed:#x}");
            assert_eq!(a.stats, b.stats, "{scenario} seed {seed:#x}");
            assert_eq!(a.virtual_ms, b.virtual_ms);
        }
    }
}

#[test]
fn different_seeds_explore_different_worlds() {
    let hashes: std::collections::BTreeSet<u64> = (0..10)
        .map(|seed| run(seed, Scenario::Swarm).trace_hash)
        .collect();
    assert_eq!(hashes.len(), 10);
}

#[test]
fn the_configuration_is_sampled_from_the_seed_and_printed_whole() {
    let a = orbit_io_sim::SimConfig::sample(42, Scenario::Swarm);
    let b = orbit_io_sim::SimConfig::sample(42, Scenario::Swarm);
    assert_eq!(a, b);
    let text = a.to_string();
    for field in [
        "seed = 0x2a (42)",
        "scenario = swarm",
        "store_commit_fail_probability = ",
        "store_commit_ambiguous_probability = ",
        "server_crash_interval_ms_mean = ",
        "net_loss_probability = ",
        "worker_pause_probability = ",
        "session_timeout_ms = ",
    ] {
        assert!(text.contains(field), "{field} missing from:\n{text}");
    }
}
