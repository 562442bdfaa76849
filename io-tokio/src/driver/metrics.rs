//! In-memory counters and histograms the driver keeps, rendered in the
//! Prometheus text format by [`Metrics::render`]. They reset on restart.

use orbit_core::history::{Event, EventKind};
use std::collections::{BTreeSet, HashMap};
use std::fmt::Write as _;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// A fixed-bucket histogram.
#[derive(Debug)]
pub struct Histogram {
    bounds: &'static [f64],
    buckets: Vec<AtomicU64>,
    count: AtomicU64,
    /// Sum in micro-units (to stay atomic without floats).
    sum_micros: AtomicU64,
}

impl Histogram {
    fn new(bounds: &'static [f64]) -> Histogram {
        Histogram {
            bounds,
            buckets: bounds.iter().map(|_| AtomicU64::new(0)).collect(),
            count: AtomicU64::new(0),
            sum_micros: AtomicU64::new(0),
        }
    }

    /// Records one observation.
    pub fn observe(&self, value: f64) {
        for (bound, bucket) in self.bounds.iter().zip(&self.buckets) {
            if value <= *bound {
                bucket.fetch_add(1, Ordering::Relaxed);
            }
        }
        self.count.fetch_add(1, Ordering::Relaxed);
        let micros = (value.max(0.0) * 1e6) as u64;
        self.sum_micros.fetch_add(micros, Ordering::Relaxed);
    }

    /// Observations so far.
    pub fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }

    fn render(&self, out: &mut String, name: &str, help: &str) {
        let _ = writeln!(out, "# HELP {name} {help}");
        let _ = writeln!(out, "# TYPE {name} histogram");
        for (bound, bucket) in self.bounds.iter().zip(&self.buckets) {
            let _ = writeln!(
                out,
                "{name}_bucket{{le=\"{bound}\"}} {}",
                bucket.load(Ordering::Relaxed)
            );
        }
        let count = self.count();
        let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {count}");
        let sum = self.sum_micros.load(Ordering::Relaxed) as f64 / 1e6;
        let _ = writeln!(out, "{name}_sum {sum}");
        let _ = writeln!(out, "{name}_count {count}");
    }
}

const LATENCY_BOUNDS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
];
const SIZE_BOUNDS: &[f64] = &[1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0];

/// Everything `/metrics` shows besides the per-status execution counts (which
/// are read from storage at scrape time).
#[derive(Debug)]
pub struct Metrics {
    /// `StepDispatched` events committed.
    pub steps_dispatched: AtomicU64,
    /// `StepSucceeded` events committed.
    pub steps_succeeded: AtomicU64,
    /// `StepAttemptFailed` events committed.
    pub step_attempts_failed: AtomicU64,
    /// `StepFailed` events committed.
    pub steps_failed: AtomicU64,
    /// `StepScheduled` with `redelivery: true`.
    pub redeliveries: AtomicU64,
    /// Units queued and not yet dispatched (see [`Metrics::record_events`]).
    pub queue_depth: AtomicI64,
    /// Worker sessions registered and not unregistered or expired (see
    /// [`Metrics::live_sessions`]).
    pub sessions: AtomicI64,
    queued: Mutex<BTreeSet<(String, String)>>,
    contacts: Mutex<HashMap<String, Instant>>,
    /// Group commits that failed.
    pub commit_failures: AtomicU64,
    /// Seconds per group commit.
    pub commit_latency: Histogram,
    /// Engine batches per group commit.
    pub batches_per_commit: Histogram,
    /// Events per group commit.
    pub events_per_commit: Histogram,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics {
            steps_dispatched: AtomicU64::new(0),
            steps_succeeded: AtomicU64::new(0),
            step_attempts_failed: AtomicU64::new(0),
            steps_failed: AtomicU64::new(0),
            redeliveries: AtomicU64::new(0),
            queue_depth: AtomicI64::new(0),
            sessions: AtomicI64::new(0),
            queued: Mutex::new(BTreeSet::new()),
            contacts: Mutex::new(HashMap::new()),
            commit_failures: AtomicU64::new(0),
            commit_latency: Histogram::new(LATENCY_BOUNDS),
            batches_per_commit: Histogram::new(SIZE_BOUNDS),
            events_per_commit: Histogram::new(SIZE_BOUNDS),
        }
    }
}

impl Metrics {
    /// Counts committed events of `execution_id`. A unit is queued from
    /// its `StepScheduled` until it is dispatched or resolved, or its
    /// execution ends.
    pub fn record_events(&self, execution_id: &str, events: &[Event]) {
        let mut queued = self.queued.lock().unwrap_or_else(|e| e.into_inner());
        for e in events {
            match &e.kind {
                EventKind::StepScheduled {
                    step, redelivery, ..
                } => {
                    queued.insert((execution_id.to_owned(), step.clone()));
                    if *redelivery {
                        self.redeliveries.fetch_add(1, Ordering::Relaxed);
                    }
                }
                EventKind::StepDispatched { step, .. } => {
                    queued.remove(&(execution_id.to_owned(), step.clone()));
                    self.steps_dispatched.fetch_add(1, Ordering::Relaxed);
                }
                EventKind::StepSucceeded { step, .. } => {
                    queued.remove(&(execution_id.to_owned(), step.clone()));
                    self.steps_succeeded.fetch_add(1, Ordering::Relaxed);
                }
                EventKind::StepAttemptFailed { .. } => {
                    self.step_attempts_failed.fetch_add(1, Ordering::Relaxed);
                }
                EventKind::StepFailed { step, .. } => {
                    queued.remove(&(execution_id.to_owned(), step.clone()));
                    self.steps_failed.fetch_add(1, Ordering::Relaxed);
                }
                EventKind::WorkflowCompleted { .. }
                | EventKind::WorkflowFailed { .. }
                | EventKind::WorkflowCancelled { .. } => {
                    queued.retain(|(id, _)| id != execution_id);
                }
                _ => {}
            }
        }
        let depth = i64::try_from(queued.len()).unwrap_or(i64::MAX);
        self.queue_depth.store(depth, Ordering::Relaxed);
    }

