//! In-memory counters and histograms the driver keeps, rendered in the
//! Prometheus text format by [`Metrics::render`]. They reset on restart.

use foldhash::HashMap as IdMap;
use orbit_core::history::Millis;
use orbit_core::history::{Event, EventKind};
use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Mutex;

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
/// Millisecond-resolution durations, from the history's timestamps.
const DURATION_BOUNDS: &[f64] = &[
    0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0,
];

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
    /// Executions in the engine's memory, finished ones included.
    pub in_memory: AtomicI64,
    /// Running executions evicted for idleness (`--idle-evict`).
    pub evicted: AtomicI64,
    units: Mutex<Units>,
    /// When each session was last heard from, on the driver's clock.
    contacts: Mutex<HashMap<String, Millis>>,
    /// Group commits that failed.
    pub commit_failures: AtomicU64,
    /// Spans the collector accepted (`--otlp-endpoint`).
    pub spans_exported: AtomicU64,
    /// Spans dropped: queue full, export behind, collector unreachable.
    pub spans_dropped: AtomicU64,
    /// Seconds per group commit.
    pub commit_latency: Histogram,
    /// Engine batches per group commit.
    pub batches_per_commit: Histogram,
    /// Events per group commit.
    pub events_per_commit: Histogram,
    /// Seconds from a unit's `StepScheduled` to its `StepDispatched`.
    pub handoff_latency: Histogram,
    /// Seconds from a `StepDispatched` to the attempt's outcome (success,
    /// failure or uncertainty).
    pub attempt_duration: Histogram,
}

/// What the metrics follow of one unit (between its scheduling and its
/// resolution).
#[derive(Debug, Default, Clone)]
struct Unit {
    task: String,
    /// `at` of the `StepScheduled` while the unit waits in the queue.
    queued_since: Option<Millis>,
    /// `at` of the `StepDispatched` while an attempt runs.
    dispatched_at: Option<Millis>,
}

/// Attempt outcomes of one task name.
#[derive(Debug, Default, Clone, Copy)]
struct Outcomes {
    succeeded: u64,
    failed: u64,
    uncertain: u64,
}

/// The units the metrics follow, by execution then step, and how many of
/// them wait in the queue: each event costs a lookup, never a scan. Keyed
/// by ids clients choose, so hashed with a seed drawn at random (see the
/// engine's `keyed` module).
#[derive(Debug, Default)]
struct Units {
    live: IdMap<String, IdMap<String, Unit>>,
    queued: usize,
    by_task: BTreeMap<String, Outcomes>,
}

impl Units {
    fn get_mut(&mut self, execution_id: &str, step: &str) -> Option<&mut Unit> {
        self.live.get_mut(execution_id)?.get_mut(step)
    }

    /// A unit was scheduled (again) at `at`.
    fn schedule(&mut self, execution_id: &str, step: &str, task: &str, at: Millis) {
        let steps = match self.live.get_mut(execution_id) {
            Some(steps) => steps,
            None => self.live.entry(execution_id.to_owned()).or_default(),
        };
        let unit = match steps.get_mut(step) {
            Some(unit) => unit,
            None => steps.entry(step.to_owned()).or_default(),
        };
        if unit.queued_since.is_none() {
            self.queued += 1;
        }
        if unit.task != task {
            unit.task.clear();
            unit.task.push_str(task);
        }
        unit.queued_since = Some(at);
        unit.dispatched_at = None;
    }

    /// The unit left the queue for a worker; returns when it was queued.
    fn dispatch(&mut self, execution_id: &str, step: &str, at: Millis) -> Option<Millis> {
        let unit = self.get_mut(execution_id, step)?;
        let since = unit.queued_since.take();
        unit.dispatched_at = Some(at);
        if since.is_some() {
            self.queued -= 1;
        }
        since
    }

