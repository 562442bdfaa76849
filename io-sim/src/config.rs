//! The run's configuration: the scenario, and every parameter ("swarm"
//! testing) sampled from the seed — fault probabilities, timeouts, numbers
//! of workers, clients and executions. [`SimConfig`] prints every field, so
//! a run's first lines say exactly what world it explored.

use crate::rng::SimRng;
use orbit_core::history::Millis;
use std::fmt;

/// The named scenarios: a workload and the faults it stresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Scenario {
    /// Every kind of fault, each with a sampled probability (the default of
    /// the explorer).
    Swarm,
    /// Many executions, honest workers, light network faults.
    SteadyLoad,
    /// The server crashes again and again, mid-commit and mid-recovery.
    CrashStorm,
    /// Workers crash and pause past the session timeout holding tasks.
    LostWorkers,
    /// Slow workers, double reports and duplicated messages.
    LateAndDuplicate,
    /// Commits fail before applying, ambiguously, or slowly.
    StorageFaults,
    /// Cancellations and failing steps run compensations under faults.
    CancelCompensation,
    /// Sleeps and signals across server restarts.
    SignalsSleeps,
    /// Parent workflows with children, across crashes.
    ChildWorkflows,
    /// Starts with client ids and Idempotency-Keys whose responses get lost.
    IdempotentStarts,
    /// The server's clock steps forward (NTP steps, restarts on another
    /// clock) while it crashes now and then.
    ClockJumps,
    /// The built-in HTTP task (`orbit.http`): requests that fail, are
    /// refused or lose their answer, while the server crashes under them.
    BuiltinHttp,
    /// `--cluster` leader mode: two or three nodes with skewed, drifting
    /// clocks over one database; the leader killed mid-commit, paused past
    /// `--node-timeout` with its writes queued, cut off from the database.
    ClusterLeader,
    /// Eviction is invisible: each seed runs twice in lockstep, once with
    /// eviction of idle executions off and once with executions evicted at
    /// random points, under crashes, storage, network and worker faults;
    /// both runs must store the same histories and give every actor the
    /// same replies.
    EvictionInvisible,
    /// `--cluster` shared mode: three nodes executing at once over one
    /// database, each with its own skewed, drifting clock; nodes killed
    /// mid group commit and restarted with the same id, paused past
    /// `--node-timeout` with their I/O queued, cut off from the database;
    /// takeovers during commits and inbox deliveries; clients and workers
    /// spread over the nodes.
    ClusterShared,
}

impl Scenario {
    /// Every scenario, in a fixed order.
    pub const ALL: [Scenario; 15] = [
        Scenario::Swarm,
        Scenario::SteadyLoad,
        Scenario::CrashStorm,
        Scenario::LostWorkers,
        Scenario::LateAndDuplicate,
        Scenario::StorageFaults,
        Scenario::CancelCompensation,
        Scenario::SignalsSleeps,
        Scenario::ChildWorkflows,
        Scenario::IdempotentStarts,
        Scenario::ClockJumps,
        Scenario::BuiltinHttp,
        Scenario::ClusterLeader,
        Scenario::EvictionInvisible,
        Scenario::ClusterShared,
    ];

    /// The command-line name (`crash-storm`).
    pub fn name(self) -> &'static str {
        match self {
            Scenario::Swarm => "swarm",
            Scenario::SteadyLoad => "steady-load",
            Scenario::CrashStorm => "crash-storm",
            Scenario::LostWorkers => "lost-workers",
            Scenario::LateAndDuplicate => "late-and-duplicate",
            Scenario::StorageFaults => "storage-faults",
            Scenario::CancelCompensation => "cancel-compensation",
            Scenario::SignalsSleeps => "signals-sleeps",
            Scenario::ChildWorkflows => "child-workflows",
            Scenario::IdempotentStarts => "idempotent-starts",
            Scenario::ClockJumps => "clock-jumps",
            Scenario::BuiltinHttp => "builtin-http",
            Scenario::ClusterLeader => "cluster-leader",
            Scenario::EvictionInvisible => "eviction-invisible",
            Scenario::ClusterShared => "cluster-shared",
        }
    }

    /// The scenario with that command-line name.
    pub fn parse(name: &str) -> Option<Scenario> {
        Scenario::ALL.into_iter().find(|s| s.name() == name)
    }
}

