//! The storage conformance suite: every [`Storage`] implementation (SQLite,
//! the simulation's store, PostgreSQL) must pass [`run`]. It uses fresh
//! execution ids on every call, so it can run against a store that already
//! holds data.

use super::{Append, ExecutionRow, Fence, ListFilter, QueueOp, Storage, StorageError, Transaction};
use super::{DefinitionRecord, IdempotencyRecord};
use crate::history::{Event, EventKind};
use serde_json::json;
use std::sync::atomic::{AtomicU64, Ordering};

/// A failed conformance check: which one and why.
#[derive(Debug, thiserror::Error)]
#[error("storage contract `{check}` failed: {detail}")]
pub struct Violation {
    /// The check's name.
    pub check: &'static str,
    /// What was wrong.
    pub detail: String,
}

pub(crate) fn fail(check: &'static str, detail: impl Into<String>) -> Violation {
    Violation {
        check,
        detail: detail.into(),
    }
}

macro_rules! ensure {
    ($check:expr, $cond:expr, $($fmt:tt)+) => {
        if !$cond {
            return Err(fail($check, format!($($fmt)+)));
        }
    };
}

pub(crate) fn io(check: &'static str) -> impl Fn(StorageError) -> Violation {
    move |e| fail(check, format!("unexpected storage error: {e}"))
}

/// A projection row for `id` with `status` after `last_seq` events.
pub fn row(id: &str, status: &str, last_seq: u64) -> ExecutionRow {
    ExecutionRow {
        id: id.to_owned(),
        workflow: "Contract".to_owned(),
        version: "1.0.0".to_owned(),
        definition_hash: "h".to_owned(),
        status: status.to_owned(),
        parent: None,
        input: json!({"n": 1}).into(),
        output: None,
        error: None,
        created_at: 1_001,
        updated_at: 1_000 + last_seq,
        last_seq,
    }
}

/// Events `first..=last` of a plain execution.
pub fn events(first: u64, last: u64) -> Vec<Event> {
    (first..=last)
        .map(|seq| Event {
            seq,
            at: 1_000 + seq,
            kind: if seq == 1 {
                EventKind::WorkflowCreated {
                    workflow: "Contract".to_owned(),
                    version: "1.0.0".to_owned(),
                    definition_hash: "h".to_owned(),
                    input: json!({"n": 1}),
                    parent: None,
                    traceparent: None,
                }
            } else {
                EventKind::SignalReceived {
                    name: "s".to_owned(),
                    payload: json!(seq),
                }
            },
        })
        .collect()
}

/// An append of events `after_seq+1..=last` with a `running` projection,
/// from a writer that believes the row `running` (when there is one).
pub fn append(id: &str, after_seq: u64, last: u64) -> Append {
    Append {
        execution_id: id.to_owned(),
        after_seq,
        after_status: (after_seq > 0).then(|| "running".to_owned()),
        fence: None,
        events: events(after_seq + 1, last).into(),
        projection: row(id, "running", last),
    }
}

/// The fence of a writer: `node` at `epoch`.
fn fence(node: &str, epoch: u64) -> Option<Fence> {
    Some(Fence {
        node_id: node.to_owned(),
        epoch,
    })
}

fn tx(appends: Vec<Append>) -> Transaction {
    Transaction {
        appends,
        ..Transaction::default()
    }
}

/// A fresh id: `prefix` and a process-wide counter, so one process may run
/// the suite many times against one store (each test gets a fresh store, so
/// ids from other processes never meet these).
fn unique(prefix: &str) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    format!("{prefix}-{}", NEXT.fetch_add(1, Ordering::Relaxed))
}

/// Runs every check against `store`.
pub async fn run(store: &dyn Storage) -> Result<(), Violation> {
    atomic_batch_applies_everything(store).await?;
    seq_is_contiguous_across_appends(store).await?;
    stale_seq_is_a_conflict_and_applies_nothing(store).await?;
    gap_in_seq_is_a_conflict(store).await?;
    fenced_epoch_is_a_conflict(store).await?;
    two_appends_for_one_execution_are_a_conflict(store).await?;
    an_epoch_mismatch_fences_only_that_execution(store).await?;
    idempotency_records_are_written_with_their_effect(store).await?;
    reads_return_exactly_what_was_committed(store).await?;
    list_is_newest_first_with_cursor(store).await?;
    a_large_group_commit_is_stored_whole(store).await?;
    counts_per_status_follow_the_rows(store).await?;
    a_conflict_last_undoes_every_append_before_it(store).await?;
    the_input_survives_later_appends(store).await?;
    a_status_change_does_not_depend_on_the_writers_belief(store).await?;
    Ok(())
}

