//! The client commands of the real `orbit` binary against a real
//! `orbit server`: outputs, `--json`, and the exit codes of `api.md`
//! (0 ok, 1 refused or failed, 2 usage/I-O/connection, 3 `--wait` timeout).

#![allow(clippy::unwrap_used)]

mod cli_support;

use std::time::Duration;

use cli_support::{free_addr, orbit, without_offset, Server, PLAIN};
use orbit_sdk::{Task, TaskError, Worker};
use serde_json::{json, Value};

/// Runs a worker for `demo.work` in the background until the runtime drops.
fn worker(server: &Server) -> tokio::runtime::Runtime {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let w = Worker::builder("cli-worker")
        .poll_wait(Duration::from_millis(500))
        .handler("demo.work", |task: Task| async move {
            let n = task.input["n"].as_i64().unwrap_or(0);
            if n < 0 {
                return Err(TaskError::fatal("NEGATIVE", "n must not be negative"));
            }
            Ok(json!({ "doubled": n * 2 }))
        })
        .connect(&server.url)
        .unwrap();
    rt.spawn(async move { w.run(std::future::pending()).await });
    rt
}

fn deploy(server: &Server) {
    let file = server.file("plain.orbit", PLAIN);
    let r = orbit(&server.url, &["deploy", &file]);
    assert_eq!(r.code, 0, "{r:?}");
}

fn json_of(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
}

