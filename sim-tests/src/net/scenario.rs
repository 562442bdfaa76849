//! One networked run ([`run`]): a server host (driver + axum on the shared
//! [`SimStore`]), SDK worker hosts and an SDK client that deploys a small
//! workflow, starts executions and waits for each to end, while the fault
//! schedule sampled from the seed partitions, holds, delays and crashes.
//! The core layer's checkers then judge the durable histories.
//!
//! A cluster run ([`NetConfig::sample_cluster`]) has two or three server
//! hosts, each a real `--cluster` node (supervisor, lease, fenced terms,
//! the `NOT_LEADER` router) on the same simulated database; workers and the
//! client reach them through the SDK's `FailoverTransport`. Its schedule
//! isolates the leader — cut off from the database and from every worker
//! and the client — past `--node-timeout`, and kills it.

use super::faulty::{FaultyStore, Link, StoreFaults};
use super::lease::{Contacts, SimLease};
use super::{serve, sources, Listener, TurmoilTransport, NET_EPOCH_MS};
use orbit_core::history::Event;
use orbit_io_sim::check::{self, durability::Fact, Invariant, Violation};
use orbit_io_sim::store::{SimStore, StoreBug};
use orbit_io_tokio::driver::{Driver, Options};
use orbit_io_tokio::storage::Storage;
use orbit_sdk::{
    Backoff, Client, Connector, Error, FailoverTransport, SourceFile, StartOptions, Task,
    TaskError, Transport, Worker,
};
use orbit_server::api::{self, app, AppState};
use orbit_server::cluster::{router, supervisor, Node, NodeConfig};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde_json::json;
use std::collections::BTreeMap;
use std::fmt;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::{Duration, UNIX_EPOCH};

/// The workflow every run deploys: two worker steps, the second fed by the
/// first, so a completed execution `n` outputs `{"doubled": 4n}`.
pub const WORKFLOW: &str = r#"task "net.double" version "1.0.0" {
    input  { n: Int }
    output { doubled: Int }
}

workflow Net version "1.0.0" {
    input { n: Int }

    step first {
        worker "net.double"
        with { n: input.n }
    }

    step second {
        worker "net.double"
        with { n: first.doubled }
    }

    output { doubled: second.doubled }
}
"#;

const SERVER: &str = "server";
const SERVER_ADDR: &str = "server:7373";
const PORT: u16 = 7373;

/// One scheduled change of the network or of the server host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Cut the link between a worker and the server (messages dropped).
    Partition(String),
    /// Heal it.
    Repair(String),
    /// Hold the link's messages (delivered on release).
    Hold(String),
    /// Release them.
    Release(String),
    /// Kill the server host (in a cluster: the leader's); committed data
    /// stays in the store.
    Crash,
    /// Start the killed host again (recovery from the store; in a cluster
    /// it comes back as a standby).
    Bounce,
    /// Cut the leader off the database and from every worker and the client.
    Isolate,
    /// Join it again.
    Rejoin,
}

/// A run's parameters, all drawn from its seed.
#[derive(Debug, Clone)]
pub struct NetConfig {
    /// The seed.
    pub seed: u64,
    /// Server hosts: 1 is a single server, more is a `--cluster`.
    pub nodes: u32,
    /// The cluster's `--node-timeout`, in ms (unused by a single server).
    pub node_timeout_ms: u64,
    /// Executions the client starts.
    pub executions: u32,
    /// SDK worker hosts.
    pub workers: u32,
    /// Upper bound of the per-message network delay, in ms.
    pub max_latency_ms: u64,
    /// The engine's session timeout, in ms.
    pub session_timeout_ms: u64,
    /// Virtual time during which faults strike, in ms.
    pub safety_ms: u64,
    /// Virtual time allowed after the last fault for everything to finish.
    pub liveness_ms: u64,
    /// The fault schedule: (virtual ms, action), in time order; every
    /// fault is undone before `safety_ms`.
    pub schedule: Vec<(u64, Action)>,
    /// A planted store bug (for the tests proving the checks have teeth).
    pub store_bug: StoreBug,
    /// Storage faults under the real driver during the safety phase.
    pub store_faults: StoreFaults,
}

