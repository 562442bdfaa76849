//! Teeth: deliberately broken variants of the layer around the engine, and
//! proof that the simulator catches each within a bounded number of seeds
//! (`SEEDS_MAX`). A simulator that cannot fail is worthless.
#![allow(clippy::unwrap_used)]

use orbit_io_sim::check::Invariant;
use orbit_io_sim::store::StoreBug;
use orbit_io_sim::{Bugs, Scenario};
use orbit_sim_tests::first_catch;

/// Every planted bug must be caught within this many seeds.
const SEEDS_MAX: u64 = 20;

fn caught(scenario: Scenario, bugs: Bugs, expected: &[Invariant]) {
    let Some((seed, report)) = first_catch(scenario, bugs, SEEDS_MAX) else {
        panic!("{bugs:?} not caught in {SEEDS_MAX} seeds of {scenario}");
    };
    let got = report.outcome.violation().map(|v| v.invariant);
    eprintln!("{bugs:?}: caught at seed {seed:#x} of {scenario} as {got:?}");
    assert!(
        got.is_some_and(|g| expected.contains(&g)),
        "{bugs:?} caught at seed {seed:#x} as {got:?}, expected one of {expected:?}:\n{report}"
    );
}

#[test]
fn a_store_that_loses_a_committed_transaction_on_crash_is_caught() {
    caught(
        Scenario::CrashStorm,
        Bugs {
            store: StoreBug::LoseLastCommitOnCrash,
            ..Bugs::default()
        },
        &[
            Invariant::NoLostCommits,
            Invariant::Determinism,
            Invariant::OneWriter,
        ],
    );
}

#[test]
fn acknowledging_a_result_before_its_commit_is_caught() {
    caught(
        Scenario::StorageFaults,
        Bugs {
            ack_before_commit: true,
            ..Bugs::default()
        },
        &[Invariant::NoLostCommits],
    );
}

#[test]
fn deriving_the_key_from_the_attempt_number_is_caught() {
    caught(
        Scenario::CancelCompensation,
        Bugs {
            key_from_attempt: true,
            ..Bugs::default()
        },
        &[Invariant::StableKeys],
    );
}

#[test]
fn telling_the_engine_a_failed_commit_succeeded_is_caught() {
    caught(
        Scenario::StorageFaults,
        Bugs {
            ignore_commit_failures: true,
            ..Bugs::default()
        },
        &[
            Invariant::NoLostCommits,
            Invariant::Determinism,
            Invariant::OneWriter,
        ],
    );
}

#[test]
fn a_driver_that_never_answers_reloads_is_caught() {
    caught(
        Scenario::StorageFaults,
        Bugs {
            drop_reloads: true,
            ..Bugs::default()
        },
        // The executions stuck in their reload are also unreadable.
        &[Invariant::Liveness, Invariant::NoLostCommits],
    );
}

#[test]
fn a_panic_is_reported_as_a_crash_with_its_own_exit_code() {
    let report = orbit_io_sim::run_with(
        orbit_io_sim::SimConfig::sample(1, Scenario::SteadyLoad),
        orbit_io_sim::RunOptions {
            bugs: Bugs {
                panic_after_steps: Some(50),
                ..Bugs::default()
            },
            ..orbit_io_sim::RunOptions::default()
        },
    );
    assert_eq!(report.outcome.class(), "crash");
    assert_eq!(report.outcome.exit_code(), orbit_io_sim::report::EXIT_CRASH);
    assert!(report.to_string().contains("planted panic at step 50"));
    assert!(report.repro().contains("--seed 0x1 --scenario steady-load"));
}

/// Bugs planted in the engine itself (`orbit-core`'s `planted-bugs`
/// feature): each must be caught within its budget of seeds of the
/// scenario that stresses it. The budgets are about ten times the first
/// catch measured when they were set (see the simulation chapter).
fn planted(bug: orbit_io_sim::Bug, scenario: Scenario, budget: u64, expected: &[Invariant]) {
    let catch = orbit_sim_tests::first_catch_planted(scenario, bug, budget);
    caught_as(
        &format!("{bug:?}"),
        catch,
        &scenario.to_string(),
        budget,
        expected,
    );
}