/// A batch with appends for two executions, a definition, an idempotency
/// record and a queue row is readable in full after the commit.
pub async fn atomic_batch_applies_everything(store: &dyn Storage) -> Result<(), Violation> {
    const C: &str = "atomic_batch_applies_everything";
    let a = unique("atomic-a");
    let b = unique("atomic-b");
    let def_name = unique("Def");
    let scope = unique("scope");
    let mut t = tx(vec![append(&a, 0, 3), append(&b, 0, 1)]);
    t.definitions.push(DefinitionRecord {
        name: def_name.clone(),
        version: "1.0.0".to_owned(),
        hash: "abc".to_owned(),
        kind: "workflow".to_owned(),
        filename: "x.orbit".to_owned(),
        source: "workflow X".to_owned(),
        body: json!({"name": def_name}),
        registered_at: 5,
    });
    t.idempotency.push(IdempotencyRecord {
        scope: scope.clone(),
        key: "k1".to_owned(),
        fingerprint: "f".to_owned(),
        status: 201,
        body: "{}".to_owned(),
        expires_at: u64::MAX / 4,
    });
    t.queue.push(QueueOp::Enqueue {
        execution_id: a.clone(),
        unit: "work".to_owned(),
        task: "demo.work".to_owned(),
        enqueued_at: 7,
        body: json!({"step_id": "work"}),
    });
    store.commit(&t).await.map_err(io(C))?;
    let ha = store.history(&a, 0, 100).await.map_err(io(C))?;
    ensure!(C, ha == events(1, 3), "history of {a}: {ha:?}");
    let hb = store.history(&b, 0, 100).await.map_err(io(C))?;
    ensure!(C, hb.len() == 1, "history of {b}: {hb:?}");
    let defs = store.load_definitions().await.map_err(io(C))?;
    ensure!(
        C,
        defs.iter().any(|d| d.name == def_name),
        "definition missing"
    );
    let rec = store.idempotency(&scope, "k1", 10).await.map_err(io(C))?;
    ensure!(C, rec.is_some(), "idempotency record missing");
    let q = store.queue().await.map_err(io(C))?;
    ensure!(
        C,
        q.iter()
            .any(|op| matches!(op, QueueOp::Enqueue { execution_id, .. } if execution_id == &a)),
        "queue row missing"
    );
    let mut t = tx(vec![]);
    t.queue.push(QueueOp::Remove {
        execution_id: a.clone(),
        unit: "work".to_owned(),
    });
    store.commit(&t).await.map_err(io(C))?;
    let q = store.queue().await.map_err(io(C))?;
    ensure!(
        C,
        !q.iter()
            .any(|op| matches!(op, QueueOp::Enqueue { execution_id, .. } if execution_id == &a)),
        "queue row not removed"
    );
    Ok(())
}

/// Appends continue the sequence; `last_seq` follows.
pub async fn seq_is_contiguous_across_appends(store: &dyn Storage) -> Result<(), Violation> {
    const C: &str = "seq_is_contiguous_across_appends";
    let a = unique("contig");
    store
        .commit(&tx(vec![append(&a, 0, 2)]))
        .await
        .map_err(io(C))?;
    store
        .commit(&tx(vec![append(&a, 2, 5)]))
        .await
        .map_err(io(C))?;
    let h = store.history(&a, 0, 100).await.map_err(io(C))?;
    let seqs: Vec<u64> = h.iter().map(|e| e.seq).collect();
    ensure!(C, seqs == vec![1, 2, 3, 4, 5], "seqs {seqs:?}");
    let after = store.history(&a, 3, 100).await.map_err(io(C))?;
    ensure!(
        C,
        after.len() == 2 && after[0].seq == 4,
        "after_seq=3 gave {after:?}"
    );
    let r = store.execution(&a).await.map_err(io(C))?;
    ensure!(C, r.map(|r| r.last_seq) == Some(5), "last_seq not 5");
    Ok(())
}

