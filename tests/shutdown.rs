//! SIGTERM with reports in flight and long-polls open: every report answered
//! 202 is counted, every long-poll gets an answer (503, come back later)
//! rather than a reset, watching clients do not spin, and the process exits
//! within its delay and grace.

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::proxy::{Proxy, Trick};
use common::{etag_of, metrics, sample, Daemon, SEED_POLICY};
use reqwest::StatusCode;
use serde_json::json;
use stormguard_client::{ClientConfig, PolicyClient, PolicySource};

#[tokio::test]
async fn sigterm_loses_no_report_and_answers_every_long_poll() {
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("policy.yaml");
    std::fs::write(&policy, SEED_POLICY).unwrap();
    let mut daemon = Daemon::start(&policy, &["--shutdown-delay", "3s", "--shutdown-grace", "2s"]);
    let client = reqwest::Client::new();
    let url = daemon.url("/v1/policies/payment-service");
    let etag = etag_of(&url).await;

    let polls: Vec<_> = (0..20)
        .map(|_| {
            let (client, url, etag) = (client.clone(), url.clone(), etag.clone());
            tokio::spawn(async move {
                client
                    .get(format!("{url}?wait=60s"))
                    .header("if-none-match", etag)
                    .send()
                    .await
                    .map(|r| r.status())
            })
        })
        .collect();
    let accepted = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let reporters: Vec<_> = (0..4)
        .map(|i| {
            let (client, url, accepted, stop) = (
                client.clone(),
                daemon.url("/v1/reports"),
                accepted.clone(),
                stop.clone(),
            );
            tokio::spawn(async move {
                let report = json!({"service": "payment-service", "instance": format!("pod-{i}"),
                                    "endpoints": [{"endpoint": "/charge", "requests": {"success": 1}}]});
                while !stop.load(Relaxed) {
                    if let Ok(r) = client.post(&url).json(&report).send().await {
                        if r.status() == StatusCode::ACCEPTED {
                            accepted.fetch_add(1, Relaxed);
                        }
                    }
                }
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let signalled = Instant::now();
    daemon.signal("TERM");

    for poll in polls {
        let status = tokio::time::timeout(Duration::from_secs(3), poll)
            .await
            .expect("the long-poll is answered")
            .unwrap();
        assert_eq!(
            status.expect("an answer, not a reset"),
            StatusCode::SERVICE_UNAVAILABLE,
            "go elsewhere, and not at once"
        );
    }
    // Reports keep being taken during the shutdown delay; stop them well inside it.
    tokio::time::sleep(Duration::from_millis(600)).await;
    stop.store(true, Relaxed);
    for reporter in reporters {
        reporter.await.unwrap();
    }
    assert!(
        signalled.elapsed() < Duration::from_millis(2500),
        "still inside the shutdown delay"
    );
    let text = metrics(&daemon).await;
    let counted = sample(
        &text,
        r#"http_client_requests_total{endpoint="/charge",service="payment-service",status="success"}"#,
    );
    let answered = accepted.load(Relaxed);
    assert!(answered > 50, "{answered} reports answered 202");
    assert_eq!(
        counted,
        Some(answered as f64),
        "every report answered 202 is counted"
    );
    assert_eq!(daemon.wait_exit(Duration::from_secs(5)), Some(0));
    assert!(
        signalled.elapsed() < Duration::from_millis(3000 + 2000 + 1000),
        "exited within delay and grace"
    );
}

/// A rolling update of the daemon: real watching clients through SIGTERM
/// and the shutdown delay poll at most twice each, not in a loop.
#[tokio::test]
async fn watching_clients_do_not_spin_on_a_draining_daemon() {
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("policy.yaml");
    std::fs::write(&policy, SEED_POLICY).unwrap();
    let mut daemon = Daemon::start(&policy, &["--shutdown-delay", "3s"]);
    let proxy = Proxy::start(&daemon.base, Trick::None).await;
    let mut clients = Vec::new();
    for _ in 0..10 {
        let config = ClientConfig {
            watch_wait: Duration::from_secs(60),
            ..ClientConfig::new(&proxy.base, "payment-service")
        };
        clients.push(PolicyClient::start(config).await.unwrap());
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let signalled = tokio::time::Instant::now();
    daemon.signal("TERM");
    tokio::time::sleep(Duration::from_millis(2800)).await;
    let polls = proxy.requests_since("/v1/policies", signalled);
    assert!(
        polls <= 2 * clients.len(),
        "{polls} polls from {} clients during the drain",
        clients.len()
    );
    assert_eq!(daemon.wait_exit(Duration::from_secs(15)), Some(0));
    assert!(clients.iter().all(|c| c.source() == PolicySource::Daemon));
}
