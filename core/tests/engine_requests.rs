//! Request-level rules: starts (ids, versions, contracts, existing ids,
//! required keys), deploys, API idempotency, admission, reads and waits.

#![allow(clippy::unwrap_used)]

mod engine_support;

use engine_support::*;
use orbit_core::engine::{IdempotencyScope, ListFilter, Start};
use orbit_core::{Config, Request};
use serde_json::{json, Value};

const V1: &str = r#"
task "demo.work" version "1.0.0" {
    input { n: Int }
    output { v: Int }
}
workflow Plain version "1.0.0" {
    input { n: Int }
    step work { worker "demo.work" with { n: input.n } }
}
workflow Guarded version "1.0.0" {
    input { n: Int }
    requires_idempotency_key: true
    step work { worker "demo.work" with { n: input.n } }
}
workflow Capped version "1.0.0" {
    input { n: Int }
    max_active: 1
    step work { worker "demo.work" with { n: input.n } }
}
"#;

const V2: &str = r#"
task "demo.work" version "1.0.0" {
    input { n: Int }
    output { v: Int }
}
workflow Plain version "1.10.0" {
    input { n: Int }
    step work { worker "demo.work" with { n: input.n + 1 } }
}
"#;

fn start(workflow: &str, version: Option<&str>, id: Option<&str>, input: Value) -> Request {
    Request::Start(Start {
        workflow: workflow.into(),
        version: version.map(Into::into),
        input,
        execution_id: id.map(Into::into),
        idempotency: None,
        traceparent: None,
    })
}

/// A start of `workflow` with `{"n": 1}` under Idempotency-Key `key`, its
/// body fingerprinted `fingerprint`.
fn keyed_start(workflow: &str, key: &str, fingerprint: &str) -> Request {
    Request::Start(Start {
        workflow: workflow.into(),
        version: None,
        input: json!({"n": 1}),
        execution_id: None,
        idempotency: Some(IdempotencyScope {
            key: key.into(),
            fingerprint: fingerprint.into(),
        }),
        traceparent: None,
    })
}

#[test]
fn start_validation_and_existing_ids() {
    let mut w = World::default_world();
    w.deploy(V1);
    let r = w.call(start("Plain", None, Some("bad id!"), json!({"n": 1})));
    assert_eq!(
        (r.status, r.error_code()),
        (400, Some("INVALID_EXECUTION_ID"))
    );
    let r = w.call(start("Plain", None, Some("a.b"), json!({"n": 1})));
    assert_eq!(r.error_code(), Some("INVALID_EXECUTION_ID"));
    let r = w.call(start("Nope", None, Some("x"), json!({})));
    assert_eq!((r.status, r.error_code()), (404, Some("UNKNOWN_WORKFLOW")));
    let r = w.call(start("Plain", None, Some("x"), json!({"n": "one"})));
    assert_eq!(
        (r.status, r.error_code()),
        (400, Some("INPUT_CONTRACT_VIOLATION"))
    );
    assert!(w.engine.projection("x").is_none(), "nothing created");
    assert_eq!(
        w.call(start("Plain", None, Some("x"), json!({"n": 1})))
            .status,
        201
    );
    let again = w.call(start("Plain", Some("1.0.0"), Some("x"), json!({"n": 99})));
    assert_eq!(
        (again.status, again.body.clone().into_json()),
        (200, json!({"execution_id": "x", "created": false}))
    );
    let r = w.call(start("Capped", None, Some("x"), json!({"n": 1})));
    assert_eq!((r.status, r.error_code()), (409, Some("EXECUTION_EXISTS")));
    // An existing id answers for itself, even naming a workflow or version
    // that is not registered.
    let r = w.call(start("Plain", Some("2.0.0"), Some("x"), json!({"n": 1})));
    assert_eq!((r.status, r.error_code()), (409, Some("EXECUTION_EXISTS")));
    let r = w.call(start("Nope", None, Some("x"), json!({})));
    assert_eq!((r.status, r.error_code()), (409, Some("EXECUTION_EXISTS")));
    let generated = w.call(start("Plain", None, None, json!({"n": 1})));
    assert_eq!(generated.status, 201);
    let id = generated.body["execution_id"].as_str().unwrap();
    assert_eq!(id.len(), 36, "a UUID from the id source");
}

