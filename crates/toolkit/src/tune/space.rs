//! The settings `tune` searches, and the steps it takes through them.
//!
//! Every value comes from a ladder of round figures (delays of 100ms, 150ms,
//! 200ms, …), so that a recommendation reads as a person would write it and
//! a step is one rung up or down.

use std::time::Duration;

use stormguard_core::policy::{limits, BudgetPolicy, GatePolicy, Jitter, RetryPolicy};

/// Delays the search tries, from 10 ms to 2 minutes.
const DELAYS_MS: [u64; 30] = [
    10, 20, 30, 50, 70, 100, 150, 200, 300, 500, 700, 1_000, 1_500, 2_000, 3_000, 4_000, 5_000, 6_000, 8_000,
    10_000, 12_000, 15_000, 20_000, 25_000, 30_000, 40_000, 50_000, 60_000, 90_000, 120_000,
];
/// Growth factors of the exponential schedule.
const MULTIPLIERS: [f64; 5] = [1.5, 2.0, 2.5, 3.0, 4.0];
/// The most retries a policy may ask for.
const MAX_RETRIES: u32 = limits::MAX_RETRIES.high;
/// Retry counts, up to what a policy file allows.
const RETRIES: [u32; 11] = [1, 2, 3, 5, 8, 10, 15, 20, 30, 50, MAX_RETRIES];
/// The jitters worth recommending: a schedule without jitter, or with a
/// proportional one, keeps a herd in step (the AWS Architecture Blog's
/// "Exponential Backoff and Jitter").
const JITTERS: [Jitter; 3] = [Jitter::Full, Jitter::Equal, Jitter::Decorrelated];

/// The coarse grid's initial delays, caps and multipliers.
const GRID_INITIAL_MS: [u64; 7] = [100, 300, 500, 1_000, 2_000, 3_000, 5_000];
const GRID_MAX_MS: [u64; 6] = [2_000, 5_000, 8_000, 12_000, 20_000, 40_000];
const GRID_MULTIPLIERS: [f64; 2] = [2.0, 3.0];

/// A point of the search: the backoff, how long to keep trying, and which
/// of the library's guards to use. The rest of a policy (timeouts, what is
/// retried, the breaker, hedging) stays the service's own.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Knobs {
    /// How each delay is drawn.
    pub jitter: Jitter,
    /// The first delay, and the base of the schedule.
    pub initial_delay: Duration,
    /// The cap on any delay.
    pub max_delay: Duration,
    /// Growth per attempt (decorrelated jitter draws from three times the
    /// last delay instead, and ignores it).
    pub multiplier: f64,
    /// Retries after the first attempt.
    pub max_retries: u32,
    /// Deadline for all attempts together; `None` for none.
    pub max_elapsed: Option<Duration>,
    /// Whether the retry budget is on.
    pub budget: bool,
    /// Whether the send gate is on.
    pub gate: bool,
}

impl Knobs {
    /// The knobs of `policy`, with its retries capped at what a file allows.
    pub fn of(policy: &RetryPolicy) -> Self {
        Self {
            jitter: policy.jitter,
            initial_delay: policy.initial_delay,
            max_delay: policy.max_delay,
            multiplier: policy.multiplier,
            max_retries: policy.max_retries.min(MAX_RETRIES),
            max_elapsed: policy.max_elapsed,
            budget: policy.budget.enabled,
            gate: policy.gate.enabled,
        }
    }

    /// `base` with these knobs; an explicit delay schedule gives way to the
    /// exponential one they describe. A budget or gate turned on keeps
    /// `base`'s settings for it.
    pub fn apply(&self, base: &RetryPolicy) -> RetryPolicy {
        RetryPolicy {
            jitter: self.jitter,
            initial_delay: self.initial_delay,
            max_delay: self.max_delay,
            multiplier: self.multiplier,
            delays: Vec::new(),
            max_retries: self.max_retries,
            max_elapsed: self.max_elapsed,
            budget: BudgetPolicy {
                enabled: self.budget,
                ..base.budget.clone()
            },
            gate: GatePolicy {
                enabled: self.gate,
                ..base.gate.clone()
            },
            ..base.clone()
        }
    }

    /// A key that tells candidates apart, for the search's memory.
    pub fn key(&self) -> [u64; 8] {
        [
            self.jitter as u64,
            self.initial_delay.as_millis() as u64,
            self.max_delay.as_millis() as u64,
            self.multiplier.to_bits(),
            u64::from(self.max_retries),
            self.max_elapsed.map_or(0, |d| d.as_millis() as u64 + 1),
            u64::from(self.budget),
            u64::from(self.gate),
        ]
    }
}

/// The coarse grid around `base`: every jitter worth recommending, initial
/// delays from 100ms to 4s, caps from 2s to 40s, multipliers 2 and 3; each
/// with `base`'s retries and deadline, and with as many retries as a file
/// allows and no deadline (a policy that gives up before a long outage ends
/// only adds load to it). Budget and gate as `base` has them.
pub fn grid(base: &Knobs) -> Vec<Knobs> {
    let mut tries = vec![(base.max_retries, base.max_elapsed)];
    if tries[0] != (MAX_RETRIES, None) {
        tries.push((MAX_RETRIES, None));
    }
    let mut out = Vec::new();
    for jitter in JITTERS {
        let multipliers: &[f64] = if jitter == Jitter::Decorrelated {
            std::slice::from_ref(&base.multiplier)
        } else {
            &GRID_MULTIPLIERS
        };
        for initial in GRID_INITIAL_MS.map(Duration::from_millis) {
            for max in GRID_MAX_MS.map(Duration::from_millis) {
                if max < initial {
                    continue;
                }
                for &multiplier in multipliers {
                    for &(max_retries, max_elapsed) in &tries {
                        out.push(Knobs {
                            jitter,
                            initial_delay: initial,
                            max_delay: max,
                            multiplier,
                            max_retries,
                            max_elapsed,
                            ..*base
                        });
                    }
                }
            }
        }
    }
    out
}