/// An append with a stale expected seq fails with `Conflict` naming it, and
/// the other appends of the same batch are not applied either.
pub async fn stale_seq_is_a_conflict_and_applies_nothing(
    store: &dyn Storage,
) -> Result<(), Violation> {
    const C: &str = "stale_seq_is_a_conflict_and_applies_nothing";
    let a = unique("stale");
    let b = unique("innocent");
    store
        .commit(&tx(vec![append(&a, 0, 3)]))
        .await
        .map_err(io(C))?;
    let result = store
        .commit(&tx(vec![append(&b, 0, 2), append(&a, 1, 2)]))
        .await;
    match result {
        Err(StorageError::Conflict { stale, fenced }) => {
            ensure!(
                C,
                stale == vec![a.clone()] && fenced.is_empty(),
                "conflict named {stale:?} / {fenced:?}"
            );
        }
        other => return Err(fail(C, format!("expected Conflict, got {other:?}"))),
    }
    ensure!(
        C,
        store.execution(&b).await.map_err(io(C))?.is_none(),
        "innocent append was applied"
    );
    ensure!(
        C,
        store.history(&b, 0, 100).await.map_err(io(C))?.is_empty(),
        "innocent events were applied"
    );
    let h = store.history(&a, 0, 100).await.map_err(io(C))?;
    ensure!(C, h == events(1, 3), "stale execution changed: {h:?}");
    // A new execution whose id already exists is stale too.
    let again = store.commit(&tx(vec![append(&a, 0, 1)])).await;
    ensure!(
        C,
        matches!(again, Err(StorageError::Conflict { .. })),
        "re-create gave {again:?}"
    );
    Ok(())
}

/// Events that do not continue from `after_seq + 1` are refused.
pub async fn gap_in_seq_is_a_conflict(store: &dyn Storage) -> Result<(), Violation> {
    const C: &str = "gap_in_seq_is_a_conflict";
    let a = unique("gap");
    store
        .commit(&tx(vec![append(&a, 0, 1)]))
        .await
        .map_err(io(C))?;
    let mut bad = append(&a, 1, 3);
    bad.events = bad.events[1..].into();
    let r = store.commit(&tx(vec![bad])).await;
    ensure!(
        C,
        matches!(r, Err(StorageError::Conflict { .. })),
        "gap gave {r:?}"
    );
    ensure!(
        C,
        store.history(&a, 0, 100).await.map_err(io(C))?.len() == 1,
        "gap applied"
    );
    Ok(())
}

/// A writer whose epoch is older than the stored owner's is fenced.
pub async fn fenced_epoch_is_a_conflict(store: &dyn Storage) -> Result<(), Violation> {
    const C: &str = "fenced_epoch_is_a_conflict";
    let a = unique("fence");
    let mut first = append(&a, 0, 1);
    first.fence = fence("n2", 2);
    store.commit(&tx(vec![first])).await.map_err(io(C))?;
    let mut stale_writer = append(&a, 1, 2);
    stale_writer.fence = fence("n1", 1);
    match store.commit(&tx(vec![stale_writer])).await {
        Err(StorageError::Conflict { fenced, .. }) => {
            ensure!(C, fenced == vec![a.clone()], "fenced named {fenced:?}");
        }
        other => return Err(fail(C, format!("expected fenced Conflict, got {other:?}"))),
    }
    let mut owner = append(&a, 1, 2);
    owner.fence = fence("n2", 2);
    store.commit(&tx(vec![owner])).await.map_err(io(C))?;
    let mut takeover = append(&a, 2, 3);
    takeover.fence = fence("n1", 3);
    store.commit(&tx(vec![takeover])).await.map_err(io(C))?;
    ensure!(
        C,
        store.history(&a, 0, 100).await.map_err(io(C))?.len() == 3,
        "owner writes lost"
    );
    Ok(())
}

/// One transaction holds at most one append per execution: a second one —
/// even one that would continue the first — is a `Conflict` naming the
/// execution as stale, and nothing of the transaction is written.
pub async fn two_appends_for_one_execution_are_a_conflict(
    store: &dyn Storage,
) -> Result<(), Violation> {
    const C: &str = "two_appends_for_one_execution_are_a_conflict";
    let a = unique("twice");
    let b = unique("twice-innocent");
    store
        .commit(&tx(vec![append(&a, 0, 1)]))
        .await
        .map_err(io(C))?;
    let twice = tx(vec![append(&b, 0, 1), append(&a, 1, 2), append(&a, 2, 3)]);
    match store.commit(&twice).await {
        Err(StorageError::Conflict { fenced, stale }) => {
            ensure!(
                C,
                stale == vec![a.clone()] && fenced.is_empty(),
                "conflict named stale {stale:?}, fenced {fenced:?}"
            );
        }
        other => return Err(fail(C, format!("expected Conflict, got {other:?}"))),
    }
    let h = store.history(&a, 0, 100).await.map_err(io(C))?;
    ensure!(C, h == events(1, 1), "{a} changed: {h:?}");
    ensure!(
        C,
        store.execution(&b).await.map_err(io(C))?.is_none(),
        "innocent append was applied"
    );
    // The same two appends for a new execution, both from seq 0.
    let c = unique("twice-new");
    let r = store
        .commit(&tx(vec![append(&c, 0, 1), append(&c, 0, 2)]))
        .await;
    ensure!(
        C,
        matches!(&r, Err(StorageError::Conflict { stale, .. }) if stale == &vec![c.clone()]),
        "two creations gave {r:?}"
    );
    ensure!(
        C,
        store.execution(&c).await.map_err(io(C))?.is_none(),
        "a doubly created execution was stored"
    );
    Ok(())
}

