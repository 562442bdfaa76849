//! Shared cluster mode on PostgreSQL: the shared-mode conformance suite
//! (the same the simulated store passes), and what only a real database
//! shows — many claimers at once on separate connections and processes'
//! worth of stores, liveness by the database's clock, and the slot rule
//! computed in SQL. They run when `ORBIT_TEST_POSTGRES` holds a URL (and
//! fail if it is unreachable); each test works in a database of its own.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod postgres_support;

use orbit_io_tokio::storage::contract::append;
use orbit_io_tokio::storage::shared::{self, slot, Kind, Poll, Sent, Store};
use orbit_io_tokio::storage::{
    Append, Consumed, Fence, PostgresOptions, PostgresStore, QueueOp, Storage, StorageError,
    Transaction,
};
use postgres_support::ScratchDatabase;
use serde_json::json;
use std::collections::BTreeSet;
use std::time::Duration;

async fn open(db: &ScratchDatabase) -> PostgresStore {
    PostgresStore::open(&PostgresOptions::new(db.url()))
        .await
        .unwrap()
}

fn owned(id: &str, node: &str, epoch: u64) -> Transaction {
    let mut a: Append = append(id, 0, 1);
    a.fence = Some(Fence {
        node_id: node.to_owned(),
        epoch,
    });
    Transaction {
        appends: vec![a],
        ..Transaction::default()
    }
}

#[tokio::test]
async fn postgres_passes_the_shared_mode_contract() {
    let Some(db) = ScratchDatabase::create("shared").await else {
        return;
    };
    let store = open(&db).await;
    shared::contract::run(&store).await.unwrap();
    // Twice: the suite must hold on a store that already has data.
    shared::contract::run(&store).await.unwrap();
    store.close().await;
}

/// Eight stores (as eight servers would have), four claimers each, race
/// for 200 queued rows: every row is claimed exactly once, each with one
/// `dispatch` entry, and nothing is left.
#[tokio::test]
async fn concurrent_claims_from_many_servers_take_each_row_once() {
    let Some(db) = ScratchDatabase::create("claims").await else {
        return;
    };
    let store = open(&db).await;
    let mut queue = Vec::new();
    for i in 0..20 {
        let id = format!("x{i}");
        store.commit(&owned(&id, "owner", 1)).await.unwrap();
        for u in 0..10 {
            queue.push(QueueOp::Enqueue {
                execution_id: id.clone(),
                unit: format!("u{u}"),
                task: "t".into(),
                enqueued_at: (u * 20 + i) as u64,
                body: json!({}),
            });
        }
    }
    store
        .commit(&Transaction {
            queue,
            ..Transaction::default()
        })
        .await
        .unwrap();
    let mut claimers = Vec::new();
    for s in 0..8 {
        let server = open(&db).await;
        for c in 0..4 {
            let server = server.clone();
            claimers.push(tokio::spawn(async move {
                let poll = Poll {
                    node_id: format!("n{s}"),
                    session: format!("s{s}-{c}"),
                    // Several rows per claim: concurrent batches never
                    // overlap either.
                    tokens: (0..3).map(|i| format!("t{s}-{c}-{i}")).collect(),
                    worker_id: format!("w{s}-{c}"),
                    tasks: vec!["t".into()],
                };
                let mut got = Vec::new();
                loop {
                    match server.claim(&poll).await {
                        Ok(claimed) if claimed.is_empty() => return got,
                        Ok(claimed) => {
                            got.extend(claimed.into_iter().map(|c| (c.execution_id, c.unit)))
                        }
                        Err(e) => panic!("claim failed: {e}"),
                    }
                }
            }));
        }
    }
    let mut all = Vec::new();
    for c in claimers {
        all.extend(c.await.unwrap());
    }
    let distinct: BTreeSet<_> = all.iter().cloned().collect();
    assert_eq!(all.len(), 200, "claims {}", all.len());
    assert_eq!(distinct.len(), 200);
    assert!(store.queue().await.unwrap().is_empty());
    let entries = store.inbox("owner", 0, 1_000).await.unwrap();
    assert_eq!(entries.len(), 200);
    assert!(entries.iter().all(|e| e.kind == Kind::Dispatch));
    store.close().await;
}

