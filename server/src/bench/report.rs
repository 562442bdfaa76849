//! What a benchmark run measured, and how it is printed: one line of text
//! for people, JSON for scripts.

use serde::Serialize;
use std::time::Duration;

/// Latency percentiles in milliseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Percentiles {
    /// How many samples.
    pub count: usize,
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 99th percentile.
    pub p99: f64,
    /// Largest sample.
    pub max: f64,
}

impl Percentiles {
    /// Percentiles of `samples` (nearest rank); all zero when empty.
    pub fn of(samples: &mut [Duration]) -> Percentiles {
        if samples.is_empty() {
            return Percentiles::default();
        }
        samples.sort_unstable();
        let at = |q: f64| {
            let rank = ((q * samples.len() as f64).ceil() as usize).clamp(1, samples.len());
            ms(samples[rank - 1])
        };
        Percentiles {
            count: samples.len(),
            p50: at(0.50),
            p90: at(0.90),
            p99: at(0.99),
            max: ms(samples[samples.len() - 1]),
        }
    }
}

fn ms(d: Duration) -> f64 {
    (d.as_secs_f64() * 1_000_000.0).round() / 1_000.0
}

/// The outcome of one run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    /// `sqlite`, `postgres` or `remote`.
    pub backend: String,
    /// Executions asked for.
    pub executions: u64,
    /// Executions that completed.
    pub completed: u64,
    /// Executions that failed, were cancelled, or could not be started or
    /// followed.
    pub errors: u64,
    /// Task steps per workflow.
    pub steps_per_workflow: u32,
    /// Executions in flight at once.
    pub concurrency: u32,
    /// Worker sessions.
    pub workers: u32,
    /// Tasks a worker session holds at once.
    pub worker_concurrency: u32,
    /// Starts per second asked for (`None`: as fast as possible).
    pub rate: Option<f64>,
    /// Bytes of padding in each execution's input (`--input-bytes`).
    pub input_bytes: usize,
    /// Wall time from the first start to the last completion, in seconds.
    pub elapsed_s: f64,
    /// Task steps completed per second.
    pub steps_per_s: f64,
    /// Executions completed per second.
    pub executions_per_s: f64,
    /// Start request sent → execution seen completed.
    pub execution_latency_ms: Percentiles,
    /// A step's handler returned → the execution's next step's handler
    /// started (the result's commit, the next step's dispatch, and the
    /// HTTP in between).
    pub step_latency_ms: Percentiles,
    /// Whether the workers reported each result with its own call
    /// (`--legacy-results`) instead of on their polls.
    pub legacy_results: bool,
    /// HTTP requests the workers sent (register, polls, results,
    /// heartbeats, unregister).
    pub worker_requests: u64,
    /// `worker_requests` per task step.
    pub worker_requests_per_step: f64,
}

impl Report {
    /// The one-line summary.
    pub fn line(&self) -> String {
        let e = &self.execution_latency_ms;
        let s = &self.step_latency_ms;
        format!(
            "orbit bench: backend={} executions={} concurrency={} steps={} workers={} | \
             {:.0} steps/s, {:.1} executions/s in {:.2}s | \
             execution p50={:.2}ms p90={:.2}ms p99={:.2}ms | \
             step p50={:.2}ms p90={:.2}ms p99={:.2}ms | \
             worker requests/step={:.3}{} | errors={}",
            self.backend,
            self.executions,
            self.concurrency,
            self.steps_per_workflow,
            self.workers,
            self.steps_per_s,
            self.executions_per_s,
            self.elapsed_s,
            e.p50,
            e.p90,
            e.p99,
            s.p50,
            s.p90,
            s.p99,
            self.worker_requests_per_step,
            if self.legacy_results {
                " (legacy results)"
            } else {
                ""
            },
            self.errors,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let mut samples: Vec<Duration> = (1..=100).rev().map(Duration::from_millis).collect();
        let p = Percentiles::of(&mut samples);
        assert_eq!(p.count, 100);
        assert_eq!((p.p50, p.p90, p.p99, p.max), (50.0, 90.0, 99.0, 100.0));
        assert_eq!(Percentiles::of(&mut []), Percentiles::default());
        let mut one = vec![Duration::from_micros(1500)];
        assert_eq!(Percentiles::of(&mut one).p99, 1.5);
    }
}
