//! `sim-tests`: named simulation scenarios run over fixed seeds in CI
//! (`tests/`), the networked simulation of the real server ([`net`], which
//! depends on `orbit-server` and tokio and so lives here rather than in
//! `orbit-io-sim`), and the `orbit-sim` explorer binary that runs many seeds
//! and prints a one-line repro for each failure.
//!
//! This library holds what they share: parsing seeds, running a set of
//! seeds of a scenario, and `ORBIT_SEED` handling.

pub mod net;

use orbit_io_sim::{run, Report, Scenario};

/// Parses a seed written in decimal or `0x` hexadecimal.
pub fn parse_seed(text: &str) -> Option<u64> {
    let t = text.trim();
    match t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => t.parse().ok(),
    }
}

/// The seeds a CI test runs: `ORBIT_SEED` alone when it is set (to
/// reproduce one run), otherwise `count` fixed seeds derived from `base`.
pub fn ci_seeds(base: u64, count: u64) -> Vec<u64> {
    if let Some(seed) = std::env::var("ORBIT_SEED")
        .ok()
        .and_then(|s| parse_seed(&s))
    {
        return vec![seed];
    }
    (0..count)
        .map(|i| base.wrapping_mul(1000).wrapping_add(i))
        .collect()
}

/// Runs every seed and returns the failing reports.
pub fn failures(scenario: Scenario, seeds: &[u64]) -> Vec<Report> {
    seeds
        .iter()
        .map(|s| run(*s, scenario))
        .filter(|r| r.outcome.exit_code() != 0)
        .collect()
}

/// Runs `seeds` of `scenario` and panics with every failure's report and
/// repro line (the body of each CI scenario test).
pub fn assert_seeds_pass(scenario: Scenario, seeds: &[u64]) {
    let failed = failures(scenario, seeds);
    if failed.is_empty() {
        return;
    }
    let mut text = format!(
        "{} of {} seeds of {scenario} failed:\n",
        failed.len(),
        seeds.len()
    );
    for r in &failed {
        text.push_str(&format!(
            "--- seed {:#x}\n{}{}\n",
            r.config.seed, r.config, r
        ));
    }
    panic!("{text}");
}

/// Runs seeds `0..max` of `scenario` with `bugs` planted and returns the
/// first seed whose run fails, with its report (the "teeth" tests).
pub fn first_catch(
    scenario: Scenario,
    bugs: orbit_io_sim::Bugs,
    max: u64,
) -> Option<(u64, Report)> {
    first_catch_with(
        scenario,
        &orbit_io_sim::RunOptions {
            bugs,
            ..orbit_io_sim::RunOptions::default()
        },
        max,
    )
}

/// Like [`first_catch`], with bugs planted in the engine itself.
pub fn first_catch_planted(
    scenario: Scenario,
    bug: orbit_io_sim::Bug,
    max: u64,
) -> Option<(u64, Report)> {
    first_catch_with(
        scenario,
        &orbit_io_sim::RunOptions {
            plant: vec![bug],
            ..orbit_io_sim::RunOptions::default()
        },
        max,
    )
}

/// Like [`first_catch`], with a bug planted in the cluster rules (the
/// `cluster-leader` scenario).
pub fn first_catch_cluster(bug: orbit_io_sim::ClusterBug, max: u64) -> Option<(u64, Report)> {
    first_catch_with(
        Scenario::ClusterLeader,
        &orbit_io_sim::RunOptions {
            cluster_plant: vec![bug],
            ..orbit_io_sim::RunOptions::default()
        },
        max,
    )
}

fn first_catch_with(
    scenario: Scenario,
    options: &orbit_io_sim::RunOptions,
    max: u64,
) -> Option<(u64, Report)> {
    (0..max).find_map(|seed| {
        let report = orbit_io_sim::run_with(
            orbit_io_sim::SimConfig::sample(seed, scenario),
            options.clone(),
        );
        (report.outcome.exit_code() != 0).then_some((seed, report))
    })
}
