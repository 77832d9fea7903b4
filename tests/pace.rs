//! `POST /v1/pace` end to end: the real daemon paces a fleet's return to a
//! dependency whose policy has a send gate.

mod common;

use common::{metrics, sample, Daemon};
use reqwest::StatusCode;
use serde_json::{json, Value};

fn policy_file() -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("policy.yaml");
    std::fs::write(&path, common::GATED_POLICY).unwrap();
    (dir, path)
}

/// The gated policy with `inventory` under `overloadWhen: any-refusal`, and
/// `search` gated under `overloadWhen: most-refused`.
fn with_search_most_refused() -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("policy.yaml");
    let inventory_any_refusal = common::GATED_POLICY.replace(
        "      enabled: true\n  payments",
        "      enabled: true\n      overloadWhen: any-refusal\n  payments",
    );
    assert_ne!(inventory_any_refusal, common::GATED_POLICY);
    let policy = format!(
        "{inventory_any_refusal}  search:\n    gate:\n      enabled: true\n      overloadWhen: most-refused\n"
    );
    std::fs::write(&path, policy).unwrap();
    (dir, path)
}

async fn ask(daemon: &Daemon, body: Value) -> (StatusCode, Value) {
    static HTTP: std::sync::OnceLock<reqwest::Client> = std::sync::OnceLock::new();
    let response = HTTP
        .get_or_init(reqwest::Client::new)
        .post(daemon.url("/v1/pace"))
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = response.status();
    (status, response.json().await.unwrap())
}

fn tally(service: &str, instance: &str, sent: u64, accepted: u64, overloaded: u64, waiting: u64) -> Value {
    json!({"service": service, "instance": instance, "sent": sent, "accepted": accepted,
           "overloaded": overloaded, "waiting": waiting})
}

#[tokio::test]
async fn a_process_whose_gate_is_on_gets_a_share_and_a_lease() {
    let (_dir, path) = policy_file();
    let daemon = Daemon::start(&path, &[]);
    let (status, grant) = ask(&daemon, tally("inventory", "pod-a", 0, 0, 1, 12)).await;
    assert_eq!(status, StatusCode::OK, "{grant}");
    assert_eq!(
        grant["rate"], 0.5,
        "the whole fleet probes at the lowest rate: {grant}"
    );
    assert_eq!(grant["leaseMs"], 1000);
    assert_eq!(grant["askEveryMs"], 100);

    let exposition = metrics(&daemon).await;
    assert_eq!(
        sample(&exposition, "stormguard_fleet_rate{service=\"inventory\"}"),
        Some(0.5)
    );
    assert_eq!(
        sample(&exposition, "stormguard_fleet_processes{service=\"inventory\"}"),
        Some(1.0)
    );
    assert_eq!(
        sample(
            &exposition,
            "stormguard_fleet_attempts_total{outcome=\"overloaded\",service=\"inventory\"}"
        ),
        Some(1.0)
    );
}

