//! Every named scenario over a fixed, CI-sized set of seeds. Reproduce one
//! run with `ORBIT_SEED=0x1234 cargo test -p sim-tests NAME` or
//! `cargo run -p sim-tests --bin orbit-sim -- --seed 0x1234 --scenario NAME`.

use orbit_io_sim::Scenario;
use orbit_sim_tests::{assert_seeds_pass, ci_seeds};

/// Seeds per scenario in CI (debug builds run about 20 seeds a second).
const SEEDS: u64 = 30;

/// Seeds that fail because of known, not yet fixed engine bugs; each is
/// kept as an ignored regression test in `tests/regressions.rs` and skipped
/// here until the engine is fixed. (Findings 1 and 2 are fixed: empty.)
const KNOWN_ENGINE_BUGS: &[(Scenario, u64)] = &[];

fn run(scenario: Scenario, base: u64) {
    let seeds: Vec<u64> = ci_seeds(base, SEEDS)
        .into_iter()
        .filter(|s| !KNOWN_ENGINE_BUGS.contains(&(scenario, *s)))
        .collect();
    assert_seeds_pass(scenario, &seeds);
}

#[test]
fn swarm() {
    run(Scenario::Swarm, 1);
}

#[test]
fn steady_load() {
    run(Scenario::SteadyLoad, 2);
}

#[test]
fn crash_storm() {
    run(Scenario::CrashStorm, 3);
}

#[test]
fn lost_workers() {
    run(Scenario::LostWorkers, 4);
}

#[test]
fn late_and_duplicate_results() {
    run(Scenario::LateAndDuplicate, 5);
}

#[test]
fn storage_faults() {
    run(Scenario::StorageFaults, 6);
}

#[test]
fn cancellation_and_compensation_under_faults() {
    run(Scenario::CancelCompensation, 7);
}

#[test]
fn signals_and_sleeps_across_restarts() {
    run(Scenario::SignalsSleeps, 8);
}

#[test]
fn child_workflows_across_crashes() {
    run(Scenario::ChildWorkflows, 9);
}

#[test]
fn idempotent_starts_with_lost_responses() {
    run(Scenario::IdempotentStarts, 10);
}

#[test]
fn clock_jumps_across_crashes() {
    run(Scenario::ClockJumps, 11);
}

#[test]
fn builtin_http_task_across_crashes() {
    run(Scenario::BuiltinHttp, 12);
}

#[test]
fn cluster_leader_with_takeovers_pauses_and_skew() {
    run(Scenario::ClusterLeader, 13);
}
/// Shared mode: three nodes over one database, seeds 0 to 50. About a
/// second in release.
#[test]
fn cluster_shared_with_takeovers_pauses_inbox_and_claims() {
    assert_seeds_pass(Scenario::ClusterShared, &ci_seeds(0, 51));
}

/// Each seed runs twice (eviction off, then forced), so this costs about
/// two scenarios.
#[test]
fn eviction_is_invisible_under_faults() {
    run(Scenario::EvictionInvisible, 14);
}