    /// Seeds the queue gauge from recovered histories (counters stay 0).
    pub fn recover_queue(&self, execution_id: &str, events: &[Event]) {
        let mut queued = self.queued.lock().unwrap_or_else(|e| e.into_inner());
        for e in events {
            match &e.kind {
                EventKind::StepScheduled { step, .. } => {
                    queued.insert((execution_id.to_owned(), step.clone()));
                }
                EventKind::StepDispatched { step, .. }
                | EventKind::StepSucceeded { step, .. }
                | EventKind::StepFailed { step, .. } => {
                    queued.remove(&(execution_id.to_owned(), step.clone()));
                }
                EventKind::WorkflowCompleted { .. }
                | EventKind::WorkflowFailed { .. }
                | EventKind::WorkflowCancelled { .. } => {
                    queued.retain(|(id, _)| id != execution_id);
                }
                _ => {}
            }
        }
        let depth = i64::try_from(queued.len()).unwrap_or(i64::MAX);
        self.queue_depth.store(depth, Ordering::Relaxed);
    }

    /// A worker session was registered or called.
    pub fn session_seen(&self, session_id: &str) {
        let mut contacts = self.contacts.lock().unwrap_or_else(|e| e.into_inner());
        contacts.insert(session_id.to_owned(), Instant::now());
    }

    /// A worker session unregistered or is unknown to the engine.
    pub fn session_gone(&self, session_id: &str) {
        let mut contacts = self.contacts.lock().unwrap_or_else(|e| e.into_inner());
        contacts.remove(session_id);
    }

    /// Counts sessions heard from within `timeout` (the engine expires the
    /// others), forgets the rest, and updates the `sessions` gauge.
    pub fn live_sessions(&self, timeout: Duration) -> usize {
        let mut contacts = self.contacts.lock().unwrap_or_else(|e| e.into_inner());
        contacts.retain(|_, seen| seen.elapsed() <= timeout);
        let n = contacts.len();
        self.sessions
            .store(i64::try_from(n).unwrap_or(i64::MAX), Ordering::Relaxed);
        n
    }

    /// Renders everything in the Prometheus text format, with `by_status`
    /// the execution counts per status.
    pub fn render(&self, by_status: &[(String, u64)]) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "# HELP orbit_executions Executions by status.");
        let _ = writeln!(out, "# TYPE orbit_executions gauge");
        for status in [
            "pending",
            "running",
            "compensating",
            "completed",
            "failed",
            "cancelled",
        ] {
            let n = by_status
                .iter()
                .find(|(s, _)| s == status)
                .map(|(_, n)| *n)
                .unwrap_or(0);
            let _ = writeln!(out, "orbit_executions{{status=\"{status}\"}} {n}");
        }
        let counters = [
            (
                "orbit_steps_dispatched_total",
                "Task dispatches committed.",
                &self.steps_dispatched,
            ),
            (
                "orbit_steps_succeeded_total",
                "Units that succeeded.",
                &self.steps_succeeded,
            ),
            (
                "orbit_step_attempts_failed_total",
                "Attempts that failed.",
                &self.step_attempts_failed,
            ),
            (
                "orbit_steps_failed_total",
                "Units or steps that failed permanently.",
                &self.steps_failed,
            ),
            (
                "orbit_redeliveries_total",
                "Uncertain attempts scheduled again.",
                &self.redeliveries,
            ),
            (
                "orbit_commit_failures_total",
                "Group commits that did not apply.",
                &self.commit_failures,
            ),
        ];
        for (name, help, value) in counters {
            let _ = writeln!(out, "# HELP {name} {help}");
            let _ = writeln!(out, "# TYPE {name} counter");
            let _ = writeln!(out, "{name} {}", value.load(Ordering::Relaxed));
        }
        let gauges = [
            (
                "orbit_queue_depth",
                "Units queued and not yet dispatched.",
                &self.queue_depth,
            ),
            (
                "orbit_worker_sessions",
                "Registered worker sessions.",
                &self.sessions,
            ),
        ];
        for (name, help, value) in gauges {
            let _ = writeln!(out, "# HELP {name} {help}");
            let _ = writeln!(out, "# TYPE {name} gauge");
            let _ = writeln!(out, "{name} {}", value.load(Ordering::Relaxed).max(0));
        }
        self.commit_latency.render(
            &mut out,
            "orbit_commit_latency_seconds",
            "Duration of one group commit.",
        );
        self.batches_per_commit.render(
            &mut out,
            "orbit_commit_batches",
            "Engine batches merged into one group commit.",
        );
        self.events_per_commit.render(
            &mut out,
            "orbit_commit_events",
            "History events written by one group commit.",
        );
        out
    }
}
