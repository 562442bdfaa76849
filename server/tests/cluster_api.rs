//! What a `--cluster` looks like from outside, with real processes: flags
//! refused at start (always), and — when `ORBIT_TEST_POSTGRES` is set — a
//! leader and a standby on one database: the standby's `503 NOT_LEADER`
//! naming the leader on every API route but health, readiness, metrics and
//! the OpenAPI document; `/readyz` roles; `GET /v1/cluster` and
//! `orbit cluster status`; the metrics; an SDK client given only the
//! standby's URL following it to the leader; and a SIGTERMed leader handing
//! over at once by releasing its lease.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../../io-tokio/tests/postgres_support/mod.rs"]
mod postgres_support;
mod process_support;

use orbit_sdk::{Client, SourceFile, StartOptions};
use postgres_support::ScratchDatabase;
use process_support::{Log, ServerProcess, ORBIT};
use serde_json::Value;
use std::process::Command;
use std::time::{Duration, Instant};

const PLAIN: &str = r#"
task "demo.work" version "1.0.0" {
    input  { n: Int }
    output { n: Int }
}

workflow Plain version "1.0.0" {
    input { n: Int }
    step work {
        worker "demo.work"
        with { n: input.n }
    }
    output { n: work.n }
}
"#;

#[test]
fn cluster_with_sqlite_is_refused_at_start_naming_postgresql() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(ORBIT)
        .args(["server", "--cluster", "--listen", "127.0.0.1:0", "--db"])
        .arg(format!("sqlite://{}", dir.path().join("x.db").display()))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("PostgreSQL"), "{stderr}");
    assert!(!dir.path().join("x.db").exists(), "nothing is created");
}

#[test]
fn shared_mode_needs_postgresql_and_a_database_that_answers() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(ORBIT)
        .args(["server", "--cluster", "--cluster-mode", "shared", "--db"])
        .arg(format!("sqlite://{}", dir.path().join("x.db").display()))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--cluster needs PostgreSQL"), "{stderr}");
    assert!(!dir.path().join("x.db").exists(), "nothing is created");
    let out = Command::new(ORBIT)
        .args([
            "server",
            "--cluster",
            "--cluster-mode",
            "shared",
            "--db",
            "postgres://nobody@127.0.0.1:1/none",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("storage"), "{stderr}");
}

