//! One process of a database's clients, for the PostgreSQL restart
//! benchmark (`bench/real_fleet.py --dependency postgres`): a pool of
//! `--connections` connections to `--dsn` that stays full, each slot
//! (re)connecting through stormguard-client under the policy the daemon
//! serves for `--service`, from `--start-at` until `--until` (epoch ms).
//!
//! ```sh
//! cargo run --release -p stormguard-client --example pg_pools -- \
//!     --daemon http://127.0.0.1:8080 --service pg --instance pod-1 \
//!     --dsn "host=127.0.0.1 port=5432 user=postgres dbname=postgres" \
//!     --connections 5 --start-at "$(date +%s%3N)" --until "$(( $(date +%s%3N) + 30000 ))"
//! ```
//!
//! A connected slot runs `SELECT 1` every 100 ms; when that fails (the
//! server went away) it connects again. A refused connection, a reset and
//! a connect timeout are connect failures; SQLSTATE 53300 ("too many
//! clients") and 57P03 ("starting up", "shutting down") are a 503, the
//! server saying it cannot take the connection now; any other SQLSTATE is a
//! 500. At `--until` it prints one JSON line: the connect attempts, the
//! refusals by kind, the calls given up, and each instant (epoch ms) the
//! pool became full. `--no-fleet-pacing` and `--report-every` as in
//! `herd_callers`.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use stormguard_client::stormguard_core::retry::Failure;
use stormguard_client::{ClientConfig, Dependency, PolicyClient, Reporter, ReporterConfig};
use tokio_postgres::error::SqlState;
use tokio_postgres::NoTls;

#[path = "common/args.rs"]
mod args;
use args::{flag, required, since_epoch};

fn epoch_ms() -> u64 {
    since_epoch().as_millis() as u64
}

/// What the pool saw, shared by its slots.
#[derive(Default)]
struct Counts {
    attempts: AtomicU64,
    too_many_clients: AtomicU64,
    starting_up: AtomicU64,
    unreachable: AtomicU64,
    other: AtomicU64,
    gave_up: AtomicU64,
    connected: AtomicUsize,
    full_at: Mutex<Vec<u64>>,
}

impl Counts {
    /// One connect attempt's failure, counted and judged.
    fn refused(&self, error: &tokio_postgres::Error) -> Failure {
        match error.code() {
            Some(code) if *code == SqlState::TOO_MANY_CONNECTIONS => {
                self.too_many_clients.fetch_add(1, Relaxed);
                unavailable()
            }
            Some(code) if *code == SqlState::CANNOT_CONNECT_NOW => {
                self.starting_up.fetch_add(1, Relaxed);
                unavailable()
            }
            Some(_) => {
                self.other.fetch_add(1, Relaxed);
                Failure::Status {
                    code: 500,
                    retry_after: None,
                }
            }
            None => {
                self.unreachable.fetch_add(1, Relaxed);
                Failure::Connect
            }
        }
    }
}

fn unavailable() -> Failure {
    Failure::Status {
        code: 503,
        retry_after: None,
    }
}

/// One slot: connected through `calls` until `until`, again whenever the
/// connection fails.
async fn slot(calls: Dependency, dsn: String, size: usize, until: u64, counts: Arc<Counts>) {
    while epoch_ms() < until {
        let connected = calls
            .call("connect", |_| {
                counts.attempts.fetch_add(1, Relaxed);
                let (dsn, counts) = (dsn.clone(), counts.clone());
                async move {
                    let mut config: tokio_postgres::Config = dsn.parse().map_err(|_| Failure::Connect)?;
                    config.connect_timeout(Duration::from_secs(2));
                    config.connect(NoTls).await.map_err(|e| counts.refused(&e))
                }
            })
            .await;
        let Ok((client, connection)) = connected else {
            counts.gave_up.fetch_add(1, Relaxed);
            tokio::time::sleep(Duration::from_secs(1)).await;
            continue;
        };
        let driver = tokio::spawn(connection);
        if counts.connected.fetch_add(1, Relaxed) + 1 == size {
            counts.full_at.lock().expect("not poisoned").push(epoch_ms());
        }
        while epoch_ms() < until && client.simple_query("SELECT 1").await.is_ok() {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        counts.connected.fetch_sub(1, Relaxed);
        drop(client);
        driver.abort();
    }
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let daemon = required(&args, "--daemon");
    let service = required(&args, "--service");
    let instance = required(&args, "--instance");
    let dsn = required(&args, "--dsn");
    let size: usize =
        flag(&args, "--connections").map_or(5, |v| v.parse().expect("--connections takes a number"));
    let start: u64 = required(&args, "--start-at")
        .parse()
        .expect("--start-at takes epoch milliseconds");
    let until: u64 = required(&args, "--until")
        .parse()
        .expect("--until takes epoch milliseconds");
    let report_every = flag(&args, "--report-every").map_or(Duration::from_secs(2), |v| {
        Duration::from_secs_f64(v.parse().expect("--report-every takes seconds"))
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
    let counts = Arc::new(Counts::default());
    tokio::time::sleep(Duration::from_millis(start.saturating_sub(epoch_ms()))).await;
    let slots: Vec<_> = (0..size)
        .map(|_| tokio::spawn(slot(calls.clone(), dsn.clone(), size, until, counts.clone())))
        .collect();
    for running in slots {
        running.await.expect("a slot does not panic");
    }
    reporter.shutdown().await;
    let full_at = counts.full_at.lock().expect("not poisoned").clone();
    println!(
        "{}",
        serde_json::json!({
            "instance": instance,
            "connections": size,
            "attempts": counts.attempts.load(Relaxed),
            "refused": {
                "too_many_clients": counts.too_many_clients.load(Relaxed),
                "starting_up": counts.starting_up.load(Relaxed),
                "unreachable": counts.unreachable.load(Relaxed),
                "other": counts.other.load(Relaxed),
            },
            "gave_up": counts.gave_up.load(Relaxed),
            "full_at": full_at,
        })
    );
}