/// Asserts a planted bug (`name`) was caught (`catch`: the first seed
/// that caught it, within `budget` seeds of `scenario`) by one of the
/// `expected` invariants.
fn caught_as(
    name: &str,
    catch: Option<(u64, orbit_io_sim::Report)>,
    scenario: &str,
    budget: u64,
    expected: &[Invariant],
) {
    let Some((seed, report)) = catch else {
        panic!("{name} not caught in {budget} seeds of {scenario}");
    };
    let got = report.outcome.violation().map(|v| v.invariant);
    eprintln!("{name}: caught at seed {seed:#x} of {scenario} as {got:?}");
    assert!(
        got.is_some_and(|g| expected.contains(&g)),
        "{name} caught at seed {seed:#x} as {got:?}, expected one of {expected:?}:\n{report}"
    );
}

#[test]
fn an_uncertain_attempt_treated_as_failed_is_caught() {
    use orbit_io_sim::Bug;
    planted(
        Bug::UncertainAsFailed,
        Scenario::LostWorkers,
        10,
        &[Invariant::WellFormed],
    );
}

#[test]
fn a_stale_failure_accepted_is_caught() {
    use orbit_io_sim::Bug;
    planted(
        Bug::StaleFailureAccepted,
        Scenario::LateAndDuplicate,
        10,
        &[Invariant::WellFormed],
    );
}

#[test]
fn a_second_recorded_success_is_caught() {
    use orbit_io_sim::Bug;
    planted(
        Bug::DoubleSuccess,
        Scenario::LateAndDuplicate,
        10,
        &[Invariant::OneSuccess],
    );
}

#[test]
fn a_dispatch_answered_before_its_commit_is_caught() {
    use orbit_io_sim::Bug;
    planted(
        Bug::DispatchBeforeCommit,
        Scenario::Swarm,
        20,
        &[Invariant::NoLostCommits],
    );
}

/// Not caught since issue 13: the engine no longer keeps committed
/// Idempotency-Key records and reads a key's record from the store before
/// it answers a keyed request. The storage contract says an `Ambiguous`
/// commit is over when it is answered — no later read misses it — so that
/// read always sees the truth and releasing the key early does no visible
/// harm. The simulated store decides at once; the PostgreSQL store settles
/// a lost COMMIT (`pg_xact_status`, ending its backend while it is still in
/// progress) before its next call. A world where ambiguous commits land
/// after the reload would break that contract, not model it. Run it with
/// `--ignored`.
#[test]
#[ignore = "harmless against a store that settles Ambiguous at once (see above)"]
fn an_idempotency_key_released_on_an_ambiguous_commit_is_caught() {
    use orbit_io_sim::Bug;
    planted(
        Bug::KeyReleasedOnAmbiguous,
        Scenario::IdempotentStarts,
        60,
        &[Invariant::NoLostCommits],
    );
}

#[test]
fn a_hand_out_attached_to_a_dead_session_is_caught() {
    use orbit_io_sim::Bug;
    planted(
        Bug::HandOutToDeadSession,
        Scenario::LostWorkers,
        100,
        &[Invariant::Liveness],
    );
}

#[test]
fn an_evicted_execution_that_forgets_its_timer_is_caught() {
    use orbit_io_sim::Bug;
    planted(
        Bug::EvictionLosesTimer,
        Scenario::Swarm,
        60,
        &[Invariant::Liveness],
    );
}

/// Seed budgets of the cluster teeth: about ten times the first catch
/// measured when they were set (first catches at seeds 0x1, 0x0 and 0xd;
/// of 200 release seeds they caught 17, 131 and 13 — see the simulation
/// chapter).
const BUDGET_SKIP_EPOCH: u64 = 20;
const BUDGET_OWN_CLOCK: u64 = 10;
const BUDGET_EARLY_SERVICE: u64 = 60;

/// Bugs planted in the cluster rules (`orbit_core::cluster`), run in the
/// `cluster-leader` scenario; budgets as for the engine's.
fn planted_in_cluster(bug: orbit_io_sim::ClusterBug, budget: u64, expected: &[Invariant]) {
    let catch = orbit_sim_tests::first_catch_cluster(bug, budget);
    caught_as(
        &format!("{bug:?}"),
        catch,
        "cluster-leader",
        budget,
        expected,
    );
}

#[test]
fn a_leader_write_without_the_epoch_check_is_caught() {
    planted_in_cluster(
        orbit_io_sim::ClusterBug::SkipEpochCheck,
        BUDGET_SKIP_EPOCH,
        &[Invariant::OneWriter],
    );
}

#[test]
fn a_lease_judged_by_the_node_clock_is_caught() {
    planted_in_cluster(
        orbit_io_sim::ClusterBug::LeaseByOwnClock,
        BUDGET_OWN_CLOCK,
        &[Invariant::OneWriter],
    );
}

