//! The conformance suite of shared cluster mode: every [`Store`] (the
//! simulated store, PostgreSQL) must pass [`run`]. Like the storage suite
//! it uses fresh execution and node ids on every call, so it runs against
//! a store that already holds data. Nodes are made dead by never beating:
//! a node that owns executions and was never heard from is dead at once,
//! whatever the clock.

use super::{assignee, family, slot, Dispatch, Kind, Poll, Sent, Store, Taken};
use crate::store::contract::{append, events, fail, io, row, Violation};
use crate::store::contract::{counts_by_status, statuses_of_the_rows};
use crate::store::{Consumed, Fence, QueueOp, Storage, StorageError, Transaction};
use serde_json::json;
use std::collections::BTreeSet;
use std::future::{poll_fn, Future};
use std::pin::pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::Poll as Ready;

/// Contacts older than this are dead; every check beats its survivors just
/// before it needs them.
const TIMEOUT_MS: u64 = 60_000;

macro_rules! ensure {
    ($check:expr, $cond:expr, $($fmt:tt)+) => {
        if !$cond {
            return Err(fail($check, format!($($fmt)+)));
        }
    };
}

fn unique(prefix: &str) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    format!("shared-{prefix}-{}", NEXT.fetch_add(1, Ordering::Relaxed))
}

fn fence(node: &str, epoch: u64) -> Fence {
    Fence {
        node_id: node.to_owned(),
        epoch,
    }
}

/// Runs `a` and `b` at once (both in flight together), for both answers.
async fn join<A: Future, B: Future>(a: A, b: B) -> (A::Output, B::Output) {
    let (mut a, mut b) = (pin!(a), pin!(b));
    let (mut ra, mut rb) = (None, None);
    poll_fn(|cx| {
        if ra.is_none() {
            if let Ready::Ready(v) = a.as_mut().poll(cx) {
                ra = Some(v);
            }
        }
        if rb.is_none() {
            if let Ready::Ready(v) = b.as_mut().poll(cx) {
                rb = Some(v);
            }
        }
        match (ra.take(), rb.take()) {
            (Some(x), Some(y)) => Ready::Ready((x, y)),
            (x, y) => {
                ra = x;
                rb = y;
                Ready::Pending
            }
        }
    })
    .await
}

/// Creates `id` with 2 events, owned by `node` at `epoch`.
async fn create<S: Storage + Store>(
    store: &S,
    check: &'static str,
    id: &str,
    node: &str,
    epoch: u64,
) -> Result<(), Violation> {
    let mut a = append(id, 0, 2);
    a.fence = Some(fence(node, epoch));
    store
        .commit(&Transaction {
            appends: vec![a],
            ..Transaction::default()
        })
        .await
        .map_err(io(check))
}

/// Ends `id` (at seq 2, owned by `node` at `epoch`) as completed.
async fn finish<S: Storage + Store>(
    store: &S,
    check: &'static str,
    id: &str,
    node: &str,
    epoch: u64,
) -> Result<(), Violation> {
    let mut a = append(id, 2, 3);
    a.fence = Some(fence(node, epoch));
    a.projection = row(id, "completed", 3);
    store
        .commit(&Transaction {
            appends: vec![a],
            ..Transaction::default()
        })
        .await
        .map_err(io(check))
}

/// The id of a queued entry, or a violation.
fn queued(check: &'static str, sent: Sent) -> Result<(i64, Fence), Violation> {
    match sent {
        Sent::Queued { id, owner } => Ok((id, owner)),
        other => Err(fail(
            check,
            format!("expected a queued entry, got {other:?}"),
        )),
    }
}

/// Takes over from `dead` for `node` over `live`, in batches of 2, until a
/// batch comes back short (nothing in this suite holds a row meanwhile).
async fn take_all<S: Storage + Store>(
    store: &S,
    check: &'static str,
    node: &str,
    dead: &str,
    live: &[String],
) -> Result<Vec<Taken>, Violation> {
    let mut all = Vec::new();
    for _ in 0..100 {
        let batch = store
            .take_over(node, dead, live, TIMEOUT_MS, 2)
            .await
            .map_err(io(check))?;
        let done = batch.len() < 2;
        all.extend(batch);
        if done {
            return Ok(all);
        }
    }
    Err(fail(check, "take_over never ran out"))
}

/// Runs every check against `store`.
pub async fn run<S: Storage + Store>(store: &S) -> Result<(), Violation> {
    a_beat_lists_the_live_and_the_dead_owners(store).await?;
    a_member_writes_only_while_it_is_live(store).await?;
    a_takeover_bumps_the_epoch_and_fences_the_old_owner(store).await?;
    two_survivors_never_take_the_same_execution(store).await?;
    a_family_moves_to_one_survivor(store).await?;
    only_a_live_node_takes_over_and_only_from_a_dead_one(store).await?;
    finished_executions_are_never_taken(store).await?;
    executions_written_without_a_fence_are_taken_over(store).await?;
    the_inbox_is_read_in_order_and_consumed_with_the_events(store).await?;
    a_dead_nodes_inbox_moves_with_its_executions(store).await?;
    a_reclaim_bumps_the_epoch_and_fences_the_older_incarnation(store).await?;
    a_reclaim_takes_only_its_own_running_executions_page_by_page(store).await?;
    a_silent_node_reclaims_nothing(store).await?;
    a_send_to_a_finished_or_unknown_execution_stores_nothing(store).await?;
    a_claim_moves_the_row_into_the_owners_inbox(store).await?;
    two_concurrent_claims_never_get_the_same_row(store).await?;
    a_claim_takes_one_row_per_token(store).await?;
    session_contacts_are_read_back(store).await?;
    an_empty_node_id_is_refused(store).await?;
    the_counts_per_status_add_up_over_the_members(store).await?;
    Ok(())
}