/// An append whose fence does not match the row (the same epoch but
/// another node, or an older epoch of the same node) is a `Conflict`
/// naming that execution as fenced — not stale, even when its `seq` is
/// wrong too — and the transaction's other appends are not written.
pub async fn an_epoch_mismatch_fences_only_that_execution(
    store: &dyn Storage,
) -> Result<(), Violation> {
    const C: &str = "an_epoch_mismatch_fences_only_that_execution";
    let owned = unique("owned");
    let other = unique("bystander");
    let mut first = append(&owned, 0, 1);
    first.fence = fence("n1", 4);
    store.commit(&tx(vec![first])).await.map_err(io(C))?;
    for (node, epoch, after) in [("n2", 4, 1), ("n1", 3, 1), ("n2", 4, 0)] {
        let mut intruder = append(&owned, after, after + 1);
        intruder.fence = fence(node, epoch);
        let r = store
            .commit(&tx(vec![append(&other, 0, 1), intruder]))
            .await;
        match r {
            Err(StorageError::Conflict { fenced, stale }) => ensure!(
                C,
                fenced == vec![owned.clone()] && stale.is_empty(),
                "({node}, {epoch}) named fenced {fenced:?}, stale {stale:?}"
            ),
            other => {
                return Err(fail(
                    C,
                    format!("({node}, {epoch}) expected a fenced Conflict, got {other:?}"),
                ))
            }
        }
        ensure!(
            C,
            store.execution(&other).await.map_err(io(C))?.is_none(),
            "the bystander was written beside a fenced append"
        );
    }
    let mut owner = append(&owned, 1, 2);
    owner.fence = fence("n1", 4);
    store.commit(&tx(vec![owner])).await.map_err(io(C))?;
    ensure!(
        C,
        store.history(&owned, 0, 100).await.map_err(io(C))?.len() == 2,
        "the owner's write was lost"
    );
    Ok(())
}

/// An idempotency record is written in the same transaction as the effect
/// it guards: a refused transaction stores neither, a committed one both;
/// expired records are not read back.
pub async fn idempotency_records_are_written_with_their_effect(
    store: &dyn Storage,
) -> Result<(), Violation> {
    const C: &str = "idempotency_records_are_written_with_their_effect";
    let a = unique("idem");
    let scope = unique("idem-scope");
    let record = |key: &str, expires_at: u64| IdempotencyRecord {
        scope: scope.clone(),
        key: key.to_owned(),
        fingerprint: "fp".to_owned(),
        status: 201,
        body: format!("{{\"execution_id\":\"{a}\"}}"),
        expires_at,
    };
    store
        .commit(&tx(vec![append(&a, 0, 2)]))
        .await
        .map_err(io(C))?;
    let mut refused = tx(vec![append(&a, 1, 2)]);
    refused.idempotency.push(record("lost", 10_000));
    let r = store.commit(&refused).await;
    ensure!(
        C,
        matches!(r, Err(StorageError::Conflict { .. })),
        "stale append gave {r:?}"
    );
    ensure!(
        C,
        store
            .idempotency(&scope, "lost", 5_000)
            .await
            .map_err(io(C))?
            .is_none(),
        "a record was stored without its effect"
    );
    let mut kept = tx(vec![append(&a, 2, 3)]);
    kept.idempotency.push(record("kept", 10_000));
    kept.idempotency.push(record("old", 4_000));
    store.commit(&kept).await.map_err(io(C))?;
    let got = store
        .idempotency(&scope, "kept", 5_000)
        .await
        .map_err(io(C))?;
    ensure!(
        C,
        got == Some(record("kept", 10_000)),
        "record read back as {got:?}"
    );
    ensure!(
        C,
        store.history(&a, 0, 100).await.map_err(io(C))?.len() == 3,
        "the effect of the record is missing"
    );
    ensure!(
        C,
        store
            .idempotency(&scope, "old", 5_000)
            .await
            .map_err(io(C))?
            .is_none(),
        "an expired record was read"
    );
    let live = store.idempotency_records(5_000).await.map_err(io(C))?;
    let mine: Vec<&str> = live
        .iter()
        .filter(|r| r.scope == scope)
        .map(|r| r.key.as_str())
        .collect();
    ensure!(C, mine == vec!["kept"], "live records {mine:?}");
    Ok(())
}

