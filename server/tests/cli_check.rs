//! `orbit check` and `orbit explain`, run as the real binary.
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn orbit(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_orbit"))
        .args(args)
        .current_dir(repo())
        .output()
        .unwrap()
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8(bytes.to_vec()).unwrap()
}

fn broken_file() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("orbit-cli-check-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("broken.orbit");
    std::fs::write(
        &path,
        "task \"t.send\" version \"1.0.0\" {\n    input  { body: String }\n    output { }\n}\n\n\
         workflow W version \"1.0.0\" {\n    input { count: Int }\n    step send {\n        worker \"t.send\"\n        \
         with { body: \"n=\" + input.count }\n    }\n    step wait { sleep 1s  after: [nope] }\n}\n",
    )
    .unwrap();
    path
}

#[test]
fn check_prints_name_version_and_hash_per_workflow_children_first() {
    let out = orbit(&["check", "examples/order.orbit"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    let lines: Vec<Vec<&str>> = stdout.lines().map(|l| l.split(' ').collect()).collect();
    assert_eq!(lines.len(), 2, "{stdout}");
    assert_eq!(&lines[0][..2], ["Shipping", "1.0.0"]);
    assert_eq!(&lines[1][..2], ["Order", "1.0.0"]);
    for l in &lines {
        assert_eq!(l.len(), 3);
        assert_eq!(l[2].len(), 64);
        assert!(l[2]
            .chars()
            .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase()));
    }
    assert!(text(&out.stderr).is_empty());
}

#[test]
fn check_reports_every_error_rustc_style_and_exits_1() {
    let path = broken_file();
    let out = orbit(&["check", path.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stdout).is_empty());
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("error[E0400]: type mismatch: expected `String`, found `Int`"),
        "{stderr}"
    );
    assert!(
        stderr.contains("error[E0106]: unknown step `nope` in `after`"),
        "{stderr}"
    );
    assert!(stderr.contains("broken.orbit:10:"), "{stderr}");
    assert!(stderr.contains("^^^^^^^^^^^"), "{stderr}");
    assert!(stderr.contains("could not compile: 2 errors"), "{stderr}");
}

#[test]
fn check_json_has_ok_workflows_and_diagnostics() {
    let out = orbit(&["check", "--json", "examples/order.orbit"]);
    assert_eq!(out.status.code(), Some(0));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["ok"], true);
    assert_eq!(v["diagnostics"], serde_json::json!([]));
    assert_eq!(v["workflows"][0]["name"], "Shipping");
    assert_eq!(v["workflows"][1]["name"], "Order");
    assert_eq!(v["workflows"][1]["version"], "1.0.0");
    assert_eq!(
        v["workflows"][1]["definition_hash"].as_str().unwrap().len(),
        64
    );

    let path = broken_file();
    let out = orbit(&["check", "--json", path.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["ok"], false);
    assert_eq!(v["workflows"], serde_json::json!([]));
    let codes: Vec<&str> = v["diagnostics"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["code"].as_str().unwrap())
        .collect();
    assert_eq!(codes, ["E0400", "E0106"]);
    assert_eq!(v["diagnostics"][0]["line"], 10);
    assert!(v["diagnostics"][0]["file"]
        .as_str()
        .unwrap()
        .ends_with("broken.orbit"));
}

#[test]
fn check_output_is_deterministic() {
    let a = text(&orbit(&["check", "examples/order.orbit"]).stdout);
    let b = text(&orbit(&["check", "examples/order.orbit"]).stdout);
    assert_eq!(a, b);
}

