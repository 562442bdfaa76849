//! The networked layer: the real axum server, io-tokio driver and SDK
//! worker/client as turmoil hosts, under partitions, holds, message delay
//! and server crashes/bounces; and a `--cluster` of real nodes (supervisor,
//! lease, fenced terms, `NOT_LEADER` router) whose leader is cut off from
//! the database and its workers, or killed. A few seeds keep CI time short;
//! reproduce one with
//! `ORBIT_SEED=<seed> cargo test -p sim-tests --test net_turmoil`.
#![allow(clippy::unwrap_used)]

use orbit_io_sim::check::Invariant;
use orbit_io_sim::store::StoreBug;
use orbit_sim_tests::net::{run, NetConfig};

/// The CI seeds, or the one in `ORBIT_SEED`.
fn seeds() -> Vec<u64> {
    match std::env::var("ORBIT_SEED") {
        Ok(s) => {
            let s = s.trim();
            let seed = match s.strip_prefix("0x") {
                Some(hex) => u64::from_str_radix(hex, 16).unwrap(),
                None => s.parse().unwrap(),
            };
            vec![seed]
        }
        Err(_) => vec![1, 2, 3],
    }
}

#[test]
fn net_seeds_hold_the_invariants_under_network_and_crash_faults() {
    for seed in seeds() {
        let report = run(NetConfig::sample(seed));
        println!("{report}");
        assert!(
            report.passed(),
            "{report}\nrepro: ORBIT_SEED={seed:#x} cargo test -p sim-tests --test net_turmoil"
        );
        // The faults really struck: every schedule crashes the server.
        assert!(
            report.faults.get("crash").copied().unwrap_or(0) >= 1,
            "{report}"
        );
        assert_eq!(report.completed, report.config.executions, "{report}");
        // Each execution: its start, and at least its two tasks handed out.
        assert!(
            report.facts >= 3 * report.config.executions as usize,
            "{report}"
        );
    }
}

#[test]
fn net_cluster_seeds_fail_over_when_the_leader_is_isolated_or_killed() {
    for seed in seeds() {
        let report = run(NetConfig::sample_cluster(seed));
        println!("{report}");
        assert!(
            report.passed(),
            "{report}\nrepro: ORBIT_SEED={seed:#x} cargo test -p sim-tests --test net_turmoil net_cluster"
        );
        // The leader was cut off past --node-timeout: another node took
        // the lease, and everything finished on it.
        assert!(
            report.faults.get("isolate").copied().unwrap_or(0) >= 1,
            "{report}"
        );
        assert!(report.epoch >= 2, "no takeover happened: {report}");
        assert_eq!(report.completed, report.config.executions, "{report}");
    }
}

#[test]
fn net_schedules_differ_between_seeds_and_print_the_seed() {
    let a = NetConfig::sample(1);
    let b = NetConfig::sample(2);
    assert!(a.to_string().starts_with("seed=0x1 "), "{a}");
    assert_ne!(format!("{:?}", a.schedule), format!("{:?}", b.schedule));
}

/// A seed replays exactly, whatever ran before it in the process: between
/// runs, tokio tasks are spawned elsewhere so that the process-wide task
/// ids the runs see are shifted (a crashed runtime once closed connections
/// in an order that depended on them).
#[test]
fn net_same_seed_gives_the_same_trace_hash() {
    let seed = seeds()[0];
    for sample in [NetConfig::sample, NetConfig::sample_cluster] {
        let a = run(sample(seed));
        for shift in 1..=3 {
            spawn_unrelated_tasks(shift);
            let b = run(sample(seed));
            println!("{a}{b}");
            assert_eq!(a.trace_hash, b.trace_hash, "seed {seed:#x}, shift {shift}");
            assert_eq!(a.virtual_ms, b.virtual_ms, "seed {seed:#x}, shift {shift}");
        }
    }
}

/// Spawns and finishes `n` tasks on a runtime of their own.
fn spawn_unrelated_tasks(n: usize) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    runtime.block_on(async {
        for _ in 0..n {
            tokio::spawn(async {}).await.unwrap();
        }
    });
}

#[test]
fn net_catches_a_store_that_loses_its_last_commit_on_crash() {
    let caught = (1..=3).any(|seed| {
        let mut config = NetConfig::sample(seed);
        config.store_bug = StoreBug::LoseLastCommitOnCrash;
        let report = run(config);
        println!("{report}");
        report
            .violations
            .iter()
            .any(|v| v.invariant == Invariant::NoLostCommits)
    });
    assert!(
        caught,
        "a store dropping its last commit on crash went unnoticed in 3 seeds"
    );
}
