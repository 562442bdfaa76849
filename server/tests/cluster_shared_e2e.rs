//! `orbit server --cluster --cluster-mode shared` end to end with real
//! processes (when `ORBIT_TEST_POSTGRES` is set; CI sets it): three members
//! on one fresh PostgreSQL database. Starts go round-robin to all three
//! (each execution is owned by the member that received its start), and
//! each SDK worker polls a different member first, so tasks, results and
//! dispatch records cross members through the database's queue and the
//! owners' inboxes. 1,000 executions reserve stock and charge a simulated
//! wallet keyed by the idempotency key.
//!
//! Faults: a member is SIGKILLed mid-run twice (the others take over its
//! executions; it is restarted with the same node id once they have; a
//! survivor's `/v1/cluster` lists it as not live), and one is SIGSTOPped
//! until its executions have moved and orders are charged without it (the
//! workers and clients sending to it move on), then SIGCONTed: it drops
//! what it held once it runs again (its log says `fenced:`).
//!
//! Checks: work goes on while a member is paused, every execution completes, every unit has exactly one
//! `StepSucceeded`, every order is in the wallet exactly once, and no inbox
//! entry and no queue row is left behind.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../../io-tokio/tests/postgres_support/mod.rs"]
mod postgres_support;
mod process_support;
mod wallet_support;

use orbit_sdk::{Client, SourceFile, StartOptions};
use postgres_support::ScratchDatabase;
use process_support::{free_addr, Log, ServerProcess};
use serde_json::{json, Value};
use sqlx::Connection;
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