/// A beat lists the beating node among the live, with its contact, and a
/// node that owns running executions but never beat among the dead; a
/// node whose executions all ended is not listed.
pub async fn a_beat_lists_the_live_and_the_dead_owners<S: Storage + Store>(
    store: &S,
) -> Result<(), Violation> {
    const C: &str = "a_beat_lists_the_live_and_the_dead_owners";
    let me = unique("me");
    let gone = unique("gone");
    let done = unique("done");
    create(store, C, &unique("x"), &gone, 1).await?;
    let ended = unique("x");
    create(store, C, &ended, &done, 1).await?;
    finish(store, C, &ended, &done, 1).await?;
    let members = store
        .beat(&me, "http://me:7000", TIMEOUT_MS)
        .await
        .map_err(io(C))?;
    ensure!(
        C,
        members.silence_ms.is_none(),
        "a first beat found a silence of {:?}",
        members.silence_ms
    );
    let mine = members.live.iter().find(|m| m.node_id == me);
    ensure!(
        C,
        mine.is_some_and(|m| m.advertise == "http://me:7000"
            && m.silent_ms < TIMEOUT_MS
            && m.up_ms >= m.silent_ms),
        "live {:?}",
        members.live
    );
    ensure!(
        C,
        !members.silent.iter().any(|m| m.node_id == me),
        "{me} both live and silent: {:?}",
        members.silent
    );
    ensure!(
        C,
        members.dead.contains(&gone),
        "{gone} not dead: {:?}",
        members.dead
    );
    ensure!(
        C,
        !members.dead.contains(&done) && !members.dead.contains(&me),
        "dead {:?}",
        members.dead
    );
    ensure!(
        C,
        members.live.windows(2).all(|w| w[0].node_id < w[1].node_id),
        "live not sorted"
    );
    // A second beat updates the contact, and says how long it was silent.
    let again = store
        .beat(&me, "http://me:7001", TIMEOUT_MS)
        .await
        .map_err(io(C))?;
    ensure!(
        C,
        again.silence_ms.is_some_and(|s| s < TIMEOUT_MS),
        "a second beat found a silence of {:?}",
        again.silence_ms
    );
    ensure!(
        C,
        again
            .live
            .iter()
            .any(|m| m.node_id == me && m.advertise == "http://me:7001"),
        "contact not updated: {:?}",
        again.live
    );
    Ok(())
}

/// A transaction naming its writing member passes only while that member
/// is live: before its first beat it is refused, every execution fenced,
/// nothing applied; after it, it passes.
pub async fn a_member_writes_only_while_it_is_live<S: Storage + Store>(
    store: &S,
) -> Result<(), Violation> {
    const C: &str = "a_member_writes_only_while_it_is_live";
    let me = unique("me");
    let x = unique("x");
    let mut a = append(&x, 0, 2);
    a.fence = Some(fence(&me, 1));
    let tx = Transaction {
        appends: vec![a],
        writer: Some(crate::store::Writer {
            node_id: me.clone(),
            timeout_ms: TIMEOUT_MS,
        }),
        ..Transaction::default()
    };
    let r = store.commit(&tx).await;
    ensure!(
        C,
        matches!(&r, Err(StorageError::Conflict { fenced, .. }) if fenced == &vec![x.clone()]),
        "a write of a member never heard from gave {r:?}"
    );
    let h = store.history(&x, 0, 100).await.map_err(io(C))?;
    ensure!(C, h.is_empty(), "the refused write left {h:?}");
    store
        .beat(&me, "http://me", TIMEOUT_MS)
        .await
        .map_err(io(C))?;
    store.commit(&tx).await.map_err(io(C))?;
    Ok(())
}

/// A takeover moves the dead node's execution to the survivor at the next
/// epoch: the old owner's append is then `fenced`, the new owner's
/// passes, and a second takeover finds nothing.
pub async fn a_takeover_bumps_the_epoch_and_fences_the_old_owner<S: Storage + Store>(
    store: &S,
) -> Result<(), Violation> {
    const C: &str = "a_takeover_bumps_the_epoch_and_fences_the_old_owner";
    let old = unique("old");
    let new = unique("new");
    let x = unique("x");
    create(store, C, &x, &old, 4).await?;
    store
        .beat(&new, "http://new", TIMEOUT_MS)
        .await
        .map_err(io(C))?;
    let live = vec![new.clone()];
    let taken = take_all(store, C, &new, &old, &live).await?;
    ensure!(
        C,
        taken
            == vec![Taken {
                execution_id: x.clone(),
                epoch: 5
            }],
        "taken {taken:?}"
    );
    let mut stale_writer = append(&x, 2, 3);
    stale_writer.fence = Some(fence(&old, 4));
    let r = store
        .commit(&Transaction {
            appends: vec![stale_writer],
            ..Transaction::default()
        })
        .await;
    ensure!(
        C,
        matches!(&r, Err(StorageError::Conflict { fenced, .. }) if fenced == &vec![x.clone()]),
        "the old owner's append gave {r:?}"
    );
    let mut owner = append(&x, 2, 3);
    owner.fence = Some(fence(&new, 5));
    store
        .commit(&Transaction {
            appends: vec![owner],
            ..Transaction::default()
        })
        .await
        .map_err(io(C))?;
    let h = store.history(&x, 0, 100).await.map_err(io(C))?;
    ensure!(C, h == events(1, 3), "history {h:?}");
    let again = take_all(store, C, &new, &old, &live).await?;
    ensure!(C, again.is_empty(), "taken twice: {again:?}");
    Ok(())
}

