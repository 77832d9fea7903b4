//! Range and consistency checks on a resolved [`RetryPolicy`].
//!
//! Checks run on resolved policies because a service's policy is only
//! meaningful merged with the defaults: an override of `maxDelay: 50ms` is
//! wrong only if the inherited `initialDelay` is larger.

use std::fmt::Display;
use std::time::Duration;

use super::layer::show;
use super::limits::{self, breaker, budget, gate, hedging, throttling, Limit};
use super::model::{Criticality, GatePolicy, RetryPolicy, SlidingWindow};

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

    /// Checks `value` against `limit`, naming the range in the message.
    fn within<T: PartialOrd + Copy, S: Display>(&mut self, limit: Limit<T>, value: T, show: impl Fn(T) -> S) {
        if !limit.admits(value) {
            self.push(&[limit.key], limit.refusal(value, show));
        }
    }

    fn count(&mut self, limit: Limit<u32>, value: u32) {
        self.within(limit, value, |v| v);
    }

    fn number(&mut self, limit: Limit<f64>, value: f64) {
        self.within(limit, value, |v| v);
    }

    fn duration(&mut self, limit: Limit<Duration>, value: Duration) {
        self.within(limit, value, show);
    }
}

fn check_backoff(p: &RetryPolicy, out: &mut Checks) {
    out.count(limits::MAX_RETRIES, p.max_retries);
    out.duration(limits::MAX_DELAY, p.max_delay);
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
    out.number(limits::MULTIPLIER, p.multiplier);
    out.number(limits::JITTER_FACTOR, p.jitter_factor);
    if !limits::DELAYS.admits(p.delays.len()) {
        out.push(
            &[limits::DELAYS.key],
            format!(
                "has {} entries; at most {} are allowed",
                p.delays.len(),
                limits::DELAYS.high
            ),
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
    out.duration(limits::PER_TRY_TIMEOUT, p.per_try_timeout.unwrap_or_default());
    out.duration(limits::MAX_ELAPSED, p.max_elapsed.unwrap_or_default());
}

fn check_blocks(p: &RetryPolicy, out: &mut Checks) {
    let b = &p.budget;
    out.number(budget::RETRY_RATIO, b.retry_ratio);
    out.count(budget::MIN_RETRIES_PER_SECOND, b.min_retries_per_second);
    out.duration(budget::TTL, b.ttl);

    let t = &p.retry_throttling;
    out.count(throttling::MAX_TOKENS, t.max_tokens);
    out.number(throttling::TOKEN_RATIO, t.token_ratio);

    let c = &p.circuit_breaker;
    out.count(breaker::CONSECUTIVE_FAILURES, c.consecutive_failures);
    out.number(breaker::FAILURE_RATE_THRESHOLD, c.failure_rate_threshold);
    out.number(breaker::SLOW_CALL_RATE_THRESHOLD, c.slow_call_rate_threshold);
    out.duration(breaker::SLOW_CALL_DURATION, c.slow_call_duration);
    out.count(breaker::MINIMUM_CALLS, c.minimum_calls);
    match c.sliding_window {
        SlidingWindow::Count { calls } => out.count(breaker::WINDOW_CALLS, calls),
        SlidingWindow::Time { duration } => out.duration(breaker::WINDOW_DURATION, duration),
    }
    out.duration(breaker::OPEN_TIMEOUT, c.open_timeout);
    out.count(breaker::HALF_OPEN_MAX_CALLS, c.half_open_max_calls);
    out.count(breaker::SUCCESS_THRESHOLD, c.success_threshold);

    let h = &p.hedging;
    out.duration(hedging::DELAY, h.delay);
    out.count(hedging::MAX_HEDGES, h.max_hedges);

    check_gate(&p.gate, out);
}

fn check_gate(g: &GatePolicy, out: &mut Checks) {
    out.number(gate::MIN_RATE, g.min_rate);
    // maxRate never below minRate; a minRate that is no number is refused above.
    let low = if g.min_rate.is_finite() {
        g.min_rate.max(gate::MAX_RATE.low)
    } else {
        gate::MAX_RATE.low
    };
    out.number(
        Limit {
            low,
            ..gate::MAX_RATE
        },
        g.max_rate,
    );
    out.number(gate::BETA, g.beta);
    out.number(gate::SCALE, g.scale);
    out.number(gate::RAMP, g.ramp);
    out.duration(gate::QUIET, g.quiet);
    for (limit, class) in gate::MAX_WAIT.into_iter().zip(Criticality::ALL) {
        out.duration(limit, g.max_wait.of(class));
    }
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

    /// Every range validation applies is one the clients are given, and the
    /// other way round.
    #[test]
    fn the_checks_apply_every_listed_limit_and_no_other() {
        let mut p = RetryPolicy {
            max_retries: 101,
            initial_delay: Duration::ZERO,
            max_delay: Duration::from_secs(7200),
            multiplier: 0.5,
            jitter_factor: 2.0,
            delays: vec![Duration::ZERO; 101],
            per_try_timeout: Some(Duration::from_secs(200_000)),
            max_elapsed: Some(Duration::from_secs(200_000)),
            ..RetryPolicy::default()
        };
        p.budget.retry_ratio = -1.0;
        p.budget.min_retries_per_second = 2_000_000;
        p.budget.ttl = Duration::ZERO;
        p.retry_throttling.max_tokens = 0;
        p.retry_throttling.token_ratio = 0.0;
        let c = &mut p.circuit_breaker;
        c.consecutive_failures = 20_000;
        c.failure_rate_threshold = 0.0;
        c.slow_call_rate_threshold = 0.0;
        c.slow_call_duration = Duration::ZERO;
        c.minimum_calls = 0;
        c.sliding_window = SlidingWindow::Count { calls: 0 };
        c.open_timeout = Duration::ZERO;
        c.half_open_max_calls = 0;
        c.success_threshold = 0;
        p.hedging.delay = Duration::from_secs(7200);
        p.hedging.max_hedges = 0;
        p.gate.min_rate = 0.0;
        p.gate.max_rate = -1.0;
        p.gate.beta = 1.0;
        p.gate.scale = 0.0;
        p.gate.ramp = 0.0;
        p.gate.quiet = Duration::ZERO;
        let past_a_day = Duration::from_secs(86_401);
        p.gate.max_wait = crate::policy::MaxWait {
            critical: past_a_day,
            default: past_a_day,
            sheddable: past_a_day,
        };
        let violated: Vec<&str> = keys_of(&p)
            .into_iter()
            .filter(|k| k.len() == 1)
            .map(|k| k[0])
            .collect();
        let listed: Vec<&str> = limits::all().iter().map(|r| r.key).collect();
        for key in &violated {
            assert!(listed.contains(key), "{key} is checked but not listed");
        }
        for key in &listed {
            assert!(violated.contains(key), "{key} is listed but not checked");
        }
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
            delays: vec![Duration::from_millis(1); limits::DELAYS.high + 1],
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
        p.per_try_timeout = Some(limits::PER_TRY_TIMEOUT.high + Duration::from_secs(1));
        assert_eq!(
            keys_of(&p),
            vec![vec!["perTryTimeout"], vec!["circuitBreaker.slidingWindow"]]
        );
    }
}