#[test]
fn a_leader_serving_before_its_recovery_is_caught() {
    planted_in_cluster(
        orbit_io_sim::ClusterBug::ServeBeforeRecovery,
        BUDGET_EARLY_SERVICE,
        &[Invariant::NoLostCommits],
    );
}

/// A bug of the node loop rather than the engine: the batches a `Conflict`
/// did not name are answered as written instead of being written again.
/// Only group commits of several batches meet a simulated `Conflict`, so it
/// needs the storage-faults scenario's denser commit faults (first caught
/// at seed 0x32; 7 of 200 release seeds).
#[test]
fn a_conflict_split_that_forgets_the_other_batches_is_caught() {
    use orbit_io_sim::Bug;
    planted(
        Bug::SplitForgetsInnocent,
        Scenario::StorageFaults,
        300,
        &[Invariant::NoLostCommits],
    );
}

/// Seed budgets of the eviction teeth in `eviction-invisible`, about ten
/// times the first catch: of 200 release seeds, `eviction-loses-timer`
/// failed 169 (146 of them seeds that pass without it; first 0x1) and
/// `eviction-frees-admission-slot` 42 (19 beyond those; first 0x5).
const BUDGET_LOST_TIMER: u64 = 10;
const BUDGET_ADMISSION_SLOT: u64 = 60;

/// The first seed of `eviction-invisible` below `max` that fails with
/// `bug` planted and passes without it. Some seeds of the scenario part
/// without any planted bug (`KNOWN_ENGINE_BUGS` in `scenarios.rs`); a catch
/// on one of those would prove nothing.
fn first_catch_beyond_unplanted(
    bug: orbit_io_sim::Bug,
    max: u64,
) -> Option<(u64, orbit_io_sim::Report)> {
    let scenario = Scenario::EvictionInvisible;
    (0..max).find_map(|seed| {
        let cfg = orbit_io_sim::SimConfig::sample(seed, scenario);
        let planted = orbit_io_sim::run_with(
            cfg.clone(),
            orbit_io_sim::RunOptions {
                plant: vec![bug],
                ..orbit_io_sim::RunOptions::default()
            },
        );
        if planted.outcome.exit_code() == 0 {
            return None;
        }
        let clean = orbit_io_sim::run_with(cfg, orbit_io_sim::RunOptions::default());
        (clean.outcome.exit_code() == 0).then_some((seed, planted))
    })
}

/// The comparison of `eviction-invisible` (invariant 9) catches the lost
/// timer too, or liveness does in the run with eviction.
#[test]
fn an_evicted_execution_that_forgets_its_timer_is_caught_by_the_comparison() {
    let bug = orbit_io_sim::Bug::EvictionLosesTimer;
    caught_as(
        &format!("{bug:?}"),
        first_catch_beyond_unplanted(bug, BUDGET_LOST_TIMER),
        "eviction-invisible",
        BUDGET_LOST_TIMER,
        &[Invariant::EvictionInvisible, Invariant::Liveness],
    );
}

/// An evicted execution that gives up its `--max-active-executions` slot
/// lets a waiting execution start early. Every history stays legal and
/// everything finishes, so only the comparison with the run without
/// eviction sees it: the run with eviction alone passes on the seed that
/// caught it.
#[test]
fn an_evicted_execution_that_gives_up_its_admission_slot_is_caught_only_by_the_comparison() {
    use orbit_io_sim::Bug;
    let bug = Bug::EvictionFreesAdmissionSlot;
    let scenario = Scenario::EvictionInvisible;
    let catch = first_catch_beyond_unplanted(bug, BUDGET_ADMISSION_SLOT);
    let seed = catch.as_ref().map(|(seed, _)| *seed);
    caught_as(
        &format!("{bug:?}"),
        catch,
        &scenario.to_string(),
        BUDGET_ADMISSION_SLOT,
        &[Invariant::EvictionInvisible],
    );
    let seed = seed.unwrap();
    let alone = orbit_io_sim::World::new(
        orbit_io_sim::SimConfig::sample(seed, scenario),
        orbit_io_sim::RunOptions {
            plant: vec![bug],
            ..orbit_io_sim::RunOptions::default()
        },
    )
    .unwrap()
    .run();
    assert_eq!(
        alone.outcome.exit_code(),
        0,
        "seed {seed:#x}: the run with eviction alone was caught too:\n{alone}"
    );
}