/// Two survivors with the same view split a dead node's executions: each
/// takes its own share (by [`assignee`]), together all of them, never the
/// same one — also when they ask at the same time.
pub async fn two_survivors_never_take_the_same_execution<S: Storage + Store>(
    store: &S,
) -> Result<(), Violation> {
    const C: &str = "two_survivors_never_take_the_same_execution";
    let dead = unique("dead");
    let (a, b) = (unique("a"), unique("b"));
    let ids: Vec<String> = (0..12).map(|_| unique("x")).collect();
    for id in &ids {
        create(store, C, id, &dead, 1).await?;
    }
    store
        .beat(&a, "http://a", TIMEOUT_MS)
        .await
        .map_err(io(C))?;
    store
        .beat(&b, "http://b", TIMEOUT_MS)
        .await
        .map_err(io(C))?;
    let mut live = vec![a.clone(), b.clone()];
    live.sort();
    let (ta, tb) = join(
        take_all(store, C, &a, &dead, &live),
        take_all(store, C, &b, &dead, &live),
    )
    .await;
    let (ta, tb) = (ta?, tb?);
    let got_a: BTreeSet<&str> = ta.iter().map(|t| t.execution_id.as_str()).collect();
    let got_b: BTreeSet<&str> = tb.iter().map(|t| t.execution_id.as_str()).collect();
    ensure!(
        C,
        got_a.is_disjoint(&got_b),
        "both took {:?}",
        got_a.intersection(&got_b).collect::<Vec<_>>()
    );
    ensure!(
        C,
        got_a.len() + got_b.len() == ids.len(),
        "took {} + {} of {}",
        got_a.len(),
        got_b.len(),
        ids.len()
    );
    for id in &ids {
        let who = if got_a.contains(id.as_str()) { &a } else { &b };
        ensure!(
            C,
            assignee(id, &live) == Some(who.as_str()),
            "{id} went to {who}, not its assignee"
        );
    }
    ensure!(
        C,
        ta.iter().chain(&tb).all(|t| t.epoch == 2),
        "epochs {ta:?} {tb:?}"
    );
    // A survivor with another view (it thinks it is alone) finds nothing
    // left: every execution already moved.
    let alone = take_all(store, C, &a, &dead, std::slice::from_ref(&a)).await?;
    ensure!(C, alone.is_empty(), "taken again: {alone:?}");
    Ok(())
}

/// A parent and its descendants (`p`, `p.a`, `p.b[1]`, `p.a.c`) move to
/// one survivor: the [`assignee`] of the family root. The families are
/// picked so that each survivor gets one and at least one family would be
/// split if each id were spread by its own slot.
pub async fn a_family_moves_to_one_survivor<S: Storage + Store>(
    store: &S,
) -> Result<(), Violation> {
    const C: &str = "a_family_moves_to_one_survivor";
    let dead = unique("dead");
    let (a, b) = (unique("a"), unique("b"));
    let mut live = vec![a.clone(), b.clone()];
    live.sort();
    let members = |root: &str| ["", ".a", ".b[1]", ".a.c"].map(|m| format!("{root}{m}"));
    let split_by_id = |root: &str| {
        let want = slot(root) % 2;
        members(root).iter().any(|id| slot(id) % 2 != want)
    };
    let mut roots: Vec<String> = Vec::new();
    while roots.len() < 3
        || !roots.iter().any(|r| split_by_id(r))
        || !live
            .iter()
            .all(|n| roots.iter().any(|r| assignee(r, &live) == Some(n.as_str())))
    {
        ensure!(C, roots.len() < 64, "no split of {roots:?}");
        roots.push(unique("p"));
    }
    for root in &roots {
        for id in members(root) {
            create(store, C, &id, &dead, 1).await?;
        }
    }
    store
        .beat(&a, "http://a", TIMEOUT_MS)
        .await
        .map_err(io(C))?;
    store
        .beat(&b, "http://b", TIMEOUT_MS)
        .await
        .map_err(io(C))?;
    let (ta, tb) = join(
        take_all(store, C, &a, &dead, &live),
        take_all(store, C, &b, &dead, &live),
    )
    .await;
    let (ta, tb) = (ta?, tb?);
    let mut went: Vec<(&str, &str)> = Vec::new();
    for (node, taken) in [(&a, &ta), (&b, &tb)] {
        went.extend(
            taken
                .iter()
                .map(|t| (t.execution_id.as_str(), node.as_str())),
        );
    }
    ensure!(
        C,
        went.len() == roots.len() * 4,
        "took {} of {}: {went:?}",
        went.len(),
        roots.len() * 4
    );
    for (id, node) in &went {
        ensure!(
            C,
            assignee(family(id), &live) == Some(*node),
            "{id} went to {node}, not with its family root {}",
            family(id)
        );
    }
    Ok(())
}

/// A node takes over nothing while it is not live itself, nor from a node
/// that is live, nor when it is missing from its own view.
pub async fn only_a_live_node_takes_over_and_only_from_a_dead_one<S: Storage + Store>(
    store: &S,
) -> Result<(), Violation> {
    const C: &str = "only_a_live_node_takes_over_and_only_from_a_dead_one";
    let owner = unique("owner");
    let silent = unique("silent");
    let me = unique("me");
    let x = unique("x");
    create(store, C, &x, &owner, 1).await?;
    let taken = store
        .take_over(
            &silent,
            &owner,
            std::slice::from_ref(&silent),
            TIMEOUT_MS,
            10,
        )
        .await
        .map_err(io(C))?;
    ensure!(C, taken.is_empty(), "a silent node took {taken:?}");
    store
        .beat(&owner, "http://o", TIMEOUT_MS)
        .await
        .map_err(io(C))?;
    store
        .beat(&me, "http://me", TIMEOUT_MS)
        .await
        .map_err(io(C))?;
    let live = vec![me.clone()];
    let taken = store
        .take_over(&me, &owner, &live, TIMEOUT_MS, 10)
        .await
        .map_err(io(C))?;
    ensure!(C, taken.is_empty(), "taken from a live node: {taken:?}");
    let taken = store
        .take_over(&me, &owner, &[unique("other")], TIMEOUT_MS, 10)
        .await
        .map_err(io(C))?;
    ensure!(C, taken.is_empty(), "taken outside its view: {taken:?}");
    let taken = store
        .take_over(&me, &owner, &live, TIMEOUT_MS, 0)
        .await
        .map_err(io(C))?;
    ensure!(C, taken.is_empty(), "limit 0 took {taken:?}");
    Ok(())
}

