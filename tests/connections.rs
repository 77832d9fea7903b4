//! Connection limits on the real binary: thousands of idle or half-sent
//! connections never stop a health check from being answered.

mod common;

use std::time::Duration;

use common::{Daemon, SEED_POLICY};
use tokio::io::AsyncWriteExt;

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
