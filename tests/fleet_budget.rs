//! A fleet-scoped retry budget, for real: Rust client processes (a
//! `PolicyClient`, a `Reporter` and a `Dependency` each) report to the
//! daemon, which divides the policy's floor among them by their requests
//! and hands each its part in the answer to its report. Two replicas that
//! share Redis divide one floor; without it each divides a whole one. A
//! process that cannot reach the daemon retries by the fallback, never
//! more than its local budget allows.

mod common;

use std::time::Duration;

use common::budgeted::Budgeted;
use common::redis::Redis;
use common::{admin, metrics, sample, Daemon};
use stormguard_client::{Reporter, ReporterConfig};

/// The fleet's floor: 12 retries a second; the ratio 0, so that a budget's
/// allowance is its floor alone, 10 s of it.
const POLICY: &str = "\
defaults:
  maxRetries: 3
services:
  ledger:
    budget:
      scope: fleet
      retryRatio: 0
      minRetriesPerSecond: 12
      ttl: 10s
";
const FLOOR: f64 = 12.0;
const TTL_SECONDS: f64 = 10.0;

fn policy_file() -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("policy.yaml");
    std::fs::write(&path, POLICY).unwrap();
    (dir, path)
}

/// A process calling `ledger`, its policy from and its reports to `daemon`.
async fn process(daemon: &str, instance: &str) -> Budgeted {
    Budgeted::start(daemon, daemon, "ledger", instance).await
}

/// Each process makes its calls and reports, twice, each report covering
/// about 1.2 s (the first since the process started), so that its rate is
/// the same both times; and past the daemon's refresh of the claims' median.
async fn two_rounds(processes: &[(&Budgeted, usize)]) {
    for _ in 0..2 {
        tokio::time::sleep(Duration::from_millis(1200)).await;
        for (process, calls) in processes {
            process.calls(*calls).await;
            process.reporter.flush().await.expect("the daemon is up");
        }
    }
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-6 * b.max(1.0)
}

#[tokio::test]
async fn the_daemon_divides_the_floor_by_requests_and_a_lost_daemon_leaves_an_even_part() {
    let (_dir, path) = policy_file();
    let mut daemon = Daemon::start(&path, &[]);
    let busy = process(&daemon.base, "pod-busy").await;
    let quiet = [
        process(&daemon.base, "pod-quiet-1").await,
        process(&daemon.base, "pod-quiet-2").await,
    ];
    assert!(close(busy.floor(), FLOOR), "before any answer: the whole floor");
    two_rounds(&[(&busy, 40), (&quiet[0], 10), (&quiet[1], 10)]).await;
    // Rates over the time between reports: the busy one is about four
    // times each quiet one (calls take time, so not exactly).
    let parts = [busy.floor(), quiet[0].floor(), quiet[1].floor()];
    let handed: f64 = parts.iter().sum();
    assert!(
        (handed - FLOOR).abs() < 0.2 * FLOOR,
        "the parts add up to about the floor: {parts:?}"
    );
    assert!(
        parts[0] > 2.0 * parts[1] && parts[0] > 2.0 * parts[2],
        "{parts:?}"
    );
    let text = metrics(&daemon).await;
    let family = |name: &str| sample(&text, &format!("{name}{{service=\"ledger\"}}"));
    assert_eq!(family("stormguard_budget_processes"), Some(3.0));
    let floors = family("stormguard_budget_floor_retries_per_second").unwrap();
    assert!(
        close(floors, FLOOR),
        "one daemon hands out the whole floor: {floors}"
    );
    assert_eq!(family("stormguard_budget_retry_ratio"), Some(0.0));
    let floor = r#"stormguard_budget_min_retries_per_second{scope="fleet",service="ledger"}"#;
    assert_eq!(sample(&text, floor), Some(FLOOR));

    daemon.kill();
    busy.calls(1).await;
    assert!(busy.reporter.flush().await.is_err(), "the daemon is gone");
    assert!(
        close(busy.floor(), FLOOR / 3.0),
        "the floor over the 3 processes last heard of: {}",
        busy.floor()
    );
}

#[tokio::test]
async fn a_process_that_never_reaches_the_daemon_retries_by_its_local_budget_at_most() {
    let (_dir, path) = policy_file();
    let mut daemon = Daemon::start(&path, &[]);
    let lonely = process(&daemon.base, "pod-lonely").await;
    daemon.kill();
    lonely.calls(1).await;
    assert!(lonely.reporter.flush().await.is_err());
    let guard = lonely.dependency.policy().guard();
    let budget = guard.budget().unwrap();
    let retries = (0..1000).take_while(|_| budget.try_retry()).count();
    assert_eq!(
        retries as f64,
        FLOOR * TTL_SECONDS,
        "the configured floor over the window, as a process-scoped budget's"
    );
}

