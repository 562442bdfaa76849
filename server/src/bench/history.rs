//! `orbit bench --workload history`: the bars of a server with a long past.
//! A server process registers a one-step workflow; then the store is filled
//! with finished executions of it **written directly in bulk** (through
//! the same `Storage::commit` the server uses, thousands of executions per
//! transaction; running a million executions through workers would take
//! hours), each with the six events a real run records. The server is
//! started again on that store and measured: time to `/readyz`, resident
//! memory at idle, then p50/p99 of reading the status and the history of
//! old executions and of list pages under each filter.

use super::process::{self, mib, millis, Memory, ServerProcess, Store};
use super::report::Percentiles;
use super::target::open_store;
use super::BenchError;
use orbit_core::history::{Event, EventKind};
use orbit_io_tokio::storage::{Append, ExecutionRow, Storage, Transaction};
use serde::Serialize;
use serde_json::{json, Value};
use std::time::{Duration, Instant};

/// The workflow's name.
pub const WORKFLOW: &str = "BenchHistory";
/// Executions written per transaction.
const CHUNK: u64 = 2_000;
/// Reads sampled per kind.
const SAMPLES: usize = 200;

/// The `.orbit` source: one task step.
pub fn source() -> String {
    format!(
        "task \"bench.once\" version \"1.0.0\" {{\n    input {{ n: Int }}\n    output {{ n: Int }}\n}}\n\n\
         workflow {WORKFLOW} version \"1.0.0\" {{\n    input {{ n: Int }}\n\n    \
         step work {{ worker \"bench.once\" with {{ n: input.n }} }}\n    output {{ n: work.n }}\n}}\n"
    )
}

/// What to run.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// Store (`sqlite://PATH`, `postgres://...`); `None`: a scratch SQLite
    /// file. A given store should be empty.
    pub db: Option<String>,
    /// Finished executions written.
    pub executions: u64,
    /// Print progress to stderr.
    pub progress: bool,
}

/// What a history run measured.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HistoryReport {
    /// Always `history`.
    pub workload: String,
    /// `sqlite` or `postgres`.
    pub backend: String,
    /// Finished executions in the store.
    pub executions: u64,
    /// Events written in all.
    pub events: u64,
    /// Time to write them, in seconds.
    pub fill_s: f64,
    /// From spawning the restarted server to its first `200` on `/readyz`,
    /// in milliseconds.
    pub ready_ms: f64,
    /// Resident memory of the restarted server at idle, in MiB.
    pub rss_mib: f64,
    /// Peak resident memory of the restarted server, in MiB.
    pub rss_peak_mib: f64,
    /// `GET /v1/executions/{id}` of old executions.
    pub status: Percentiles,
    /// `GET /v1/executions/{id}/history` of old executions.
    pub history: Percentiles,
    /// `GET /v1/executions?limit=50`, under each filter in turn.
    pub list: Percentiles,
    /// Reads that failed.
    pub errors: u64,
}

impl HistoryReport {
    /// One line of text.
    pub fn line(&self) -> String {
        format!(
            "history ({}): {} finished executions ({} events, filled in {:.1}s); restart: \
             ready in {:.0} ms, {:.1} MiB RSS at idle (peak {:.1}); p50/p99 ms: status \
             {:.2}/{:.2}, history {:.2}/{:.2}, list page {:.2}/{:.2}; {} errors",
            self.backend,
            self.executions,
            self.events,
            self.fill_s,
            self.ready_ms,
            self.rss_mib,
            self.rss_peak_mib,
            self.status.p50,
            self.status.p99,
            self.history.p50,
            self.history.p99,
            self.list.p50,
            self.list.p99,
            self.errors
        )
    }
}

/// Milliseconds since the epoch now.
fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// The id of the `i`th execution.
fn id_of(i: u64) -> String {
    format!("hist-{i:09}")
}

/// The six events and the row of one finished execution created at `at`.
fn finished(i: u64, at: u64, hash: &str) -> Append {
    let id = id_of(i);
    let n = json!(i);
    let kinds = [
        EventKind::WorkflowCreated {
            workflow: WORKFLOW.to_owned(),
            version: "1.0.0".to_owned(),
            definition_hash: hash.to_owned(),
            input: json!({"n": n}),
            parent: None,
            traceparent: None,
        },
        EventKind::WorkflowStarted {},
        EventKind::StepScheduled {
            step: "work".to_owned(),
            attempt: 1,
            redelivery: false,
            input: json!({"n": n}).into(),
            idempotency_key: format!("{id}/work"),
            task: "bench.once".to_owned(),
            contract_version: "1.0.0".to_owned(),
        },
        EventKind::StepDispatched {
            step: "work".to_owned(),
            attempt: 1,
            worker_id: "bench".to_owned(),
            token: uuid::Uuid::new_v4().to_string(),
        },
        EventKind::StepSucceeded {
            step: "work".to_owned(),
            attempt: 1,
            output: json!({"n": n}).into(),
        },
        EventKind::WorkflowCompleted {
            output: json!({"n": n}),
        },
    ];
    let events: Vec<Event> = kinds
        .into_iter()
        .enumerate()
        .map(|(k, kind)| Event {
            seq: k as u64 + 1,
            at: at + k as u64,
            kind,
        })
        .collect();
    Append {
        execution_id: id.clone(),
        after_seq: 0,
        after_status: None,
        fence: None,
        projection: ExecutionRow {
            id,
            workflow: WORKFLOW.to_owned(),
            version: "1.0.0".to_owned(),
            definition_hash: hash.to_owned(),
            status: "completed".to_owned(),
            parent: None,
            input: json!({"n": n}).into(),
            output: Some(json!({"n": n})),
            error: None,
            created_at: at,
            updated_at: at + 5,
            last_seq: 6,
        },
        events: events.into(),
    }
}

