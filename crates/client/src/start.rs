//! Start-up in one call: the policy watch and the reporter a process shares
//! among all its dependencies.

use crate::{ClientConfig, ConfigError, Dependency, PolicyWatch, Reporter, ReporterConfig};

/// A process's policy watch and reporter, started together; clones share
/// them. Make one at start-up, take a [`Dependency`] for each service the
/// process calls, and [`shutdown`](Self::shutdown) at the end.
#[derive(Clone)]
pub struct Stormguard {
    policies: PolicyWatch,
    reporter: Reporter,
}

impl Stormguard {
    /// Watches the policies for calls to `services` at `daemon` and reports
    /// there as this pod (`HOSTNAME`, which Kubernetes sets to the pod's
    /// name, else `local`), every other setting at its default. Waits for
    /// the policies as [`PolicyWatch::start`] does: at most 5 s, then the
    /// built-in defaults until the daemon answers.
    pub async fn start(
        daemon: &str,
        services: impl IntoIterator<Item = impl Into<String>>,
    ) -> Result<Self, ConfigError> {
        let instance = std::env::var("HOSTNAME").unwrap_or_else(|_| "local".into());
        Self::with(
            ClientConfig::for_services(daemon, services),
            ReporterConfig::new(daemon, instance),
        )
        .await
    }

    /// [`start`](Self::start) with settings of your own: a cache file, TLS
    /// towards the daemon, a token file.
    pub async fn with(policies: ClientConfig, reports: ReporterConfig) -> Result<Self, ConfigError> {
        let policies = PolicyWatch::start(policies).await?;
        let reporter = Reporter::start(reports)?;
        Ok(Self { policies, reporter })
    }

    /// Calls to `service`, under its current policy, reported; `None` when
    /// it is not one of the services watched.
    pub fn dependency(&self, service: &str) -> Option<Dependency> {
        let policy = self.policies.client(service)?;
        Some(Dependency::new(policy, self.reporter.clone()))
    }

    /// The policy watch.
    pub fn policies(&self) -> &PolicyWatch {
        &self.policies
    }

    /// The reporter.
    pub fn reporter(&self) -> &Reporter {
        &self.reporter
    }

    /// At shutdown: sends the last counts to the daemon.
    pub async fn shutdown(self) {
        self.reporter.shutdown().await;
    }
}