#[test]
fn node_flags_need_cluster() {
    let out = Command::new(ORBIT)
        .args(["server", "--node-id", "a"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}

/// A `--cluster` node on `db` named `id` (3 s node timeout), not yet ready.
fn spawn(db: &str, id: &str) -> ServerProcess {
    ServerProcess::spawn(
        &[
            "--cluster",
            "--db",
            db,
            "--node-id",
            id,
            "--node-timeout",
            "3s",
        ],
        Log::Inherit,
    )
}

async fn get(url: &str) -> (u16, String) {
    match reqwest::get(url).await {
        Ok(r) => (r.status().as_u16(), r.text().await.unwrap_or_default()),
        Err(_) => (0, String::new()),
    }
}

async fn json(method: reqwest::Method, url: &str) -> (u16, Value) {
    let r = reqwest::Client::new()
        .request(method, url)
        .json(&serde_json::json!({}))
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

async fn wait_ready(node: &ServerProcess) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while get(&format!("{}/readyz", node.url)).await.0 != 200 {
        assert!(Instant::now() < deadline, "{} never led", node.url);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn wait_up(node: &ServerProcess) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while get(&format!("{}/healthz", node.url)).await.0 != 200 {
        assert!(Instant::now() < deadline, "{} never came up", node.url);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standby_names_the_leader_and_clients_follow_it() {
    let Some(db) = ScratchDatabase::create("cluster_api").await else {
        return;
    };
    let leader = spawn(db.url(), "alpha");
    wait_ready(&leader).await;
    let standby = spawn(db.url(), "beta");
    wait_up(&standby).await;
    // The standby has seen the lease (and the leader's URL) once it renders it.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (status, body) = json(
            reqwest::Method::GET,
            &format!("{}/v1/executions", standby.url),
        )
        .await;
        assert_eq!(status, 503, "{body}");
        if body["error"]["leader"] == leader.url.as_str() {
            assert_eq!(body["error"]["code"], "NOT_LEADER");
            assert!(body["error"]["message"].as_str().unwrap().contains("alpha"));
            break;
        }
        assert!(Instant::now() < deadline, "{body}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // Every API route is refused by the standby, writes included.
    for (method, path) in [
        (reqwest::Method::POST, "/v1/executions"),
        (reqwest::Method::POST, "/v1/definitions"),
        (reqwest::Method::POST, "/v1/workers"),
        (reqwest::Method::POST, "/v1/tasks/t/result"),
        (reqwest::Method::GET, "/v1/cluster"),
        (reqwest::Method::GET, "/v1/executions/x"),
        (reqwest::Method::GET, "/ui"),
    ] {
        let (status, body) = json(method.clone(), &format!("{}{path}", standby.url)).await;
        assert_eq!(status, 503, "{method} {path}: {body}");
        assert_eq!(body["error"]["code"], "NOT_LEADER", "{method} {path}");
        assert_eq!(
            body["error"]["leader"],
            leader.url.as_str(),
            "{method} {path}"
        );
    }
    // ... but health, readiness, metrics and the OpenAPI document answer.
    assert_eq!(get(&format!("{}/healthz", standby.url)).await.0, 200);
    assert_eq!(
        get(&format!("{}/v1/openapi.json", standby.url)).await.0,
        200
    );
    let (status, ready) = json(reqwest::Method::GET, &format!("{}/readyz", standby.url)).await;
    assert_eq!(
        (status, &ready["role"], &ready["error"]["role"]),
        (503, &Value::from("standby"), &Value::from("standby"))
    );
    assert_eq!(ready["error"]["code"], "NOT_LEADER");
    let (status, ready) = json(reqwest::Method::GET, &format!("{}/readyz", leader.url)).await;
    assert_eq!(status, 200);
    assert_eq!(
        ready,
        serde_json::json!({"status": "ready", "role": "leader"})
    );
    let (status, metrics) = get(&format!("{}/metrics", standby.url)).await;
    assert_eq!(status, 200);
    assert!(metrics.contains("orbit_cluster_leader 0"), "{metrics}");
    assert!(
        metrics.contains("orbit_cluster_takeovers_total 0"),
        "{metrics}"
    );
    let (_, metrics) = get(&format!("{}/metrics", leader.url)).await;
    assert!(metrics.contains("orbit_cluster_leader 1"), "{metrics}");
    assert!(
        metrics.contains("orbit_cluster_takeovers_total 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains("orbit_commit_latency_seconds"),
        "{metrics}"
    );

    // A client given only the standby's URL follows it to the leader.
    let client = Client::connect(&standby.url).unwrap();
    client
        .deploy(&[SourceFile {
            filename: "plain.orbit".into(),
            source: PLAIN.into(),
        }])
        .await
        .unwrap();
    let started = client
        .start(StartOptions::new("Plain", serde_json::json!({"n": 1})))
        .await
        .unwrap();
    let status = client.cluster().await.unwrap();
    assert_eq!(status.mode, "leader");
    assert_eq!(status.node_id.as_deref(), Some("alpha"));
    assert_eq!(status.leader_node_id.as_deref(), Some("alpha"));
    assert_eq!(status.leader.as_deref(), Some(leader.url.as_str()));
    assert_eq!(status.epoch, Some(1));
    assert!(status.lease_expires_at.is_some());
    let ids: Vec<&str> = status.nodes.iter().map(|n| n.node_id.as_str()).collect();
    assert_eq!(ids, ["alpha", "beta"]);
    assert!(status.nodes.iter().all(|n| n.live));

    let out = Command::new(ORBIT)
        .args(["cluster", "status", "--server", &standby.url])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(&format!("leader     alpha {}", leader.url)),
        "{text}"
    );
    assert!(text.contains("epoch      1"), "{text}");

    // SIGTERM: the leader releases its lease, the standby takes over well
    // before the lease would have run out, and recovers what was started.
    let stopped = Instant::now();
    leader.terminate();
    wait_ready(&standby).await;
    assert!(
        stopped.elapsed() < Duration::from_secs(3),
        "takeover after a clean stop took {:?}",
        stopped.elapsed()
    );
    let client = Client::connect(&format!("{},{}", leader.url, standby.url)).unwrap();
    let seen = client.get(&started.execution_id).await.unwrap();
    assert_eq!(seen.execution_id, started.execution_id);
    let status = client.cluster().await.unwrap();
    assert_eq!(status.leader_node_id.as_deref(), Some("beta"));
    assert_eq!(status.epoch, Some(2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_that_loses_the_database_steps_down_and_leads_again_with_a_new_epoch() {
    let Some(db) = ScratchDatabase::create("cluster_outage").await else {
        return;
    };
    let node = spawn(db.url(), "solo");
    wait_ready(&node).await;
    db.block_connections().await;
    let lost = Instant::now();
    // Within --node-timeout (3 s) plus a renewal period it is a standby.
    loop {
        let (status, body) = json(reqwest::Method::GET, &format!("{}/readyz", node.url)).await;
        if status == 503 && body["error"]["code"] == "NOT_LEADER" {
            assert_eq!(body["error"]["role"], "standby");
            assert_eq!(body["error"]["leader"], Value::Null);
            break;
        }
        assert!(
            lost.elapsed() < Duration::from_secs(6),
            "still leading {:?} after losing the database: {status} {body}",
            lost.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        lost.elapsed() >= Duration::from_secs(2),
        "{:?}",
        lost.elapsed()
    );
    let (_, metrics) = get(&format!("{}/metrics", node.url)).await;
    assert!(metrics.contains("orbit_cluster_leader 0"), "{metrics}");
    db.allow_connections().await;
    wait_ready(&node).await;
    let status = Client::connect(&node.url).unwrap().cluster().await.unwrap();
    assert_eq!(status.leader_node_id.as_deref(), Some("solo"));
    assert_eq!(status.epoch, Some(2));
    let (_, metrics) = get(&format!("{}/metrics", node.url)).await;
    assert!(
        metrics.contains("orbit_cluster_takeovers_total 2"),
        "{metrics}"
    );
}
