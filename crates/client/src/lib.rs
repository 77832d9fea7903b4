//! stormguard's client library: what a service adds to call its dependencies
//! the way the fleet's policy says.
//!
//! - [`PolicyWatch`] fetches the resolved policies of a process's
//!   dependencies from the daemon at start-up within a bounded wait, falls
//!   back to the last good policies cached on disk, else to the built-in
//!   defaults (and says which), then watches for new versions through one
//!   long-poll for all of them and applies each one live; each dependency's
//!   [`PolicyClient`] gives its current policy. Its own fetches back off with full jitter, so a fleet
//!   restarting at once does not stampede the daemon.
//! - [`Reporter`] aggregates what calls did (attempts by outcome, retries by
//!   attempt number, budget denials, breaker state, calls in flight) and
//!   sends it to the daemon's `POST /v1/reports` every few seconds and at
//!   shutdown; while the daemon is unreachable it keeps aggregating, in
//!   bounded memory, and sends the sum later.
//! - [`Dependency`] ties the two together for one dependency: a call runs
//!   under the current policy (breaker, budget, retries with backoff and
//!   jitter, hedging: `stormguard_core::guard`) and every attempt is
//!   reported.
//!
//! ```no_run
//! use std::time::Duration;
//! use stormguard_client::stormguard_core::retry::Failure;
//! use stormguard_client::{ClientConfig, Dependency, PolicyWatch, Reporter, ReporterConfig};
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! let daemon = "http://stormguard.infra:8080";
//! let instance = std::env::var("HOSTNAME").unwrap_or_else(|_| "local".into());
//! // At start-up: the policy for calls to payment-service, kept current.
//! let policies = PolicyWatch::start(ClientConfig {
//!     cache: Some("/var/cache/stormguard/policies.json".into()),
//!     ..ClientConfig::for_services(daemon, ["payment-service", "ledger"])
//! })
//! .await
//! .expect("valid service names and daemon URL");
//! let reporter = Reporter::start(ReporterConfig::new(daemon, instance)).expect("a valid instance name");
//! let payments = Dependency::new(policies.client("payment-service").expect("watched"), reporter.clone());
//!
//! // Each call: one attempt per invocation of the closure; the policy decides
//! // the retries, their backoff, the budget and the breaker.
//! let http = reqwest::Client::new();
//! let receipt = payments
//!     .call("/charge", |_attempt| {
//!         let sent = http.post("http://payment-service/charge").timeout(Duration::from_secs(2)).send();
//!         async move {
//!             let response = sent.await.map_err(|_| Failure::Connect)?;
//!             match response.status().as_u16() {
//!                 200..=299 => Ok(response),
//!                 code => Err(Failure::Status { code, retry_after: None }),
//!             }
//!         }
//!     })
//!     .await;
//! # let _ = receipt;
//! // At shutdown: the last counts go to the daemon.
//! reporter.shutdown().await;
//! # }
//! ```

mod config;
mod connect;
mod dependency;
mod policy;
mod report;

pub use config::ConfigError;
pub use connect::DaemonTls;
pub use dependency::Dependency;
pub use policy::{ClientConfig, PolicyClient, PolicySource, PolicyWatch};
pub use report::{Outcome, Reporter, ReporterConfig, ReporterStats, SendError};
pub use stormguard_core;
