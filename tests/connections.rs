//! Connections on the real binary: thousands of idle or half-sent
//! connections never stop a health check from being answered; one
//! keep-alive connection carries simple and other requests in any order,
//! pipelined too; a long-poll whose client hangs up gives its place back.

mod common;

use std::time::Duration;

use common::raw::answers;
use common::{Daemon, SEED_POLICY};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

#[tokio::test]
async fn two_thousand_idle_and_half_sent_connections_leave_health_checks_answered() {
    // This test process needs the descriptors too; the daemon raises its own limit.
    let (_, hard) = rlimit::Resource::NOFILE.get().unwrap();
    rlimit::Resource::NOFILE.set(hard.min(65_536), hard).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("policy.yaml");
    std::fs::write(&policy, SEED_POLICY).unwrap();
    let daemon = Daemon::start(&policy, &["--header-read-timeout", "30s"]);
    let address = daemon.base.trim_start_matches("http://").to_string();

    let mut held = Vec::new();
    for i in 0..2_000 {
        let mut stream = tokio::net::TcpStream::connect(&address).await.unwrap();
        if i % 2 == 0 {
            // Half a request: the head never ends.
            stream
                .write_all(b"GET /v1/policies HTTP/1.1\r\nHost: x\r\n")
                .await
                .unwrap();
        }
        held.push(stream);
    }
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    for _ in 0..20 {
        let health = client
            .get(daemon.url("/healthz"))
            .send()
            .await
            .expect("health check answered");
        assert_eq!(health.status(), 200);
        let policy = client
            .get(daemon.url("/v1/policies/payment-service"))
            .send()
            .await
            .unwrap();
        assert_eq!(policy.status(), 200);
    }
    assert_eq!(held.len(), 2_000);
}

const OK: &str = "http/1.1 200 ok";
const ACCEPTED: &str = "http/1.1 202 accepted";

/// Writes `requests` at once (pipelined); their answers' status lines.
async fn exchange(stream: &mut TcpStream, requests: &[&str]) -> Vec<String> {
    stream.write_all(requests.concat().as_bytes()).await.unwrap();
    answers(stream, requests.len()).await
}

#[tokio::test]
async fn one_connection_carries_gets_posts_chunked_bodies_and_pipelined_requests_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("policy.yaml");
    std::fs::write(&policy, SEED_POLICY).unwrap();
    let daemon = Daemon::start(&policy, &[]);
    let mut stream = TcpStream::connect(daemon.base.trim_start_matches("http://"))
        .await
        .unwrap();

    let get = "GET /v1/policies/payment-service HTTP/1.1\r\nHost: x\r\n\r\n";
    assert_eq!(exchange(&mut stream, &[get, get]).await, ["http/1.1 200 ok"; 2]);

    let report = r#"{"instance":"pod-1","sequence":1,"reports":[]}"#;
    let post = format!(
        "POST /v1/reports HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{report}",
        report.len()
    );
    let missing = "GET /nowhere HTTP/1.1\r\nHost: x\r\n\r\n";
    let statuses = exchange(&mut stream, &[&post, get, missing]).await;
    assert_eq!(statuses, [ACCEPTED, OK, "http/1.1 404 not found"]);

    // A chunked body: the rest of the connection is hyper's, and still answers in order.
    let report = r#"{"instance":"pod-1","sequence":2,"reports":[]}"#;
    let chunked = format!(
        "POST /v1/reports HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n{:x}\r\n{report}\r\n0\r\n\r\n",
        report.len()
    );
    let statuses = exchange(&mut stream, &[&chunked, get, &post]).await;
    assert_eq!(statuses, [ACCEPTED, OK, ACCEPTED]);
}

/// Whether a long-poll sent on a new connection parks (no answer in 500 ms)
/// rather than being answered at once.
async fn parks(address: &str, poll: &str) -> Option<TcpStream> {
    let mut stream = TcpStream::connect(address).await.unwrap();
    stream.write_all(poll.as_bytes()).await.unwrap();
    let mut byte = [0u8; 1];
    let answered = tokio::time::timeout(Duration::from_millis(500), stream.read(&mut byte)).await;
    answered.is_err().then_some(stream)
}

#[tokio::test]
async fn a_long_poll_whose_client_hangs_up_gives_its_place_back() {
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("policy.yaml");
    std::fs::write(&policy, SEED_POLICY).unwrap();
    let daemon = Daemon::start(&policy, &["--max-long-polls", "1"]);
    let etag = common::etag_of(&daemon.url("/v1/policies/payment-service")).await;
    let poll = format!(
        "GET /v1/policies/payment-service?wait=60s HTTP/1.1\r\nHost: x\r\nIf-None-Match: {etag}\r\n\r\n"
    );
    let address = daemon.base.trim_start_matches("http://").to_string();
    let mut parked = parks(&address, &poll).await.expect("the first long-poll parks");
    for hang_up in 0..5 {
        // The one place is taken: another poll is turned away at once.
        let mut refused = TcpStream::connect(&address).await.unwrap();
        refused.write_all(poll.as_bytes()).await.unwrap();
        assert!(
            answers(&mut refused, 1).await[0].contains(" 503 "),
            "hang-up {hang_up}"
        );
        drop(parked);
        parked = common::eventually(Duration::from_secs(5), || parks(&address, &poll))
            .await
            .unwrap_or_else(|| panic!("the place of hung-up poll {hang_up} never came back"));
    }
}
