//! Property: the engine's incrementally maintained projection of every
//! execution always equals a fold of its stored history from scratch, and
//! its committed history equals the store's — whatever random sequence of
//! requests, worker results, storage failures, restarts and time steps
//! drives it. Its typed view (`GET`, `wait`) writes the JSON that a tree
//! built field by field writes, through serde and by hand.

#![allow(clippy::unwrap_used)]

mod engine_support;

use engine_support::*;
use orbit_core::engine::ExecutionView;
use orbit_core::history::{Projection, Unit, UnitState};
use orbit_core::{Config, Request};
use proptest::prelude::*;
use serde_json::{json, Value};

const SOURCE: &str = r#"
task "demo.work" version "1.0.0" {
    input { n: Int }
    output { v: Int }
}
task "demo.undo" version "1.0.0" {
    input { v: Int }
    output { }
}
workflow Child version "1.0.0" {
    input { n: Int }
    step work { worker "demo.work" with { n: input.n } timeout: 3s }
    output { v: work.v }
}
workflow Mixed version "1.0.0" {
    input { ns: [Int] }
    step each {
        for n in input.ns
        worker "demo.work"
        with { n: n }
        max_concurrency: 2
        retry: { max_attempts: 2, backoff: 500ms, factor: 2.0, max_backoff: 2s }
        timeout: 2s
        compensate { worker "demo.undo" with { v: each.v } }
    }
    step nap { sleep 700ms after: [each] }
    step ok { signal "ok" timeout: 5s after: [nap] }
    step kid { workflow Child version "1.0.0" with { n: 1 } after: [ok] }
    output { kid: kid.v }
}
"#;

#[derive(Debug, Clone)]
enum Action {
    Start(u8),
    Poll(u8),
    Succeed(u8, bool),
    Fail(u8, bool),
    Heartbeat(u8),
    Signal(u8),
    Cancel(u8),
    Advance(u16),
    Storage(u8),
    Restart,
}

fn action() -> impl Strategy<Value = Action> {
    prop_oneof![
        2 => (0u8..4).prop_map(Action::Start),
        4 => (0u8..2).prop_map(Action::Poll),
        4 => (any::<u8>(), any::<bool>()).prop_map(|(k, b)| Action::Succeed(k, b)),
        2 => (any::<u8>(), any::<bool>()).prop_map(|(k, b)| Action::Fail(k, b)),
        1 => (0u8..2).prop_map(Action::Heartbeat),
        2 => (0u8..4).prop_map(Action::Signal),
        1 => (0u8..4).prop_map(Action::Cancel),
        4 => (0u16..3000).prop_map(Action::Advance),
        1 => (0u8..6).prop_map(Action::Storage),
        1 => Just(Action::Restart),
    ]
}

fn check(w: &World) {
    for (id, events) in &w.store.histories {
        for (i, e) in events.iter().enumerate() {
            assert_eq!(e.seq, i as u64 + 1, "contiguous seq in {id}");
        }
        let folded = Projection::fold(id, events);
        if let Some(p) = w.engine.projection(id) {
            assert_eq!(p, &folded, "projection of {id} differs from the fold");
        }
        let typed = serde_json::to_string(&ExecutionView::of(&folded)).unwrap();
        let tree = serde_json::to_string(&tree_view(&folded)).unwrap();
        assert_eq!(typed, tree, "the typed view of {id} differs from its tree");
        let mut written = Vec::new();
        ExecutionView::of(&folded).write_json(&mut written).unwrap();
        let written = String::from_utf8(written).unwrap();
        assert_eq!(written, tree, "the view of {id} written by hand differs");
    }
}

fn unit_tree(u: &Unit) -> Value {
    let (status, output, error) = match &u.state {
        UnitState::Queued { .. } => ("queued", None, None),
        UnitState::InFlight { .. } => ("running", None, None),
        UnitState::Retrying { .. } => ("retrying", None, None),
        UnitState::Idle => ("queued", None, None),
        UnitState::Child { .. } => ("running", None, None),
        UnitState::Succeeded { output } => ("succeeded", Some((**output).clone()), None),
        UnitState::Failed { error } => ("failed", None, Some(error.clone())),
    };
    let mut v = json!({"status": status, "attempt": u.attempt});
    if let UnitState::Child { child_id } = &u.state {
        v["child_id"] = json!(child_id);
    }
    if let Some(o) = output {
        v["output"] = o;
    }
    if let Some(e) = error {
        v["error"] = json!({"code": e.code, "message": e.message});
    }
    if !u.task.is_empty() {
        v["task"] = json!(u.task);
        v["idempotency_key"] = json!(u.idempotency_key);
    }
    v
}

