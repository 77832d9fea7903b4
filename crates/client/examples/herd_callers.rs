//! One process of a herd, for the fleet recovery benchmark
//! (`bench/real_fleet.py`): `--callers` callers each want one call to
//! `--dependency` served, all starting at `--start-at`, through
//! stormguard-client under the policy the daemon serves for `--service`.
//!
//! ```sh
//! cargo run --release -p stormguard-client --example herd_callers -- \
//!     --daemon http://127.0.0.1:8080 --service dependency --instance pod-1 \
//!     --dependency http://127.0.0.1:9000 --callers 50 --start-at "$(date +%s%3N)"
//! ```
//!
//! `--no-fleet-pacing` keeps each send gate to what this process learns
//! alone. Once every caller is done it prints one JSON line: the calls that
//! succeeded and gave up, the attempts sent, and each success's time from
//! its call's arrival (the start, unless `--rate` is given) in seconds.
//!
//! With `--rate R --seconds S` the calls arrive instead, one at a time from
//! `--start-at`, at random (a Poisson process seeded by `--seed`) at R a
//! second for S seconds: the open-loop callers of `stormguard simulate
//! --scenario errors` (`bench/fleet_budget.py`, `bench/real_fleet.py --errors`).
//! `--report-every` sets the reporter's interval (2 s unless given).

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

use stormguard_client::stormguard_core::retry::Failure;
use stormguard_client::{ClientConfig, Dependency, PolicyClient, Reporter, ReporterConfig};

#[path = "common/args.rs"]
mod args;
use args::{flag, required, since_epoch};

/// One attempt: a GET that answers `Ok` on 2xx, else the failure the
/// policy's `retryOn` judges.
async fn attempt(http: &reqwest::Client, url: &str) -> Result<(), Failure> {
    let response = http.get(url).send().await.map_err(|e| {
        if e.is_timeout() {
            Failure::Timeout
        } else {
            Failure::Connect
        }
    })?;
    match response.status().as_u16() {
        200..=299 => Ok(()),
        code => Err(Failure::Status {
            code,
            retry_after: None,
        }),
    }
}

/// Arrival times of a Poisson process of `rate` a second over `seconds`.
fn poisson(rate: f64, seconds: f64, seed: u64) -> Vec<Duration> {
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::SmallRng::seed_from_u64(seed);
    let mut at = 0.0;
    let mut arrivals = Vec::new();
    loop {
        at += -(1.0 - rng.random::<f64>()).ln() / rate;
        if at >= seconds {
            return arrivals;
        }
        arrivals.push(Duration::from_secs_f64(at));
    }
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let daemon = required(&args, "--daemon");
    let service = required(&args, "--service");
    let instance = required(&args, "--instance");
    let url = format!("{}/call", required(&args, "--dependency"));
    let callers: usize =
        flag(&args, "--callers").map_or(50, |v| v.parse().expect("--callers takes a number"));
    let start = Duration::from_millis(
        required(&args, "--start-at")
            .parse()
            .expect("--start-at takes Unix ms"),
    );
    let report_every = flag(&args, "--report-every").map_or(Duration::from_secs(2), |v| {
        Duration::from_secs_f64(v.parse().expect("--report-every takes seconds"))
    });
    let arrivals = flag(&args, "--rate").map(|rate| {
        let rate: f64 = rate.parse().expect("--rate takes calls a second");
        let seconds: f64 = required(&args, "--seconds")
            .parse()
            .expect("--seconds takes seconds");
        let seed = flag(&args, "--seed").map_or(1, |v| v.parse().expect("--seed takes a number"));
        poisson(rate, seconds, seed)
    });

    let policy = PolicyClient::start(ClientConfig::new(&daemon, &service))
        .await
        .expect("a valid client configuration");
    let reporter = Reporter::start(ReporterConfig {
        interval: report_every,
        fleet_pacing: !args.iter().any(|a| a == "--no-fleet-pacing"),
        ..ReporterConfig::new(&daemon, &instance)
    })
    .expect("a valid reporter configuration");
    let calls = Dependency::new(policy, reporter.clone());
    let http = reqwest::Client::new();
    let attempts = Arc::new(AtomicU64::new(0));

    // Every call at once, or each at its arrival.
    let arrivals = arrivals.unwrap_or_else(|| vec![Duration::ZERO; callers]);
    let callers = arrivals.len();
    tokio::time::sleep(start.saturating_sub(since_epoch())).await;
    let mut running = tokio::task::JoinSet::new();
    for arrival in arrivals {
        tokio::time::sleep((start + arrival).saturating_sub(since_epoch())).await;
        let (calls, http, url, attempts) = (calls.clone(), http.clone(), url.clone(), attempts.clone());
        running.spawn(async move {
            let result = calls
                .call("/call", |_| {
                    attempts.fetch_add(1, Relaxed);
                    attempt(&http, &url)
                })
                .await;
            result
                .ok()
                .map(|()| since_epoch().saturating_sub(start + arrival).as_secs_f64())
        });
    }
    let mut seconds = Vec::with_capacity(callers);
    let mut gave_up = 0;
    while let Some(done) = running.join_next().await {
        match done.expect("a caller does not panic") {
            Some(took) => seconds.push(took),
            None => gave_up += 1,
        }
    }
    reporter.shutdown().await;
    println!(
        "{}",
        serde_json::json!({
            "instance": instance,
            "succeeded": seconds.len(),
            "gave_up": gave_up,
            "attempts": attempts.load(Relaxed),
            "seconds": seconds,
        })
    );
}
