//! The daemon's side of fleet pacing: one [`FleetController`] per
//! dependency that processes ask about (`POST /v1/pace`), created at the
//! first ask and dropped once nobody has asked for
//! [`IDLE`](stormguard_core::fleet::IDLE), with the
//! families that show what it does.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use prometheus::{CounterVec, GaugeVec, IntCounterVec, Opts};
use stormguard_core::fleet::replicas::{Contribution, Published, Shared};
use stormguard_core::fleet::{self, FleetController, ASK_EVERY};
use stormguard_core::gate::Judgement;
use stormguard_core::policy::{Criticality, ValidPolicy};
use stormguard_core::wire::{ByClass, PaceAsk, PaceGrant};
use tokio::time::Instant;

use super::breakers::FleetBreakers;
use super::capacity::{MAX_DEPENDENCIES, MAX_PROCESSES};
use crate::metrics::{Refreshed, Registry};

/// Why an ask got no grant.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    /// The dependency's policy has no send gate.
    #[error("the send gate is off in {0}'s policy (gate.enabled: false): there is nothing to pace")]
    GateOff(String),
    /// Too many dependencies or processes are paced already.
    #[error("{0}")]
    Full(String),
}

/// Every paced dependency, and the families about them.
pub struct Fleet {
    paced: Mutex<HashMap<String, Paced>>,
    /// The fleet-scoped breakers, asked of in the same asks.
    breakers: FleetBreakers,
    families: Families,
    /// Whether this replica shares its pace through a store.
    shares: bool,
}

/// A paced dependency, as `/admin/status` shows it.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PaceStatus {
    /// The dependency.
    pub service: String,
    /// What this replica's rate law believes paces it.
    pub judgement: Judgement,
    /// Of the answers over the last 3 s, the share refused (timeouts aside).
    pub refused_share: f64,
    /// Attempts accepted over the last second, per second.
    pub delivered_per_second: f64,
    /// Attempts per second this replica's processes may send.
    pub rate: f64,
    /// Processes this replica paces for it.
    pub processes: usize,
    /// Of those heard from lately, the ones whose own gate is on: each
    /// judges, alone, the dependency down or overloaded (or was told to
    /// pace).
    pub gates_on: usize,
    /// Of those heard from lately, the ones whose own gate watches: each
    /// has heard refusals and judges, alone, that the dependency answers.
    pub gates_watching: usize,
    /// How long it has been paced without a 10 s pause.
    pub paced_seconds: f64,
    /// The mean interval between a process's asks: a process asks every
    /// 100 ms, or a round trip apart across a slower link. The rate law's
    /// rounds and waits, and the leases, stretch with it.
    pub ask_interval_seconds: f64,
    /// Whether the fleet steers its processes: false across a loop too slow
    /// for it (asks 400 ms apart or more), where each process's gate paces
    /// by its own rate and the grants carry no share.
    pub steering: bool,
    /// The policy's `gate.overloadWhen`: which refusals it takes for overload.
    pub overload_when: String,
    /// With a pace store: whether this replica paces by the shared rate.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shared: Option<bool>,
}

struct Paced {
    controller: FleetController<String>,
    /// The policy it paces under: a reload that changes it is taken up,
    /// and only one that voids what was learned starts afresh.
    policy: ValidPolicy,
    since: Instant,
    /// When this replica last looked whether the dependency was paced by
    /// the shared rate, and whether it was: the time since is counted alone
    /// if it was not.
    looked: (Instant, bool),
}

struct Families {
    rate: GaugeVec,
    judgement: GaugeVec,
    refused_ratio: GaugeVec,
    processes: GaugeVec,
    gates: GaugeVec,
    paced_seconds: GaugeVec,
    ask_interval: GaugeVec,
    steering: GaugeVec,
    attempts: IntCounterVec,
    resets: IntCounterVec,
    shared: GaugeVec,
    owner: GaugeVec,
    alone: CounterVec,
    class_rate: GaugeVec,
    shed: IntCounterVec,
    unknown_classes: IntCounterVec,
}

impl Fleet {
    /// No dependency paced yet; the families registered in `registry`.
    pub fn new(registry: &Registry) -> Arc<Self> {
        Self::with(registry, false)
    }

    fn with(registry: &Registry, shares: bool) -> Arc<Self> {
        let fleet = Arc::new(Self {
            paced: Mutex::default(),
            breakers: FleetBreakers::new(registry.families()),
            families: Families::new(registry.families(), shares),
            shares,
        });
        registry.refresh(fleet.clone());
        fleet
    }

    /// [`new`](Self::new), for a replica that shares its pace through a
    /// store: the families then say whether each dependency is paced by the
    /// shared rate or alone.
    pub fn sharing(registry: &Registry) -> Arc<Self> {
        Self::with(registry, true)
    }

    /// The fleet-scoped breakers' dependencies, for their exchanges with the store.
    pub fn breakers(&self) -> &FleetBreakers {
        &self.breakers
    }

