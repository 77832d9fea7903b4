//! A client process calling one dependency under a retry budget: a
//! `PolicyClient`, a `Reporter` and a `Dependency`.

use std::time::Duration;

use stormguard_client::stormguard_core::retry::Failure;
use stormguard_client::{ClientConfig, Dependency, PolicyClient, Reporter, ReporterConfig};

pub struct Budgeted {
    pub dependency: Dependency,
    pub reporter: Reporter,
}

impl Budgeted {
    /// A process taking `service`'s policy from the daemon at `served` and
    /// reporting to `daemon` as `instance` when the test flushes (its first
    /// report held for the hour of its interval too).
    pub async fn start(served: &str, daemon: &str, service: &str, instance: &str) -> Budgeted {
        let held = ReporterConfig {
            interval: Duration::from_secs(3600),
            first_report: Duration::from_secs(3600),
            timeout: Duration::from_millis(500),
            ..ReporterConfig::new(daemon, instance)
        };
        Self::reporting(served, service, held).await
    }

    /// A process taking `service`'s policy from the daemon at `served` and
    /// reporting as `config` says.
    pub async fn reporting(served: &str, service: &str, config: ReporterConfig) -> Budgeted {
        let policy = PolicyClient::start(ClientConfig {
            startup_wait: Duration::from_secs(5),
            ..ClientConfig::new(served, service)
        })
        .await
        .expect("a valid client configuration");
        let reporter = Reporter::start(config).expect("a valid reporter configuration");
        Budgeted {
            dependency: Dependency::new(policy, reporter.clone()),
            reporter,
        }
    }

    /// `n` calls that succeed at once: first tries only.
    pub async fn calls(&self, n: usize) {
        for _ in 0..n {
            self.dependency
                .call("/post", |_| async { Ok::<_, Failure>(()) })
                .await
                .expect("a call that succeeds");
        }
    }

    /// The floor its budget holds now, in retries a second, for a budget
    /// whose ratio is 0 and window 10 s: what it allows is 10 × the floor.
    pub fn floor(&self) -> f64 {
        let guard = self.dependency.policy().guard();
        guard.budget().expect("a budget").snapshot().allowed / 10.0
    }
}