/// A dead node's finished executions stay where they are.
pub async fn finished_executions_are_never_taken<S: Storage + Store>(
    store: &S,
) -> Result<(), Violation> {
    const C: &str = "finished_executions_are_never_taken";
    let dead = unique("dead");
    let me = unique("me");
    let (running, ended) = (unique("running"), unique("ended"));
    create(store, C, &running, &dead, 1).await?;
    create(store, C, &ended, &dead, 1).await?;
    finish(store, C, &ended, &dead, 1).await?;
    store
        .beat(&me, "http://me", TIMEOUT_MS)
        .await
        .map_err(io(C))?;
    let taken = take_all(store, C, &me, &dead, std::slice::from_ref(&me)).await?;
    let ids: Vec<&str> = taken.iter().map(|t| t.execution_id.as_str()).collect();
    ensure!(C, ids == vec![running.as_str()], "taken {ids:?}");
    // The finished one keeps its owner: its old owner may still write to it
    // (nothing does, but nothing moved it either).
    let mut late = append(&ended, 3, 4);
    late.fence = Some(fence(&dead, 1));
    late.projection = row(&ended, "completed", 4);
    store
        .commit(&Transaction {
            appends: vec![late],
            ..Transaction::default()
        })
        .await
        .map_err(io(C))?;
    Ok(())
}

/// An execution written without a fence (by a single server, before the
/// database served shared mode) has the owner `""`, which is never alive:
/// it is listed dead and taken over at epoch 1.
pub async fn executions_written_without_a_fence_are_taken_over<S: Storage + Store>(
    store: &S,
) -> Result<(), Violation> {
    const C: &str = "executions_written_without_a_fence_are_taken_over";
    let me = unique("me");
    let x = unique("x");
    store
        .commit(&Transaction {
            appends: vec![append(&x, 0, 2)],
            ..Transaction::default()
        })
        .await
        .map_err(io(C))?;
    let members = store
        .beat(&me, "http://me", TIMEOUT_MS)
        .await
        .map_err(io(C))?;
    ensure!(
        C,
        members.dead.iter().any(String::is_empty),
        "dead {:?}",
        members.dead
    );
    let taken = take_all(store, C, &me, "", std::slice::from_ref(&me)).await?;
    ensure!(
        C,
        taken.contains(&Taken {
            execution_id: x.clone(),
            epoch: 1
        }),
        "taken {taken:?}"
    );
    let mut owner = append(&x, 2, 3);
    owner.fence = Some(fence(&me, 1));
    store
        .commit(&Transaction {
            appends: vec![owner],
            ..Transaction::default()
        })
        .await
        .map_err(io(C))?;
    Ok(())
}

/// Entries are read in the order they were sent, bounded and after a
/// cursor; a consumed entry is deleted in the commit of its events, a
/// second consumption is `stale`, and a refused commit deletes nothing.
pub async fn the_inbox_is_read_in_order_and_consumed_with_the_events<S: Storage + Store>(
    store: &S,
) -> Result<(), Violation> {
    const C: &str = "the_inbox_is_read_in_order_and_consumed_with_the_events";
    let node = unique("owner");
    let (x, y) = (unique("x"), unique("y"));
    create(store, C, &x, &node, 3).await?;
    create(store, C, &y, &node, 3).await?;
    let mut sent = Vec::new();
    for (i, (id, kind)) in [
        (&x, Kind::Signal),
        (&y, Kind::Cancel),
        (&x, Kind::Result),
        (&x, Kind::Start),
    ]
    .into_iter()
    .enumerate()
    {
        let (entry, owner) = queued(
            C,
            store
                .send(id, kind, &json!({"n": i}))
                .await
                .map_err(io(C))?,
        )?;
        ensure!(C, owner == fence(&node, 3), "addressed to {owner:?}");
        sent.push(entry);
    }
    ensure!(
        C,
        sent.windows(2).all(|w| w[0] < w[1]),
        "ids not increasing: {sent:?}"
    );
    let all = store.inbox(&node, 0, 100).await.map_err(io(C))?;
    let ids: Vec<i64> = all.iter().map(|e| e.id).collect();
    ensure!(C, ids == sent, "read {ids:?}, sent {sent:?}");
    let first = &all[0];
    ensure!(
        C,
        first.execution_id == x && first.kind == Kind::Signal && first.body == json!({"n": 0}),
        "first entry {first:?}"
    );
    let page = store.inbox(&node, sent[0], 2).await.map_err(io(C))?;
    let ids: Vec<i64> = page.iter().map(|e| e.id).collect();
    ensure!(C, ids == sent[1..3], "page after {}: {ids:?}", sent[0]);
    // A refused commit (stale append) consumes nothing.
    let refused = Transaction {
        appends: vec![{
            let mut a = append(&x, 1, 2);
            a.fence = Some(fence(&node, 3));
            a
        }],
        inbox_consumed: vec![Consumed {
            id: sent[0],
            execution_id: x.clone(),
            fence: fence(&node, 3),
        }],
        ..Transaction::default()
    };
    let r = store.commit(&refused).await;
    ensure!(
        C,
        matches!(r, Err(StorageError::Conflict { .. })),
        "stale commit gave {r:?}"
    );
    ensure!(
        C,
        store.inbox(&node, 0, 100).await.map_err(io(C))?.len() == 4,
        "a refused commit consumed an entry"
    );
    // The owner applies the first entry: its event and its deletion commit
    // together.
    let mut applied = append(&x, 2, 3);
    applied.fence = Some(fence(&node, 3));
    let consume = Consumed {
        id: sent[0],
        execution_id: x.clone(),
        fence: fence(&node, 3),
    };
    store
        .commit(&Transaction {
            appends: vec![applied],
            inbox_consumed: vec![consume.clone()],
            ..Transaction::default()
        })
        .await
        .map_err(io(C))?;
    let left: Vec<i64> = store
        .inbox(&node, 0, 100)
        .await
        .map_err(io(C))?
        .iter()
        .map(|e| e.id)
        .collect();
    ensure!(C, left == sent[1..], "left {left:?}");
    ensure!(
        C,
        store.history(&x, 0, 100).await.map_err(io(C))?.len() == 3,
        "the entry's event is missing"
    );
    // Applied twice: stale, and nothing of that commit lands.
    let mut twice = append(&x, 3, 4);
    twice.fence = Some(fence(&node, 3));
    let r = store
        .commit(&Transaction {
            appends: vec![twice],
            inbox_consumed: vec![consume],
            ..Transaction::default()
        })
        .await;
    ensure!(
        C,
        matches!(&r, Err(StorageError::Conflict { stale, fenced }) if stale == &vec![x.clone()] && fenced.is_empty()),
        "a second consumption gave {r:?}"
    );
    ensure!(
        C,
        store.history(&x, 0, 100).await.map_err(io(C))?.len() == 3,
        "a refused consumption wrote its event"
    );
    // An entry consumed without events (a duplicate command) goes alone.
    store
        .commit(&Transaction {
            inbox_consumed: vec![Consumed {
                id: sent[1],
                execution_id: y.clone(),
                fence: fence(&node, 3),
            }],
            ..Transaction::default()
        })
        .await
        .map_err(io(C))?;
    let left = store.inbox(&node, 0, 100).await.map_err(io(C))?;
    ensure!(
        C,
        left.iter().map(|e| e.id).collect::<Vec<_>>() == sent[2..],
        "left {left:?}"
    );
    // Named under the wrong execution: stale.
    let r = store
        .commit(&Transaction {
            inbox_consumed: vec![Consumed {
                id: sent[2],
                execution_id: y.clone(),
                fence: fence(&node, 3),
            }],
            ..Transaction::default()
        })
        .await;
    ensure!(
        C,
        matches!(&r, Err(StorageError::Conflict { stale, .. }) if stale == &vec![y.clone()]),
        "a misaddressed consumption gave {r:?}"
    );
    Ok(())
}