    /// `ask` from a process, under its dependency's resolved `policy`, at
    /// `now`: its share of the rate if its gate asks, and the fleet
    /// breaker's word if it reports a fleet-scoped breaker. A breaker the
    /// fleet closes is handed to the pace: its grant says `pace`.
    pub fn ask(&self, ask: &PaceAsk, policy: &ValidPolicy, now: Instant) -> Result<PaceGrant, Refused> {
        let breaker = self.breakers.ask(ask, policy, now);
        if !policy.gate.enabled && breaker.is_none() {
            return Err(Refused::GateOff(ask.service.to_string()));
        }
        let grant = fleet::answer(policy.gate.enabled, !ask.gate_off, breaker, || {
            self.pace(ask, policy, now)
        })?;
        Ok(PaceGrant {
            rate: grant.rate,
            lease_ms: grant.lease.as_millis() as u64,
            ask_every_ms: ASK_EVERY.as_millis() as u64,
            pace: grant.pace,
            breaker: breaker.map(Into::into),
            classes: true,
        })
    }

    fn pace(&self, ask: &PaceAsk, policy: &ValidPolicy, now: Instant) -> Result<fleet::Grant, Refused> {
        let mut paced = self.lock();
        self.sweep(&mut paced, now);
        if !paced.contains_key(ask.service.as_ref()) && paced.len() >= MAX_DEPENDENCIES {
            return Err(Refused::Full(format!(
                "{MAX_DEPENDENCIES} dependencies are paced already; ask again later"
            )));
        }
        let entry = paced
            .entry(ask.service.to_string())
            .or_insert_with(|| Paced::new(policy, now));
        if entry.policy != *policy {
            self.reloaded(ask.service.as_ref(), entry, policy, now);
        }
        let instance = ask.instance.to_string();
        if !entry.controller.knows(&instance) && entry.controller.members() >= MAX_PROCESSES {
            return Err(Refused::Full(format!(
                "{MAX_PROCESSES} processes are paced for {} already; ask again later",
                ask.service
            )));
        }
        let classes = ask.by_class();
        let tally = stormguard_core::gate::Tally {
            sent: ask.sent,
            accepted: ask.accepted,
            overloaded: ask.overloaded,
            timed_out: ask.timed_out,
            waiting: ask.waiting,
            watching: ask.watching,
            shed: classes.shed,
            demand: classes.demand,
        };
        let grant = entry.controller.ask_at(instance, tally, now);
        self.families.observe(&ask.service, entry, ask, now);
        self.families.classes(&ask.service, entry, &classes, now);
        if self.shares {
            self.families.sharing(&ask.service, entry, now);
        }
        Ok(grant)
    }

    /// Takes up a reloaded `policy` for `service`: what the fleet learned
    /// is kept unless the change voids it (a change of which failures say
    /// overload, or of when), and then the pace starts afresh under the new
    /// setting, logged and counted by the setting.
    fn reloaded(&self, service: &str, entry: &mut Paced, policy: &ValidPolicy, now: Instant) {
        match entry.policy.gate.unlearned_by(&policy.gate) {
            None => {
                entry.controller.retune(policy);
                entry.policy = policy.clone();
            }
            Some(setting) => {
                tracing::warn!(
                    "{service}'s {setting} changed in the policy: its fleet pace starts afresh, probing, and learns again under the new setting"
                );
                self.families.resets.with_label_values(&[service, setting]).inc();
                let since = entry.since;
                *entry = Paced::new(policy, now);
                entry.since = since;
            }
        }
    }

    /// Dependencies paced now: asked about within the last [`IDLE`](stormguard_core::fleet::IDLE).
    pub fn paced(&self) -> usize {
        let mut paced = self.lock();
        self.sweep(&mut paced, Instant::now());
        paced.len()
    }

    /// The dependencies paced now, by name.
    pub fn paced_services(&self) -> Vec<String> {
        let mut paced = self.lock();
        self.sweep(&mut paced, Instant::now());
        paced.keys().cloned().collect()
    }

    /// Every dependency paced at `now`, by name, with what paces it.
    pub fn status(&self, now: Instant) -> Vec<PaceStatus> {
        let mut paced = self.lock();
        self.sweep(&mut paced, now);
        let mut status: Vec<PaceStatus> = paced
            .iter_mut()
            .map(|(service, entry)| {
                let judged = entry.controller.judged_at(now);
                let (gates_watching, gates_on) = entry.controller.gates_at(now);
                PaceStatus {
                    service: service.clone(),
                    judgement: judged.judgement,
                    refused_share: judged.refused_share,
                    delivered_per_second: judged.delivered,
                    rate: entry.controller.part_at(now),
                    processes: entry.controller.members(),
                    gates_on,
                    gates_watching,
                    paced_seconds: now.saturating_duration_since(entry.since).as_secs_f64(),
                    ask_interval_seconds: entry.controller.feedback().interval().as_secs_f64(),
                    steering: entry.controller.steers(),
                    overload_when: entry.policy.gate.overload_when.to_string(),
                    shared: self.shares.then(|| entry.controller.is_shared_at(now)),
                }
            })
            .collect();
        status.sort_by(|a, b| a.service.cmp(&b.service));
        status
    }