#[test]
fn no_version_starts_the_highest_registered() {
    let mut w = World::default_world();
    w.deploy(V1);
    w.deploy(V2);
    w.call(start("Plain", None, Some("h"), json!({"n": 1})));
    assert_eq!(w.engine.projection("h").unwrap().version.as_ref(), "1.10.0");
    w.call(start("Plain", Some("1.0.0"), Some("l"), json!({"n": 1})));
    assert_eq!(w.engine.projection("l").unwrap().version.as_ref(), "1.0.0");
}

#[test]
fn requires_idempotency_key() {
    let mut w = World::default_world();
    w.deploy(V1);
    let r = w.call(start("Guarded", None, None, json!({"n": 1})));
    assert_eq!(
        (r.status, r.error_code()),
        (400, Some("IDEMPOTENCY_KEY_REQUIRED"))
    );
    assert_eq!(
        w.call(start("Guarded", None, Some("g"), json!({"n": 1})))
            .status,
        201
    );
    assert_eq!(w.call(keyed_start("Guarded", "k1", "f1")).status, 201);
}

#[test]
fn idempotent_start_replays_and_refuses_another_body() {
    let mut w = World::default_world();
    w.deploy(V1);
    let keyed = |fp: &str| keyed_start("Plain", "client/POST /v1/executions/k", fp);
    let first = w.call(keyed("f1"));
    assert_eq!(first.status, 201);
    assert!(!first.replayed);
    assert_eq!(
        w.store.idempotency.len(),
        1,
        "record written with the effect"
    );
    let again = w.call(keyed("f1"));
    assert_eq!(
        (again.status, &again.body, again.replayed),
        (201, &first.body, true)
    );
    let other = w.call(keyed("f2"));
    assert_eq!(
        (other.status, other.error_code()),
        (409, Some("IDEMPOTENCY_KEY_REUSED"))
    );
    assert_eq!(
        w.engine
            .projection(first.body["execution_id"].as_str().unwrap())
            .unwrap()
            .last_seq,
        3
    );
    // Survives a restart, and expires after the TTL.
    w.restart();
    assert!(w.call(keyed("f1")).replayed);
    w.now += Config::default().idempotency_ttl_ms;
    let fresh = w.call(keyed("f1"));
    assert!(!fresh.replayed);
    assert_ne!(fresh.body, first.body);
}

#[test]
fn a_keyed_request_whose_record_cannot_be_read_is_refused_not_run_unguarded() {
    let mut w = World::default_world();
    w.deploy(V1);
    w.reads_fail = true;
    let keyed = keyed_start("Plain", "client/POST /v1/executions/k", "f1");
    let refused = w.call(keyed.clone());
    assert_eq!(
        (refused.status, refused.error_code()),
        (503, Some("IDEMPOTENCY_UNAVAILABLE"))
    );
    assert!(
        w.written.iter().all(|b| b.executions.is_empty()),
        "nothing started"
    );
    // A read without a key that fails is a storage error.
    let status = w.call(Request::GetExecution {
        execution_id: "elsewhere".into(),
    });
    assert_eq!(
        (status.status, status.error_code()),
        (503, Some("STORAGE_ERROR"))
    );
    // Readable again, the same request runs once.
    w.reads_fail = false;
    assert_eq!(w.call(keyed).status, 201);
}

#[test]
fn deploy_created_identical_conflict_and_missing_child() {
    let mut w = World::default_world();
    let r = w.deploy(V1);
    assert_eq!(r.body["workflows"][0]["created"], json!(true));
    assert_eq!(
        r.body["tasks"],
        json!([{"name": "demo.work", "version": "1.0.0", "created": true}])
    );
    let r = w.deploy(V1);
    assert_eq!(r.body["workflows"][0]["created"], json!(false));
    let changed = V1.replace(
        "with { n: input.n } }\n}\nworkflow Guarded",
        "with { n: input.n + 1 } }\n}\nworkflow Guarded",
    );
    assert_ne!(changed, V1);
    let r = w.deploy(&changed);
    assert_eq!(
        (r.status, r.error_code()),
        (409, Some("DEFINITION_CONFLICT"))
    );
    let task_changed = V2.replace("output { v: Int }", "output { v: String }");
    let r = w.deploy(&task_changed);
    assert_eq!(
        (r.status, r.error_code()),
        (409, Some("DEFINITION_CONFLICT"))
    );
    // A parent whose child is neither in the request nor registered.
    let family = r#"
    workflow Child version "1.0.0" { input { } step nap { sleep 1s } }
    workflow Mother version "1.0.0" { input { } step c { workflow Child version "1.0.0" with { } } }
    "#;
    let compiled = orbit_core::compile(
        &[orbit_core::Source {
            name: "f.orbit".into(),
            text: family.into(),
        }],
        &|_, _| None,
    );
    let mother = compiled
        .definitions
        .into_iter()
        .find(|d| d.workflow.name == "Mother")
        .unwrap();
    let r = w.call(Request::Deploy {
        definitions: vec![orbit_core::engine::DefinitionRecord {
            workflow: mother.workflow,
            definition_hash: mother.hash,
            source: String::new(),
            registered_at: 0,
        }],
        idempotency: None,
    });
    assert_eq!(
        (r.status, r.error_code()),
        (409, Some("CHILD_NOT_REGISTERED"))
    );
    assert_eq!(
        w.deploy(family).status,
        200,
        "children in the same request first"
    );
}

