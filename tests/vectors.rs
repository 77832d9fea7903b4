//! The shared test vectors of the delay law: what stormguard-core's
//! `Backoff::delay` gives for fixed random draws, which the Go and Python
//! clients check their own delay law against, so that the three cannot
//! drift apart. The file is regenerated with STORMGUARD_WRITE_VECTORS=1;
//! this test fails when core's law and the committed file disagree.

use std::time::Duration;

use rand::RngCore;
use serde_json::{json, Value};
use stormguard_core::backoff::Backoff;
use stormguard_core::policy::Jitter;

const PATH: &str = "clients/vectors/backoff.json";

/// A random source that always draws the same 64 bits.
struct Fixed(u64);

impl RngCore for Fixed {
    fn next_u32(&mut self) -> u32 {
        self.0 as u32
    }

    fn next_u64(&mut self) -> u64 {
        self.0
    }

    fn fill_bytes(&mut self, dest: &mut [u8]) {
        for (i, byte) in dest.iter_mut().enumerate() {
            *byte = self.0.to_le_bytes()[i % 8];
        }
    }
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn vectors() -> Value {
    let draws = [
        0,
        1 << 63,
        u64::MAX,
        0x9e37_79b9_7f4a_7c15,
        12_345_678_901_234_567_890,
    ];
    let shapes = [
        (ms(100), ms(10_000), 2.0, vec![]),
        (ms(3_000), ms(8_000), 3.0, vec![]),
        (ms(1), ms(1), 1.0, vec![]),
        (Duration::from_nanos(333_333), ms(60_000), 1.7, vec![]),
        (
            ms(100),
            ms(4_000),
            2.0,
            vec![ms(0), ms(10), ms(500), ms(3_000), ms(5_000)],
        ),
    ];
    let jitters = [
        (Jitter::None, 0.0),
        (Jitter::Full, 0.0),
        (Jitter::Equal, 0.0),
        (Jitter::Decorrelated, 0.0),
        (Jitter::Proportional, 0.5),
        (Jitter::Proportional, 0.1),
    ];
    let mut cases = Vec::new();
    for (initial, max, multiplier, delays) in &shapes {
        for (jitter, factor) in jitters {
            let backoff = Backoff {
                initial: *initial,
                max: *max,
                multiplier: *multiplier,
                jitter,
                jitter_factor: factor,
                delays: delays.clone(),
            };
            for draw in draws {
                let mut previous = Duration::ZERO;
                for attempt in [0, 1, 2, 3, 5, 8, 13, 40] {
                    let delay = backoff.delay(attempt, previous, &mut Fixed(draw));
                    cases.push(json!({
                        "initialNanos": initial.as_nanos() as u64,
                        "maxNanos": max.as_nanos() as u64,
                        "multiplier": multiplier,
                        "jitter": jitter.name(),
                        "jitterFactor": factor,
                        "delaysNanos": delays.iter().map(|d| d.as_nanos() as u64).collect::<Vec<_>>(),
                        "attempt": attempt,
                        "previousNanos": previous.as_nanos() as u64,
                        "draw": draw,
                        "delayNanos": delay.as_nanos() as u64,
                    }));
                    previous = delay;
                }
            }
        }
    }
    json!({
        "about": "stormguard-core's delay law: for each case, the delay before retry `attempt` (0 = the first retry) when the previous delay was `previousNanos` and the random source drew the 64 bits `draw`. Regenerate with STORMGUARD_WRITE_VECTORS=1 cargo test --test vectors.",
        "cases": cases,
    })
}

const BUDGET: &str = "clients/vectors/budget.json";

/// Retry budgets (Finagle's) fed the same deposits and retries at the same
/// times: each retry's verdict, for every client to reproduce.
fn budget_vectors() -> Value {
    use rand::{Rng, SeedableRng};
    use stormguard_core::budget::RetryBudget;
    use stormguard_core::policy::BudgetPolicy;
    use tokio::time::Instant;

    let policies = [(0.2, 1, 10_000), (0.5, 0, 1_000), (0.1, 2, 60_000), (0.2, 0, 5)];
    let mut scenarios = Vec::new();
    for (seed, (ratio, floor, ttl_ms)) in policies.into_iter().enumerate() {
        let policy = BudgetPolicy {
            enabled: true,
            retry_ratio: ratio,
            min_retries_per_second: floor,
            ttl: Duration::from_millis(ttl_ms),
        };
        let t0 = Instant::now();
        let budget = RetryBudget::new_at(&policy, t0);
        let mut rng = rand::rngs::SmallRng::seed_from_u64(seed as u64);
        let step = (ttl_ms * 1_000_000 / 10).max(1_000_000);
        let mut at = 0u64;
        let mut ops = Vec::new();
        for _ in 0..400 {
            at += rng.random_range(0..step / 2);
            let now = t0 + Duration::from_nanos(at);
            if rng.random_bool(0.5) {
                budget.deposit_at(now);
                ops.push(json!(["deposit", at]));
            } else {
                ops.push(json!(["retry", at, budget.try_retry_at(now)]));
            }
        }
        scenarios.push(json!({
            "retryRatio": ratio,
            "minRetriesPerSecond": floor,
            "ttlNanos": ttl_ms * 1_000_000,
            "ops": ops,
        }));
    }
    json!({
        "about": "stormguard-core's retry budget: for each scenario, a budget created at time 0 and fed `deposit` (a first attempt) and `retry` (a retry asking the budget, with the verdict core gave) at the given nanoseconds. Regenerate with STORMGUARD_WRITE_VECTORS=1 cargo test --test vectors.",
        "scenarios": scenarios,
    })
}

#[test]
fn the_committed_budget_vectors_are_what_core_decides() {
    check_or_write(BUDGET, &budget_vectors());
}

/// Writes `value` to `path` under STORMGUARD_WRITE_VECTORS; fails when the
/// committed file differs from it.
fn check_or_write(path: &str, value: &impl serde::Serialize) {
    let text = serde_json::to_string_pretty(value).unwrap() + "\n";
    if std::env::var_os("STORMGUARD_WRITE_VECTORS").is_some() {
        std::fs::write(path, &text).unwrap();
    }
    let committed = std::fs::read_to_string(path).unwrap_or_default();
    assert!(
        committed == text,
        "{path} is not what stormguard-core computes: regenerate it with STORMGUARD_WRITE_VECTORS=1"
    );
}

const RETRY_ON: &str = "clients/vectors/retry-on.json";

/// Which answers each `retryOn` list retries: every HTTP status from 100 to
/// 599, and the three failures without one.
fn retry_on_vectors() -> Value {
    use stormguard_core::policy::{RetryCondition, RetryOn};

    let lists = [
        RetryOn::default(),
        RetryOn(vec![RetryCondition::GatewayError]),
        RetryOn(vec![RetryCondition::ServerError, RetryCondition::Status(409)]),
        RetryOn(vec![RetryCondition::ConnectFailure, RetryCondition::Timeout]),
        RetryOn(vec![]),
    ];
    let failures = [
        ("connect-failure", RetryCondition::ConnectFailure),
        ("timeout", RetryCondition::Timeout),
        ("reset", RetryCondition::Reset),
    ];
    let cases: Vec<Value> = lists
        .iter()
        .map(|list| {
            json!({
                "retryOn": list,
                "statuses": (100u16..600).filter(|s| list.covers_status(*s)).collect::<Vec<_>>(),
                "failures": failures.iter().filter(|(_, c)| list.contains(*c)).map(|(name, _)| *name).collect::<Vec<_>>(),
            })
        })
        .collect();
    json!({
        "about": "stormguard-core's retryOn: for each list, as a policy serves it, the HTTP statuses from 100 to 599 it retries and the failures without a status (connect-failure, timeout, reset) it retries. Regenerate with STORMGUARD_WRITE_VECTORS=1 cargo test --test vectors.",
        "cases": cases,
    })
}

#[test]
fn the_committed_retry_on_vectors_are_what_core_retries() {
    check_or_write(RETRY_ON, &retry_on_vectors());
}

const DEFAULT_POLICY: &str = "clients/vectors/default-policy.json";

/// The policy a client applies when it has neither the daemon's answer nor
/// a cache: the built-in defaults, as the daemon serves a policy.
#[test]
fn the_committed_default_policy_is_cores() {
    let policy = stormguard_core::policy::RetryPolicy::default();
    check_or_write(DEFAULT_POLICY, &policy);
}

#[test]
fn the_committed_vectors_are_what_core_computes() {
    check_or_write(PATH, &vectors());
}
