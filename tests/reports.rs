//! `POST /v1/reports` end to end: the real daemon, its `/metrics`, its limits.

mod common;

use std::time::Duration;

use common::{eventually, metrics, sample, Daemon, SEED_POLICY};
use reqwest::StatusCode;
use serde_json::{json, Value};

fn policy_file() -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("policy.yaml");
    std::fs::write(&path, SEED_POLICY).unwrap();
    (dir, path)
}

async fn post(daemon: &Daemon, body: impl Into<reqwest::Body>) -> (StatusCode, Value) {
    let response = reqwest::Client::new()
        .post(daemon.url("/v1/reports"))
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .unwrap();
    let status = response.status();
    (status, response.json().await.unwrap())
}

/// The exposition without the daemon's own HTTP and report-count families,
/// which change with every request: what a report may change.
fn report_families(exposition: &str) -> Vec<String> {
    exposition
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter(|l| !l.starts_with("stormguard_http_") && !l.starts_with("stormguard_reports_total"))
        .map(str::to_owned)
        .collect()
}

fn charge(instance: &str, state: &str) -> Value {
    json!({
        "service": "payment-service",
        "instance": instance,
        "caller": "checkout",
        "endpoints": [{"endpoint": "/charge",
                       "requests": {"success": 120, "error": 3, "server_error": 7},
                       "retries": {"1": 9, "2": 1}}],
        "inFlight": 4,
        "circuitState": state,
        "budget": {"retriesDenied": 2, "remainingRatio": 0.4}
    })
}

