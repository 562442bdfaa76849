//! `orbit server --cluster` end to end with real processes (when
//! `ORBIT_TEST_POSTGRES` is set; CI sets it): three servers on one fresh
//! PostgreSQL database, SDK workers and client given all three URLs, and
//! 1,000 executions of a workflow that reserves stock and charges a
//! simulated wallet keyed by the idempotency key. During the run the leader
//! is SIGKILLed three times (and restarted as a standby), then SIGSTOPped
//! until the workers have moved to the new leader and charged orders there
//! (the paused server takes their connections and never answers), and
//! SIGCONTed: its writes are refused as `fenced:` (its log says so) and it
//! comes back as a standby.
//!
//! Checks: work goes on while the old leader is paused, every execution
//! completes, every unit has exactly one `StepSucceeded`, every order is in
//! the wallet exactly once, and exactly one node leads at the end.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../../io-tokio/tests/postgres_support/mod.rs"]
mod postgres_support;
mod process_support;
mod wallet_support;

use orbit_sdk::{Client, SourceFile, StartOptions};
use postgres_support::ScratchDatabase;
use process_support::{free_addr, Log, ServerProcess};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use wallet_support::{worker, Wallet};

const EXECUTIONS: u64 = 1_000;
const NODE_TIMEOUT: Duration = Duration::from_secs(2);

const ORDER: &str = r#"
task "stock.reserve" version "1.0.0" {
    input  { order_id: String }
    output { reservation: String }
}

task "wallet.charge" version "1.0.0" {
    input  { order_id: String, amount: Int }
    output { transaction_id: String }
}

workflow ClusterOrder version "1.0.0" {
    input { order_id: String, amount: Int }

    step reserve {
        worker "stock.reserve"
        with { order_id: input.order_id }
    }

    step charge {
        worker "wallet.charge"
        with { order_id: input.order_id, amount: input.amount }
        idempotency_key: "charge-" + input.order_id
        after: [reserve]
    }

    output { transaction_id: charge.transaction_id }
}
"#;

/// One `orbit server --cluster` process, restarted on the same port and
/// log; SIGKILLed when dropped.
struct Node {
    name: String,
    addr: SocketAddr,
    log: PathBuf,
    process: Option<ServerProcess>,
}

impl Node {
    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    fn start(&mut self, db: &str) {
        self.process = Some(ServerProcess::spawn_with(
            self.addr,
            &[
                "--cluster",
                "--db",
                db,
                "--node-id",
                &self.name,
                "--node-timeout",
                "2s",
                "--session-timeout",
                "3",
            ],
            Log::File(&self.log),
            &[
                ("RUST_LOG", "warn,orbit_server::cluster=info"),
                ("NO_COLOR", "1"),
            ],
        ));
    }

    fn kill(&mut self) {
        if let Some(mut p) = self.process.take() {
            p.kill();
        }
    }

