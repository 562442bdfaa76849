//! The idempotency record commits with the effect it guards, so a crash can
//! never leave one without the other. Against the real `orbit` binary: a
//! start with an `Idempotency-Key` is answered, the server is SIGKILLed at
//! once, restarted on the same database, and the retried request replays the
//! original answer (same execution id, `Idempotent-Replayed: true`) with one
//! execution in the list. A second round kills the server at staggered
//! moments while requests are in flight; after restart every retried key
//! ends with exactly one execution. SQLite always; PostgreSQL too when
//! `ORBIT_TEST_POSTGRES` is set.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../../io-tokio/tests/postgres_support/mod.rs"]
mod postgres_support;
mod process_support;

use process_support::{Log, ServerProcess};
use serde_json::{json, Value};
use std::time::Duration;

const SOURCE: &str = r#"
task "demo.work" version "1.0.0" {
    input  { n: Int }
    output { doubled: Int }
}

workflow Plain version "1.0.0" {
    input { n: Int }

    step work {
        worker "demo.work"
        with { n: input.n }
    }

    output { doubled: work.doubled }
}
"#;

/// `orbit server` on `db`, ready.
async fn spawn(db: &str) -> ServerProcess {
    ServerProcess::spawn(&["--db", db], Log::Inherit)
        .ready()
        .await
}

struct Answer {
    status: u16,
    replayed: bool,
    bytes: Vec<u8>,
    json: Value,
}

async fn start(base: &str, key: &str, n: i64) -> Result<Answer, reqwest::Error> {
    let r = reqwest::Client::new()
        .post(format!("{base}/v1/executions"))
        .header("idempotency-key", key)
        .json(&json!({"workflow": "Plain", "input": {"n": n}}))
        .send()
        .await?;
    let status = r.status().as_u16();
    let replayed = r
        .headers()
        .get("idempotent-replayed")
        .is_some_and(|v| v == "true");
    let bytes = r.bytes().await?.to_vec();
    let json = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    Ok(Answer {
        status,
        replayed,
        bytes,
        json,
    })
}

async fn executions(base: &str) -> Vec<Value> {
    let v: Value = reqwest::get(format!("{base}/v1/executions?limit=1000"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    v["executions"].as_array().unwrap().clone()
}

async fn replay_after_kill(db: &str) {
    let mut server = spawn(db).await;
    let r = reqwest::Client::new()
        .post(format!("{}/v1/definitions", server.url))
        .json(&json!({"source": SOURCE, "filename": "plain.orbit"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);

    // Answered, then killed before the client could do anything else.
    let first = start(&server.url, "crash-key-1", 7).await.unwrap();
    server.kill();
    assert_eq!(first.status, 201, "{}", first.json);
    assert!(!first.replayed);

    let server = spawn(db).await;
    let again = start(&server.url, "crash-key-1", 7).await.unwrap();
    assert_eq!(again.status, 201, "{}", again.json);
    assert!(again.replayed, "the retry after restart must replay");
    assert_eq!(again.bytes, first.bytes);
    assert_eq!(again.json["execution_id"], first.json["execution_id"]);
    let all = executions(&server.url).await;
    assert_eq!(all.len(), 1, "{all:?}");
    // A different body under the same key is still refused after restart.
    let other = start(&server.url, "crash-key-1", 8).await.unwrap();
    assert_eq!(other.status, 409);
    assert_eq!(other.json["error"]["code"], "IDEMPOTENCY_KEY_REUSED");

    // Kills while requests are in flight: whatever the crash left, a retry
    // with the same key and body ends with exactly one execution per key.
    let mut server = server;
    let rounds = 6;
    for round in 0..rounds {
        let base = server.url.clone();
        let mut pending = Vec::new();
        for i in 0..4 {
            let key = format!("inflight-{round}-{i}");
            let base = base.clone();
            pending.push(tokio::spawn(async move { start(&base, &key, i).await }));
        }
        tokio::time::sleep(Duration::from_millis(round * 3)).await;
        server.kill();
        for p in pending {
            // Answered or cut off: both are fine here.
            let _ = p.await.unwrap();
        }
        server = spawn(db).await;
        for i in 0..4 {
            let key = format!("inflight-{round}-{i}");
            let a = start(&server.url, &key, i).await.unwrap();
            assert_eq!(a.status, 201, "{key}: {}", a.json);
            let b = start(&server.url, &key, i).await.unwrap();
            assert!(b.replayed, "{key}");
            assert_eq!(b.bytes, a.bytes, "{key}");
        }
    }
    let all = executions(&server.url).await;
    assert_eq!(all.len(), 1 + 4 * rounds as usize, "one execution per key");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retried_start_replays_after_sigkill_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("orbit.db").display());
    replay_after_kill(&db).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retried_start_replays_after_sigkill_postgres() {
    let Some(scratch) = postgres_support::ScratchDatabase::create("idem_crash").await else {
        eprintln!("ORBIT_TEST_POSTGRES not set; skipping the PostgreSQL run");
        return;
    };
    replay_after_kill(scratch.url()).await;
}
