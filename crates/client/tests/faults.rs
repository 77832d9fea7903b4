//! The client against a daemon that misbehaves: answering 500, garbage,
//! slowly, or not at all. The client keeps its last good policy, never waits
//! past its bounded start-up wait, and picks up a good answer again.

use std::sync::atomic::{AtomicU32, AtomicU8, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use stormguard_client::stormguard_core::policy::{PolicySource as Resolution, ResolvedPolicy, RetryPolicy};
use stormguard_client::stormguard_core::wire::{SelectedPolicies, SelectedPolicy};
use stormguard_client::{ClientConfig, PolicyClient, PolicySource};

const GOOD: u8 = 0;
const ERROR: u8 = 1;
const GARBAGE: u8 = 2;
const STALL: u8 = 3;
/// A policy that decodes but is out of range: a per-try timeout of 1e22 ms.
const INVALID: u8 = 4;
/// 503 with `Retry-After: 1` and `Connection: close`, as a draining daemon answers.
const DRAINING: u8 = 5;

/// A stand-in daemon whose behaviour the test switches; `retries` is the policy it serves.
/// Also returns the count of requests it has received.
async fn fake_daemon(mode: Arc<AtomicU8>, retries: Arc<AtomicU32>) -> (String, Arc<AtomicU32>) {
    let hits = Arc::new(AtomicU32::new(0));
    let counter = hits.clone();
    let app = axum::Router::new().route(
        "/v1/policies",
        get(move || {
            let (mode, retries, hits) = (mode.clone(), retries.clone(), counter.clone());
            async move {
                hits.fetch_add(1, Relaxed);
                match mode.load(Relaxed) {
                    GOOD => {
                        let n = retries.load(Relaxed);
                        let resolved = ResolvedPolicy {
                            source: Resolution::Override,
                            overridden: vec!["maxRetries".into()],
                            policy: RetryPolicy {
                                max_retries: n,
                                ..RetryPolicy::default()
                            },
                        };
                        let body = serde_json::to_string(&selection(resolved, &format!("\"v{n}\""))).unwrap();
                        ([(header::ETAG, format!("\"all-v{n}\""))], body).into_response()
                    }
                    ERROR => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
                    GARBAGE => ([(header::ETAG, "\"x\"")], "{\"services\": 42").into_response(),
                    INVALID => {
                        let resolved = ResolvedPolicy {
                            source: Resolution::Override,
                            overridden: Vec::new(),
                            policy: RetryPolicy::default(),
                        };
                        let mut body = serde_json::to_value(selection(resolved, "\"bad\"")).unwrap();
                        body["services"]["payment-service"]["policy"]["perTryTimeoutMs"] =
                            serde_json::json!(1e22);
                        ([(header::ETAG, "\"bad\"")], body.to_string()).into_response()
                    }
                    DRAINING => (
                        StatusCode::SERVICE_UNAVAILABLE,
                        [(header::RETRY_AFTER, "1"), (header::CONNECTION, "close")],
                        "{\"error\": \"shutting down\"}",
                    )
                        .into_response(),
                    _ => {
                        std::future::pending::<()>().await;
                        unreachable!()
                    }
                }
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (format!("http://{address}"), hits)
}

/// The daemon's answer to a watch of payment-service alone.
fn selection(resolved: ResolvedPolicy, etag: &str) -> SelectedPolicies {
    let entry = SelectedPolicy {
        etag: etag.to_string(),
        resolved,
    };
    SelectedPolicies {
        services: [("payment-service".to_string(), entry)].into(),
    }
}

fn config(daemon: &str) -> ClientConfig {
    ClientConfig {
        startup_wait: Duration::from_millis(600),
        watch_wait: Duration::from_millis(300),
        reconnect_initial: Duration::from_millis(50),
        retry_max: Duration::from_millis(200),
        ..ClientConfig::new(daemon, "payment-service")
    }
}

#[tokio::test]
async fn a_daemon_answering_garbage_500_or_nothing_at_start_costs_only_the_bounded_wait() {
    for mode in [GARBAGE, ERROR, STALL, INVALID] {
        let (daemon, _) = fake_daemon(Arc::new(AtomicU8::new(mode)), Arc::new(AtomicU32::new(7))).await;
        let started = Instant::now();
        let client = PolicyClient::start(config(&daemon))
            .await
            .expect("a valid client configuration");
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "mode {mode}: {:?}",
            started.elapsed()
        );
        assert_eq!(client.source(), PolicySource::Defaults, "mode {mode}");
    }
}

#[tokio::test]
async fn a_misbehaving_daemon_never_replaces_the_last_good_policy() {
    let (mode, retries) = (Arc::new(AtomicU8::new(GOOD)), Arc::new(AtomicU32::new(7)));
    let (daemon, _) = fake_daemon(mode.clone(), retries.clone()).await;
    let client = PolicyClient::start(config(&daemon))
        .await
        .expect("a valid client configuration");
    assert_eq!(
        (client.source(), client.policy().policy.max_retries),
        (PolicySource::Daemon, 7)
    );
    for bad in [ERROR, GARBAGE, STALL, INVALID] {
        mode.store(bad, Relaxed);
        tokio::time::sleep(Duration::from_millis(800)).await;
        assert_eq!(
            client.policy().policy.max_retries,
            7,
            "mode {bad}: the last good policy stays"
        );
        assert_eq!(client.guard().retry().max_retries, 7);
    }
    let mut versions = client.subscribe();
    retries.store(8, Relaxed);
    mode.store(GOOD, Relaxed);
    tokio::time::timeout(Duration::from_secs(5), versions.changed())
        .await
        .expect("the client recovers when the daemon answers well again")
        .unwrap();
    assert_eq!(client.policy().policy.max_retries, 8);
}

/// A daemon that answers at once, whatever it answers, never makes the
/// client poll faster than its floor; a 503's `Retry-After` is honoured.
#[tokio::test]
async fn a_daemon_answering_at_once_never_makes_the_watch_spin() {
    let mode = Arc::new(AtomicU8::new(GOOD));
    let (daemon, hits) = fake_daemon(mode.clone(), Arc::new(AtomicU32::new(7))).await;
    let client = PolicyClient::start(ClientConfig {
        min_poll_interval: Duration::from_millis(200),
        ..config(&daemon)
    })
    .await
    .unwrap();
    for (answer, most) in [(GOOD, 12), (INVALID, 12), (DRAINING, 3)] {
        mode.store(answer, Relaxed);
        tokio::time::sleep(Duration::from_millis(300)).await;
        let before = hits.load(Relaxed);
        tokio::time::sleep(Duration::from_secs(2)).await;
        let polls = hits.load(Relaxed) - before;
        assert!(polls <= most, "mode {answer}: {polls} polls in 2 s");
    }
    assert_eq!(
        client.policy().policy.max_retries,
        7,
        "the invalid policy was never applied"
    );
}