    fn process(&mut self) -> &mut ServerProcess {
        self.process.as_mut().expect("the node is running")
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

/// `GET /readyz` of one node: its status and the role its body names.
async fn readiness(http: &reqwest::Client, url: &str) -> Option<(u16, String)> {
    let r = http
        .get(format!("{url}/readyz"))
        .timeout(Duration::from_millis(500))
        .send()
        .await
        .ok()?;
    let status = r.status().as_u16();
    let body: Value = r.json().await.ok()?;
    let role = body["role"]
        .as_str()
        .or_else(|| body["error"]["role"].as_str())
        .unwrap_or_default()
        .to_owned();
    Some((status, role))
}

/// Waits until exactly one node answers `/readyz` 200 as leader; returns
/// its index and how long it took.
async fn wait_for_leader(http: &reqwest::Client, nodes: &[Node], not: Option<usize>) -> usize {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let mut leaders = Vec::new();
        for (i, n) in nodes.iter().enumerate() {
            if Some(i) == not || n.process.is_none() {
                continue;
            }
            if let Some((200, role)) = readiness(http, &n.url()).await {
                assert_eq!(role, "leader");
                leaders.push(i);
            }
        }
        assert!(leaders.len() <= 1, "two leaders at once: {leaders:?}");
        if let Some(&i) = leaders.first() {
            return i;
        }
        assert!(Instant::now() < deadline, "no leader within 30 s");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn log_dir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("orbit-cluster-e2e")
        .tempdir()
        .unwrap()
}

fn node(dir: &Path, i: usize) -> Node {
    Node {
        name: format!("node-{i}"),
        addr: free_addr(),
        log: dir.join(format!("node-{i}.log")),
        process: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_servers_survive_kills_and_a_paused_leader_with_every_order_charged_once() {
    let Some(db) = ScratchDatabase::create("cluster_e2e").await else {
        return;
    };
    let begun = Instant::now();
    let dir = log_dir();
    let mut nodes: Vec<Node> = (0..3).map(|i| node(dir.path(), i)).collect();
    for n in &mut nodes {
        n.start(db.url());
    }
    let http = reqwest::Client::new();
    let first = wait_for_leader(&http, &nodes, None).await;
    eprintln!("leader: {}", nodes[first].name);
    let urls = nodes.iter().map(Node::url).collect::<Vec<_>>().join(",");

    let client = Client::connect(&urls).unwrap();
    client
        .deploy(&[SourceFile {
            filename: "order.orbit".into(),
            source: ORDER.into(),
        }])
        .await
        .unwrap();

    let wallet = Arc::new(Wallet::default());
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let mut workers = Vec::new();
    for w in 0..3 {
        let worker = worker(&format!("w{w}"), &urls, wallet.clone());
        let mut stop = stop_rx.clone();
        workers.push(tokio::spawn(async move {
            worker
                .run(async move {
                    let _ = stop.wait_for(|s| *s).await;
                })
                .await
        }));
    }

    // Starts run beside the faults, 25 in flight; each start names its
    // execution id, so a start retried across a takeover is idempotent.
    let started = Arc::new(AtomicU64::new(0));
    let starter = {
        let client = client.clone();
        let started = started.clone();
        tokio::spawn(async move {
            let gate = Arc::new(tokio::sync::Semaphore::new(25));
            let mut tasks = Vec::new();
            for i in 0..EXECUTIONS {
                let permit = gate.clone().acquire_owned().await.unwrap();
                let client = client.clone();
                let started = started.clone();
                tasks.push(tokio::spawn(async move {
                    let mut options = StartOptions::new(
                        "ClusterOrder",
                        json!({"order_id": format!("o-{i}"), "amount": 10 + (i % 7) as i64}),
                    );
                    options.execution_id = Some(format!("order-{i}"));
                    let deadline = Instant::now() + Duration::from_secs(60);
                    loop {
                        match client.start(options.clone()).await {
                            Ok(_) => break,
                            Err(e) if !e.is_refusal() && Instant::now() < deadline => {
                                tokio::time::sleep(Duration::from_millis(200)).await;
                            }
                            Err(e) => panic!("start order-{i}: {e}"),
                        }
                    }
                    started.fetch_add(1, Ordering::Relaxed);
                    drop(permit);
                }));
            }
            for t in tasks {
                t.await.unwrap();
            }
        })
    };

    // Three SIGKILLs of the leader, each after some progress; the killed
    // node is restarted and rejoins as a standby.
    let mut leader = first;
    let mut takeovers = Vec::new();
    for round in 1..=3u64 {
        while started.load(Ordering::Relaxed) < round * 150 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let killed = Instant::now();
        nodes[leader].kill();
        let next = wait_for_leader(&http, &nodes, Some(leader)).await;
        takeovers.push(killed.elapsed());
        eprintln!(
            "SIGKILL {} -> {} leads after {:?}",
            nodes[leader].name,
            nodes[next].name,
            killed.elapsed()
        );
        let log = nodes[next].log_text();
        if let Some(line) = log.lines().rev().find(|l| l.contains("leader at epoch")) {
            eprintln!("  {line}");
        }
        nodes[leader].start(db.url());
        leader = next;
    }

    // The GC-pause case: the leader stops for twice --node-timeout while
    // work is queued at it, a standby takes over, and the old leader wakes
    // up believing it leads.
    while started.load(Ordering::Relaxed) < 600 {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let paused = leader;
    let stopped = Instant::now();
    nodes[paused].process().pause();
    tokio::time::sleep(NODE_TIMEOUT * 2).await;
    let next = wait_for_leader(&http, &nodes, Some(paused)).await;
    // The workers' requests to the paused leader time out; they go on to
    // the other URLs and charge orders at the new leader, while the old one
    // is still stopped (a worker that stayed would wait for it for good).
    wallet.charged_meanwhile(20, &nodes[paused].name).await;
    nodes[paused].process().resume();
    eprintln!(
        "SIGSTOP {} for {:?} -> {} leads, orders charged there meanwhile",
        nodes[paused].name,
        stopped.elapsed(),
        nodes[next].name
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some((503, role)) = readiness(&http, &nodes[paused].url()).await {
            assert_eq!(role, "standby");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the paused leader did not become a standby"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let paused_log = nodes[paused].log_text();
    assert!(
        paused_log.contains("fenced:"),
        "the paused leader's log shows no fenced write:\n{paused_log}"
    );

    starter.await.unwrap();
    assert_eq!(started.load(Ordering::Relaxed), EXECUTIONS);

    // Every execution finishes.
    let deadline = Instant::now() + Duration::from_secs(90);
    for i in 0..EXECUTIONS {
        let id = format!("order-{i}");
        loop {
            let e = client.wait(&id, Duration::from_secs(5)).await.unwrap();
            if e.status.as_str() == "completed" {
                assert_eq!(e.output["transaction_id"], format!("tx-o-{i}"), "{id}");
                break;
            }
            assert!(
                !matches!(e.status.as_str(), "failed" | "cancelled"),
                "{id} ended {}",
                e.status.as_str()
            );
            assert!(
                Instant::now() < deadline,
                "{id} still {}",
                e.status.as_str()
            );
        }
    }

    // Every unit has exactly one recorded success.
    for i in 0..EXECUTIONS {
        let id = format!("order-{i}");
        let history = client.history(&id, 0).await.unwrap();
        let mut successes: BTreeMap<String, u32> = BTreeMap::new();
        for event in &history.events {
            let e = serde_json::to_value(event).unwrap();
            if e["type"] == "StepSucceeded" {
                *successes
                    .entry(e["step"].as_str().unwrap_or_default().to_owned())
                    .or_default() += 1;
            }
        }
        let expected: BTreeMap<String, u32> =
            [("charge".to_owned(), 1), ("reserve".to_owned(), 1)].into();
        assert_eq!(successes, expected, "{id}");
    }

    // Every order is charged exactly once.
    {
        let ledger = wallet.ledger.lock().unwrap();
        assert_eq!(ledger.len() as u64, EXECUTIONS);
        for i in 0..EXECUTIONS {
            let (tx, amount) = ledger
                .get(&format!("charge-o-{i}"))
                .unwrap_or_else(|| panic!("order o-{i} was never charged"));
            assert_eq!(tx, &format!("tx-o-{i}"));
            assert_eq!(*amount, 10 + (i % 7) as i64);
        }
    }

    // One leader at the end, and it reports the takeovers' epochs.
    let last = wait_for_leader(&http, &nodes, None).await;
    let cluster = client.cluster().await.unwrap();
    assert_eq!(
        cluster.leader_node_id.as_deref(),
        Some(nodes[last].name.as_str())
    );
    assert!(cluster.epoch.unwrap_or(0) >= 5, "{cluster:?}");
    assert_eq!(
        cluster.nodes.iter().filter(|n| n.live).count(),
        3,
        "{cluster:?}"
    );

    stop_tx.send_replace(true);
    for w in workers {
        let _ = tokio::time::timeout(Duration::from_secs(10), w).await;
    }
    eprintln!(
        "takeovers after SIGKILL: {takeovers:?}; wallet calls {} for {EXECUTIONS} orders; \
         whole run {:?}",
        wallet.calls.load(Ordering::Relaxed),
        begun.elapsed()
    );
}
