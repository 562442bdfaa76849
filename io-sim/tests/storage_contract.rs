//! The simulated store passes the same storage contract suite as SQLite,
//! so it cannot drift from the real backends, and the shared-mode suite as
//! PostgreSQL; plus its crash model and the fault model of its shared-mode
//! calls.
#![allow(clippy::unwrap_used)]

use orbit_core::store::contract::{self, append};
use orbit_core::store::shared::{self, Kind, Sent, Store, Taken};
use orbit_core::store::{Fence, Storage, StorageError, Transaction};
use orbit_io_sim::store::shared::{Faults, Faulty};
use orbit_io_sim::store::{SimStore, StoreBug};
use serde_json::json;
use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

/// The simulated store never awaits anything, so polling once completes
/// every future it returns.
fn block_on<F: Future>(f: F) -> F::Output {
    let mut f = pin!(f);
    let mut cx = Context::from_waker(Waker::noop());
    loop {
        if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return v;
        }
    }
}

fn tx(appends: Vec<orbit_core::store::Append>) -> Transaction {
    Transaction {
        appends,
        ..Transaction::default()
    }
}

#[test]
fn sim_store_passes_the_storage_contract() {
    let store = SimStore::new();
    block_on(contract::run(&store)).unwrap();
}

#[test]
fn committed_transactions_survive_a_crash() {
    let store = SimStore::new();
    block_on(store.commit(&tx(vec![append("e1", 0, 3)]))).unwrap();
    store.crash();
    block_on(store.commit(&tx(vec![append("e1", 3, 4)]))).unwrap();
    store.crash();
    let active = block_on(store.load_active()).unwrap();
    assert_eq!(active.len(), 1);
    assert_eq!(active[0].events, contract::events(1, 4));
    assert_eq!(active[0].row, contract::row("e1", "running", 4));
    let refused = block_on(store.commit(&tx(vec![append("e1", 2, 5)])));
    assert!(matches!(refused, Err(StorageError::Conflict { .. })));
}

#[test]
fn the_planted_bug_loses_the_last_commit_on_crash() {
    let store = SimStore::with_bug(StoreBug::LoseLastCommitOnCrash);
    block_on(store.commit(&tx(vec![append("e1", 0, 3)]))).unwrap();
    block_on(store.commit(&tx(vec![append("e1", 3, 4)]))).unwrap();
    store.crash();
    assert_eq!(store.events("e1").len(), 3);
}

#[test]
fn sim_store_passes_the_shared_mode_contract() {
    let store = SimStore::new();
    block_on(shared::contract::run(&store)).unwrap();
    // Twice: the suite must hold on a store that already has data.
    block_on(shared::contract::run(&store)).unwrap();
}

fn owned(id: &str, node: &str, epoch: u64) -> Transaction {
    let mut a = append(id, 0, 1);
    a.fence = Some(Fence {
        node_id: node.to_owned(),
        epoch,
    });
    tx(vec![a])
}

#[test]
fn a_node_dies_when_silent_for_the_timeout_by_the_database_clock() {
    let store = SimStore::new();
    store.set_clock(1_000);
    block_on(store.commit(&owned("x", "n1", 1))).unwrap();
    block_on(store.beat("n1", "http://n1", 5_000)).unwrap();
    block_on(store.beat("n2", "http://n2", 5_000)).unwrap();
    let live = vec!["n2".to_owned()];
    store.set_clock(6_000);
    let m = block_on(store.beat("n2", "http://n2", 5_000)).unwrap();
    assert!(m.dead.is_empty(), "{m:?}");
    assert_eq!(m.live.len(), 2);
    let none = block_on(store.take_over("n2", "n1", &live, 5_000, 10)).unwrap();
    assert!(none.is_empty(), "took from a live node: {none:?}");
    // One millisecond past the timeout.
    store.set_clock(6_001);
    let m = block_on(store.beat("n2", "http://n2", 5_000)).unwrap();
    assert_eq!(m.dead, vec!["n1".to_owned()]);
    assert_eq!(m.live_ids(), live);
    let taken = block_on(store.take_over("n2", "n1", &live, 5_000, 10)).unwrap();
    assert_eq!(
        taken,
        vec![Taken {
            execution_id: "x".into(),
            epoch: 2
        }]
    );
    assert_eq!(
        store.owner("x"),
        Some(Fence {
            node_id: "n2".into(),
            epoch: 2
        })
    );
    // The clock never goes back.
    store.set_clock(10);
    assert_eq!(store.clock(), 6_001);
}