/// A claim does not wait for an owner's commit that holds the execution's
/// row: it takes another row, or none.
#[tokio::test]
async fn a_claim_never_waits_for_an_owners_commit() {
    let Some(db) = ScratchDatabase::create("claimwait").await else {
        return;
    };
    let store = open(&db).await;
    store.commit(&owned("busy", "o", 1)).await.unwrap();
    store.commit(&owned("idle", "o", 1)).await.unwrap();
    let enqueue = |id: &str, at: u64| QueueOp::Enqueue {
        execution_id: id.to_owned(),
        unit: "u".into(),
        task: "t".into(),
        enqueued_at: at,
        body: json!({}),
    };
    store
        .commit(&Transaction {
            queue: vec![enqueue("busy", 1), enqueue("idle", 2)],
            ..Transaction::default()
        })
        .await
        .unwrap();
    // An owner's commit in progress: the row of `busy` locked FOR UPDATE.
    let mut owner = sqlx::PgConnection::connect(db.url()).await.unwrap();
    sqlx::query("BEGIN").execute(&mut owner).await.unwrap();
    sqlx::query("SELECT 1 FROM executions WHERE id = 'busy' FOR UPDATE")
        .execute(&mut owner)
        .await
        .unwrap();
    let poll = Poll {
        node_id: "n".into(),
        session: "s".into(),
        tokens: vec!["t".into()],
        worker_id: "w".into(),
        tasks: vec!["t".into()],
    };
    let claimed = tokio::time::timeout(Duration::from_secs(5), store.claim(&poll))
        .await
        .expect("the claim waited for the owner's commit")
        .unwrap();
    let ids: Vec<String> = claimed.into_iter().map(|c| c.execution_id).collect();
    assert_eq!(ids, ["idle"]);
    sqlx::query("ROLLBACK").execute(&mut owner).await.unwrap();
    let claimed = store.claim(&poll).await.unwrap();
    let ids: Vec<String> = claimed.into_iter().map(|c| c.execution_id).collect();
    assert_eq!(ids, ["busy"]);
    store.close().await;
}

use sqlx::Connection;

/// A node is dead once silent for the timeout by the database's clock;
/// then a survivor takes its executions over, and not before.
#[tokio::test]
async fn a_node_silent_for_the_timeout_is_taken_over() {
    let Some(db) = ScratchDatabase::create("liveness").await else {
        return;
    };
    let store = open(&db).await;
    store.commit(&owned("x", "n1", 1)).await.unwrap();
    // Long enough that a loaded machine does not let a live node fall
    // silent between two of these calls.
    let timeout_ms = 1_000;
    store.beat("n1", "http://n1", timeout_ms).await.unwrap();
    store
        .touch_sessions("n1", &["s1".to_owned()])
        .await
        .unwrap();
    let m = store.beat("n2", "http://n2", timeout_ms).await.unwrap();
    assert!(m.dead.is_empty(), "{m:?}");
    let live = vec!["n2".to_owned()];
    let none = store
        .take_over("n2", "n1", &live, timeout_ms, 10)
        .await
        .unwrap();
    assert!(none.is_empty(), "taken from a live node: {none:?}");
    tokio::time::sleep(Duration::from_millis(timeout_ms + 200)).await;
    let m = store.beat("n2", "http://n2", timeout_ms).await.unwrap();
    assert_eq!(m.dead, vec!["n1".to_owned()]);
    assert_eq!(m.live_ids(), live);
    // n1's worker session went silent with it.
    let contacts = store.session_contacts(&["s1".to_owned()]).await.unwrap();
    assert!(contacts[0].silent_ms >= timeout_ms, "{contacts:?}");
    assert_eq!(store.forget_sessions(timeout_ms).await.unwrap(), 1);
    assert!(store
        .session_contacts(&["s1".to_owned()])
        .await
        .unwrap()
        .is_empty());
    // The survivor must be live itself when it takes over.
    store.beat("n2", "http://n2", timeout_ms).await.unwrap();
    let taken = store
        .take_over("n2", "n1", &live, timeout_ms, 10)
        .await
        .unwrap();
    assert_eq!(taken.len(), 1);
    assert_eq!(taken[0].epoch, 2);
    // n1 wakes up and writes: fenced.
    let mut late = append("x", 1, 2);
    late.fence = Some(Fence {
        node_id: "n1".into(),
        epoch: 1,
    });
    let r = store
        .commit(&Transaction {
            appends: vec![late],
            ..Transaction::default()
        })
        .await;
    assert!(
        matches!(&r, Err(StorageError::Conflict { fenced, .. }) if fenced == &vec!["x".to_owned()]),
        "{r:?}"
    );
    store.close().await;
}

