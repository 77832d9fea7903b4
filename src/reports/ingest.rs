//! Reports into Prometheus families: the seed's client families with its
//! names and labels, and `stormguard_` families for budgets and for the
//! reports themselves.
//!
//! Label values come from clients, so a cardinality guard bounds them:
//! services outside the policy file, endpoints per service and attempt
//! numbers each have a cap, and values past it are folded into `other`.
//! What was folded is counted and told to the sender. States (circuit, in
//! flight, budget left) are kept per instance and expire when an instance
//! stops reporting; the gauges are computed from the live ones at scrape.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::time::Duration;

use prometheus::{GaugeVec, IntCounterVec, IntGaugeVec, Opts, Registry};
use serde::Serialize;
use tokio::time::Instant;

use super::decode::Report;

/// The label value overflow is folded into.
pub const OTHER: &str = "other";

/// The cardinality guard's caps and the instance TTL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReportLimits {
    /// Services not in the policy file that get a label of their own.
    pub max_unlisted_services: usize,
    /// Distinct endpoints per service.
    pub max_endpoints_per_service: usize,
    /// Highest attempt number with a label of its own.
    pub max_attempt_label: u32,
    /// Instances whose states are kept.
    pub max_instances: usize,
    /// An instance that has not reported for this long is forgotten.
    pub instance_ttl: Duration,
}

impl Default for ReportLimits {
    fn default() -> Self {
        Self {
            max_unlisted_services: 100,
            max_endpoints_per_service: 100,
            max_attempt_label: 10,
            max_instances: 10_000,
            instance_ttl: Duration::from_secs(60),
        }
    }
}

/// What a report lost to the guard, as the sender is told.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Folded {
    /// The service was counted as `other`.
    pub service: bool,
    /// Endpoints counted as `other`.
    pub endpoints: usize,
    /// Attempt numbers counted as `other`.
    pub attempts: usize,
    /// The instance's states were not kept: too many instances.
    pub instance_dropped: bool,
}

impl Folded {
    /// Whether the report lost nothing.
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }
}

/// One instance's latest states.
#[derive(Debug, Clone, Copy)]
struct InstanceState {
    circuit: Option<i64>,
    in_flight: Option<u64>,
    remaining_ratio: Option<f64>,
    seen: Instant,
}

/// Which label values have been admitted.
#[derive(Debug, Default)]
struct Admitted {
    unlisted_services: HashSet<String>,
    endpoints: HashMap<String, HashSet<String>>,
    instances: HashMap<(String, String), InstanceState>,
    /// Services with a series in each state gauge: circuit, in flight, budget left.
    gauged: [HashSet<String>; 3],
}

/// The families fed by reports, and the guard in front of them.
pub struct ClientMetrics {
    limits: ReportLimits,
    admitted: Mutex<Admitted>,
    requests: IntCounterVec,
    retries: IntCounterVec,
    server_requests: IntCounterVec,
    concurrent: IntGaugeVec,
    circuit: IntGaugeVec,
    denied: IntCounterVec,
    remaining: GaugeVec,
    reports: IntCounterVec,
    folded: IntCounterVec,
}

fn counter(registry: &Registry, name: &str, help: &str, labels: &[&str]) -> IntCounterVec {
    let family = IntCounterVec::new(Opts::new(name, help), labels).expect("valid metric");
    registry
        .register(Box::new(family.clone()))
        .expect("registered once");
    family
}

fn gauge(registry: &Registry, name: &str, help: &str, labels: &[&str]) -> IntGaugeVec {
    let family = IntGaugeVec::new(Opts::new(name, help), labels).expect("valid metric");
    registry
        .register(Box::new(family.clone()))
        .expect("registered once");
    family
}

