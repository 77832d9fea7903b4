//! The daemon's side of fleet pacing: one [`FleetController`] per
//! dependency that processes ask about (`POST /v1/pace`), created at the
//! first ask and dropped once nobody has asked for
//! [`IDLE`](stormguard_core::fleet::IDLE), with the
//! families that show what it does.

use std::collections::HashMap;
use std::sync::Mutex;

use prometheus::{Encoder, GaugeVec, IntCounterVec, Opts, Registry, TextEncoder};
use stormguard_core::fleet::{FleetController, ASK_EVERY};
use stormguard_core::policy::{GatePolicy, ValidPolicy};
use stormguard_core::wire::{PaceAsk, PaceGrant};
use tokio::time::Instant;

/// Dependencies paced at once, at most.
pub const MAX_DEPENDENCIES: usize = 1000;
/// Processes paced per dependency, at most.
pub const MAX_PROCESSES: usize = 10_000;

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
    families: Families,
}

struct Paced {
    controller: FleetController<String>,
    gate: GatePolicy,
    since: Instant,
}

struct Families {
    registry: Registry,
    rate: GaugeVec,
    processes: GaugeVec,
    paced_seconds: GaugeVec,
    attempts: IntCounterVec,
}

impl Fleet {
    /// No dependency paced yet.
    pub fn new() -> Self {
        Self {
            paced: Mutex::default(),
            families: Families::new(),
        }
    }

    /// `ask` from a process, under its dependency's resolved `policy`, at `now`.
    pub fn ask(&self, ask: &PaceAsk, policy: &ValidPolicy, now: Instant) -> Result<PaceGrant, Refused> {
        if !policy.gate.enabled {
            return Err(Refused::GateOff(ask.service.to_string()));
        }
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
        if entry.gate != policy.gate {
            // The policy changed: learn again under the new settings.
            *entry = Paced::new(policy, now);
        }
        let instance = ask.instance.to_string();
        if !entry.controller.knows(&instance) && entry.controller.members() >= MAX_PROCESSES {
            return Err(Refused::Full(format!(
                "{MAX_PROCESSES} processes are paced for {} already; ask again later",
                ask.service
            )));
        }
        let tally = stormguard_core::gate::Tally {
            sent: ask.sent,
            accepted: ask.accepted,
            overloaded: ask.overloaded,
            timed_out: ask.timed_out,
            waiting: ask.waiting,
        };
        let grant = entry.controller.ask_at(instance, tally, now);
        self.families.observe(&ask.service, entry, ask, now);
        Ok(PaceGrant {
            rate: grant.rate,
            lease_ms: grant.lease.as_millis() as u64,
            ask_every_ms: ASK_EVERY.as_millis() as u64,
        })
    }

    /// Dependencies paced now.
    pub fn paced(&self) -> usize {
        self.lock().len()
    }

