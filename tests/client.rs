//! The client library against the real daemon: fetch, watch, fall back, report.

mod common;

use std::time::Duration;

use common::proxy::{Proxy, Trick};
use common::{eventually, metrics, sample, ConfigMapDir, Daemon, SEED_POLICY};
use stormguard_client::stormguard_core::policy::GatePolicy;
use stormguard_client::stormguard_core::retry::{Failure, GaveUp};
use stormguard_client::{
    ClientConfig, ConfigError, Dependency, Outcome, PolicyClient, PolicySource, PolicyWatch, Reporter,
    ReporterConfig,
};

fn config(daemon: &str, service: &str) -> ClientConfig {
    ClientConfig {
        startup_wait: Duration::from_secs(5),
        watch_wait: Duration::from_secs(2),
        ..ClientConfig::new(daemon, service)
    }
}

/// An address where nobody listens, held for as long as the test holds it.
fn unreachable() -> common::Reserved {
    common::Reserved::new()
}

#[tokio::test]
async fn one_watch_serves_several_dependencies_and_wakes_only_the_changed_one() {
    let mut configmap = ConfigMapDir::new(SEED_POLICY);
    let daemon = Daemon::start(&configmap.policy(), &["--debounce", "20ms"]);
    let proxy = Proxy::start(&daemon.base, Trick::None).await;
    let services = ["payment-service", "inventory-service", "search"];
    let watch = PolicyWatch::start(ClientConfig {
        watch_wait: Duration::from_secs(2),
        ..ClientConfig::for_services(&proxy.base, services)
    })
    .await
    .expect("a valid client configuration");
    let client = |name| watch.client(name).expect("a watched service");
    let retries = |name| client(name).policy().policy.max_retries;
    assert_eq!(
        [
            retries("payment-service"),
            retries("inventory-service"),
            retries("search")
        ],
        [2, 5, 3]
    );
    assert!(services
        .iter()
        .all(|s| client(s).source() == PolicySource::Daemon));
    assert!(watch.client("ledger").is_none(), "not watched");

    let (payments, mut inventory) = (
        client("payment-service").subscribe(),
        client("inventory-service").subscribe(),
    );
    let since = tokio::time::Instant::now();
    configmap.update(&SEED_POLICY.replace("maxRetries: 5", "maxRetries: 6"));
    tokio::time::timeout(Duration::from_secs(10), inventory.changed())
        .await
        .expect("the watch delivers the new version")
        .unwrap();
    assert_eq!(retries("inventory-service"), 6);
    assert!(
        !payments.has_changed().unwrap(),
        "an unchanged dependency was not updated"
    );
    tokio::time::sleep(Duration::from_secs(4)).await;
    // One watch: the wake-up, then a poll per 2 s wait. Three watches would be three times that.
    let polls = proxy.requests_since("/v1/policies", since);
    assert!((2..=4).contains(&polls), "{polls} polls in about 4.5 s");

    let several = ClientConfig::for_services(&daemon.base, services);
    assert!(matches!(
        PolicyClient::start(several).await,
        Err(ConfigError::Services(_))
    ));
    let none = ClientConfig::for_services(&daemon.base, Vec::<String>::new());
    assert!(matches!(
        PolicyWatch::start(none).await,
        Err(ConfigError::Services(_))
    ));
}

#[tokio::test]
async fn a_cache_it_cannot_read_is_ignored_for_the_defaults() {
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("payment-service.json");
    std::fs::write(&cache, "{ not json").unwrap();
    let nobody = unreachable();
    let client = PolicyClient::start(ClientConfig {
        cache: Some(cache),
        startup_wait: Duration::from_millis(300),
        ..config(&nobody.url(), "payment-service")
    })
    .await
    .expect("a valid client configuration");
    assert_eq!(client.source(), PolicySource::Defaults);
    assert_eq!(client.policy().policy.max_retries, 3);
}

