//! `orbit bench --workload recovery|sleepers` through the real binary, at a
//! small size: the recovery run kills its server with executions in flight
//! and every one completes after the restart; the sleepers run puts every
//! execution to sleep and reads a resident size; `--server` is refused.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::Value;
use std::process::{Command, Output};

fn bench(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_orbit"))
        .arg("bench")
        .args(args)
        .output()
        .expect("run orbit bench")
}

fn json_report(out: &Output) -> Value {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout}\n{stderr}"))
}

#[test]
fn recovery_completes_every_execution_after_a_kill() {
    let out = bench(&[
        "--workload",
        "recovery",
        "--executions",
        "200",
        "--concurrency",
        "20",
        "--workers",
        "2",
        "--session-timeout",
        "500ms",
        "--quiet",
        "--json",
    ]);
    let r = json_report(&out);
    assert_eq!(r["workload"], "recovery");
    assert_eq!(r["backend"], "sqlite");
    assert_eq!(r["executions"], 200);
    assert_eq!(r["steps_per_workflow"], 4);
    // Every execution was in flight at the kill, mid-chain: created,
    // started, two steps done (3 events each), the third scheduled and
    // dispatched.
    assert_eq!(r["recovered_executions"], 200);
    assert_eq!(r["recovered_events"], 200 * 10);
    assert_eq!(r["completed"], 200);
    assert_eq!(r["errors"], 0);
    let ready = r["ready_ms"].as_f64().unwrap();
    let first = r["first_answer_ms"].as_f64().unwrap();
    let complete = r["complete_s"].as_f64().unwrap();
    assert!(ready > 0.0 && ready <= first, "{r}");
    // The held tasks wait one session timeout before they are handed out again.
    assert!(
        complete * 1000.0 >= 500.0 && complete * 1000.0 >= first,
        "{r}"
    );
    assert!(r["rss_after_recovery_mib"].as_f64().unwrap() > 0.0, "{r}");
}

#[test]
fn sleepers_fall_asleep_and_the_server_has_a_resident_size() {
    let out = bench(&[
        "--workload",
        "sleepers",
        "--executions",
        "200",
        "--concurrency",
        "20",
        "--idle-evict",
        "1s",
        "--quiet",
        "--json",
    ]);
    let r = json_report(&out);
    assert_eq!(r["workload"], "sleepers");
    // Every sleeper left the server's memory (`--idle-evict`).
    assert_eq!(r["evicted"], 200, "{r}");
    assert_eq!(r["executions"], 200);
    assert_eq!(r["asleep"], 200);
    assert_eq!(r["errors"], 0);
    assert_eq!(r["sample_asleep"], r["sampled"]);
    assert!(r["sampled"].as_u64().unwrap() > 0);
    let rss = r["rss_mib"].as_f64().unwrap();
    assert!(
        rss > 0.0 && rss >= r["idle_rss_mib"].as_f64().unwrap() * 0.5,
        "{r}"
    );
    assert!(r["peak_rss_mib"].as_f64().unwrap() >= rss, "{r}");
    assert!(r["starts_per_s"].as_f64().unwrap() > 0.0);
    assert!(r["restart_ready_ms"].as_f64().unwrap() > 0.0, "{r}");
    assert!(r["restart_rss_mib"].as_f64().unwrap() > 0.0, "{r}");
}

#[test]
fn the_text_line_names_the_workload() {
    let out = bench(&[
        "--workload",
        "sleepers",
        "--executions",
        "5",
        "--no-restart",
        "--quiet",
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    assert_eq!(stdout.lines().count(), 1, "{stdout}");
    assert!(stdout.starts_with("orbit bench sleepers:"), "{stdout}");
    assert!(stdout.contains("bytes/execution"), "{stdout}");
}

#[test]
fn the_process_workloads_refuse_a_running_server() {
    for workload in ["recovery", "sleepers"] {
        let out = bench(&["--workload", workload, "--server", "http://127.0.0.1:9"]);
        assert_eq!(out.status.code(), Some(2));
        assert!(String::from_utf8_lossy(&out.stderr).contains("--server"));
    }
}
