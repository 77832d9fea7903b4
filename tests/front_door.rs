//! The daemon's front door against clients that misbehave, on the real
//! binary: every wait on a client has a clock (an HTTP/2 preface, an idle
//! HTTP/2 connection, an answer nobody reads, a stalled body), requests
//! pipelined behind a parked long-poll are answered in order, a request
//! followed by a half-close is answered, and `Host` is checked as HTTP/1.1
//! requires. Each runs on both paths a connection can take: the lean front
//! (a fresh connection) and hyper (a connection whose first request was
//! chunked).

mod common;

use std::time::{Duration, Instant};

use common::raw::{answers, answers_until_quiet, onto_hyper, send_and_half_close, Answers, Ending};
use common::{Daemon, SEED_POLICY};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpSocket, TcpStream};

/// A daemon on the seed policy with `extra` flags, and its address.
fn daemon(extra: &[&str]) -> (Daemon, String, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("policy.yaml");
    std::fs::write(&policy, SEED_POLICY).unwrap();
    let daemon = Daemon::start(&policy, extra);
    let address = daemon.base.trim_start_matches("http://").to_string();
    (daemon, address, dir)
}

/// The two paths a connection can take.
#[derive(Debug, Clone, Copy)]
enum Path {
    Front,
    Hyper,
}

const PATHS: [Path; 2] = [Path::Front, Path::Hyper];

/// Moves `stream` onto `path`.
async fn onto(path: Path, stream: &mut TcpStream) {
    if let Path::Hyper = path {
        onto_hyper(stream, "front-door").await;
    }
}

/// A new connection to `address`, on `path`.
async fn connect(address: &str, path: Path) -> TcpStream {
    let mut stream = TcpStream::connect(address).await.unwrap();
    onto(path, &mut stream).await;
    stream
}

/// Sends `bytes` on `path`, half-closes, and reads what comes back.
async fn exchange(address: &str, path: Path, bytes: &[u8]) -> Answers {
    match path {
        Path::Front => send_and_half_close(address, bytes, Duration::from_secs(5)).await,
        Path::Hyper => {
            let mut stream = connect(address, path).await;
            let _ = stream.write_all(bytes).await;
            let _ = stream.shutdown().await;
            answers_until_quiet(&mut stream, Duration::from_secs(5)).await
        }
    }
}

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
/// An empty SETTINGS frame: what an HTTP/2 client sends after its preface.
const SETTINGS: &[u8] = &[0, 0, 0, 4, 0, 0, 0, 0, 0];

#[tokio::test]
async fn an_http2_preface_whole_or_partial_then_silence_is_closed_at_the_header_read_timeout() {
    let (_daemon, address, _dir) = daemon(&["--header-read-timeout", "1s"]);
    let whole_with_settings = [PREFACE, SETTINGS].concat();
    for (what, bytes) in [
        ("part of a preface", &PREFACE[..12]),
        ("a preface", PREFACE),
        ("a preface and its settings", &whole_with_settings[..]),
    ] {
        let mut stream = TcpStream::connect(&address).await.unwrap();
        stream.write_all(bytes).await.unwrap();
        let started = Instant::now();
        let ending = answers_until_quiet_raw(&mut stream, Duration::from_secs(8)).await;
        assert_eq!(ending, Ending::Closed, "{what}: still open after 8 s");
        assert!(
            started.elapsed() >= Duration::from_millis(900),
            "{what}: closed before its time"
        );
    }
}

/// Reads (HTTP/2 frames, not parsed) until the daemon closes or is quiet for `quiet`.
async fn answers_until_quiet_raw(stream: &mut TcpStream, quiet: Duration) -> Ending {
    use tokio::io::AsyncReadExt;
    let mut chunk = [0u8; 4096];
    loop {
        match tokio::time::timeout(quiet, stream.read(&mut chunk)).await {
            Err(_) => return Ending::Open,
            Ok(Ok(0) | Err(_)) => return Ending::Closed,
            Ok(Ok(_)) => {}
        }
    }
}

#[tokio::test]
async fn an_http2_request_over_prior_knowledge_is_answered() {
    let (daemon, _address, _dir) = daemon(&[]);
    let client = reqwest::Client::builder()
        .http2_prior_knowledge()
        .build()
        .unwrap();
    let answer = client
        .get(daemon.url("/v1/policies/payment-service"))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.version(), reqwest::Version::HTTP_2);
    assert_eq!(answer.status(), 200);
}

