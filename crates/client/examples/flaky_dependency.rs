//! The whole loop in one program: a service calls a flaky dependency through
//! stormguard-client, under the policy the daemon serves, and reports what
//! happened to the daemon's /metrics.
//!
//! Run the daemon, then this:
//!
//! ```sh
//! cargo run --release -- serve &
//! cargo run --release -p stormguard-client --example flaky_dependency -- http://127.0.0.1:8080 payment-service
//! curl -s localhost:8080/metrics | grep -E '^(http_client|circuit_breaker|stormguard_budget)'
//! ```
//!
//! The dependency it starts on loopback is down (503) for its first five
//! seconds, then fails one call in four. Each second the program prints what
//! its calls did and the breaker's state.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::http::StatusCode;
use axum::routing::get;
use stormguard_client::stormguard_core::retry::Failure;
use stormguard_client::{ClientConfig, Dependency, PolicyClient, Reporter, ReporterConfig};

#[tokio::main]
async fn main() {
    let mut args = std::env::args().skip(1);
    let daemon = args.next().unwrap_or_else(|| "http://127.0.0.1:8080".into());
    let service = args.next().unwrap_or_else(|| "payment-service".into());
    let dependency = start_flaky_dependency().await;

    let policy = PolicyClient::start(ClientConfig::new(&daemon, &service))
        .await
        .expect("a valid client configuration");
    println!(
        "policy for {service} from {:?}: {:?}",
        policy.source(),
        policy.policy().policy
    );
    let reporter = Reporter::start(ReporterConfig {
        interval: Duration::from_secs(2),
        ..ReporterConfig::new(&daemon, "flaky-example")
    })
    .expect("a valid reporter configuration");
    let calls = Dependency::new(policy.clone(), reporter.clone());
    let http = reqwest::Client::new();

    for second in 0..15 {
        let started = Instant::now();
        let (mut ok, mut failed) = (0, 0);
        while started.elapsed() < Duration::from_secs(1) {
            let url = format!("{dependency}/charge");
            let result = calls
                .call("/charge", |_attempt| {
                    let request = http.get(&url).timeout(Duration::from_millis(500)).send();
                    async move {
                        let response = request.await.map_err(|e| {
                            if e.is_timeout() {
                                Failure::Timeout
                            } else {
                                Failure::Connect
                            }
                        })?;
                        match response.status() {
                            status if status.is_success() => Ok(()),
                            status => Err(Failure::Status {
                                code: status.as_u16(),
                                retry_after: None,
                            }),
                        }
                    }
                })
                .await;
            if result.is_ok() {
                ok += 1
            } else {
                failed += 1
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let breaker = policy
            .guard()
            .breaker()
            .map_or("off".to_string(), |b| b.state().name().to_string());
        println!("second {second:>2}: {ok:>3} calls succeeded, {failed:>3} failed; breaker {breaker}");
    }
    reporter.shutdown().await;
    println!("reported; see {daemon}/metrics");
}

/// A dependency on loopback: 503 for its first five seconds, then one call in four.
async fn start_flaky_dependency() -> String {
    let started = Instant::now();
    let calls = Arc::new(AtomicU64::new(0));
    let app = axum::Router::new().route(
        "/charge",
        get(move || {
            let n = calls.fetch_add(1, Relaxed);
            async move {
                if started.elapsed() < Duration::from_secs(5) || n % 4 == 0 {
                    StatusCode::SERVICE_UNAVAILABLE
                } else {
                    StatusCode::OK
                }
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{address}")
}