#[tokio::test]
async fn replicas_that_share_a_store_divide_one_floor_and_alone_each_divides_a_whole_one() {
    let Some(redis) = Redis::start(None) else {
        return;
    };
    let (_dir, path) = policy_file();
    let url = redis.url();
    for (shared, dividing) in [(true, 4.0), (false, 2.0)] {
        let store: &[&str] = if shared { &["--pace-store", &url] } else { &[] };
        let replicas = [Daemon::start(&path, store), Daemon::start(&path, store)];
        let mut processes = Vec::new();
        for (i, replica) in replicas.iter().cycle().take(4).enumerate() {
            processes.push(process(&replica.base, &format!("pod-{shared}-{i}")).await);
        }
        let even: Vec<(&Budgeted, usize)> = processes.iter().map(|p| (p, 10)).collect();
        two_rounds(&even).await;
        let parts: Vec<f64> = processes.iter().map(Budgeted::floor).collect();
        let handed: f64 = parts.iter().sum();
        let expected = FLOOR * 4.0 / dividing;
        assert!(
            (handed - expected).abs() < 0.2 * FLOOR,
            "shared: {shared}: {handed} handed out, {parts:?}"
        );
        let mut floors = 0.0;
        for replica in &replicas {
            let text = metrics(replica).await;
            let family = |name: &str| sample(&text, &format!("{name}{{service=\"ledger\"}}"));
            assert_eq!(
                family("stormguard_budget_processes"),
                Some(2.0),
                "each replica's own processes"
            );
            floors += family("stormguard_budget_floor_retries_per_second").unwrap();
        }
        assert!(
            (floors - expected).abs() < 0.2 * FLOOR,
            "the floors the replicas hand out, summed: {floors} (shared: {shared})"
        );
    }
}

#[tokio::test]
async fn per_process_floors_that_never_bind_are_warned_with_the_processes_seen() {
    use stormguard_client::Outcome;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("policy.yaml");
    let text = "defaults:\n  maxRetries: 3\nservices:\n  orders:\n    maxRetries: 2\n";
    std::fs::write(&path, text).unwrap();
    let daemon = Daemon::start(&path, &[]);
    for pod in ["pod-1", "pod-2", "pod-3"] {
        let reporter = Reporter::start(ReporterConfig {
            interval: Duration::from_secs(3600),
            ..ReporterConfig::new(&daemon.base, pod)
        })
        .unwrap();
        reporter.record("orders", "/order", 0, Outcome::Success);
        reporter.flush().await.expect("the daemon is up");
    }
    let status = common::admin_status(&daemon).await;
    let warnings = status["warnings"].as_array().expect("a list of warnings");
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert_eq!(warnings[0]["service"], "orders");
    assert_eq!(warnings[0]["rule"], "process-floors");
    let message = warnings[0]["message"].as_str().unwrap();
    assert!(
        message.contains("the 3 processes seen calling it may retry 30 a second"),
        "{message}"
    );

    let fleet = format!("{text}    budget: {{scope: fleet}}\n");
    let validated: serde_json::Value = admin(&daemon, reqwest::Method::POST, "/admin/validate")
        .body(fleet)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let rules: Vec<&str> = validated["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|w| w["rule"].as_str())
        .collect();
    assert!(
        !rules.contains(&"process-floors"),
        "a fleet-scoped floor binds: {rules:?}"
    );
}

#[tokio::test]
async fn a_fleet_scoped_budget_reports_a_second_after_start_and_a_process_scoped_one_waits() {
    let (_dir, path) = policy_file();
    let daemon = Daemon::start(&path, &[]);
    let first = process(&daemon.base, "pod-1").await;
    first.calls(1).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    first.reporter.flush().await.expect("the daemon is up");
    let early = ReporterConfig {
        interval: Duration::from_secs(3600),
        ..ReporterConfig::new(&daemon.base, "pod-2")
    };
    let second = Budgeted::reporting(&daemon.base, "ledger", early).await;
    second.calls(1).await;
    assert!(close(second.floor(), FLOOR), "no answer yet");
    // Both cover about a second with one first try: about half each.
    let divided = common::eventually(Duration::from_secs(4), || {
        let floor = second.floor();
        async move { (floor > 0.3 * FLOOR && floor < 0.7 * FLOOR).then_some(()) }
    })
    .await;
    assert!(
        divided.is_some(),
        "the first report went within seconds, not the hour of its interval: {}",
        second.floor()
    );

    let quiet = Reporter::start(ReporterConfig {
        interval: Duration::from_secs(3600),
        ..ReporterConfig::new(&daemon.base, "pod-3")
    })
    .unwrap();
    quiet.record("orders", "/order", 0, stormguard_client::Outcome::Success);
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(
        quiet.stats().batches_sent,
        0,
        "nothing waits for a part: the interval holds"
    );
}