/// After a takeover the moved executions' entries are the new owner's, in
/// their order; the old owner neither reads them nor may consume them
/// (`fenced`), even without appending; entries of its executions that did
/// not move stay its own.
pub async fn a_dead_nodes_inbox_moves_with_its_executions<S: Storage + Store>(
    store: &S,
) -> Result<(), Violation> {
    const C: &str = "a_dead_nodes_inbox_moves_with_its_executions";
    let dead = unique("dead");
    let (a, b) = (unique("a"), unique("b"));
    let mut live = vec![a.clone(), b.clone()];
    live.sort();
    // Six executions at least, and at least one for each survivor.
    let mut ids: Vec<String> = Vec::new();
    while ids.len() < 6
        || !live
            .iter()
            .all(|n| ids.iter().any(|id| assignee(id, &live) == Some(n.as_str())))
    {
        ensure!(C, ids.len() < 64, "no split of {ids:?}");
        ids.push(unique("x"));
    }
    let mut sent = Vec::new();
    for id in &ids {
        create(store, C, id, &dead, 2).await?;
        for n in 0..2 {
            let (entry, _) = queued(
                C,
                store
                    .send(id, Kind::Signal, &json!({ "n": n }))
                    .await
                    .map_err(io(C))?,
            )?;
            sent.push((entry, id.clone()));
        }
    }
    store
        .beat(&a, "http://a", TIMEOUT_MS)
        .await
        .map_err(io(C))?;
    store
        .beat(&b, "http://b", TIMEOUT_MS)
        .await
        .map_err(io(C))?;
    // Only a takes over now: b's share stays with the dead node.
    let taken = take_all(store, C, &a, &dead, &live).await?;
    let moved: BTreeSet<&str> = taken.iter().map(|t| t.execution_id.as_str()).collect();
    let mine: Vec<i64> = store
        .inbox(&a, 0, 100)
        .await
        .map_err(io(C))?
        .iter()
        .map(|e| e.id)
        .collect();
    let want: Vec<i64> = sent
        .iter()
        .filter(|(_, id)| moved.contains(id.as_str()))
        .map(|(e, _)| *e)
        .collect();
    ensure!(C, mine == want, "new owner reads {mine:?}, want {want:?}");
    let kept: Vec<i64> = store
        .inbox(&dead, 0, 100)
        .await
        .map_err(io(C))?
        .iter()
        .map(|e| e.id)
        .collect();
    let want: Vec<i64> = sent
        .iter()
        .filter(|(_, id)| !moved.contains(id.as_str()))
        .map(|(e, _)| *e)
        .collect();
    ensure!(C, kept == want, "old owner reads {kept:?}, want {want:?}");
    // The old owner, paused through the takeover, consumes a moved entry.
    let Some((entry, id)) = sent.iter().find(|(_, id)| moved.contains(id.as_str())) else {
        return Err(fail(C, format!("{a} took nothing")));
    };
    {
        let r = store
            .commit(&Transaction {
                inbox_consumed: vec![Consumed {
                    id: *entry,
                    execution_id: id.clone(),
                    fence: fence(&dead, 2),
                }],
                ..Transaction::default()
            })
            .await;
        ensure!(
            C,
            matches!(&r, Err(StorageError::Conflict { fenced, .. }) if fenced == &vec![id.clone()]),
            "the old owner's consumption gave {r:?}"
        );
        ensure!(
            C,
            store
                .inbox(&a, 0, 100)
                .await
                .map_err(io(C))?
                .iter()
                .any(|e| e.id == *entry),
            "a fenced consumption deleted the entry"
        );
    }
    // A send after the takeover goes to the new owner.
    if let Some(t) = taken.iter().find(|t| t.execution_id == *id) {
        let (_, owner) = queued(
            C,
            store
                .send(&t.execution_id, Kind::Cancel, &json!({}))
                .await
                .map_err(io(C))?,
        )?;
        ensure!(C, owner == fence(&a, 3), "sent to {owner:?}");
    }
    // b's turn: everything moved, nothing is left for the dead node.
    take_all(store, C, &b, &dead, &live).await?;
    let left = store.inbox(&dead, 0, 100).await.map_err(io(C))?;
    ensure!(C, left.is_empty(), "left with the dead node: {left:?}");
    Ok(())
}

/// Reclaims all of `node`'s running executions, in pages of 2 (`after_id`
/// the last id returned), until a page comes back short; each page must be
/// in id order and start above the previous one.
async fn reclaim_all<S: Storage + Store>(
    store: &S,
    check: &'static str,
    node: &str,
) -> Result<Vec<Taken>, Violation> {
    let mut all: Vec<Taken> = Vec::new();
    for _ in 0..100 {
        let after = all
            .last()
            .map_or("", |t| t.execution_id.as_str())
            .to_owned();
        let page = store
            .reclaim(node, &after, TIMEOUT_MS, 2)
            .await
            .map_err(io(check))?;
        ensure!(
            check,
            page.windows(2)
                .all(|w| w[0].execution_id < w[1].execution_id)
                && page
                    .first()
                    .is_none_or(|t| t.execution_id.as_str() > after.as_str()),
            "page after {after:?}: {page:?}"
        );
        let done = page.len() < 2;
        all.extend(page);
        if done {
            return Ok(all);
        }
    }
    Err(fail(check, "reclaim never ran out"))
}