    /// The unit is resolved: it is followed no more.
    fn resolve(&mut self, execution_id: &str, step: &str) {
        let Some(steps) = self.live.get_mut(execution_id) else {
            return;
        };
        if let Some(unit) = steps.remove(step) {
            if unit.queued_since.is_some() {
                self.queued -= 1;
            }
        }
        if steps.is_empty() {
            self.live.remove(execution_id);
        }
    }

    /// The execution ended: none of its units is followed any more.
    fn end(&mut self, execution_id: &str) {
        if let Some(steps) = self.live.remove(execution_id) {
            self.queued -= steps.values().filter(|u| u.queued_since.is_some()).count();
        }
    }

    /// Counts an attempt's outcome against its unit's task, and returns
    /// when the attempt was dispatched.
    fn attempt_ended(
        &mut self,
        execution_id: &str,
        step: &str,
        kind: &EventKind,
    ) -> Option<Millis> {
        let Units { live, by_task, .. } = self;
        let unit = live.get_mut(execution_id)?.get_mut(step)?;
        if !by_task.contains_key(&unit.task) {
            by_task.insert(unit.task.clone(), Outcomes::default());
        }
        if let Some(o) = by_task.get_mut(&unit.task) {
            match kind {
                EventKind::StepSucceeded { .. } => o.succeeded += 1,
                EventKind::StepAttemptFailed { .. } => o.failed += 1,
                _ => o.uncertain += 1,
            }
        }
        unit.dispatched_at.take()
    }
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
            in_memory: AtomicI64::new(0),
            evicted: AtomicI64::new(0),
            units: Mutex::new(Units::default()),
            contacts: Mutex::new(HashMap::new()),
            commit_failures: AtomicU64::new(0),
            spans_exported: AtomicU64::new(0),
            spans_dropped: AtomicU64::new(0),
            commit_latency: Histogram::new(LATENCY_BOUNDS),
            batches_per_commit: Histogram::new(SIZE_BOUNDS),
            events_per_commit: Histogram::new(SIZE_BOUNDS),
            handoff_latency: Histogram::new(DURATION_BOUNDS),
            attempt_duration: Histogram::new(DURATION_BOUNDS),
        }
    }
}

fn seconds(from: Millis, to: Millis) -> f64 {
    to.saturating_sub(from) as f64 / 1000.0
}

impl Metrics {
    /// Counts committed events of `execution_id`. A unit is queued from
    /// its `StepScheduled` until it is dispatched or resolved, or its
    /// execution ends.
    pub fn record_events(&self, execution_id: &str, events: &[Event]) {
        self.follow(execution_id, events, true);
    }

    /// Seeds the queue gauges from recovered histories (counters and
    /// histograms stay 0).
    pub fn recover_queue(&self, execution_id: &str, events: &[Event]) {
        self.follow(execution_id, events, false);
    }

    fn follow(&self, execution_id: &str, events: &[Event], count: bool) {
        let mut units = self.units.lock().unwrap_or_else(|e| e.into_inner());
        let add = |c: &AtomicU64| {
            if count {
                c.fetch_add(1, Ordering::Relaxed);
            }
        };
        for e in events {
            match &e.kind {
                EventKind::StepScheduled {
                    step,
                    task,
                    redelivery,
                    ..
                } => {
                    units.schedule(execution_id, step, task, e.at);
                    if *redelivery {
                        add(&self.redeliveries);
                    }
                }
                EventKind::StepDispatched { step, .. } => {
                    if let Some(since) = units.dispatch(execution_id, step, e.at) {
                        if count {
                            self.handoff_latency.observe(seconds(since, e.at));
                        }
                    }
                    add(&self.steps_dispatched);
                }
                EventKind::StepSucceeded { step, .. }
                | EventKind::StepAttemptFailed { step, .. }
                | EventKind::StepAttemptUncertain { step, .. } => {
                    if count {
                        if let Some(at) = units.attempt_ended(execution_id, step, &e.kind) {
                            self.attempt_duration.observe(seconds(at, e.at));
                        }
                    } else if let Some(u) = units.get_mut(execution_id, step) {
                        u.dispatched_at = None;
                    }
                    match e.kind {
                        EventKind::StepSucceeded { .. } => {
                            units.resolve(execution_id, step);
                            add(&self.steps_succeeded);
                        }
                        EventKind::StepAttemptFailed { .. } => add(&self.step_attempts_failed),
                        _ => {}
                    }
                }
                EventKind::StepFailed { step, .. } => {
                    units.resolve(execution_id, step);
                    add(&self.steps_failed);
                }
                EventKind::WorkflowCompleted { .. }
                | EventKind::WorkflowFailed { .. }
                | EventKind::WorkflowCancelled { .. } => units.end(execution_id),
                _ => {}
            }
        }
        self.queue_depth.store(
            i64::try_from(units.queued).unwrap_or(i64::MAX),
            Ordering::Relaxed,
        );
    }