#[tokio::test]
async fn a_client_that_reads_no_answers_is_closed_at_the_write_timeout() {
    let (_daemon, address, _dir) = daemon(&["--write-timeout", "1s", "--header-read-timeout", "60s"]);
    for path in PATHS {
        // A small receive window, so the daemon's writes back up soon.
        let socket = TcpSocket::new_v4().unwrap();
        socket.set_recv_buffer_size(4096).unwrap();
        let mut stream = socket.connect(address.parse().unwrap()).await.unwrap();
        onto(path, &mut stream).await;
        // 10 KiB of requests: they fit in the socket buffers, their answers do not.
        let requests = "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n".repeat(300);
        stream.write_all(requests.as_bytes()).await.unwrap();
        // Read nothing for well past the write timeout.
        tokio::time::sleep(Duration::from_secs(4)).await;
        let answers = answers_until_quiet(&mut stream, Duration::from_secs(5)).await;
        assert_eq!(
            answers.ending,
            Ending::Closed,
            "{path:?}: a client that stopped reading kept its connection ({} answers)",
            answers.statuses.len()
        );
        assert!(answers.statuses.len() < 300, "{path:?}: every answer was written");
    }
}

#[tokio::test]
async fn a_stalled_body_is_answered_408_once_at_the_body_read_timeout() {
    let (_daemon, address, _dir) = daemon(&["--body-read-timeout", "2s"]);
    for path in PATHS {
        let mut stream = connect(&address, path).await;
        stream
            .write_all(b"POST /v1/reports HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"instance\":")
            .await
            .unwrap();
        let started = Instant::now();
        let answers = answers_until_quiet(&mut stream, Duration::from_secs(10)).await;
        let took = started.elapsed();
        assert_eq!(answers.statuses, [408], "{path:?}");
        assert_eq!(answers.ending, Ending::Closed, "{path:?}");
        // One timer: at 2 s, not at 2 s twice over.
        assert!(
            took >= Duration::from_millis(1900) && took < Duration::from_millis(3500),
            "{path:?}: 408 after {took:?}"
        );
    }
}

#[tokio::test]
async fn requests_pipelined_behind_a_parked_long_poll_are_answered_in_order() {
    let (daemon, address, _dir) = daemon(&[]);
    let etag = common::etag_of(&daemon.url("/v1/policies/payment-service")).await;
    for path in PATHS {
        let mut stream = connect(&address, path).await;
        let poll = format!(
            "GET /v1/policies/payment-service?wait=1s HTTP/1.1\r\nHost: x\r\nIf-None-Match: {etag}\r\n\r\n"
        );
        let behind = "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n".repeat(2_000);
        stream.write_all(poll.as_bytes()).await.unwrap();
        // Let the poll park before the rest arrives.
        tokio::time::sleep(Duration::from_millis(100)).await;
        stream.write_all(behind.as_bytes()).await.unwrap();
        let statuses = answers(&mut stream, 2_001).await;
        assert_eq!(statuses[0], "http/1.1 304 not modified", "{path:?}");
        assert!(
            statuses[1..].iter().all(|status| status == "http/1.1 200 ok"),
            "{path:?}"
        );
    }
}

#[tokio::test]
async fn a_request_then_a_half_close_is_always_answered() {
    let (_daemon, address, _dir) = daemon(&[]);
    for path in PATHS {
        for round in 0..40 {
            let answers = exchange(&address, path, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n").await;
            assert_eq!(answers.statuses, [200], "{path:?}, round {round}");
            assert_eq!(answers.ending, Ending::Closed, "{path:?}, round {round}");
        }
    }
}

#[tokio::test]
async fn host_is_checked_as_http_1_1_requires() {
    let (_daemon, address, _dir) = daemon(&[]);
    for path in PATHS {
        for (request, status) in [
            ("GET /healthz HTTP/1.1\r\nHost: stormguard:8080\r\n\r\n", 200),
            ("GET /healthz HTTP/1.1\r\n\r\n", 400),
            ("GET /healthz HTTP/1.1\r\nHost: a\r\nHost: a\r\n\r\n", 400),
            ("GET /healthz HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400),
            ("GET /healthz HTTP/1.1\r\nHost: user@a\r\n\r\n", 400),
            ("GET /healthz HTTP/1.0\r\n\r\n", 200),
            ("GET /healthz HTTP/1.0\r\nHost: a\r\nHost: b\r\n\r\n", 400),
        ] {
            let answers = exchange(&address, path, request.as_bytes()).await;
            assert_eq!(answers.statuses, [status], "{path:?}: {request:?}");
        }
    }
}
