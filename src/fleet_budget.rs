//! The daemon's side of fleet-scoped retry budgets: one
//! [`Division`] per dependency whose budget says `scope: fleet`, fed by
//! reports, and each process's part of the floor handed back in the answer
//! to its report.
//!
//! Why the report's answer: a process reports every dependency it calls,
//! gated or not, every interval, so the channel exists wherever a budget
//! does; its answer is off the call path; and the division needs the
//! request counts the report carries anyway. A part is good until the next
//! answer, an interval later.
//!
//! With a shared store, each replica tells the others what its processes
//! claim at most once per [`SHARE_EVERY`] per dependency, and at once when
//! a process joins or leaves (once per process: cheap even when a whole
//! fleet starts), and divides the floor over every replica's claims: the
//! parts add up to one floor. Each process's part is exact from its second
//! report on in a fleet whose request rates hold, within a second of the
//! rates' changes otherwise.
//! Without one (or while it does not answer, once what it last said is
//! [`KEPT_AT_LEAST`] old), each replica divides the whole floor among the
//! processes it hears from: with R replicas the fleet may retry up to R
//! floors a second.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use prometheus::{Encoder, GaugeVec, Opts, Registry, TextEncoder};
use stormguard_core::fleet::floor::{Claims, Division, Part, KEPT_AT_LEAST};
use stormguard_core::policy::{BudgetPolicy, BudgetScope};
use stormguard_core::wire::Report;
use tokio::time::Instant;

/// Fleet-scoped dependencies divided at once, at most; reports about more
/// get no part (their processes keep their own fallback).
pub const MAX_DEPENDENCIES: usize = 1000;
/// How often a replica shares its processes' claims on one dependency with
/// the others, at most.
pub const SHARE_EVERY: Duration = Duration::from_secs(1);

/// Whether `budget` is one the daemon divides.
pub fn is_fleet_scoped(budget: &BudgetPolicy) -> bool {
    budget.enabled && budget.scope == BudgetScope::Fleet
}

/// The requests a report counts as first tries: every attempt but the retries.
pub fn first_tries(report: &Report<'_>) -> u64 {
    report.endpoints.iter().fold(0u64, |sum, endpoint| {
        let counts = endpoint.requests;
        let attempts = counts
            .success
            .saturating_add(counts.error)
            .saturating_add(counts.server_error);
        let retries = endpoint.retries.values().fold(0u64, |s, n| s.saturating_add(*n));
        sum.saturating_add(attempts.saturating_sub(retries))
    })
}

/// One dependency's division, and what the other replicas claim.
struct Divided {
    division: Division<String>,
    floor: f64,
    ratio: f64,
    others: Claims,
    /// When the store last told what the other replicas claim.
    heard: Option<Instant>,
    /// When this replica last shared its claims (answered or not), and how
    /// many processes they were.
    shared: Option<(Instant, u64)>,
    reported: Instant,
}

impl Divided {
    fn others(&self, now: Instant) -> Claims {
        match self.heard {
            Some(at) if now.saturating_duration_since(at) < KEPT_AT_LEAST => self.others,
            _ => Claims::default(),
        }
    }
}

/// Every fleet-scoped dependency reported about, and the families about them.
pub struct FleetBudgets {
    divided: Mutex<HashMap<String, Divided>>,
    families: Families,
    /// Whether this replica shares claims through a store.
    shares: bool,
}

