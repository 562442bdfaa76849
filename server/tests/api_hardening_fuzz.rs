//! Property-based fuzzing of the HTTP API in process: random methods, paths
//! (known routes with random segments, percent-escapes, control and non-ASCII
//! characters), random headers (`Idempotency-Key`, `Authorization`) and
//! random bodies (bytes, arbitrary JSON, mutated valid bodies) against every
//! route, with and without `--auth`. No answer may be a 5xx and nothing may
//! panic; every 4xx carries the error shape with a code.
//! `PROPTEST_CASES` raises the budget.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod guard_support;

use axum::http::Method;
use guard_support::Harness;
use orbit_io_tokio::driver::Options;
use orbit_server::api::{self, auth};
use proptest::prelude::*;
use serde_json::{json, Value};
use std::sync::{Arc, OnceLock};

struct World {
    runtime: tokio::runtime::Runtime,
    open: Harness,
    guarded: Harness,
}

fn world() -> &'static World {
    static WORLD: OnceLock<World> = OnceLock::new();
    WORLD.get_or_init(|| {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let (open, guarded) = runtime.block_on(async {
            let open = Harness::start().await;
            open.deploy().await;
            let start = r#"{"workflow": "Plain", "input": {"n": 1}, "execution_id": "e1"}"#;
            open.post("/v1/executions", None, start).await;
            let file = format!(
                "[[tokens]]\nname = \"a\"\nrole = \"admin\"\nsha256 = \"{}\"\n\
                 [[tokens]]\nname = \"w\"\nrole = \"worker\"\ntask_patterns = [\"demo.*\"]\nsha256 = \"{}\"\n",
                auth::hash_token("admin"),
                auth::hash_token("worker")
            );
            let options = api::Options {
                auth: Some(Arc::new(auth::AuthConfig::parse(&file).unwrap())),
                ..api::Options::default()
            };
            let guarded = Harness::start_with(options, Options::default()).await;
            (open, guarded)
        });
        World {
            runtime,
            open,
            guarded,
        }
    })
}

fn segment() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("e1".to_owned()),
        Just("Plain".to_owned()),
        Just("1.0.0".to_owned()),
        "[a-zA-Z0-9_.:-]{1,12}",
        "[a-z]{600}",
        "%[0-9A-F]{2}[a-z%]{0,6}",
        "%00|%0A|%FF%FE|%E2%80%AE|\\.\\.|%2F",
        any::<String>().prop_map(|s| s
            .chars()
            .filter(|c| !c.is_control() && *c != '/' && *c != '?' && *c != '#' && *c != ' ')
            .take(20)
            .collect::<String>()
            .chars()
            .map(|c| if c.is_ascii() {
                c.to_string()
            } else {
                format!("%{:02X}", c as u32 % 256)
            })
            .collect()),
    ]
}

fn path() -> impl Strategy<Value = String> {
    (
        0usize..16,
        segment(),
        segment(),
        "[a-z_]{0,10}=[0-9a-z%-]{0,8}",
    )
        .prop_map(|(route, a, b, q)| {
            let p = match route {
                0 => "/v1/definitions".to_owned(),
                1 => format!("/v1/definitions/{a}/{b}"),
                2 => "/v1/executions".to_owned(),
                3 => format!("/v1/executions/{a}"),
                4 => format!("/v1/executions/{a}/history"),
                5 => format!("/v1/executions/{a}/signals/{b}"),
                6 => format!("/v1/executions/{a}/cancel"),
                // Never an existing id here: a wait on it would block.
                7 => format!("/v1/executions/x{a}/wait?timeout_ms=1"),
                8 => "/v1/workers".to_owned(),
                9 => format!("/v1/workers/{a}"),
                10 => format!("/v1/workers/{a}/poll"),
                11 => format!("/v1/workers/{a}/heartbeat"),
                12 => format!("/v1/tasks/{a}/result"),
                13 => "/healthz".to_owned(),
                14 => "/metrics".to_owned(),
                _ => format!("/{a}/{b}"),
            };
            if route == 7 || q.is_empty() {
                p
            } else if p.contains('?') {
                format!("{p}&{q}")
            } else {
                format!("{p}?{q}")
            }
        })
}

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<f64>().prop_map(|f| json!(f)),
        any::<u64>().prop_map(Value::from),
        ".{0,20}".prop_map(Value::from),
        "[a-z]{5000}".prop_map(Value::from),
    ];
    leaf.prop_recursive(6, 64, 8, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..8).prop_map(Value::from),
            prop::collection::btree_map(
                prop_oneof![
                    Just("workflow".to_owned()),
                    Just("input".to_owned()),
                    Just("execution_id".to_owned()),
                    Just("version".to_owned()),
                    Just("payload".to_owned()),
                    Just("reason".to_owned()),
                    Just("worker_id".to_owned()),
                    Just("task_patterns".to_owned()),
                    Just("max_tasks".to_owned()),
                    Just("wait_ms".to_owned()),
                    Just("held".to_owned()),
                    Just("tokens".to_owned()),
                    Just("output".to_owned()),
                    Just("error".to_owned()),
                    Just("source".to_owned()),
                    Just("filename".to_owned()),
                    Just("files".to_owned()),
                    ".{0,8}",
                ],
                inner,
                0..6
            )
            .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