    /// What this replica adds at `now` to the shared pace of `service`, if
    /// it paces it.
    pub fn contribute(&self, service: &str, now: Instant) -> Option<Contribution> {
        let mut paced = self.lock();
        paced
            .get_mut(service)
            .map(|entry| entry.controller.contribute_at(now))
    }

    /// `mine`, contributed for `service` at `now`, surely never reached
    /// the store: it goes with the next contribution.
    pub fn unsent(&self, service: &str, mine: &Contribution, now: Instant) {
        if let Some(entry) = self.lock().get_mut(service) {
            entry.controller.unsent_at(mine, now);
        }
    }

    /// The store's answer to `mine` for `service` at `now`: the rate to
    /// publish if this replica owns the pace.
    pub fn shared(
        &self,
        service: &str,
        mine: &Contribution,
        shared: &Shared,
        now: Instant,
    ) -> Option<Published> {
        let mut paced = self.lock();
        let entry = paced.get_mut(service)?;
        let publish = entry.controller.shared_at(mine, shared, now);
        self.families.sharing(service, entry, now);
        publish
    }

    /// The owner of `service`'s pace published `rate`, pushed at `now`.
    pub fn published(&self, service: &str, rate: Published, now: Instant) {
        let mut paced = self.lock();
        if let Some(entry) = paced.get_mut(service) {
            entry.controller.published_at(rate, now);
            self.families.sharing(service, entry, now);
        }
    }

