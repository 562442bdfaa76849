//! `orbit bench` through the real binary: a small run on the default
//! (scratch SQLite) backend prints JSON with every figure, the text line,
//! progress on stderr, and usage errors exit with 2; a server of a
//! `--server` list that cannot be reached is passed over.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod cli_support;

use serde_json::Value;
use std::process::{Command, Output};

fn bench(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_orbit"))
        .arg("bench")
        .args(args)
        .output()
        .expect("run orbit bench")
}

#[test]
fn a_small_run_reports_every_figure_as_json() {
    let out = bench(&[
        "--executions",
        "40",
        "--concurrency",
        "8",
        "--steps",
        "2",
        "--workers",
        "2",
        "--json",
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    let report: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(report["backend"], "sqlite");
    assert_eq!(report["executions"], 40);
    assert_eq!(report["completed"], 40);
    assert_eq!(report["errors"], 0);
    assert_eq!(report["steps_per_workflow"], 2);
    assert!(report["steps_per_s"].as_f64().unwrap() > 0.0);
    assert!(report["executions_per_s"].as_f64().unwrap() > 0.0);
    let e = &report["execution_latency_ms"];
    assert_eq!(e["count"], 40);
    assert!(e["p50"].as_f64().unwrap() > 0.0);
    assert!(e["p50"].as_f64() <= e["p99"].as_f64());
    // One hand-off per step after the first.
    assert_eq!(report["step_latency_ms"]["count"], 40);
}

#[test]
fn the_default_output_is_one_line_of_text() {
    let out = bench(&["--executions", "10", "--concurrency", "5", "--quiet"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    assert_eq!(stdout.lines().count(), 1, "{stdout}");
    assert!(stdout.contains("steps/s"), "{stdout}");
    assert!(stdout.contains("backend=sqlite"), "{stdout}");
    assert!(!String::from_utf8_lossy(&out.stderr).contains("executions done"));
}

#[test]
fn bad_settings_exit_with_2() {
    for args in [
        &["--executions", "0"][..],
        &["--steps", "0"][..],
        &["--db", "mysql://nope"][..],
        &["--db", "sqlite://x.db", "--server", "http://127.0.0.1:1"][..],
    ] {
        let out = bench(args);
        assert_eq!(
            out.status.code(),
            Some(2),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn an_unreachable_server_is_an_error_not_a_hang() {
    let out = bench(&["--server", "http://127.0.0.1:1", "--executions", "1"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("error"));
}

#[test]
fn a_server_of_the_list_that_cannot_be_reached_is_passed_over() {
    // The first URL refuses connections (a killed member); every starter
    // and worker whose own server it is moves to the next one.
    let server = cli_support::Server::start(&[]);
    let dead = format!("http://{}", cli_support::free_addr());
    let servers = format!("{dead},{}", server.url);
    let out = bench(&[
        "--server",
        &servers,
        "--executions",
        "30",
        "--concurrency",
        "6",
        "--steps",
        "2",
        "--workers",
        "2",
        "--json",
        "--quiet",
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    let report: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(report["completed"], 30, "{report}");
    assert_eq!(report["errors"], 0, "{report}");
}

#[test]
fn a_padded_input_reaches_the_executions_and_the_report() {
    let server = cli_support::Server::start(&[]);
    let out = bench(&[
        "--server",
        &server.url,
        "--executions",
        "6",
        "--concurrency",
        "3",
        "--steps",
        "2",
        "--input-bytes",
        "3000",
        "--json",
        "--quiet",
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    let report: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(report["completed"], 6);
    assert_eq!(report["input_bytes"], 3000);
    let listed = cli_support::orbit(&server.url, &["ls", "--limit", "1", "--json"]);
    assert_eq!(listed.code, 0, "{}", listed.stderr);
    let listed: Value = serde_json::from_str(&listed.stdout).unwrap();
    let id = listed["executions"][0]["execution_id"].as_str().unwrap();
    let status = cli_support::orbit(&server.url, &["status", id, "--json"]);
    assert_eq!(status.code, 0, "{}", status.stderr);
    let status: Value = serde_json::from_str(&status.stdout).unwrap();
    assert_eq!(status["status"], "completed");
    assert_eq!(status["input"]["n"], 0);
    let pad = status["input"]["pad"].as_array().unwrap();
    assert_eq!(pad.len(), 94, "3,000 bytes in items of 32");
    assert_eq!(serde_json::to_string(pad).unwrap().len(), 94 * 32 + 1);
}