#[test]
fn deploy_run_wait_status_ls_logs() {
    let server = Server::start(&[]);
    let file = server.file("plain.orbit", PLAIN);

    let r = orbit(&server.url, &["deploy", &file]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.contains("workflow Plain 1.0.0 "), "{}", r.stdout);
    assert!(r.stdout.contains(" registered"), "{}", r.stdout);
    assert!(
        r.stdout.contains("task demo.work 1.0.0 registered"),
        "{}",
        r.stdout
    );
    // Deploying the same content again changes nothing.
    let r = orbit(&server.url, &["deploy", &file, "--json"]);
    assert_eq!(r.code, 0, "{r:?}");
    let v = json_of(&r.stdout);
    assert_eq!(v["workflows"][0]["created"], false);

    let _rt = worker(&server);
    let r = orbit(
        &server.url,
        &[
            "run",
            "Plain",
            "--input",
            r#"{"n": 21}"#,
            "--id",
            "p-1",
            "--wait",
        ],
    );
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.contains("p-1 completed"), "{}", r.stdout);
    assert!(r.stdout.contains(r#"{"doubled":42}"#), "{}", r.stdout);

    // Same id again: not started twice, exit 0.
    let r = orbit(
        &server.url,
        &["run", "Plain", "--input", r#"{"n": 21}"#, "--id", "p-1"],
    );
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(r.stdout, "p-1\n");
    assert!(r.stderr.contains("already exists"), "{}", r.stderr);

    // A failing execution under --wait exits 1.
    let r = orbit(
        &server.url,
        &[
            "run",
            "Plain",
            "--input",
            r#"{"n": -1}"#,
            "--id",
            "p-2",
            "--wait",
            "--json",
        ],
    );
    assert_eq!(r.code, 1, "{r:?}");
    let v = json_of(&r.stdout);
    assert_eq!(v["status"], "failed");
    assert_eq!(v["error"]["code"], "NEGATIVE");

    let r = orbit(&server.url, &["status", "p-1"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.contains("status     completed"), "{}", r.stdout);
    assert!(r.stdout.contains("workflow   Plain 1.0.0"), "{}", r.stdout);
    let r = orbit(&server.url, &["status", "p-2", "--json"]);
    assert_eq!(json_of(&r.stdout)["status"], "failed");

    let r = orbit(&server.url, &["ls"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        r.stdout.contains("p-1") && r.stdout.contains("p-2"),
        "{}",
        r.stdout
    );
    let r = orbit(&server.url, &["ls", "--status", "failed", "--json"]);
    assert_eq!(r.code, 0, "{r:?}");
    let ids: Vec<String> = json_of(&r.stdout)["executions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["execution_id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(ids, vec!["p-2".to_string()]);
    let r = orbit(&server.url, &["ls", "--status", "sleeping"]);
    assert_eq!(r.code, 2, "{r:?}");

    let r = orbit(&server.url, &["logs", "p-1"]);
    assert_eq!(r.code, 0, "{r:?}");
    let lines: Vec<&str> = r.stdout.lines().collect();
    let bodies: Vec<&str> = lines.iter().map(|l| without_offset(l)).collect();
    assert_eq!(
        bodies,
        vec![
            "#1 WorkflowCreated",
            "#2 WorkflowStarted",
            "#3 StepScheduled step=work attempt=1",
            "#4 StepDispatched step=work attempt=1 worker_id=cli-worker",
            "#5 StepSucceeded step=work attempt=1",
            "#6 WorkflowCompleted",
        ],
        "{}",
        r.stdout
    );
    assert!(lines[0].starts_with("+ 0ms #1"), "{}", lines[0]);
    for line in &lines {
        let offset = line.strip_prefix("+ ").unwrap().split(' ').next().unwrap();
        let ms = offset.strip_suffix("ms").map(|n| n.parse::<u64>().is_ok());
        let s = offset.strip_suffix('s').map(|n| {
            let (a, b) = n.split_once('.').unwrap_or(("", ""));
            a.parse::<u64>().is_ok() && b.len() == 1
        });
        assert!(ms == Some(true) || s == Some(true), "bad offset in {line}");
    }
    let r = orbit(&server.url, &["logs", "p-2"]);
    assert!(
        r.stdout
            .contains("StepAttemptFailed step=work attempt=1 code=NEGATIVE"),
        "{}",
        r.stdout
    );
    assert!(
        r.stdout
            .lines()
            .last()
            .unwrap()
            .ends_with("WorkflowFailed code=NEGATIVE step=work"),
        "{}",
        r.stdout
    );
    let r = orbit(&server.url, &["logs", "p-1", "--json"]);
    let first = json_of(r.stdout.lines().next().unwrap());
    assert_eq!(first["seq"], 1);
    assert_eq!(first["type"], "WorkflowCreated");
}

#[test]
fn refusals_exit_1_and_usage_or_connection_errors_exit_2() {
    let server = Server::start(&[]);
    deploy(&server);

    let r = orbit(&server.url, &["run", "Nope", "--input", "{}"]);
    assert_eq!(r.code, 1, "{r:?}");
    assert!(r.stderr.contains("UNKNOWN_WORKFLOW"), "{}", r.stderr);
    let r = orbit(&server.url, &["run", "Nope", "--input", "{}", "--json"]);
    assert_eq!(r.code, 1, "{r:?}");
    assert_eq!(json_of(&r.stdout)["error"]["code"], "UNKNOWN_WORKFLOW");

    let r = orbit(&server.url, &["run", "Plain", "--input", r#"{"n": "x"}"#]);
    assert_eq!(r.code, 1, "{r:?}");
    assert!(
        r.stderr.contains("INPUT_CONTRACT_VIOLATION"),
        "{}",
        r.stderr
    );

    let r = orbit(&server.url, &["run", "Plain", "--input", "{not json"]);
    assert_eq!(r.code, 2, "{r:?}");
    let r = orbit(&server.url, &["status", "no-such-id"]);
    assert_eq!(r.code, 1, "{r:?}");
    assert!(r.stderr.contains("UNKNOWN_EXECUTION"), "{}", r.stderr);
    let r = orbit(&server.url, &["run"]);
    assert_eq!(r.code, 2, "{r:?}");
    // A cap of no executions at all would leave every start pending.
    let r = orbit(&server.url, &["server", "--max-active-executions", "0"]);
    assert_eq!(r.code, 2, "{r:?}");
    assert!(r.stderr.contains("--max-active-executions"), "{}", r.stderr);

    let broken = server.file("broken.orbit", "workflow {");
    let r = orbit(&server.url, &["deploy", &broken]);
    assert_eq!(r.code, 1, "{r:?}");
    assert!(r.stderr.contains("COMPILE_ERROR"), "{}", r.stderr);
    let r = orbit(&server.url, &["deploy", "/definitely/not/here.orbit"]);
    assert_eq!(r.code, 2, "{r:?}");

    // Nothing listens there: a connection error.
    let dead = format!("http://{}", free_addr());
    let r = orbit(&dead, &["ls"]);
    assert_eq!(r.code, 2, "{r:?}");
    assert!(r.stderr.contains("cannot connect"), "{}", r.stderr);
    // --server beats ORBIT_SERVER.
    let r = orbit(&dead, &["ls", "--server", &server.url]);
    assert_eq!(r.code, 0, "{r:?}");
}

#[test]
fn wait_timeout_exits_3_and_signal_cancel_follow() {
    let server = Server::start(&[]);
    deploy(&server);

    // No worker for Plain: --wait gives up.
    let r = orbit(
        &server.url,
        &[
            "run",
            "Plain",
            "--input",
            r#"{"n": 1}"#,
            "--id",
            "slow-1",
            "--wait",
            "--timeout",
            "1s",
        ],
    );
    assert_eq!(r.code, 3, "{r:?}");
    assert!(r.stderr.contains("still running"), "{}", r.stderr);

    // Cancel it; cancelling a finished execution is refused.
    let r = orbit(&server.url, &["cancel", "slow-1", "--reason", "test over"]);
    assert_eq!(r.code, 0, "{r:?}");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let r = orbit(&server.url, &["status", "slow-1", "--json"]);
        if json_of(&r.stdout)["status"] == "cancelled" {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "not cancelled: {}",
            r.stdout
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let r = orbit(&server.url, &["cancel", "slow-1"]);
    assert_eq!(r.code, 1, "{r:?}");
    assert!(r.stderr.contains("EXECUTION_FINISHED"), "{}", r.stderr);
    let r = orbit(&server.url, &["logs", "slow-1"]);
    assert!(r.stdout.contains("WorkflowCancelRequested"), "{}", r.stdout);
    assert!(
        r.stdout.trim_end().ends_with("WorkflowCancelled"),
        "{}",
        r.stdout
    );

    // A gate waits for a signal; `logs --follow` ends when it completes.
    let r = orbit(
        &server.url,
        &["run", "Gate", "--input", r#"{"n": 1}"#, "--id", "g-1"],
    );
    assert_eq!(r.code, 0, "{r:?}");
    let follower = std::process::Command::new(env!("CARGO_BIN_EXE_orbit"))
        .args(["logs", "g-1", "--follow", "--server", &server.url])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    let r = orbit(
        &server.url,
        &[
            "signal",
            "g-1",
            "approve",
            "--payload",
            r#"{"by": "ann"}"#,
            "--idempotency-key",
            "approve-g-1",
        ],
    );
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        r.stdout.contains("signal approve recorded as #"),
        "{}",
        r.stdout
    );
    let out = follower.wait_with_output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("SignalReceived"), "{text}");
    assert!(text.trim_end().ends_with("WorkflowCompleted"), "{text}");
    let r = orbit(&server.url, &["status", "g-1", "--json"]);
    assert_eq!(
        json_of(&r.stdout)["output"],
        json!({"payload": {"by": "ann"}})
    );

    let r = orbit(&server.url, &["signal", "g-1", "approve"]);
    assert_eq!(r.code, 1, "{r:?}");
    assert!(r.stderr.contains("EXECUTION_FINISHED"), "{}", r.stderr);
    let r = orbit(
        &server.url,
        &["signal", "g-1", "approve", "--payload", "{bad"],
    );
    assert_eq!(r.code, 2, "{r:?}");
}

#[test]
fn output_to_a_reader_that_went_away_ends_quietly() {
    // `orbit explain E0105 | head -0`: the pipe is closed before the
    // command writes.
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_orbit"))
        .args(["explain", "E0105"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}
