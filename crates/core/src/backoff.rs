//! How long to wait before a retry: pure functions of (backoff settings,
//! attempt number, previous delay, random source).
//!
//! A [`Backoff`] is data and holds no state: the caller owns the attempt
//! counter, so it can reset it, share the settings between tasks,
//! and reason about its own loop. The retry loop, the simulator and the
//! linter all compute delays here, so there is one formula for each strategy.
//!
//! Every result lies in `[0, max]` for every attempt number up to
//! `u32::MAX`: growth saturates at the cap, nothing overflows, goes negative
//! or panics, and zero or nanosecond delays work. Draws are made in whole
//! nanoseconds, so a 1 ns delay is jittered exactly.
//!
//! ```
//! use std::time::Duration;
//! use rand::{rngs::SmallRng, SeedableRng};
//! use stormguard_core::backoff::Backoff;
//! use stormguard_core::policy::{Jitter, RetryPolicy};
//!
//! let backoff = Backoff::from_policy(&RetryPolicy { jitter: Jitter::Full, ..RetryPolicy::default() });
//! let mut rng = SmallRng::seed_from_u64(7);
//! // The caller's own loop: the attempt counter and the previous delay are plain values.
//! let (mut attempt, mut previous) = (0, Duration::ZERO);
//! for _ in 0..3 {
//!     let delay = backoff.delay(attempt, previous, &mut rng);
//!     assert!(delay <= backoff.base(attempt));
//!     (attempt, previous) = (attempt + 1, delay);
//! }
//! // An out-of-band signal says the server is back: reset, start over.
//! (attempt, previous) = (0, Duration::ZERO);
//! assert!(backoff.delay(attempt, previous, &mut rng) <= Duration::from_millis(100));
//! ```

use std::time::Duration;

use rand::Rng;

use crate::policy::{Jitter, RetryPolicy};

/// The backoff settings of a policy: a schedule of base delays, a cap, and jitter.
#[derive(Debug, Clone, PartialEq)]
pub struct Backoff {
    /// The first base delay, and the floor of decorrelated jitter.
    pub initial: Duration,
    /// The cap on every delay.
    pub max: Duration,
    /// Growth of the base delay per attempt; 1 keeps it constant.
    pub multiplier: f64,
    /// How each base delay is randomised.
    pub jitter: Jitter,
    /// Spread of proportional jitter, in [0, 1].
    pub jitter_factor: f64,
    /// An explicit schedule replacing the exponential one when non-empty;
    /// attempts past its end reuse its last entry.
    pub delays: Vec<Duration>,
}

impl Backoff {
    /// The backoff settings of `policy`.
    pub fn from_policy(policy: &RetryPolicy) -> Self {
        Self {
            initial: policy.initial_delay,
            max: policy.max_delay,
            multiplier: policy.multiplier,
            jitter: policy.jitter,
            jitter_factor: policy.jitter_factor,
            delays: policy.delays.clone(),
        }
    }

    /// The base delay before retry `attempt` (0 = the first retry), before
    /// jitter: the explicit schedule's entry, or `initial × multiplier^attempt`,
    /// capped at `max`.
    pub fn base(&self, attempt: u32) -> Duration {
        Duration::from_nanos(self.base_nanos(attempt))
    }

    /// The delay before retry `attempt`, given the delay before the previous
    /// retry (`Duration::ZERO` before the first), drawing from `rng`.
    pub fn delay<R: Rng + ?Sized>(&self, attempt: u32, previous: Duration, rng: &mut R) -> Duration {
        let drawn = match self.jitter {
            Jitter::None => self.base_nanos(attempt),
            Jitter::Full => uniform(rng, 0, self.base_nanos(attempt)),
            Jitter::Equal => {
                let base = self.base_nanos(attempt);
                let half = base / 2;
                half + uniform(rng, 0, base - half)
            }
            Jitter::Proportional => proportional(self.base_nanos(attempt), self.jitter_factor, rng),
            Jitter::Decorrelated => decorrelated(nanos(self.initial), nanos(previous), rng),
        };
        // Computed in whole nanoseconds: one conversion back to a Duration.
        Duration::from_nanos(drawn.min(nanos(self.max)))
    }

