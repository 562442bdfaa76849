//! `orbit-sim`: the simulation explorer. Runs one seed (`--seed`) or many
//! (`--seeds N`) of a scenario, prints the sampled configuration first, and
//! for every failure its class and the one command that reproduces it.
//!
//! Exit codes: 0 pass, 1 correctness failure, 2 liveness failure, 3 crash,
//! 64 usage error (with several failures, the most severe class wins:
//! crash, then correctness, then liveness).

use orbit_io_sim::config::FAULT_KINDS;
use orbit_io_sim::report::{EXIT_CORRECTNESS, EXIT_CRASH, EXIT_LIVENESS, EXIT_OK, EXIT_USAGE};
use orbit_io_sim::{run_with, Bug, ClusterBug, NodeStats, RunOptions, Scenario, SimConfig};
use orbit_sim_tests::parse_seed;
use std::collections::BTreeMap;
use std::time::Instant;

const USAGE: &str =
    "usage: orbit-sim [--seed N | --seeds N [--from N]] [--scenario NAME] [--mode MODE]
                 [--faults KINDS] [--plant BUGS] [--trace] [--quiet]
  --seed N        run one seed (decimal or 0x hex) and print its configuration and report
  --seeds N       run N seeds starting at --from (default 0)
  --scenario NAME one of: swarm (default), steady-load, crash-storm, lost-workers,
                  late-and-duplicate, storage-faults, cancel-compensation,
                  signals-sleeps, child-workflows, idempotent-starts, clock-jumps,
                  builtin-http, cluster-leader, eviction-invisible,
                  cluster-shared, or all
  --mode MODE     single (the scenario given, default swarm), leader (the
                  cluster-leader scenario) or shared (the cluster-shared scenario)
  --faults KINDS  keep only these fault kinds (comma-separated): crash, storage,
                  network, partition, workers, cancel, clock, pause, db-cut;
                  skew is another name for clock, takeover for pause,db-cut
  --plant BUGS    plant engine bugs (comma-separated) to see the simulator catch them:
                  uncertain-as-failed, stale-failure-accepted, double-success,
                  dispatch-before-commit, key-released-on-ambiguous,
                  hand-out-to-dead-session, eviction-loses-timer,
                  split-forgets-innocent, eviction-frees-admission-slot,
                  inbox-entry-kept (cluster-shared); and cluster
                  bugs (cluster-leader): skip-epoch-check, lease-by-own-clock,
                  serve-before-recovery
  --trace         print every step of the world (with --seed)
  --quiet         with --seeds, print only failures and the summary";

struct Args {
    seed: Option<u64>,
    seeds: Option<u64>,
    from: u64,
    scenarios: Vec<Scenario>,
    trace: bool,
    quiet: bool,
    faults: Option<Vec<&'static str>>,
    plant: Vec<Bug>,
    cluster_plant: Vec<ClusterBug>,
}

impl Args {
    fn options(&self, trace: bool) -> RunOptions {
        RunOptions {
            trace,
            plant: self.plant.clone(),
            cluster_plant: self.cluster_plant.clone(),
            ..RunOptions::default()
        }
    }

    /// What the repro line adds for planted bugs.
    fn plant_flag(&self) -> String {
        if self.plant.is_empty() && self.cluster_plant.is_empty() {
            return String::new();
        }
        let names: Vec<&str> = self
            .plant
            .iter()
            .map(|b| b.name())
            .chain(self.cluster_plant.iter().map(|b| b.name()))
            .collect();
        format!(" --plant {}", names.join(","))
    }

    fn config(&self, seed: u64, scenario: Scenario) -> SimConfig {
        match &self.faults {
            Some(kinds) => SimConfig::sample_with_faults(seed, scenario, kinds),
            None => SimConfig::sample(seed, scenario),
        }
    }
}

fn parse(args: &[String]) -> Result<Args, String> {
    let mut a = Args {
        seed: None,
        seeds: None,
        from: 0,
        scenarios: vec![Scenario::Swarm],
        trace: false,
        quiet: false,
        faults: None,
        plant: Vec::new(),
        cluster_plant: Vec::new(),
    };
    // `--mode`, as given, with the cluster scenario it stands for (`None`:
    // single node).
    let mut mode: Option<(String, Option<Scenario>)> = None;
    let mut scenario_given = false;
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        let mut value = |name: &str| {
            it.next()
                .cloned()
                .ok_or_else(|| format!("{name} needs a value"))
        };
        match flag.as_str() {
            "--seed" => {
                let v = value("--seed")?;
                a.seed = Some(parse_seed(&v).ok_or_else(|| format!("bad seed `{v}`"))?);
            }
            "--seeds" => {
                let v = value("--seeds")?;
                a.seeds = Some(parse_seed(&v).ok_or_else(|| format!("bad count `{v}`"))?);
            }
            "--from" => {
                let v = value("--from")?;
                a.from = parse_seed(&v).ok_or_else(|| format!("bad seed `{v}`"))?;
            }
            "--scenario" => {
                let v = value("--scenario")?;
                scenario_given = true;
                a.scenarios = if v == "all" {
                    Scenario::ALL.to_vec()
                } else {
                    vec![Scenario::parse(&v).ok_or_else(|| format!("unknown scenario `{v}`"))?]
                };
            }
            "--mode" => {
                let v = value("--mode")?;
                let cluster = match v.as_str() {
                    "single" => None,
                    "leader" => Some(Scenario::ClusterLeader),
                    "shared" => Some(Scenario::ClusterShared),
                    _ => return Err(format!("unknown mode `{v}` (single, leader, shared)")),
                };
                mode = Some((v, cluster));
            }
            "--faults" => {
                let v = value("--faults")?;
                let mut kinds: Vec<&'static str> = Vec::new();
                for k in v.split(',').filter(|k| !k.is_empty()) {
                    for kind in fault_kinds(k)? {
                        if !kinds.contains(&kind) {
                            kinds.push(kind);
                        }
                    }
                }
                a.faults = Some(kinds);
            }
            "--plant" => {
                let v = value("--plant")?;
                for k in v.split(',').filter(|k| !k.is_empty()) {
                    if let Some(bug) = ClusterBug::parse(k) {
                        a.cluster_plant.push(bug);
                    } else {
                        a.plant
                            .push(Bug::parse(k).ok_or_else(|| format!("unknown bug `{k}`"))?);
                    }
                }
            }
            "--trace" => a.trace = true,
            "--quiet" => a.quiet = true,
            "-h" | "--help" => return Err(String::new()),
            other => return Err(format!("unknown argument `{other}`")),
        }
    }
    if a.seed.is_some() && a.seeds.is_some() {
        return Err("--seed and --seeds are exclusive".into());
    }
    let cluster = [Scenario::ClusterLeader, Scenario::ClusterShared];
    match mode {
        None => {}
        Some((_, None)) => {
            // `--scenario all` keeps its single-node scenarios.
            a.scenarios.retain(|s| !cluster.contains(s));
            if a.scenarios.is_empty() {
                return Err("--mode single does not run a cluster scenario".into());
            }
        }
        Some((name, Some(scenario))) => {
            if scenario_given && a.scenarios != [scenario] {
                return Err(format!(
                    "--mode {name} runs the {scenario} scenario; leave --scenario out"
                ));
            }
            a.scenarios = vec![scenario];
        }
    }
    Ok(a)
}