impl FleetBudgets {
    /// No dependency divided yet; `shares` when the replicas share a store.
    pub fn new(shares: bool) -> Self {
        Self {
            divided: Mutex::default(),
            families: Families::new(),
            shares,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Divided>> {
        self.divided.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `instance` reported `first_tries` to `service`, whose budget is
    /// fleet-scoped, at `now`. What this replica's processes claim, when it
    /// is time to share that with the other replicas.
    pub fn report(
        &self,
        service: &str,
        instance: &str,
        first_tries: u64,
        budget: &BudgetPolicy,
        now: Instant,
    ) -> Option<Claims> {
        let mut divided = self.lock();
        self.sweep(&mut divided, now);
        if !divided.contains_key(service) && divided.len() >= MAX_DEPENDENCIES {
            return None;
        }
        let entry = divided.entry(service.to_string()).or_insert_with(|| Divided {
            division: Division::new(),
            floor: 0.0,
            ratio: 0.0,
            others: Claims::default(),
            heard: None,
            shared: None,
            reported: now,
        });
        entry.floor = f64::from(budget.min_retries_per_second);
        entry.ratio = budget.retry_ratio;
        entry.reported = now;
        entry.division.report(&instance.to_string(), first_tries, now);
        if !self.shares {
            return None;
        }
        let mine = entry.division.claims(now);
        let due = entry.shared.is_none_or(|(at, processes)| {
            now.saturating_duration_since(at) >= SHARE_EVERY || processes != mine.processes
        });
        if due {
            entry.shared = Some((now, mine.processes));
        }
        due.then_some(mine)
    }

    /// The store told what the other replicas claim on `service` (`None`:
    /// it did not answer, and what it last said stands for a while).
    pub fn heard(&self, service: &str, others: Option<Claims>, now: Instant) {
        let mut divided = self.lock();
        if let (Some(entry), Some(others)) = (divided.get_mut(service), others) {
            entry.others = others;
            entry.heard = Some(now);
        }
    }

    /// `instance`'s part of `service`'s floor at `now`; `None` for a
    /// dependency not divided here.
    pub fn part(&self, service: &str, instance: &str, now: Instant) -> Option<Part> {
        let mut divided = self.lock();
        let entry = divided.get_mut(service)?;
        let others = entry.others(now);
        let part = entry
            .division
            .part(&instance.to_string(), entry.floor, others, now);
        let all = entry.division.claims(now) + others;
        self.families.observe(service, entry, all);
        Some(part)
    }

    /// The families, in the text exposition format.
    pub fn encode(&self, now: Instant) -> Vec<u8> {
        self.sweep(&mut self.lock(), now);
        let mut out = Vec::new();
        TextEncoder::new()
            .encode(&self.families.registry.gather(), &mut out)
            .expect("encoding to a Vec cannot fail");
        out
    }

    /// Drops dependencies nobody has reported about for [`KEPT_AT_LEAST`].
    fn sweep(&self, divided: &mut HashMap<String, Divided>, now: Instant) {
        divided.retain(|service, entry| {
            let kept = now.saturating_duration_since(entry.reported) < KEPT_AT_LEAST;
            if !kept {
                self.families.forget(service);
            }
            kept
        });
    }
}

struct Families {
    registry: Registry,
    floor: GaugeVec,
    ratio: GaugeVec,
    processes: GaugeVec,
    requests: GaugeVec,
}

impl Families {
    fn new() -> Self {
        let registry = Registry::new();
        let gauge = |name: &str, help: &str| {
            let family = GaugeVec::new(Opts::new(name, help), &["service"]).expect("valid family");
            registry
                .register(Box::new(family.clone()))
                .expect("each family is registered once");
            family
        };
        Self {
            floor: gauge(
                "stormguard_fleet_budget_min_retries_per_second",
                "A fleet-scoped retry budget's floor: retries a second the whole fleet may always make, divided among its processes.",
            ),
            ratio: gauge(
                "stormguard_fleet_budget_retry_ratio",
                "A fleet-scoped retry budget's ratio: retries allowed per request, fleet-wide.",
            ),
            processes: gauge(
                "stormguard_fleet_budget_processes",
                "Processes the floor of a fleet-scoped retry budget is divided among, over every replica this one hears of.",
            ),
            requests: gauge(
                "stormguard_fleet_budget_requests_per_second",
                "First tries a second the processes sharing a fleet-scoped retry budget claim, each bounded by four times the median's.",
            ),
            registry,
        }
    }

    fn observe(&self, service: &str, entry: &Divided, all: Claims) {
        let labels = [service];
        self.floor.with_label_values(&labels).set(entry.floor);
        self.ratio.with_label_values(&labels).set(entry.ratio);
        self.processes
            .with_label_values(&labels)
            .set(all.processes as f64);
        self.requests
            .with_label_values(&labels)
            .set(all.requests_per_second);
    }

    fn forget(&self, service: &str) {
        for family in [&self.floor, &self.ratio, &self.processes, &self.requests] {
            let _ = family.remove_label_values(&[service]);
        }
    }
}

#[cfg(test)]
mod tests;
