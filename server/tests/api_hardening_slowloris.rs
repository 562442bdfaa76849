//! Slow and idle clients against the real `orbit` binary (run with a small
//! `--max-connections`, `--header-timeout` and `--body-timeout`): a crowd of
//! silent sockets larger than the connection cap, headers trickled byte by
//! byte and a body trickled byte by byte neither stall other requests nor
//! hold their connection past the deadlines.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod process_support;

use process_support::{free_addr, Log, ServerProcess};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// `orbit server` with a small connection cap and short header and body
/// deadlines, answering.
fn spawn(dir: &std::path::Path) -> ServerProcess {
    let db = format!("sqlite://{}", dir.join("o.db").display());
    let mut server = ServerProcess::spawn_with(
        free_addr(),
        &[
            "--db",
            &db,
            "--max-connections",
            "32",
            "--header-timeout",
            "1s",
            "--body-timeout",
            "2s",
        ],
        Log::Discard,
        &[("RUST_LOG", "error")],
    );
    server.wait_for_blocking("/healthz");
    server
}

/// `GET /healthz` on a fresh connection; the time it took, or `None`.
fn get_healthz(port: u16, timeout: Duration) -> Option<Duration> {
    let started = Instant::now();
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(timeout)).ok()?;
    s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .ok()?;
    let mut out = Vec::new();
    s.read_to_end(&mut out).ok()?;
    String::from_utf8_lossy(&out)
        .starts_with("HTTP/1.1 200")
        .then(|| started.elapsed())
}

/// Reads until the peer closes; the time that took (or `None` past `limit`).
fn closed_within(s: &mut TcpStream, limit: Duration) -> Option<(Duration, Vec<u8>)> {
    let started = Instant::now();
    s.set_read_timeout(Some(limit)).unwrap();
    let mut out = Vec::new();
    let mut buf = [0u8; 1024];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return Some((started.elapsed(), out)),
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {
                return Some((started.elapsed(), out))
            }
            Err(_) => return None,
        }
    }
}

#[test]
fn idle_connections_beyond_the_cap_do_not_stall_the_server() {
    let dir = tempfile::tempdir().unwrap();
    let server = spawn(dir.path());
    // Four times the cap, all silent.
    let idle: Vec<TcpStream> = (0..128)
        .map(|_| TcpStream::connect(("127.0.0.1", server.addr.port())).unwrap())
        .collect();
    // The silent ones are dropped after the 1 s header deadline, batch by
    // batch, so a real request gets through within a few seconds instead of
    // never.
    let took = get_healthz(server.addr.port(), Duration::from_secs(15))
        .expect("a request behind 128 idle connections must be answered");
    assert!(took < Duration::from_secs(10), "took {took:?}");
    // The first idle connections were closed by the server.
    let mut first = idle.into_iter().next().unwrap();
    assert!(closed_within(&mut first, Duration::from_secs(5)).is_some());
}

#[test]
fn a_few_idle_connections_cost_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let server = spawn(dir.path());
    let _idle: Vec<TcpStream> = (0..16)
        .map(|_| TcpStream::connect(("127.0.0.1", server.addr.port())).unwrap())
        .collect();
    for _ in 0..5 {
        let took = get_healthz(server.addr.port(), Duration::from_secs(5)).unwrap();
        assert!(took < Duration::from_millis(500), "took {took:?}");
    }
}

#[test]
fn trickled_headers_are_cut_off() {
    let dir = tempfile::tempdir().unwrap();
    let server = spawn(dir.path());
    let mut s = TcpStream::connect(("127.0.0.1", server.addr.port())).unwrap();
    let request =
        b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n\r\n";
    let started = Instant::now();
    let mut cut = false;
    for b in request {
        if s.write_all(&[*b]).is_err() {
            cut = true;
            break;
        }
        // Others are served meanwhile.
        if started.elapsed() < Duration::from_millis(600) {
            let took = get_healthz(server.addr.port(), Duration::from_secs(5)).unwrap();
            assert!(took < Duration::from_millis(500), "took {took:?}");
        }
        std::thread::sleep(Duration::from_millis(100));
        if started.elapsed() > Duration::from_secs(4) {
            break;
        }
    }
    if !cut {
        let (_, out) = closed_within(&mut s, Duration::from_secs(3))
            .expect("the server must close a connection trickling its headers");
        assert!(
            !String::from_utf8_lossy(&out).starts_with("HTTP/1.1 200"),
            "a trickled request must not be served"
        );
    }
    assert!(started.elapsed() < Duration::from_secs(8));
}

#[test]
fn trickled_body_is_refused_with_a_4xx() {
    let dir = tempfile::tempdir().unwrap();
    let server = spawn(dir.path());
    let mut s = TcpStream::connect(("127.0.0.1", server.addr.port())).unwrap();
    s.write_all(
        b"POST /v1/executions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 200\r\n\r\n{",
    )
    .unwrap();
    let started = Instant::now();
    let mut answered = None;
    s.set_read_timeout(Some(Duration::from_millis(10))).unwrap();
    let mut out = Vec::new();
    for _ in 0..100 {
        if s.write_all(b" ").is_err() {
            break;
        }
        let took = get_healthz(server.addr.port(), Duration::from_secs(5)).unwrap();
        assert!(took < Duration::from_millis(500), "took {took:?}");
        let mut buf = [0u8; 1024];
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                out.extend_from_slice(&buf[..n]);
                answered = Some(started.elapsed());
                break;
            }
            Err(_) => {}
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let elapsed = answered.unwrap_or_else(|| started.elapsed());
    assert!(
        elapsed < Duration::from_secs(5),
        "body held for {elapsed:?}"
    );
    let text = String::from_utf8_lossy(&out);
    assert!(text.starts_with("HTTP/1.1 4"), "answer: {text:?}");
    assert!(text.contains("INVALID_BODY"), "answer: {text:?}");
}