#[tokio::test]
async fn calls_are_retried_under_the_policy_and_reported_to_the_daemon() {
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("policy.yaml");
    std::fs::write(
        &policy,
        SEED_POLICY.replace("initialDelay: 200ms", "initialDelay: 5ms"),
    )
    .unwrap();
    let daemon = Daemon::start(&policy, &[]);
    let client = PolicyClient::start(config(&daemon.base, "payment-service"))
        .await
        .expect("a valid client configuration");
    let reporter = Reporter::start(ReporterConfig {
        interval: Duration::from_secs(3600),
        ..ReporterConfig::new(&daemon.base, "pod-1")
    })
    .expect("a valid reporter configuration");
    let payments = Dependency::new(client, reporter.clone());

    // A dependency that answers 503 to first tries and 200 to retries.
    let answer = payments
        .call("/charge", |attempt| async move {
            match attempt.retry {
                0 => Err(Failure::Status {
                    code: 503,
                    retry_after: None,
                }),
                _ => Ok("charged"),
            }
        })
        .await;
    assert_eq!(answer, Ok("charged"));
    // One that never answers: 1 + maxRetries (2) attempts, then the call fails.
    let error = payments
        .call("/refund", |_| async { Err::<(), _>(Failure::Connect) })
        .await
        .unwrap_err();
    assert_eq!((error.attempts, error.gave_up), (3, GaveUp::Exhausted));
    // A 404 is an answer: not retried.
    let not_found = payments
        .call("/charge", |_| async {
            Err::<(), _>(Failure::Status {
                code: 404,
                retry_after: None,
            })
        })
        .await
        .unwrap_err();
    assert_eq!(not_found.gave_up, GaveUp::NotRetryable);

    reporter.flush().await.unwrap();
    let text = metrics(&daemon).await;
    let requests = |endpoint: &str, status: &str| {
        sample(
            &text,
            &format!(
                r#"http_client_requests_total{{endpoint="{endpoint}",service="payment-service",status="{status}"}}"#
            ),
        )
    };
    assert_eq!(requests("/charge", "server_error"), Some(1.0));
    assert_eq!(
        requests("/charge", "success"),
        Some(2.0),
        "the retry's 200 and the 404"
    );
    assert_eq!(requests("/refund", "error"), Some(3.0));
    let retries = |endpoint: &str, attempt: u32| {
        sample(
            &text,
            &format!(
                r#"http_client_retry_attempts_total{{attempt="{attempt}",endpoint="{endpoint}",service="payment-service"}}"#
            ),
        )
    };
    assert_eq!(retries("/charge", 1), Some(1.0));
    assert_eq!(
        (retries("/refund", 1), retries("/refund", 2)),
        (Some(1.0), Some(1.0))
    );
    assert_eq!(
        sample(
            &text,
            r#"http_client_concurrent_requests{service="payment-service"}"#
        ),
        Some(0.0)
    );
    assert_eq!(
        sample(
            &text,
            r#"stormguard_budget_remaining_ratio{service="payment-service"}"#
        )
        .map(|r| r > 0.0),
        Some(true)
    );
}

/// The success count of `endpoint` on payment-service in `daemon`'s metrics.
async fn successes(daemon: &Daemon, endpoint: &str) -> Option<f64> {
    let text = metrics(daemon).await;
    sample(
        &text,
        &format!(
            r#"http_client_requests_total{{endpoint="{endpoint}",service="payment-service",status="success"}}"#
        ),
    )
}

fn seed_daemon(extra: &[&str]) -> (tempfile::TempDir, Daemon) {
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("policy.yaml");
    std::fs::write(&policy, SEED_POLICY).unwrap();
    let daemon = Daemon::start(&policy, extra);
    (dir, daemon)
}

fn quick_reporter(daemon: &str) -> Reporter {
    Reporter::start(ReporterConfig {
        interval: Duration::from_secs(3600),
        timeout: Duration::from_millis(500),
        ..ReporterConfig::new(daemon, "pod-1")
    })
    .expect("a valid reporter configuration")
}

