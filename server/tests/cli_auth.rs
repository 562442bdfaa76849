//! `--token` / `ORBIT_TOKEN` against a server started with `--auth`: the CLI
//! and the SDK send `Authorization: Bearer …`; a missing token is refused
//! (exit 1), a worker token cannot deploy or register outside its patterns.

#![allow(clippy::unwrap_used)]

mod cli_support;

use std::process::{Command, Stdio};
use std::time::Duration;

use cli_support::{orbit, Server, PLAIN};
use orbit_server::api::auth::hash_token;
use orbit_server::sdk::{Client, StartOptions, Status, Task, Worker};
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