/// The candidates one step from `k`: each delay one rung up and down, and
/// both together (the whole schedule slower or faster), the multiplier and
/// the retries one rung, the other jitters, the deadline one rung (or
/// none), the budget and (if `gate` allows) the gate flipped.
pub fn neighbours(k: &Knobs, gate: bool) -> Vec<Knobs> {
    let delays = DELAYS_MS.map(Duration::from_millis);
    let mut out = Vec::new();
    for (initial_delay, max_delay) in steps(&delays, k.initial_delay)
        .into_iter()
        .zip(steps(&delays, k.max_delay))
    {
        out.push(Knobs {
            initial_delay,
            max_delay,
            ..*k
        });
    }
    for initial_delay in steps(&delays, k.initial_delay) {
        out.push(Knobs { initial_delay, ..*k });
    }
    for max_delay in steps(&delays, k.max_delay) {
        out.push(Knobs { max_delay, ..*k });
    }
    if k.jitter != Jitter::Decorrelated {
        for multiplier in steps(&MULTIPLIERS, k.multiplier) {
            out.push(Knobs { multiplier, ..*k });
        }
    }
    for max_retries in steps(&RETRIES, k.max_retries) {
        out.push(Knobs { max_retries, ..*k });
    }
    for jitter in JITTERS.into_iter().filter(|j| *j != k.jitter) {
        out.push(Knobs { jitter, ..*k });
    }
    match k.max_elapsed {
        None => out.push(Knobs {
            max_elapsed: Some(*delays.last().expect("a ladder has rungs")),
            ..*k
        }),
        Some(d) => {
            out.push(Knobs {
                max_elapsed: None,
                ..*k
            });
            for step in steps(&delays, d) {
                out.push(Knobs {
                    max_elapsed: Some(step),
                    ..*k
                });
            }
        }
    }
    out.push(Knobs {
        budget: !k.budget,
        ..*k
    });
    if gate || k.gate {
        out.push(Knobs { gate: !k.gate, ..*k });
    }
    out
}

/// The rungs of `ladder` just below and just above `value` (which need not
/// be on it).
fn steps<T: Copy + PartialOrd>(ladder: &[T], value: T) -> Vec<T> {
    let below = ladder.iter().rev().find(|&&v| v < value);
    let above = ladder.iter().find(|&&v| v > value);
    below.into_iter().chain(above).copied().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn herd() -> Knobs {
        Knobs::of(&crate::sim::Named::FullJitter.policy())
    }

    #[test]
    fn a_step_is_one_rung_either_way_even_off_the_ladder() {
        assert_eq!(steps(&RETRIES, 10), vec![8, 15]);
        assert_eq!(steps(&RETRIES, 4), vec![3, 5]);
        assert_eq!(steps(&RETRIES, MAX_RETRIES), vec![50]);
        assert_eq!(steps(&MULTIPLIERS, 1.0), vec![1.5]);
    }

    #[test]
    fn the_herd_policy_is_read_with_the_retries_a_file_allows() {
        let k = herd();
        assert_eq!(k.max_retries, MAX_RETRIES);
        assert_eq!(
            (k.jitter, k.initial_delay),
            (Jitter::Full, Duration::from_millis(100))
        );
    }

    #[test]
    fn the_grid_covers_every_jitter_and_no_cap_below_its_initial_delay() {
        let grid = grid(&herd());
        for jitter in JITTERS {
            assert!(grid.iter().any(|k| k.jitter == jitter));
        }
        assert!(grid.iter().all(|k| k.max_delay >= k.initial_delay));
        assert!(grid
            .iter()
            .all(|k| k.max_retries == MAX_RETRIES && k.max_elapsed.is_none()));
        let keys: std::collections::HashSet<_> = grid.iter().map(Knobs::key).collect();
        assert_eq!(keys.len(), grid.len(), "no candidate twice");
    }

    #[test]
    fn a_policy_that_gives_up_early_is_also_tried_without_its_limits() {
        let shipped = Knobs {
            max_retries: 3,
            max_elapsed: Some(Duration::from_secs(2)),
            ..herd()
        };
        let grid = grid(&shipped);
        assert!(grid.iter().any(|k| k.max_retries == 3 && k.max_elapsed.is_some()));
        assert!(grid
            .iter()
            .any(|k| k.max_retries == MAX_RETRIES && k.max_elapsed.is_none()));
    }

    #[test]
    fn neighbours_flip_the_gate_only_when_allowed_or_already_on() {
        let k = herd();
        assert!(!neighbours(&k, false).iter().any(|n| n.gate));
        assert!(neighbours(&k, true).iter().any(|n| n.gate));
        let gated = Knobs { gate: true, ..k };
        assert!(neighbours(&gated, false).iter().any(|n| !n.gate));
    }

    #[test]
    fn applying_knobs_replaces_an_explicit_schedule_and_keeps_the_rest() {
        let base = crate::sim::Named::Delays.policy();
        let k = Knobs::of(&base);
        let applied = k.apply(&base);
        assert!(applied.delays.is_empty());
        assert_eq!(applied.jitter_factor, base.jitter_factor);
        assert_eq!(applied.per_try_timeout, base.per_try_timeout);
    }
}
