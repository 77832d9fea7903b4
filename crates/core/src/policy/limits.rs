//! The range every policy setting must lie in, stated once: validation
//! checks against these and quotes them in its messages, and [`all`] hands
//! them to the Go and Python clients (as `clients/vectors/limits.json`), so
//! no client can allow what the daemon refuses.

use std::fmt::Display;
use std::time::Duration;

use serde::Serialize;

use super::duration::GoDuration;

/// The range one setting must lie in: from `low` to `high`, each end
/// allowed or not.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Limit<T> {
    /// The policy key the range is for, as a violation names it.
    pub key: &'static str,
    /// The lower end.
    pub low: T,
    /// Whether `low` itself is allowed, or only values above it.
    pub low_allowed: bool,
    /// The upper end.
    pub high: T,
    /// Whether `high` itself is allowed, or only values below it.
    pub high_allowed: bool,
}

impl<T: PartialOrd + Copy> Limit<T> {
    /// From `low` to `high`, both allowed.
    const fn between(key: &'static str, low: T, high: T) -> Self {
        Limit {
            key,
            low,
            low_allowed: true,
            high,
            high_allowed: true,
        }
    }

    /// Above `low`, at most `high`.
    const fn above(key: &'static str, low: T, high: T) -> Self {
        Limit {
            key,
            low,
            low_allowed: false,
            high,
            high_allowed: true,
        }
    }

    /// Above `low` and below `high`.
    const fn inside(key: &'static str, low: T, high: T) -> Self {
        Limit {
            key,
            low,
            low_allowed: false,
            high,
            high_allowed: false,
        }
    }

    /// Whether `value` lies in the range (a NaN never does).
    pub fn admits(&self, value: T) -> bool {
        let above_low = if self.low_allowed {
            value >= self.low
        } else {
            value > self.low
        };
        let below_high = if self.high_allowed {
            value <= self.high
        } else {
            value < self.high
        };
        above_low && below_high
    }

    /// What a value outside the range is told, each value shown by `show`:
    /// "must be between 0 and 100, found 101".
    pub fn refusal<S: Display>(&self, value: T, show: impl Fn(T) -> S) -> String {
        let low = match self.low_allowed {
            true if self.high_allowed => "between",
            true => "at least",
            false => "above",
        };
        let high = match (self.low_allowed && self.high_allowed, self.high_allowed) {
            (true, _) => "and",
            (false, true) => "and at most",
            (false, false) => "and below",
        };
        format!(
            "must be {low} {} {high} {}, found {}",
            show(self.low),
            show(self.high),
            show(value)
        )
    }
}

/// What a limit's values count, as [`Range`] names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Unit {
    /// A whole number: retries, calls, tokens, entries.
    Count,
    /// A real number: a ratio, a rate, a factor.
    Number,
    /// A span of time, in nanoseconds.
    Duration,
}

/// A value a [`Limit`] can bound, and how [`Range`] writes it.
pub trait Bounded: PartialOrd + Copy {
    /// What the value counts.
    const UNIT: Unit;
    /// The value as a JSON number: durations in nanoseconds.
    fn number(self) -> f64;
}

impl Bounded for u32 {
    const UNIT: Unit = Unit::Count;
    fn number(self) -> f64 {
        f64::from(self)
    }
}

impl Bounded for usize {
    const UNIT: Unit = Unit::Count;
    fn number(self) -> f64 {
        self as f64
    }
}

impl Bounded for f64 {
    const UNIT: Unit = Unit::Number;
    fn number(self) -> f64 {
        self
    }
}

impl Bounded for Duration {
    const UNIT: Unit = Unit::Duration;
    fn number(self) -> f64 {
        self.as_nanos() as f64
    }
}

/// A [`Limit`] as the clients read it, whatever its type.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Range {
    /// The policy key, as the daemon's messages name it.
    pub key: &'static str,
    /// What `low` and `high` count.
    pub unit: Unit,
    /// The lower end.
    pub low: f64,
    /// Whether `low` itself is allowed.
    pub low_allowed: bool,
    /// The upper end.
    pub high: f64,
    /// Whether `high` itself is allowed.
    pub high_allowed: bool,
}

impl Range {
    /// What `value` (a count, a number, or nanoseconds, as [`Range::unit`]
    /// says) is told when it lies outside: the words validation gives it,
    /// durations shown as a policy file writes them ("1h0m0s").
    pub fn refusal(&self, value: f64) -> String {
        match self.unit {
            Unit::Count | Unit::Number => self.limit().refusal(value, |v| v),
            Unit::Duration => self
                .limit()
                .refusal(value, |v| GoDuration(Duration::from_nanos(v as u64))),
        }
    }

