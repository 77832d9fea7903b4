//! SIGTERM with reports in flight and long-polls open: every report answered
//! 202 is counted, every long-poll gets an answer rather than a reset, and
//! the process exits within its delay and grace.

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{etag_of, metrics, sample, Daemon, SEED_POLICY};
use reqwest::StatusCode;
use serde_json::json;

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
        assert_eq!(status.expect("an answer, not a reset"), StatusCode::NOT_MODIFIED);
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
