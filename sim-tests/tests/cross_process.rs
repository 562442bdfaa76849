//! The same seed gives the same trace in two separate processes, not only
//! twice in one: nothing a run depends on (hash seeds, thread timing,
//! tokio's branch order, the system clock) may differ between processes.
//! The networked layer is run by this test binary itself in a child mode;
//! the core layer through the `orbit-sim` binary.
#![allow(clippy::unwrap_used)]

use orbit_sim_tests::net::{run, NetConfig};
use std::process::Command;

const CHILD: &str = "ORBIT_CROSS_PROCESS_NET_SEED";

/// The value of the first `name = value` in `text` (anywhere in a line:
/// the test harness prints the test's name before its output).
fn line_value(text: &str, name: &str) -> Option<String> {
    text.lines().find_map(|l| {
        let at = l.find(&format!("{name} ="))?;
        let rest = l[at + name.len()..].trim_start().strip_prefix('=')?;
        Some(rest.trim().to_owned())
    })
}

#[test]
fn net_trace_hash_is_the_same_in_two_processes() {
    if let Ok(seed) = std::env::var(CHILD) {
        let report = run(NetConfig::sample(seed.parse().unwrap()));
        println!("\nnet_trace_hash = {:016x}", report.trace_hash);
        println!("net_virtual_ms = {}", report.virtual_ms);
        return;
    }
    let exe = std::env::current_exe().unwrap();
    let child = || {
        let out = Command::new(&exe)
            .args([
                "--exact",
                "net_trace_hash_is_the_same_in_two_processes",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD, "2")
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(out.status.success(), "child failed:\n{text}");
        (
            line_value(&text, "net_trace_hash").unwrap_or_else(|| panic!("no hash in:\n{text}")),
            line_value(&text, "net_virtual_ms").unwrap(),
        )
    };
    let (a, b) = (child(), child());
    assert_eq!(a, b, "two processes, one seed, two traces");
}

#[test]
fn core_trace_hash_is_the_same_in_two_processes() {
    for scenario in ["swarm", "storage-faults", "crash-storm"] {
        let child = || {
            let out = Command::new(env!("CARGO_BIN_EXE_orbit-sim"))
                .args(["--seed", "0x5eed", "--scenario", scenario])
                .output()
                .unwrap();
            let text = String::from_utf8_lossy(&out.stdout).into_owned();
            line_value(&text, "trace_hash").unwrap_or_else(|| panic!("no hash in:\n{text}"))
        };
        assert_eq!(child(), child(), "{scenario}: two processes, two traces");
    }
}