fn valid_bodies() -> Vec<Value> {
    vec![
        json!({"workflow": "Plain", "input": {"n": 2}}),
        json!({"workflow": "Plain", "input": {"n": 2}, "execution_id": "fz"}),
        json!({"payload": {"x": 1}}),
        json!({"reason": "because"}),
        json!({"worker_id": "w", "task_patterns": ["demo.*"], "max_tasks": 3}),
        json!({"max_tasks": 2, "wait_ms": 0, "held": []}),
        json!({"held": ["t"]}),
        json!({"output": {"doubled": 4}}),
        json!({"error": {"code": "E", "message": "m", "retryable": false}}),
        json!({"source": guard_support::SOURCE, "filename": "f.orbit"}),
        json!({"files": [{"filename": "a.orbit", "source": "workflow W version \"1.0.0\" { input {} }"}]}),
    ]
}

/// A valid body with one member replaced, removed or added.
fn mutated() -> impl Strategy<Value = Value> {
    (0..valid_bodies().len(), 0usize..3, json_value(), ".{0,6}").prop_map(|(i, op, v, k)| {
        let mut body = valid_bodies()[i].clone();
        if let Some(obj) = body.as_object_mut() {
            let keys: Vec<String> = obj.keys().cloned().collect();
            match op {
                0 => {
                    if let Some(key) = keys.first() {
                        obj.insert(key.clone(), v);
                    }
                }
                1 => {
                    if let Some(key) = keys.last() {
                        obj.remove(key);
                    }
                }
                _ => {
                    obj.insert(k, v);
                }
            }
        }
        body
    })
}

fn body() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        Just(Vec::new()),
        prop::collection::vec(any::<u8>(), 0..64),
        json_value().prop_map(|v| serde_json::to_vec(&v).unwrap()),
        mutated().prop_map(|v| serde_json::to_vec(&v).unwrap()),
        (1usize..300).prop_map(|d| format!("{}1{}", "[".repeat(d), "]".repeat(d)).into_bytes()),
        Just(b"{\"workflow\": \"Plain\", \"input\": {\"n\": 1}".to_vec()),
        Just(vec![0xff, 0xfe, b'{', b'}']),
    ]
}

fn method() -> impl Strategy<Value = Method> {
    prop_oneof![
        4 => Just(Method::POST),
        3 => Just(Method::GET),
        1 => Just(Method::DELETE),
        1 => Just(Method::PUT),
        1 => Just(Method::PATCH),
    ]
}

fn headers() -> impl Strategy<Value = Vec<(String, String)>> {
    (
        prop::option::of(prop_oneof!["[A-Za-z0-9._:/-]{1,20}", "[ -~]{0,300}"]),
        prop::option::of(prop_oneof![
            Just("Bearer admin".to_owned()),
            Just("Bearer worker".to_owned()),
            "[ -~]{0,40}"
        ]),
        prop::option::of(prop_oneof![
            Just("text/event-stream".to_owned()),
            "[ -~]{0,20}"
        ]),
    )
        .prop_map(|(key, authz, accept)| {
            let mut h = Vec::new();
            if let Some(k) = key {
                h.push(("idempotency-key".to_owned(), k));
            }
            if let Some(a) = authz {
                h.push(("authorization".to_owned(), a));
            }
            if let Some(a) = accept {
                // A live stream on the known execution would not end.
                if a != "text/event-stream" {
                    h.push(("accept".to_owned(), a));
                }
            }
            h
        })
}

fn check(h: &Harness, method: Method, uri: &str, headers: &[(String, String)], body: Vec<u8>) {
    let w = world();
    let Ok(uri) = uri.parse::<axum::http::Uri>() else {
        return;
    };
    let headers: Vec<(&str, &str)> = headers
        .iter()
        .filter(|(k, v)| axum::http::HeaderValue::from_str(v).is_ok() && !k.is_empty())
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    let reply = w.runtime.block_on(async {
        tokio::time::timeout(
            std::time::Duration::from_secs(20),
            h.send_bytes(method.clone(), &uri.to_string(), &headers, body.clone()),
        )
        .await
        .expect("no request may stall")
    });
    assert!(
        !reply.status.is_server_error(),
        "{method} {uri} {headers:?} {body:?} -> {} {}",
        reply.status,
        reply.json
    );
    if reply.status.is_client_error() {
        assert!(
            reply.json["error"]["code"]
                .as_str()
                .is_some_and(|c| !c.is_empty()),
            "{method} {uri} -> {} without an error code: {:?}",
            reply.status,
            String::from_utf8_lossy(&reply.bytes)
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn no_5xx_without_auth(m in method(), p in path(), h in headers(), b in body()) {
        check(&world().open, m, &p, &h, b);
    }

    #[test]
    fn no_5xx_with_auth(m in method(), p in path(), h in headers(), b in body()) {
        check(&world().guarded, m, &p, &h, b);
    }
}