impl fmt::Display for Scenario {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Fault options of the safety phase (all stop in the liveness phase).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Faults {
    /// Probability that a commit fails before applying (`Unavailable`).
    pub store_commit_fail_probability: f64,
    /// Probability that a commit's outcome is unknown (`Ambiguous`); such a
    /// commit applied or not with even odds.
    pub store_commit_ambiguous_probability: f64,
    /// Probability that a group commit of several batches is refused whole
    /// with a `Conflict` naming one execution as stale, as when another
    /// writer has moved it on: the node fails that batch, reloads the
    /// execution and writes the other batches again.
    pub store_commit_conflict_probability: f64,
    /// Probability that a commit is slow.
    pub store_slow_probability: f64,
    /// Upper bound of a slow commit's latency, in ms.
    pub store_slow_ms_max: Millis,
    /// Mean virtual time between server crashes, in ms (0: no crash).
    pub server_crash_interval_ms_mean: Millis,
    /// Upper bound of the delay before a crashed server restarts, in ms.
    pub server_restart_ms_max: Millis,
    /// Probability that a message between a worker or client and the server
    /// is lost.
    pub net_loss_probability: f64,
    /// Probability that a message is delivered twice.
    pub net_duplicate_probability: f64,
    /// Upper bound of a message's delay, in ms (random delays reorder).
    pub net_delay_ms_max: Millis,
    /// Probability that a worker crashes (loses everything) while holding a
    /// task.
    pub worker_crash_probability: f64,
    /// Probability that a worker pauses past the session timeout while
    /// holding a task, then reports with its old token.
    pub worker_pause_probability: f64,
    /// Probability that a worker reports a result twice.
    pub worker_double_report_probability: f64,
    /// Probability that a task attempt reports a failure.
    pub worker_fail_probability: f64,
    /// Probability that a worker returns output violating the task contract.
    pub worker_contract_violation_probability: f64,
    /// Probability that a task takes much longer than its attempt timeout.
    pub worker_slow_probability: f64,
    /// Probability that a worker or client is cut off from the server once
    /// during the safety phase (a partition that later heals).
    pub net_partition_probability: f64,
    /// Upper bound of a partition's length, in ms.
    pub net_partition_ms_max: Millis,
    /// Probability that the server's clock steps forward at a restart, and
    /// how often it steps while running (a few steps per run at most).
    pub clock_jump_probability: f64,
    /// Upper bound of one forward step of the server's clock, in ms.
    pub clock_jump_ms_max: Millis,
    /// Probability that a client cancels an execution it started.
    pub client_cancel_probability: f64,
    /// Share of the server's clock steps that go backwards (an NTP
    /// correction) instead of forwards.
    pub clock_back_probability: f64,
    /// Probability that a worker shuts down gracefully after a task (drops
    /// its poll, unregisters, comes back later with a new session).
    pub worker_unregister_probability: f64,
    /// Cluster: how far a node's clock may be off the database's, either
    /// way, in ms.
    pub clock_skew_ms_max: Millis,
    /// Cluster: how fast a node's clock may run off, either way, in parts
    /// per million.
    pub clock_drift_ppm_max: Millis,
    /// Cluster: probability (each of up to three chances) that a node is
    /// paused past `--node-timeout` and resumed with its writes queued.
    pub node_pause_probability: f64,
    /// Cluster: probability (each of up to three chances) that a node is
    /// cut off from the database for a while.
    pub node_db_cut_probability: f64,
}

/// Kinds of faults `--faults` can keep (the others are switched off).
pub const FAULT_KINDS: [&str; 9] = [
    "crash",
    "storage",
    "network",
    "partition",
    "workers",
    "cancel",
    "clock",
    "pause",
    "db-cut",
];

impl Faults {
    /// Switches off every fault whose kind is not in `kinds`
    /// (see [`FAULT_KINDS`]).
    pub fn keep_only(&mut self, kinds: &[&str]) {
        let keep = |k: &str| kinds.contains(&k);
        if !keep("crash") {
            self.server_crash_interval_ms_mean = 0;
        }
        if !keep("storage") {
            self.store_commit_fail_probability = 0.0;
            self.store_commit_ambiguous_probability = 0.0;
            self.store_commit_conflict_probability = 0.0;
            self.store_slow_probability = 0.0;
        }
        if !keep("network") {
            self.net_loss_probability = 0.0;
            self.net_duplicate_probability = 0.0;
        }
        if !keep("partition") {
            self.net_partition_probability = 0.0;
        }
        if !keep("workers") {
            self.worker_crash_probability = 0.0;
            self.worker_pause_probability = 0.0;
            self.worker_double_report_probability = 0.0;
            self.worker_fail_probability = 0.0;
            self.worker_contract_violation_probability = 0.0;
            self.worker_slow_probability = 0.0;
            self.worker_unregister_probability = 0.0;
        }
        if !keep("cancel") {
            self.client_cancel_probability = 0.0;
        }
        if !keep("clock") {
            self.clock_jump_probability = 0.0;
            self.clock_skew_ms_max = 0;
            self.clock_drift_ppm_max = 0;
        }
        if !keep("pause") {
            self.node_pause_probability = 0.0;
        }
        if !keep("db-cut") {
            self.node_db_cut_probability = 0.0;
        }
    }
}

/// Everything that defines one run, sampled from its seed.
#[derive(Debug, Clone, PartialEq)]
pub struct SimConfig {
    /// The run's seed.
    pub seed: u64,
    /// The scenario.
    pub scenario: Scenario,
    /// Faults of the safety phase.
    pub faults: Faults,
    /// Number of simulated workers.
    pub workers: usize,
    /// Number of simulated clients.
    pub clients: usize,
    /// Executions started per client.
    pub starts_per_client: usize,
    /// The server's `--session-timeout`, in ms.
    pub session_timeout_ms: Millis,
    /// Length of the safety phase (faults on), in virtual ms.
    pub safety_ms: Millis,
    /// Bound on the liveness phase: every execution must be terminal this
    /// long after faults stop, in virtual ms.
    pub liveness_ms_max: Millis,
    /// Probability that a start carries a client-chosen execution id.
    pub client_id_probability: f64,
    /// Probability that a creating request carries an Idempotency-Key.
    pub idempotency_key_probability: f64,
    /// The `--faults` restriction this configuration was sampled with.
    pub fault_kinds: Option<Vec<String>>,
    /// How many of the workers apply effects without deduplicating by key
    /// (the payment model then counts each key's effects: at least once,
    /// never lost).
    pub undeduplicated_workers: usize,
    /// How many of the workers (the last ones) send their results on their
    /// next poll, handled with it as one (`Input::Requests`), as the SDKs
    /// do, instead of one call per result.
    pub carrying_workers: usize,
    /// The server's `--max-active-executions` (admission cap), if any.
    pub max_active_executions: Option<u64>,
    /// How long the server keeps Idempotency-Key records, in ms.
    pub idempotency_ttl_ms: Millis,
    /// Group commits the node writes at once (production's default is 2).
    pub commits_in_flight: usize,
    /// A commit the store applied is reported written first and durable a
    /// moment later (SQLite's WAL sync after the write lock): the node may
    /// start the next one in between. Single-server scenarios only, half
    /// of their seeds (from a bit of the seed, so no other draw moves).
    pub sync_after_write: bool,
    /// Nodes of a simulated `--cluster` (1: a single server, no lease).
    pub cluster_nodes: usize,
    /// The cluster's `--node-timeout`, in ms.
    pub node_timeout_ms: Millis,
    /// The server's `--idle-evict`, in ms (`None`: off).
    pub idle_evict_ms: Option<Millis>,
    /// The server's `--max-in-memory-executions` (`None`: no cap).
    pub max_in_memory: Option<usize>,
    /// How many finished executions the server keeps in memory (older
    /// ones are read back from the store when a command names them).
    pub finished_cache: usize,
    /// Probability, before each step of the world, that the server evicts
    /// at once every execution that could leave memory (eviction "forced
    /// at random points"; drawn from its own stream, so that the world's
    /// draws stay those of a run without it). 0 outside
    /// `eviction-invisible`.
    pub evict_now_probability: f64,
}

fn p(rng: &mut SimRng, max: f64) -> f64 {
    // A third of the time a fault kind is off: swarm testing explores
    // configurations where some faults never happen.
    if rng.chance(1.0 / 3.0) {
        0.0
    } else {
        (rng.float(0.0, max) * 1000.0).round() / 1000.0
    }
}

impl SimConfig {
    /// Samples the configuration of `scenario` from `seed`. Draws come from
    /// their own stream, so the world's stream is independent of how many
    /// draws sampling took.
    pub fn sample(seed: u64, scenario: Scenario) -> SimConfig {
        let mut rng = SimRng::new(seed ^ 0x5eed_c0f1_9000_0001);
        let mut c = SimConfig {
            seed,
            scenario,
            faults: Faults::default(),
            workers: rng.between(2, 5) as usize,
            clients: rng.between(1, 3) as usize,
            starts_per_client: rng.between(2, 5) as usize,
            session_timeout_ms: rng.between(3, 10) * 1000,
            safety_ms: rng.between(20, 60) * 1000,
            liveness_ms_max: 600_000,
            client_id_probability: p(&mut rng, 0.8),
            idempotency_key_probability: p(&mut rng, 0.8),
            fault_kinds: None,
            undeduplicated_workers: 0,
            carrying_workers: 0,
            max_active_executions: None,
            idempotency_ttl_ms: 24 * 3600 * 1000,
            commits_in_flight: 2,
            sync_after_write: false,
            cluster_nodes: 1,
            node_timeout_ms: 5_000,
            idle_evict_ms: Some(orbit_core::engine::IDLE_EVICT_MS),
            max_in_memory: Some(orbit_core::engine::MAX_IN_MEMORY),
            finished_cache: orbit_core::engine::FINISHED_CACHE,
            evict_now_probability: 0.0,
        };
        let f = &mut c.faults;
        f.net_delay_ms_max = rng.between(1, 200);
        match scenario {
            Scenario::Swarm => {
                f.store_commit_fail_probability = p(&mut rng, 0.1);
                f.store_commit_ambiguous_probability = p(&mut rng, 0.1);
                f.store_slow_probability = p(&mut rng, 0.2);
                f.store_slow_ms_max = rng.between(100, 5000);
                f.server_crash_interval_ms_mean = if rng.chance(0.66) {
                    rng.between(2, 20) * 1000
                } else {
                    0
                };
                f.server_restart_ms_max = rng.between(100, 8000);
                f.net_loss_probability = p(&mut rng, 0.1);
                f.net_duplicate_probability = p(&mut rng, 0.1);
                f.worker_crash_probability = p(&mut rng, 0.1);
                f.worker_pause_probability = p(&mut rng, 0.1);
                f.worker_double_report_probability = p(&mut rng, 0.2);
                f.worker_fail_probability = p(&mut rng, 0.2);
                f.worker_contract_violation_probability = p(&mut rng, 0.1);
                f.worker_slow_probability = p(&mut rng, 0.1);
                f.client_cancel_probability = p(&mut rng, 0.3);
            }
            Scenario::SteadyLoad => {
                c.starts_per_client = rng.between(5, 10) as usize;
                f.net_loss_probability = p(&mut rng, 0.02);
                f.net_duplicate_probability = p(&mut rng, 0.02);
            }
            Scenario::CrashStorm => {
                f.server_crash_interval_ms_mean = rng.between(500, 5000);
                f.server_restart_ms_max = rng.between(50, 3000);
                f.net_loss_probability = p(&mut rng, 0.05);
                f.worker_fail_probability = p(&mut rng, 0.1);
                f.client_cancel_probability = p(&mut rng, 0.2);
            }
            Scenario::LostWorkers => {
                f.worker_crash_probability = rng.float(0.05, 0.3);
                f.worker_pause_probability = rng.float(0.05, 0.3);
                f.net_loss_probability = p(&mut rng, 0.1);
            }
            Scenario::LateAndDuplicate => {
                f.worker_double_report_probability = rng.float(0.2, 0.6);
                f.worker_slow_probability = rng.float(0.1, 0.4);
                f.net_duplicate_probability = rng.float(0.05, 0.3);
                f.net_delay_ms_max = rng.between(100, 2000);
                f.worker_pause_probability = p(&mut rng, 0.1);
            }
            Scenario::StorageFaults => {
                f.store_commit_fail_probability = rng.float(0.02, 0.25);
                f.store_commit_ambiguous_probability = rng.float(0.02, 0.25);
                f.store_slow_probability = rng.float(0.0, 0.3);
                f.store_slow_ms_max = rng.between(100, 5000);
                f.server_crash_interval_ms_mean = if rng.chance(0.5) {
                    rng.between(3, 20) * 1000
                } else {
                    0
                };
                f.server_restart_ms_max = rng.between(100, 3000);
            }
            Scenario::CancelCompensation => {
                f.client_cancel_probability = rng.float(0.3, 0.8);
                f.worker_fail_probability = rng.float(0.05, 0.3);
                f.worker_contract_violation_probability = p(&mut rng, 0.1);
                f.worker_crash_probability = p(&mut rng, 0.1);
                f.store_commit_ambiguous_probability = p(&mut rng, 0.05);
                f.server_crash_interval_ms_mean = if rng.chance(0.5) {
                    rng.between(3, 20) * 1000
                } else {
                    0
                };
                f.server_restart_ms_max = rng.between(100, 3000);
                f.net_loss_probability = p(&mut rng, 0.05);
            }
            Scenario::SignalsSleeps | Scenario::ChildWorkflows => {
                f.server_crash_interval_ms_mean = rng.between(2, 10) * 1000;
                f.server_restart_ms_max = rng.between(100, 5000);
                f.net_loss_probability = p(&mut rng, 0.05);
                f.net_duplicate_probability = p(&mut rng, 0.05);
                f.store_commit_ambiguous_probability = p(&mut rng, 0.05);
                f.worker_crash_probability = p(&mut rng, 0.05);
                f.client_cancel_probability = p(&mut rng, 0.15);
            }
            Scenario::ClockJumps => {
                f.clock_jump_probability = rng.float(0.3, 1.0);
                f.clock_jump_ms_max = rng.between(500, 3 * c.session_timeout_ms);
                f.server_crash_interval_ms_mean = rng.between(3, 15) * 1000;
                f.server_restart_ms_max = rng.between(100, 3000);
                f.net_loss_probability = p(&mut rng, 0.05);
                f.worker_slow_probability = p(&mut rng, 0.1);
                f.client_cancel_probability = p(&mut rng, 0.2);
            }
            Scenario::BuiltinHttp => {
                f.server_crash_interval_ms_mean = rng.between(1, 8) * 1000;
                f.server_restart_ms_max = rng.between(50, 2000);
                f.store_commit_ambiguous_probability = p(&mut rng, 0.05);
                f.net_loss_probability = p(&mut rng, 0.05);
                f.worker_fail_probability = p(&mut rng, 0.1);
                f.client_cancel_probability = p(&mut rng, 0.2);
            }
            Scenario::ClusterLeader | Scenario::ClusterShared => {
                f.server_crash_interval_ms_mean = if rng.chance(0.7) {
                    rng.between(3, 15) * 1000
                } else {
                    0
                };
                f.server_restart_ms_max = rng.between(100, 5000);
                f.store_commit_fail_probability = p(&mut rng, 0.05);
                f.store_commit_ambiguous_probability = p(&mut rng, 0.1);
                f.store_slow_probability = p(&mut rng, 0.2);
                f.store_slow_ms_max = rng.between(100, 3000);
                f.net_loss_probability = p(&mut rng, 0.05);
                f.net_duplicate_probability = p(&mut rng, 0.05);
                f.worker_crash_probability = p(&mut rng, 0.05);
                f.worker_fail_probability = p(&mut rng, 0.1);
                f.client_cancel_probability = p(&mut rng, 0.2);
                f.clock_jump_probability = p(&mut rng, 0.5);
            }
            Scenario::EvictionInvisible => {
                // Every fault that both runs meet at the same instants
                // (see `lockstep`): not the cluster's, whose fetches fail
                // while a node is cut off from the database.
                f.store_commit_fail_probability = p(&mut rng, 0.1);
                f.store_commit_ambiguous_probability = p(&mut rng, 0.1);
                f.store_commit_conflict_probability = p(&mut rng, 0.1);
                f.store_slow_probability = p(&mut rng, 0.2);
                f.store_slow_ms_max = rng.between(100, 5000);
                f.server_crash_interval_ms_mean = if rng.chance(0.6) {
                    rng.between(2, 20) * 1000
                } else {
                    0
                };
                f.server_restart_ms_max = rng.between(100, 5000);
                f.net_loss_probability = p(&mut rng, 0.1);
                f.net_duplicate_probability = p(&mut rng, 0.1);
                f.worker_crash_probability = p(&mut rng, 0.1);
                f.worker_pause_probability = p(&mut rng, 0.1);
                f.worker_double_report_probability = p(&mut rng, 0.2);
                f.worker_fail_probability = p(&mut rng, 0.2);
                f.worker_contract_violation_probability = p(&mut rng, 0.1);
                f.worker_slow_probability = p(&mut rng, 0.1);
                f.worker_unregister_probability = p(&mut rng, 0.2);
                f.client_cancel_probability = p(&mut rng, 0.3);
                f.clock_jump_probability = p(&mut rng, 0.5);
                f.clock_jump_ms_max = rng.between(500, 3 * c.session_timeout_ms);
                f.clock_back_probability = rng.float(0.0, 0.6);
                if rng.chance(0.4) {
                    c.max_active_executions = Some(rng.between(1, 6));
                }
                if rng.chance(0.3) {
                    c.idempotency_ttl_ms = rng.between(1, 20) * 1000;
                }
                c.commits_in_flight = rng.between(1, 3) as usize;
            }
            Scenario::IdempotentStarts => {
                c.client_id_probability = rng.float(0.2, 0.6);
                c.idempotency_key_probability = rng.float(0.3, 0.9);
                c.starts_per_client = rng.between(4, 8) as usize;
                f.net_loss_probability = rng.float(0.1, 0.3);
                f.net_duplicate_probability = rng.float(0.0, 0.2);
                f.store_commit_ambiguous_probability = p(&mut rng, 0.1);
                f.server_crash_interval_ms_mean = if rng.chance(0.5) {
                    rng.between(3, 15) * 1000
                } else {
                    0
                };
                f.server_restart_ms_max = rng.between(100, 3000);
            }
        }
        // Drawn last, so that adding them kept every earlier draw (and the
        // seeds recorded in findings) unchanged.
        let f = &mut c.faults;
        f.net_partition_ms_max = rng.between(1000, 3 * c.session_timeout_ms);
        f.net_partition_probability = match scenario {
            Scenario::Swarm | Scenario::EvictionInvisible => p(&mut rng, 0.3),
            Scenario::LostWorkers => p(&mut rng, 0.5),
            _ => 0.0,
        };
        // The second round's draws, last for the same reason.
        let swarm = scenario == Scenario::Swarm;
        if swarm {
            f.clock_jump_probability = p(&mut rng, 0.5);
            f.clock_jump_ms_max = rng.between(500, 3 * c.session_timeout_ms);
        }
        if swarm || scenario == Scenario::ClockJumps {
            f.clock_back_probability = rng.float(0.0, 0.6);
        }
        if matches!(scenario, Scenario::Swarm | Scenario::LostWorkers) {
            f.worker_unregister_probability = p(&mut rng, 0.2);
        }
        if matches!(
            scenario,
            Scenario::Swarm | Scenario::LostWorkers | Scenario::LateAndDuplicate
        ) && rng.chance(0.5)
        {
            c.undeduplicated_workers = rng.between(1, c.workers as u64) as usize;
        }
        if matches!(
            scenario,
            Scenario::Swarm | Scenario::SteadyLoad | Scenario::IdempotentStarts
        ) && rng.chance(0.4)
        {
            c.max_active_executions = Some(rng.between(1, 6));
        }
        if scenario == Scenario::LostWorkers {
            // Slow commits, so that sessions end while their hand-outs are
            // being written.
            f.worker_unregister_probability = rng.float(0.1, 0.5);
            f.store_slow_probability = rng.float(0.05, 0.3);
            f.store_slow_ms_max = rng.between(500, 2 * c.session_timeout_ms);
        }
        if scenario == Scenario::IdempotentStarts {
            // Commits slower than a client's patience, some ambiguous: the
            // retry of a start waits behind its own first attempt.
            f.store_slow_probability = rng.float(0.1, 0.4);
            f.store_slow_ms_max = rng.between(1000, 6000);
            f.store_commit_ambiguous_probability = rng.float(0.05, 0.3);
        }
        if matches!(scenario, Scenario::Swarm | Scenario::IdempotentStarts) && rng.chance(0.4) {
            // Short enough that keys expire while clients still retry.
            c.idempotency_ttl_ms = rng.between(1, 20) * 1000;
        }
        if scenario == Scenario::Swarm {
            // Drawn last, so that the draws above stay what they were.
            c.commits_in_flight = rng.between(1, 3) as usize;
        }
        if scenario == Scenario::ClusterLeader {
            c.cluster_nodes = rng.between(2, 3) as usize;
            c.node_timeout_ms = rng.between(1, 5) * 1000;
            f.clock_skew_ms_max = rng.between(0, 4000);
            f.clock_drift_ppm_max = rng.between(0, 500);
            f.clock_jump_ms_max = rng.between(200, 3000);
            f.node_pause_probability = rng.float(0.3, 1.0);
            f.node_db_cut_probability = rng.float(0.2, 0.9);
            f.net_partition_probability = p(&mut rng, 0.3);
            c.commits_in_flight = rng.between(1, 3) as usize;
        }
        if scenario == Scenario::ClusterShared {
            c.cluster_nodes = 3;
            c.node_timeout_ms = rng.between(1, 5) * 1000;
            f.clock_skew_ms_max = rng.between(0, 2000);
            f.clock_drift_ppm_max = rng.between(0, 500);
            f.clock_jump_ms_max = rng.between(200, 2000);
            f.node_pause_probability = rng.float(0.3, 1.0);
            f.node_db_cut_probability = rng.float(0.2, 0.9);
            f.net_partition_probability = p(&mut rng, 0.3);
            f.worker_pause_probability = p(&mut rng, 0.05);
            f.worker_double_report_probability = p(&mut rng, 0.1);
            f.worker_slow_probability = p(&mut rng, 0.1);
            c.commits_in_flight = rng.between(1, 3) as usize;
        }
        // Drawn after everything else: eviction of idle executions, from
        // off to eager (an execution leaves memory the moment it waits).
        c.idle_evict_ms = match rng.between(0, 3) {
            0 => None,
            1 => Some(rng.between(0, 10) * 100),
            2 => Some(rng.between(1, 10) * 1000),
            _ => Some(orbit_core::engine::IDLE_EVICT_MS),
        };
        // A cap small enough to bind: idle executions leave under pressure,
        // before their delay.
        c.max_in_memory = match rng.between(0, 2) {
            0 => Some(rng.between(1, 8) as usize),
            _ => Some(orbit_core::engine::MAX_IN_MEMORY),
        };
        // Drawn last too: group commits refused by a stale-seq `Conflict`.
        c.faults.store_commit_conflict_probability = match scenario {
            Scenario::Swarm => p(&mut rng, 0.1),
            Scenario::StorageFaults => rng.float(0.02, 0.2),
            Scenario::EvictionInvisible => c.faults.store_commit_conflict_probability,
            _ => 0.0,
        };
        if scenario == Scenario::EvictionInvisible {
            // The run with eviction (the run without has it off): a short
            // cache of finished executions, and every idle execution
            // evicted at random points between steps. Not the engine's own
            // timer (`--idle-evict`) nor its cap, which work on ticks: their
            // idleness checks ask for wake-ups of their own, and a tick at
            // an instant the run without eviction has none lets the engine
            // do its "at the next tick" work (a retry after a failed write,
            // orphaned deliveries) earlier — a difference of the world, not
            // of eviction. See the scenario's chapter.
            c.idle_evict_ms = None;
            c.max_in_memory = None;
            c.finished_cache = rng.between(0, 4) as usize;
            c.evict_now_probability = (rng.float(0.001, 0.2) * 1000.0).round() / 1000.0;
        }
        // Last of all: workers that send their results on their next poll.
        if rng.chance(0.5) {
            c.carrying_workers = rng.between(1, c.workers as u64) as usize;
        }
        // SQLite serves one server only; the paired runs of
        // `eviction-invisible` keep their commits in lockstep.
        c.sync_after_write = !matches!(
            scenario,
            Scenario::ClusterLeader | Scenario::ClusterShared | Scenario::EvictionInvisible
        ) && (seed >> 7) & 1 == 1;
        c
    }