    /// The values just outside each end that its unit can hold (a count or
    /// a duration is never below 0): an end that is not allowed, else one
    /// step past it, a step being one for a count, a nanosecond for a
    /// duration and the next float for a number.
    pub fn just_outside(&self) -> Vec<f64> {
        let number = self.unit == Unit::Number;
        let below = match (self.low_allowed, number) {
            (false, _) => self.low,
            (true, true) => next_float(self.low, false),
            (true, false) => self.low - 1.0,
        };
        let above = match (self.high_allowed, number) {
            (false, _) => self.high,
            (true, true) => next_float(self.high, true),
            (true, false) => self.high + 1.0,
        };
        [below, above]
            .into_iter()
            .filter(|&value| number || value >= 0.0)
            .collect()
    }

    fn limit(&self) -> Limit<f64> {
        Limit {
            key: self.key,
            low: self.low,
            low_allowed: self.low_allowed,
            high: self.high,
            high_allowed: self.high_allowed,
        }
    }
}

/// The float next to `value` (finite), upward or downward.
fn next_float(value: f64, up: bool) -> f64 {
    if value == 0.0 {
        let tiny = f64::from_bits(1);
        return if up { tiny } else { -tiny };
    }
    let away_from_zero = up == (value > 0.0);
    let bits = value.to_bits();
    f64::from_bits(if away_from_zero { bits + 1 } else { bits - 1 })
}

impl<T: Bounded> Limit<T> {
    /// The limit as the clients read it.
    pub fn range(&self) -> Range {
        Range {
            key: self.key,
            unit: T::UNIT,
            low: self.low.number(),
            low_allowed: self.low_allowed,
            high: self.high.number(),
            high_allowed: self.high_allowed,
        }
    }
}

const HOUR: Duration = Duration::from_secs(3600);
const DAY: Duration = Duration::from_secs(24 * 3600);
const MILLISECOND: Duration = Duration::from_millis(1);
const SECOND: Duration = Duration::from_secs(1);

/// Retries after the first attempt: beyond 100, retries are a storm.
pub const MAX_RETRIES: Limit<u32> = Limit::between("maxRetries", 0, 100);
/// The cap on every delay.
pub const MAX_DELAY: Limit<Duration> = Limit::between("maxDelay", Duration::ZERO, HOUR);
/// Growth per attempt of the exponential schedule.
pub const MULTIPLIER: Limit<f64> = Limit::between("multiplier", 1.0, 100.0);
/// The share of a delay proportional jitter may take away.
pub const JITTER_FACTOR: Limit<f64> = Limit::between("jitterFactor", 0.0, 1.0);
/// Entries in an explicit `delays` list.
pub const DELAYS: Limit<usize> = Limit::between("delays", 0, 100);
/// Each attempt's own timeout (0: none).
pub const PER_TRY_TIMEOUT: Limit<Duration> = Limit::between("perTryTimeout", Duration::ZERO, DAY);
/// The bound on a call's attempts and waits together (0: none).
pub const MAX_ELAPSED: Limit<Duration> = Limit::between("maxElapsed", Duration::ZERO, DAY);

/// The retry budget's ranges.
pub mod budget {
    use super::*;

    /// Retries allowed per request (0.2 = 20 %).
    pub const RETRY_RATIO: Limit<f64> = Limit::between("budget.retryRatio", 0.0, 1000.0);
    /// Retries always allowed per second.
    pub const MIN_RETRIES_PER_SECOND: Limit<u32> = Limit::between("budget.minRetriesPerSecond", 0, 1_000_000);
    /// How long a request counts towards the budget.
    pub const TTL: Limit<Duration> = Limit::between("budget.ttl", SECOND, Duration::from_secs(60));
}

/// gRPC retry throttling's ranges.
pub mod throttling {
    use super::*;

    /// The token bucket's size.
    pub const MAX_TOKENS: Limit<u32> = Limit::between("retryThrottling.maxTokens", 1, 1000);
    /// Tokens a success returns.
    pub const TOKEN_RATIO: Limit<f64> = Limit::above("retryThrottling.tokenRatio", 0.0, 1000.0);
}

/// The circuit breaker's ranges.
pub mod breaker {
    use super::*;

