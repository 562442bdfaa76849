//! `--token` / `ORBIT_TOKEN` against a server started with `--auth`: the CLI
//! and the SDK send `Authorization: Bearer …`; a missing token is refused
//! (exit 1), a worker token cannot deploy or register outside its patterns.

#![allow(clippy::unwrap_used)]

mod cli_support;

use std::process::{Command, Stdio};
use std::time::Duration;

use cli_support::{orbit, Server, PLAIN};
use orbit_sdk::{Client, StartOptions, Status, Task, Worker};
use orbit_server::api::auth::hash_token;
use serde_json::json;

const ADMIN: &str = "adm-s3cret-token";
const WORKER: &str = "wk-s3cret-token";

fn auth_file(dir: &std::path::Path) -> String {
    let path = dir.join("auth.toml");
    std::fs::write(
        &path,
        format!(
            "[[tokens]]\nname = \"ops\"\nrole = \"admin\"\nsha256 = \"{}\"\n\n\
             [[tokens]]\nname = \"demo-worker\"\nrole = \"worker\"\nsha256 = \"{}\"\n\
             task_patterns = [\"demo.*\"]\n",
            hash_token(ADMIN),
            hash_token(WORKER)
        ),
    )
    .unwrap();
    path.display().to_string()
}

#[test]
fn tokens_reach_the_server() {
    let dir = tempfile::tempdir().unwrap();
    let file = auth_file(dir.path());
    let server = Server::start(&["--auth", &file]);
    let plain = server.file("plain.orbit", PLAIN);

    let r = orbit(&server.url, &["ls"]);
    assert_eq!(r.code, 1, "{r:?}");
    assert!(r.stderr.contains("UNAUTHENTICATED"), "{}", r.stderr);
    let r = orbit(&server.url, &["ls", "--token", "wrong"]);
    assert_eq!(r.code, 1, "{r:?}");

    let r = orbit(&server.url, &["deploy", &plain, "--token", WORKER]);
    assert_eq!(r.code, 1, "{r:?}");
    assert!(r.stderr.contains("FORBIDDEN"), "{}", r.stderr);
    let r = orbit(&server.url, &["deploy", &plain, "--token", ADMIN]);
    assert_eq!(r.code, 0, "{r:?}");

    // ORBIT_TOKEN works as well as --token.
    let out = Command::new(env!("CARGO_BIN_EXE_orbit"))
        .args(["ls", "--server", &server.url])
        .env("ORBIT_TOKEN", ADMIN)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        // Outside its grant: the worker is refused and run() says why.
        let outside = Worker::builder("w-out")
            .token(Some(WORKER.into()))
            .handler("payments.charge", |_t: Task| async { Ok(json!({})) })
            .connect(&server.url)
            .unwrap();
        let err = outside.run(std::future::pending()).await.unwrap_err();
        assert_eq!(err.code(), Some("FORBIDDEN"));

        let worker = Worker::builder("w-demo")
            .token(Some(WORKER.into()))
            .poll_wait(Duration::from_millis(500))
            .handler("demo.work", |task: Task| async move {
                Ok(json!({ "doubled": task.input["n"].as_i64().unwrap() * 2 }))
            })
            .connect(&server.url)
            .unwrap();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let running = tokio::spawn(async move {
            worker
                .run(async move {
                    let _ = stop_rx.await;
                })
                .await
        });
        let client = Client::connect(&server.url)
            .unwrap()
            .with_token(Some(ADMIN.into()));
        let mut start = StartOptions::new("Plain", json!({"n": 4}));
        start.execution_id = Some("auth-1".into());
        client.start(start).await.unwrap();
        let done = client
            .wait("auth-1", Duration::from_secs(10))
            .await
            .unwrap();
        assert_eq!(done.status, Status::Completed);
        assert_eq!(done.output, json!({"doubled": 8}));
        stop_tx.send(()).unwrap();
        running.await.unwrap().unwrap();
    });
}

/// Runs `orbit auth hash-token ARGS` with `stdin` fed in.
fn hash_token_cli(args: &[&str], stdin: &str) -> (i32, String) {
    use std::io::Write;
    let mut child = Command::new(env!("CARGO_BIN_EXE_orbit"))
        .arg("auth")
        .arg("hash-token")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

#[test]
fn hash_token_prints_what_the_auth_file_wants() {
    // From the argument, and from stdin with its newline dropped: the same
    // 64 hex digits the server compares against.
    let (code, out) = hash_token_cli(&[ADMIN], "");
    assert_eq!(code, 0);
    assert_eq!(out.trim(), hash_token(ADMIN));
    assert_eq!(out.trim().len(), 64);
    let (code, out) = hash_token_cli(&[], &format!("{ADMIN}\n"));
    assert_eq!(code, 0);
    assert_eq!(out.trim(), hash_token(ADMIN));
    // The known value of the book's example (`password`).
    let (_, out) = hash_token_cli(&["password"], "");
    assert_eq!(
        out.trim(),
        "5e884898da28047151d0e56f8dc6292773603d0d6aabbdd62a11ef721d1542d8"
    );
    // Nothing to hash is a usage error.
    let (code, _) = hash_token_cli(&[], "");
    assert_eq!(code, 2);

    // --generate: a fresh token and its hash; an auth file made from the
    // printed lines lets that token in.
    let (code, out) = hash_token_cli(&["--generate"], "");
    assert_eq!(code, 0);
    let token = out
        .lines()
        .find_map(|l| l.strip_prefix("token = \""))
        .and_then(|l| l.strip_suffix('"'))
        .unwrap();
    let sha = out.lines().find(|l| l.starts_with("sha256 = ")).unwrap();
    let file = format!("[[tokens]]\nname = \"gen\"\nrole = \"client\"\n{sha}\n");
    let config = orbit_server::api::auth::AuthConfig::parse(&file).unwrap();
    assert_eq!(config.authenticate(token).unwrap().name, "gen");
    assert!(config.authenticate("other").is_none());
}

/// api.md: `--json` for scripts on every command, `auth hash-token` too.
#[test]
fn hash_token_json_prints_the_hash_as_an_object() {
    let (code, out) = hash_token_cli(&["password", "--json"], "");
    assert_eq!(code, 0);
    let body: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        body,
        json!({"sha256": "5e884898da28047151d0e56f8dc6292773603d0d6aabbdd62a11ef721d1542d8"})
    );
    let (code, out) = hash_token_cli(&["--generate", "--json"], "");
    assert_eq!(code, 0);
    let body: serde_json::Value = serde_json::from_str(&out).unwrap();
    let token = body["token"].as_str().unwrap();
    assert_eq!(body["sha256"], hash_token(token));
    let (code, out) = hash_token_cli(&["--json"], "");
    assert_eq!(code, 2);
    let body: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(body["error"]["code"], "INVALID_ARGUMENT");
}
