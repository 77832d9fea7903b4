//! The retry strategies the simulator compares, each a [`RetryPolicy`] so
//! that it runs through the same `stormguard-core` code a client runs.

use std::fmt;
use std::time::Duration;

use stormguard_core::policy::limits::MAX_RETRIES;
use stormguard_core::policy::{
    BreakerScope, BudgetPolicy, BudgetScope, CircuitBreakerPolicy, GatePolicy, InvalidPolicy, Jitter,
    RetryPolicy, ValidPolicy,
};

/// A named strategy: the four of the thundering-herd comparison, and their kin.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Named {
    /// 1 ms between attempts, no backoff: the worst case.
    Constant,
    /// 100 ms × 2^attempt, capped at 10 s, no jitter.
    Exponential,
    /// A uniform draw from [0, exponential] (AWS).
    FullJitter,
    /// Half the exponential delay plus a uniform draw from the other half (AWS).
    EqualJitter,
    /// A uniform draw from [100 ms, 3 × previous delay], capped at 10 s (AWS).
    DecorrelatedJitter,
    /// The exponential delay × (1 ± 10 %), symmetric.
    ProportionalJitter,
    /// An explicit schedule, 0, 10, 10, 100, 100, 500, 500, 3000, 3000, 5000 ms, × (1 ± 50 %).
    Delays,
    /// Retry at once, no backoff (the clients of Brooker's collapse model).
    Immediate,
}

impl Named {
    /// The thundering-herd comparison's four, in its order.
    pub const SEED: [Named; 4] = [
        Named::Constant,
        Named::Exponential,
        Named::FullJitter,
        Named::DecorrelatedJitter,
    ];

    /// Every named strategy of the herd.
    pub const ALL: [Named; 7] = [
        Named::Constant,
        Named::Exponential,
        Named::FullJitter,
        Named::EqualJitter,
        Named::DecorrelatedJitter,
        Named::ProportionalJitter,
        Named::Delays,
    ];

    /// The name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Named::Constant => "constant",
            Named::Exponential => "exponential",
            Named::FullJitter => "full-jitter",
            Named::EqualJitter => "equal-jitter",
            Named::DecorrelatedJitter => "decorrelated-jitter",
            Named::ProportionalJitter => "proportional-jitter",
            Named::Delays => "delays",
            Named::Immediate => "immediate",
        }
    }

    /// The strategy as a policy that retries until success, as the herd's clients do.
    pub fn policy(self) -> RetryPolicy {
        let seed_backoff = |jitter| RetryPolicy {
            max_retries: u32::MAX,
            initial_delay: Duration::from_millis(100),
            max_delay: Duration::from_secs(10),
            multiplier: 2.0,
            jitter,
            budget: BudgetPolicy {
                enabled: false,
                ..BudgetPolicy::default()
            },
            ..RetryPolicy::default()
        };
        match self {
            Named::Constant => RetryPolicy {
                initial_delay: Duration::from_millis(1),
                max_delay: Duration::from_millis(1),
                multiplier: 1.0,
                ..seed_backoff(Jitter::None)
            },
            Named::Exponential => seed_backoff(Jitter::None),
            Named::FullJitter => seed_backoff(Jitter::Full),
            Named::EqualJitter => seed_backoff(Jitter::Equal),
            Named::DecorrelatedJitter => seed_backoff(Jitter::Decorrelated),
            Named::ProportionalJitter => RetryPolicy {
                jitter_factor: 0.1,
                ..seed_backoff(Jitter::Proportional)
            },
            Named::Immediate => RetryPolicy {
                initial_delay: Duration::ZERO,
                max_delay: Duration::ZERO,
                multiplier: 1.0,
                ..seed_backoff(Jitter::None)
            },
            Named::Delays => RetryPolicy {
                delays: [0, 10, 10, 100, 100, 500, 500, 3000, 3000, 5000]
                    .map(Duration::from_millis)
                    .to_vec(),
                jitter_factor: 0.5,
                ..seed_backoff(Jitter::Proportional)
            },
        }
    }
}

/// A strategy to simulate: a label and the policy every client applies.
#[derive(Debug, Clone, PartialEq)]
pub struct Strategy {
    /// What reports call it, e.g. `full-jitter+budget`.
    pub label: String,
    /// The policy, as a client would receive it from the daemon.
    pub policy: ValidPolicy,
    /// Retries before a client gives up: the policy's, or more than a policy
    /// file may set (the herd's clients retry until they succeed).
    pub max_retries: u32,
    /// Whether the processes' gates are paced by the daemon's fleet controller.
    pub fleet: bool,
    /// Whether the budget's floor is the fleet's (`budget.scope: fleet`,
    /// or `--fleet-budget`), divided among the processes by the daemon.
    pub fleet_budget: bool,
    /// Whether the breakers' trials are the fleet's (`circuitBreaker.scope:
    /// fleet`, or `--fleet-breaker`), granted by the daemon.
    pub fleet_breaker: bool,
}