    /// Like [`SimConfig::sample`], then switches off every fault whose kind
    /// is not in `kinds` (`--faults crash,storage`).
    pub fn sample_with_faults(seed: u64, scenario: Scenario, kinds: &[&str]) -> SimConfig {
        let mut c = SimConfig::sample(seed, scenario);
        c.faults.keep_only(kinds);
        c.fault_kinds = Some(kinds.iter().map(|k| (*k).to_owned()).collect());
        c
    }
}

impl fmt::Display for SimConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let x = &self.faults;
        writeln!(f, "seed = {:#x} ({})", self.seed, self.seed)?;
        writeln!(f, "scenario = {}", self.scenario)?;
        if let Some(k) = &self.fault_kinds {
            writeln!(f, "faults = {}", k.join(","))?;
        }
        writeln!(f, "workers = {}", self.workers)?;
        writeln!(f, "clients = {}", self.clients)?;
        writeln!(f, "starts_per_client = {}", self.starts_per_client)?;
        writeln!(f, "session_timeout_ms = {}", self.session_timeout_ms)?;
        writeln!(f, "safety_ms = {}", self.safety_ms)?;
        writeln!(f, "liveness_ms_max = {}", self.liveness_ms_max)?;
        writeln!(f, "client_id_probability = {}", self.client_id_probability)?;
        writeln!(
            f,
            "idempotency_key_probability = {}",
            self.idempotency_key_probability
        )?;
        writeln!(
            f,
            "undeduplicated_workers = {}",
            self.undeduplicated_workers
        )?;
        writeln!(f, "carrying_workers = {}", self.carrying_workers)?;
        match self.max_active_executions {
            Some(m) => writeln!(f, "max_active_executions = {m}")?,
            None => writeln!(f, "max_active_executions = none")?,
        }
        writeln!(f, "idempotency_ttl_ms = {}", self.idempotency_ttl_ms)?;
        writeln!(f, "commits_in_flight = {}", self.commits_in_flight)?;
        writeln!(f, "sync_after_write = {}", self.sync_after_write)?;
        match self.idle_evict_ms {
            Some(ms) => writeln!(f, "idle_evict_ms = {ms}")?,
            None => writeln!(f, "idle_evict_ms = none")?,
        }
        match self.max_in_memory {
            Some(n) => writeln!(f, "max_in_memory = {n}")?,
            None => writeln!(f, "max_in_memory = none")?,
        }
        writeln!(f, "finished_cache = {}", self.finished_cache)?;
        if self.evict_now_probability > 0.0 {
            writeln!(f, "evict_now_probability = {}", self.evict_now_probability)?;
        }
        if self.cluster_nodes > 1 {
            writeln!(f, "cluster_nodes = {}", self.cluster_nodes)?;
            writeln!(f, "node_timeout_ms = {}", self.node_timeout_ms)?;
            writeln!(f, "clock_skew_ms_max = {}", x.clock_skew_ms_max)?;
            writeln!(f, "clock_drift_ppm_max = {}", x.clock_drift_ppm_max)?;
            writeln!(f, "node_pause_probability = {}", x.node_pause_probability)?;
            writeln!(f, "node_db_cut_probability = {}", x.node_db_cut_probability)?;
        }
        let rows: [(&str, String); 23] = [
            (
                "store_commit_fail_probability",
                x.store_commit_fail_probability.to_string(),
            ),
            (
                "store_commit_ambiguous_probability",
                x.store_commit_ambiguous_probability.to_string(),
            ),
            (
                "store_commit_conflict_probability",
                x.store_commit_conflict_probability.to_string(),
            ),
            (
                "store_slow_probability",
                x.store_slow_probability.to_string(),
            ),
            ("store_slow_ms_max", x.store_slow_ms_max.to_string()),
            (
                "server_crash_interval_ms_mean",
                x.server_crash_interval_ms_mean.to_string(),
            ),
            ("server_restart_ms_max", x.server_restart_ms_max.to_string()),
            ("net_loss_probability", x.net_loss_probability.to_string()),
            (
                "net_duplicate_probability",
                x.net_duplicate_probability.to_string(),
            ),
            ("net_delay_ms_max", x.net_delay_ms_max.to_string()),
            (
                "worker_crash_probability",
                x.worker_crash_probability.to_string(),
            ),
            (
                "worker_pause_probability",
                x.worker_pause_probability.to_string(),
            ),
            (
                "worker_double_report_probability",
                x.worker_double_report_probability.to_string(),
            ),
            (
                "worker_fail_probability",
                x.worker_fail_probability.to_string(),
            ),
            (
                "worker_contract_violation_probability",
                x.worker_contract_violation_probability.to_string(),
            ),
            (
                "worker_slow_probability",
                x.worker_slow_probability.to_string(),
            ),
            (
                "net_partition_probability",
                x.net_partition_probability.to_string(),
            ),
            ("net_partition_ms_max", x.net_partition_ms_max.to_string()),
            (
                "clock_jump_probability",
                x.clock_jump_probability.to_string(),
            ),
            ("clock_jump_ms_max", x.clock_jump_ms_max.to_string()),
            (
                "client_cancel_probability",
                x.client_cancel_probability.to_string(),
            ),
            (
                "clock_back_probability",
                x.clock_back_probability.to_string(),
            ),
            (
                "worker_unregister_probability",
                x.worker_unregister_probability.to_string(),
            ),
        ];
        for (k, v) in rows {
            writeln!(f, "{k} = {v}")?;
        }
        Ok(())
    }
}