/// Shared cluster mode (`cluster-shared`): the budgets of its teeth, each
/// about ten times the first catch measured when it was set. Some seeds
/// of the scenario fail without any planted bug (engine findings in
/// `regressions.rs`), so a tooth counts as caught
/// only by the invariant it breaks, which no unplanted seed has broken.
const BUDGET_SHARED_ENTRY_KEPT: u64 = 20;
const BUDGET_SHARED_KEPT_EPOCH: u64 = 100;
const BUDGET_SHARED_CLAIM_NOT_APPLIED: u64 = 20;
const BUDGET_SHARED_KEEP_CONSUMED: u64 = 20;
const BUDGET_SHARED_FENCED_WRITES: u64 = 300;

/// The first seed below `budget` of `cluster-shared` whose run with
/// `options` breaks one of `expected`.
fn first_shared_catch(
    options: &orbit_io_sim::RunOptions,
    budget: u64,
    expected: &[Invariant],
) -> Option<(u64, orbit_io_sim::Report)> {
    (0..budget).find_map(|seed| {
        let report = orbit_io_sim::run_with(
            orbit_io_sim::SimConfig::sample(seed, Scenario::ClusterShared),
            options.clone(),
        );
        let got = report.outcome.violation().map(|v| v.invariant);
        got.is_some_and(|g| expected.contains(&g))
            .then_some((seed, report))
    })
}

fn shared_caught(
    name: &str,
    options: orbit_io_sim::RunOptions,
    budget: u64,
    expected: &[Invariant],
) {
    let catch = first_shared_catch(&options, budget, expected);
    caught_as(name, catch, "cluster-shared", budget, expected);
}

/// An inbox entry applied without its deletion in the same commit stays
/// in the inbox (it is fed again and again): the inbox is not empty once
/// the cluster is quiet.
#[test]
fn shared_an_inbox_entry_applied_without_being_deleted_is_caught() {
    shared_caught(
        "InboxEntryKept",
        orbit_io_sim::RunOptions {
            plant: vec![orbit_io_sim::Bug::InboxEntryKept],
            ..orbit_io_sim::RunOptions::default()
        },
        BUDGET_SHARED_ENTRY_KEPT,
        &[Invariant::InboxOnce],
    );
}

/// A takeover that moves executions without bumping their epoch: the new
/// owner's epoch is one already in use, and two nodes append at it.
#[test]
fn shared_a_takeover_that_keeps_the_epoch_is_caught() {
    shared_caught(
        "TakeOverKeepsEpoch",
        orbit_io_sim::RunOptions {
            bugs: Bugs {
                store: StoreBug::TakeOverKeepsEpoch,
                ..Bugs::default()
            },
            ..orbit_io_sim::RunOptions::default()
        },
        BUDGET_SHARED_KEPT_EPOCH,
        &[Invariant::OneWriter],
    );
}

/// A claim answered without being applied: the task is handed out while
/// no `dispatch` entry reaches the owner.
#[test]
fn shared_a_task_handed_out_without_its_claim_committed_is_caught() {
    shared_caught(
        "ClaimNotApplied",
        orbit_io_sim::RunOptions {
            bugs: Bugs {
                store: StoreBug::ClaimNotApplied,
                ..Bugs::default()
            },
            ..orbit_io_sim::RunOptions::default()
        },
        BUDGET_SHARED_CLAIM_NOT_APPLIED,
        &[Invariant::InboxOnce],
    );
}

/// A store that keeps the inbox entries a commit consumes: each is applied
/// again, and consumed twice.
#[test]
fn shared_a_store_that_keeps_consumed_entries_is_caught() {
    shared_caught(
        "KeepConsumedEntries",
        orbit_io_sim::RunOptions {
            bugs: Bugs {
                store: StoreBug::KeepConsumedEntries,
                ..Bugs::default()
            },
            ..orbit_io_sim::RunOptions::default()
        },
        BUDGET_SHARED_KEEP_CONSUMED,
        &[Invariant::InboxOnce],
    );
}

/// A store that applies writes the epoch check fences: a paused owner
/// waking up after a takeover appends at its old epoch.
#[test]
fn shared_a_store_that_accepts_fenced_writes_is_caught() {
    shared_caught(
        "AcceptFencedWrites",
        orbit_io_sim::RunOptions {
            bugs: Bugs {
                store: StoreBug::AcceptFencedWrites,
                ..Bugs::default()
            },
            ..orbit_io_sim::RunOptions::default()
        },
        BUDGET_SHARED_FENCED_WRITES,
        &[Invariant::OneWriter, Invariant::InboxOnce],
    );
}
