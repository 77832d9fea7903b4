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
//!   under the current policy (breaker, send gate, budget, retries with
//!   backoff and jitter, hedging: `stormguard_core::guard`) and every
//!   attempt is reported. It guards a client stack as it stands: as
//!   `reqwest-middleware` middleware, or as a tower [`Layer`](GuardLayer)
//!   around a hyper client or a tonic channel ([`GrpcStatus`] reads gRPC's
//!   statuses). [`Stormguard`] starts the watch and the reporter together.
//!
//! ```no_run
//! # async fn adopt(channel: tonic::transport::Channel) -> Result<(), Box<dyn std::error::Error>> {
//! use stormguard_client::{reqwest_middleware::ClientBuilder, GrpcStatus, Stormguard};
//!
//! let stormguard = Stormguard::start("http://stormguard.infra:8080", ["payment-service", "ledger"]).await?;
//! let payments = stormguard.dependency("payment-service").expect("watched");
//! let http = ClientBuilder::new(reqwest::Client::new()).with(payments).build();
//! let receipt = http.post("http://payment-service/charge").send().await?;
//! let ledger = stormguard.dependency("ledger").expect("watched").layer().classify(GrpcStatus);
//! let channel = tower::ServiceBuilder::new().layer(ledger).service(channel); // LedgerClient::new(channel)
//! stormguard.shutdown().await; // at shutdown: the last counts go to the daemon
//! # drop((receipt, channel));
//! # Ok(())
//! # }
//! ```
//!
//! A call that is not an HTTP request through a client stack runs through
//! [`Dependency::call`]: the closure sends one attempt and says how it
//! failed.
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
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod classify;
mod config;
mod connect;
mod dependency;
mod layer;
mod middleware;
mod policy;
mod report;
mod start;

pub use classify::{failure_of, Classify, GrpcStatus, HttpStatus};
pub use config::ConfigError;
pub use connect::DaemonTls;
pub use dependency::Dependency;
pub use layer::{GuardError, GuardLayer, Guarded, ResendBody};
pub use policy::{ClientConfig, PolicyClient, PolicySource, PolicyWatch};
pub use report::{Outcome, Reporter, ReporterConfig, ReporterStats, SendError};
pub use reqwest_middleware;
pub use start::Stormguard;
pub use stormguard_core;