    /// Units waiting in the queue, per task name.
    fn queue_by_task(&self) -> BTreeMap<String, u64> {
        let units = self.units.lock().unwrap_or_else(|e| e.into_inner());
        let mut out = BTreeMap::new();
        let queued = units.live.values().flat_map(IdMap::values);
        for u in queued.filter(|u| u.queued_since.is_some()) {
            *out.entry(u.task.clone()).or_insert(0) += 1;
        }
        out
    }

    /// A worker session was registered or called at `now` (the driver's
    /// clock).
    pub fn session_seen(&self, session_id: &str, now: Millis) {
        let mut contacts = self.contacts.lock().unwrap_or_else(|e| e.into_inner());
        contacts.insert(session_id.to_owned(), now);
    }

    /// A worker session unregistered or is unknown to the engine.
    pub fn session_gone(&self, session_id: &str) {
        let mut contacts = self.contacts.lock().unwrap_or_else(|e| e.into_inner());
        contacts.remove(session_id);
    }

    /// Counts sessions heard from within `timeout_ms` of `now` (the engine expires the
    /// others), forgets the rest, and updates the `sessions` gauge.
    pub fn live_sessions(&self, timeout_ms: Millis, now: Millis) -> usize {
        let mut contacts = self.contacts.lock().unwrap_or_else(|e| e.into_inner());
        contacts.retain(|_, seen| now.saturating_sub(*seen) <= timeout_ms);
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
            (
                "orbit_spans_exported_total",
                "Trace spans the OTLP collector accepted.",
                &self.spans_exported,
            ),
            (
                "orbit_spans_dropped_total",
                "Trace spans dropped (queue full, export behind, collector unreachable).",
                &self.spans_dropped,
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
            (
                "orbit_executions_in_memory",
                "Executions held in the engine's memory (live ones, recently finished ones).",
                &self.in_memory,
            ),
            (
                "orbit_executions_evicted",
                "Running executions out of memory because they are idle (--idle-evict).",
                &self.evicted,
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
        self.handoff_latency.render(
            &mut out,
            "orbit_step_handoff_seconds",
            "Time from a unit's StepScheduled to its StepDispatched.",
        );
        self.attempt_duration.render(
            &mut out,
            "orbit_attempt_duration_seconds",
            "Time from StepDispatched to the attempt's success, failure or uncertainty.",
        );
        let _ = writeln!(
            out,
            "# HELP orbit_queue_depth_by_task Units queued and not yet dispatched, per task name."
        );
        let _ = writeln!(out, "# TYPE orbit_queue_depth_by_task gauge");
        for (task, n) in self.queue_by_task() {
            let _ = writeln!(
                out,
                "orbit_queue_depth_by_task{{task=\"{}\"}} {n}",
                label(&task)
            );
        }
        let _ = writeln!(
            out,
            "# HELP orbit_task_attempts_total Attempts that ended, per task name and outcome."
        );
        let _ = writeln!(out, "# TYPE orbit_task_attempts_total counter");
        let by_task = {
            let units = self.units.lock().unwrap_or_else(|e| e.into_inner());
            units.by_task.clone()
        };
        for (task, o) in by_task {
            let task = label(&task);
            for (outcome, n) in [
                ("succeeded", o.succeeded),
                ("failed", o.failed),
                ("uncertain", o.uncertain),
            ] {
                let _ = writeln!(
                    out,
                    "orbit_task_attempts_total{{task=\"{task}\",outcome=\"{outcome}\"}} {n}"
                );
            }
        }
        out
    }
}

/// A Prometheus label value: `\`, `"` and newlines escaped.
fn label(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn event(seq: u64, at: Millis, kind: serde_json::Value) -> Event {
        let mut v = kind;
        v["seq"] = json!(seq);
        v["at"] = json!(at);
        serde_json::from_value(v).unwrap()
    }

    fn scheduled(seq: u64, at: Millis, step: &str, task: &str) -> Event {
        event(
            seq,
            at,
            json!({"type": "StepScheduled", "step": step, "attempt": 1, "input": {},
                   "idempotency_key": step, "task": task, "contract_version": "1.0.0"}),
        )
    }

    #[test]
    fn handoff_attempt_durations_and_per_task_outcomes_come_from_the_history() {
        let m = Metrics::default();
        m.record_events(
            "e",
            &[
                scheduled(1, 1_000, "a", "orbit.http"),
                scheduled(2, 1_000, "b", "demo.work"),
                scheduled(3, 1_000, "c", "demo.work"),
            ],
        );
        assert_eq!(m.queue_depth.load(Ordering::Relaxed), 3);
        m.record_events(
            "e",
            &[
                event(4, 1_250, json!({"type": "StepDispatched", "step": "a", "attempt": 1, "worker_id": "orbit", "token": "t1"})),
                event(5, 3_250, json!({"type": "StepAttemptUncertain", "step": "a", "attempt": 1, "reason": "r"})),
                event(6, 3_300, json!({"type": "StepDispatched", "step": "b", "attempt": 1, "worker_id": "w", "token": "t2"})),
                event(7, 3_400, json!({"type": "StepSucceeded", "step": "b", "attempt": 1, "output": {}})),
            ],
        );
        assert_eq!(m.queue_depth.load(Ordering::Relaxed), 1);
        assert_eq!(m.handoff_latency.count(), 2);
        assert_eq!(m.attempt_duration.count(), 2);
        let text = m.render(&[]);
        for line in [
            "orbit_queue_depth_by_task{task=\"demo.work\"} 1",
            "orbit_task_attempts_total{task=\"orbit.http\",outcome=\"uncertain\"} 1",
            "orbit_task_attempts_total{task=\"demo.work\",outcome=\"succeeded\"} 1",
            "orbit_step_handoff_seconds_bucket{le=\"0.25\"} 1",
            "orbit_step_handoff_seconds_sum 2.55",
            "orbit_attempt_duration_seconds_bucket{le=\"2.5\"} 2",
        ] {
            assert!(text.contains(line), "missing {line} in\n{text}");
        }
        // Another execution's unit waits; `e` ends with `c` still queued
        // and `a` attempted: only the other one is left in the queue.
        m.record_events("f", &[scheduled(1, 4_000, "a", "demo.work")]);
        assert_eq!(m.queue_depth.load(Ordering::Relaxed), 2);
        m.record_events(
            "e",
            &[event(8, 4_100, json!({"type": "WorkflowCancelled"}))],
        );
        assert_eq!(m.queue_depth.load(Ordering::Relaxed), 1);
        assert!(m
            .render(&[])
            .contains("orbit_queue_depth_by_task{task=\"demo.work\"} 1"));
    }

    #[test]
    fn every_series_is_in_the_books_table() {
        let m = Metrics::default();
        m.record_events("e", &[scheduled(1, 1_000, "a", "demo.work")]);
        let text = m.render(&[]);
        let book = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../docs/src/server/observability.md"
        ))
        .unwrap();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                let name = rest.split(' ').next().unwrap();
                assert!(
                    book.contains(&format!("| `{name}` |")),
                    "{name} is not in the metrics table of docs/src/server/observability.md"
                );
            }
        }
    }

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(label("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }
}