workflow SharedOrder version "1.0.0" {
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

/// One member process, restarted on the same port, id and log; SIGKILLed
/// when dropped.
struct Member {
    name: String,
    addr: SocketAddr,
    log: PathBuf,
    process: Option<ServerProcess>,
}

impl Member {
    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    fn start(&mut self, db: &str) {
        self.process = Some(ServerProcess::spawn_with(
            self.addr,
            &[
                "--cluster",
                "--cluster-mode",
                "shared",
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
            &[("RUST_LOG", "warn"), ("NO_COLOR", "1")],
        ));
    }

    fn kill(&mut self) {
        if let Some(mut p) = self.process.take() {
            p.kill();
        }
    }

    fn process(&mut self) -> &mut ServerProcess {
        self.process.as_mut().expect("the member is running")
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

/// Waits until every running member answers `/readyz` 200 as `member`.
async fn wait_ready(http: &reqwest::Client, members: &[Member]) {
    let deadline = Instant::now() + Duration::from_secs(30);
    for m in members.iter().filter(|m| m.process.is_some()) {
        loop {
            let ready = http
                .get(format!("{}/readyz", m.url()))
                .timeout(Duration::from_millis(500))
                .send()
                .await
                .ok()
                .filter(|r| r.status().as_u16() == 200);
            if let Some(r) = ready {
                let body: Value = r.json().await.unwrap();
                assert_eq!(body["role"], "member", "{body}");
                break;
            }
            assert!(Instant::now() < deadline, "{} not ready", m.name);
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// Running executions `node` owns, read from the database.
async fn owned_by(db: &str, node: &str) -> i64 {
    let mut conn = sqlx::PgConnection::connect(db).await.unwrap();
    let (n,): (i64,) = sqlx::query_as(
        "SELECT count(*) FROM executions WHERE owner_node = $1 \
         AND status NOT IN ('completed', 'failed', 'cancelled')",
    )
    .bind(node)
    .fetch_one(&mut conn)
    .await
    .unwrap();
    n
}

/// Waits until no running execution names `node` as its owner; how long
/// that took.
async fn wait_moved(db: &str, node: &str) -> Duration {
    let begun = Instant::now();
    let deadline = begun + Duration::from_secs(30);
    while owned_by(db, node).await > 0 {
        assert!(
            Instant::now() < deadline,
            "{node}'s executions did not move within 30 s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    begun.elapsed()
}

/// The members' URLs, starting with the `first`-th (each client and worker
/// talks to its own member first, and moves on when it is unreachable).
fn urls_from(members: &[Member], first: usize) -> String {
    (0..members.len())
        .map(|k| members[(first + k) % members.len()].url())
        .collect::<Vec<_>>()
        .join(",")
}

/// What the store holds about an execution that does not finish: its
/// history, owner, inbox entries and queue rows.
async fn stuck(db: &str, client: &Client, id: &str) -> String {
    let mut out = String::new();
    if let Ok(h) = client.history(id, 0).await {
        for e in &h.events {
            out.push_str(&format!(
                "{}\n",
                serde_json::to_string(e).unwrap_or_default()
            ));
        }
    }
    let mut conn = sqlx::PgConnection::connect(db).await.unwrap();
    let owner: Option<(String, i64)> =
        sqlx::query_as("SELECT owner_node, owner_epoch FROM executions WHERE id = $1")
            .bind(id)
            .fetch_optional(&mut conn)
            .await
            .unwrap();
    out.push_str(&format!("owner {owner:?}\n"));
    let inbox: Vec<(i64, String, String, String)> = sqlx::query_as(
        "SELECT id, node_id, kind, body::text FROM inbox WHERE execution_id = $1 ORDER BY id",
    )
    .bind(id)
    .fetch_all(&mut conn)
    .await
    .unwrap_or_default();
    out.push_str(&format!("inbox {inbox:?}\n"));
    let queue: Vec<(String, String)> =
        sqlx::query_as("SELECT unit, task FROM task_queue WHERE execution_id = $1")
            .bind(id)
            .fetch_all(&mut conn)
            .await
            .unwrap_or_default();
    out.push_str(&format!("queue {queue:?}\n"));
    out
}

fn member(dir: &Path, i: usize) -> Member {
    Member {
        name: format!("member-{i}"),
        addr: free_addr(),
        log: dir.join(format!("member-{i}.log")),
        process: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_members_survive_kills_and_a_pause_with_every_order_charged_once() {
    let Some(db) = ScratchDatabase::create("cluster_shared_e2e").await else {
        return;
    };
    let begun = Instant::now();
    let dir = tempfile::Builder::new()
        .prefix("orbit-shared-e2e")
        .tempdir()
        .unwrap();
    // ORBIT_E2E_LOGS=DIR keeps the members' logs there.
    let logs = std::env::var_os("ORBIT_E2E_LOGS").map(PathBuf::from);
    let logs = logs.as_deref().unwrap_or(dir.path());
    let mut members: Vec<Member> = (0..3).map(|i| member(logs, i)).collect();
    for m in &mut members {
        m.start(db.url());
    }
    let http = reqwest::Client::new();
    wait_ready(&http, &members).await;

    let clients: Vec<Client> = (0..members.len())
        .map(|i| Client::connect(&urls_from(&members, i)).unwrap())
        .collect();
    clients[0]
        .deploy(&[SourceFile {
            filename: "order.orbit".into(),
            source: ORDER.into(),
        }])
        .await
        .unwrap();

    let wallet = Arc::new(Wallet::default());
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let mut workers = Vec::new();
    for w in 0..members.len() {
        let worker = worker(&format!("w{w}"), &urls_from(&members, w), wallet.clone());
        let mut stop = stop_rx.clone();
        workers.push(tokio::spawn(async move {
            worker
                .run(async move {
                    let _ = stop.wait_for(|s| *s).await;
                })
                .await
        }));
    }

    // Starts go round-robin to the members, 25 in flight; each names its
    // execution id, so a start retried elsewhere after a kill is
    // idempotent.
    let started = Arc::new(AtomicU64::new(0));
    let starter = {
        let clients = clients.clone();
        let started = started.clone();
        tokio::spawn(async move {
            let gate = Arc::new(tokio::sync::Semaphore::new(25));
            let mut tasks = Vec::new();
            for i in 0..EXECUTIONS {
                let permit = gate.clone().acquire_owned().await.unwrap();
                let client = clients[i as usize % clients.len()].clone();
                let started = started.clone();
                tasks.push(tokio::spawn(async move {
                    let mut options = StartOptions::new(
                        "SharedOrder",
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

    // Two SIGKILLs of a member that owns running executions; once the
    // others have taken them over it is restarted with the same id.
    let mut moves = Vec::new();
    for (round, victim) in [(1u64, 1usize), (2, 2)] {
        while started.load(Ordering::Relaxed) < round * 250 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let owned = owned_by(db.url(), &members[victim].name).await;
        members[victim].kill();
        let moved = wait_moved(db.url(), &members[victim].name).await;
        eprintln!(
            "SIGKILL {} (owning {owned} running) -> its executions moved after {moved:?}",
            members[victim].name
        );
        moves.push(moved);
        // A survivor lists it as not live, with when it was last heard from.
        let survivor = members[(victim + 1) % members.len()].url();
        let cluster: Value = http
            .get(format!("{survivor}/v1/cluster"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let listed = cluster["nodes"]
            .as_array()
            .and_then(|nodes| nodes.iter().find(|n| n["node_id"] == members[victim].name))
            .cloned()
            .unwrap_or_else(|| panic!("{} not listed: {cluster}", members[victim].name));
        assert_eq!(listed["live"], false, "{cluster}");
        assert!(
            listed["started_at"].as_str() < listed["last_seen"].as_str(),
            "{cluster}"
        );
        members[victim].start(db.url());
        wait_ready(&http, &members).await;
    }

    // The GC-pause case: a member stops for twice --node-timeout; the
    // others take its executions over; it wakes up holding them.
    while started.load(Ordering::Relaxed) < 750 {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let paused = 0;
    let stopped = Instant::now();
    members[paused].process().pause();
    let moved = wait_moved(db.url(), &members[paused].name).await;
    tokio::time::sleep((NODE_TIMEOUT * 2).saturating_sub(moved)).await;
    // Workers and clients whose requests went to the paused member move
    // on to the others, and orders are charged while it is still stopped.
    wallet.charged_meanwhile(20, &members[paused].name).await;
    members[paused].process().resume();
    eprintln!(
        "SIGSTOP {} for {:?}; its executions moved after {moved:?}, orders charged meanwhile",
        members[paused].name,
        stopped.elapsed()
    );
    wait_ready(&http, &members).await;

    starter.await.unwrap();
    assert_eq!(started.load(Ordering::Relaxed), EXECUTIONS);

    // Every execution finishes.
    let deadline = Instant::now() + Duration::from_secs(90);
    for i in 0..EXECUTIONS {
        let id = format!("order-{i}");
        let client = &clients[i as usize % clients.len()];
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
            if Instant::now() >= deadline {
                let mut what = stuck(db.url(), &clients[0], &id).await;
                for m in &members {
                    let url = format!("{}/v1/executions/{id}/wait?timeout_ms=0", m.url());
                    let seen = match http.post(&url).send().await {
                        Ok(r) => r.text().await.unwrap_or_default(),
                        Err(e) => e.to_string(),
                    };
                    what.push_str(&format!("{} answers {seen}\n", m.name));
                }
                panic!("{id} still {}\n{what}", e.status.as_str());
            }
        }
    }

    // The paused member gave up what it held when it ran again.
    let paused_log = members[paused].log_text();
    assert!(
        paused_log.contains("fenced:"),
        "the paused member's log shows no fenced write or drop:\n{paused_log}"
    );

    // Every unit has exactly one recorded success.
    for i in 0..EXECUTIONS {
        let id = format!("order-{i}");
        let history = clients[0].history(&id, 0).await.unwrap();
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

    // Nothing is left behind: every inbox entry was applied and deleted
    // (the last ones may still be in flight for a moment), and no queue
    // row outlives its execution.
    let mut conn = sqlx::PgConnection::connect(db.url()).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (inbox,): (i64,) = sqlx::query_as("SELECT count(*) FROM inbox")
            .fetch_one(&mut conn)
            .await
            .unwrap();
        let (queued,): (i64,) = sqlx::query_as("SELECT count(*) FROM task_queue")
            .fetch_one(&mut conn)
            .await
            .unwrap();
        if inbox == 0 && queued == 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "left behind: {inbox} inbox entries, {queued} queue rows"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // Every member is live at the end.
    let cluster = clients[0].cluster().await.unwrap();
    assert_eq!(cluster.mode, "shared", "{cluster:?}");
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
        "executions moved after SIGKILL: {moves:?}; wallet calls {} for {EXECUTIONS} orders; \
         whole run {:?}",
        wallet.calls.load(Ordering::Relaxed),
        begun.elapsed()
    );
}
