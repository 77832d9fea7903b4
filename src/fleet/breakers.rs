//! The daemon's side of fleet half-open: one [`FleetBreaker`] per
//! dependency whose policy says `circuitBreaker.scope: fleet` and whose
//! processes report an open breaker in their pace asks, with the families
//! that show it. With a shared store the replicas share one episode per
//! dependency through it (`super::sharing`), and the fleet's trials are
//! `halfOpenMaxCalls` however many replicas there are. Without one each
//! replica keeps its own, for the processes that ask it: a fleet spread
//! over R replicas then sends up to R × `halfOpenMaxCalls` trials at once.

use std::collections::HashMap;
use std::sync::Mutex;

use prometheus::{IntCounterVec, IntGaugeVec, Opts, Registry};
use stormguard_core::fleet::breaker::episode::{EpisodeAnswer, Share};
use stormguard_core::fleet::breaker::{BreakerVerdict, FleetBreaker};
use stormguard_core::fleet::IDLE;
use stormguard_core::policy::{BreakerScope, CircuitBreakerPolicy, ValidPolicy};
use stormguard_core::wire::PaceAsk;
use tokio::time::Instant;

use super::capacity::MAX_DEPENDENCIES;

/// Every dependency whose fleet-scoped breakers have asked lately.
pub struct FleetBreakers {
    breakers: Mutex<HashMap<String, Entry>>,
    state: IntGaugeVec,
    slots: IntCounterVec,
}

struct Entry {
    breaker: FleetBreaker<String>,
    /// The block it runs under: a reload that changes it, or turns the
    /// gate on or off, retunes the breaker and keeps its episode.
    policy: CircuitBreakerPolicy,
    paced: bool,
}

impl FleetBreakers {
    /// None yet; their families registered in `registry`.
    pub fn new(registry: &Registry) -> Self {
        let state = IntGaugeVec::new(
            Opts::new(
                "stormguard_fleet_breaker_state",
                "The fleet's circuit breaker for a dependency whose breakers are fleet-scoped, as this replica keeps it: 0 closed, 1 half-open (trial slots out), 2 open. It goes to 0 when the fleet's trials succeed and every breaker is told to close.",
            ),
            &["service"],
        )
        .expect("valid metric");
        let slots = IntCounterVec::new(
            Opts::new(
                "stormguard_fleet_breaker_trial_slots_total",
                "Trial slots this replica granted a dependency's fleet-scoped breakers while half-open: at most halfOpenMaxCalls out at once for the whole fleet.",
            ),
            &["service"],
        )
        .expect("valid metric");
        registry
            .register(Box::new(state.clone()))
            .expect("registered once");
        registry
            .register(Box::new(slots.clone()))
            .expect("registered once");
        Self {
            breakers: Mutex::default(),
            state,
            slots,
        }
    }

    /// The fleet breaker's word on `ask`'s breaker, under its dependency's
    /// resolved `policy`, at `now`: `None` if the ask reports no breaker,
    /// the policy's breaker is not fleet-scoped, or too many dependencies
    /// have one already (the process then decides alone, as without a daemon).
    pub fn ask(&self, ask: &PaceAsk, policy: &ValidPolicy, now: Instant) -> Option<BreakerVerdict> {
        let report = ask.breaker?;
        let block = &policy.circuit_breaker;
        if !block.enabled || block.scope != BreakerScope::Fleet {
            return None;
        }
        let mut breakers = self.lock();
        breakers.retain(|service, entry| {
            let idle = entry.breaker.is_idle_at(now, IDLE);
            if idle {
                let _ = self.state.remove_label_values(&[service]);
            }
            !idle
        });
        if !breakers.contains_key(ask.service.as_ref()) && breakers.len() >= MAX_DEPENDENCIES {
            return None;
        }
        let paced = policy.gate.enabled;
        let entry = breakers
            .entry(ask.service.to_string())
            .or_insert_with(|| Entry::new(block, paced, now));
        if entry.policy != *block || entry.paced != paced {
            // A reload: the episode goes on under the new rules.
            entry.breaker.retune(block, paced);
            entry.policy = block.clone();
            entry.paced = paced;
        }
        let before = entry.breaker.slots_granted();
        let verdict = entry.breaker.ask_at(ask.instance.to_string(), report.into(), now);
        let granted = entry.breaker.slots_granted() - before;
        self.slots.with_label_values(&[&ask.service]).inc_by(granted);
        self.show_state(&ask.service, entry);
        Some(verdict)
    }

    /// What each dependency's fleet breaker tells the store at `now`, if
    /// anything.
    pub fn shares_at(&self, now: Instant) -> Vec<(String, Share)> {
        let mut breakers = self.lock();
        breakers
            .iter_mut()
            .filter_map(|(service, entry)| Some((service.clone(), entry.breaker.share_at(now)?)))
            .collect()
    }

    /// The store's `answer` to `service`'s share, at `now`.
    pub fn adopt_at(&self, service: &str, answer: &EpisodeAnswer, now: Instant) {
        if let Some(entry) = self.lock().get_mut(service) {
            entry.breaker.adopt_at(answer, now);
            self.show_state(service, entry);
        }
    }

    /// `service`'s `share`, made at `now`, never reached the store: it
    /// goes with the next.
    pub fn unshare(&self, service: &str, share: &Share, now: Instant) {
        if let Some(entry) = self.lock().get_mut(service) {
            entry.breaker.unshare(share, now);
        }
    }

    /// Sets `service`'s state gauge to its fleet breaker's state.
    fn show_state(&self, service: &str, entry: &Entry) {
        self.state
            .with_label_values(&[service])
            .set(i64::from(entry.breaker.state().as_metric()));
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Entry>> {
        self.breakers
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl Entry {
    fn new(policy: &CircuitBreakerPolicy, paced: bool, now: Instant) -> Self {
        Self {
            breaker: FleetBreaker::new_at(policy, paced, now),
            policy: policy.clone(),
            paced,
        }
    }
}
