//! Real clients, reporting and watching, against a daemon that is stopped
//! and started again twice on the same address, as a rolling update does:
//! every call is counted exactly once across the three lifetimes (counts
//! made while the daemon is down arrive after it is back), the watchers
//! pick up a policy edited while it was down, and no client polls faster
//! than its floor.

mod common;

use std::time::{Duration, Instant};

use common::{eventually, metrics, ConfigMapDir, Daemon, SEED_POLICY};
use stormguard_client::stormguard_core::retry::Failure;
use stormguard_client::{ClientConfig, Dependency, PolicyWatch, Reporter, ReporterConfig};

const PROCESSES: usize = 4;

/// One client process: its watch of two dependencies, its reporter, and calls to one of them.
struct Process {
    watch: PolicyWatch,
    reporter: Reporter,
    payments: Dependency,
}

impl Process {
    async fn start(daemon: &str, instance: usize) -> Process {
        let watch = PolicyWatch::start(ClientConfig {
            watch_wait: Duration::from_secs(2),
            reconnect_initial: Duration::from_millis(200),
            retry_max: Duration::from_secs(1),
            ..ClientConfig::for_services(daemon, ["payment-service", "inventory-service"])
        })
        .await
        .unwrap();
        let reporter = Reporter::start(ReporterConfig {
            interval: Duration::from_millis(200),
            timeout: Duration::from_secs(2),
            ..ReporterConfig::new(daemon, format!("pod-{instance}"))
        })
        .unwrap();
        let payments = Dependency::new(watch.client("payment-service").unwrap(), reporter.clone());
        Process {
            watch,
            reporter,
            payments,
        }
    }
}

/// `n` successful calls from every process.
async fn calls(processes: &[Process], n: usize) {
    for process in processes {
        for _ in 0..n {
            let call = process
                .payments
                .call("/charge", |_| async { Ok::<_, Failure>(()) });
            call.await.unwrap();
        }
    }
}

/// The sum of the samples of `name` whose labels contain each of `labels`.
fn sum(exposition: &str, name: &str, labels: &[&str]) -> f64 {
    exposition
        .lines()
        .filter(|line| line.starts_with(name) && labels.iter().all(|label| line.contains(label)))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

async fn charges(daemon: &Daemon) -> f64 {
    let labels = [
        "endpoint=\"/charge\"",
        "service=\"payment-service\"",
        "status=\"success\"",
    ];
    sum(&metrics(daemon).await, "http_client_requests_total{", &labels)
}

/// Waits until `daemon` has counted `expected` calls, then checks for a
/// while that no more arrive: exactly `expected`, not at least.
async fn counted_exactly(daemon: &Daemon, expected: f64, lifetime: usize) {
    let reached = eventually(Duration::from_secs(15), || async {
        (charges(daemon).await >= expected).then_some(())
    })
    .await;
    assert!(
        reached.is_some(),
        "lifetime {lifetime}: {} of {expected} calls counted",
        charges(daemon).await
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        charges(daemon).await,
        expected,
        "lifetime {lifetime}: counted twice"
    );
}

/// Policy requests (plain and long-polls) a daemon has answered; none may
/// come faster than one per client per second (the client's floor), plus
/// the start-up fetch.
async fn assert_no_spin(daemon: &Daemon, lived: Duration, lifetime: usize) {
    let exposition = metrics(daemon).await;
    let polls = sum(
        &exposition,
        "stormguard_http_requests_total{",
        &["route=\"/v1/policies"],
    );
    let most = PROCESSES as f64 * (lived.as_secs_f64().ceil() + 2.0);
    assert!(
        polls >= PROCESSES as f64,
        "lifetime {lifetime}: only {polls} policy requests: every watcher polls"
    );
    assert!(
        polls <= most,
        "lifetime {lifetime}: {polls} policy requests in {lived:?} from {PROCESSES} clients"
    );
}

async fn retries_seen(processes: &[Process]) -> Vec<u32> {
    let payments = |p: &Process| {
        p.watch
            .client("payment-service")
            .unwrap()
            .policy()
            .policy
            .max_retries
    };
    processes.iter().map(payments).collect()
}

#[tokio::test]
async fn clients_count_exactly_once_and_follow_the_policy_across_two_restarts() {
    let mut configmap = ConfigMapDir::new(SEED_POLICY);
    // One socket across the restarts, as systemd's socket activation keeps
    // one: calls made while the daemon is down wait for the next one.
    let reserved = common::Reserved::new();
    let flags = ["--shutdown-delay", "1s", "--debounce", "20ms"];
    let base = reserved.url();

    let mut daemon = Daemon::start_on(&reserved, &configmap.policy(), &flags);
    let mut started = Instant::now();
    let mut processes = Vec::new();
    for instance in 0..PROCESSES {
        processes.push(Process::start(&base, instance).await);
    }
    assert_eq!(retries_seen(&processes).await, [2; PROCESSES]);
    calls(&processes, 25).await;
    counted_exactly(&daemon, 25.0 * PROCESSES as f64, 1).await;
    assert_no_spin(&daemon, started.elapsed(), 1).await;

    for (lifetime, retries) in [(2, 4), (3, 6)] {
        daemon.signal("TERM");
        assert_eq!(daemon.wait_exit(Duration::from_secs(15)), Some(0));
        // While the daemon is down: calls go on, and the policy is edited.
        calls(&processes, 30).await;
        configmap.update(&SEED_POLICY.replace("maxRetries: 2", &format!("maxRetries: {retries}")));
        tokio::time::sleep(Duration::from_millis(1500)).await;

        daemon = Daemon::start_on(&reserved, &configmap.policy(), &flags);
        started = Instant::now();
        let followed = eventually(Duration::from_secs(15), || async {
            (retries_seen(&processes).await == [retries; PROCESSES]).then_some(())
        })
        .await;
        assert!(
            followed.is_some(),
            "lifetime {lifetime}: watchers saw {:?}",
            retries_seen(&processes).await
        );
        calls(&processes, 10).await;
        if lifetime == 3 {
            for process in &processes {
                process.reporter.clone().shutdown().await;
            }
        }
        counted_exactly(&daemon, 40.0 * PROCESSES as f64, lifetime).await;
        assert_no_spin(&daemon, started.elapsed(), lifetime).await;
    }
    for process in &processes {
        let stats = process.reporter.stats();
        assert_eq!(
            (stats.batches_dropped, stats.reports_rejected),
            (0, 0),
            "{stats:?}"
        );
    }
}
