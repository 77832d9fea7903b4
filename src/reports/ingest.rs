//! Reports into the client families (the retry-storm article's names and
//! labels), and
//! `stormguard_` families for budgets and for the reports themselves.
//!
//! Label values come from clients, so a cardinality guard bounds them:
//! services outside the policy file, endpoints per service and attempt
//! numbers each have a cap, and values past it are folded into `other`.
//! What was folded is counted and told to the sender. States (circuit, in
//! flight, budget left) are kept per instance and expire when an instance
//! stops reporting; their gauges are computed from the live ones at scrape.
//!
//! The families are kept in one table of their own rather than in the
//! `prometheus` crate's vectors: a report updates twenty-odd series under
//! one short lock with label values interned to numbers, and a scrape of
//! 50,000 series renders straight to text (see `bench/reports.sh`).

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use foldhash::HashMap;
use tokio::time::Instant;

use stormguard_core::breaker::CircuitState;
use stormguard_core::wire::{Folded, Report};

use crate::metrics::{Registry, Written};

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
    /// How long a batch number is remembered, so that the batch sent again is not counted twice.
    pub batch_window: Duration,
    /// A service not in the policy file that has not reported for this long
    /// loses its series and frees its place under `max_unlisted_services`.
    pub label_ttl: Duration,
}

/// Outcome labels of `http_client_requests_total`, in report order.
const STATUSES: [&str; 3] = ["success", "error", "server_error"];
/// The attempt number `other` is stored as.
const OTHER_ATTEMPT: u32 = u32::MAX;
/// Kinds of folding, as `stormguard_report_labels_folded_total{label}` names them.
const FOLD_LABELS: [&str; 4] = ["service", "endpoint", "attempt", "instance"];

/// One instance's latest states.
#[derive(Debug, Clone, Copy)]
struct InstanceState {
    circuit: Option<i64>,
    gate_on: Option<bool>,
    in_flight: Option<u64>,
    remaining_ratio: Option<f64>,
    seen: Instant,
}

/// A service's label and what hangs off it. An expired one keeps its place
/// in the table with an empty name until a new service takes it.
#[derive(Debug, Clone, Default)]
struct ServiceSeries {
    name: String,
    /// Counted under `max_unlisted_services`: not in the policy file when first seen.
    unlisted: bool,
    /// When it last reported.
    seen: Option<Instant>,
    endpoints: Vec<String>,
    endpoint_ids: HashMap<String, u32>,
    server_requests: u64,
    denied: u64,
    /// Reporting instances' latest states, by instance name.
    instances: HashMap<String, InstanceState>,
}

/// Every series the reports feed, behind one lock.
#[derive(Debug, Default)]
struct Table {
    services: Vec<ServiceSeries>,
    service_ids: HashMap<String, u32>,
    unlisted: usize,
    /// (service, endpoint, status) → attempts.
    requests: BTreeMap<(u32, u32, u8), u64>,
    /// (service, endpoint, attempt number) → retries.
    retries: BTreeMap<(u32, u32, u32), u64>,
    /// Instances kept, over every service.
    instances: usize,
    /// Places of expired services, for new ones.
    free: Vec<u32>,
    accepted: u64,
    rejected: u64,
    duplicate: u64,
    folded: [u64; 4],
}

/// The families fed by reports, and the guard in front of them.
pub struct ClientMetrics {
    limits: ReportLimits,
    table: Mutex<Table>,
}