impl NetConfig {
    /// Samples a configuration from `seed`.
    pub fn sample(seed: u64) -> NetConfig {
        let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x6e65_745f_7369_6d00);
        let workers = rng.random_range(1..=3u32);
        let safety_ms = 16_000;
        let mut schedule = Vec::new();
        for _ in 0..rng.random_range(1..=3u32) {
            let worker = format!("worker-{}", rng.random_range(0..workers));
            let at = rng.random_range(500..safety_ms - 9_500);
            let until = at + rng.random_range(500..9_000);
            if rng.random_bool(0.5) {
                schedule.push((at, Action::Partition(worker.clone())));
                schedule.push((until, Action::Repair(worker)));
            } else {
                schedule.push((at, Action::Hold(worker.clone())));
                schedule.push((until, Action::Release(worker)));
            }
        }
        for _ in 0..rng.random_range(1..=2u32) {
            let at = rng.random_range(300..safety_ms - 3_000);
            schedule.push((at, Action::Crash));
            schedule.push((at + rng.random_range(0..2_000), Action::Bounce));
        }
        // A crash inside another crash's downtime would be a no-op; keep the
        // schedule well-formed by dropping overlapping server faults.
        schedule.sort_by_key(|(at, _)| *at);
        let mut down = false;
        schedule.retain(|(_, a)| match a {
            Action::Crash if down => false,
            Action::Crash => {
                down = true;
                true
            }
            Action::Bounce if !down => false,
            Action::Bounce => {
                down = false;
                true
            }
            _ => true,
        });
        let executions = rng.random_range(3..=8);
        let max_latency_ms = rng.random_range(1..=50);
        // Drawn last, so that the draws above stay what they were.
        let store_faults = StoreFaults::sample(&mut rng, 0.08, safety_ms);
        NetConfig {
            seed,
            nodes: 1,
            node_timeout_ms: 0,
            executions,
            workers,
            max_latency_ms,
            session_timeout_ms: 5_000,
            safety_ms,
            liveness_ms: 60_000,
            schedule,
            store_bug: StoreBug::None,
            store_faults,
        }
    }
}

impl NetConfig {
    /// Samples a cluster configuration from `seed`: two or three nodes,
    /// the leader isolated past `--node-timeout` at least once, and killed
    /// now and then; the faults come one after the other, each undone
    /// before the next.
    pub fn sample_cluster(seed: u64) -> NetConfig {
        let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x636c_7573_7465_7200);
        let nodes = rng.random_range(2..=3u32);
        let node_timeout_ms = rng.random_range(1_000..=3_000u64);
        let workers = rng.random_range(1..=3u32);
        let safety_ms = 20_000;
        let mut schedule = Vec::new();
        let mut at = rng.random_range(500..3_000u64);
        for i in 0..rng.random_range(1..=3u32) {
            let (start, end, length) = if i == 0 || rng.random_bool(0.5) {
                let length = node_timeout_ms * rng.random_range(15..=40u64) / 10;
                (Action::Isolate, Action::Rejoin, length)
            } else {
                (Action::Crash, Action::Bounce, rng.random_range(0..3_000u64))
            };
            if at + length > safety_ms - 1_000 {
                break;
            }
            schedule.push((at, start));
            schedule.push((at + length, end));
            at += length + rng.random_range(500..4_000u64);
        }
        let executions = rng.random_range(3..=8);
        let max_latency_ms = rng.random_range(1..=30);
        let store_faults = StoreFaults::sample(&mut rng, 0.04, safety_ms);
        NetConfig {
            seed,
            nodes,
            node_timeout_ms,
            executions,
            workers,
            max_latency_ms,
            session_timeout_ms: 5_000,
            safety_ms,
            liveness_ms: 60_000,
            schedule,
            store_bug: StoreBug::None,
            store_faults,
        }
    }

    /// The server hosts' names.
    fn servers(&self) -> Vec<String> {
        if self.nodes <= 1 {
            vec![SERVER.to_owned()]
        } else {
            (0..self.nodes).map(|i| format!("node-{i}")).collect()
        }
    }
}

impl fmt::Display for NetConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "seed={:#x} nodes={} node_timeout_ms={} executions={} workers={} max_latency_ms={} session_timeout_ms={} safety_ms={} liveness_ms={} store_fail={} store_ambiguous={} faults=[",
            self.seed,
            self.nodes,
            self.node_timeout_ms,
            self.executions,
            self.workers,
            self.max_latency_ms,
            self.session_timeout_ms,
            self.safety_ms,
            self.liveness_ms,
            self.store_faults.fail_probability,
            self.store_faults.ambiguous_probability
        )?;
        for (i, (at, a)) in self.schedule.iter().enumerate() {
            let sep = if i == 0 { "" } else { ", " };
            write!(f, "{sep}{at}ms {a:?}")?;
        }
        write!(f, "]")
    }
}

