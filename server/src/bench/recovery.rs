//! `orbit bench --workload recovery`: the crash-recovery bar. A server
//! process piles up executions in flight (each mid-chain: its first steps
//! answered, the next one handed to a worker that never answers, about ten
//! events each), is killed with SIGKILL, and is started again on the same
//! store. Measured: spawn → `/readyz`, spawn → first API answer, the
//! server's own load-and-replay time, and spawn → every execution completed
//! once workers run again.

use super::process::{self, Memory, ServerProcess, Store};
use super::workload;
use super::BenchError;
use serde::Serialize;
use serde_json::{json, Value};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::Semaphore;

/// No progress for this long ends a phase with an error.
const STALL: Duration = Duration::from_secs(120);

/// What to run.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// Store (`sqlite://PATH`, `postgres://...`); `None`: a scratch SQLite
    /// file. A given store should be empty: its executions are recovered too.
    pub db: Option<String>,
    /// Executions in flight at the kill.
    pub executions: u64,
    /// Task steps of the chain; all but the last two are answered before
    /// the kill, the next-to-last is held (dispatched, never answered).
    pub steps: u32,
    /// Start requests in flight at once.
    pub concurrency: u32,
    /// Worker sessions.
    pub workers: u32,
    /// `--session-timeout` of the restarted server: how long it waits for
    /// the dead workers' tasks before handing them out again.
    pub session_timeout: Duration,
    /// Print progress to stderr.
    pub progress: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            db: None,
            executions: 10_000,
            steps: 4,
            concurrency: 200,
            workers: 4,
            session_timeout: Duration::from_secs(5),
            progress: false,
        }
    }
}

/// What a recovery run measured.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RecoveryReport {
    /// Always `recovery`.
    pub workload: String,
    /// `sqlite` or `postgres`.
    pub backend: String,
    /// Executions in flight at the kill.
    pub executions: u64,
    /// Task steps per workflow.
    pub steps_per_workflow: u32,
    /// Executions the restarted server loaded.
    pub recovered_executions: u64,
    /// Events the restarted server replayed.
    pub recovered_events: u64,
    /// Time to pile the executions up before the kill, in seconds.
    pub pile_up_s: f64,
    /// Restart: spawn → `/readyz` answered 200, in milliseconds.
    pub ready_ms: f64,
    /// Restart: spawn → first execution read answered, in milliseconds.
    pub first_answer_ms: f64,
    /// The server's own load-and-replay time (its `recovered` log line).
    pub recovery_ms: u64,
    /// Resident memory of the restarted server once ready, in MiB.
    pub rss_after_recovery_mib: f64,
    /// The restarted server's session timeout, in milliseconds (the grace
    /// before the dead workers' tasks are handed out again).
    pub session_timeout_ms: u64,
    /// Restart: spawn → every execution completed, in seconds.
    pub complete_s: f64,
    /// Executions that completed after the restart.
    pub completed: u64,
    /// Executions that failed, were cancelled, or never completed.
    pub errors: u64,
}

impl RecoveryReport {
    /// The one-line summary.
    pub fn line(&self) -> String {
        format!(
            "orbit bench recovery: backend={} executions={} steps={} | killed with {} executions / {} events in flight | \
             ready in {:.0}ms (first answer {:.0}ms, replay {}ms, rss {:.1} MiB) | \
             all complete {:.2}s after restart (session timeout {}ms) | completed={} errors={}",
            self.backend,
            self.executions,
            self.steps_per_workflow,
            self.recovered_executions,
            self.recovered_events,
            self.ready_ms,
            self.first_answer_ms,
            self.recovery_ms,
            self.rss_after_recovery_mib,
            self.complete_s,
            self.session_timeout_ms,
            self.completed,
            self.errors,
        )
    }
}

/// Counters shared by the worker sessions of one phase.
#[derive(Default)]
struct Phase {
    stop: AtomicBool,
    answered: AtomicU64,
    held: AtomicU64,
}