    /// The longest the delay before retry `attempt` can be, when the
    /// previous one was `previous`: the top of [`delay`](Self::delay)'s draw.
    pub fn longest(&self, attempt: u32, previous: Duration) -> Duration {
        let high = match self.jitter {
            Jitter::None | Jitter::Full | Jitter::Equal => self.base_nanos(attempt),
            Jitter::Proportional => {
                let base = self.base_nanos(attempt);
                base.saturating_add(spread(base, self.jitter_factor))
            }
            Jitter::Decorrelated => nanos(previous).max(nanos(self.initial)).saturating_mul(3),
        };
        Duration::from_nanos(high.min(nanos(self.max)))
    }

    /// The most the waits before `retries` retries can add up to: how long
    /// a caller can keep retrying, its attempts aside.
    pub fn longest_total(&self, retries: u32) -> Duration {
        // A schedule still growing after this many retries is all but flat.
        const GROWING: u32 = 10_000;
        let mut total = Duration::ZERO;
        let mut previous = Duration::ZERO;
        for attempt in 0..retries {
            let wait = self.longest(attempt, previous);
            if (attempt > 0 && wait == previous) || attempt == GROWING {
                // Every later wait is this one: the cap, a constant schedule,
                // or an explicit one past its end.
                return total.saturating_add(wait.saturating_mul(retries - attempt));
            }
            total = total.saturating_add(wait);
            previous = wait;
        }
        total
    }

    /// [`base`](Self::base) in nanoseconds.
    #[inline]
    fn base_nanos(&self, attempt: u32) -> u64 {
        let max = nanos(self.max);
        let base = match self.delays.as_slice() {
            [] => exponential(nanos(self.initial), self.multiplier, attempt, max),
            delays => nanos(delays[(attempt as usize).min(delays.len() - 1)]),
        };
        base.min(max)
    }
}

/// A duration in whole nanoseconds, saturating at `u64::MAX` (584 years).
#[inline]
fn nanos(d: Duration) -> u64 {
    d.as_secs()
        .checked_mul(1_000_000_000)
        .and_then(|n| n.checked_add(u64::from(d.subsec_nanos())))
        .unwrap_or(u64::MAX)
}

/// `initial × multiplier^attempt` nanoseconds, or `max` once that reaches it.
#[inline]
fn exponential(initial: u64, multiplier: f64, attempt: u32, max: u64) -> u64 {
    if initial == 0 {
        return 0;
    }
    // Squaring inline is several times faster than powf's or powi's library
    // calls; past 1024 attempts only a multiplier within 1e-3 of 1 is still
    // under any cap.
    let growth = if attempt <= 1024 {
        power(multiplier, attempt)
    } else if multiplier == 1.0 {
        1.0
    } else {
        multiplier.powf(f64::from(attempt))
    };
    let grown = initial as f64 * growth;
    // +inf (huge attempts) and NaN compare as not less: both saturate at the cap.
    if grown < max as f64 {
        grown as u64
    } else {
        max
    }
}

/// A draw from `[low, high]` by one 64×64-bit multiply: Lemire's method
/// without its rejection step, whose bias (each value's chance off by at
/// most `(high - low) / 2^64`, under 10^-9 for any delay below 200 days) is
/// far below anything a retry schedule could show.
#[inline]
fn uniform<R: Rng + ?Sized>(rng: &mut R, low: u64, high: u64) -> u64 {
    let span = u128::from(high - low) + 1;
    low + ((u128::from(rng.next_u64()) * span) >> 64) as u64
}

/// `base^exponent` by repeated squaring.
#[inline]
fn power(mut base: f64, mut exponent: u32) -> f64 {
    let mut result = 1.0;
    while exponent > 0 {
        if exponent & 1 == 1 {
            result *= base;
        }
        base *= base;
        exponent >>= 1;
    }
    result
}