/// Recovery reads (load_active, load_execution) give back exactly the
/// committed events and projection; terminal executions are not active.
pub async fn reads_return_exactly_what_was_committed(store: &dyn Storage) -> Result<(), Violation> {
    const C: &str = "reads_return_exactly_what_was_committed";
    let live = unique("live");
    let done = unique("done");
    store
        .commit(&tx(vec![append(&live, 0, 4), append(&done, 0, 2)]))
        .await
        .map_err(io(C))?;
    let mut finish = append(&done, 2, 3);
    finish.projection = row(&done, "completed", 3);
    finish.projection.output = Some(json!({"ok": true}));
    store.commit(&tx(vec![finish])).await.map_err(io(C))?;
    let active = store.load_active().await.map_err(io(C))?;
    let mine: Vec<_> = active
        .iter()
        .filter(|e| e.row.id == live || e.row.id == done)
        .collect();
    ensure!(
        C,
        mine.len() == 1 && mine[0].row.id == live,
        "active: {:?}",
        mine.iter().map(|e| &e.row.id).collect::<Vec<_>>()
    );
    ensure!(C, mine[0].events == events(1, 4), "events differ");
    ensure!(
        C,
        mine[0].row == row(&live, "running", 4),
        "row differs: {:?}",
        mine[0].row
    );
    let d = store.load_execution(&done).await.map_err(io(C))?;
    let Some(d) = d else {
        return Err(fail(C, "terminal execution missing"));
    };
    ensure!(
        C,
        d.row.status == "completed" && d.row.output == Some(json!({"ok": true})),
        "row {:?}",
        d.row
    );
    ensure!(C, d.events == events(1, 3), "events differ");
    ensure!(
        C,
        store
            .load_execution(&unique("none"))
            .await
            .map_err(io(C))?
            .is_none(),
        "phantom execution"
    );
    Ok(())
}

/// Listing is newest first, filters by status/workflow and pages with a
/// `(created_at, id)` cursor.
pub async fn list_is_newest_first_with_cursor(store: &dyn Storage) -> Result<(), Violation> {
    const C: &str = "list_is_newest_first_with_cursor";
    let workflow = unique("ListWf");
    let ids: Vec<String> = (0..3).map(|i| format!("{}-{i}", unique("list"))).collect();
    for (i, id) in ids.iter().enumerate() {
        let mut a = append(id, 0, 1);
        a.projection.workflow = workflow.clone();
        a.projection.created_at = 10 + i as u64;
        store.commit(&tx(vec![a])).await.map_err(io(C))?;
    }
    let filter = ListFilter {
        workflow: Some(workflow.clone()),
        limit: 2,
        ..ListFilter::default()
    };
    let page = store.list_executions(&filter).await.map_err(io(C))?;
    let got: Vec<&str> = page.iter().map(|r| r.id.as_str()).collect();
    ensure!(
        C,
        got == vec![ids[2].as_str(), ids[1].as_str()],
        "page 1: {got:?}"
    );
    let last = &page[1];
    let next = ListFilter {
        before: Some((last.created_at, last.id.clone())),
        ..filter.clone()
    };
    let page2 = store.list_executions(&next).await.map_err(io(C))?;
    let got: Vec<&str> = page2.iter().map(|r| r.id.as_str()).collect();
    ensure!(C, got == vec![ids[0].as_str()], "page 2: {got:?}");
    let none = ListFilter {
        status: Some("failed".to_owned()),
        ..filter
    };
    ensure!(
        C,
        store
            .list_executions(&none)
            .await
            .map_err(io(C))?
            .is_empty(),
        "status filter ignored"
    );
    Ok(())
}

