//! The workflows simulated clients start, and which of them each scenario
//! uses. They cover task steps with retries and timeouts, fan-out,
//! compensation (sagas), sleeps, signals and child workflows.

use crate::config::Scenario;
use crate::rng::SimRng;
use orbit_core::check::{compile, Source};
use orbit_core::engine::DefinitionRecord;
use serde_json::{json, Value};

/// The `.orbit` source of every simulated workflow.
pub const SOURCE: &str = r#"
task "work.step" version "1.0.0" {
    input  { n: Int }
    output { n: Int }
}

task "pay.charge" version "1.0.0" {
    input  { order: String, amount: Int }
    output { tx: String }
}

task "pay.refund" version "1.0.0" {
    input  { tx: String, amount: Int }
    output { refund: String }
}

task "stock.reserve" version "1.0.0" {
    input  { order: String, sku: String }
    output { res: String }
}

task "stock.release" version "1.0.0" {
    input  { res: String }
    output { }
}

task "ship.create" version "1.0.0" {
    input  { order: String }
    output { tracking: String }
}

workflow Plain version "1.0.0" {
    input { n: Int }

    step first {
        worker "work.step"
        with { n: input.n }
        retry: { max_attempts: 4, backoff: 200ms, factor: 2.0, max_backoff: 2s }
        timeout: 5s
    }

    step second {
        worker "work.step"
        with { n: first.n }
        retry: { max_attempts: 3, backoff: 100ms, factor: 2.0, max_backoff: 1s }
    }

    output { n: second.n }
}

workflow Saga version "1.0.0" {
    input { order: String, amount: Int, skus: [String] }

    step reserve {
        for sku in input.skus
        worker "stock.reserve"
        with { order: input.order, sku: sku }
        retry: { max_attempts: 3, backoff: 100ms, factor: 2.0, max_backoff: 1s }
        timeout: 4s
        compensate {
            worker "stock.release"
            with { res: reserve.res }
            retry: { max_attempts: 6, backoff: 100ms, factor: 2.0, max_backoff: 1s }
        }
    }

    step charge {
        worker "pay.charge"
        with { order: input.order, amount: input.amount }
        idempotency_key: "charge-" + input.order
        retry: { max_attempts: 3, backoff: 200ms, factor: 2.0, max_backoff: 2s }
        timeout: 5s
        after: [reserve]
        compensate {
            worker "pay.refund"
            with { tx: charge.tx, amount: input.amount }
            idempotency_key: "refund-" + charge.tx
            retry: { max_attempts: 6, backoff: 100ms, factor: 2.0, max_backoff: 1s }
        }
    }

    step ship {
        worker "ship.create"
        with { order: input.order }
        retry: { max_attempts: 2, backoff: 100ms, factor: 2.0, max_backoff: 1s }
        after: [charge]
    }

    output { tx: charge.tx, tracking: ship.tracking }
}

workflow Waiting version "1.0.0" {
    input { n: Int }

    step nap { sleep 2s }

    step go {
        signal "go"
        timeout: 60s
        after: [nap]
    }

    step finish {
        worker "work.step"
        with { n: input.n }
        after: [go]
    }

    output { n: finish.n }
}

workflow Label version "1.0.0" {
    input { order: String }

    step label {
        worker "ship.create"
        with { order: input.order }
    }

    output { tracking: label.tracking }
}

workflow Throttled version "1.0.0" {
    input { items: [Int] }

    step each {
        for item in input.items
        worker "work.step"
        with { n: item }
        max_concurrency: 2
        queue_timeout: 4s
        retry: { max_attempts: 3, backoff: 100ms, factor: 2.0, max_backoff: 1s }
        timeout: 5s
    }

    output { done: each }
}

workflow Notify version "1.0.0" {
    input { order: String, amount: Int }

    step notify {
        worker "orbit.http"
        with { method: "POST", url: "https://hooks.example.com/orders/" + input.order, body: { amount: input.amount }, timeout: 2s }
        idempotency_key: "notify-" + input.order
        retry: { max_attempts: 5, backoff: 100ms, factor: 2.0, max_backoff: 1s }
    }

    step label {
        worker "ship.create"
        with { order: input.order }
        after: [notify]
    }

    output { status: notify.status, tracking: label.tracking }
}