#[tokio::test]
async fn shutdown_sends_the_counts_of_a_send_cut_short() {
    let (_dir, daemon) = seed_daemon(&[]);
    let proxy = Proxy::start(
        &daemon.base,
        Trick::Hold {
            nth: 1,
            hold: Duration::from_millis(300),
        },
    )
    .await;
    let reporter = Reporter::start(ReporterConfig {
        interval: Duration::from_millis(50),
        ..ReporterConfig::new(&proxy.base, "pod-1")
    })
    .unwrap();
    for _ in 0..4 {
        reporter.record("payment-service", "/charge", 0, Outcome::Success);
    }
    common::eventually(Duration::from_secs(5), || async {
        (proxy.reports() == 1).then_some(())
    })
    .await
    .expect("the periodic send is under way");
    reporter.clone().shutdown().await;
    let counted = common::eventually(Duration::from_secs(5), || async {
        (successes(&daemon, "/charge").await == Some(4.0)).then_some(())
    })
    .await;
    assert!(counted.is_some(), "the counts of the aborted send arrived");
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(successes(&daemon, "/charge").await, Some(4.0), "and only once");
}

#[tokio::test]
async fn an_attempt_cut_by_its_per_try_timeout_is_reported_as_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("policy.yaml");
    let slow = SEED_POLICY.replace(
        "    initialDelay: 200ms",
        "    initialDelay: 5ms\n    perTryTimeout: 50ms",
    );
    std::fs::write(&policy, slow).unwrap();
    let daemon = Daemon::start(&policy, &[]);
    let client = PolicyClient::start(config(&daemon.base, "payment-service"))
        .await
        .unwrap();
    assert_eq!(
        client.policy().policy.per_try_timeout,
        Some(Duration::from_millis(50))
    );
    let reporter = quick_reporter(&daemon.base);
    let payments = Dependency::new(client, reporter.clone());
    let error = payments
        .call("/slow", |_| std::future::pending::<Result<(), Failure>>())
        .await
        .unwrap_err();
    assert_eq!(error.attempts, 3);
    reporter.flush().await.unwrap();
    let text = metrics(&daemon).await;
    let errors = r#"http_client_requests_total{endpoint="/slow",service="payment-service",status="error"}"#;
    assert_eq!(
        sample(&text, errors),
        Some(3.0),
        "every timed-out attempt is an error"
    );
}

#[tokio::test]
async fn a_watch_longer_than_the_daemon_allows_is_shortened_and_still_delivers() {
    let mut configmap = ConfigMapDir::new(SEED_POLICY);
    let daemon = Daemon::start(&configmap.policy(), &["--debounce", "20ms", "--max-wait", "1s"]);
    let url = daemon.url("/v1/policies/payment-service");
    let etag = common::etag_of(&url).await;
    let started = std::time::Instant::now();
    let shortened = reqwest::Client::new()
        .get(format!("{url}?wait=60s"))
        .header("if-none-match", &etag)
        .send()
        .await
        .unwrap();
    assert_eq!(shortened.status(), reqwest::StatusCode::NOT_MODIFIED);
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(shortened.headers()["stormguard-max-wait-ms"], "1000");

    let client = PolicyClient::start(ClientConfig {
        watch_wait: Duration::from_secs(60),
        ..config(&daemon.base, "payment-service")
    })
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let mut versions = client.subscribe();
    configmap.update(&SEED_POLICY.replace("maxRetries: 2", "maxRetries: 5"));
    tokio::time::timeout(Duration::from_secs(10), versions.changed())
        .await
        .expect("the watch still delivers")
        .unwrap();
    assert_eq!(client.policy().policy.max_retries, 5);
}

/// A daemon serving `inventory` with a send gate that probes at 4 a second,
/// and a client of that policy.
async fn gated_inventory() -> (tempfile::TempDir, Daemon, PolicyClient) {
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("policy.yaml");
    std::fs::write(
        &policy,
        "services:\n  inventory:\n    maxRetries: 100\n    initialDelay: 5ms\n    maxElapsed: 30s\n    gate:\n      enabled: true\n      minRate: 4\n",
    )
    .unwrap();
    let daemon = Daemon::start(&policy, &[]);
    let client = PolicyClient::start(config(&daemon.base, "inventory"))
        .await
        .expect("a valid client configuration");
    (dir, daemon, client)
}