/// A node that reclaims its own execution moves it to the next epoch: an
/// older incarnation of it, still writing or consuming at the old epoch,
/// is `fenced`; the new epoch passes; the inbox entries stay its own.
pub async fn a_reclaim_bumps_the_epoch_and_fences_the_older_incarnation<S: Storage + Store>(
    store: &S,
) -> Result<(), Violation> {
    const C: &str = "a_reclaim_bumps_the_epoch_and_fences_the_older_incarnation";
    let node = unique("node");
    let x = unique("x");
    create(store, C, &x, &node, 3).await?;
    let (entry, _) = queued(
        C,
        store
            .send(&x, Kind::Signal, &json!({}))
            .await
            .map_err(io(C))?,
    )?;
    store
        .beat(&node, "http://node", TIMEOUT_MS)
        .await
        .map_err(io(C))?;
    let taken = reclaim_all(store, C, &node).await?;
    ensure!(
        C,
        taken
            == vec![Taken {
                execution_id: x.clone(),
                epoch: 4
            }],
        "reclaimed {taken:?}"
    );
    let inbox = store.inbox(&node, 0, 100).await.map_err(io(C))?;
    ensure!(
        C,
        inbox.iter().map(|e| e.id).collect::<Vec<_>>() == vec![entry],
        "inbox after the reclaim {inbox:?}"
    );
    let mut older = append(&x, 2, 3);
    older.fence = Some(fence(&node, 3));
    let r = store
        .commit(&Transaction {
            appends: vec![older],
            inbox_consumed: vec![Consumed {
                id: entry,
                execution_id: x.clone(),
                fence: fence(&node, 3),
            }],
            ..Transaction::default()
        })
        .await;
    ensure!(
        C,
        matches!(&r, Err(StorageError::Conflict { fenced, .. }) if fenced == &vec![x.clone()]),
        "the older incarnation's append gave {r:?}"
    );
    let mut newer = append(&x, 2, 3);
    newer.fence = Some(fence(&node, 4));
    store
        .commit(&Transaction {
            appends: vec![newer],
            inbox_consumed: vec![Consumed {
                id: entry,
                execution_id: x.clone(),
                fence: fence(&node, 4),
            }],
            ..Transaction::default()
        })
        .await
        .map_err(io(C))?;
    let h = store.history(&x, 0, 100).await.map_err(io(C))?;
    ensure!(C, h == events(1, 3), "history {h:?}");
    Ok(())
}

/// A reclaim moves only the caller's own running executions: another
/// node's and its finished ones keep their owner and epoch. Paging with
/// the last id returned visits each execution once, in id order.
pub async fn a_reclaim_takes_only_its_own_running_executions_page_by_page<S: Storage + Store>(
    store: &S,
) -> Result<(), Violation> {
    const C: &str = "a_reclaim_takes_only_its_own_running_executions_page_by_page";
    let node = unique("node");
    let other = unique("other");
    let mut running: Vec<String> = (0..5).map(|_| unique("x")).collect();
    for id in &running {
        create(store, C, id, &node, 1).await?;
    }
    running.sort();
    let ended = unique("ended");
    create(store, C, &ended, &node, 1).await?;
    finish(store, C, &ended, &node, 1).await?;
    let theirs = unique("y");
    create(store, C, &theirs, &other, 1).await?;
    store
        .beat(&node, "http://node", TIMEOUT_MS)
        .await
        .map_err(io(C))?;
    store
        .beat(&other, "http://other", TIMEOUT_MS)
        .await
        .map_err(io(C))?;
    let taken = reclaim_all(store, C, &node).await?;
    let want: Vec<Taken> = running
        .iter()
        .map(|id| Taken {
            execution_id: id.clone(),
            epoch: 2,
        })
        .collect();
    ensure!(C, taken == want, "reclaimed {taken:?}, want {want:?}");
    // A page after the last id is empty; limit 0 takes nothing.
    let last = running.last().cloned().unwrap_or_default();
    let r = store
        .reclaim(&node, &last, TIMEOUT_MS, 10)
        .await
        .map_err(io(C))?;
    ensure!(C, r.is_empty(), "after the last id: {r:?}");
    let r = store
        .reclaim(&node, "", TIMEOUT_MS, 0)
        .await
        .map_err(io(C))?;
    ensure!(C, r.is_empty(), "limit 0 took {r:?}");
    // The finished execution and the other node's kept their epoch 1.
    let mut late = append(&ended, 3, 4);
    late.fence = Some(fence(&node, 1));
    late.projection = row(&ended, "completed", 4);
    let mut theirs_next = append(&theirs, 2, 3);
    theirs_next.fence = Some(fence(&other, 1));
    store
        .commit(&Transaction {
            appends: vec![late, theirs_next],
            ..Transaction::default()
        })
        .await
        .map_err(io(C))?;
    Ok(())
}

/// A node that has not beaten within the timeout reclaims nothing, and its
/// executions keep their epoch.
pub async fn a_silent_node_reclaims_nothing<S: Storage + Store>(
    store: &S,
) -> Result<(), Violation> {
    const C: &str = "a_silent_node_reclaims_nothing";
    let silent = unique("silent");
    let x = unique("x");
    create(store, C, &x, &silent, 1).await?;
    let taken = store
        .reclaim(&silent, "", TIMEOUT_MS, 10)
        .await
        .map_err(io(C))?;
    ensure!(C, taken.is_empty(), "a silent node reclaimed {taken:?}");
    let mut next = append(&x, 2, 3);
    next.fence = Some(fence(&silent, 1));
    store
        .commit(&Transaction {
            appends: vec![next],
            ..Transaction::default()
        })
        .await
        .map_err(io(C))?;
    Ok(())
}

