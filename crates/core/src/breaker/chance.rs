//! Whether a run of failures in a row is one that chance explains: the rule
//! that keeps a closed breaker shut against a dependency that fails a share
//! of calls at random (a bad replica behind a balancer) and still opens it
//! at once for one that went down.
//!
//! The run is weighed against the failure rate the window held before it,
//! and that rate is only an estimate, so the rule takes four precautions:
//! - **a minimum sample**: the window must hold at least as many calls
//!   before the run as in it, and a failure among them, or nothing is
//!   excused (`minimumCalls` would be the failure-rate rule's sample, but a
//!   process makes its first hundred calls after every start and every close
//!   unprotected then: at 30 % random failures one in six of those spells
//!   opens the breaker on a chance run, and 50 processes served 85 % of
//!   calls, not 97 %);
//! - **a confidence bound**: the run is weighed at the upper bound of the
//!   background rate's Wilson interval ([`BOUND_Z`]), so a rate that looks
//!   low by luck cannot open the breaker on a chance run;
//! - **a cap**: a run of twice `consecutiveFailures` opens the breaker
//!   whatever the background, so a true outage after any background rate
//!   (or after a flapping spell, whose failures are not independent and
//!   inflate the estimate) opens it within two runs' worth of failures;
//! - **exact comparison**: a chance within a billionth of
//!   [`RUN_BY_CHANCE`] counts as reaching it (0.1⁵ in floating point is a
//!   hair above 1e-5), and a run that chance gives at most that often opens
//!   the breaker.
//!
//! Only `+ - × ÷ √` are used, each rounded once, so Rust, Go and Python
//! reach the same verdict to the last bit.

use super::window::Tally;

/// How likely, at most, a run of failures may be by chance before the
/// breaker believes it: one in 100,000 runs, at the upper 97.5 % bound of
/// the failure rate the window held before the run. A dependency failing
/// 30 % of calls at random fails five in a row about once in 600 calls, and
/// a breaker that opened on those would hold open a dependency that serves
/// 70 % of calls. Nothing is excused unless the window holds as many calls
/// before the run as in it and a failure among them, and a run of twice
/// `consecutiveFailures` always opens the breaker.
pub const RUN_BY_CHANCE: f64 = 1e-5;

/// The z-score of the upper bound the background rate is taken at: 1.96,
/// a one-sided 97.5 % bound.
pub const BOUND_Z: f64 = 1.96;

/// [`BOUND_Z`] squared, written out so that no client rounds it differently.
const BOUND_Z_SQUARED: f64 = 3.8416;

/// [`RUN_BY_CHANCE`] and a billionth more, so a product that is 1e-5 but
/// for rounding counts as 1e-5. A literal, parsed alike in every language.
const AT_MOST_BY_CHANCE: f64 = 1.000_000_001e-5;

/// What a closed breaker knows when a run of failures reaches
/// `consecutiveFailures`.
#[derive(Debug, Clone, Copy)]
pub(super) struct Run {
    /// Failures in a row, the latest call among them.
    pub(super) length: u32,
    /// The window's calls, the run among them.
    pub(super) tally: Tally,
    /// `consecutiveFailures`: the run that opens the breaker when nothing excuses it.
    pub(super) opens_at: u32,
    /// `failureRateThreshold`: a background at or past it excuses nothing.
    pub(super) threshold: f64,
}

impl Run {
    /// Whether chance explains the run, so the breaker stays closed.
    pub(super) fn by_chance(&self) -> bool {
        if self.length >= self.opens_at.saturating_mul(2) {
            return false;
        }
        let before = self.tally.calls.saturating_sub(self.length);
        let failures = self.tally.failures.saturating_sub(self.length);
        if before < self.length || failures == 0 {
            return false;
        }
        if f64::from(failures) / f64::from(before) >= self.threshold {
            return false;
        }
        likely(upper_bound(failures, before), self.length)
    }
}

/// Whether `run` failures in a row at `rate` are more likely than
/// [`RUN_BY_CHANCE`], multiplied out one failure at a time.
fn likely(rate: f64, run: u32) -> bool {
    let mut chance = 1.0;
    for _ in 0..run {
        chance *= rate;
        if chance <= AT_MOST_BY_CHANCE {
            return false;
        }
    }
    true
}

/// The upper end of the Wilson score interval for `failures` of `calls`.
fn upper_bound(failures: u32, calls: u32) -> f64 {
    let n = f64::from(calls);
    let p = f64::from(failures) / n;
    let z2 = BOUND_Z_SQUARED;
    let spread = p * (1.0 - p) / n + z2 / (4.0 * n * n);
    let centre = p + z2 / (2.0 * n);
    (centre + BOUND_Z * spread.sqrt()) / (1.0 + z2 / n)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(length: u32, calls: u32, failures: u32) -> Run {
        Run {
            length,
            tally: Tally {
                calls,
                failures,
                slow: 0,
            },
            opens_at: 5,
            threshold: 0.5,
        }
    }

    #[test]
    fn a_chance_that_is_the_limit_but_for_rounding_reaches_it() {
        let mut product = 1.0_f64;
        for _ in 0..5 {
            product *= 0.1;
        }
        assert!(product > RUN_BY_CHANCE, "the rounding this guards against");
        assert!(!likely(0.1, 5), "0.1^5 is one in 100,000: five are not chance");
        assert!(likely(0.1, 4));
    }

    #[test]
    fn the_bound_lies_above_the_rate_and_narrows_with_the_sample() {
        let few = upper_bound(3, 10);
        let many = upper_bound(300, 1_000);
        assert!(few > 0.3 && many > 0.3, "{few} {many}");
        assert!(few > many, "{few} {many}");
        assert!((0.0..1.0).contains(&upper_bound(0, 100)));
        assert!(upper_bound(100, 100) <= 1.0 + f64::EPSILON);
    }

    #[test]
    fn a_window_with_fewer_calls_before_the_run_than_in_it_excuses_nothing() {
        assert!(run(6, 12, 8).by_chance(), "two of six before excuse six");
        assert!(!run(6, 11, 8).by_chance(), "two of five before excuse none");
    }

    #[test]
    fn no_failure_before_the_run_excuses_nothing() {
        assert!(!run(5, 1_000, 5).by_chance());
    }

    #[test]
    fn a_run_of_twice_consecutive_failures_opens_whatever_the_background() {
        assert!(run(9, 1_000, 9 + 490).by_chance(), "49 %: nine are chance");
        assert!(!run(10, 1_000, 10 + 490).by_chance(), "ten are the cap");
    }

    #[test]
    fn a_background_at_the_threshold_excuses_nothing() {
        assert!(!run(5, 1_000, 5 + 500).by_chance());
    }

    #[test]
    fn the_run_chance_needs_follows_the_upper_bound_not_the_estimate() {
        // 10 % over 995 calls: the estimate alone excuses four (0.1^5 = 1e-5),
        // the bound (about 0.12) excuses five.
        assert!(run(5, 1_000, 5 + 99).by_chance());
        assert!(!run(6, 1_000, 6 + 99).by_chance(), "0.12^6 = 3e-6");
    }
}