/// The slot PostgreSQL computes (`orbit_slot`) is the one the core
/// computes, so the simulated store and PostgreSQL spread alike.
#[tokio::test]
async fn the_slot_in_sql_is_the_cores() {
    let Some(db) = ScratchDatabase::create("slot").await else {
        return;
    };
    let store = open(&db).await;
    let mut conn = sqlx::PgConnection::connect(db.url()).await.unwrap();
    for id in [
        "",
        "abc",
        "order-17",
        "wf.child.3",
        "ünïcødé-✓",
        "x".repeat(300).as_str(),
    ] {
        let got: i64 = sqlx::query_scalar("SELECT orbit_slot($1)")
            .bind(id)
            .fetch_one(&mut conn)
            .await
            .unwrap();
        assert_eq!(got, i64::from(slot(id)), "slot of {id:?}");
    }
    store.close().await;
}

/// An entry sent while a takeover of its execution is under way goes to
/// the owner the takeover leaves: never to the dead node. Many sends race
/// takeovers; every entry ends addressed to the execution's final owner.
#[tokio::test]
async fn sends_racing_a_takeover_reach_the_new_owner() {
    let Some(db) = ScratchDatabase::create("sendrace").await else {
        return;
    };
    let store = open(&db).await;
    let ids: Vec<String> = (0..40).map(|i| format!("x{i}")).collect();
    for id in &ids {
        store.commit(&owned(id, "dead", 1)).await.unwrap();
    }
    store.beat("a", "http://a", 60_000).await.unwrap();
    let mut senders = Vec::new();
    for s in 0..4 {
        let server = open(&db).await;
        let ids = ids.clone();
        senders.push(tokio::spawn(async move {
            for (i, id) in ids.iter().enumerate() {
                if i % 4 == s {
                    for n in 0..3 {
                        let sent = server.send(id, Kind::Signal, &json!(n)).await.unwrap();
                        assert!(matches!(sent, Sent::Queued { .. }), "{sent:?}");
                    }
                }
            }
        }));
    }
    let live = vec!["a".to_owned()];
    let taker = open(&db).await;
    let mut taken = 0;
    while taken < ids.len() {
        taken += taker
            .take_over("a", "dead", &live, 60_000, 3)
            .await
            .unwrap()
            .len();
    }
    for s in senders {
        s.await.unwrap();
    }
    assert!(store.inbox("dead", 0, 1_000).await.unwrap().is_empty());
    let entries = store.inbox("a", 0, 1_000).await.unwrap();
    assert_eq!(entries.len(), 120);
    // And the new owner consumes them, fenced at epoch 2.
    let consumed: Vec<Consumed> = entries
        .iter()
        .map(|e| Consumed {
            id: e.id,
            execution_id: e.execution_id.clone(),
            fence: Fence {
                node_id: "a".into(),
                epoch: 2,
            },
        })
        .collect();
    store
        .commit(&Transaction {
            inbox_consumed: consumed,
            ..Transaction::default()
        })
        .await
        .unwrap();
    assert!(store.inbox("a", 0, 1_000).await.unwrap().is_empty());
    store.close().await;
}