workflow Parent version "1.0.0" {
    input { order: String, amount: Int, parts: [String] }

    step kids {
        for part in input.parts
        workflow Label version "1.0.0"
        with { order: input.order + "-" + part }
    }

    step charge {
        worker "pay.charge"
        with { order: input.order, amount: input.amount }
        idempotency_key: "charge-" + input.order
        after: [kids]
        compensate {
            worker "pay.refund"
            with { tx: charge.tx, amount: input.amount }
        }
    }

    output { tx: charge.tx }
}
"#;

/// Every workflow compiled from [`SOURCE`], children first, as the engine
/// registers them.
pub fn definitions() -> Result<Vec<DefinitionRecord>, String> {
    let compiled = compile(
        &[Source {
            name: "sim.orbit".to_owned(),
            text: SOURCE.to_owned(),
        }],
        &|_, _| None,
    );
    if !compiled.is_ok() {
        return Err(format!("{:?}", compiled.diagnostics));
    }
    Ok(compiled
        .definitions
        .into_iter()
        .map(|d| DefinitionRecord {
            workflow: d.workflow,
            definition_hash: d.hash,
            source: String::new(),
            registered_at: 0,
        })
        .collect())
}

/// The workflows a scenario starts, with relative weights.
fn mix(scenario: Scenario) -> &'static [(&'static str, u64)] {
    match scenario {
        Scenario::Swarm => &[
            ("Plain", 3),
            ("Saga", 3),
            ("Waiting", 2),
            ("Parent", 2),
            ("Throttled", 1),
        ],
        Scenario::SteadyLoad | Scenario::LostWorkers | Scenario::LateAndDuplicate => {
            &[("Plain", 3), ("Saga", 2)]
        }
        Scenario::CrashStorm
        | Scenario::StorageFaults
        | Scenario::ClockJumps
        | Scenario::ClusterLeader
        | Scenario::ClusterShared => &[
            ("Plain", 2),
            ("Saga", 2),
            ("Waiting", 1),
            ("Parent", 1),
            ("Throttled", 1),
        ],
        Scenario::CancelCompensation => &[("Saga", 4), ("Parent", 1)],
        Scenario::SignalsSleeps => &[("Waiting", 4), ("Plain", 1)],
        Scenario::ChildWorkflows => &[("Parent", 4), ("Plain", 1)],
        Scenario::IdempotentStarts => &[("Plain", 2), ("Saga", 1)],
        Scenario::BuiltinHttp => &[("Notify", 4), ("Plain", 1)],
        // Executions that wait (sleeps, signals, children) are the ones
        // that leave memory.
        Scenario::EvictionInvisible => &[
            ("Waiting", 3),
            ("Parent", 2),
            ("Saga", 2),
            ("Plain", 1),
            ("Throttled", 1),
        ],
    }
}

/// Picks a workflow for `scenario` and builds an input for it. `order`
/// numbers orders; a few share an order id on purpose, so business keys
/// (`charge-<order>`) are shared across executions.
pub fn pick(scenario: Scenario, rng: &mut SimRng, order: u64) -> (&'static str, Value) {
    let choices = mix(scenario);
    let total: u64 = choices.iter().map(|(_, w)| w).sum();
    let mut draw = rng.between(0, total.saturating_sub(1));
    let mut name = "Plain";
    for (n, w) in choices {
        if draw < *w {
            name = n;
            break;
        }
        draw -= w;
    }
    let order = if rng.chance(0.1) { order / 2 } else { order };
    let input = match name {
        "Saga" => {
            let n = rng.between(1, 3);
            let skus: Vec<String> = (0..n).map(|i| format!("sku{i}")).collect();
            json!({"order": format!("o{order}"), "amount": rng.between(1, 500), "skus": skus})
        }
        "Notify" => json!({"order": format!("o{order}"), "amount": rng.between(1, 500)}),
        "Parent" => {
            let n = rng.between(0, 2);
            let parts: Vec<String> = (0..n).map(|i| format!("p{i}")).collect();
            json!({"order": format!("o{order}"), "amount": rng.between(1, 500), "parts": parts})
        }
        "Throttled" => {
            let n = rng.between(0, 5);
            let items: Vec<u64> = (0..n).map(|_| rng.between(0, 1000)).collect();
            json!({ "items": items })
        }
        _ => json!({"n": rng.between(0, 1000)}),
    };
    (name, input)
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_simulated_workflows_compile() {
        let defs = super::definitions();
        assert!(defs.is_ok(), "{defs:?}");
        assert_eq!(defs.map(|d| d.len()).unwrap_or(0), 7);
    }
}
