//! The daemon's side of retry budgets across the fleet: what the
//! processes calling each budgeted dependency claim (their request rates,
//! from their reports), kept in one [`Division`] per dependency; for a
//! fleet-scoped budget (`scope: fleet`), each process's part of the floor,
//! handed back in the answer to its report; for every budget, the families
//! that compare its floors with its ratio, and the lint that warns when a
//! process-scoped budget's floors, times the processes seen reporting,
//! allow more than its ratio.
//!
//! Why the report's answer: a process reports every dependency it calls,
//! gated or not, every interval, so the channel exists wherever a budget
//! does; its answer is off the call path; and the division needs the
//! request counts the report carries anyway. A part is good until the next
//! answer, an interval later.
//!
//! With a shared store, each replica tells the others what its processes
//! claim of a fleet-scoped budget at most once per [`CLAIMS_EVERY`] per
//! dependency, and at once when a process joins or leaves (once per
//! process: cheap even when a whole fleet starts), and divides the floor
//! over every replica's claims: the parts add up to one floor. Each
//! process's part is exact from its second report on in a fleet whose
//! request rates hold, within a second of the rates' changes otherwise.
//! Without one (or while it does not answer, once what it last said is
//! [`KEPT_AT_LEAST`] old), each replica divides the whole floor among the
//! processes it hears from: with R replicas the fleet may retry up to R
//! floors a second.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use prometheus::{GaugeVec, Opts};
use stormguard_core::fleet::floor::{Claims, Division, Part, KEPT_AT_LEAST};
use stormguard_core::policy::{BudgetPolicy, BudgetScope};
use stormguard_core::wire::{FloorPart, Folded, Report};
use tokio::time::Instant;

use super::capacity::MAX_DEPENDENCIES;
use crate::metrics::{Refreshed, Registry};
use crate::pace_store::PaceStore;
use crate::snapshot::PolicySnapshot;

/// How often a replica shares its processes' claims on one dependency with
/// the others, at most.
pub const CLAIMS_EVERY: Duration = Duration::from_secs(1);

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

/// One dependency's claims, and what the other replicas claim.
struct Divided {
    division: Division<String>,
    budget: BudgetPolicy,
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

    /// Retries a second the floors of this replica's processes allow: its
    /// share of a fleet-scoped floor (summed over the replicas, the fleet's).
    fn local_floors(&mut self, now: Instant) -> f64 {
        let mine = self.division.claims(now);
        let floor = f64::from(self.budget.min_retries_per_second);
        if self.budget.scope == BudgetScope::Process {
            return floor * mine.processes as f64;
        }
        let all = mine + self.others(now);
        if all.requests_per_second > 0.0 {
            floor * mine.requests_per_second / all.requests_per_second
        } else if all.processes > 0 {
            floor * mine.processes as f64 / all.processes as f64
        } else {
            0.0
        }
    }
}

/// Every budgeted dependency reported about, and the families about them.
pub struct FleetBudgets {
    divided: Mutex<HashMap<String, Divided>>,
    families: Families,
    /// Whether this replica shares claims through a store.
    shares: bool,
}

impl FleetBudgets {
    /// No dependency followed yet; `shares` when the replicas share a
    /// store; the families registered in `registry`.
    pub fn new(shares: bool, registry: &Registry) -> Arc<Self> {
        let budgets = Arc::new(Self {
            divided: Mutex::default(),
            families: Families::new(registry.families()),
            shares,
        });
        registry.refresh(budgets.clone());
        budgets
    }

