//! What must be one across replicas, through a real Redis: a report batch
//! whose answer is lost and that the client sends again through a Service
//! to the other replica is counted once fleet-wide, and an instance one
//! service account speaks for cannot be taken over at the other replica.
//! Without a store (or while it is down), each replica decides alone.

mod common;

use std::time::Duration;

use common::issuer::{claims, Issuer};
use common::proxy::{Proxy, Trick};
use common::redis::Redis;
use common::{metrics, sample, Daemon};
use reqwest::StatusCode;
use serde_json::{json, Value};
use stormguard_client::{Outcome, Reporter, ReporterConfig};

const POLICY: &str = "defaults:\n  maxRetries: 3\nservices:\n  payments:\n    maxRetries: 2\n";

fn policy_file() -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("policy.yaml");
    std::fs::write(&path, POLICY).unwrap();
    (dir, path)
}

/// A family's sample summed over the replicas.
async fn summed(replicas: &[&Daemon], name: &str) -> f64 {
    let mut sum = 0.0;
    for replica in replicas {
        sum += sample(&metrics(replica).await, name).unwrap_or(0.0);
    }
    sum
}

/// A reporter sends 5 successes; its answer is lost after the first
/// replica counted them; it sends the batch again, which the proxy deals to
/// the second replica, then 1 more success. The successes and duplicates
/// counted, summed over both replicas.
async fn resend_to_the_other_replica(a: &Daemon, b: &Daemon) -> (f64, f64) {
    let proxy = Proxy::balance(&[&a.base, &b.base], Trick::LoseAnswer { nth: 1 }).await;
    let reporter = Reporter::start(ReporterConfig {
        interval: Duration::from_secs(3600),
        timeout: Duration::from_millis(500),
        ..ReporterConfig::new(&proxy.base, "pod-1")
    })
    .expect("a valid reporter configuration");
    for _ in 0..5 {
        reporter.record("payments", "/charge", 0, Outcome::Success);
    }
    assert!(reporter.flush().await.is_err(), "the answer was lost");
    reporter.record("payments", "/charge", 0, Outcome::Success);
    reporter
        .flush()
        .await
        .expect("the batch again, then the new counts");
    assert_eq!(proxy.reports(), 3, "batch 1 to a, again to b, batch 2 to a");
    let successes = r#"http_client_requests_total{endpoint="/charge",service="payments",status="success"}"#;
    (
        summed(&[a, b], successes).await,
        summed(&[a, b], r#"stormguard_reports_total{result="duplicate"}"#).await,
    )
}

#[tokio::test]
async fn a_batch_sent_again_to_the_other_replica_is_counted_once_fleet_wide() {
    let Some(redis) = Redis::start(None) else {
        return;
    };
    let (_dir, policy) = policy_file();
    let url = redis.url();
    let a = Daemon::start(&policy, &["--pace-store", &url]);
    let b = Daemon::start(&policy, &["--pace-store", &url]);
    assert_eq!(
        resend_to_the_other_replica(&a, &b).await,
        (6.0, 1.0),
        "every attempt once, the resent batch a duplicate"
    );
}

#[tokio::test]
async fn without_a_store_each_replica_counts_a_resent_batch_again() {
    let (_dir, policy) = policy_file();
    let a = Daemon::start(&policy, &[]);
    let b = Daemon::start(&policy, &[]);
    assert_eq!(
        resend_to_the_other_replica(&a, &b).await,
        (11.0, 0.0),
        "as documented: the batch log is per replica"
    );
}

/// Two replicas checking tokens, with `extra` flags each.
fn token_replicas(issuer: &Issuer, extra: &[&str]) -> (tempfile::TempDir, Daemon, Daemon) {
    let (dir, policy) = policy_file();
    let keys = dir.path().join("jwks.json");
    std::fs::write(&keys, issuer.jwks.to_string()).unwrap();
    let flags = [
        &["--tokens", "required", "--token-keys", keys.to_str().unwrap()][..],
        extra,
    ]
    .concat();
    let a = Daemon::start(&policy, &flags);
    let b = Daemon::start(&policy, &flags);
    (dir, a, b)
}

/// `token`'s report about payments as `instance` to `daemon`: the status and body.
async fn report(daemon: &Daemon, token: &str, instance: &str) -> (StatusCode, Value) {
    let body = json!({"service": "payments", "instance": instance,
                      "endpoints": [{"endpoint": "/charge", "requests": {"success": 1}}]});
    let response = reqwest::Client::new()
        .post(daemon.url("/v1/reports"))
        .bearer_auth(token)
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = response.status();
    (status, response.json().await.unwrap_or(Value::Null))
}

#[tokio::test]
async fn an_instance_cannot_be_taken_over_at_the_other_replica() {
    let Some(mut redis) = Redis::start(None) else {
        return;
    };
    let issuer = Issuer::new();
    let url = redis.url();
    let (_dir, a, b) = token_replicas(&issuer, &["--pace-store", &url]);
    let checkout = issuer.sign(&claims("shop", "checkout"), false);
    let intruder = issuer.sign(&claims("shop", "intruder"), true);

    assert_eq!(report(&a, &checkout, "pod-1").await.0, StatusCode::ACCEPTED);
    let (status, refused) = report(&b, &intruder, "pod-1").await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{refused}");
    assert!(
        refused["error"].as_str().unwrap().contains("shop/checkout"),
        "names the owner: {refused}"
    );
    assert_eq!(
        report(&b, &checkout, "pod-1").await.0,
        StatusCode::ACCEPTED,
        "its owner speaks at either replica"
    );
    let (status, _) = report(&a, &intruder, "pod-1").await;
    assert_eq!(status, StatusCode::FORBIDDEN);

    // The store gone: each replica decides alone, and still serves.
    redis.kill();
    assert_eq!(report(&b, &checkout, "pod-2").await.0, StatusCode::ACCEPTED);
    assert_eq!(report(&b, &intruder, "pod-1").await.0, StatusCode::FORBIDDEN);
    let errors: f64 = metrics(&b)
        .await
        .lines()
        .filter(|line| line.starts_with("stormguard_pace_store_errors_total{"))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    assert!(errors >= 1.0, "the failed check is counted");
}

#[tokio::test]
async fn without_a_store_each_replica_binds_its_own_instances() {
    let issuer = Issuer::new();
    let (_dir, a, b) = token_replicas(&issuer, &[]);
    let checkout = issuer.sign(&claims("shop", "checkout"), false);
    let intruder = issuer.sign(&claims("shop", "intruder"), true);
    assert_eq!(report(&a, &checkout, "pod-1").await.0, StatusCode::ACCEPTED);
    assert_eq!(
        report(&b, &intruder, "pod-1").await.0,
        StatusCode::ACCEPTED,
        "as documented: bindings are per replica"
    );
}