/// A send to a finished execution or an unknown id stores nothing.
pub async fn a_send_to_a_finished_or_unknown_execution_stores_nothing<S: Storage + Store>(
    store: &S,
) -> Result<(), Violation> {
    const C: &str = "a_send_to_a_finished_or_unknown_execution_stores_nothing";
    let node = unique("owner");
    let x = unique("x");
    create(store, C, &x, &node, 1).await?;
    finish(store, C, &x, &node, 1).await?;
    let r = store
        .send(&x, Kind::Signal, &json!({}))
        .await
        .map_err(io(C))?;
    ensure!(
        C,
        r == Sent::Finished {
            status: "completed".into()
        },
        "finished: {r:?}"
    );
    let r = store
        .send(&unique("none"), Kind::Result, &json!({}))
        .await
        .map_err(io(C))?;
    ensure!(C, r == Sent::Missing, "unknown: {r:?}");
    let left = store.inbox(&node, 0, 100).await.map_err(io(C))?;
    ensure!(C, left.is_empty(), "stored {left:?}");
    Ok(())
}

fn enqueue(id: &str, unit: &str, task: &str, at: u64) -> QueueOp {
    QueueOp::Enqueue {
        execution_id: id.to_owned(),
        unit: unit.to_owned(),
        task: task.to_owned(),
        enqueued_at: at,
        body: json!({"unit": unit}),
    }
}

/// A claim takes the oldest row of the asked tasks (never one of a finished
/// execution), removes it and writes the `dispatch` entry to the owner.
pub async fn a_claim_moves_the_row_into_the_owners_inbox<S: Storage + Store>(
    store: &S,
) -> Result<(), Violation> {
    const C: &str = "a_claim_moves_the_row_into_the_owners_inbox";
    let owner = unique("owner");
    let poller = unique("poller");
    let task = unique("task");
    let other_task = unique("task");
    let (x, ended) = (unique("x"), unique("ended"));
    create(store, C, &x, &owner, 2).await?;
    create(store, C, &ended, &owner, 2).await?;
    store
        .commit(&Transaction {
            queue: vec![
                enqueue(&ended, "u0", &task, 5),
                enqueue(&x, "u2", &task, 20),
                enqueue(&x, "u1", &task, 10),
                enqueue(&x, "u3", &other_task, 1),
            ],
            ..Transaction::default()
        })
        .await
        .map_err(io(C))?;
    finish(store, C, &ended, &owner, 2).await?;
    let poll = Poll {
        node_id: poller.clone(),
        session: "s1".into(),
        tokens: vec!["t1".into()],
        worker_id: "w1".into(),
        tasks: vec![task.clone(), unique("task")],
    };
    let claimed = store.claim(&poll).await.map_err(io(C))?;
    ensure!(C, claimed.len() <= 1, "one token, {} rows", claimed.len());
    let Some(claimed) = claimed.into_iter().next() else {
        return Err(fail(C, "nothing claimed"));
    };
    ensure!(
        C,
        claimed.execution_id == x
            && claimed.unit == "u1"
            && claimed.task == task
            && claimed.token == "t1"
            && claimed.enqueued_at == 10
            && claimed.body == json!({"unit": "u1"})
            && claimed.owner == fence(&owner, 2),
        "claimed {claimed:?}"
    );
    let queue = store.queue().await.map_err(io(C))?;
    ensure!(
        C,
        !queue.iter().any(
            |op| matches!(op, QueueOp::Enqueue { execution_id, unit, .. } if execution_id == &x && unit == "u1")
        ),
        "the claimed row is still queued"
    );
    let inbox = store.inbox(&owner, 0, 100).await.map_err(io(C))?;
    ensure!(
        C,
        inbox.len() == 1 && inbox[0].id == claimed.entry && inbox[0].kind == Kind::Dispatch,
        "owner's inbox {inbox:?}"
    );
    let dispatch: Result<Dispatch, _> = serde_json::from_value(inbox[0].body.clone());
    ensure!(
        C,
        dispatch.as_ref().ok()
            == Some(&Dispatch {
                unit: "u1".into(),
                task: task.clone(),
                token: "t1".into(),
                session: "s1".into(),
                node_id: poller.clone(),
                worker_id: "w1".into(),
            }),
        "dispatch body {:?}",
        inbox[0].body
    );
    let next = store.claim(&poll).await.map_err(io(C))?;
    ensure!(
        C,
        next.first().map(|c| c.unit.as_str()) == Some("u2") && next.len() == 1,
        "second claim {next:?}"
    );
    let none = store.claim(&poll).await.map_err(io(C))?;
    ensure!(C, none.is_empty(), "third claim {none:?}");
    Ok(())
}

/// A poll with several tokens claims that many rows in one go, oldest
/// first, each handed out with its own token and its own `dispatch`
/// entry; fewer when fewer are queued.
pub async fn a_claim_takes_one_row_per_token<S: Storage + Store>(
    store: &S,
) -> Result<(), Violation> {
    const C: &str = "a_claim_takes_one_row_per_token";
    let (owner, poller) = (unique("owner"), unique("poller"));
    let task = unique("task");
    let x = unique("x");
    create(store, C, &x, &owner, 1).await?;
    store
        .commit(&Transaction {
            queue: vec![
                enqueue(&x, "u3", &task, 30),
                enqueue(&x, "u1", &task, 10),
                enqueue(&x, "u2", &task, 20),
            ],
            ..Transaction::default()
        })
        .await
        .map_err(io(C))?;
    let poll = |tokens: &[&str]| Poll {
        node_id: poller.clone(),
        session: "s".into(),
        tokens: tokens.iter().map(|t| (*t).to_owned()).collect(),
        worker_id: "w".into(),
        tasks: vec![task.clone()],
    };
    let two = store.claim(&poll(&["a", "b"])).await.map_err(io(C))?;
    let got: Vec<(&str, &str)> = two
        .iter()
        .map(|c| (c.unit.as_str(), c.token.as_str()))
        .collect();
    ensure!(C, got == [("u1", "a"), ("u2", "b")], "claimed {two:?}");
    let rest = store.claim(&poll(&["c", "d", "e"])).await.map_err(io(C))?;
    let got: Vec<(&str, &str)> = rest
        .iter()
        .map(|c| (c.unit.as_str(), c.token.as_str()))
        .collect();
    ensure!(C, got == [("u3", "c")], "claimed {rest:?}");
    let inbox = store.inbox(&owner, 0, 100).await.map_err(io(C))?;
    let tokens: Vec<String> = inbox
        .iter()
        .filter_map(|e| serde_json::from_value::<Dispatch>(e.body.clone()).ok())
        .map(|d| d.token)
        .collect();
    ensure!(C, tokens == ["a", "b", "c"], "dispatch entries {inbox:?}");
    let none = store.claim(&poll(&["f"])).await.map_err(io(C))?;
    ensure!(C, none.is_empty(), "claimed {none:?} from an empty queue");
    Ok(())
}