#[test]
fn admission_per_workflow_cap_oldest_first() {
    let mut w = World::default_world();
    w.deploy(V1);
    w.call(start("Capped", None, Some("c1"), json!({"n": 1})));
    w.at(1);
    w.call(start("Capped", None, Some("c2"), json!({"n": 2})));
    w.at(2);
    w.call(start("Capped", None, Some("c3"), json!({"n": 3})));
    w.call(start("Plain", None, Some("p"), json!({"n": 3})));
    assert_eq!(
        [
            w.status("c1"),
            w.status("c2"),
            w.status("c3"),
            w.status("p")
        ],
        ["running", "pending", "pending", "running"]
    );
    // Cancelling a pending execution ends it at once.
    w.call(Request::Cancel {
        execution_id: "c3".into(),
        reason: None,
        idempotency: None,
    });
    assert_eq!(w.status("c3"), "cancelled");
    let s = w.register("w", &["*"]);
    let tasks = w.poll(&s, 5);
    assert_eq!(tasks.len(), 2);
    let c1 = tasks.iter().find(|t| &*t.execution_id == "c1").unwrap();
    w.at(10);
    w.succeed(&c1.token, json!({"v": 1}));
    assert_eq!(w.status("c2"), "running");
    let listed = w.call(Request::ListExecutions(ListFilter {
        status: Some(orbit_core::history::Status::Running),
        ..ListFilter::default()
    }));
    let ids: Vec<&str> = listed.body["executions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["execution_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["p", "c2"], "newest first");
}

#[test]
fn global_cap_holds_executions_pending() {
    let mut w = World::new(Config {
        max_active_executions: Some(1),
        ..Config::default()
    });
    w.deploy(V1);
    w.call(start("Plain", None, Some("a"), json!({"n": 1})));
    w.call(start("Plain", None, Some("b"), json!({"n": 1})));
    assert_eq!(w.status("b"), "pending");
    let view = w.call(Request::GetExecution {
        execution_id: "b".into(),
    });
    assert_eq!(view.body["status"], json!("pending"));
}

#[test]
fn reads_history_and_wait() {
    let mut w = World::default_world();
    w.deploy(V1);
    w.call(start("Plain", None, Some("r"), json!({"n": 1})));
    let h = w.call(Request::History {
        execution_id: "r".into(),
        after_seq: Some(1),
    });
    let events = h.body["events"].as_array().unwrap();
    assert_eq!(events.len(), 2);
    assert_eq!(events[0]["seq"], json!(2));
    assert_eq!(events[0]["type"], json!("WorkflowStarted"));
    assert_eq!(events[0]["at"], json!("2023-11-14T22:13:20.000Z"));
    let waiting = w.send(Request::Wait {
        execution_id: "r".into(),
        timeout_ms: 60_000,
    });
    assert!(!w.replies.contains_key(&waiting));
    let s = w.register("w", &["*"]);
    let t = w.take(&s);
    w.at(5);
    w.succeed(&t.token, json!({"v": 3}));
    let done = w.replies.remove(&waiting).expect("answered when terminal");
    assert_eq!(done.body["status"], json!("completed"));
    assert_eq!(done.body["units"]["work"]["status"], json!("succeeded"));
    let timed = w.send(Request::Wait {
        execution_id: "missing".into(),
        timeout_ms: 10,
    });
    assert_eq!(w.replies[&timed].error_code(), Some("UNKNOWN_EXECUTION"));
}