    /// Failures in a row that open the breaker (0: never).
    pub const CONSECUTIVE_FAILURES: Limit<u32> =
        Limit::between("circuitBreaker.consecutiveFailures", 0, 10_000);
    /// The failure rate over the window that opens it.
    pub const FAILURE_RATE_THRESHOLD: Limit<f64> =
        Limit::above("circuitBreaker.failureRateThreshold", 0.0, 1.0);
    /// The share of slow calls that opens it.
    pub const SLOW_CALL_RATE_THRESHOLD: Limit<f64> =
        Limit::above("circuitBreaker.slowCallRateThreshold", 0.0, 1.0);
    /// How long a call takes to count as slow.
    pub const SLOW_CALL_DURATION: Limit<Duration> =
        Limit::between("circuitBreaker.slowCallDuration", MILLISECOND, DAY);
    /// Calls the window holds before rates are judged.
    pub const MINIMUM_CALLS: Limit<u32> = Limit::between("circuitBreaker.minimumCalls", 1, 10_000);
    /// A window of the last so many calls.
    pub const WINDOW_CALLS: Limit<u32> = Limit::between("circuitBreaker.slidingWindow", 1, 10_000);
    /// A window of the last so long.
    pub const WINDOW_DURATION: Limit<Duration> = Limit::between("circuitBreaker.slidingWindow", SECOND, HOUR);
    /// How long the breaker stays open before trial calls.
    pub const OPEN_TIMEOUT: Limit<Duration> = Limit::between("circuitBreaker.openTimeout", MILLISECOND, HOUR);
    /// Trial calls at once while half-open.
    pub const HALF_OPEN_MAX_CALLS: Limit<u32> = Limit::between("circuitBreaker.halfOpenMaxCalls", 1, 1000);
    /// Successful trials that close it again.
    pub const SUCCESS_THRESHOLD: Limit<u32> = Limit::between("circuitBreaker.successThreshold", 1, 1000);
}

/// Hedging's ranges.
pub mod hedging {
    use super::*;

    /// The wait before each extra attempt.
    pub const DELAY: Limit<Duration> = Limit::between("hedging.delay", Duration::ZERO, HOUR);
    /// Extra attempts at most (gRPC allows 5 attempts in all).
    pub const MAX_HEDGES: Limit<u32> = Limit::between("hedging.maxHedges", 1, 4);
}

/// The send gate's ranges.
pub mod gate {
    use super::*;

    /// The lowest rate, attempts per second.
    pub const MIN_RATE: Limit<f64> = Limit::above("gate.minRate", 0.0, 1000.0);
    /// The highest rate, attempts per second; never below the policy's
    /// `minRate` either.
    pub const MAX_RATE: Limit<f64> = Limit::between("gate.maxRate", 0.0, 10_000_000.0);
    /// The share of the rate kept after an overload.
    pub const BETA: Limit<f64> = Limit::inside("gate.beta", 0.0, 1.0);
    /// How fast the rate regrows after an overload (CUBIC's C).
    pub const SCALE: Limit<f64> = Limit::above("gate.scale", 0.0, 1000.0);
    /// Attempts per second each accepted attempt adds in slow start.
    pub const RAMP: Limit<f64> = Limit::above("gate.ramp", 0.0, 1000.0);
    /// How long without an overload or a wait before the gate turns off.
    pub const QUIET: Limit<Duration> = Limit::between("gate.quiet", MILLISECOND, HOUR);
    /// How long after it began a call of each class may wait for a turn.
    pub const MAX_WAIT: [Limit<Duration>; 3] = [
        Limit::between("gate.maxWait.critical", Duration::ZERO, DAY),
        Limit::between("gate.maxWait.default", Duration::ZERO, DAY),
        Limit::between("gate.maxWait.sheddable", Duration::ZERO, DAY),
    ];
}

