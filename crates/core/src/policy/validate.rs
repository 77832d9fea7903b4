//! Range and consistency checks on a resolved [`RetryPolicy`].
//!
//! Checks run on resolved policies because a service's policy is only
//! meaningful merged with the defaults: an override of `maxDelay: 50ms` is
//! wrong only if the inherited `initialDelay` is larger.

use std::fmt::Display;
use std::time::Duration;

use super::layer::show;
use super::model::{GatePolicy, RetryPolicy, SlidingWindow};

/// The most retries a policy may ask for: beyond this, retries are a storm.
pub const MAX_RETRIES: u32 = 100;
/// The longest delay or hedge delay a policy may set.
pub const MAX_DELAY: Duration = Duration::from_secs(3600);
/// The longest timeout a policy may set.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(24 * 3600);
/// The most entries an explicit `delays` list may have.
pub const MAX_DELAYS: usize = 100;

/// A setting outside its range, or two settings that contradict each other.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// The dotted keys involved, the most likely culprit first.
    pub keys: Vec<&'static str>,
    /// What is wrong.
    pub message: String,
}

/// Every range and consistency problem of `policy`.
pub fn check(policy: &RetryPolicy) -> Vec<Violation> {
    let mut out = Checks(Vec::new());
    check_backoff(policy, &mut out);
    check_blocks(policy, &mut out);
    out.0
}

struct Checks(Vec<Violation>);

impl Checks {
    fn push(&mut self, keys: &[&'static str], message: String) {
        self.0.push(Violation {
            keys: keys.to_vec(),
            message,
        });
    }

    /// Checks `lo <= value <= hi`, naming the range in the message.
    fn range<T: PartialOrd + Copy, S: Display>(
        &mut self,
        key: &'static str,
        value: T,
        lo: T,
        hi: T,
        show: impl Fn(T) -> S,
    ) {
        if !(lo..=hi).contains(&value) {
            self.push(
                &[key],
                format!(
                    "must be between {} and {}, found {}",
                    show(lo),
                    show(hi),
                    show(value)
                ),
            );
        }
    }

    /// Checks `lo < value <= hi`.
    fn above<S: Display>(
        &mut self,
        key: &'static str,
        value: f64,
        lo: f64,
        hi: f64,
        show: impl Fn(f64) -> S,
    ) {
        if !(value > lo && value <= hi) {
            self.push(
                &[key],
                format!(
                    "must be above {} and at most {}, found {}",
                    show(lo),
                    show(hi),
                    show(value)
                ),
            );
        }
    }
}

fn plain<T>(v: T) -> T {
    v
}

fn check_backoff(p: &RetryPolicy, out: &mut Checks) {
    out.range("maxRetries", p.max_retries, 0, MAX_RETRIES, plain);
    out.range("maxDelay", p.max_delay, Duration::ZERO, MAX_DELAY, show);
    if p.initial_delay > p.max_delay {
        out.push(
            &["initialDelay", "maxDelay"],
            format!(
                "initialDelay ({}) is greater than maxDelay ({}); maxDelay caps every delay",
                show(p.initial_delay),
                show(p.max_delay)
            ),
        );
    }
    out.range("multiplier", p.multiplier, 1.0, 100.0, plain);
    out.range("jitterFactor", p.jitter_factor, 0.0, 1.0, plain);
    if p.delays.len() > MAX_DELAYS {
        out.push(
            &["delays"],
            format!("has {} entries; at most {MAX_DELAYS} are allowed", p.delays.len()),
        );
    }
    if let Some((i, d)) = p.delays.iter().enumerate().find(|(_, d)| **d > p.max_delay) {
        out.push(
            &["delays", "maxDelay"],
            format!(
                "delays[{i}] ({}) is greater than maxDelay ({})",
                show(*d),
                show(p.max_delay)
            ),
        );
    }
    let timeouts = [
        ("perTryTimeout", p.per_try_timeout),
        ("maxElapsed", p.max_elapsed),
    ];
    for (key, timeout) in timeouts {
        out.range(
            key,
            timeout.unwrap_or_default(),
            Duration::ZERO,
            MAX_TIMEOUT,
            show,
        );
    }
}

fn check_blocks(p: &RetryPolicy, out: &mut Checks) {
    let b = &p.budget;
    out.range("budget.retryRatio", b.retry_ratio, 0.0, 1000.0, plain);
    out.range(
        "budget.minRetriesPerSecond",
        b.min_retries_per_second,
        0,
        1_000_000,
        plain,
    );
    out.range(
        "budget.ttl",
        b.ttl,
        Duration::from_secs(1),
        Duration::from_secs(60),
        show,
    );

    let t = &p.retry_throttling;
    out.range("retryThrottling.maxTokens", t.max_tokens, 1, 1000, plain);
    out.above("retryThrottling.tokenRatio", t.token_ratio, 0.0, 1000.0, plain);

    let c = &p.circuit_breaker;
    out.range(
        "circuitBreaker.consecutiveFailures",
        c.consecutive_failures,
        0,
        10_000,
        plain,
    );
    out.above(
        "circuitBreaker.failureRateThreshold",
        c.failure_rate_threshold,
        0.0,
        1.0,
        plain,
    );
    out.above(
        "circuitBreaker.slowCallRateThreshold",
        c.slow_call_rate_threshold,
        0.0,
        1.0,
        plain,
    );
    out.range(
        "circuitBreaker.slowCallDuration",
        c.slow_call_duration,
        Duration::from_millis(1),
        MAX_TIMEOUT,
        show,
    );
    out.range("circuitBreaker.minimumCalls", c.minimum_calls, 1, 10_000, plain);
    match c.sliding_window {
        SlidingWindow::Count { calls } => out.range("circuitBreaker.slidingWindow", calls, 1, 10_000, plain),
        SlidingWindow::Time { duration } => out.range(
            "circuitBreaker.slidingWindow",
            duration,
            Duration::from_secs(1),
            MAX_DELAY,
            show,
        ),
    }
    out.range(
        "circuitBreaker.openTimeout",
        c.open_timeout,
        Duration::from_millis(1),
        MAX_DELAY,
        show,
    );
    out.range(
        "circuitBreaker.halfOpenMaxCalls",
        c.half_open_max_calls,
        1,
        1000,
        plain,
    );
    out.range(
        "circuitBreaker.successThreshold",
        c.success_threshold,
        1,
        1000,
        plain,
    );

    let h = &p.hedging;
    out.range("hedging.delay", h.delay, Duration::ZERO, MAX_DELAY, show);
    out.range("hedging.maxHedges", h.max_hedges, 1, 4, plain);

    check_gate(&p.gate, out);
}

fn check_gate(g: &GatePolicy, out: &mut Checks) {
    out.above("gate.minRate", g.min_rate, 0.0, 1000.0, plain);
    let min = if g.min_rate.is_finite() { g.min_rate } else { 0.0 };
    out.range("gate.maxRate", g.max_rate, min, 10_000_000.0, plain);
    if !(g.beta > 0.0 && g.beta < 1.0) {
        out.push(
            &["gate.beta"],
            format!("must be above 0 and below 1, found {}", g.beta),
        );
    }
    out.above("gate.scale", g.scale, 0.0, 1000.0, plain);
    out.above("gate.ramp", g.ramp, 0.0, 1000.0, plain);
    out.range("gate.quiet", g.quiet, Duration::from_millis(1), MAX_DELAY, show);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys_of(policy: &RetryPolicy) -> Vec<Vec<&'static str>> {
        check(policy).into_iter().map(|v| v.keys).collect()
    }

