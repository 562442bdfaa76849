//! The `orbit-sim` binary: configuration printed first, exit codes, one
//! repro line per failure.
#![allow(clippy::unwrap_used)]

use std::process::Command;

fn orbit_sim(args: &[&str]) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_orbit-sim"))
        .args(args)
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.code().unwrap_or(-1), text)
}

#[test]
fn one_seed_prints_its_configuration_first_then_passes() {
    let (code, text) = orbit_sim(&["--seed", "0x10", "--scenario", "steady-load"]);
    assert_eq!(code, 0, "{text}");
    assert!(
        text.starts_with("seed = 0x10 (16)\nscenario = steady-load\n"),
        "{text}"
    );
    assert!(text.contains("outcome = pass"), "{text}");
    assert!(text.contains("trace_hash = "), "{text}");
}

#[test]
fn many_seeds_print_a_summary() {
    let (code, text) = orbit_sim(&["--seeds", "3", "--scenario", "crash-storm"]);
    assert_eq!(code, 0, "{text}");
    assert!(text.contains("3 runs, 0 failed"), "{text}");
    assert!(text.contains("seeds/min"), "{text}");
    assert!(text.contains("faults injected: "), "{text}");
}

#[test]
fn faults_can_be_restricted_and_the_restriction_is_printed() {
    let (code, text) = orbit_sim(&["--seed", "3", "--scenario", "swarm", "--faults", "crash"]);
    assert_eq!(code, 0, "{text}");
    assert!(text.contains("faults = crash\n"), "{text}");
    assert!(text.contains("net_loss_probability = 0\n"), "{text}");
}

#[test]
fn bad_usage_exits_64() {
    assert_eq!(orbit_sim(&["--scenario", "nope"]).0, 64);
    assert_eq!(orbit_sim(&["--seed"]).0, 64);
    assert_eq!(orbit_sim(&["--faults", "gremlins"]).0, 64);
    assert_eq!(orbit_sim(&["--seed", "1", "--seeds", "2"]).0, 64);
}

/// simulation.md's exploring command, `orbit-sim --seeds N --mode shared
/// --faults crash,partition,skew,takeover`: `--mode` picks the cluster
/// scenario, `skew` is the `clock` kind and `takeover` is `pause` and
/// `db-cut`.
#[test]
fn the_spec_command_with_mode_and_its_fault_names_runs() {
    let (code, text) = orbit_sim(&[
        "--seed",
        "1",
        "--mode",
        "shared",
        "--faults",
        "crash,partition,skew,takeover",
    ]);
    assert_eq!(code, 0, "{text}");
    assert!(text.contains("scenario = cluster-shared\n"), "{text}");
    assert!(
        text.contains("faults = crash,partition,clock,pause,db-cut\n"),
        "{text}"
    );
    let (code, text) = orbit_sim(&["--seed", "1", "--mode", "leader"]);
    assert_eq!(code, 0, "{text}");
    assert!(text.contains("scenario = cluster-leader\n"), "{text}");
    let (code, text) = orbit_sim(&["--seed", "1", "--mode", "single"]);
    assert_eq!(code, 0, "{text}");
    assert!(text.contains("scenario = swarm\n"), "{text}");
    assert_eq!(orbit_sim(&["--mode", "both"]).0, 64);
    assert_eq!(
        orbit_sim(&["--mode", "shared", "--scenario", "crash-storm"]).0,
        64
    );
    assert_eq!(
        orbit_sim(&["--mode", "single", "--scenario", "cluster-leader"]).0,
        64
    );
}