/// What a run found.
#[derive(Debug, Clone)]
pub struct NetReport {
    /// The configuration (print it first: it names the seed).
    pub config: NetConfig,
    /// Broken invariants, first found first.
    pub violations: Vec<Violation>,
    /// turmoil's verdict: an error when a host failed or the client did
    /// not finish within the simulated duration.
    pub sim_error: Option<String>,
    /// FNV-1a hash of every durable history and the client's observations.
    pub trace_hash: u64,
    /// Virtual time the run took, in ms.
    pub virtual_ms: u64,
    /// Executions that ended `completed` with the expected output.
    pub completed: u32,
    /// Faults applied, by kind.
    pub faults: BTreeMap<&'static str, u32>,
    /// Acknowledged facts (starts answered, tasks handed out) checked
    /// against the durable histories.
    pub facts: usize,
    /// The lease's epoch at the end: how many terms a cluster run had.
    pub epoch: u64,
}

impl NetReport {
    /// Whether the run passed.
    pub fn passed(&self) -> bool {
        self.violations.is_empty() && self.sim_error.is_none()
    }
}

impl fmt::Display for NetReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{}", self.config)?;
        writeln!(
            f,
            "{} in {} virtual ms: {}/{} completed, {} facts checked, lease epoch {}, faults {:?}, trace {:016x}",
            if self.passed() { "PASS" } else { "FAIL" },
            self.virtual_ms,
            self.completed,
            self.config.executions,
            self.facts,
            self.epoch,
            self.faults,
            self.trace_hash
        )?;
        if let Some(e) = &self.sim_error {
            writeln!(f, "simulation error: {e}")?;
        }
        for v in &self.violations {
            write!(f, "{v}")?;
        }
        Ok(())
    }
}

/// What the client host saw, shared with the runner.
#[derive(Debug, Default)]
struct Observed {
    facts: Vec<Fact>,
    /// (execution, final status, output) as the client read them.
    finals: Vec<(String, String, serde_json::Value)>,
}

/// The `net.double` handler: a little virtual work, then `2n`.
async fn handle(task: Task) -> Result<serde_json::Value, TaskError> {
    let n = task.input["n"].as_i64().unwrap_or(0);
    let work = 300 + n.unsigned_abs() % 7 * 300;
    tokio::time::sleep(Duration::from_millis(work)).await;
    Ok(json!({ "doubled": n * 2 }))
}

fn retryable(e: &Error) -> bool {
    e.status().is_none_or(|s| s == 429 || s >= 500)
}