/// Changes applied on top of a strategy: the library's budget and breaker, a retry cap.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Modifiers {
    /// Turn on the retry budget (default settings) if the policy has none.
    pub budget: bool,
    /// Turn on the circuit breaker (default settings) if the policy has none.
    pub breaker: bool,
    /// Turn on the send gate (default settings) if the policy has none.
    pub gate: bool,
    /// Turn on the send gate as `gate` does, and coordinate the gates of
    /// every process through the (simulated) daemon.
    pub fleet: bool,
    /// A policy's own send gate paces its process alone, as callers that
    /// never ask the daemon for pace do; else it paces through the daemon
    /// (see [`deployed`](super::deployed)).
    pub gates_alone: bool,
    /// Turn on the retry budget as `budget` does, with its floor the
    /// fleet's: divided among the processes by the (simulated) daemon.
    pub fleet_budget: bool,
    /// Turn on the circuit breaker as `breaker` does, its half-open the
    /// fleet's: trials granted by the (simulated) daemon.
    pub fleet_breaker: bool,
    /// Give up after this many retries.
    pub max_retries: Option<u32>,
    /// Time each attempt out after this long.
    pub per_try_timeout: Option<Duration>,
}

impl Strategy {
    /// A named strategy with `modifiers`.
    pub fn named(named: Named, modifiers: Modifiers) -> Self {
        Self::from_policy(named.name(), named.policy(), modifiers)
            .expect("the named strategies, with the library's default budget and breaker, are valid")
    }

    /// Any policy (a service's, resolved from a policy file) with
    /// `modifiers`; the policy is checked as a client checks it, except that
    /// it may retry more often than a file allows.
    pub fn from_policy(
        label: &str,
        mut policy: RetryPolicy,
        modifiers: Modifiers,
    ) -> Result<Self, InvalidPolicy> {
        let mut label = label.to_string();
        if (modifiers.budget || modifiers.fleet_budget) && !policy.budget.enabled {
            policy.budget = BudgetPolicy {
                enabled: true,
                ..BudgetPolicy::default()
            };
            if !modifiers.fleet_budget {
                label.push_str("+budget");
            }
        }
        if modifiers.fleet_budget {
            policy.budget.scope = BudgetScope::Fleet;
            label.push_str("+fleet-budget");
        }
        if (modifiers.breaker || modifiers.fleet_breaker) && !policy.circuit_breaker.enabled {
            policy.circuit_breaker = CircuitBreakerPolicy {
                enabled: true,
                ..CircuitBreakerPolicy::default()
            };
            if !modifiers.fleet_breaker {
                label.push_str("+breaker");
            }
        }
        if modifiers.fleet_breaker {
            policy.circuit_breaker.scope = BreakerScope::Fleet;
            label.push_str("+fleet-breaker");
        }
        if (modifiers.gate || modifiers.fleet) && !policy.gate.enabled {
            policy.gate = GatePolicy {
                enabled: true,
                ..GatePolicy::default()
            };
            if !modifiers.fleet {
                label.push_str("+gate");
            }
        }
        if modifiers.fleet {
            label.push_str("+fleet");
        }
        if let Some(timeout) = modifiers.per_try_timeout {
            policy.per_try_timeout = Some(timeout);
        }
        if let Some(max) = modifiers.max_retries {
            policy.max_retries = max;
            label.push_str(&format!("+max{max}"));
        }
        let max_retries = policy.max_retries;
        policy.max_retries = max_retries.min(MAX_RETRIES.high);
        let fleet_budget = policy.budget.enabled && policy.budget.scope == BudgetScope::Fleet;
        let fleet_breaker =
            policy.circuit_breaker.enabled && policy.circuit_breaker.scope == BreakerScope::Fleet;
        Ok(Self {
            label,
            policy: policy.try_into()?,
            max_retries,
            fleet: modifiers.fleet,
            fleet_budget,
            fleet_breaker,
        })
    }
}

impl fmt::Display for Strategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.label)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::SmallRng;
    use rand::SeedableRng;
    use stormguard_core::backoff::Backoff;

    #[test]
    fn the_seed_strategies_have_the_seed_delays() {
        let delays = |named: Named| {
            let rng = &mut SmallRng::seed_from_u64(1);
            let backoff = Backoff::from_policy(&named.policy());
            (0..9)
                .map(|a| backoff.delay(a, Duration::ZERO, rng).as_millis())
                .collect::<Vec<_>>()
        };
        assert_eq!(delays(Named::Constant), [1; 9]);
        assert_eq!(
            delays(Named::Exponential),
            [100, 200, 400, 800, 1600, 3200, 6400, 10_000, 10_000]
        );
        assert!(delays(Named::FullJitter)
            .iter()
            .zip(delays(Named::Exponential))
            .all(|(j, e)| *j <= e));
        let seed_001 = delays(Named::Delays);
        assert_eq!(seed_001[0], 0);
        assert!(
            (50..=150).contains(&seed_001[3]),
            "100 ms ± 50 %: {}",
            seed_001[3]
        );
    }

    #[test]
    fn modifiers_turn_blocks_on_and_name_them() {
        let s = Strategy::named(
            Named::FullJitter,
            Modifiers {
                budget: true,
                breaker: true,
                gate: true,
                max_retries: Some(5),
                ..Modifiers::default()
            },
        );
        assert_eq!(s.label, "full-jitter+budget+breaker+gate+max5");
        assert!(s.policy.gate.enabled && !s.fleet);
        let fleet = Strategy::named(
            Named::FullJitter,
            Modifiers {
                fleet: true,
                ..Modifiers::default()
            },
        );
        assert_eq!(fleet.label, "full-jitter+fleet");
        assert!(fleet.policy.gate.enabled && fleet.fleet);
        assert!(s.policy.budget.enabled && s.policy.circuit_breaker.enabled);
        assert_eq!(s.max_retries, 5);
        for named in Named::ALL {
            let until_success = Strategy::named(named, Modifiers::default());
            assert_eq!(until_success.max_retries, u32::MAX, "{}", named.name());
        }
    }
}