impl ClientMetrics {
    /// The families, registered in `registry`.
    pub fn new(registry: &Registry, limits: ReportLimits) -> Self {
        let remaining = GaugeVec::new(
            Opts::new(
                "stormguard_budget_remaining_ratio",
                "Lowest share of its retry budget left among the instances calling the service.",
            ),
            &["service"],
        )
        .expect("valid metric");
        registry
            .register(Box::new(remaining.clone()))
            .expect("registered once");
        Self {
            limits,
            admitted: Mutex::default(),
            requests: counter(
                registry,
                "http_client_requests_total",
                "Attempts sent by clients (first tries and retries), by outcome: success, error (no answer), server_error (5xx).",
                &["service", "endpoint", "status"],
            ),
            retries: counter(
                registry,
                "http_client_retry_attempts_total",
                "Retries sent by clients, by attempt number (1 = the first retry).",
                &["service", "endpoint", "attempt"],
            ),
            server_requests: counter(
                registry,
                "http_server_requests_total",
                "Attempts that reached the service: clients' successes and 5xx answers.",
                &["service"],
            ),
            concurrent: gauge(
                registry,
                "http_client_concurrent_requests",
                "Calls in flight to the service, summed over the instances reporting within the TTL.",
                &["service"],
            ),
            circuit: gauge(
                registry,
                "circuit_breaker_state",
                "Worst circuit breaker state among the instances reporting within the TTL: 0 closed, 1 half-open, 2 open.",
                &["service"],
            ),
            denied: counter(
                registry,
                "stormguard_budget_retries_denied_total",
                "Retries the clients' retry budgets refused.",
                &["service"],
            ),
            remaining,
            reports: counter(
                registry,
                "stormguard_reports_total",
                "Client reports received, by result: accepted, or rejected as malformed.",
                &["result"],
            ),
            folded: counter(
                registry,
                "stormguard_report_labels_folded_total",
                "Label values the cardinality guard folded into `other` (service, endpoint, attempt) or instance states it dropped (instance).",
                &["label"],
            ),
        }
    }

    /// Counts a report refused as malformed.
    pub fn rejected(&self) {
        self.reports.with_label_values(&["rejected"]).inc();
    }

    /// Adds a valid report; `listed` says whether a service is in the policy file.
    pub fn ingest(&self, report: &Report, listed: impl Fn(&str) -> bool, now: Instant) -> Folded {
        let mut folded = Folded::default();
        let labels = self.admit(report, &listed, now, &mut folded);
        let service = labels.service.as_str();
        let mut reached = 0;
        for (endpoint, (counts, retries)) in labels.endpoints.iter().zip(&labels.retries) {
            for (status, n) in [
                ("success", counts.success),
                ("error", counts.error),
                ("server_error", counts.server_error),
            ] {
                if n > 0 {
                    self.requests
                        .with_label_values(&[service, endpoint, status])
                        .inc_by(n);
                }
            }
            reached += counts.success + counts.server_error;
            for (attempt, n) in retries {
                self.retries
                    .with_label_values(&[service, endpoint, attempt])
                    .inc_by(*n);
            }
        }
        if reached > 0 {
            self.server_requests.with_label_values(&[service]).inc_by(reached);
        }
        if let Some(denied) = report.budget.map(|b| b.retries_denied).filter(|n| *n > 0) {
            self.denied.with_label_values(&[service]).inc_by(denied);
        }
        self.reports.with_label_values(&["accepted"]).inc();
        for (label, n) in [
            ("service", usize::from(folded.service)),
            ("endpoint", folded.endpoints),
            ("attempt", folded.attempts),
            ("instance", usize::from(folded.instance_dropped)),
        ] {
            if n > 0 {
                self.folded.with_label_values(&[label]).inc_by(n as u64);
            }
        }
        folded
    }

    /// The labels a report may use, and its instance's states kept.
    fn admit(
        &self,
        report: &Report,
        listed: &dyn Fn(&str) -> bool,
        now: Instant,
        folded: &mut Folded,
    ) -> Labels {
        let mut admitted = self.admitted.lock().expect("guard lock");
        let admitted = &mut *admitted;
        let service = if listed(&report.service)
            || admitted.unlisted_services.contains(&report.service)
            || admit(
                &mut admitted.unlisted_services,
                &report.service,
                self.limits.max_unlisted_services,
            ) {
            report.service.clone()
        } else {
            folded.service = true;
            OTHER.to_string()
        };
        let known = admitted.endpoints.entry(service.clone()).or_default();
        let mut endpoints = Vec::with_capacity(report.endpoints.len());
        let mut retries = Vec::with_capacity(report.endpoints.len());
        for e in &report.endpoints {
            if known.contains(&e.endpoint) || admit(known, &e.endpoint, self.limits.max_endpoints_per_service)
            {
                endpoints.push(e.endpoint.clone());
            } else {
                folded.endpoints += 1;
                endpoints.push(OTHER.to_string());
            }
            let attempts = e
                .retries
                .iter()
                .map(|(attempt, n)| {
                    let number: u32 = attempt.parse().unwrap_or(u32::MAX);
                    if number <= self.limits.max_attempt_label {
                        (attempt.clone(), *n)
                    } else {
                        folded.attempts += 1;
                        (OTHER.to_string(), *n)
                    }
                })
                .collect();
            retries.push((e.requests, attempts));
        }
        let state = InstanceState {
            circuit: report.circuit_state.map(|s| s.as_metric()),
            in_flight: report.in_flight,
            remaining_ratio: report.budget.and_then(|b| b.remaining_ratio),
            seen: now,
        };
        let key = (service.clone(), report.instance.clone());
        if admitted.instances.len() >= self.limits.max_instances && !admitted.instances.contains_key(&key) {
            let ttl = self.limits.instance_ttl;
            admitted
                .instances
                .retain(|_, s| now.saturating_duration_since(s.seen) < ttl);
        }
        if admitted.instances.len() < self.limits.max_instances || admitted.instances.contains_key(&key) {
            admitted.instances.insert(key, state);
        } else {
            folded.instance_dropped = true;
        }
        Labels {
            service,
            endpoints,
            retries,
        }
    }