/// A group commit of the size a busy server writes (hundreds of executions,
/// about a thousand events) is stored whole: every event and every
/// projection.
pub async fn a_large_group_commit_is_stored_whole(store: &dyn Storage) -> Result<(), Violation> {
    const C: &str = "a_large_group_commit_is_stored_whole";
    let last = |i: usize| 1 + (i as u64 % 6);
    let ids: Vec<String> = (0..301).map(|i| unique(&format!("group-{i}"))).collect();
    let appends = ids
        .iter()
        .enumerate()
        .map(|(i, id)| append(id, 0, last(i)))
        .collect();
    store.commit(&tx(appends)).await.map_err(io(C))?;
    for (i, id) in ids.iter().enumerate() {
        let stored = store.load_execution(id).await.map_err(io(C))?;
        let Some(stored) = stored else {
            return Err(fail(C, format!("{id} missing")));
        };
        ensure!(
            C,
            stored.events == events(1, last(i)),
            "{id}: events differ"
        );
        ensure!(
            C,
            stored.row == row(id, "running", last(i)),
            "{id}: row {:?}",
            stored.row
        );
    }
    Ok(())
}

/// Executions per status (`count_by_status`) move with every commit —
/// new executions, status changes, a refused transaction that changes
/// nothing — and with retention, and always equal the rows stored.
pub async fn counts_per_status_follow_the_rows(store: &dyn Storage) -> Result<(), Violation> {
    const C: &str = "counts_per_status_follow_the_rows";
    let counts = |store| counts_by_status(C, store);
    let tally = |store| statuses_of_the_rows(C, store);
    fn with_status(mut a: Append, status: &str) -> Append {
        a.projection.status = status.to_owned();
        a
    }
    let before = counts(store).await?;
    ensure!(
        C,
        before == tally(store).await?,
        "counts {before:?} are not the rows'"
    );
    let (a, b, c) = (unique("count-a"), unique("count-b"), unique("count-c"));
    store
        .commit(&tx(vec![append(&a, 0, 2), append(&b, 0, 2)]))
        .await
        .map_err(io(C))?;
    store
        .commit(&tx(vec![
            with_status(append(&a, 2, 3), "completed"),
            with_status(append(&b, 2, 3), "failed"),
            with_status(append(&c, 0, 1), "pending"),
        ]))
        .await
        .map_err(io(C))?;
    // Refused (stale): changes no count.
    let refused = store
        .commit(&tx(vec![with_status(append(&a, 1, 4), "cancelled")]))
        .await;
    ensure!(
        C,
        matches!(refused, Err(StorageError::Conflict { .. })),
        "a stale append was not refused: {refused:?}"
    );
    let mut expected = before.clone();
    for status in ["completed", "failed", "pending"] {
        *expected.entry(status.to_owned()).or_default() += 1;
    }
    let after = counts(store).await?;
    ensure!(
        C,
        after == expected,
        "counts {after:?}, expected {expected:?}"
    );
    ensure!(
        C,
        after == tally(store).await?,
        "counts {after:?} are not the rows'"
    );
    // Retention takes what it deletes off the counts.
    let purged = store
        .purge_finished(u64::MAX / 4, 10_000)
        .await
        .map_err(io(C))?;
    let left = counts(store).await?;
    ensure!(
        C,
        left == tally(store).await?,
        "after purging {purged:?}: counts {left:?} are not the rows'"
    );
    Ok(())
}