#[test]
fn check_unreadable_file_and_usage_errors_exit_2() {
    let out = orbit(&["check", "does/not/exist.orbit"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("cannot read does/not/exist.orbit"));
    let out = orbit(&["check"]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn explain_prints_the_explanation_or_refuses_unknown_codes() {
    let out = orbit(&["explain", "E0400"]);
    assert_eq!(out.status.code(), Some(0));
    assert!(text(&out.stdout).starts_with("# E0400: type mismatch"));
    let out = orbit(&["explain", "e0405"]);
    assert_eq!(out.status.code(), Some(0));
    assert!(text(&out.stdout).starts_with("# E0405"));
    let out = orbit(&["explain", "E9999"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty());
    assert!(text(&out.stderr).contains("`E9999` is not a diagnostic code"));
}

/// A one-purpose HTTP server answering `GET /v1/definitions/{name}/{version}`
/// from `definitions`; 404 for anything else. Returns its base URL.
fn fake_server(definitions: Vec<orbit_core::Definition>) -> String {
    use std::io::{BufRead, BufReader, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut request_line = String::new();
            reader.read_line(&mut request_line).unwrap();
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap() == 0 || line == "\r\n" {
                    break;
                }
            }
            let path = request_line.split(' ').nth(1).unwrap_or("").to_string();
            let found = definitions.iter().find(|d| {
                path == format!("/v1/definitions/{}/{}", d.workflow.name, d.workflow.version)
            });
            let (status, body) = match found {
                Some(d) => (
                    "200 OK",
                    serde_json::json!({
                        "name": d.workflow.name,
                        "version": d.workflow.version,
                        "definition_hash": d.hash,
                        "source": "",
                        "definition": d.workflow,
                    }),
                ),
                None => (
                    "404 Not Found",
                    serde_json::json!({"error": {"code": "UNKNOWN_WORKFLOW", "message": "no such workflow"}}),
                ),
            };
            let body = body.to_string();
            let _ = write!(
                stream,
                "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    url
}

#[test]
fn check_server_resolves_registered_children_and_pins_their_hash() {
    let order = std::fs::read_to_string(repo().join("examples/order.orbit")).unwrap();
    let all = orbit_core::compile(
        &[orbit_core::Source {
            name: "order.orbit".into(),
            text: order.clone(),
        }],
        &|_, _| None,
    );
    let shipping = all
        .definitions
        .iter()
        .find(|d| d.workflow.name == "Shipping")
        .unwrap()
        .clone();
    let order_hash = all
        .definitions
        .iter()
        .find(|d| d.workflow.name == "Order")
        .unwrap()
        .hash
        .clone();

    // The same file without the Shipping workflow.
    let start = order.find("workflow Shipping").unwrap();
    let end = order.find("workflow Order").unwrap();
    let parent_only = format!("{}{}", &order[..start], &order[end..]);
    let dir = std::env::temp_dir().join(format!("orbit-cli-server-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("parent.orbit");
    std::fs::write(&path, parent_only).unwrap();
    let path = path.to_str().unwrap();

    let out = orbit(&["check", path]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("error[E0103]"),
        "{}",
        text(&out.stderr)
    );

    let url = fake_server(vec![shipping]);
    let out = orbit(&["check", "--server", &url, path]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), format!("Order 1.0.0 {order_hash}\n"));
}

#[test]
fn check_server_that_cannot_be_reached_exits_2() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    drop(listener);
    let order = std::fs::read_to_string(repo().join("examples/order.orbit")).unwrap();
    let start = order.find("workflow Shipping").unwrap();
    let end = order.find("workflow Order").unwrap();
    let dir = std::env::temp_dir().join(format!("orbit-cli-down-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("parent.orbit");
    std::fs::write(&path, format!("{}{}", &order[..start], &order[end..])).unwrap();
    let out = orbit(&["check", "--server", &url, path.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("cannot reach"),
        "{}",
        text(&out.stderr)
    );
}

/// api.md: `--json` for scripts on every command, `explain` included.
#[test]
fn explain_json_gives_code_title_and_explanation() {
    let out = orbit(&["explain", "e0400", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let body: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(body["code"], "E0400");
    assert_eq!(body["title"], "type mismatch");
    assert!(body["explanation"]
        .as_str()
        .unwrap()
        .starts_with("# E0400: type mismatch"));
    let out = orbit(&["explain", "E9999", "--json"]);
    assert_eq!(out.status.code(), Some(2));
    let body: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(body["error"]["code"], "UNKNOWN_CODE");
    assert!(text(&out.stderr).contains("`E9999` is not a diagnostic code"));
}