/// Writes `count` finished executions, one ms apart, ending an hour ago.
async fn fill(
    store: &dyn Storage,
    count: u64,
    hash: &str,
    progress: bool,
) -> Result<(), BenchError> {
    let first = now_ms().saturating_sub(3_600_000 + count);
    let mut i = 0;
    while i < count {
        let end = (i + CHUNK).min(count);
        let tx = Transaction {
            appends: (i..end).map(|k| finished(k, first + k, hash)).collect(),
            ..Transaction::default()
        };
        store.commit(&tx).await?;
        i = end;
        if progress && i % 100_000 < CHUNK {
            eprintln!("  filled {i} of {count}");
        }
    }
    Ok(())
}

/// Times `SAMPLES` GETs of `urls` (cycled); failures are counted.
async fn sample(http: &reqwest::Client, urls: &[String], errors: &mut u64) -> Percentiles {
    let mut times = Vec::with_capacity(SAMPLES);
    for k in 0..SAMPLES {
        let url = &urls[k % urls.len()];
        let started = Instant::now();
        let ok = match http.get(url).send().await {
            Ok(r) => r.status().is_success() && r.bytes().await.is_ok(),
            Err(_) => false,
        };
        times.push(started.elapsed());
        if !ok {
            *errors += 1;
        }
    }
    Percentiles::of(&mut times)
}

/// Runs the workload.
pub async fn run(config: &Config) -> Result<HistoryReport, BenchError> {
    if config.executions == 0 {
        return Err(BenchError::Usage("--executions must be at least 1".into()));
    }
    let store = Store::new(config.db.as_deref())?;
    let http = process::client()?;
    // A first server creates the schema and registers the workflow.
    let mut server = ServerProcess::spawn(&store.url, &[], &store.dir.join("first.log"))?;
    server.wait_ready(&http).await?;
    process::deploy(&http, &server.url, &source()).await?;
    let defs = process::call(
        &http,
        reqwest::Method::GET,
        &format!("{}/v1/definitions", server.url),
        None,
    )
    .await
    .map_err(BenchError::Server)?;
    let hash = definition_hash(&defs)
        .ok_or_else(|| BenchError::Server("the deployed workflow is not listed".into()))?;
    server.kill()?;
    if config.progress {
        eprintln!("filling {} finished executions…", config.executions);
    }
    let started = Instant::now();
    {
        let (direct, _) = open_store(&store.url, 1).await?;
        fill(direct.as_ref(), config.executions, &hash, config.progress).await?;
    }
    let fill_s = started.elapsed().as_secs_f64();
    let mut server = ServerProcess::spawn(&store.url, &[], &store.dir.join("second.log"))?;
    let ready = server.wait_ready(&http).await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let memory = Memory::of(server.pid())?;
    let base = server.url.clone();
    let step = (config.executions / SAMPLES as u64).max(1);
    let old: Vec<String> = (0..SAMPLES as u64)
        .map(|k| id_of((k * step) % config.executions))
        .collect();
    let mut errors = 0;
    let status_urls: Vec<String> = old
        .iter()
        .map(|id| format!("{base}/v1/executions/{id}"))
        .collect();
    let history_urls: Vec<String> = old
        .iter()
        .map(|id| format!("{base}/v1/executions/{id}/history"))
        .collect();
    let middle = process::call(&http, reqwest::Method::GET, &status_urls[SAMPLES / 2], None)
        .await
        .map_err(BenchError::Server)?;
    let created = middle["created_at"].as_str().unwrap_or_default().to_owned();
    let mut list_urls = vec![
        format!("{base}/v1/executions?limit=50"),
        format!("{base}/v1/executions?limit=50&status=completed"),
        format!("{base}/v1/executions?limit=50&workflow={WORKFLOW}"),
        format!("{base}/v1/executions?limit=50&workflow={WORKFLOW}&version=1.0.0"),
        format!("{base}/v1/executions?limit=50&workflow={WORKFLOW}&status=completed"),
        format!("{base}/v1/executions?limit=50&created_before={created}"),
        format!("{base}/v1/executions?limit=50&status=failed"),
    ];
    // A page deep in the table, through a cursor.
    let deep = old[SAMPLES / 2].clone();
    let millis_of_created = middle["created_at"]
        .as_str()
        .and_then(|t| {
            time::OffsetDateTime::parse(t, &time::format_description::well_known::Rfc3339).ok()
        })
        .map(|t| t.unix_timestamp_nanos() / 1_000_000)
        .unwrap_or_default();
    list_urls.push(format!(
        "{base}/v1/executions?limit=50&cursor={millis_of_created}:{deep}"
    ));
    let status = sample(&http, &status_urls, &mut errors).await;
    let history = sample(&http, &history_urls, &mut errors).await;
    let list = sample(&http, &list_urls, &mut errors).await;
    let peak = Memory::of(server.pid())?;
    server.kill()?;
    Ok(HistoryReport {
        workload: "history".into(),
        backend: store.backend.into(),
        executions: config.executions,
        events: config.executions * 6,
        fill_s,
        ready_ms: millis(ready),
        rss_mib: mib(memory.rss),
        rss_peak_mib: mib(peak.peak),
        status,
        history,
        list,
        errors,
    })
}

/// The hash of the benchmark's workflow in a `GET /v1/definitions` answer.
fn definition_hash(defs: &Value) -> Option<String> {
    let list = defs
        .get("definitions")
        .and_then(Value::as_array)
        .or_else(|| defs.as_array())?;
    list.iter()
        .find(|d| d["name"] == WORKFLOW)
        .and_then(|d| d["definition_hash"].as_str().or_else(|| d["hash"].as_str()))
        .map(str::to_owned)
}