/// A transaction whose last append is refused writes none of the appends
/// before it, whatever they were: a new execution, a row keeping its
/// status, a row changing it, a takeover by a newer epoch. Rows, histories
/// and counts stay as they were; the same appends without the refused one
/// then commit.
pub async fn a_conflict_last_undoes_every_append_before_it(
    store: &dyn Storage,
) -> Result<(), Violation> {
    const C: &str = "a_conflict_last_undoes_every_append_before_it";
    let (keeps, changes, taken, stale, new) = (
        unique("undo-keeps"),
        unique("undo-changes"),
        unique("undo-taken"),
        unique("undo-stale"),
        unique("undo-new"),
    );
    let mut owned = append(&taken, 0, 1);
    owned.fence = fence("n1", 1);
    store
        .commit(&tx(vec![
            append(&keeps, 0, 1),
            append(&changes, 0, 1),
            owned,
            append(&stale, 0, 2),
        ]))
        .await
        .map_err(io(C))?;
    let counts_before = counts_by_status(C, store).await?;
    let mut completed = append(&changes, 1, 2);
    completed.projection.status = "completed".to_owned();
    completed.projection.output = Some(json!({"done": true}));
    let mut takeover = append(&taken, 1, 2);
    takeover.fence = fence("n2", 2);
    let fine = || {
        vec![
            append(&new, 0, 1),
            append(&keeps, 1, 2),
            completed.clone(),
            takeover.clone(),
        ]
    };
    let mut refused = fine();
    refused.push(append(&stale, 1, 3));
    match store.commit(&tx(refused)).await {
        Err(StorageError::Conflict {
            fenced,
            stale: named,
        }) => ensure!(
            C,
            named == vec![stale.clone()] && fenced.is_empty(),
            "conflict named stale {named:?}, fenced {fenced:?}"
        ),
        other => return Err(fail(C, format!("expected Conflict, got {other:?}"))),
    }
    ensure!(
        C,
        store.execution(&new).await.map_err(io(C))?.is_none(),
        "the new execution was written"
    );
    for id in [&keeps, &changes, &taken] {
        let h = store.history(id, 0, 100).await.map_err(io(C))?;
        ensure!(C, h == events(1, 1), "{id} got events: {h:?}");
        let row = store.execution(id).await.map_err(io(C))?;
        ensure!(
            C,
            row.as_ref()
                .is_some_and(|r| r.last_seq == 1 && r.status == "running" && r.output.is_none()),
            "{id} changed: {row:?}"
        );
    }
    let counts_after = counts_by_status(C, store).await?;
    ensure!(
        C,
        counts_after == counts_before,
        "counts moved from {counts_before:?} to {counts_after:?}"
    );
    store.commit(&tx(fine())).await.map_err(io(C))?;
    let done = store.execution(&changes).await.map_err(io(C))?;
    ensure!(
        C,
        done.as_ref()
            .is_some_and(|r| r.status == "completed" && r.last_seq == 2),
        "the status change was not written: {done:?}"
    );
    for id in [&new, &keeps, &taken] {
        let row = store.execution(id).await.map_err(io(C))?;
        ensure!(
            C,
            row.as_ref()
                .is_some_and(|r| r.last_seq == if id == &new { 1 } else { 2 }),
            "{id} after the commit: {row:?}"
        );
    }
    // The old owner is fenced out now.
    let mut late = append(&taken, 2, 3);
    late.fence = fence("n1", 1);
    let r = store.commit(&tx(vec![late])).await;
    ensure!(
        C,
        matches!(&r, Err(StorageError::Conflict { fenced, .. }) if fenced == &vec![taken.clone()]),
        "the old owner after a takeover: {r:?}"
    );
    // One more running (the new execution), one fewer (the completed one).
    let mut expected = counts_before;
    *expected.entry("completed".to_owned()).or_default() += 1;
    let counts_end = counts_by_status(C, store).await?;
    ensure!(
        C,
        counts_end == expected,
        "counts {counts_end:?}, expected {expected:?}"
    );
    Ok(())
}

/// `count_by_status` as a map.
pub(crate) async fn counts_by_status(
    check: &'static str,
    store: &dyn Storage,
) -> Result<std::collections::BTreeMap<String, u64>, Violation> {
    Ok(store
        .count_by_status()
        .await
        .map_err(io(check))?
        .into_iter()
        .collect())
}

/// The executions per status, counted from every row stored.
pub(crate) async fn statuses_of_the_rows(
    check: &'static str,
    store: &dyn Storage,
) -> Result<std::collections::BTreeMap<String, u64>, Violation> {
    let mut t = std::collections::BTreeMap::new();
    for e in store.load_all().await.map_err(io(check))? {
        *t.entry(e.row.status).or_default() += 1;
    }
    Ok(t)
}

/// An execution's input is stored with its first append and read back
/// unchanged after later ones, a status change among them (stores may
/// write it only with the new row).
pub async fn the_input_survives_later_appends(store: &dyn Storage) -> Result<(), Violation> {
    const C: &str = "the_input_survives_later_appends";
    let id = unique("input");
    let input: std::sync::Arc<serde_json::Value> =
        json!({"n": 7, "items": ["a", "b"], "note": "x".repeat(2_000)}).into();
    let with_input = |mut a: Append| {
        a.projection.input = input.clone();
        a
    };
    store
        .commit(&tx(vec![with_input(append(&id, 0, 2))]))
        .await
        .map_err(io(C))?;
    store
        .commit(&tx(vec![with_input(append(&id, 2, 4))]))
        .await
        .map_err(io(C))?;
    let mut finish = with_input(append(&id, 4, 5));
    finish.projection.status = "completed".to_owned();
    store.commit(&tx(vec![finish])).await.map_err(io(C))?;
    let stored = store.load_execution(&id).await.map_err(io(C))?;
    let Some(stored) = stored else {
        return Err(fail(C, "execution missing"));
    };
    ensure!(
        C,
        stored.row.input == input && stored.row.status == "completed" && stored.row.last_seq == 5,
        "row {:?}",
        stored.row
    );
    Ok(())
}