/// Runs the recovery workload.
pub async fn run(config: &Config) -> Result<RecoveryReport, BenchError> {
    if config.executions == 0 || config.steps == 0 || config.concurrency == 0 {
        return Err(BenchError::Usage(
            "--executions, --steps and --concurrency must be at least 1".into(),
        ));
    }
    let store = Store::new(config.db.as_deref())?;
    let logs = store.dir.clone();
    let http = process::client()?;
    let run_id = uuid::Uuid::new_v4().simple().to_string();
    let workers = config.workers.max(1);
    let hold_from = i64::from(config.steps.saturating_sub(2));

    // Before the kill: nothing expires while the executions pile up.
    let mut first = ServerProcess::spawn(
        &store.url,
        &["--session-timeout".into(), "1h".into()],
        &logs.join("before-kill.log"),
    )?;
    first.wait_ready(&http).await?;
    process::deploy(&http, &first.url, &workload::source(config.steps)).await?;
    let base = process::counts(&http, &first.url).await?;

    let began = Instant::now();
    let before = Arc::new(Phase::default());
    let sessions = spawn_workers(&http, &first.url, workers, Some(hold_from), &before);
    let start_errors = start_all(&http, &first.url, config, &run_id).await;
    if start_errors > 0 {
        return Err(BenchError::Server(format!(
            "{start_errors} executions could not be started"
        )));
    }
    let mut last = (0, Instant::now());
    loop {
        let held = before.held.load(Ordering::SeqCst);
        if held >= config.executions {
            break;
        }
        if held > last.0 {
            last = (held, Instant::now());
        } else if last.1.elapsed() > STALL {
            return Err(BenchError::Server(format!(
                "only {held} of {} executions reached their held step",
                config.executions
            )));
        }
        if config.progress {
            eprintln!(
                "orbit bench recovery: {:>6.1}s {held}/{} executions in flight at their held step",
                began.elapsed().as_secs_f64(),
                config.executions
            );
        }
        tokio::time::sleep(Duration::from_millis(if config.progress {
            1000
        } else {
            50
        }))
        .await;
    }
    let pile_up = began.elapsed();
    first.kill()?;
    before.stop.store(true, Ordering::SeqCst);
    for s in sessions {
        s.abort();
    }

    // The restart.
    let timeout_ms = u64::try_from(config.session_timeout.as_millis()).unwrap_or(u64::MAX);
    let mut second = ServerProcess::spawn(
        &store.url,
        &["--session-timeout".into(), format!("{timeout_ms}ms")],
        &logs.join("after-kill.log"),
    )?;
    let ready = second.wait_ready(&http).await?;
    let probe = format!("{}/v1/executions/bench-{run_id}-0", second.url);
    let first_answer = loop {
        if process::call(&http, reqwest::Method::GET, &probe, None)
            .await
            .is_ok()
        {
            break second.spawned.elapsed();
        }
        if second.spawned.elapsed() > process::READY_TIMEOUT {
            return Err(BenchError::Server(format!("{probe} never answered")));
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    };
    let memory = second.memory().unwrap_or(Memory::default());
    let recovered = second.recovered();
    if config.progress {
        eprintln!(
            "orbit bench recovery: ready {:.0}ms after the restart",
            process::millis(ready)
        );
    }

    let after = Arc::new(Phase::default());
    let sessions = spawn_workers(&http, &second.url, workers, None, &after);
    let mut last = (0, Instant::now());
    let mut tick = Instant::now();
    let done = loop {
        let now = process::counts(&http, &second.url).await?.since(&base);
        if now.completed >= config.executions || now.pending + now.running == 0 {
            break now;
        }
        if now.completed > last.0 {
            last = (now.completed, Instant::now());
        } else if last.1.elapsed() > STALL {
            break now;
        }
        if config.progress && tick.elapsed() >= Duration::from_secs(1) {
            tick = Instant::now();
            eprintln!(
                "orbit bench recovery: {:>6.1}s after the restart {}/{} completed",
                second.spawned.elapsed().as_secs_f64(),
                now.completed,
                config.executions
            );
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let complete = second.spawned.elapsed();
    after.stop.store(true, Ordering::SeqCst);
    for s in sessions {
        let _ = s.await;
    }
    second.kill()?;

    let completed = done.completed.min(config.executions);
    let recovered = recovered.unwrap_or(process::Recovered {
        executions: 0,
        events: 0,
        elapsed_ms: 0,
    });
    Ok(RecoveryReport {
        workload: "recovery".into(),
        backend: store.backend.into(),
        executions: config.executions,
        steps_per_workflow: config.steps,
        recovered_executions: recovered.executions,
        recovered_events: recovered.events,
        pile_up_s: round3(pile_up.as_secs_f64()),
        ready_ms: process::millis(ready),
        first_answer_ms: process::millis(first_answer),
        recovery_ms: recovered.elapsed_ms,
        rss_after_recovery_mib: process::mib(memory.rss),
        session_timeout_ms: timeout_ms,
        complete_s: round3(complete.as_secs_f64()),
        completed,
        errors: config.executions - completed,
    })
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// Starts every execution (`concurrency` requests at once); the number of
/// starts that failed.
async fn start_all(http: &reqwest::Client, base: &str, config: &Config, run_id: &str) -> u64 {
    let next = Arc::new(AtomicU64::new(0));
    let errors = Arc::new(AtomicU64::new(0));
    let workflow = workload::workflow_name(config.steps);
    let mut starters = Vec::new();
    for _ in 0..config.concurrency {
        let (http, base, next, errors, workflow, run_id) = (
            http.clone(),
            base.to_owned(),
            next.clone(),
            errors.clone(),
            workflow.clone(),
            run_id.to_owned(),
        );
        let total = config.executions;
        starters.push(tokio::spawn(async move {
            let url = format!("{base}/v1/executions");
            loop {
                let n = next.fetch_add(1, Ordering::SeqCst);
                if n >= total {
                    return;
                }
                let body = json!({"workflow": workflow, "input": {"n": 0}, "execution_id": format!("bench-{run_id}-{n}")});
                if let Err(e) = process::call(&http, reqwest::Method::POST, &url, Some(&body)).await
                {
                    tracing::warn!(error = %e, "start failed");
                    errors.fetch_add(1, Ordering::SeqCst);
                }
            }
        }));
    }
    for s in starters {
        let _ = s.await;
    }
    errors.load(Ordering::SeqCst)
}

fn spawn_workers(
    http: &reqwest::Client,
    base: &str,
    count: u32,
    hold_from: Option<i64>,
    phase: &Arc<Phase>,
) -> Vec<tokio::task::JoinHandle<()>> {
    let answering = Arc::new(Semaphore::new(256));
    (0..count)
        .map(|i| {
            let (http, base, phase, answering) = (
                http.clone(),
                base.to_owned(),
                phase.clone(),
                answering.clone(),
            );
            tokio::spawn(async move {
                worker(
                    http,
                    base,
                    format!("bench-{i}"),
                    hold_from,
                    phase,
                    answering,
                )
                .await
            })
        })
        .collect()
}

/// One worker session: answers each task with `n + 1`, except tasks whose
/// input `n` is at least `hold_from`, which it keeps and never answers.
async fn worker(
    http: reqwest::Client,
    base: String,
    name: String,
    hold_from: Option<i64>,
    phase: Arc<Phase>,
    answering: Arc<Semaphore>,
) {
    let mut session: Option<String> = None;
    while !phase.stop.load(Ordering::SeqCst) {
        let sid = match &session {
            Some(s) => s.clone(),
            None => {
                let body =
                    json!({"worker_id": name, "task_patterns": ["bench.*"], "max_tasks": 1000});
                let registered = process::call(
                    &http,
                    reqwest::Method::POST,
                    &format!("{base}/v1/workers"),
                    Some(&body),
                )
                .await;
                match registered
                    .ok()
                    .and_then(|v| v.get("session_id")?.as_str().map(str::to_owned))
                {
                    Some(s) => {
                        session = Some(s.clone());
                        s
                    }
                    None => {
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                }
            }
        };
        let body = json!({"max_tasks": 1000, "wait_ms": 500});
        let polled = process::call(
            &http,
            reqwest::Method::POST,
            &format!("{base}/v1/workers/{sid}/poll"),
            Some(&body),
        )
        .await;
        let tasks = match polled {
            Ok(v) => match v.get("tasks") {
                Some(Value::Array(tasks)) => tasks.clone(),
                _ => Vec::new(),
            },
            Err(e) => {
                if e.contains("UNKNOWN_SESSION") {
                    session = None;
                } else {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                continue;
            }
        };
        for task in tasks {
            let n = task
                .pointer("/input/n")
                .and_then(Value::as_i64)
                .unwrap_or(0);
            if hold_from.is_some_and(|h| n >= h) {
                phase.held.fetch_add(1, Ordering::SeqCst);
                continue;
            }
            let Some(token) = task.get("token").and_then(Value::as_str) else {
                continue;
            };
            let Ok(permit) = answering.clone().acquire_owned().await else {
                return;
            };
            let url = format!("{base}/v1/tasks/{token}/result");
            let (http, phase) = (http.clone(), phase.clone());
            tokio::spawn(async move {
                let body = json!({"output": {"n": n + 1}});
                for attempt in 0..5u32 {
                    match process::call(&http, reqwest::Method::POST, &url, Some(&body)).await {
                        Ok(_) => {
                            phase.answered.fetch_add(1, Ordering::SeqCst);
                            break;
                        }
                        Err(e) => {
                            if phase.stop.load(Ordering::SeqCst) {
                                break;
                            }
                            tracing::warn!(error = %e, attempt, "result failed");
                            tokio::time::sleep(Duration::from_millis(50 << attempt)).await;
                        }
                    }
                }
                drop(permit);
            });
        }
    }
    if let Some(sid) = session {
        let _ = process::call(
            &http,
            reqwest::Method::DELETE,
            &format!("{base}/v1/workers/{sid}"),
            None,
        )
        .await;
    }
}
