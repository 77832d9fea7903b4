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
//!
//! `--critical SHARE --sheddable SHARE` make those shares of the calls, drawn
//! call by call, of those classes (the rest name none). The JSON line then
//! (or with `--records`) also holds every call: `[arrival, class, outcome, seconds, attempts]`,
//! the arrival in seconds from the start, the outcome `ok` or why it gave
//! up (`shed`, `no-turn`, `circuit-open`, ...), and the seconds it took to
//! succeed or to fail.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

use stormguard_client::stormguard_core::policy::Criticality;
use stormguard_client::stormguard_core::retry::{Failure, GaveUp};
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

/// The class of each call: `critical` and `sheddable` shares of them, drawn
/// call by call from `seed`; `None` names none.
fn classes(calls: usize, critical: f64, sheddable: f64, seed: u64) -> Vec<Option<Criticality>> {
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::SmallRng::seed_from_u64(seed ^ 0x5eed);
    (0..calls)
        .map(|_| {
            let draw: f64 = rng.random();
            if draw < critical {
                Some(Criticality::Critical)
            } else if draw < critical + sheddable {
                Some(Criticality::Sheddable)
            } else {
                None
            }
        })
        .collect()
}

/// How a call that gave up is named in the JSON line.
fn gave_up_name(why: GaveUp) -> &'static str {
    match why {
        GaveUp::NotRetryable => "not-retryable",
        GaveUp::Exhausted => "exhausted",
        GaveUp::Deadline => "deadline",
        GaveUp::Cancelled => "cancelled",
        GaveUp::BudgetExhausted => "budget",
        GaveUp::CircuitOpen => "circuit-open",
        GaveUp::NoTurn => "no-turn",
        GaveUp::Shed => "shed",
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
    let share = |name| flag(&args, name).map_or(0.0, |v| v.parse::<f64>().expect("a share takes a number"));
    let (critical, sheddable) = (share("--critical"), share("--sheddable"));
    let classed = critical > 0.0 || sheddable > 0.0 || args.iter().any(|a| a == "--records");
    let seed = flag(&args, "--seed").map_or(1, |v| v.parse().expect("--seed takes a number"));
    let classes = classes(callers, critical, sheddable, seed);
    tokio::time::sleep(start.saturating_sub(since_epoch())).await;
    let mut running = tokio::task::JoinSet::new();
    for (arrival, class) in arrivals.into_iter().zip(classes) {
        tokio::time::sleep((start + arrival).saturating_sub(since_epoch())).await;
        let (calls, http, url, attempts) = (calls.clone(), http.clone(), url.clone(), attempts.clone());
        let calls = match class {
            Some(class) => calls.with_criticality(class),
            None => calls,
        };
        running.spawn(async move {
            let result = calls
                .call("/call", |_| {
                    attempts.fetch_add(1, Relaxed);
                    attempt(&http, &url)
                })
                .await;
            let took = since_epoch().saturating_sub(start + arrival).as_secs_f64();
            let (outcome, sent) = match &result {
                Ok(()) => ("ok", 0),
                Err(error) => (gave_up_name(error.gave_up), error.attempts),
            };
            let class = class.map_or("-", Criticality::name);
            (arrival.as_secs_f64(), class, outcome, took, sent)
        });
    }
    let mut seconds = Vec::with_capacity(callers);
    let mut every = Vec::with_capacity(callers);
    let mut gave_up = 0;
    while let Some(done) = running.join_next().await {
        let call = done.expect("a caller does not panic");
        match call.2 {
            "ok" => seconds.push(call.3),
            _ => gave_up += 1,
        }
        if classed {
            every.push(serde_json::json!([call.0, call.1, call.2, call.3, call.4]));
        }
    }
    reporter.shutdown().await;
    let mut line = serde_json::json!({
        "instance": instance,
        "succeeded": seconds.len(),
        "gave_up": gave_up,
        "attempts": attempts.load(Relaxed),
        "seconds": seconds,
    });
    if classed {
        line["calls"] = serde_json::Value::Array(every);
    }
    println!("{line}");
}
