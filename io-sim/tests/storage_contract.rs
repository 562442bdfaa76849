//! The simulated store passes the same storage contract suite as SQLite,
//! so it cannot drift from the real backends; plus its crash model.
#![allow(clippy::unwrap_used)]

use orbit_core::store::contract::{self, append};
use orbit_core::store::{Storage, StorageError, Transaction};
use orbit_io_sim::store::{SimStore, StoreBug};
use std::future::Future;
use std::pin::pin;
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