/// A uniform draw from `base × [1 - factor, 1 + factor]`: symmetric around `base`.
#[inline]
fn proportional<R: Rng + ?Sized>(base: u64, factor: f64, rng: &mut R) -> u64 {
    let spread = spread(base, factor);
    let low = base - spread.min(base);
    let high = base.saturating_add(spread);
    uniform(rng, low, high)
}

/// How far proportional jitter strays from `base`: `base × factor`.
#[inline]
fn spread(base: u64, factor: f64) -> u64 {
    // The factor in 32-bit fixed point: one float conversion instead of two.
    let factor = (factor.clamp(0.0, 1.0) * 4_294_967_296.0) as u64;
    ((u128::from(base) * u128::from(factor)) >> 32) as u64
}

/// AWS's decorrelated jitter: a uniform draw from `[initial, 3 × previous)`,
/// where a previous delay below `initial` (or none yet) counts as `initial`.
#[inline]
fn decorrelated<R: Rng + ?Sized>(initial: u64, previous: u64, rng: &mut R) -> u64 {
    let high = previous.max(initial).saturating_mul(3);
    if high <= initial {
        return initial;
    }
    uniform(rng, initial, high - 1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use rand::rngs::SmallRng;
    use rand::SeedableRng;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn backoff(jitter: Jitter) -> Backoff {
        Backoff {
            initial: ms(100),
            max: ms(10_000),
            multiplier: 2.0,
            jitter,
            jitter_factor: 0.5,
            delays: Vec::new(),
        }
    }

    const ALL: [Jitter; 5] = [
        Jitter::None,
        Jitter::Proportional,
        Jitter::Full,
        Jitter::Equal,
        Jitter::Decorrelated,
    ];

    #[test]
    fn exponential_doubles_then_saturates_at_the_cap() {
        let b = backoff(Jitter::None);
        let bases: Vec<Duration> = (0..9).map(|a| b.base(a)).collect();
        assert_eq!(
            bases,
            [100, 200, 400, 800, 1600, 3200, 6400, 10_000, 10_000].map(ms),
            "the herd's schedule: 100 ms × 2^attempt, capped at 10 s"
        );
        assert_eq!(b.base(u32::MAX), ms(10_000));
        assert_eq!(
            b.delay(u32::MAX, ms(10_000), &mut SmallRng::seed_from_u64(1)),
            ms(10_000)
        );
    }

    #[test]
    fn explicit_schedule_reuses_its_last_entry() {
        let b = Backoff {
            delays: vec![ms(1), ms(5), ms(10)],
            ..backoff(Jitter::None)
        };
        let bases: Vec<Duration> = [0, 1, 2, 3, u32::MAX].iter().map(|a| b.base(*a)).collect();
        assert_eq!(bases, [1, 5, 10, 10, 10].map(ms));
    }

    #[test]
    fn zero_and_nanosecond_delays_work() {
        let mut rng = SmallRng::seed_from_u64(3);
        for jitter in ALL {
            let zero = Backoff {
                initial: Duration::ZERO,
                ..backoff(jitter)
            };
            assert_eq!(
                zero.delay(5, Duration::ZERO, &mut rng),
                Duration::ZERO,
                "{jitter}"
            );
            let tiny = Backoff {
                initial: Duration::from_nanos(1),
                max: Duration::from_nanos(3),
                ..backoff(jitter)
            };
            for attempt in [0, 1, 2, 40, u32::MAX] {
                assert!(tiny.delay(attempt, Duration::from_nanos(2), &mut rng) <= Duration::from_nanos(3));
            }
        }
    }

    proptest! {
        /// No draw is ever longer than `longest` says, and the waits of a
        /// run never add up to more than `longest_total`.
        #[test]
        fn no_draw_passes_the_longest(
            jitter in prop::sample::select(ALL.to_vec()),
            initial in 1u64..2_000,
            max in 1u64..20_000,
            multiplier in 1.0f64..4.0,
            factor in 0.0f64..1.0,
            seed: u64,
        ) {
            let b = Backoff {
                initial: ms(initial),
                max: ms(max),
                multiplier,
                jitter,
                jitter_factor: factor,
                delays: Vec::new(),
            };
            let mut rng = SmallRng::seed_from_u64(seed);
            let (mut previous, mut longest, mut total) = (Duration::ZERO, Duration::ZERO, Duration::ZERO);
            for attempt in 0..12 {
                let delay = b.delay(attempt, previous, &mut rng);
                longest = b.longest(attempt, longest);
                prop_assert!(delay <= longest, "{delay:?} > {longest:?} at {attempt}");
                total += delay;
                previous = delay;
            }
            prop_assert!(total <= b.longest_total(12));
        }
    }

    #[test]
    fn the_longest_total_of_a_schedule_adds_its_tops_and_ends_at_the_cap() {
        let mut b = backoff(Jitter::Full);
        b.initial = ms(100);
        b.max = ms(10_000);
        b.multiplier = 2.0;
        assert_eq!(b.longest_total(3), ms(100 + 200 + 400));
        assert_eq!(
            b.longest_total(10),
            ms(100 + 200 + 400 + 800 + 1600 + 3200 + 6400 + 3 * 10_000)
        );
        assert_eq!(
            b.longest_total(u32::MAX),
            ms(10_000).saturating_mul(u32::MAX - 7) + ms(12_700)
        );
        b.jitter = Jitter::Proportional;
        b.jitter_factor = 0.5;
        assert_eq!(b.longest_total(3), ms(150 + 300 + 600));
        b.jitter = Jitter::Decorrelated;
        assert_eq!(b.longest_total(3), ms(300 + 900 + 2700));
        b.delays = vec![ms(10), ms(500)];
        b.jitter = Jitter::None;
        assert_eq!(b.longest_total(5), ms(10 + 4 * 500));
    }

    #[test]
    fn decorrelated_starts_from_the_initial_delay() {
        let b = backoff(Jitter::Decorrelated);
        let mut rng = SmallRng::seed_from_u64(9);
        for _ in 0..1000 {
            let first = b.delay(0, Duration::ZERO, &mut rng);
            assert!(first >= ms(100) && first < ms(300), "{first:?}");
        }
    }

    #[test]
    fn a_seed_reproduces_a_run() {
        let b = backoff(Jitter::Full);
        let run = |seed| {
            let mut rng = SmallRng::seed_from_u64(seed);
            (0..20)
                .map(|a| b.delay(a, Duration::ZERO, &mut rng))
                .collect::<Vec<_>>()
        };
        assert_eq!(run(42), run(42));
        assert_ne!(run(42), run(43));
    }

    fn any_jitter() -> impl Strategy<Value = Jitter> {
        prop::sample::select(ALL.to_vec())
    }

    proptest! {
        /// Every strategy stays within [0, max] for any settings and attempt.
        #[test]
        fn every_delay_is_within_the_cap(
            jitter in any_jitter(),
            initial in 0u64..=u64::MAX / 2,
            max in 0u64..=u64::MAX,
            multiplier in 1.0f64..100.0,
            factor in 0.0f64..=1.0,
            attempt in any::<u32>(),
            previous in any::<u64>(),
            seed in any::<u64>(),
        ) {
            let b = Backoff {
                initial: Duration::from_nanos(initial),
                max: Duration::from_nanos(max),
                multiplier,
                jitter,
                jitter_factor: factor,
                delays: Vec::new(),
            };
            let delay = b.delay(attempt, Duration::from_nanos(previous), &mut SmallRng::seed_from_u64(seed));
            prop_assert!(delay <= b.max);
            prop_assert!(b.base(attempt) <= b.max);
        }

        /// Each strategy draws from its own interval.
        #[test]
        fn each_strategy_draws_from_its_interval(
            base_ms in 0u64..100_000,
            factor in 0.0f64..=1.0,
            previous_ms in 0u64..100_000,
            seed in any::<u64>(),
        ) {
            let rng = &mut SmallRng::seed_from_u64(seed);
            let b = Backoff {
                initial: ms(base_ms),
                max: ms(1_000_000),
                multiplier: 1.0,
                jitter: Jitter::None,
                jitter_factor: factor,
                delays: Vec::new(),
            };
            let base = ms(base_ms);
            let with = |jitter| Backoff { jitter, ..b.clone() };
            prop_assert_eq!(with(Jitter::None).delay(0, Duration::ZERO, rng), base);
            prop_assert!(with(Jitter::Full).delay(0, Duration::ZERO, rng) <= base);
            let equal = with(Jitter::Equal).delay(0, Duration::ZERO, rng);
            prop_assert!(equal >= base / 2 && equal <= base);
            let proportional = with(Jitter::Proportional).delay(0, Duration::ZERO, rng).as_nanos() as f64;
            let (low, high) = (base.as_nanos() as f64 * (1.0 - factor), base.as_nanos() as f64 * (1.0 + factor));
            prop_assert!(proportional >= low.floor() && proportional <= high.ceil());
            let previous = ms(previous_ms);
            let decorrelated = with(Jitter::Decorrelated).delay(3, previous, rng);
            let floor = previous.max(base);
            prop_assert!(decorrelated >= base);
            prop_assert!(decorrelated < floor * 3 || (floor * 3 <= base && decorrelated == base));
        }

        /// Proportional jitter is symmetric: as likely above the base as below,
        /// by as much (a ±10 % that is really [0, 10 %) would lengthen every delay).
        #[test]
        fn proportional_jitter_is_symmetric(base_ms in 10u64..10_000, factor in 0.05f64..=1.0, seed in any::<u64>()) {
            let b = Backoff { initial: ms(base_ms), multiplier: 1.0, max: ms(1_000_000), ..backoff(Jitter::Proportional) };
            let b = Backoff { jitter_factor: factor, ..b };
            let rng = &mut SmallRng::seed_from_u64(seed);
            let n = 4000;
            let base = ms(base_ms).as_nanos() as f64;
            let deviations: Vec<f64> = (0..n).map(|_| b.delay(0, Duration::ZERO, rng).as_nanos() as f64 - base).collect();
            let mean = deviations.iter().sum::<f64>() / n as f64;
            let above = deviations.iter().filter(|d| **d > 0.0).count() as f64 / n as f64;
            let spread = base * factor;
            // Uniform on [-spread, spread]: the mean's standard error is spread / sqrt(3n) ≈ 0.009 spread.
            prop_assert!(mean.abs() < 0.05 * spread, "mean deviation {mean} of spread {spread}");
            prop_assert!((above - 0.5).abs() < 0.05, "{above} of draws above the base");
            let widest = deviations.iter().fold(0.0f64, |w, d| w.max(d.abs()));
            prop_assert!(widest > 0.9 * spread, "draws reach out to ±factor: {widest} of {spread}");
        }

        /// Full jitter's mean is half its bound (AWS): on average it waits half as long.
        #[test]
        fn full_jitter_mean_is_half_the_bound(base_ms in 1u64..100_000, seed in any::<u64>()) {
            let b = Backoff { initial: ms(base_ms), multiplier: 1.0, max: ms(1_000_000), ..backoff(Jitter::Full) };
            let rng = &mut SmallRng::seed_from_u64(seed);
            let n = 4000;
            let mean = (0..n).map(|_| b.delay(0, Duration::ZERO, rng).as_nanos() as f64).sum::<f64>() / n as f64;
            let half = ms(base_ms).as_nanos() as f64 / 2.0;
            // Standard error of the mean: base / sqrt(12 n) ≈ 0.0046 base, so 3 % is over 6 of them.
            prop_assert!((mean - half).abs() < 0.03 * half * 2.0, "mean {mean} vs half {half}");
        }
    }
}