/// Runs `config` and checks the invariants.
pub fn run(config: NetConfig) -> NetReport {
    let seed = config.seed;
    let store = Arc::new(SimStore::with_bug(config.store_bug));
    let faulty = Arc::new(FaultyStore::new(store.clone(), config.store_faults, seed));
    let store_counts = faulty.counts();
    let observed = Arc::new(Mutex::new(Observed::default()));
    let mut builder = turmoil::Builder::new();
    builder
        .rng_seed(seed)
        .epoch(UNIX_EPOCH + Duration::from_millis(NET_EPOCH_MS))
        .simulation_duration(Duration::from_millis(config.safety_ms + config.liveness_ms))
        .tick_duration(Duration::from_millis(5))
        .min_message_latency(Duration::from_millis(1))
        .max_message_latency(Duration::from_millis(config.max_latency_ms.max(1)));
    let mut sim = builder.build();

    let counter = Arc::new(AtomicU64::new(1));
    let options = Options {
        engine: orbit_core::engine::Config {
            session_timeout_ms: config.session_timeout_ms,
            ..orbit_core::engine::Config::default()
        },
        ..Options::default()
    };
    let servers = config.servers();
    let links: BTreeMap<String, Arc<Link>> = servers
        .iter()
        .map(|s| (s.clone(), Arc::new(Link::default())))
        .collect();
    if config.nodes <= 1 {
        let store = faulty.clone();
        sim.host(SERVER, move || {
            let store: Arc<dyn Storage> = store.clone();
            let sources = sources(seed, counter.clone());
            let options = options.clone();
            async move {
                let driver = Driver::start_with(store, options, sources).await?;
                let listener = Listener::bind(&format!("0.0.0.0:{PORT}")).await?;
                serve(listener, app(AppState::new(driver))).await;
                Ok(())
            }
        });
    } else {
        let contacts = Contacts::default();
        for name in &servers {
            let link = links[name].clone();
            let lease = Arc::new(SimLease::new(store.clone(), contacts.clone(), link.clone()));
            let store = faulty.over(link);
            let config = NodeConfig {
                node_id: name.clone(),
                advertise: format!("http://{name}:{PORT}"),
                node_timeout: Duration::from_millis(config.node_timeout_ms),
            };
            let counter = counter.clone();
            let options = options.clone();
            sim.host(name.as_str(), move || {
                let node = Arc::new(Node::new(config.clone(), lease.clone()));
                let store = store.clone();
                let settings = supervisor::TermSettings {
                    store: Arc::new(move |fence| Arc::new(store.fenced_by(fence))),
                    sources: sources(seed, counter.clone()),
                    driver: options.clone(),
                    api: api::Options::default(),
                    max_body: api::DEFAULT_MAX_BODY,
                    chores: Arc::new(|_| Vec::new()),
                };
                async move {
                    // Held for the host's life: the node stops when it drops.
                    let (_stop, stop) = tokio::sync::watch::channel(false);
                    tokio::spawn(supervisor::run(node.clone(), settings, stop));
                    let listener = Listener::bind(&format!("0.0.0.0:{PORT}")).await?;
                    serve(listener, router::router(node, false)).await;
                    Ok(())
                }
            });
        }
    }

    for w in 0..config.workers {
        let name = format!("worker-{w}");
        let host = name.clone();
        let observed = observed.clone();
        let servers = servers.clone();
        sim.host(host.as_str(), move || {
            let name = name.clone();
            let observed = observed.clone();
            let servers = servers.clone();
            async move {
                let worker = Worker::builder(name)
                    .poll_wait(Duration::from_secs(2))
                    .backoff(Backoff {
                        initial: Duration::from_millis(100),
                        factor: 2.0,
                        max: Duration::from_secs(2),
                    })
                    .handler("net.double", move |task: Task| {
                        // A task in hand was handed out: it must be durable.
                        observed
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .facts
                            .push(Fact::Dispatched {
                                execution: task.execution_id.clone(),
                                unit: task.step_id.clone(),
                                token: task.token.clone(),
                            });
                        handle(task)
                    })
                    .build(transport(&servers));
                worker.run(std::future::pending::<()>()).await?;
                Ok(())
            }
        });
    }

    {
        let observed = observed.clone();
        let executions = config.executions;
        let safety_ms = config.safety_ms;
        let servers = servers.clone();
        sim.client("client", async move {
            let began = tokio::time::Instant::now();
            let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x636c_6965_6e74);
            let client =
                Client::with_transport(transport(&servers)).with_retries(4, Backoff::CLIENT);
            let files = [SourceFile {
                filename: "net.orbit".into(),
                source: WORKFLOW.into(),
            }];
            loop {
                match client
                    .deploy_with_key(&files, Some(format!("deploy-{seed:x}")))
                    .await
                {
                    Ok(_) => break,
                    Err(e) if retryable(&e) => tokio::time::sleep(Duration::from_millis(300)).await,
                    Err(e) => return Err(e.into()),
                }
            }
            let ids: Vec<String> = (0..executions)
                .map(|i| format!("net-{seed:x}-{i}"))
                .collect();
            // Starts are spread over the fault window, so faults meet work.
            let mut offsets: Vec<u64> = (0..executions)
                .map(|_| rng.random_range(0..safety_ms.saturating_sub(3_000).max(1)))
                .collect();
            offsets.sort_unstable();
            for ((i, id), offset) in ids.iter().enumerate().zip(offsets) {
                tokio::time::sleep_until(began + Duration::from_millis(offset)).await;
                let options = StartOptions {
                    execution_id: Some(id.clone()),
                    idempotency_key: Some(format!("start-{seed:x}-{i}")),
                    ..StartOptions::new("Net", json!({ "n": i }))
                };
                loop {
                    match client.start(options.clone()).await {
                        Ok(started) => {
                            let mut o = observed.lock().unwrap_or_else(|e| e.into_inner());
                            o.facts.push(Fact::Created {
                                execution: started.execution_id,
                            });
                            break;
                        }
                        Err(e) if retryable(&e) => {
                            tokio::time::sleep(Duration::from_millis(300)).await
                        }
                        Err(e) => return Err(e.into()),
                    }
                }
            }
            for id in &ids {
                loop {
                    match client.wait(id, Duration::from_secs(5)).await {
                        Ok(e) if e.status.is_terminal() => break,
                        Ok(_) => {}
                        Err(e) if retryable(&e) => {
                            tokio::time::sleep(Duration::from_millis(300)).await
                        }
                        Err(e) => return Err(e.into()),
                    }
                }
            }
            // Once every fault is undone, read each execution back through
            // the (possibly restarted) server: what ended must stay ended.
            tokio::time::sleep_until(began + Duration::from_millis(safety_ms + 500)).await;
            for id in &ids {
                loop {
                    match client.get(id).await {
                        Ok(e) => {
                            let status = serde_json::to_value(e.status)
                                .ok()
                                .and_then(|v| v.as_str().map(str::to_owned))
                                .unwrap_or_default();
                            let mut o = observed.lock().unwrap_or_else(|e| e.into_inner());
                            o.finals.push((id.clone(), status, e.output));
                            break;
                        }
                        Err(e) if retryable(&e) => {
                            tokio::time::sleep(Duration::from_millis(300)).await
                        }
                        Err(e) => return Err(e.into()),
                    }
                }
            }
            Ok(())
        });
    }

    let mut faults: BTreeMap<&'static str, u32> = BTreeMap::new();
    let mut snapshots: Vec<(String, Vec<Event>)> = Vec::new();
    let mut schedule = config.schedule.iter().peekable();
    let mut sim_error = None;
    // The server host a crash or an isolation struck, until it is undone.
    let mut struck: Option<String> = None;
    let peers: Vec<String> = (0..config.workers)
        .map(|w| format!("worker-{w}"))
        .chain(["client".to_owned()])
        .collect();
    loop {
        let now = u64::try_from(sim.elapsed().as_millis()).unwrap_or(u64::MAX);
        while let Some((_, action)) = schedule.next_if(|(at, _)| *at <= now) {
            match action {
                Action::Partition(w) => sim.partition(w.as_str(), SERVER),
                Action::Repair(w) => sim.repair(w.as_str(), SERVER),
                Action::Hold(w) => sim.hold(w.as_str(), SERVER),
                Action::Release(w) => sim.release(w.as_str(), SERVER),
                Action::Crash => {
                    // What is committed now must still be there at the end.
                    snapshots.extend(store.all().into_iter().map(|e| (e.row.id, e.events)));
                    let target = leader(&store, &servers);
                    if config.nodes <= 1 {
                        // The single server's embedded database goes down
                        // with it.
                        store.crash();
                    }
                    sim.crash(target.as_str());
                    struck = Some(target);
                }
                Action::Bounce => {
                    if let Some(target) = struck.take() {
                        sim.bounce(target.as_str());
                    }
                }
                Action::Isolate => {
                    snapshots.extend(store.all().into_iter().map(|e| (e.row.id, e.events)));
                    let target = leader(&store, &servers);
                    links[&target].cut();
                    for peer in &peers {
                        sim.partition(peer.as_str(), target.as_str());
                    }
                    struck = Some(target);
                }
                Action::Rejoin => {
                    if let Some(target) = struck.take() {
                        links[&target].heal();
                        for peer in &peers {
                            sim.repair(peer.as_str(), target.as_str());
                        }
                    }
                }
            }
            *faults.entry(kind(action)).or_default() += 1;
        }
        match sim.step() {
            Ok(true) => break,
            Ok(false) => {}
            Err(e) => {
                sim_error = Some(e.to_string());
                break;
            }
        }
    }
    let virtual_ms = u64::try_from(sim.elapsed().as_millis()).unwrap_or(u64::MAX);
    drop(sim);
    let epoch = store.lease(0).epoch;
    for (k, v) in store_counts
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
    {
        *faults.entry(k).or_default() += v;
    }

    let observed = std::mem::take(&mut *observed.lock().unwrap_or_else(|e| e.into_inner()));
    let mut violations = Vec::new();
    let all = store.all();
    let histories: BTreeMap<&str, &[Event]> = all
        .iter()
        .map(|e| (e.row.id.as_str(), e.events.as_slice()))
        .collect();
    let empty: &[Event] = &[];
    for e in &all {
        if let Err(v) = check::history(&e.row.id, &e.events, None) {
            violations.push(v);
        }
        if let Err(v) = check::determinism::check(&e.row, &e.events, None) {
            violations.push(v);
        }
        if let Err(v) = check::liveness::check(&e.row.id, &e.events, config.liveness_ms) {
            violations.push(v);
        }
    }
    for fact in &observed.facts {
        let events = histories.get(fact.execution()).copied().unwrap_or(empty);
        if let Err(v) = check::durability::check(fact, events) {
            violations.push(v);
        }
    }
    for (id, before) in &snapshots {
        let now = histories.get(id.as_str()).copied().unwrap_or(empty);
        if now.len() < before.len() || now[..before.len()] != before[..] {
            violations.push(
                Violation::new(
                    Invariant::NoLostCommits,
                    format!(
                        "{} events were committed before a server crash; the store now holds {} that do not extend them",
                        before.len(),
                        now.len()
                    ),
                )
                .in_execution(id, now),
            );
        }
    }
    let mut completed = 0;
    for i in 0..config.executions {
        let id = format!("net-{seed:x}-{i}");
        let expected = json!({ "doubled": 4 * i64::from(i) });
        match observed.finals.iter().find(|(x, _, _)| *x == id) {
            Some((_, status, output)) if status == "completed" && *output == expected => {
                completed += 1
            }
            Some((_, status, output)) => violations.push(Violation::new(
                Invariant::Liveness,
                format!("{id} ended {status} with {output}, expected completed with {expected}"),
            )),
            None => {
                let events = histories.get(id.as_str()).copied().unwrap_or(empty);
                violations.push(
                    Violation::new(
                        Invariant::Liveness,
                        format!(
                            "the client never saw {id} end within {} ms after the faults",
                            config.liveness_ms
                        ),
                    )
                    .in_execution(&id, events),
                );
            }
        }
    }
    let mut hash = Fnv::default();
    for e in &all {
        hash.write(format!("{:?}|{:?}\n", e.row, e.events).as_bytes());
    }
    hash.write(format!("{:?}|{:?}|{virtual_ms}", observed.facts, observed.finals).as_bytes());
    NetReport {
        config,
        violations,
        sim_error,
        trace_hash: hash.0,
        virtual_ms,
        completed,
        faults,
        facts: observed.facts.len(),
        epoch,
    }
}