/// An execution's view as a JSON tree, built field by field (the typed
/// [`ExecutionView`] must write the same JSON, byte for byte).
fn tree_view(p: &Projection) -> Value {
    let units: serde_json::Map<String, Value> = p
        .units
        .iter()
        .map(|(name, u)| (name.to_string(), unit_tree(u)))
        .collect();
    json!({
        "execution_id": p.execution_id,
        "workflow": p.workflow,
        "version": p.version,
        "definition_hash": p.definition_hash,
        "parent": p.parent,
        "status": p.status.as_str(),
        "input": *p.input,
        "output": p.output,
        "error": p.error,
        "created_at": orbit_core::engine::rfc3339(p.created_at),
        "updated_at": orbit_core::engine::rfc3339(p.updated_at),
        "units": units,
    })
}

fn run(actions: Vec<Action>) {
    let mut w = World::new(Config {
        session_timeout_ms: 4_000,
        ..Config::default()
    });
    w.deploy(SOURCE);
    let sessions = [w.register("w-0", &["demo.*"]), w.register("w-1", &["*"])];
    let mut sessions = sessions.to_vec();
    let mut tokens: Vec<String> = Vec::new();
    let mut started = 0;
    for a in actions {
        match a {
            Action::Start(n) => {
                started += 1;
                let ns: Vec<u8> = (0..n).collect();
                w.start("Mixed", &format!("e{started}"), json!({"ns": ns}));
            }
            Action::Poll(s) => {
                let r = w.call(Request::Poll {
                    session_id: sessions[s as usize].clone(),
                    max_tasks: Some(2),
                    wait_ms: 0,
                    held: tokens.clone(),
                });
                if r.status == 404 {
                    sessions[s as usize] = w.register(&format!("w-{s}"), &["demo.*"]);
                } else if let Some(ts) = r.body["tasks"].as_array() {
                    tokens.extend(ts.iter().map(|t| t["token"].as_str().unwrap().to_string()));
                }
            }
            Action::Succeed(k, keep) | Action::Fail(k, keep) if !tokens.is_empty() => {
                let i = k as usize % tokens.len();
                let token = if keep {
                    tokens[i].clone()
                } else {
                    tokens.remove(i)
                };
                if matches!(a, Action::Succeed(..)) {
                    w.succeed(&token, json!({"v": 1}));
                } else {
                    w.fail(&token, "FLAKY", true);
                }
            }
            Action::Succeed(..) | Action::Fail(..) => {}
            Action::Heartbeat(s) => {
                w.call(Request::Heartbeat {
                    session_id: sessions[s as usize].clone(),
                    held: tokens.clone(),
                });
            }
            Action::Signal(e) => {
                w.call(Request::Signal {
                    execution_id: format!("e{}", e as usize % (started + 1)),
                    name: "ok".into(),
                    payload: json!(e),
                    idempotency: None,
                });
            }
            Action::Cancel(e) => {
                w.call(Request::Cancel {
                    execution_id: format!("e{}", e as usize % (started + 1)),
                    reason: None,
                    idempotency: None,
                });
            }
            Action::Advance(ms) => w.advance(ms as u64),
            Action::Storage(m) => {
                w.mode = match m {
                    0 => Mode::Unavailable,
                    1 => Mode::AmbiguousApplied,
                    2 => Mode::AmbiguousLost,
                    _ => Mode::Ok,
                }
            }
            Action::Restart => w.restart(),
        }
        check(&w);
    }
    w.mode = Mode::Ok;
    w.advance(60_000);
    check(&w);
    if std::env::var("ORBIT_PROP_DEBUG").is_ok() {
        let statuses: Vec<String> = w
            .store
            .histories
            .keys()
            .map(|id| format!("{id}:{}:{}", w.status(id), w.store.histories[id].len()))
            .collect();
        eprintln!("{statuses:?}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, .. ProptestConfig::default() })]
    #[test]
    fn incremental_projection_equals_fold(actions in proptest::collection::vec(action(), 1..60)) {
        run(actions);
    }
}

/// Found by the property test: an ambiguous store during restarts and polls.
#[test]
fn regression_ambiguous_store_with_restarts() {
    use Action::*;
    run(vec![
        Restart,
        Poll(1),
        Start(1),
        Start(2),
        Poll(1),
        Storage(2),
        Restart,
        Advance(848),
        Poll(0),
        Advance(2904),
        Succeed(104, false),
        Poll(0),
        Advance(248),
    ]);
}
