//! Growth measurements (run with `cargo test --release -p orbit-core --test
//! engine_growth -- --ignored --nocapture`): a 10,000-element fan-out driven
//! to completion, and replaying (recovering) a long history.

#![allow(clippy::unwrap_used)]
// A measurement reads the wall clock; the engine under test never does.
#![allow(clippy::disallowed_methods)]

mod engine_support;

use engine_support::*;
use serde_json::json;
use std::time::Instant;

const WIDE: &str = r#"
task "demo.work" version "1.0.0" {
    input { n: Int }
    output { v: Int }
}
workflow Wide version "1.0.0" {
    input { ns: [Int] }
    step each { for n in input.ns worker "demo.work" with { n: n } }
}
workflow Long version "1.0.0" {
    input { n: Int }
    step work {
        worker "demo.work"
        with { n: input.n }
        retry: { max_attempts: 100000, backoff: 1ms, factor: 1.0, max_backoff: 1ms }
    }
}
"#;

fn fan_out(width: usize) -> std::time::Duration {
    let mut w = World::default_world();
    w.deploy(WIDE);
    let ns: Vec<usize> = (0..width).collect();
    let started = Instant::now();
    w.start("Wide", "wide", json!({"ns": ns}));
    let s = w.register("w", &["*"]);
    loop {
        let tasks = w.poll(&s, 500);
        if tasks.is_empty() {
            break;
        }
        for t in tasks {
            w.succeed(&t.token, json!({"v": 1}));
        }
    }
    assert_eq!(w.status("wide"), "completed");
    started.elapsed()
}

#[test]
fn fan_out_scales() {
    let small = fan_out(200);
    assert!(small.as_secs() < 30);
}

#[test]
#[ignore = "measurement; run in release"]
fn fan_out_10000_and_long_replay() {
    for width in [1_000, 10_000] {
        eprintln!("fan-out of {width}: {:?}", fan_out(width));
    }
    let mut w = World::default_world();
    w.deploy(WIDE);
    w.start("Long", "long", json!({"n": 1}));
    let s = w.register("w", &["*"]);
    for _ in 0..5_000 {
        let t = w.take(&s);
        w.fail(&t.token, "AGAIN", true);
        w.advance(1);
    }
    let events = w.store.histories["long"].len();
    let started = Instant::now();
    w.restart();
    eprintln!(
        "recovering a history of {events} events: {:?}",
        started.elapsed()
    );
}