#[tokio::test]
async fn a_report_moves_the_counters_by_exactly_its_values_and_a_second_adds() {
    let (_dir, path) = policy_file();
    let daemon = Daemon::start(&path, &[]);
    let (status, body) = post(&daemon, charge("pod-a", "closed").to_string()).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    assert_eq!(body["accepted"], 1);
    assert_eq!(body["folded"][0]["service"], false);

    let text = metrics(&daemon).await;
    let value = |series: &str| sample(&text, series);
    let requests = r#"http_client_requests_total{endpoint="/charge",service="payment-service",status="#;
    assert_eq!(value(&format!(r#"{requests}"success"}}"#)), Some(120.0));
    assert_eq!(value(&format!(r#"{requests}"error"}}"#)), Some(3.0));
    assert_eq!(value(&format!(r#"{requests}"server_error"}}"#)), Some(7.0));
    let retries = r#"http_client_retry_attempts_total{attempt="#;
    assert_eq!(
        value(&format!(
            r#"{retries}"1",endpoint="/charge",service="payment-service"}}"#
        )),
        Some(9.0)
    );
    assert_eq!(
        value(&format!(
            r#"{retries}"2",endpoint="/charge",service="payment-service"}}"#
        )),
        Some(1.0)
    );
    assert_eq!(
        value(r#"http_server_requests_total{service="payment-service"}"#),
        Some(127.0)
    );
    assert_eq!(
        value(r#"http_client_concurrent_requests{service="payment-service"}"#),
        Some(4.0)
    );
    assert_eq!(
        value(r#"circuit_breaker_state{service="payment-service"}"#),
        Some(0.0)
    );
    assert_eq!(
        value(r#"stormguard_budget_retries_denied_total{service="payment-service"}"#),
        Some(2.0)
    );
    assert_eq!(
        value(r#"stormguard_budget_remaining_ratio{service="payment-service"}"#),
        Some(0.4)
    );
    assert_eq!(value(r#"stormguard_reports_total{result="accepted"}"#), Some(1.0));

    post(&daemon, charge("pod-b", "closed").to_string()).await;
    let text = metrics(&daemon).await;
    assert_eq!(sample(&text, &format!(r#"{requests}"success"}}"#)), Some(240.0));
    assert_eq!(
        sample(
            &text,
            r#"http_client_concurrent_requests{service="payment-service"}"#
        ),
        Some(8.0),
        "two instances"
    );
}

#[tokio::test]
async fn in_a_batch_each_bad_report_is_refused_alone_and_named() {
    let (_dir, path) = policy_file();
    let daemon = Daemon::start(&path, &[]);
    let batch = json!([charge("pod-a", "closed"), charge("pod-b", "half-open")]);
    let (status, body) = post(&daemon, batch.to_string()).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    assert_eq!(body["accepted"], 2);
    let requests =
        r#"http_client_requests_total{endpoint="/charge",service="payment-service",status="success"}"#;
    assert_eq!(sample(&metrics(&daemon).await, requests), Some(240.0));

    // One process's batch: a dependency with a bad name, one with a bad count, one good.
    let mut bad_count = charge("pod-c", "open");
    bad_count["inFlight"] = json!(-1);
    let mut bad_name = charge("pod-c", "open");
    bad_name["service"] = json!("Payment_Service");
    let (status, body) = post(
        &daemon,
        json!([bad_name, charge("pod-c", "open"), bad_count]).to_string(),
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    assert_eq!(body["accepted"], 1);
    let refused: Vec<_> = body["rejected"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["index"].as_u64().unwrap(),
                r["path"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(
        refused,
        [(0, "[0].service".to_string()), (2, "[2].inFlight".to_string())]
    );
    let text = metrics(&daemon).await;
    assert_eq!(sample(&text, requests), Some(360.0), "the good report counted");
    assert_eq!(
        sample(&text, r#"circuit_breaker_state{service="payment-service"}"#),
        Some(2.0)
    );
    assert_eq!(
        sample(&text, r#"stormguard_reports_total{result="rejected"}"#),
        Some(2.0)
    );

    let (status, body) = post(&daemon, json!([bad_count]).to_string()).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "nothing to count: {body}");
    assert_eq!(body["path"], "[0].inFlight");
}

#[tokio::test]
async fn a_numbered_batch_sent_again_is_counted_once() {
    let (_dir, path) = policy_file();
    let daemon = Daemon::start(&path, &[]);
    let batch = json!({"instance": "pod-a", "sequence": 7, "reports": [charge("pod-a", "closed")]});
    let (status, first) = post(&daemon, batch.to_string()).await;
    assert_eq!(
        (status, first["accepted"].as_u64(), first["duplicate"].as_bool()),
        (StatusCode::ACCEPTED, Some(1), Some(false))
    );
    let (status, again) = post(&daemon, batch.to_string()).await;
    assert_eq!(
        (status, again["accepted"].as_u64(), again["duplicate"].as_bool()),
        (StatusCode::ACCEPTED, Some(0), Some(true))
    );
    let text = metrics(&daemon).await;
    let requests =
        r#"http_client_requests_total{endpoint="/charge",service="payment-service",status="success"}"#;
    assert_eq!(sample(&text, requests), Some(120.0));
    assert_eq!(
        sample(&text, r#"stormguard_reports_total{result="duplicate"}"#),
        Some(1.0)
    );

    let other = json!({"instance": "pod-a", "sequence": 7, "reports": [charge("pod-b", "closed")]});
    let (status, body) = post(&daemon, other.to_string()).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(
        body["path"], "reports[0].instance",
        "a batch speaks for its sender only"
    );
}

#[tokio::test]
async fn an_open_breaker_shows_2_and_expires_after_the_ttl() {
    let (_dir, path) = policy_file();
    let daemon = Daemon::start(&path, &["--instance-ttl", "1s"]);
    post(&daemon, charge("pod-a", "closed").to_string()).await;
    post(&daemon, charge("pod-b", "open").to_string()).await;
    post(&daemon, charge("pod-c", "half-open").to_string()).await;
    let state = r#"circuit_breaker_state{service="payment-service"}"#;
    let text = metrics(&daemon).await;
    assert_eq!(sample(&text, state), Some(2.0), "the worst instance");
    assert_eq!(
        sample(
            &text,
            r#"stormguard_circuit_breakers_open{service="payment-service"}"#
        ),
        Some(2.0),
        "the open and the half-open breaker, each to probe alone"
    );
    let gone = eventually(Duration::from_secs(5), || async {
        sample(&metrics(&daemon).await, state).is_none().then_some(())
    })
    .await;
    assert!(
        gone.is_some(),
        "the state expires once the instances stop reporting"
    );
}

#[tokio::test]
async fn each_malformed_report_gets_400_with_its_reason_and_changes_nothing() {
    let (_dir, path) = policy_file();
    let daemon = Daemon::start(&path, &[]);
    post(&daemon, charge("pod-a", "open").to_string()).await;
    let before = report_families(&metrics(&daemon).await);
    let cases: Vec<(String, &str)> = vec![
        ("not json".into(), "."),
        (json!({"instance": "i"}).to_string(), "."),
        (
            json!({"service": "payment-service", "instance": "i", "typo": 1}).to_string(),
            "typo",
        ),
        (
            json!({"service": "Payment", "instance": "i"}).to_string(),
            "service",
        ),
        (
            json!({"service": "payment-service", "instance": "i",
                   "endpoints": [{"endpoint": "/charge", "requests": {"success": -5}}]})
            .to_string(),
            "endpoints[0].requests.success",
        ),
        (
            json!({"service": "payment-service", "instance": "i",
                   "endpoints": [{"endpoint": "/charge", "requests": {"success": 2.5}}]})
            .to_string(),
            "endpoints[0].requests.success",
        ),
        (
            json!({"service": "payment-service", "instance": "i",
                   "endpoints": [{"endpoint": "/charge", "retries": {"first": 1}}]})
            .to_string(),
            "endpoints[0].retries",
        ),
        (
            json!({"service": "payment-service", "instance": "i", "circuitState": "ajar"}).to_string(),
            "circuitState",
        ),
        (
            json!({"service": "payment-service", "instance": "i", "budget": {"remainingRatio": -0.1}})
                .to_string(),
            "budget.remainingRatio",
        ),
    ];
    for (body, path) in cases {
        let (status, answer) = post(&daemon, body.clone()).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
        assert_eq!(answer["path"], path, "{body}: {answer}");
        assert!(
            answer["error"]
                .as_str()
                .unwrap()
                .starts_with("malformed report: "),
            "{answer}"
        );
    }
    let after = metrics(&daemon).await;
    assert_eq!(report_families(&after), before, "nothing a report feeds changed");
    assert_eq!(
        sample(&after, r#"stormguard_reports_total{result="rejected"}"#),
        Some(9.0)
    );
}

#[tokio::test]
async fn a_flood_of_endpoint_names_keeps_series_and_memory_bounded() {
    let (_dir, path) = policy_file();
    let daemon = Daemon::start(&path, &["--max-endpoints-per-service", "50"]);
    post(&daemon, charge("warm-up", "closed").to_string()).await;
    let rss_before = daemon.rss_kib();
    // 10^5 distinct endpoint names, 10^4 a report, from 10 instances.
    for batch in 0..10 {
        let endpoints: Vec<Value> = (0..10_000)
            .map(|i| json!({"endpoint": format!("/e{batch}-{i}"), "requests": {"error": 1}}))
            .collect();
        let report =
            json!({"service": "payment-service", "instance": format!("pod-{batch}"), "endpoints": endpoints});
        let (status, body) = post(&daemon, report.to_string()).await;
        assert_eq!(status, StatusCode::ACCEPTED, "{body}");
        assert!(
            body["folded"][0]["endpoints"].as_u64().unwrap() >= 9_950,
            "{}",
            body["folded"]
        );
    }
    let text = metrics(&daemon).await;
    let series = text
        .lines()
        .filter(|l| {
            l.starts_with(r#"http_client_requests_total{"#) && l.contains(r#"service="payment-service""#)
        })
        .count();
    assert!(
        series <= 3 * 51,
        "{series} series for 50 endpoints + other, 3 statuses"
    );
    let other = r#"http_client_requests_total{endpoint="other",service="payment-service",status="error"}"#;
    assert_eq!(
        sample(&text, other),
        Some(100_000.0 - 49.0),
        "everything past the cap is counted, as other"
    );
    assert!(
        sample(
            &text,
            r#"stormguard_report_labels_folded_total{label="endpoint"}"#
        )
        .unwrap()
            >= 99_000.0
    );
    let grown = daemon.rss_kib().saturating_sub(rss_before);
    assert!(grown < 64 * 1024, "RSS grew by {grown} KiB");
}