/// Three survivors with different views of who is live (one thinks it is
/// alone) take over one dead node's 300 executions at once, from stores of
/// their own: each execution is taken exactly once, at epoch 2, by the
/// node its row now names.
#[tokio::test]
async fn survivors_with_different_views_never_take_one_execution_twice() {
    let Some(db) = ScratchDatabase::create("views").await else {
        return;
    };
    let store = open(&db).await;
    let ids: Vec<String> = (0..300).map(|i| format!("x{i}")).collect();
    let mut batch = Transaction::default();
    for id in &ids {
        batch.merge(owned(id, "dead", 1));
    }
    store.commit(&batch).await.unwrap();
    let views: [(&str, Vec<&str>); 3] = [
        ("a", vec!["a", "b", "c"]),
        ("b", vec!["a", "b"]),
        ("c", vec!["c"]),
    ];
    for (node, _) in &views {
        store.beat(node, "http://x", 60_000).await.unwrap();
    }
    let mut survivors = Vec::new();
    for (node, view) in views {
        let server = open(&db).await;
        let view: Vec<String> = view.into_iter().map(str::to_owned).collect();
        survivors.push(tokio::spawn(async move {
            let mut got = Vec::new();
            loop {
                let taken = server
                    .take_over(node, "dead", &view, 60_000, 7)
                    .await
                    .unwrap();
                if taken.is_empty() {
                    return (node, got);
                }
                got.extend(taken);
            }
        }));
    }
    let mut all = BTreeSet::new();
    let mut count = 0;
    for s in survivors {
        let (node, got) = s.await.unwrap();
        for t in got {
            assert_eq!(t.epoch, 2, "{t:?}");
            count += 1;
            all.insert(t.execution_id.clone());
            // The row names the node that took it: a send reaches it.
            match store.send(&t.execution_id, Kind::Signal, &json!(1)).await {
                Ok(Sent::Queued { owner, .. }) => assert_eq!(owner.node_id, node),
                other => panic!("{other:?}"),
            }
        }
    }
    // c thinks it is alone, so every execution has a taker.
    assert_eq!(count, 300);
    assert_eq!(all.len(), 300);
    let m = store.beat("a", "http://x", 60_000).await.unwrap();
    assert!(!m.dead.contains(&"dead".to_owned()), "{m:?}");
    store.close().await;
}

/// A reclaim waits for a commit that holds one of its rows (its older
/// incarnation's, finishing the execution): that row, finished, is passed
/// over and the page is filled from the rows after it, so a short page
/// still means nothing is left.
#[tokio::test]
async fn a_reclaim_waiting_for_a_finishing_commit_still_fills_its_page() {
    let Some(db) = ScratchDatabase::create("reclaimwait").await else {
        return;
    };
    let store = open(&db).await;
    for id in ["r1", "r2", "r3"] {
        store.commit(&owned(id, "n", 1)).await.unwrap();
    }
    store.beat("n", "http://n", 60_000).await.unwrap();
    let mut older = sqlx::PgConnection::connect(db.url()).await.unwrap();
    sqlx::query("BEGIN").execute(&mut older).await.unwrap();
    sqlx::query("UPDATE executions SET status = 'completed' WHERE id = 'r1'")
        .execute(&mut older)
        .await
        .unwrap();
    let reclaimer = store.clone();
    let reclaim = tokio::spawn(async move { reclaimer.reclaim("n", "", 60_000, 2).await.unwrap() });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!reclaim.is_finished(), "the reclaim did not wait");
    sqlx::query("COMMIT").execute(&mut older).await.unwrap();
    let taken = reclaim.await.unwrap();
    let ids: Vec<(&str, u64)> = taken
        .iter()
        .map(|t| (t.execution_id.as_str(), t.epoch))
        .collect();
    assert_eq!(ids, vec![("r2", 2), ("r3", 2)]);
    store.close().await;
}