/// An append's `after_status` is a hint: a status change is written and
/// counted the same whether the writer's belief about the stored status
/// was right, wrong or absent, a row keeping its status too; and a stale or
/// fenced-out writer is refused even when its belief is right.
pub async fn a_status_change_does_not_depend_on_the_writers_belief(
    store: &dyn Storage,
) -> Result<(), Violation> {
    const C: &str = "a_status_change_does_not_depend_on_the_writers_belief";
    let finishing = |id: &str, status: &str, belief: Option<&str>| {
        let mut a = append(id, 2, 3);
        a.projection.status = status.to_owned();
        a.after_status = belief.map(str::to_owned);
        a
    };
    let ids = ["right", "wrong", "none", "keeps", "stale", "fenced"]
        .map(|belief| unique(&format!("belief-{belief}")));
    let [right, wrong, none, keeps, stale, fenced] = &ids;
    let created = ids
        .iter()
        .map(|id| {
            let mut a = append(id, 0, 2);
            if id == fenced {
                a.fence = fence("n2", 2);
            }
            a
        })
        .collect();
    store.commit(&tx(created)).await.map_err(io(C))?;
    let before = counts_by_status(C, store).await?;
    store
        .commit(&tx(vec![
            finishing(right, "completed", Some("running")),
            finishing(wrong, "failed", Some("pending")),
            finishing(none, "completed", None),
            finishing(keeps, "running", Some("compensating")),
        ]))
        .await
        .map_err(io(C))?;
    let mut stale_writer = finishing(stale, "completed", Some("running"));
    stale_writer.after_seq = 1;
    stale_writer.events = events(2, 3).into();
    let mut ahead_writer = finishing(stale, "completed", Some("running"));
    ahead_writer.after_seq = 3;
    ahead_writer.events = events(4, 4).into();
    for (writer, who) in [
        (stale_writer, "a stale writer with the right belief"),
        (
            ahead_writer,
            "a writer claiming events the store does not hold",
        ),
    ] {
        let refused = store.commit(&tx(vec![writer])).await;
        ensure!(
            C,
            matches!(&refused, Err(StorageError::Conflict { stale, .. }) if !stale.is_empty()),
            "{who} was not refused: {refused:?}"
        );
    }
    let mut fenced_writer = finishing(fenced, "completed", Some("running"));
    fenced_writer.fence = fence("n1", 1);
    let refused = store.commit(&tx(vec![fenced_writer])).await;
    ensure!(
        C,
        matches!(&refused, Err(StorageError::Conflict { fenced, .. }) if !fenced.is_empty()),
        "a fenced-out writer with the right belief was not refused: {refused:?}"
    );
    let expected_rows = [
        (right, "completed", 3),
        (wrong, "failed", 3),
        (none, "completed", 3),
        (keeps, "running", 3),
        (stale, "running", 2),
        (fenced, "running", 2),
    ];
    for (id, status, last_seq) in expected_rows {
        let row = store.execution(id).await.map_err(io(C))?;
        ensure!(
            C,
            row.as_ref()
                .is_some_and(|r| r.status == status && r.last_seq == last_seq),
            "{id}: expected {status} at {last_seq}, got {row:?}"
        );
    }
    let mut expected = before;
    *expected.entry("running".to_owned()).or_default() -= 3;
    *expected.entry("completed".to_owned()).or_default() += 2;
    *expected.entry("failed".to_owned()).or_default() += 1;
    expected.retain(|_, n| *n > 0);
    let mut after = counts_by_status(C, store).await?;
    after.retain(|_, n| *n > 0);
    ensure!(
        C,
        after == expected,
        "counts {after:?}, expected {expected:?}"
    );
    let mut rows = statuses_of_the_rows(C, store).await?;
    rows.retain(|_, n| *n > 0);
    ensure!(
        C,
        after == rows,
        "counts {after:?} are not the rows' {rows:?}"
    );
    Ok(())
}