/// The fault kinds `name` stands for: a kind of [`FAULT_KINDS`], or one of
/// the names `simulation.md` uses (`skew`: the nodes' clocks, `clock`;
/// `takeover`: what makes another node take over besides a crash, `pause`
/// and `db-cut`).
fn fault_kinds(name: &str) -> Result<Vec<&'static str>, String> {
    match name {
        "skew" => Ok(vec!["clock"]),
        "takeover" => Ok(vec!["pause", "db-cut"]),
        other => FAULT_KINDS
            .iter()
            .find(|k| **k == other)
            .map(|k| vec![*k])
            .ok_or_else(|| format!("unknown fault kind `{other}`")),
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let a = match parse(&args) {
        Ok(a) => a,
        Err(e) => {
            if !e.is_empty() {
                eprintln!("orbit-sim: {e}");
            }
            eprintln!("{USAGE}");
            std::process::exit(EXIT_USAGE);
        }
    };
    let code = match a.seed {
        Some(seed) => one(seed, &a),
        None => many(&a),
    };
    std::process::exit(code);
}

fn one(seed: u64, a: &Args) -> i32 {
    let mut worst = EXIT_OK;
    for scenario in &a.scenarios {
        let config = a.config(seed, *scenario);
        println!("{config}");
        let report = run_with(config, a.options(a.trace));
        println!("{report}");
        worst = worse(worst, report.outcome.exit_code());
    }
    worst
}

fn many(a: &Args) -> i32 {
    let count = a.seeds.unwrap_or(100);
    let started = Instant::now();
    let mut worst = EXIT_OK;
    let mut runs = 0u64;
    let mut failed = 0u64;
    let mut faults: BTreeMap<&'static str, u64> = BTreeMap::new();
    let mut classes: BTreeMap<&'static str, u64> = BTreeMap::new();
    let mut node = NodeStats::default();
    for scenario in &a.scenarios {
        for seed in a.from..a.from.saturating_add(count) {
            let config = a.config(seed, *scenario);
            let report = run_with(config, a.options(false));
            runs += 1;
            for (k, v) in &report.stats.faults {
                *faults.entry(k).or_default() += v;
            }
            *classes.entry(report.outcome.class()).or_default() += 1;
            node.add(&report.stats.node);
            let code = report.outcome.exit_code();
            if code != EXIT_OK {
                failed += 1;
                let what = report
                    .outcome
                    .violation()
                    .map(|v| format!("{}", v.invariant))
                    .unwrap_or_else(|| "crash".into());
                println!(
                    "FAIL {} seed {:#x}: {what}\n  repro: {}{}",
                    report.outcome.class(),
                    seed,
                    report.repro(),
                    a.plant_flag()
                );
            } else if !a.quiet {
                println!(
                    "ok   {scenario} seed {seed:#x} hash {:016x}",
                    report.trace_hash
                );
            }
            worst = worse(worst, code);
        }
    }
    let secs = started.elapsed().as_secs_f64();
    println!(
        "\n{runs} runs, {failed} failed, {:.1} s, {:.0} seeds/min",
        secs,
        runs as f64 / secs.max(1e-9) * 60.0
    );
    let c: Vec<String> = classes.iter().map(|(k, v)| format!("{k}={v}")).collect();
    println!("outcomes: {}", c.join(" "));
    let f: Vec<String> = faults.iter().map(|(k, v)| format!("{k}={v}")).collect();
    println!("faults injected: {}", f.join(" "));
    println!("node loop: {node}");
    worst
}

/// Crash beats correctness beats liveness.
fn worse(a: i32, b: i32) -> i32 {
    let rank = |c: i32| match c {
        EXIT_CRASH => 3,
        EXIT_CORRECTNESS => 2,
        EXIT_LIVENESS => 1,
        _ => 0,
    };
    if rank(b) > rank(a) {
        b
    } else {
        a
    }
}
