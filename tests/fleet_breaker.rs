//! Fleet half-open end to end: client processes whose breakers are
//! fleet-scoped (`circuitBreaker.scope: fleet`) ask the real daemon for
//! trial slots over `POST /v1/pace`, and a dependency that counts what
//! reaches it sees one set of trials for the fleet, not one per process:
//! through one daemon, and through two replicas sharing Redis.

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

use common::redis::Redis;
use common::{metrics, sample, Daemon};
use stormguard_client::stormguard_core::breaker::CircuitState;
use stormguard_client::stormguard_core::retry::Failure;
use stormguard_client::{ClientConfig, Dependency, PolicyClient, Reporter, ReporterConfig};
use tokio::time::Instant;

const PROCESSES: usize = 10;
const HALF_OPEN_MAX_CALLS: u64 = 2;

const POLICY: &str = "\
defaults:
  maxRetries: 0
services:
  ledger:
    circuitBreaker:
      enabled: true
      consecutiveFailures: 3
      openTimeout: 1s
      halfOpenMaxCalls: 2
      successThreshold: 2
      scope: fleet
";

/// A dependency that answers 503 while `down`, counting what reaches it.
#[derive(Default)]
struct Counted {
    down: AtomicBool,
    reached: AtomicU64,
}

async fn process(daemon: &Daemon, instance: &str) -> Dependency {
    let policy = PolicyClient::start(ClientConfig {
        startup_wait: Duration::from_secs(5),
        ..ClientConfig::new(daemon.url(""), "ledger")
    })
    .await
    .expect("a valid client configuration");
    let reporter = Reporter::start(ReporterConfig::new(daemon.url(""), instance)).expect("a valid reporter");
    Dependency::new(policy, reporter)
}

/// Calls `ledger` every 20 ms until the test ends.
fn calling(dependency: Dependency, counted: Arc<Counted>) {
    tokio::spawn(async move {
        loop {
            let counted = counted.clone();
            let _ = dependency
                .call("/entries", move |_| {
                    let counted = counted.clone();
                    async move {
                        counted.reached.fetch_add(1, Relaxed);
                        if counted.down.load(Relaxed) {
                            Err(Failure::Status {
                                code: 503,
                                retry_after: None,
                            })
                        } else {
                            Ok(())
                        }
                    }
                })
                .await;
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
}

fn states(processes: &[Dependency]) -> Vec<CircuitState> {
    processes
        .iter()
        .map(|p| p.policy().guard().breaker().expect("a breaker").state())
        .collect()
}

#[tokio::test]
async fn ten_processes_breakers_send_one_set_of_trials_and_close_together() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("policy.yaml");
    std::fs::write(&path, POLICY).unwrap();
    let daemon = Daemon::start(&path, &[]);
    outage(&[daemon]).await;
}

#[tokio::test]
async fn replicas_sharing_a_store_send_one_set_of_trials_between_them() {
    let Some(redis) = Redis::start(None) else { return };
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("policy.yaml");
    std::fs::write(&path, POLICY).unwrap();
    let url = redis.url();
    let store = ["--pace-store", url.as_str()];
    outage(&[Daemon::start(&path, &store), Daemon::start(&path, &store)]).await;
}

/// Ten processes, dealt to `daemons` in turn, call a dependency that goes
/// down and comes back: the trials that reach it while it is down are the
/// fleet's, and every breaker closes soon after it is back.
async fn outage(daemons: &[Daemon]) {
    let counted = Arc::new(Counted::default());
    counted.down.store(true, Relaxed);
    let mut processes = Vec::new();
    for (i, daemon) in daemons.iter().cycle().take(PROCESSES).enumerate() {
        processes.push(process(daemon, &format!("ledger-caller-{i}")).await);
    }
    for p in &processes {
        calling(p.clone(), counted.clone());
    }

    // Every breaker opens on its own three failures.
    let opened = common::eventually(Duration::from_secs(5), || {
        let all = states(&processes).iter().all(|s| *s != CircuitState::Closed);
        async move { all.then_some(()) }
    })
    .await;
    assert!(opened.is_some(), "{:?}", states(&processes));
    let before = counted.reached.load(Relaxed);

    // Over the next 2.5 s (two openTimeouts and more), each breaker alone
    // would go half-open twice and send its trials: 2 × 10 × 2. The fleet
    // sends halfOpenMaxCalls per half-open, and each fails and reopens it.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let trials = counted.reached.load(Relaxed) - before;
    assert!(
        (1..=3 * HALF_OPEN_MAX_CALLS).contains(&trials),
        "{trials} trials reached the dependency while it was down"
    );
    let mut slots = 0.0;
    for daemon in daemons {
        let exposition = metrics(daemon).await;
        slots += sample(
            &exposition,
            "stormguard_fleet_breaker_trial_slots_total{service=\"ledger\"}",
        )
        .unwrap_or(0.0);
    }
    assert!(
        (1.0..=3.0 * HALF_OPEN_MAX_CALLS as f64).contains(&slots),
        "{slots} slots granted"
    );

    // The dependency comes back: the next trials close every breaker, in a
    // ramp of 2, 4, 8 processes 500 ms apart (no gate to pace them). Here
    // about 2.4 s later (up to openTimeout to the next half-open, a round
    // of asks, the 1.5 s ramp); the bound leaves room for a busy machine.
    counted.down.store(false, Relaxed);
    let up = Instant::now();
    let closed = common::eventually(Duration::from_secs(10), || {
        let all = states(&processes).iter().all(|s| *s == CircuitState::Closed);
        async move { all.then_some(()) }
    })
    .await;
    assert!(closed.is_some(), "{:?}", states(&processes));
    assert!(
        up.elapsed() <= Duration::from_secs(4),
        "closed {:?} after the dependency came back",
        up.elapsed()
    );
    for daemon in daemons {
        let exposition = metrics(daemon).await;
        assert_eq!(
            sample(&exposition, "stormguard_fleet_breaker_state{service=\"ledger\"}"),
            Some(0.0),
            "{exposition}"
        );
    }
}
