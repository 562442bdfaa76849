//! The load: starters that keep `concurrency` executions in flight (each
//! starts one and waits for it to finish, in one request, then starts the
//! next), and worker sessions
//! of the Rust SDK ([`orbit_sdk::Worker`]) over real HTTP, timing execution
//! latency and the hand-off from one step's handler returning to the next
//! step's handler starting, and counting the workers' HTTP requests.
//!
//! Against several servers (a shared-mode cluster) each starter and worker
//! has a server of its own and moves to the next one while its own cannot
//! be reached, as a client of a cluster should: a member killed mid-run
//! costs the run its takeover, not the executions started through it.

use super::http::{Base, CallError, Http};
use super::report::{Percentiles, Report};
use super::workload;
use super::{BenchError, Config};
use hyper::Method;
use orbit_sdk::{
    default_transport, BoxFuture, FailoverTransport, HttpRequest, HttpResponse, Task, Transport,
    TransportError, Worker, DEFAULT_FAILOVER_WINDOW,
};
use serde::de::{DeserializeOwned, IgnoredAny};
use serde::Deserialize;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// State shared by starters, workers and the progress printer.
#[derive(Default)]
struct Shared {
    next: AtomicU64,
    completed: AtomicU64,
    errors: AtomicU64,
    steps: AtomicU64,
    stop: AtomicBool,
    /// HTTP requests the workers sent.
    worker_requests: AtomicU64,
    /// Execution id → when the handler of its previous step returned.
    handoff: Mutex<HashMap<String, Instant>>,
    execution_samples: Mutex<Vec<Duration>>,
    step_samples: Mutex<Vec<Duration>>,
    /// Start pacing for `--rate`: when the next start may go.
    pace: tokio::sync::Mutex<Option<Instant>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// What a start that waits answers, as far as the starters look: the
/// execution, when the server waited (one that does not know `wait_ms`
/// answers without it).
#[derive(Deserialize)]
struct StartAnswer {
    execution: Option<Seen>,
}

/// An execution as `GET` and `/wait` show it, as far as the starters look.
#[derive(Deserialize)]
struct Seen {
    status: String,
}

/// `items` seen from the `i`-th starter or worker: its own first, then the
/// others in turn.
fn rotated<T: Clone>(items: &[T], i: usize) -> Vec<T> {
    let mut items = items.to_vec();
    let first = i % items.len().max(1);
    items.rotate_left(first);
    items
}

/// The servers one starter talks to: its own first, then the others in
/// turn while the current one cannot be reached.
struct Servers {
    /// Parsed once: a request's URI is its server's with the call's path.
    bases: Vec<Base>,
    current: usize,
}

impl Servers {
    /// `bases` seen from the `i`-th starter: its own server first.
    fn nth(bases: &[Base], i: usize) -> Servers {
        Servers {
            bases: rotated(bases, i),
            current: 0,
        }
    }