/// Every limit, as the clients read them.
pub fn all() -> Vec<Range> {
    vec![
        MAX_RETRIES.range(),
        MAX_DELAY.range(),
        MULTIPLIER.range(),
        JITTER_FACTOR.range(),
        DELAYS.range(),
        PER_TRY_TIMEOUT.range(),
        MAX_ELAPSED.range(),
        budget::RETRY_RATIO.range(),
        budget::MIN_RETRIES_PER_SECOND.range(),
        budget::TTL.range(),
        throttling::MAX_TOKENS.range(),
        throttling::TOKEN_RATIO.range(),
        breaker::CONSECUTIVE_FAILURES.range(),
        breaker::FAILURE_RATE_THRESHOLD.range(),
        breaker::SLOW_CALL_RATE_THRESHOLD.range(),
        breaker::SLOW_CALL_DURATION.range(),
        breaker::MINIMUM_CALLS.range(),
        breaker::WINDOW_CALLS.range(),
        breaker::WINDOW_DURATION.range(),
        breaker::OPEN_TIMEOUT.range(),
        breaker::HALF_OPEN_MAX_CALLS.range(),
        breaker::SUCCESS_THRESHOLD.range(),
        hedging::DELAY.range(),
        hedging::MAX_HEDGES.range(),
        gate::MIN_RATE.range(),
        gate::MAX_RATE.range(),
        gate::BETA.range(),
        gate::SCALE.range(),
        gate::RAMP.range(),
        gate::QUIET.range(),
        gate::MAX_WAIT[0].range(),
        gate::MAX_WAIT[1].range(),
        gate::MAX_WAIT[2].range(),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ends_are_allowed_or_not_as_stated() {
        assert!(MAX_RETRIES.admits(0) && MAX_RETRIES.admits(100) && !MAX_RETRIES.admits(101));
        assert!(!gate::MIN_RATE.admits(0.0) && gate::MIN_RATE.admits(1000.0));
        assert!(!gate::BETA.admits(0.0) && gate::BETA.admits(0.5) && !gate::BETA.admits(1.0));
        assert!(!JITTER_FACTOR.admits(f64::NAN));
    }

    #[test]
    fn a_refusal_states_the_range_as_its_ends_allow() {
        fn plain<T>(v: T) -> T {
            v
        }
        assert_eq!(
            MAX_RETRIES.refusal(101, plain),
            "must be between 0 and 100, found 101"
        );
        assert_eq!(
            gate::MIN_RATE.refusal(0.0, plain),
            "must be above 0 and at most 1000, found 0"
        );
        assert_eq!(
            gate::BETA.refusal(1.0, plain),
            "must be above 0 and below 1, found 1"
        );
        let low_only = Limit {
            high_allowed: false,
            ..MAX_RETRIES
        };
        assert_eq!(
            low_only.refusal(100, plain),
            "must be at least 0 and below 100, found 100"
        );
    }

    #[test]
    fn a_range_words_a_refusal_as_validation_does() {
        let mut policy = crate::policy::RetryPolicy {
            max_retries: 101,
            max_delay: HOUR + Duration::from_nanos(1),
            ..Default::default()
        };
        policy.circuit_breaker.enabled = true;
        policy.circuit_breaker.open_timeout = Duration::from_nanos(999_999);
        policy.gate.enabled = true;
        policy.gate.beta = 1.0;
        let violations = crate::policy::validate::check(&policy);
        for (range, value) in [
            (MAX_RETRIES.range(), 101.0),
            (MAX_DELAY.range(), 3.6e12 + 1.0),
            (breaker::OPEN_TIMEOUT.range(), 999_999.0),
            (gate::BETA.range(), 1.0),
        ] {
            let refusal = range.refusal(value);
            assert!(
                violations
                    .iter()
                    .any(|v| v.keys == [range.key] && v.message == refusal),
                "{} {refusal:?} is not among {violations:?}",
                range.key
            );
        }
    }

    #[test]
    fn just_outside_is_refused_and_as_near_as_the_unit_goes() {
        for range in all() {
            for value in range.just_outside() {
                assert!(!range.limit().admits(value), "{} admits {value}", range.key);
            }
        }
        assert_eq!(MAX_RETRIES.range().just_outside(), [101.0], "no count below 0");
        assert_eq!(
            gate::BETA.range().just_outside(),
            [0.0, 1.0],
            "an end not allowed is itself outside"
        );
        assert_eq!(
            MULTIPLIER.range().just_outside(),
            [1.0 - f64::EPSILON / 2.0, 100.0 + 64.0 * f64::EPSILON]
        );
    }

    #[test]
    fn durations_reach_the_clients_in_nanoseconds() {
        let range = breaker::OPEN_TIMEOUT.range();
        assert_eq!((range.unit, range.low, range.high), (Unit::Duration, 1e6, 3.6e12));
        assert_eq!(MAX_RETRIES.range().unit, Unit::Count);
    }

    #[test]
    fn a_key_has_one_range_per_unit() {
        let ranges = all();
        for (i, a) in ranges.iter().enumerate() {
            assert!(
                !ranges[i + 1..].iter().any(|b| (b.key, b.unit) == (a.key, a.unit)),
                "{} is listed twice",
                a.key
            );
        }
    }
}
