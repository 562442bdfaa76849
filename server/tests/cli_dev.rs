//! `orbit dev` end to end: the embedded server, the example workers, one
//! order that completes and one that compensates, both histories printed.

#![allow(clippy::unwrap_used)]

mod cli_support;

use std::process::{Command, Stdio};

#[test]
fn dev_runs_the_demo_and_exits() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}/dev.db", dir.path().display());
    let out = Command::new(env!("CARGO_BIN_EXE_orbit"))
        .args(["dev", "--exit", "--db", &db, "--listen", "127.0.0.1:0"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("workflow Order 1.0.0"), "{stdout}");
    // The good order ran every step, including the child workflow.
    assert!(
        stdout.contains("StepDispatched step=process_payment attempt=1 worker_id=payments-1"),
        "{stdout}"
    );
    assert!(stdout.contains("ChildCompleted step=ship"), "{stdout}");
    assert!(stdout.contains("WorkflowCompleted"), "{stdout}");
    // The declined order compensated its reservations and failed.
    assert!(
        stdout.contains("StepFailed step=process_payment code=CARD_DECLINED"),
        "{stdout}"
    );
    // Both reservations are undone, newest success first; which of the two
    // the inventory worker finished first is a race.
    assert!(
        stdout.contains("CompensationStarted reason=failed units=reserve[0],reserve[1]")
            || stdout.contains("CompensationStarted reason=failed units=reserve[1],reserve[0]"),
        "{stdout}"
    );
    assert!(
        stdout.contains("StepSucceeded step=compensate:reserve[0] attempt=1"),
        "{stdout}"
    );
    assert!(
        stdout.contains("StepSucceeded step=compensate:reserve[1] attempt=1"),
        "{stdout}"
    );
    assert!(
        stdout.contains("WorkflowFailed code=CARD_DECLINED step=process_payment"),
        "{stdout}"
    );
    assert!(stdout.contains("orbit run Order"), "{stdout}");
}

#[test]
fn dev_can_use_an_existing_server() {
    let server = cli_support::Server::start(&[]);
    let db = format!("sqlite://{}/dev.db", server.dir.path().display());
    let out = Command::new(env!("CARGO_BIN_EXE_orbit"))
        .args(["dev", "--exit", "--server", &server.url, "--db", &db])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains(&format!("using the server at {}", server.url)),
        "{stdout}"
    );
    assert!(stdout.contains("WorkflowCompleted"), "{stdout}");
    assert!(
        stdout.contains("WorkflowFailed code=CARD_DECLINED"),
        "{stdout}"
    );
    // The executions are on that server.
    let r = cli_support::orbit(&server.url, &["ls", "--json"]);
    assert_eq!(r.code, 0, "{r:?}");
    let v: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    // Two orders and the completed order's Shipping child.
    assert_eq!(v["executions"].as_array().unwrap().len(), 3, "{v}");
}