    /// Calls `path` on the current server; while it cannot be reached, on
    /// the next ones, pausing 100 ms after each round over all of them,
    /// for up to [`DEFAULT_FAILOVER_WINDOW`] (one server: no second try,
    /// its error is the answer). Every call the bench sends is safe to
    /// repeat (a start names its execution id, a deploy is idempotent).
    async fn call<T: DeserializeOwned>(
        &mut self,
        http: &Http,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<T, CallError> {
        let deadline = Instant::now() + DEFAULT_FAILOVER_WINDOW;
        let mut tried = 0;
        loop {
            let base = &self.bases[self.current];
            match http.call(method.clone(), base, path, body).await {
                Err(CallError::Unreachable(e))
                    if self.bases.len() > 1 && Instant::now() < deadline =>
                {
                    tracing::debug!(error = %e, "server unreachable, trying the next one");
                    self.current = (self.current + 1) % self.bases.len();
                    tried += 1;
                    if tried % self.bases.len() == 0 {
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                }
                answer => return answer,
            }
        }
    }
}

/// Deploys the workload on the first of `servers` that answers.
async fn deploy(http: &Http, servers: &mut Servers, steps: u32) -> Result<(), BenchError> {
    let body = json!({"source": workload::source(steps), "filename": "bench.orbit"});
    servers
        .call::<IgnoredAny>(http, Method::POST, "/v1/definitions", Some(&body))
        .await
        .map(|_| ())
        .map_err(|e| BenchError::Server(e.to_string()))
}

/// Runs the load against `bases` (starts and workers in turn over them;
/// the workload is deployed on the first that answers) and reports what it
/// measured.
pub async fn run(config: &Config, bases: &[String], backend: &str) -> Result<Report, BenchError> {
    if bases.is_empty() {
        return Err(BenchError::Usage("no server to drive".into()));
    }
    let urls = bases
        .iter()
        .map(|b| Base::parse(b).map_err(BenchError::Usage))
        .collect::<Result<Vec<_>, _>>()?;
    // A paused server holds its connections: a call with no answer for
    // longer than the longest wait goes on to another server.
    let http = Http::new(WAIT_TIMEOUT + Duration::from_secs(5));
    deploy(&http, &mut Servers::nth(&urls, 0), config.steps).await?;
    let shared = Arc::new(Shared::default());
    let run_id = uuid::Uuid::new_v4().simple().to_string();

    let mut workers = Vec::new();
    for i in 0..config.workers {
        let servers = rotated(bases, i as usize);
        let worker = worker(config, &servers, &shared, format!("bench-{i}"))?;
        let shared = shared.clone();
        workers.push(tokio::spawn(async move {
            let stopped = async {
                while !shared.stop.load(Ordering::SeqCst) {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            };
            if let Err(e) = worker.run(stopped).await {
                tracing::warn!(error = %e, "worker refused");
            }
        }));
    }

    let started = Instant::now();
    let progress = if config.progress {
        let (shared, total) = (shared.clone(), config.executions);
        Some(tokio::spawn(async move {
            progress(shared, total, started).await
        }))
    } else {
        None
    };
    let every_input = input(config.input_bytes);
    let mut starters = Vec::new();
    for i in 0..config.concurrency.max(1) {
        let (http, servers, shared, run_id) = (
            http.clone(),
            Servers::nth(&urls, i as usize),
            shared.clone(),
            run_id.clone(),
        );
        let load = Load {
            total: config.executions,
            steps: config.steps,
            rate: config.rate,
            input: every_input.clone(),
        };
        starters.push(tokio::spawn(async move {
            starter(http, servers, shared, run_id, load).await
        }));
    }
    for s in starters {
        let _ = s.await;
    }
    let elapsed = started.elapsed();
    shared.stop.store(true, Ordering::SeqCst);
    if let Some(p) = progress {
        p.abort();
    }
    for w in workers {
        let _ = w.await;
    }

    let completed = shared.completed.load(Ordering::SeqCst);
    let steps = shared.steps.load(Ordering::SeqCst);
    let worker_requests = shared.worker_requests.load(Ordering::SeqCst);
    let secs = elapsed.as_secs_f64().max(1e-9);
    let mut execution_samples = std::mem::take(&mut *lock(&shared.execution_samples));
    let mut step_samples = std::mem::take(&mut *lock(&shared.step_samples));
    Ok(Report {
        backend: backend.to_owned(),
        executions: config.executions,
        completed,
        errors: shared.errors.load(Ordering::SeqCst),
        steps_per_workflow: config.steps,
        concurrency: config.concurrency,
        workers: config.workers,
        worker_concurrency: config.worker_concurrency,
        rate: config.rate,
        input_bytes: config.input_bytes,
        elapsed_s: (secs * 1000.0).round() / 1000.0,
        steps_per_s: (steps as f64 / secs).round(),
        executions_per_s: (completed as f64 / secs * 10.0).round() / 10.0,
        execution_latency_ms: Percentiles::of(&mut execution_samples),
        step_latency_ms: Percentiles::of(&mut step_samples),
        legacy_results: config.legacy_results,
        worker_requests,
        worker_requests_per_step: (worker_requests as f64 / steps.max(1) as f64 * 1000.0).round()
            / 1000.0,
    })
}

async fn progress(shared: Arc<Shared>, total: u64, started: Instant) {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.tick().await;
    let mut last_steps = 0;
    loop {
        tick.tick().await;
        let steps = shared.steps.load(Ordering::Relaxed);
        eprintln!(
            "orbit bench: {:>6.1}s {}/{} executions done, {} steps/s, {} errors",
            started.elapsed().as_secs_f64(),
            shared.completed.load(Ordering::Relaxed),
            total,
            steps - last_steps,
            shared.errors.load(Ordering::Relaxed),
        );
        last_steps = steps;
    }
}

async fn pace(shared: &Shared, rate: Option<f64>) {
    let Some(rate) = rate.filter(|r| *r > 0.0) else {
        return;
    };
    let gap = Duration::from_secs_f64(1.0 / rate);
    let at = {
        let mut next = shared.pace.lock().await;
        let now = Instant::now();
        let at = next.map_or(now, |n| n.max(now));
        *next = Some(at + gap);
        at
    };
    tokio::time::sleep_until(at.into()).await;
}

/// What one starter starts.
struct Load {
    /// Executions to start in all (shared by the starters).
    total: u64,
    steps: u32,
    rate: Option<f64>,
    /// Every execution's input.
    input: Value,
}

/// The input of every execution: `n` at 0, and when asked for a `pad` of
/// about `bytes` bytes of JSON, as a list of short strings (an input is
/// usually many small values, not one long one).
fn input(bytes: usize) -> Value {
    if bytes == 0 {
        return json!({"n": 0});
    }
    // Each item is 32 bytes of JSON: 29 characters, quotes and a comma.
    let pad: Vec<Value> = (0..bytes.div_ceil(32))
        .map(|i| Value::String(format!("item-{i:08}-{}", "x".repeat(15))))
        .collect();
    json!({"n": 0, "pad": pad})
}

async fn starter(
    http: Http,
    mut servers: Servers,
    shared: Arc<Shared>,
    run_id: String,
    load: Load,
) {
    let workflow = workload::workflow_name(load.steps);
    loop {
        let n = shared.next.fetch_add(1, Ordering::SeqCst);
        if n >= load.total {
            return;
        }
        pace(&shared, load.rate).await;
        let id = format!("bench-{run_id}-{n}");
        let body = json!({"workflow": workflow, "input": load.input, "execution_id": id});
        let begun = Instant::now();
        // A start that waits: one request for the whole execution when it
        // ends within the wait (a server that does not know `wait_ms`
        // answers at once, without `execution`, and the `/wait` below
        // follows).
        let started = servers
            .call::<StartAnswer>(&http, Method::POST, &START_AND_WAIT, Some(&body))
            .await;
        let ended = match started {
            Ok(answer) => answer.execution.and_then(terminal),
            Err(e) => {
                tracing::warn!(error = %e, "start failed");
                shared.errors.fetch_add(1, Ordering::SeqCst);
                continue;
            }
        };
        let ended = match ended {
            Some(status) => Ok(status),
            None => wait_terminal(&http, &mut servers, &id).await,
        };
        match ended {
            Ok(status) if status == "completed" => {
                lock(&shared.execution_samples).push(begun.elapsed());
                shared.completed.fetch_add(1, Ordering::SeqCst);
            }
            Ok(status) => {
                tracing::warn!(execution_id = %id, %status, "execution did not complete");
                shared.errors.fetch_add(1, Ordering::SeqCst);
            }
            Err(e) => {
                tracing::warn!(execution_id = %id, error = %e, "wait failed");
                shared.errors.fetch_add(1, Ordering::SeqCst);
            }
        }
        lock(&shared.handoff).remove(&id);
    }
}

/// How long one `/wait` long-poll (or a start that waits) asks the server
/// to hold it.
const WAIT_TIMEOUT: Duration = Duration::from_secs(30);

/// A start that waits up to [`WAIT_TIMEOUT`].
static START_AND_WAIT: std::sync::LazyLock<String> =
    std::sync::LazyLock::new(|| format!("/v1/executions?wait_ms={}", WAIT_TIMEOUT.as_millis()));

/// The status of `execution` if it has finished.
fn terminal(execution: Seen) -> Option<String> {
    matches!(
        execution.status.as_str(),
        "completed" | "failed" | "cancelled"
    )
    .then_some(execution.status)
}

/// Long-polls `/wait` until the execution is terminal; its final status.
async fn wait_terminal(http: &Http, servers: &mut Servers, id: &str) -> Result<String, String> {
    let path = format!(
        "/v1/executions/{id}/wait?timeout_ms={}",
        WAIT_TIMEOUT.as_millis()
    );
    let mut failures = 0;
    loop {
        match servers.call::<Seen>(http, Method::POST, &path, None).await {
            Ok(seen) => {
                if let Some(status) = terminal(seen) {
                    return Ok(status);
                }
            }
            Err(e) => {
                failures += 1;
                if failures >= 5 {
                    return Err(e.to_string());
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

/// A transport that counts the requests it sends.
struct Counting {
    inner: Arc<dyn Transport>,
    shared: Arc<Shared>,
}

impl Transport for Counting {
    fn send(&self, request: HttpRequest) -> BoxFuture<'_, Result<HttpResponse, TransportError>> {
        self.shared.worker_requests.fetch_add(1, Ordering::Relaxed);
        self.inner.send(request)
    }
}

/// One worker session of the Rust SDK: answers each task with `n + 1`,
/// timing the hand-off from the previous step of the same execution.
/// `servers`: the worker's own first, then the others it moves to while
/// its own cannot be reached.
fn worker(
    config: &Config,
    servers: &[String],
    shared: &Arc<Shared>,
    name: String,
) -> Result<Worker, BenchError> {
    let refused = |e: TransportError| BenchError::Server(e.to_string());
    let inner: Arc<dyn Transport> = match servers {
        [one] => default_transport(one).map_err(refused)?,
        several => Arc::new(FailoverTransport::new(several).map_err(refused)?),
    };
    let transport = Counting {
        inner,
        shared: shared.clone(),
    };
    let handler_shared = shared.clone();
    Ok(Worker::builder(name)
        .patterns(vec!["bench.*".into()])
        .max_tasks(config.worker_concurrency.max(1) as usize)
        .poll_wait(Duration::from_millis(config.poll_wait_ms))
        .results_on_poll(!config.legacy_results)
        .shutdown_grace(Duration::from_secs(5))
        .handler(workload::TASK, move |task: Task| {
            let shared = handler_shared.clone();
            async move {
                let begun = Instant::now();
                if let Some(sent) = lock(&shared.handoff).remove(&task.execution_id) {
                    lock(&shared.step_samples).push(begun.duration_since(sent));
                }
                let n = task.input.get("n").and_then(Value::as_i64).unwrap_or(0);
                shared.steps.fetch_add(1, Ordering::SeqCst);
                lock(&shared.handoff).insert(task.execution_id, Instant::now());
                Ok(json!({"n": n + 1}))
            }
        })
        .build(Arc::new(transport)))
}