    /// Recomputes the state gauges from the instances still live at `now`;
    /// a service none of whose instances is live loses its series.
    pub fn refresh(&self, now: Instant) {
        let mut admitted = self.admitted.lock().expect("guard lock");
        let admitted = &mut *admitted;
        let ttl = self.limits.instance_ttl;
        admitted
            .instances
            .retain(|_, s| now.saturating_duration_since(s.seen) < ttl);
        let mut services: HashMap<String, Aggregate> = HashMap::new();
        for ((service, _), state) in &admitted.instances {
            services.entry(service.clone()).or_default().add(state);
        }
        let [circuit, concurrent, remaining] = &mut admitted.gauged;
        set_or_remove(
            circuit,
            &services,
            |a| a.circuit,
            |s, v| self.circuit.with_label_values(&[s]).set(v),
            |s| {
                let _ = self.circuit.remove_label_values(&[s]);
            },
        );
        set_or_remove(
            concurrent,
            &services,
            |a| a.in_flight.map(|n| i64::try_from(n).unwrap_or(i64::MAX)),
            |s, v| self.concurrent.with_label_values(&[s]).set(v),
            |s| {
                let _ = self.concurrent.remove_label_values(&[s]);
            },
        );
        set_or_remove(
            remaining,
            &services,
            |a| a.remaining,
            |s, v| self.remaining.with_label_values(&[s]).set(v),
            |s| {
                let _ = self.remaining.remove_label_values(&[s]);
            },
        );
    }
}

/// Sets a gauge for each service with a value, and removes the series of
/// services in `gauged` that no longer have one; `gauged` becomes the former.
fn set_or_remove<T>(
    gauged: &mut HashSet<String>,
    services: &HashMap<String, Aggregate>,
    value: impl Fn(&Aggregate) -> Option<T>,
    set: impl Fn(&str, T),
    remove: impl Fn(&str),
) {
    let mut now_gauged = HashSet::new();
    for (service, aggregate) in services {
        if let Some(v) = value(aggregate) {
            set(service, v);
            now_gauged.insert(service.clone());
        }
    }
    for gone in gauged.difference(&now_gauged) {
        remove(gone);
    }
    *gauged = now_gauged;
}

/// Adds `value` to `set` if it has room.
fn admit(set: &mut HashSet<String>, value: &str, cap: usize) -> bool {
    set.len() < cap && set.insert(value.to_string())
}

/// A report's label values after the guard.
struct Labels {
    service: String,
    endpoints: Vec<String>,
    retries: Vec<(super::decode::StatusCounts, Vec<(String, u64)>)>,
}

/// The live instances' states of one service.
#[derive(Debug, Default)]
struct Aggregate {
    circuit: Option<i64>,
    in_flight: Option<u64>,
    remaining: Option<f64>,
}

impl Aggregate {
    fn add(&mut self, state: &InstanceState) {
        if let Some(c) = state.circuit {
            self.circuit = Some(self.circuit.map_or(c, |w| w.max(c)));
        }
        if let Some(n) = state.in_flight {
            self.in_flight = Some(self.in_flight.unwrap_or(0).saturating_add(n));
        }
        if let Some(r) = state.remaining_ratio {
            self.remaining = Some(self.remaining.map_or(r, |l| l.min(r)));
        }
    }
}

#[cfg(test)]
mod tests;