#[test]
fn executions_of_a_single_server_are_taken_over() {
    let store = SimStore::new();
    block_on(store.commit(&tx(vec![append("x", 0, 1)]))).unwrap();
    let m = block_on(store.beat("n1", "http://n1", 5_000)).unwrap();
    assert_eq!(m.dead, vec![String::new()]);
    let taken = block_on(store.take_over("n1", "", &["n1".to_owned()], 5_000, 10)).unwrap();
    assert_eq!(taken.len(), 1);
    assert_eq!(taken[0].epoch, 1);
}

/// The faults of the shared-mode calls follow the commit model: an
/// `Unavailable` call applied nothing, an `Ambiguous` one all or nothing,
/// a successful one all.
#[test]
fn faulty_calls_apply_all_or_nothing() {
    let faults = Faults {
        fail_probability: 0.3,
        ambiguous_probability: 0.3,
    };
    let store = Arc::new(SimStore::new());
    let faulty = Faulty::new(store.clone(), faults, 7);
    block_on(store.commit(&owned("x", "n1", 1))).unwrap();
    let mut outcomes = [0u32; 3];
    for i in 0..200 {
        let before = store.inbox_entries().len();
        let r = block_on(faulty.send("x", Kind::Signal, &json!(i)));
        let after = store.inbox_entries().len();
        match r {
            Ok(Sent::Queued { .. }) => {
                assert_eq!(after, before + 1);
                outcomes[0] += 1;
            }
            Err(StorageError::Unavailable(_)) => {
                assert_eq!(after, before);
                outcomes[1] += 1;
            }
            Err(StorageError::Ambiguous(_)) => {
                assert!(after == before || after == before + 1);
                outcomes[2] += 1;
            }
            other => panic!("send gave {other:?}"),
        }
    }
    assert!(outcomes.iter().all(|&n| n > 10), "outcomes {outcomes:?}");
    let counts = faulty.counts();
    assert!(counts.get("ambiguous_applied").is_some_and(|&n| n > 0));
    assert!(counts.get("ambiguous_lost").is_some_and(|&n| n > 0));
    // A takeover either moved the execution (epoch 2) or did not (1).
    store.set_clock(0);
    let live = vec!["n2".to_owned()];
    loop {
        let _ = block_on(faulty.beat("n2", "http://n2", 5_000));
        match block_on(faulty.take_over("n2", "n1", &live, 5_000, 10)) {
            Ok(taken) => {
                let epoch = store.owner("x").map(|f| f.epoch);
                assert!(taken.is_empty() || epoch == Some(2));
                if epoch == Some(2) {
                    break;
                }
            }
            Err(StorageError::Unavailable(_)) => {
                assert_eq!(store.owner("x").map(|f| f.epoch), Some(1));
            }
            Err(_) => {}
        }
    }
    let entries = store.inbox_entries();
    assert!(entries.iter().all(|(_, node, _)| node == "n2"));
}

#[test]
fn long_silent_contacts_are_forgotten() {
    let store = SimStore::new();
    block_on(store.commit(&owned("x", "n1", 1))).unwrap();
    block_on(store.beat("n1", "http://n1", 1_000)).unwrap();
    block_on(store.touch_sessions("n1", &["s1".to_owned()])).unwrap();
    store.set_clock(5_000);
    block_on(store.touch_sessions("n2", &["s2".to_owned()])).unwrap();
    assert_eq!(block_on(store.forget_sessions(6_000)).unwrap(), 0);
    assert_eq!(block_on(store.forget_sessions(3_000)).unwrap(), 1);
    let left = block_on(store.session_contacts(&["s1".to_owned(), "s2".to_owned()])).unwrap();
    assert_eq!(left.len(), 1);
    assert_eq!(left[0].session, "s2");
    // n1's contact is forgotten after ten timeouts; it is still dead by
    // what it owns.
    store.set_clock(20_000);
    let m = block_on(store.beat("n2", "http://n2", 1_000)).unwrap();
    assert_eq!(m.live_ids(), vec!["n2".to_owned()]);
    assert_eq!(m.dead, vec!["n1".to_owned()]);
}

/// The shared-mode suite catches the planted shared-mode store bugs, each
/// in the check that names what it breaks.
#[test]
fn the_shared_mode_suite_has_teeth() {
    for (bug, check) in [
        (
            StoreBug::KeepConsumedEntries,
            "the_inbox_is_read_in_order_and_consumed_with_the_events",
        ),
        (
            StoreBug::TakeOverKeepsEpoch,
            "a_takeover_bumps_the_epoch_and_fences_the_old_owner",
        ),
    ] {
        let store = SimStore::with_bug(bug);
        match block_on(shared::contract::run(&store)) {
            Err(v) => assert_eq!(v.check, check, "{bug:?}: {v}"),
            Ok(()) => panic!("{bug:?} passed the shared-mode suite"),
        }
    }
}
