//! The errors scenario: calls arrive at a steady rate against a dependency
//! that fails a share of them at random and, unless it is `limited`, never
//! runs out of capacity. Without an outage nothing recovers and nothing
//! collapses: what it shows is what retries, and the budgets meant to cap
//! them, add to the load (the amplification). With one, calls keep arriving
//! while the dependency is down and as it comes back: what the processes'
//! breakers do to its return (their half-open trials).

use std::time::Duration;

use rand::Rng;
use serde::Serialize;

use super::arrivals::poisson;
use super::time::seconds;

/// The errors scenario's settings. In JSON, each duration is in seconds,
/// its key ending `_seconds`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Errors {
    /// New calls per second, in all: first tries, arriving at random.
    #[serde(rename = "calls_per_second")]
    pub rate: f64,
    /// The share of requests the dependency fails, at random, in [0, 1].
    pub error_rate: f64,
    /// When calls stop arriving.
    #[serde(rename = "until_seconds", serialize_with = "seconds")]
    pub until: Duration,
    /// Whether the dependency takes only the scenario's capacity a second,
    /// by its model, once any outage ends; else it never runs out.
    pub limited: bool,
}

impl Errors {
    /// `rate` calls a second failing at `error_rate`, for a minute.
    pub fn new(rate: f64, error_rate: f64) -> Self {
        Self {
            rate,
            error_rate,
            until: Duration::from_secs(60),
            limited: false,
        }
    }

    /// The arrival times of new calls, in nanoseconds.
    pub(super) fn arrivals(&self, rng: &mut impl Rng) -> Vec<u64> {
        poisson(rng, |_| self.rate, self.until.as_secs_f64())
    }
}