/// Two polls at once for one queued row: exactly one gets it, and one
/// `dispatch` entry is written.
pub async fn two_concurrent_claims_never_get_the_same_row<S: Storage + Store>(
    store: &S,
) -> Result<(), Violation> {
    const C: &str = "two_concurrent_claims_never_get_the_same_row";
    let owner = unique("owner");
    let task = unique("task");
    let x = unique("x");
    create(store, C, &x, &owner, 1).await?;
    store
        .commit(&Transaction {
            queue: vec![enqueue(&x, "u", &task, 1)],
            ..Transaction::default()
        })
        .await
        .map_err(io(C))?;
    let poll = |n: &str| Poll {
        node_id: unique(n),
        session: n.to_owned(),
        tokens: vec![n.to_owned()],
        worker_id: n.to_owned(),
        tasks: vec![task.clone()],
    };
    let (pa, pb) = (poll("a"), poll("b"));
    let (ra, rb) = join(store.claim(&pa), store.claim(&pb)).await;
    let (ra, rb) = (ra.map_err(io(C))?, rb.map_err(io(C))?);
    ensure!(
        C,
        ra.is_empty() != rb.is_empty(),
        "claims gave {ra:?} and {rb:?}"
    );
    let inbox = store.inbox(&owner, 0, 100).await.map_err(io(C))?;
    ensure!(C, inbox.len() == 1, "dispatch entries {inbox:?}");
    let winner = if ra.is_empty() { &pb } else { &pa };
    let dispatch: Result<Dispatch, _> = serde_json::from_value(inbox[0].body.clone());
    ensure!(
        C,
        dispatch
            .as_ref()
            .is_ok_and(|d| d.worker_id == winner.worker_id
                && d.session == winner.session
                && d.node_id == winner.node_id),
        "dispatch body {:?} for {winner:?}",
        inbox[0].body
    );
    Ok(())
}

/// Session contacts are written for many sessions at once and read back
/// with the node they last polled; unknown sessions have none.
pub async fn session_contacts_are_read_back<S: Storage + Store>(
    store: &S,
) -> Result<(), Violation> {
    const C: &str = "session_contacts_are_read_back";
    let (n1, n2) = (unique("n1"), unique("n2"));
    let sessions: Vec<String> = (0..3).map(|_| unique("session")).collect();
    store.touch_sessions(&n1, &sessions).await.map_err(io(C))?;
    store
        .touch_sessions(&n2, &sessions[2..])
        .await
        .map_err(io(C))?;
    store.touch_sessions(&n2, &[]).await.map_err(io(C))?;
    let mut asked = sessions.clone();
    asked.push(unique("never"));
    let got = store.session_contacts(&asked).await.map_err(io(C))?;
    let seen: Vec<(&str, &str)> = got
        .iter()
        .map(|c| (c.session.as_str(), c.node_id.as_str()))
        .collect();
    let mut want: Vec<(&str, &str)> = vec![
        (sessions[0].as_str(), n1.as_str()),
        (sessions[1].as_str(), n1.as_str()),
        (sessions[2].as_str(), n2.as_str()),
    ];
    want.sort();
    ensure!(C, seen == want, "contacts {seen:?}");
    ensure!(
        C,
        got.iter().all(|c| c.silent_ms < TIMEOUT_MS),
        "contacts {got:?}"
    );
    // Contacts this recent are kept by a chore that forgets silent ones.
    store.forget_sessions(TIMEOUT_MS).await.map_err(io(C))?;
    let kept = store.session_contacts(&sessions).await.map_err(io(C))?;
    ensure!(C, kept.len() == 3, "recent contacts forgotten: {kept:?}");
    Ok(())
}

/// A node id the calls cannot take is refused, and nothing is written.
pub async fn an_empty_node_id_is_refused<S: Storage + Store>(store: &S) -> Result<(), Violation> {
    const C: &str = "an_empty_node_id_is_refused";
    let r = store.beat("", "http://x", TIMEOUT_MS).await;
    ensure!(C, r.is_err(), "beat of \"\" gave {r:?}");
    let r = store
        .take_over("", &unique("d"), &[String::new()], TIMEOUT_MS, 5)
        .await;
    ensure!(C, r.is_err(), "take_over by \"\" gave {r:?}");
    let r = store.touch_sessions("", &[unique("s")]).await;
    ensure!(C, r.is_err(), "touch_sessions by \"\" gave {r:?}");
    let r = store
        .claim(&Poll {
            node_id: String::new(),
            session: "s".into(),
            tokens: vec!["t".into()],
            worker_id: "w".into(),
            tasks: vec!["t".into()],
        })
        .await;
    ensure!(C, r.is_err(), "claim by \"\" gave {r:?}");
    let r = store.reclaim("", "", TIMEOUT_MS, 5).await;
    ensure!(C, r.is_err(), "reclaim by \"\" gave {r:?}");
    Ok(())
}

/// After every member has created, finished and taken over executions
/// (each adding to counts of its own), the executions per status still
/// equal the rows stored.
pub async fn the_counts_per_status_add_up_over_the_members<S: Storage + Store>(
    store: &S,
) -> Result<(), Violation> {
    const C: &str = "the_counts_per_status_add_up_over_the_members";
    let counts = counts_by_status(C, store).await?;
    let rows = statuses_of_the_rows(C, store).await?;
    if counts != rows {
        return Err(fail(C, format!("counts {counts:?}, rows {rows:?}")));
    }
    Ok(())
}