#[tokio::test]
async fn bad_asks_are_refused_with_what_is_wrong() {
    let (_dir, path) = policy_file();
    let daemon = Daemon::start(&path, &[]);
    let (status, body) = ask(&daemon, tally("payments", "pod-a", 0, 0, 1, 1)).await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert!(
        body["error"].as_str().unwrap().contains("gate.enabled: false"),
        "{body}"
    );

    let (status, body) = ask(&daemon, tally("inventory", "", 0, 0, 1, 1)).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(body["path"], "instance", "{body}");

    let (status, body) = ask(
        &daemon,
        json!({"service": "inventory", "instance": "p", "sent": -1}),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(
        body["error"].as_str().unwrap().contains("malformed ask"),
        "{body}"
    );

    // More timeouts than overloads would count refusals below none.
    let mut timeouts_beyond = tally("inventory", "pod-a", 2, 0, 1, 0);
    timeouts_beyond["timedOut"] = json!(2);
    let (status, body) = ask(&daemon, timeouts_beyond).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(body["path"], "timedOut", "{body}");
}

#[tokio::test]
async fn an_asks_classes_are_counted_a_negative_demand_refused_and_unknown_classes_ignored() {
    let (_dir, path) = policy_file();
    let daemon = Daemon::start(&path, &[]);
    let mut negative = tally("inventory", "pod-a", 0, 0, 1, 1);
    negative["demand"] = json!({"critical": -2});
    let (status, body) = ask(&daemon, negative).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(body["path"], "demand.critical", "{body}");

    // A newer client's class is left out and counted; the ask gets its grant.
    let mut classed = tally("inventory", "pod-a", 0, 0, 1, 3);
    classed["demand"] = json!({"critical": 2, "default": 1, "urgent": 5});
    classed["shed"] = json!({"critical": 1, "sheddable": 4, "urgent": 2});
    let (status, grant) = ask(&daemon, classed).await;
    assert_eq!(status, StatusCode::OK, "{grant}");
    assert!(grant["rate"].as_f64().unwrap() > 0.0, "{grant}");
    assert_eq!(grant["classes"], true, "it says it reads classes: {grant}");

    let exposition = metrics(&daemon).await;
    let shed = |class: &str| {
        sample(
            &exposition,
            &format!("stormguard_fleet_shed_total{{class=\"{class}\",service=\"inventory\"}}"),
        )
    };
    assert_eq!(
        (shed("critical"), shed("default"), shed("sheddable")),
        (Some(1.0), Some(0.0), Some(4.0))
    );
    assert_eq!(
        sample(
            &exposition,
            "stormguard_fleet_unknown_classes_total{service=\"inventory\"}"
        ),
        Some(1.0),
        "urgent, once"
    );
    for class in ["critical", "default", "sheddable"] {
        let rate = format!("stormguard_fleet_class_rate{{class=\"{class}\",service=\"inventory\"}}");
        assert!(sample(&exposition, &rate).is_some(), "{rate}");
    }
}

#[tokio::test]
async fn a_lying_process_gets_no_more_than_the_honest_ones() {
    let (_dir, path) = policy_file();
    let daemon = Daemon::start(&path, &[]);
    let honest = ["pod-a", "pod-b", "pod-c", "pod-d"];
    let mut grants = std::collections::HashMap::new();
    let mut asked = std::collections::HashMap::new();
    for _ in 0..30 {
        for pod in honest {
            // Sends what it was granted since its last ask, all accepted, and has a long line.
            let granted: f64 = grants.get(pod).copied().unwrap_or(0.5);
            let since = asked
                .insert(pod, std::time::Instant::now())
                .map_or(0.1, |at| at.elapsed().as_secs_f64());
            let sent = (granted * since).ceil() as u64;
            let (status, grant) = ask(&daemon, tally("inventory", pod, sent, sent, 0, 5000)).await;
            assert_eq!(status, StatusCode::OK, "{grant}");
            grants.insert(pod, grant["rate"].as_f64().unwrap());
        }
        let lie = tally("inventory", "pod-liar", u64::MAX, u64::MAX, 0, u64::MAX);
        let (status, grant) = ask(&daemon, lie).await;
        assert_eq!(status, StatusCode::OK, "{grant}");
        grants.insert("pod-liar", grant["rate"].as_f64().unwrap());
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let least_honest = honest.iter().map(|p| grants[p]).fold(f64::INFINITY, f64::min);
    assert!(
        grants["pod-liar"] <= least_honest * 1.000_001,
        "liar {} vs honest {least_honest}: {grants:?}",
        grants["pod-liar"]
    );
    let fleet = sample(
        &metrics(&daemon).await,
        "stormguard_fleet_rate{service=\"inventory\"}",
    )
    .unwrap();
    assert!(
        fleet > 0.5,
        "the honest processes' accepted attempts grew the rate: {fleet}"
    );
}

#[tokio::test]
async fn status_and_metrics_say_whether_a_dependency_is_paced_for_overload_or_failing_at_random() {
    let (_dir, path) = with_search_most_refused();
    let daemon = Daemon::start(&path, &[]);
    // Two dependencies that each refuse a tenth of what they are sent, at
    // random: one under any-refusal, one under most-refused.
    let mut granted = std::collections::HashMap::new();
    for _ in 0..20 {
        for service in ["inventory", "search"] {
            let rate: f64 = granted.get(service).copied().unwrap_or(0.5);
            let sent = ((rate * 0.1).ceil() as u64).max(10);
            let (status, grant) = ask(
                &daemon,
                tally(service, "pod-a", sent, sent - sent / 10, sent / 10, 50),
            )
            .await;
            assert_eq!(status, StatusCode::OK, "{grant}");
            granted.insert(service, grant["rate"].as_f64().unwrap());
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }

    let status = common::admin_status(&daemon).await;
    let paced = status["paced"].as_array().unwrap();
    let names: Vec<_> = paced.iter().map(|p| p["service"].as_str().unwrap()).collect();
    assert_eq!(names, ["inventory", "search"], "{status}");
    let (inventory, search) = (&paced[0], &paced[1]);
    assert_eq!(inventory["judgement"], "overloaded", "{inventory}");
    assert_eq!(inventory["overloadWhen"], "any-refusal");
    assert_eq!(search["judgement"], "failing_at_random", "{search}");
    assert_eq!(search["overloadWhen"], "most-refused");
    assert_eq!(search["processes"], 1);
    for paced in [inventory, search] {
        let share = paced["refusedShare"].as_f64().unwrap();
        assert!(share > 0.0 && share < 0.5, "{paced}");
        assert!(paced["deliveredPerSecond"].as_f64().unwrap() > 0.0, "{paced}");
        assert!(paced["pacedSeconds"].as_f64().unwrap() >= 1.0, "{paced}");
        // Asked every 100 ms or a little more over loopback: steered.
        let interval = paced["askIntervalSeconds"].as_f64().unwrap();
        assert!((0.1..0.4).contains(&interval), "{paced}");
        assert_eq!(paced["steering"], true, "{paced}");
    }

    let exposition = metrics(&daemon).await;
    let judged = |service: &str, judgement: &str| {
        sample(
            &exposition,
            &format!("stormguard_fleet_judgement{{judgement=\"{judgement}\",service=\"{service}\"}}"),
        )
    };
    assert_eq!(judged("search", "failing_at_random"), Some(1.0));
    assert_eq!(judged("search", "overloaded"), Some(0.0));
    assert_eq!(judged("inventory", "overloaded"), Some(1.0));
    let ratio = sample(&exposition, "stormguard_fleet_refused_ratio{service=\"search\"}").unwrap();
    assert!(ratio > 0.0 && ratio < 0.5, "{ratio}");
    assert_eq!(
        sample(&exposition, "stormguard_fleet_steering{service=\"search\"}"),
        Some(1.0)
    );
    let interval = sample(
        &exposition,
        "stormguard_fleet_ask_interval_seconds{service=\"search\"}",
    )
    .unwrap();
    assert!((0.1..0.4).contains(&interval), "{interval}");
}

#[tokio::test]
async fn watching_gates_are_told_to_pace_only_once_the_fleet_refuses_beyond_what_chance_explains() {
    let (_dir, path) = with_search_most_refused();
    let daemon = Daemon::start(&path, &[]);
    let watching = |instance: &str, accepted: u64, refused: u64| {
        let mut body = tally("search", instance, accepted + refused, accepted, refused, 0);
        body["watching"] = json!(true);
        body
    };
    let round = |accepted: u64, refused: u64| {
        let daemon = &daemon;
        async move {
            let mut paced = Vec::new();
            for pod in 0..10 {
                let (status, grant) = ask(daemon, watching(&format!("pod-{pod}"), accepted, refused)).await;
                assert_eq!(status, StatusCode::OK, "{grant}");
                paced.push(grant["pace"] == json!(true));
            }
            paced
        }
    };
    // Ten processes each hear 9 accepted and 1 refused a tenth of a second.
    for _ in 0..10 {
        assert!(round(9, 1).await.iter().all(|paced| !paced), "a tenth at random");
    }
    let status = common::admin_status(&daemon).await;
    assert_eq!(status["paced"][0]["judgement"], "failing_at_random", "{status}");
    // Then three of four refused: beyond any random half.
    let mut told = false;
    for _ in 0..5 {
        told |= round(1, 3).await.iter().any(|paced| *paced);
    }
    assert!(told, "told to pace within half a second of reports");
    let status = common::admin_status(&daemon).await;
    assert_eq!(status["paced"][0]["judgement"], "overloaded", "{status}");
}