    #[test]
    fn built_in_policy_is_valid() {
        assert_eq!(check(&RetryPolicy::default()), vec![]);
    }

    #[test]
    fn each_range_is_checked() {
        let mut p = RetryPolicy {
            max_retries: 101,
            multiplier: 0.5,
            jitter_factor: 1.5,
            ..RetryPolicy::default()
        };
        p.budget.ttl = Duration::from_millis(500);
        p.retry_throttling.token_ratio = 0.0;
        p.circuit_breaker.failure_rate_threshold = 0.0;
        p.circuit_breaker.half_open_max_calls = 0;
        p.hedging.max_hedges = 5;
        p.gate.beta = 1.0;
        p.gate.max_rate = 0.1;
        assert_eq!(
            keys_of(&p),
            vec![
                vec!["maxRetries"],
                vec!["multiplier"],
                vec!["jitterFactor"],
                vec!["budget.ttl"],
                vec!["retryThrottling.tokenRatio"],
                vec!["circuitBreaker.failureRateThreshold"],
                vec!["circuitBreaker.halfOpenMaxCalls"],
                vec!["hedging.maxHedges"],
                vec!["gate.maxRate"],
                vec!["gate.beta"],
            ]
        );
        assert_eq!(check(&p)[0].message, "must be between 0 and 100, found 101");
        assert_eq!(check(&p)[3].message, "must be between 1s and 1m0s, found 500ms");
        assert_eq!(check(&p)[9].message, "must be above 0 and below 1, found 1");
    }

    #[test]
    fn initial_delay_above_max_delay_names_both() {
        let p = RetryPolicy {
            initial_delay: Duration::from_secs(20),
            ..RetryPolicy::default()
        };
        let v = check(&p);
        assert_eq!(v[0].keys, ["initialDelay", "maxDelay"]);
        assert_eq!(
            v[0].message,
            "initialDelay (20s) is greater than maxDelay (10s); maxDelay caps every delay"
        );
    }

    #[test]
    fn explicit_delays_must_fit_under_the_cap() {
        let p = RetryPolicy {
            delays: vec![Duration::from_secs(1), Duration::from_secs(30)],
            ..RetryPolicy::default()
        };
        assert_eq!(
            check(&p)[0].message,
            "delays[1] (30s) is greater than maxDelay (10s)"
        );
        let many = RetryPolicy {
            delays: vec![Duration::from_millis(1); MAX_DELAYS + 1],
            ..RetryPolicy::default()
        };
        assert_eq!(keys_of(&many), vec![vec!["delays"]]);
    }

    #[test]
    fn time_windows_and_timeouts_are_bounded() {
        let mut p = RetryPolicy::default();
        p.circuit_breaker.sliding_window = SlidingWindow::Time {
            duration: Duration::from_millis(10),
        };
        p.per_try_timeout = Some(MAX_TIMEOUT + Duration::from_secs(1));
        assert_eq!(
            keys_of(&p),
            vec![vec!["perTryTimeout"], vec!["circuitBreaker.slidingWindow"]]
        );
    }
}