    fn sweep(&self, paced: &mut HashMap<String, Paced>, now: Instant) {
        paced.retain(|service, entry| {
            let idle = entry.controller.is_idle_at(now);
            if idle {
                self.families.forget(service);
            }
            !idle
        });
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Paced>> {
        self.paced.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl Refreshed for Fleet {
    /// Drops idle dependencies' series, and sets what changes with time
    /// alone: how long each has been paced, what the rate law believes.
    fn refresh(&self, now: Instant) {
        let mut paced = self.lock();
        self.sweep(&mut paced, now);
        for (service, entry) in paced.iter_mut() {
            self.families
                .paced_seconds
                .with_label_values(&[service])
                .set(now.saturating_duration_since(entry.since).as_secs_f64());
            self.families.judged(service, entry, now);
            if self.shares {
                self.families.sharing(service, entry, now);
            }
        }
    }
}

impl Paced {
    fn new(policy: &ValidPolicy, now: Instant) -> Self {
        Self {
            controller: FleetController::new_at(policy, now),
            policy: policy.clone(),
            since: now,
            looked: (now, false),
        }
    }
}

impl Families {
    /// The families, registered in `registry`; the time paced alone too
    /// if this replica `shares` a store.
    fn new(registry: &prometheus::Registry, shares: bool) -> Self {
        let gauge = |name: &str, help: &str| {
            GaugeVec::new(Opts::new(name, help), &["service"]).expect("valid metric")
        };
        let rate = gauge(
            "stormguard_fleet_rate",
            "Attempts per second this replica lets its processes send to a paced dependency: its part of the fleet's rate when replicas share their pace. Summed over replicas, the fleet's rate.",
        );
        let judgement = GaugeVec::new(
            Opts::new(
                "stormguard_fleet_judgement",
                "1 for what this replica's rate law believes paces a dependency, 0 for the rest: down (nothing accepted), overloaded (a refusal taken for overload within 3 s), slow (a timeout within 3 s), failing_at_random (refusals within 3 s, none taken for overload), recovering (nothing refused for 3 s).",
            ),
            &["service", "judgement"],
        )
        .expect("valid metric");
        let refused_ratio = gauge(
            "stormguard_fleet_refused_ratio",
            "Of the answers the paced processes reported over the last 3 s, the share refused (0 to 1; timeouts are not counted: they say slow, not refused).",
        );
        let processes = gauge(
            "stormguard_fleet_processes",
            "Processes that ask this daemon for their share of a paced dependency's rate: their send gate is on, or watching.",
        );
        let gates = GaugeVec::new(
            Opts::new(
                "stormguard_fleet_process_gates",
                "Of the processes heard from about a paced dependency within the last three asks, how many have their own send gate on (each judges, alone, the dependency down or overloaded, or was told to pace) and how many watch (each has heard refusals and judges, alone, that it answers).",
            ),
            &["service", "gate"],
        )
        .expect("valid metric");
        let paced_seconds = gauge(
            "stormguard_fleet_paced_seconds",
            "How long the dependency has been paced without a pause of 10 s: a dependency paced for long is not coming back.",
        );
        let ask_interval = gauge(
            "stormguard_fleet_ask_interval_seconds",
            "The mean interval between the asks of a paced dependency's processes: 0.1 nearby, a round trip across a slower link. The rate law's rounds and waits, and the grants' leases, stretch with it.",
        );
        let steering = gauge(
            "stormguard_fleet_steering",
            "1 while the fleet steers a paced dependency's processes, 0 while their feedback loop is too slow for it (asks 400 ms apart or more): each process's gate then paces by its own rate, and the grants carry no share.",
        );
        let attempts = IntCounterVec::new(
            Opts::new(
                "stormguard_fleet_attempts_total",
                "Attempts the paced processes report, by outcome: sent, accepted, overloaded (refused or timed out), timed_out (of those).",
            ),
            &["service", "outcome"],
        )
        .expect("valid metric");
        let resets = IntCounterVec::new(
            Opts::new(
                "stormguard_fleet_pace_resets_total",
                "Times a policy reload voided what the fleet had learned of a paced dependency, which then started afresh, probing, by the setting whose change did: gate.overloadOn or gate.overloadWhen (gate.enabled). A reload of any other setting keeps the pace.",
            ),
            &["service", "setting"],
        )
        .expect("valid metric");
        let shared = gauge(
            "stormguard_fleet_shared",
            "1 while this replica paces a dependency by its part of the rate shared through the pace store, 0 while it paces alone.",
        );
        let owner = gauge(
            "stormguard_fleet_owner",
            "1 while this replica owns a dependency's shared pace: it folds every replica's outcomes and publishes the rate.",
        );
        let alone = CounterVec::new(
            Opts::new(
                "stormguard_fleet_alone_seconds_total",
                "Seconds this replica paced a dependency alone, by its own processes' outcomes, though it shares a pace store: the store did not answer, or had not yet.",
            ),
            &["service"],
        )
        .expect("valid metric");
        let class_rate = GaugeVec::new(
            Opts::new(
                "stormguard_fleet_class_rate",
                "The part of a paced dependency's rate the fleet gives the calls of each class (critical, default, sheddable), attempts per second: while the processes want more than the rate, more critical classes are given theirs first.",
            ),
            &["service", "class"],
        )
        .expect("valid metric");
        let shed = IntCounterVec::new(
            Opts::new(
                "stormguard_fleet_shed_total",
                "Calls the processes' send gates shed, by class: their turn, at the pace the dependency can take, would have come after their class's gate.maxWait (or their deadline), so they failed at once. Critical calls shed mean the dependency cannot take even those.",
            ),
            &["service", "class"],
        )
        .expect("valid metric");
        let unknown_classes = IntCounterVec::new(
            Opts::new(
                "stormguard_fleet_unknown_classes_total",
                "Classes of call named in processes' asks that this daemon does not know (a newer client's): left out of the division, the asks served as if they were not named.",
            ),
            &["service"],
        )
        .expect("valid metric");
        for collector in [
            Box::new(rate.clone()) as Box<dyn prometheus::core::Collector>,
            Box::new(class_rate.clone()),
            Box::new(shed.clone()),
            Box::new(unknown_classes.clone()),
            Box::new(judgement.clone()),
            Box::new(refused_ratio.clone()),
            Box::new(processes.clone()),
            Box::new(gates.clone()),
            Box::new(paced_seconds.clone()),
            Box::new(ask_interval.clone()),
            Box::new(steering.clone()),
            Box::new(attempts.clone()),
            Box::new(resets.clone()),
            Box::new(shared.clone()),
            Box::new(owner.clone()),
        ]
        .into_iter()
        .chain(shares.then(|| Box::new(alone.clone()) as Box<dyn prometheus::core::Collector>))
        {
            registry
                .register(collector)
                .expect("each family is registered once");
        }
        Self {
            rate,
            judgement,
            refused_ratio,
            processes,
            gates,
            paced_seconds,
            ask_interval,
            steering,
            attempts,
            resets,
            shared,
            owner,
            alone,
            class_rate,
            shed,
            unknown_classes,
        }
    }

    /// What `ask` says of its classes: the calls it shed and the classes
    /// this daemon does not know; and what the division gives each class.
    fn classes(&self, service: &str, entry: &Paced, classes: &ByClass, now: Instant) {
        let rates = entry.controller.class_rates_at(now);
        for ((class, shed), rate) in Criticality::ALL.iter().zip(classes.shed).zip(rates) {
            self.class_rate
                .with_label_values(&[service, class.name()])
                .set(rate);
            // Counted even at 0, so that a rate over the series sees the first calls shed.
            self.shed
                .with_label_values(&[service, class.name()])
                .inc_by(shed.min(1 << 40));
        }
        if !classes.unknown.is_empty() {
            tracing::debug!(
                service,
                classes = ?classes.unknown,
                "a process named classes of call this daemon does not know: left out"
            );
            self.unknown_classes
                .with_label_values(&[service])
                .inc_by(classes.unknown.len() as u64);
        }
    }

    /// Whether `service` is paced by a shared rate, and owned here; the
    /// time since `entry` was last looked at counted alone if it was alone.
    fn sharing(&self, service: &str, entry: &mut Paced, now: Instant) {
        let controller = &entry.controller;
        let shared = controller.is_shared_at(now);
        let (looked, was_shared) = entry.looked;
        if !was_shared {
            self.alone
                .with_label_values(&[service])
                .inc_by(now.saturating_duration_since(looked).as_secs_f64());
        }
        entry.looked = (now, shared);
        let flag = |on: bool| if on { 1.0 } else { 0.0 };
        self.shared.with_label_values(&[service]).set(flag(shared));
        self.owner
            .with_label_values(&[service])
            .set(flag(controller.is_owner()));
        self.rate
            .with_label_values(&[service])
            .set(controller.part_at(now));
    }

    /// What the rate law believes of `service` at `now`, the share refused
    /// it rests on, and what its processes' own gates believe: set when the
    /// families are encoded, not at every ask (counting the gates walks every
    /// process), as they change with time alone.
    fn judged(&self, service: &str, entry: &mut Paced, now: Instant) {
        let judged = entry.controller.judged_at(now);
        for judgement in Judgement::ALL {
            let flag = if judgement == judged.judgement { 1.0 } else { 0.0 };
            self.judgement
                .with_label_values(&[service, judgement.as_str()])
                .set(flag);
        }
        self.refused_ratio
            .with_label_values(&[service])
            .set(judged.refused_share);
        let (watching, on) = entry.controller.gates_at(now);
        self.gates.with_label_values(&[service, "on"]).set(on as f64);
        self.gates
            .with_label_values(&[service, "watching"])
            .set(watching as f64);
    }

    fn observe(&self, service: &str, entry: &Paced, ask: &PaceAsk, now: Instant) {
        self.rate
            .with_label_values(&[service])
            .set(entry.controller.part_at(now));
        self.processes
            .with_label_values(&[service])
            .set(entry.controller.members() as f64);
        self.paced_seconds
            .with_label_values(&[service])
            .set(now.saturating_duration_since(entry.since).as_secs_f64());
        self.ask_interval
            .with_label_values(&[service])
            .set(entry.controller.feedback().interval().as_secs_f64());
        self.steering
            .with_label_values(&[service])
            .set(if entry.controller.steers() { 1.0 } else { 0.0 });
        for (outcome, count) in [
            ("sent", ask.sent),
            ("accepted", ask.accepted),
            ("overloaded", ask.overloaded),
            ("timed_out", ask.timed_out),
        ] {
            self.attempts
                .with_label_values(&[service, outcome])
                .inc_by(count.min(1 << 40));
        }
    }

    fn forget(&self, service: &str) {
        for judgement in Judgement::ALL {
            let _ = self.judgement.remove_label_values(&[service, judgement.as_str()]);
        }
        for family in [
            &self.rate,
            &self.refused_ratio,
            &self.processes,
            &self.paced_seconds,
            &self.ask_interval,
            &self.steering,
            &self.shared,
            &self.owner,
        ] {
            let _ = family.remove_label_values(&[service]);
        }
        let _ = self.alone.remove_label_values(&[service]);
        let _ = self.unknown_classes.remove_label_values(&[service]);
        for class in Criticality::ALL {
            let _ = self.class_rate.remove_label_values(&[service, class.name()]);
            let _ = self.shed.remove_label_values(&[service, class.name()]);
        }
        for gate in ["on", "watching"] {
            let _ = self.gates.remove_label_values(&[service, gate]);
        }
        for outcome in ["sent", "accepted", "overloaded", "timed_out"] {
            let _ = self.attempts.remove_label_values(&[service, outcome]);
        }
        for setting in ["gate.enabled", "gate.overloadOn", "gate.overloadWhen"] {
            let _ = self.resets.remove_label_values(&[service, setting]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;
    use stormguard_core::fleet::IDLE;
    use stormguard_core::policy::RetryPolicy;

    /// A policy whose gate is `enabled` under `overloadWhen: any-refusal`.
    fn gated(enabled: bool) -> ValidPolicy {
        let mut policy = RetryPolicy::default();
        policy.gate.enabled = enabled;
        policy.gate.overload_when = stormguard_core::policy::OverloadWhen::AnyRefusal;
        ValidPolicy::try_from(policy).unwrap()
    }

    fn ask<'a>(service: &'a str, instance: &'a str) -> PaceAsk<'a> {
        PaceAsk {
            service: service.into(),
            instance: instance.into(),
            sent: 0,
            accepted: 0,
            overloaded: 1,
            timed_out: 0,
            waiting: 3,
            shed: Default::default(),
            demand: Default::default(),
            watching: false,
            gate_off: false,
            breaker: None,
        }
    }

    /// A policy whose breaker is fleet-scoped (1 s open, 2 trials at once,
    /// 2 to close) and whose gate is `gate`.
    fn fleet_breaker(gate: bool) -> ValidPolicy {
        let mut policy = RetryPolicy::default();
        policy.gate.enabled = gate;
        policy.circuit_breaker = stormguard_core::policy::CircuitBreakerPolicy {
            enabled: true,
            open_timeout: Duration::from_secs(1),
            half_open_max_calls: 2,
            success_threshold: 2,
            scope: stormguard_core::policy::BreakerScope::Fleet,
            ..Default::default()
        };
        ValidPolicy::try_from(policy).unwrap()
    }

    /// An ask from `instance` whose gate is off and whose breaker is open,
    /// with `succeeded` trials to report.
    fn broken<'a>(instance: &'a str, succeeded: u64) -> PaceAsk<'a> {
        PaceAsk {
            gate_off: true,
            breaker: Some(stormguard_core::wire::BreakerAsk {
                open: true,
                open_for_ms: 5_000,
                refused: 1,
                trials_succeeded: succeeded,
                trials_failed: 0,
            }),
            ..ask("payments", instance)
        }
    }

    #[test]
    fn a_reload_mid_outage_keeps_the_fleet_breakers_episode() {
        use stormguard_core::breaker::CircuitState;
        let (fleet, _registry) = scraped(false);
        let t0 = Instant::now();
        let first = fleet.ask(&broken("a", 0), &fleet_breaker(true), t0).unwrap();
        assert_eq!(first.breaker.unwrap().state, CircuitState::Open);
        // 600 ms into the outage the gate is turned off and openTimeout doubled.
        let mut reloaded = RetryPolicy::from(fleet_breaker(false));
        reloaded.circuit_breaker.open_timeout = Duration::from_secs(2);
        let later = fleet
            .ask(
                &broken("a", 0),
                &ValidPolicy::try_from(reloaded).unwrap(),
                t0 + Duration::from_millis(600),
            )
            .unwrap();
        let word = later.breaker.unwrap();
        assert_eq!(
            (word.state, word.retry_in_ms),
            (CircuitState::Open, 1400),
            "the same episode, half-open 2 s after it opened"
        );
    }

    #[test]
    fn open_fleet_scoped_breakers_share_the_trials_and_are_handed_to_the_pace_when_they_succeed() {
        use stormguard_core::breaker::CircuitState;
        let (fleet, registry) = scraped(false);
        let policy = fleet_breaker(true);
        let t0 = Instant::now();
        let first = fleet.ask(&broken("a", 0), &policy, t0).unwrap();
        let word = first.breaker.expect("the fleet breaker's word");
        assert_eq!((word.state, word.retry_in_ms), (CircuitState::Open, 1000));
        assert_eq!(
            (first.rate, first.pace),
            (0.0, false),
            "a breaker's ask is no gate's"
        );
        assert!(registry
            .text(t0)
            .contains("stormguard_fleet_breaker_state{service=\"payments\"} 2"));

        let due = t0 + Duration::from_secs(1);
        let slots: u32 = ["a", "b", "c"]
            .iter()
            .map(|p| {
                fleet
                    .ask(&broken(p, 0), &policy, due)
                    .unwrap()
                    .breaker
                    .unwrap()
                    .trials
            })
            .sum();
        assert_eq!(slots, 2, "halfOpenMaxCalls for the fleet");
        let again = fleet
            .ask(&broken("a", 1), &policy, due + Duration::from_millis(100))
            .unwrap();
        assert_eq!(
            again.breaker.unwrap().trials,
            0,
            "the half-open has had its two trials"
        );
        let closing = fleet
            .ask(&broken("b", 1), &policy, due + Duration::from_millis(100))
            .unwrap();
        assert_eq!(closing.breaker.unwrap().state, CircuitState::Closed);
        assert!(
            closing.pace && closing.rate > 0.0,
            "handed to the pace: {closing:?}"
        );
        let text = registry.text(due);
        assert!(
            text.contains("stormguard_fleet_breaker_state{service=\"payments\"} 0"),
            "{text}"
        );
        assert!(
            text.contains("stormguard_fleet_breaker_trial_slots_total{service=\"payments\"} 2"),
            "{text}"
        );
    }

    #[test]
    fn a_breakers_ask_is_answered_without_a_gate_only_when_the_breaker_is_fleet_scoped() {
        let (fleet, _registry) = scraped(false);
        let now = Instant::now();
        let alone = fleet.ask(&broken("a", 0), &fleet_breaker(false), now).unwrap();
        assert!(alone.breaker.is_some() && alone.rate == 0.0 && !alone.pace);
        let process_scoped = {
            let mut policy = RetryPolicy::default();
            policy.circuit_breaker.enabled = true;
            ValidPolicy::try_from(policy).unwrap()
        };
        assert!(matches!(
            fleet.ask(&broken("a", 0), &process_scoped, now),
            Err(Refused::GateOff(_))
        ));
        // An ask that has neither a gate's counts nor a breaker gets no share.
        let nothing = PaceAsk {
            gate_off: true,
            ..ask("payments", "b")
        };
        let none = fleet.ask(&nothing, &gated(true), now).unwrap();
        assert_eq!((none.rate, none.breaker, none.pace), (0.0, None, false));
        // With a gate, a process-scoped breaker's report is ignored: the gate is paced as ever.
        let paced = fleet.ask(&ask("payments", "a"), &gated(true), now).unwrap();
        assert!(paced.breaker.is_none() && paced.rate > 0.0);
    }

    /// A fleet whose families are in a registry of its own.
    fn scraped(shares: bool) -> (Arc<Fleet>, Registry) {
        let registry = Registry::new();
        let fleet = if shares {
            Fleet::sharing(&registry)
        } else {
            Fleet::new(&registry)
        };
        (fleet, registry)
    }

    #[test]
    fn time_paced_without_the_store_is_counted_alone() {
        let t0 = Instant::now();
        let alone = r#"stormguard_fleet_alone_seconds_total{service="inventory"}"#;
        let (fleet, registry) = scraped(false);
        fleet.ask(&ask("inventory", "pod-a"), &gated(true), t0).unwrap();
        assert!(!registry.text(t0).contains(alone), "no store, nothing to miss");
        let (sharing, sharing_registry) = scraped(true);
        sharing.ask(&ask("inventory", "pod-a"), &gated(true), t0).unwrap();
        sharing
            .ask(
                &ask("inventory", "pod-a"),
                &gated(true),
                t0 + Duration::from_secs(2),
            )
            .unwrap();
        let shown = sharing_registry.text(t0 + Duration::from_secs(3));
        assert!(shown.contains(&format!("{alone} 3")), "{shown}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_dependency_nobody_asks_about_is_no_longer_paced_nor_shared() {
        let (fleet, _registry) = scraped(true);
        fleet
            .ask(&ask("inventory", "pod-a"), &gated(true), Instant::now())
            .unwrap();
        assert_eq!(fleet.paced_services(), ["inventory"]);
        tokio::time::advance(stormguard_core::fleet::IDLE).await;
        assert!(fleet.paced_services().is_empty(), "nothing left to exchange");
        assert_eq!(fleet.paced(), 0);
    }

    #[test]
    fn a_dependency_nobody_asks_about_goes_with_its_series() {
        let (fleet, registry) = scraped(false);
        let t0 = Instant::now();
        fleet.ask(&ask("inventory", "pod-a"), &gated(true), t0).unwrap();
        assert_eq!(fleet.paced(), 1);
        assert!(registry
            .text(t0)
            .contains("stormguard_fleet_rate{service=\"inventory\"} 0.5"));
        let later = t0 + IDLE;
        let shown = registry.text(t0);
        assert!(shown.contains(r#"stormguard_fleet_judgement{judgement="down",service="inventory"} 1"#));
        assert!(!registry.text(later).contains("service=\"inventory\""));
        assert_eq!(fleet.paced(), 0);
    }

    /// `ask` from `instance` reporting `sent` attempts, a tenth refused.
    fn a_tenth_refused<'a>(service: &'a str, instance: &'a str, sent: u64) -> PaceAsk<'a> {
        PaceAsk {
            sent,
            accepted: sent - sent / 10,
            overloaded: sent / 10,
            ..ask(service, instance)
        }
    }

    #[test]
    fn metrics_and_status_say_what_paces_a_dependency_and_at_what_share_refused() {
        let mut most_refused = RetryPolicy::default();
        most_refused.gate.enabled = true;
        most_refused.gate.overload_when = stormguard_core::policy::OverloadWhen::MostRefused;
        let most_refused = ValidPolicy::try_from(most_refused).unwrap();
        let (fleet, registry) = scraped(false);
        let t0 = Instant::now();
        fleet.ask(&ask("search", "pod-a"), &most_refused, t0).unwrap();
        fleet.ask(&ask("inventory", "pod-a"), &gated(true), t0).unwrap();
        let mut now = t0;
        for _ in 0..20 {
            now += ASK_EVERY;
            fleet
                .ask(&a_tenth_refused("search", "pod-a", 20), &most_refused, now)
                .unwrap();
            fleet
                .ask(&a_tenth_refused("inventory", "pod-a", 20), &gated(true), now)
                .unwrap();
        }
        let shown = registry.text(now);
        for line in [
            r#"stormguard_fleet_judgement{judgement="failing_at_random",service="search"} 1"#,
            r#"stormguard_fleet_judgement{judgement="overloaded",service="search"} 0"#,
            r#"stormguard_fleet_judgement{judgement="overloaded",service="inventory"} 1"#,
            r#"stormguard_fleet_refused_ratio{service="search"} 0.1"#,
            r#"stormguard_fleet_refused_ratio{service="inventory"} 0.1"#,
        ] {
            assert!(shown.contains(line), "{line} in {shown}");
        }
        let status = fleet.status(now);
        let names: Vec<_> = status.iter().map(|paced| paced.service.as_str()).collect();
        assert_eq!(names, ["inventory", "search"]);
        let search = &status[1];
        assert_eq!(search.judgement, Judgement::FailingAtRandom);
        assert_eq!(search.overload_when, "most-refused");
        assert_eq!(search.processes, 1);
        assert!((0.09..0.11).contains(&search.refused_share), "{search:?}");
        assert_eq!(status[0].judgement, Judgement::Overloaded);
        assert_eq!(status[0].overload_when, "any-refusal");
        assert_eq!(search.shared, None, "no store, nothing shared");
    }

    #[test]
    fn what_each_process_judges_shows_beside_what_the_fleet_does() {
        let mut shipped = RetryPolicy::default();
        shipped.gate.enabled = true;
        let shipped = ValidPolicy::try_from(shipped).unwrap();
        let (fleet, registry) = scraped(false);
        let t0 = Instant::now();
        let watching = |instance| PaceAsk {
            watching: true,
            ..a_tenth_refused("search", instance, 20)
        };
        fleet.ask(&watching("pod-a"), &shipped, t0).unwrap();
        fleet.ask(&watching("pod-b"), &shipped, t0).unwrap();
        fleet.ask(&ask("search", "pod-c"), &shipped, t0).unwrap();
        let status = fleet.status(t0);
        assert_eq!((status[0].gates_watching, status[0].gates_on), (2, 1));
        assert_eq!(status[0].overload_when, "evidence");
        let shown = registry.text(t0);
        for line in [
            r#"stormguard_fleet_process_gates{gate="on",service="search"} 1"#,
            r#"stormguard_fleet_process_gates{gate="watching",service="search"} 2"#,
        ] {
            assert!(shown.contains(line), "{line} in {shown}");
        }
        let later = t0 + ASK_EVERY * 5;
        fleet.ask(&watching("pod-a"), &shipped, later).unwrap();
        let status = fleet.status(later);
        assert_eq!(
            (status[0].gates_watching, status[0].gates_on),
            (1, 0),
            "processes not heard from for three asks no longer count"
        );
    }

    #[test]
    fn a_policy_without_a_gate_is_not_paced() {
        let (fleet, _registry) = scraped(false);
        let refused = fleet.ask(&ask("payments", "pod-a"), &gated(false), Instant::now());
        assert_eq!(refused, Err(Refused::GateOff("payments".into())));
        assert_eq!(fleet.paced(), 0);
    }

    #[test]
    fn dependencies_past_the_cap_are_refused_until_one_goes() {
        let (fleet, _registry) = scraped(false);
        let t0 = Instant::now();
        let names: Vec<String> = (0..=MAX_DEPENDENCIES).map(|i| format!("dep-{i}")).collect();
        for name in &names[..MAX_DEPENDENCIES] {
            fleet.ask(&ask(name, "pod"), &gated(true), t0).unwrap();
        }
        let over = fleet.ask(&ask(&names[MAX_DEPENDENCIES], "pod"), &gated(true), t0);
        assert!(matches!(over, Err(Refused::Full(_))), "{over:?}");
        assert!(
            fleet.ask(&ask(&names[0], "pod"), &gated(true), t0).is_ok(),
            "a paced one still is"
        );
        let later = t0 + IDLE;
        assert!(fleet
            .ask(&ask(&names[MAX_DEPENDENCIES], "pod"), &gated(true), later)
            .is_ok());
    }

    /// Grows `fleet`'s rate for "inventory" past the probe rate by 100 ms
    /// after `t0`; the grant's rate.
    fn grown(fleet: &Fleet, policy: &ValidPolicy, t0: Instant) -> f64 {
        let mut busy = ask("inventory", "pod-a");
        fleet.ask(&busy, policy, t0).unwrap();
        busy.sent = 1;
        busy.accepted = 1;
        busy.overloaded = 0;
        let grown = fleet.ask(&busy, policy, t0 + Duration::from_millis(100)).unwrap();
        assert!(grown.rate > 2.0, "{grown:?}");
        grown.rate
    }

    #[test]
    fn a_reload_of_the_gates_rates_or_quiet_keeps_what_the_fleet_learned() {
        let t0 = Instant::now();
        let (reloaded, registry) = scraped(false);
        let (unchanged, _) = scraped(false);
        grown(&reloaded, &gated(true), t0);
        grown(&unchanged, &gated(true), t0);
        let mut changed = RetryPolicy::from(gated(true));
        changed.gate.quiet = Duration::from_secs(30);
        changed.gate.max_rate = 1_000.0;
        changed.per_try_timeout = Some(Duration::from_secs(2));
        changed.max_retries = 7;
        let at = t0 + Duration::from_millis(200);
        let kept = reloaded
            .ask(
                &ask("inventory", "pod-a"),
                &ValidPolicy::try_from(changed.clone()).unwrap(),
                at,
            )
            .unwrap();
        let same = unchanged
            .ask(&ask("inventory", "pod-a"), &gated(true), at)
            .unwrap();
        assert_eq!(kept, same, "the pace goes on as if nothing was reloaded");
        changed.gate.max_rate = 1.0;
        changed.gate.min_rate = 1.0;
        let bounded = reloaded
            .ask(
                &ask("inventory", "pod-a"),
                &ValidPolicy::try_from(changed).unwrap(),
                t0 + Duration::from_millis(300),
            )
            .unwrap();
        assert_eq!(bounded.rate, 1.0, "the new bounds hold at once");
        assert!(!registry
            .text(t0 + Duration::from_millis(300))
            .contains("stormguard_fleet_pace_resets_total{"));
    }

    #[test]
    fn a_reload_that_changes_what_says_overload_starts_afresh_and_says_so() {
        let (fleet, registry) = scraped(false);
        let t0 = Instant::now();
        grown(&fleet, &gated(true), t0);
        let mut changed = RetryPolicy::from(gated(true));
        changed.gate.overload_when = stormguard_core::policy::OverloadWhen::Evidence;
        let fresh = fleet
            .ask(
                &ask("inventory", "pod-a"),
                &ValidPolicy::try_from(changed).unwrap(),
                t0 + Duration::from_millis(200),
            )
            .unwrap();
        assert_eq!(fresh.rate, 0.5, "probing under the new setting");
        let text = registry.text(t0 + Duration::from_millis(200));
        assert!(
            text.contains(
                r#"stormguard_fleet_pace_resets_total{service="inventory",setting="gate.overloadWhen"} 1"#
            ),
            "{text}"
        );
    }
}