/// The SDK transport of a worker or the client: straight to the single
/// server, or over every node of a cluster, following `NOT_LEADER`.
fn transport(servers: &[String]) -> Arc<dyn Transport> {
    if servers.len() <= 1 {
        return Arc::new(TurmoilTransport::new(SERVER_ADDR));
    }
    let urls: Vec<String> = servers
        .iter()
        .map(|s| format!("http://{s}:{PORT}"))
        .collect();
    let connect: Connector = Arc::new(|url: &str| {
        let host = url.strip_prefix("http://").unwrap_or(url);
        Ok(Arc::new(TurmoilTransport::new(host)) as Arc<dyn Transport>)
    });
    match FailoverTransport::with_connector(&urls, connect) {
        Ok(t) => Arc::new(t),
        Err(_) => Arc::new(TurmoilTransport::new(SERVER_ADDR)),
    }
}

/// The server host that leads now: the lease holder of a cluster (the
/// first node while nobody holds it), or the single server.
fn leader(store: &SimStore, servers: &[String]) -> String {
    let holder = store.lease(0).holder;
    servers
        .iter()
        .find(|s| **s == holder)
        .unwrap_or(&servers[0])
        .clone()
}

fn kind(action: &Action) -> &'static str {
    match action {
        Action::Partition(_) => "partition",
        Action::Repair(_) => "repair",
        Action::Hold(_) => "hold",
        Action::Release(_) => "release",
        Action::Crash => "crash",
        Action::Bounce => "bounce",
        Action::Isolate => "isolate",
        Action::Rejoin => "rejoin",
    }
}

/// FNV-1a, 64 bits: stable across processes and Rust versions.
struct Fnv(u64);

impl Default for Fnv {
    fn default() -> Fnv {
        Fnv(0xcbf2_9ce4_8422_2325)
    }
}

impl Fnv {
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 ^= u64::from(*b);
            self.0 = self.0.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
}