    /// The text exposition of the fleet families, after dropping idle dependencies.
    pub fn encode(&self, now: Instant) -> Vec<u8> {
        {
            let mut paced = self.lock();
            self.sweep(&mut paced, now);
            for (service, entry) in paced.iter() {
                self.families
                    .paced_seconds
                    .with_label_values(&[service])
                    .set(now.saturating_duration_since(entry.since).as_secs_f64());
            }
        }
        let mut out = Vec::new();
        TextEncoder::new()
            .encode(&self.families.registry.gather(), &mut out)
            .expect("encoding to a Vec cannot fail");
        out
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

impl Default for Fleet {
    fn default() -> Self {
        Self::new()
    }
}

impl Paced {
    fn new(policy: &ValidPolicy, now: Instant) -> Self {
        Self {
            controller: FleetController::new_at(policy, now),
            gate: policy.gate.clone(),
            since: now,
        }
    }
}

impl Families {
    fn new() -> Self {
        let registry = Registry::new();
        let gauge = |name: &str, help: &str| {
            GaugeVec::new(Opts::new(name, help), &["service"]).expect("valid metric")
        };
        let rate = gauge(
            "stormguard_fleet_rate",
            "Attempts per second the daemon lets the whole fleet send to a paced dependency.",
        );
        let processes = gauge(
            "stormguard_fleet_processes",
            "Processes whose send gate is on and that this daemon paces, per dependency.",
        );
        let paced_seconds = gauge(
            "stormguard_fleet_paced_seconds",
            "How long the dependency has been paced without a pause of 10 s: a dependency paced for long is not coming back.",
        );
        let attempts = IntCounterVec::new(
            Opts::new(
                "stormguard_fleet_attempts_total",
                "Attempts the paced processes report, by outcome: sent, accepted, overloaded (refused or timed out), timed_out (of those).",
            ),
            &["service", "outcome"],
        )
        .expect("valid metric");
        for collector in [
            Box::new(rate.clone()) as Box<dyn prometheus::core::Collector>,
            Box::new(processes.clone()),
            Box::new(paced_seconds.clone()),
            Box::new(attempts.clone()),
        ] {
            registry
                .register(collector)
                .expect("each family is registered once");
        }
        Self {
            registry,
            rate,
            processes,
            paced_seconds,
            attempts,
        }
    }

    fn observe(&self, service: &str, entry: &Paced, ask: &PaceAsk, now: Instant) {
        self.rate
            .with_label_values(&[service])
            .set(entry.controller.rate());
        self.processes
            .with_label_values(&[service])
            .set(entry.controller.members() as f64);
        self.paced_seconds
            .with_label_values(&[service])
            .set(now.saturating_duration_since(entry.since).as_secs_f64());
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
        for family in [&self.rate, &self.processes, &self.paced_seconds] {
            let _ = family.remove_label_values(&[service]);
        }
        for outcome in ["sent", "accepted", "overloaded", "timed_out"] {
            let _ = self.attempts.remove_label_values(&[service, outcome]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;
    use stormguard_core::fleet::IDLE;
    use stormguard_core::policy::RetryPolicy;

    fn gated(enabled: bool) -> ValidPolicy {
        let mut policy = RetryPolicy::default();
        policy.gate.enabled = enabled;
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
        }
    }

    fn exposition(fleet: &Fleet, now: Instant) -> String {
        String::from_utf8(fleet.encode(now)).unwrap()
    }

    #[test]
    fn a_dependency_nobody_asks_about_goes_with_its_series() {
        let fleet = Fleet::new();
        let t0 = Instant::now();
        fleet.ask(&ask("inventory", "pod-a"), &gated(true), t0).unwrap();
        assert_eq!(fleet.paced(), 1);
        assert!(exposition(&fleet, t0).contains("stormguard_fleet_rate{service=\"inventory\"} 0.5"));
        let later = t0 + IDLE;
        assert!(!exposition(&fleet, later).contains("service=\"inventory\""));
        assert_eq!(fleet.paced(), 0);
    }

    #[test]
    fn a_policy_without_a_gate_is_not_paced() {
        let fleet = Fleet::new();
        let refused = fleet.ask(&ask("payments", "pod-a"), &gated(false), Instant::now());
        assert_eq!(refused, Err(Refused::GateOff("payments".into())));
        assert_eq!(fleet.paced(), 0);
    }

    #[test]
    fn dependencies_past_the_cap_are_refused_until_one_goes() {
        let fleet = Fleet::new();
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

    #[test]
    fn a_policy_change_starts_the_dependency_afresh() {
        let fleet = Fleet::new();
        let t0 = Instant::now();
        let mut busy = ask("inventory", "pod-a");
        fleet.ask(&busy, &gated(true), t0).unwrap();
        busy.sent = 1;
        busy.accepted = 1;
        busy.overloaded = 0;
        let grown = fleet
            .ask(&busy, &gated(true), t0 + Duration::from_millis(100))
            .unwrap();
        assert!(grown.rate > 0.5, "{grown:?}");
        let mut changed = RetryPolicy::default();
        changed.gate.enabled = true;
        changed.gate.min_rate = 2.0;
        let fresh = fleet
            .ask(
                &ask("inventory", "pod-a"),
                &ValidPolicy::try_from(changed).unwrap(),
                t0 + Duration::from_millis(200),
            )
            .unwrap();
        assert_eq!(fresh.rate, 2.0, "probing at the new lowest rate");
    }
}