/// A dependency whose policy has a send gate, refusing every call: the
/// client's gate turns on, the reporter asks the daemon for the pace, and
/// the gate paces at the daemon's grant. Without the daemon, the gate
/// paces alone at its own rate.
#[tokio::test]
async fn a_refusing_dependency_is_paced_through_the_daemon() {
    let (_dir, daemon, client) = gated_inventory().await;
    let reporter = quick_reporter(&daemon.base);
    let inventory = Dependency::new(client.clone(), reporter.clone());
    let sent = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
    let mut calls = tokio::task::JoinSet::new();
    for _ in 0..20 {
        let (inventory, sent) = (inventory.clone(), sent.clone());
        calls.spawn(async move {
            inventory
                .call("/stock", |_| {
                    sent.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    async {
                        Err::<(), _>(Failure::Status {
                            code: 503,
                            retry_after: None,
                        })
                    }
                })
                .await
        });
    }
    let paced = eventually(Duration::from_secs(10), || async {
        let exposition = metrics(&daemon).await;
        sample(&exposition, "stormguard_fleet_processes{service=\"inventory\"}").filter(|n| *n == 1.0)
    })
    .await;
    assert!(
        paced.is_some(),
        "the daemon paces the process: {}",
        metrics(&daemon).await
    );
    let granted = eventually(Duration::from_secs(5), || async {
        let stats = reporter.stats();
        (stats.pace_asks > 2 && stats.pace_failures == 0).then_some(stats.pace_asks)
    })
    .await;
    assert!(granted.is_some(), "{:?}", reporter.stats());
    let rate = client.guard().gate().and_then(|gate| gate.rate());
    // The daemon's grant (the whole fleet probes at minRate), or that grant
    // cut once by beta: a refusal of an attempt sent under it cuts it until
    // the next grant arrives, which a loaded machine can leave for a while.
    let cut_once = 4.0 * GatePolicy::default().beta;
    assert!(
        rate.is_some_and(|rate| rate == 4.0 || (rate - cut_once).abs() < 1e-9),
        "the daemon's grant, 4 a second, or it cut once: {rate:?}"
    );
    let before = sent.load(std::sync::atomic::Ordering::Relaxed);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let probes = sent.load(std::sync::atomic::Ordering::Relaxed) - before;
    assert!(
        probes <= 6,
        "about 4 probes a second, not 20 callers retrying every 5 ms: {probes}"
    );
    reporter.flush().await.expect("the daemon takes the report");
    let exposition = metrics(&daemon).await;
    assert_eq!(
        sample(&exposition, "stormguard_send_gates_on{service=\"inventory\"}"),
        Some(1.0),
        "the report says the gate is on: {exposition}"
    );
    calls.abort_all();
}

#[tokio::test]
async fn a_process_without_fleet_pacing_paces_by_its_own_gate() {
    let (_dir, daemon, client) = gated_inventory().await;
    let reporter = Reporter::start(ReporterConfig {
        fleet_pacing: false,
        ..ReporterConfig::new(&daemon.base, "pod-1")
    })
    .expect("a valid reporter configuration");
    let inventory = Dependency::new(client.clone(), reporter.clone());
    let mut calls = tokio::task::JoinSet::new();
    for _ in 0..5 {
        let inventory = inventory.clone();
        calls.spawn(async move {
            inventory
                .call("/stock", |_| async {
                    Err::<(), _>(Failure::Status {
                        code: 503,
                        retry_after: None,
                    })
                })
                .await
        });
    }
    let gate_on = eventually(Duration::from_secs(5), || async {
        let guard = client.guard();
        guard.gate()?.is_on_at(tokio::time::Instant::now()).then_some(())
    })
    .await;
    assert!(gate_on.is_some(), "the refusals turn the gate on");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(reporter.stats().pace_asks, 0, "no asks: {:?}", reporter.stats());
    let exposition = metrics(&daemon).await;
    assert_eq!(
        sample(&exposition, "stormguard_fleet_processes{service=\"inventory\"}"),
        None,
        "the daemon paces no process: {exposition}"
    );
    calls.abort_all();
}