    /// Each reporting process's part of the floor of every fleet-scoped
    /// budget it reported about in `reports` (`folded` as counted; each
    /// service's budget as `snapshot` resolves it), at `now`, after sharing
    /// what this replica's processes claim with the other replicas through
    /// `store` where it is time to. Every budgeted report's claim is kept,
    /// for the families and the lint.
    pub async fn divide(
        &self,
        reports: &[Report<'_>],
        folded: &[Folded],
        snapshot: &PolicySnapshot,
        store: Option<&PaceStore>,
        now: Instant,
    ) -> BTreeMap<String, FloorPart> {
        let mut due = Vec::new();
        for (report, folded) in reports.iter().zip(folded) {
            let budget = snapshot.budget(&report.service);
            let tries = (first_tries(report), report.span_ms.map(Duration::from_millis));
            let labelled = !folded.service;
            if let Some(mine) = self.report(&report.service, &report.instance, tries, budget, labelled, now) {
                due.push((&*report.service, mine));
            }
        }
        if let Some(store) = store {
            let shared = due.iter().map(|(service, mine)| async move {
                let others = store.share_claims(service, *mine, KEPT_AT_LEAST).await;
                if let Err(error) = &others {
                    tracing::debug!("{error}; {service}'s retry budget floor divided by this replica's word");
                }
                self.heard(service, others.ok(), now);
            });
            futures_util::future::join_all(shared).await;
        }
        reports
            .iter()
            .filter_map(|report| {
                let part = self.part(&report.service, &report.instance, now)?;
                Some((report.service.to_string(), FloorPart::from(part)))
            })
            .collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Divided>> {
        self.divided.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `instance` reported `first_tries` over `span` (as it says, if it
    /// does) to `service`, whose resolved budget is `budget`, at `now`; `labelled` when the service has a label of its
    /// own in the report families (listed in the policy file, or under the
    /// cap on unlisted ones). A process-scoped budget is followed only then,
    /// so that its families stay within the same bounds; a fleet-scoped one
    /// always, up to [`MAX_DEPENDENCIES`], for its parts. What this
    /// replica's processes claim, when the budget is fleet-scoped and it is
    /// time to share that with the other replicas.
    pub fn report(
        &self,
        service: &str,
        instance: &str,
        (first_tries, span): (u64, Option<Duration>),
        budget: &BudgetPolicy,
        labelled: bool,
        now: Instant,
    ) -> Option<Claims> {
        if !budget.enabled || !(labelled || is_fleet_scoped(budget)) {
            return None;
        }
        let mut divided = self.lock();
        self.sweep(&mut divided, now);
        if !divided.contains_key(service) && divided.len() >= MAX_DEPENDENCIES {
            return None;
        }
        let entry = divided.entry(service.to_string()).or_insert_with(|| Divided {
            division: Division::new(),
            budget: budget.clone(),
            others: Claims::default(),
            heard: None,
            shared: None,
            reported: now,
        });
        entry.budget = budget.clone();
        entry.reported = now;
        entry
            .division
            .report(&instance.to_string(), first_tries, span, now);
        if !(self.shares && is_fleet_scoped(budget)) {
            return None;
        }
        let mine = entry.division.claims(now);
        let due = entry.shared.is_none_or(|(at, processes)| {
            now.saturating_duration_since(at) >= CLAIMS_EVERY || processes != mine.processes
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

    /// `instance`'s part of `service`'s floor at `now`; `None` unless its
    /// budget is fleet-scoped and followed here.
    pub fn part(&self, service: &str, instance: &str, now: Instant) -> Option<Part> {
        let mut divided = self.lock();
        let entry = divided.get_mut(service)?;
        if !is_fleet_scoped(&entry.budget) {
            return None;
        }
        let floor = f64::from(entry.budget.min_retries_per_second);
        let others = entry.others(now);
        Some(entry.division.part(&instance.to_string(), floor, others, now))
    }

    /// What the processes this replica hears from claim of each budgeted
    /// dependency at `now`, by dependency: for the lint.
    pub fn seen(&self, now: Instant) -> Vec<(String, Claims)> {
        let mut divided = self.lock();
        self.sweep(&mut divided, now);
        divided
            .iter_mut()
            .map(|(service, entry)| (service.clone(), entry.division.claims(now)))
            .collect()
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

impl Refreshed for FleetBudgets {
    /// Drops dependencies nobody reports about any more, and sets each
    /// one's families as at `now`.
    fn refresh(&self, now: Instant) {
        let mut divided = self.lock();
        self.sweep(&mut divided, now);
        for (service, entry) in divided.iter_mut() {
            self.families.observe(service, entry, now);
        }
    }
}

/// Each family is this replica's view: summed over the replicas, the
/// fleet's (the ratio and the configured floor aside).
struct Families {
    floor: GaugeVec,
    ratio: GaugeVec,
    processes: GaugeVec,
    requests: GaugeVec,
    floors: GaugeVec,
}

impl Families {
    fn new(registry: &prometheus::Registry) -> Self {
        let gauge = |name: &str, help: &str, labels: &[&str]| {
            let family = GaugeVec::new(Opts::new(name, help), labels).expect("valid family");
            registry
                .register(Box::new(family.clone()))
                .expect("each family is registered once");
            family
        };
        Self {
            floor: gauge(
                "stormguard_budget_min_retries_per_second",
                "A retry budget's configured floor, retries a second: each process's (scope process) or the whole fleet's (scope fleet).",
                &["service", "scope"],
            ),
            ratio: gauge(
                "stormguard_budget_retry_ratio",
                "A retry budget's ratio: retries allowed per first try.",
                &["service"],
            ),
            processes: gauge(
                "stormguard_budget_processes",
                "Processes calling the service with its retry budget on that reported to this replica.",
                &["service"],
            ),
            requests: gauge(
                "stormguard_budget_requests_per_second",
                "First tries a second those processes claim, each bounded by four times the median's.",
                &["service"],
            ),
            floors: gauge(
                "stormguard_budget_floor_retries_per_second",
                "Retries a second the floors of those processes allow whatever their traffic: each process's floor for a process-scoped budget, their parts of the fleet's for a fleet-scoped one.",
                &["service"],
            ),
        }
    }

    fn observe(&self, service: &str, entry: &mut Divided, now: Instant) {
        let mine = entry.division.claims(now);
        let scope = entry.budget.scope.name();
        let _ = self.floor.remove_label_values(&[service, other_scope(scope)]);
        self.floor
            .with_label_values(&[service, scope])
            .set(f64::from(entry.budget.min_retries_per_second));
        let labels = [service];
        self.ratio
            .with_label_values(&labels)
            .set(entry.budget.retry_ratio);
        self.processes
            .with_label_values(&labels)
            .set(mine.processes as f64);
        self.requests
            .with_label_values(&labels)
            .set(mine.requests_per_second);
        self.floors
            .with_label_values(&labels)
            .set(entry.local_floors(now));
    }

    fn forget(&self, service: &str) {
        for scope in BudgetScope::NAMES {
            let _ = self.floor.remove_label_values(&[service, scope]);
        }
        for family in [&self.ratio, &self.processes, &self.requests, &self.floors] {
            let _ = family.remove_label_values(&[service]);
        }
    }
}

/// The scope label a budget's floor no longer has.
fn other_scope(scope: &str) -> &'static str {
    if scope == BudgetScope::Fleet.name() {
        BudgetScope::Process.name()
    } else {
        BudgetScope::Fleet.name()
    }
}

#[cfg(test)]
mod tests;