impl ClientMetrics {
    /// Empty families under `limits`, written at each scrape of `registry`.
    pub fn new(limits: ReportLimits, registry: &Registry) -> Arc<Self> {
        let metrics = Arc::new(Self {
            limits,
            table: Mutex::default(),
        });
        registry.write(metrics.clone());
        metrics
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Table> {
        // Plain counters: a panic elsewhere cannot leave them unusable.
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Counts `n` reports refused as malformed.
    pub fn rejected(&self, n: usize) {
        self.lock().rejected += n as u64;
    }

    /// Counts a batch of `reports` reports counted before, by this replica or another.
    pub fn repeated(&self, reports: usize) {
        self.lock().duplicate += reports as u64;
    }

    /// Adds a valid report; `listed` says whether a service is in the policy file.
    pub fn ingest(&self, report: &Report<'_>, listed: impl Fn(&str) -> bool, now: Instant) -> Folded {
        let mut folded = Folded::default();
        let mut table = self.lock();
        let table = &mut *table;
        let service = table.service_id(&report.service, &listed, &self.limits, &mut folded, now);
        table.services[service as usize].seen = Some(now);
        let mut reached = 0u64;
        for e in &report.endpoints {
            let endpoint = table.endpoint_id(service, &e.endpoint, self.limits.max_endpoints_per_service);
            folded.endpoints += usize::from(
                table.services[service as usize].endpoints[endpoint as usize] == OTHER && e.endpoint != OTHER,
            );
            let counts = [e.requests.success, e.requests.error, e.requests.server_error];
            for (status, n) in counts.into_iter().enumerate() {
                if n > 0 {
                    let count = table
                        .requests
                        .entry((service, endpoint, status as u8))
                        .or_default();
                    *count = count.saturating_add(n);
                }
            }
            reached = reached
                .saturating_add(e.requests.success)
                .saturating_add(e.requests.server_error);
            for (attempt, n) in &e.retries {
                let number = attempt.parse::<u32>().unwrap_or(OTHER_ATTEMPT);
                let number = if number <= self.limits.max_attempt_label {
                    number
                } else {
                    folded.attempts += 1;
                    OTHER_ATTEMPT
                };
                let count = table.retries.entry((service, endpoint, number)).or_default();
                *count = count.saturating_add(*n);
            }
        }
        let series = &mut table.services[service as usize];
        series.server_requests = series.server_requests.saturating_add(reached);
        let denied = report.budget.map_or(0, |b| b.retries_denied);
        series.denied = series.denied.saturating_add(denied);
        let state = InstanceState {
            circuit: report.circuit_state.map(|s| i64::from(s.as_metric())),
            gate_on: report.gate_on,
            in_flight: report.in_flight,
            remaining_ratio: report.budget.and_then(|b| b.remaining_ratio),
            seen: now,
        };
        folded.instance_dropped = !table.keep(service, &report.instance, state, &self.limits, now);
        table.accepted += 1;
        for (i, n) in [
            usize::from(folded.service),
            folded.endpoints,
            folded.attempts,
            usize::from(folded.instance_dropped),
        ]
        .into_iter()
        .enumerate()
        {
            table.folded[i] += n as u64;
        }
        folded
    }
}

impl Written for ClientMetrics {
    /// Every client family, with the state gauges computed from the
    /// instances still live at `now`.
    fn write(&self, now: Instant, out: &mut Vec<u8>) {
        let mut table = self.lock();
        table.expire(self.limits.instance_ttl, now);
        table.expire_unlisted(self.limits.label_ttl, now);
        out.extend_from_slice(exposition(&table).as_bytes());
    }
}

impl Table {
    /// The id of `name`'s service label: its own, or `other` past the cap of unlisted services.
    fn service_id(
        &mut self,
        name: &str,
        listed: &dyn Fn(&str) -> bool,
        limits: &ReportLimits,
        folded: &mut Folded,
        now: Instant,
    ) -> u32 {
        if let Some(id) = self.service_ids.get(name) {
            let id = *id;
            folded.service = self.services[id as usize].name == OTHER && name != OTHER;
            return id;
        }
        let is_listed = listed(name);
        if !is_listed && self.unlisted >= limits.max_unlisted_services {
            self.expire_unlisted(limits.label_ttl, now);
        }
        if !is_listed && self.unlisted >= limits.max_unlisted_services {
            folded.service = true;
            return self.intern_service(OTHER, false);
        }
        self.unlisted += usize::from(!is_listed);
        self.intern_service(name, !is_listed)
    }

    fn intern_service(&mut self, name: &str, unlisted: bool) -> u32 {
        if let Some(id) = self.service_ids.get(name) {
            return *id;
        }
        let series = ServiceSeries {
            name: name.to_string(),
            unlisted,
            ..ServiceSeries::default()
        };
        let id = match self.free.pop() {
            Some(id) => {
                self.services[id as usize] = series;
                id
            }
            None => {
                self.services.push(series);
                self.services.len() as u32 - 1
            }
        };
        self.service_ids.insert(name.to_string(), id);
        id
    }

    /// Forgets services outside the policy file that have not reported
    /// within `ttl` of `now`: their series go, and their places are free.
    fn expire_unlisted(&mut self, ttl: Duration, now: Instant) {
        let expired: Vec<u32> = (0..self.services.len() as u32)
            .filter(|id| {
                let s = &self.services[*id as usize];
                s.unlisted
                    && s.seen
                        .is_some_and(|seen| now.saturating_duration_since(seen) >= ttl)
            })
            .collect();
        if expired.is_empty() {
            return;
        }
        for id in &expired {
            let series = std::mem::take(&mut self.services[*id as usize]);
            self.service_ids.remove(&series.name);
            self.instances -= series.instances.len();
            self.unlisted -= 1;
        }
        self.requests.retain(|key, _| !expired.contains(&key.0));
        self.retries.retain(|key, _| !expired.contains(&key.0));
        self.free.extend(expired);
    }

    /// The id of `endpoint`'s label within `service`: its own, or `other` past the cap.
    fn endpoint_id(&mut self, service: u32, endpoint: &str, cap: usize) -> u32 {
        let series = &mut self.services[service as usize];
        if let Some(id) = series.endpoint_ids.get(endpoint) {
            return *id;
        }
        let name = if series.endpoints.len() < cap {
            endpoint
        } else {
            OTHER
        };
        if let Some(id) = series.endpoint_ids.get(name) {
            return *id;
        }
        let id = series.endpoints.len() as u32;
        series.endpoints.push(name.to_string());
        series.endpoint_ids.insert(name.to_string(), id);
        id
    }

    /// Keeps an instance's states; false if there is no room for a new instance.
    fn keep(
        &mut self,
        service: u32,
        instance: &str,
        state: InstanceState,
        limits: &ReportLimits,
        now: Instant,
    ) -> bool {
        let instances = &mut self.services[service as usize].instances;
        if let Some(known) = instances.get_mut(instance) {
            *known = state;
            return true;
        }
        if self.instances >= limits.max_instances {
            self.expire(limits.instance_ttl, now);
        }
        if self.instances >= limits.max_instances {
            return false;
        }
        self.services[service as usize]
            .instances
            .insert(instance.to_string(), state);
        self.instances += 1;
        true
    }

    /// Forgets instances that have not reported within `ttl` of `now`.
    fn expire(&mut self, ttl: Duration, now: Instant) {
        let mut kept = 0;
        for series in &mut self.services {
            series
                .instances
                .retain(|_, s| now.saturating_duration_since(s.seen) < ttl);
            kept += series.instances.len();
        }
        self.instances = kept;
    }
}

/// The live instances' states of one service.
#[derive(Debug, Default, Clone, Copy)]
struct Aggregate {
    circuit: Option<i64>,
    breakers_open: Option<u64>,
    gates_on: Option<u64>,
    in_flight: Option<u64>,
    remaining: Option<f64>,
}

impl Aggregate {
    fn add(&mut self, state: &InstanceState) {
        if let Some(c) = state.circuit {
            self.circuit = Some(self.circuit.map_or(c, |w| w.max(c)));
            let open = c != i64::from(CircuitState::Closed.as_metric());
            self.breakers_open = Some(self.breakers_open.unwrap_or(0) + u64::from(open));
        }
        if let Some(on) = state.gate_on {
            self.gates_on = Some(self.gates_on.unwrap_or(0) + u64::from(on));
        }
        if let Some(n) = state.in_flight {
            self.in_flight = Some(self.in_flight.unwrap_or(0).saturating_add(n));
        }
        if let Some(r) = state.remaining_ratio {
            self.remaining = Some(self.remaining.map_or(r, |l| l.min(r)));
        }
    }
}

fn exposition(t: &Table) -> String {
    let mut out = String::with_capacity(128 * (t.requests.len() + t.retries.len()) + 4096);
    let service = |id: u32| t.services[id as usize].name.as_str();
    let endpoint = |s: u32, e: u32| t.services[s as usize].endpoints[e as usize].as_str();

    header(&mut out, "http_client_requests_total", "counter", "Attempts sent by clients (first tries and retries), by outcome: success, error (no answer), server_error (5xx).");
    for (&(s, e, status), n) in &t.requests {
        let _ = writeln!(
            out,
            "http_client_requests_total{{endpoint=\"{}\",service=\"{}\",status=\"{}\"}} {n}",
            Escaped(endpoint(s, e)),
            service(s),
            STATUSES[status as usize]
        );
    }
    header(
        &mut out,
        "http_client_retry_attempts_total",
        "counter",
        "Retries sent by clients, by attempt number (1 = the first retry).",
    );
    for (&(s, e, attempt), n) in &t.retries {
        let _ = write!(out, "http_client_retry_attempts_total{{attempt=\"");
        if attempt == OTHER_ATTEMPT {
            out.push_str(OTHER);
        } else {
            let _ = write!(out, "{attempt}");
        }
        let _ = writeln!(
            out,
            "\",endpoint=\"{}\",service=\"{}\"}} {n}",
            Escaped(endpoint(s, e)),
            service(s)
        );
    }
    let per_service = |out: &mut String,
                       name: &str,
                       kind: &str,
                       help: &str,
                       value: &dyn Fn(&ServiceSeries) -> Option<String>| {
        header(out, name, kind, help);
        for series in t.services.iter().filter(|s| !s.name.is_empty()) {
            if let Some(v) = value(series) {
                let _ = writeln!(out, "{name}{{service=\"{}\"}} {v}", series.name);
            }
        }
    };
    per_service(
        &mut out,
        "http_server_requests_total",
        "counter",
        "Attempts that reached the service: clients' successes and 5xx answers.",
        &|s| (s.server_requests > 0).then(|| s.server_requests.to_string()),
    );
    per_service(
        &mut out,
        "stormguard_budget_retries_denied_total",
        "counter",
        "Retries the clients' retry budgets refused.",
        &|s| (s.denied > 0).then(|| s.denied.to_string()),
    );
    let state = |s: &ServiceSeries| {
        s.instances.values().fold(Aggregate::default(), |mut a, state| {
            a.add(state);
            a
        })
    };
    per_service(&mut out, "circuit_breaker_state", "gauge", "Worst circuit breaker state among the instances reporting within the TTL: 0 closed, 1 half-open, 2 open.", &|s| {
        state(s).circuit.map(|c| c.to_string())
    });
    per_service(
        &mut out,
        "stormguard_circuit_breakers_open",
        "gauge",
        "Instances reporting within the TTL whose circuit breaker for the service is open or half-open: how many of the fleet's breakers will each probe its return; absent when none has a breaker.",
        &|s| state(s).breakers_open.map(|n| n.to_string()),
    );
    per_service(
        &mut out,
        "stormguard_send_gates_on",
        "gauge",
        "Instances reporting within the TTL whose send gate for the service is on (pacing its calls); absent when none has a gate.",
        &|s| state(s).gates_on.map(|n| n.to_string()),
    );
    per_service(
        &mut out,
        "http_client_concurrent_requests",
        "gauge",
        "Calls in flight to the service, summed over the instances reporting within the TTL.",
        &|s| state(s).in_flight.map(|n| n.to_string()),
    );
    per_service(
        &mut out,
        "stormguard_budget_remaining_ratio",
        "gauge",
        "Lowest share of its retry budget left among the instances calling the service.",
        &|s| state(s).remaining.map(|r| r.to_string()),
    );
    header(
        &mut out,
        "stormguard_reports_total",
        "counter",
        "Client reports received, by result: accepted, rejected as malformed, or duplicate (a batch sent again, counted once).",
    );
    let _ = writeln!(
        out,
        "stormguard_reports_total{{result=\"accepted\"}} {}",
        t.accepted
    );
    let _ = writeln!(
        out,
        "stormguard_reports_total{{result=\"rejected\"}} {}",
        t.rejected
    );
    let _ = writeln!(
        out,
        "stormguard_reports_total{{result=\"duplicate\"}} {}",
        t.duplicate
    );
    header(&mut out, "stormguard_report_labels_folded_total", "counter", "Label values the cardinality guard folded into `other` (service, endpoint, attempt), or instance states it dropped (instance).");
    for (label, n) in FOLD_LABELS.iter().zip(t.folded) {
        let _ = writeln!(
            out,
            "stormguard_report_labels_folded_total{{label=\"{label}\"}} {n}"
        );
    }
    header(
        &mut out,
        "stormguard_report_instances",
        "gauge",
        "Instances whose states are kept (reported within the TTL).",
    );
    let _ = writeln!(out, "stormguard_report_instances {}", t.instances);
    out
}

fn header(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
}

/// A label value escaped for the text exposition: `\`, `"` and newlines.
struct Escaped<'a>(&'a str);

impl std::fmt::Display for Escaped<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if !self.0.contains(['\\', '"', '\n']) {
            return f.write_str(self.0);
        }
        for c in self.0.chars() {
            match c {
                '\\' => f.write_str("\\\\")?,
                '"' => f.write_str("\\\"")?,
                '\n' => f.write_str("\\n")?,
                c => f.write_char(c)?,
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
