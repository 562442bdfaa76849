//! `--idempotency-key` on `orbit run`, `orbit signal` and `orbit cancel`
//! against the real server: the same key and body replay the first answer,
//! another body with the key is refused, a malformed key is refused.

#![allow(clippy::unwrap_used)]

mod cli_support;

use cli_support::{orbit, Server, PLAIN};

#[test]
fn keys_replay_and_guard() {
    let server = Server::start(&[]);
    let file = server.file("plain.orbit", PLAIN);
    let r = orbit(
        &server.url,
        &["deploy", &file, "--idempotency-key", "deploy-1"],
    );
    assert_eq!(r.code, 0, "{r:?}");
    let again = orbit(
        &server.url,
        &["deploy", &file, "--idempotency-key", "deploy-1"],
    );
    assert_eq!(again.code, 0, "{again:?}");
    assert_eq!(
        again.stdout, r.stdout,
        "a replay answers what the first call answered"
    );

    let first = orbit(
        &server.url,
        &[
            "run",
            "Plain",
            "--input",
            r#"{"n": 1}"#,
            "--idempotency-key",
            "start-1",
        ],
    );
    assert_eq!(first.code, 0, "{first:?}");
    let id = first.stdout.trim().to_string();
    assert!(!id.is_empty());
    // Same key, same body (whitespace and key order do not matter): the
    // same execution, not a second one.
    let second = orbit(
        &server.url,
        &[
            "run",
            "Plain",
            "--input",
            r#"{ "n":1 }"#,
            "--idempotency-key",
            "start-1",
        ],
    );
    assert_eq!(second.code, 0, "{second:?}");
    assert_eq!(second.stdout.trim(), id);
    let r = orbit(&server.url, &["ls", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(v["executions"].as_array().unwrap().len(), 1, "{v}");

    // Same key, another body: refused, exit 1.
    let r = orbit(
        &server.url,
        &[
            "run",
            "Plain",
            "--input",
            r#"{"n": 2}"#,
            "--idempotency-key",
            "start-1",
        ],
    );
    assert_eq!(r.code, 1, "{r:?}");
    assert!(r.stderr.contains("IDEMPOTENCY_KEY_REUSED"), "{}", r.stderr);
    // A key with a space is malformed.
    let r = orbit(
        &server.url,
        &[
            "run",
            "Plain",
            "--input",
            r#"{"n": 2}"#,
            "--idempotency-key",
            "bad key",
        ],
    );
    assert_eq!(r.code, 1, "{r:?}");
    assert!(r.stderr.contains("INVALID_IDEMPOTENCY_KEY"), "{}", r.stderr);

    // Signals: the same key records the signal once.
    let r = orbit(
        &server.url,
        &["run", "Gate", "--input", r#"{"n": 1}"#, "--id", "g-1"],
    );
    assert_eq!(r.code, 0, "{r:?}");
    let s1 = orbit(
        &server.url,
        &[
            "signal",
            "g-1",
            "approve",
            "--payload",
            "1",
            "--idempotency-key",
            "sig-1",
            "--json",
        ],
    );
    let s2 = orbit(
        &server.url,
        &[
            "signal",
            "g-1",
            "approve",
            "--payload",
            "1",
            "--idempotency-key",
            "sig-1",
            "--json",
        ],
    );
    assert_eq!(s1.code, 0, "{s1:?}");
    assert_eq!(s2.code, 0, "{s2:?}");
    assert_eq!(s1.stdout, s2.stdout);
    let logs = orbit(&server.url, &["logs", "g-1"]);
    assert_eq!(
        logs.stdout.matches("SignalReceived").count(),
        1,
        "{}",
        logs.stdout
    );

    // Cancel with a key, twice: both succeed.
    let c1 = orbit(
        &server.url,
        &["cancel", &id, "--idempotency-key", "cancel-1"],
    );
    let c2 = orbit(
        &server.url,
        &["cancel", &id, "--idempotency-key", "cancel-1"],
    );
    assert_eq!(c1.code, 0, "{c1:?}");
    assert_eq!(c2.code, 0, "{c2:?}");
}
