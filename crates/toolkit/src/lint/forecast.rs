//! What each service's policy does to a recovering server under the herd
//! its forecast states: the simulator run on it, explained in words.

use std::time::Duration;

use serde::Serialize;
use stormguard_core::policy::{FleetShape, ForecastScenario, GoDuration, PolicyDocument, RetryPolicy};

use super::policy::retry_span;
use super::warning::DEFAULTS;
use super::words::{its_retries, to_millis};
use crate::sim::{self, Fleet, Scenario, Summary};

/// Forecast runs at most, one per distinct policy and herd; beyond, services are listed without.
pub const MAX_FORECASTS: usize = 100;

/// What a herd does to a service under its policy, in one outage of the
/// service's forecast: `clients` calls failing at once from the fleet its
/// forecast states, a service that takes `capacity` requests a second once
/// the outage ends.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Forecast {
    /// The service (or `(defaults)`).
    pub service: String,
    /// Calls failing at once.
    pub clients: u32,
    /// Requests a second the service takes once back.
    pub capacity: u32,
    /// How long the outage lasts.
    pub outage_seconds: f64,
    /// Requests the server rejected.
    pub wasted: u64,
    /// 99th percentile time to success, if any client succeeded.
    pub p99_seconds: Option<f64>,
    /// When the last client finished, served or not.
    pub drain_seconds: f64,
    /// Clients served.
    pub succeeded: u32,
    /// Clients that gave up.
    pub gave_up: u32,
    /// Whether the calls were paced through the daemon's replicas: the
    /// policy's send gate is on.
    pub paced: bool,
    /// The fleet the calls came from.
    #[serde(flatten)]
    pub fleet: Fleet,
    /// What the figures mean, in words, and what to change.
    pub explanation: String,
}

/// Each service's policy against its forecast's herd, one entry per
/// outage, each distinct run computed once.
pub(super) fn forecasts(
    document: &PolicyDocument,
    reshape: &dyn Fn(ForecastScenario) -> ForecastScenario,
) -> Vec<Forecast> {
    type Run = (RetryPolicy, u32, u32, FleetShape, Duration);
    let mut done: Vec<(Run, Summary)> = Vec::new();
    let services = std::iter::once((
        DEFAULTS.to_string(),
        document.defaults_policy(),
        document.forecast.defaults(),
    ))
    .chain(document.services.keys().map(|name| {
        (
            name.clone(),
            document.resolve(name).policy,
            document.forecast.resolve(name),
        )
    }))
    .map(|(service, policy, herd)| (service, policy, reshape(herd)));
    let mut out = Vec::new();
    for (service, policy, herd) in services {
        for &outage in &herd.outages {
            let run: Run = (policy.clone(), herd.clients, herd.capacity, herd.fleet, outage);
            let scenario = Scenario::forecast(&herd, outage);
            let summary = match done.iter().find(|(r, _)| *r == run) {
                Some((_, summary)) => summary.clone(),
                None if done.len() < MAX_FORECASTS => {
                    // A validated document's policies are valid: nothing to forecast otherwise.
                    let Ok(summary) = sim::forecast(&service, policy.clone(), &scenario) else {
                        continue;
                    };
                    done.push((run, summary.clone()));
                    summary
                }
                None => continue,
            };
            out.push(Forecast {
                explanation: explain(&service, &policy, &summary),
                service: service.clone(),
                clients: herd.clients,
                capacity: herd.capacity,
                outage_seconds: outage.as_secs_f64(),
                wasted: summary.wasted,
                p99_seconds: summary.p99_seconds,
                drain_seconds: summary.drain_seconds,
                succeeded: summary.succeeded,
                gave_up: summary.gave_up + summary.unfinished,
                paced: policy.gate.enabled,
                fleet: Fleet::from(&scenario),
            });
        }
    }
    out
}

/// What `summary` means for `service` under `policy`, and what to change.
fn explain(service: &str, policy: &RetryPolicy, summary: &Summary) -> String {
    let clients = summary.clients;
    let outage = format!("{}s", summary.outage_seconds);
    let per_call = summary.wasted as f64 / f64::from(clients.max(1));
    let tune = if service == DEFAULTS {
        "`stormguard tune`, with this file as `--policy` and a service that keeps the defaults as `--service`,".to_owned()
    } else {
        format!("`stormguard tune --service {service}`, with this file as `--policy`,")
    };
    let gave_up = summary.gave_up + summary.unfinished;
    if summary.succeeded == 0 && policy.max_retries == 0 {
        return format!(
            "every call fails: it does not retry, and a {outage} outage outlasts its one attempt."
        );
    }
    if summary.succeeded == 0 && !policy.gate.enabled {
        return format!(
            "every call fails: {} spent within {}, before a {outage} outage ends, and only add \
             load ({:.1} refused requests per call). To ride out outages this long, retry for longer than them, \
             or not at all; {tune} finds settings.",
            its_retries(policy.max_retries),
            GoDuration(to_millis(retry_span(policy))),
            per_call
        );
    }
    if gave_up > 0 {
        return format!(
            "serves {} of {clients} calls; {gave_up} give up, {}. {tune} finds settings that serve them.",
            summary.succeeded,
            why_given_up(summary)
        );
    }
    let p99 = summary.p99_seconds.unwrap_or_default();
    let mut text = format!(
        "serves every call, 99 % within {p99:.1}s of failing, with {per_call:.1} refused requests per call."
    );
    if per_call > 2.0 {
        text.push_str(&format!(
            " Most are retries into the outage or past the capacity; {tune} finds a policy that wastes less."
        ));
    }
    text
}

/// Why most of the calls that gave up did.
fn why_given_up(s: &Summary) -> &'static str {
    [
        (s.gave_up_exhausted, "out of retries"),
        (s.gave_up_budget, "refused a retry by the retry budget"),
        (s.gave_up_circuit_open, "turned away by the open circuit breaker"),
        (s.gave_up_deadline, "past maxElapsed"),
        (
            s.gave_up_no_turn,
            "given no turn by the send gate before maxElapsed",
        ),
        (s.unfinished, "still retrying an hour on"),
    ]
    .into_iter()
    .max_by_key(|(count, _)| *count)
    .map_or("", |(_, why)| why)
}
