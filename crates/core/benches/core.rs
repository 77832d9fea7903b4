//! Hot-path costs of stormguard-core, side by side with the crates that do
//! the same job: `backon`'s exponential backoff and tower's `TpsBudget`.
//!
//! Run with `cargo bench -p stormguard-core`. Each benchmark's time is per
//! item: per delay for backoff schedules, per request for the budgets, per
//! call for the breaker. Threaded cases share one instance between threads.

use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBuilder};
use divan::{black_box, Bencher};
use rand::rngs::SmallRng;
use rand::SeedableRng;
use stormguard_core::backoff::Backoff;
use stormguard_core::breaker::{CallOutcome, CircuitBreaker};
use stormguard_core::budget::{RetryBudget, RetryThrottle};
use stormguard_core::policy::{
    BudgetPolicy, CircuitBreakerPolicy, Jitter, RetryPolicy, RetryThrottlingPolicy,
};
use tower::retry::budget::{Budget, TpsBudget};

fn main() {
    divan::main();
}

/// Delays in one schedule: a retry sequence of 10 attempts.
const SCHEDULE: u32 = 10;

fn backoff(jitter: Jitter) -> Backoff {
    Backoff::from_policy(&RetryPolicy {
        jitter,
        max_retries: SCHEDULE,
        ..RetryPolicy::default()
    })
}

fn backon(jitter: bool) -> ExponentialBuilder {
    let builder = ExponentialBuilder::new()
        .with_min_delay(Duration::from_millis(100))
        .with_max_delay(Duration::from_secs(10))
        .with_factor(2.0)
        .with_max_times(SCHEDULE as usize)
        .with_jitter_seed(7);
    if jitter {
        builder.with_jitter()
    } else {
        builder
    }
}

/// One schedule of delays, computed the stateless way: the caller owns the attempt counter.
fn schedule(bencher: Bencher, jitter: Jitter) {
    let backoff = backoff(jitter);
    let mut rng = SmallRng::seed_from_u64(7);
    bencher
        .counter(divan::counter::ItemsCount::new(SCHEDULE))
        .bench_local(|| {
            let mut previous = Duration::ZERO;
            let mut total = Duration::ZERO;
            for attempt in 0..SCHEDULE {
                previous = backoff.delay(black_box(attempt), previous, &mut rng);
                total += previous;
            }
            total
        });
}

mod delay {
    use super::*;

    #[divan::bench]
    fn exponential(bencher: Bencher) {
        schedule(bencher, Jitter::None);
    }

    #[divan::bench]
    fn full_jitter(bencher: Bencher) {
        schedule(bencher, Jitter::Full);
    }

    #[divan::bench]
    fn equal_jitter(bencher: Bencher) {
        schedule(bencher, Jitter::Equal);
    }

    #[divan::bench]
    fn decorrelated_jitter(bencher: Bencher) {
        schedule(bencher, Jitter::Decorrelated);
    }

    #[divan::bench]
    fn proportional_jitter(bencher: Bencher) {
        schedule(bencher, Jitter::Proportional);
    }

    #[divan::bench]
    fn explicit_delays(bencher: Bencher) {
        let mut policy = RetryPolicy {
            jitter: Jitter::None,
            ..RetryPolicy::default()
        };
        policy.delays = (1..=SCHEDULE as u64)
            .map(|n| Duration::from_millis(n * 100))
            .collect();
        let backoff = Backoff::from_policy(&policy);
        let mut rng = SmallRng::seed_from_u64(7);
        bencher
            .counter(divan::counter::ItemsCount::new(SCHEDULE))
            .bench_local(|| {
                let mut total = Duration::ZERO;
                for attempt in 0..SCHEDULE {
                    total += backoff.delay(black_box(attempt), total, &mut rng);
                }
                total
            });
    }

    /// Reference: backon's exponential backoff, without jitter.
    #[divan::bench]
    fn backon_exponential(bencher: Bencher) {
        let builder = backon(false);
        bencher
            .counter(divan::counter::ItemsCount::new(SCHEDULE))
            .bench_local(|| black_box(builder).build().sum::<Duration>());
    }

    /// Reference: backon's exponential backoff with its jitter (one draw per delay, as full jitter).
    #[divan::bench]
    fn backon_exponential_jitter(bencher: Bencher) {
        let builder = backon(true);
        bencher
            .counter(divan::counter::ItemsCount::new(SCHEDULE))
            .bench_local(|| black_box(builder).build().sum::<Duration>());
    }
}

/// A request and its retry: one deposit and one withdrawal.
mod budget {
    use super::*;

    const THREADS: &[usize] = &[1, 2];

    #[divan::bench(threads = THREADS)]
    fn retry_budget(bencher: Bencher) {
        let budget = RetryBudget::new(&BudgetPolicy::default());
        bencher.bench(|| {
            budget.deposit();
            budget.try_retry()
        });
    }

    /// Reference: tower's TpsBudget with the same settings (10 s, 10/s, 20 %).
    #[divan::bench(threads = THREADS)]
    fn tower_tps_budget(bencher: Bencher) {
        let budget = TpsBudget::new(Duration::from_secs(10), 10, 0.2);
        bencher.bench(|| {
            budget.deposit();
            budget.withdraw()
        });
    }

    #[divan::bench(threads = THREADS)]
    fn retry_throttle(bencher: Bencher) {
        let throttle = RetryThrottle::new(&RetryThrottlingPolicy::default());
        bencher.bench(|| {
            throttle.on_success();
            throttle.allows_retry()
        });
    }
}

/// One call through a closed breaker: a permit, then its outcome.
mod breaker {
    use super::*;

    #[divan::bench(threads = [1, 2])]
    fn permit_and_record(bencher: Bencher) {
        let breaker = CircuitBreaker::new(&CircuitBreakerPolicy {
            enabled: true,
            ..CircuitBreakerPolicy::default()
        });
        bencher.bench(|| {
            if let Ok(permit) = breaker.try_acquire() {
                permit.record(CallOutcome::Success);
            }
        });
    }
}

/// One successful call's decisions, from its start to its answer, through
/// a guard with no other block: without a send gate, and with one that is
/// off (the dependency is healthy). The difference is what the gate costs
/// a healthy service. The time is taken once, as a caller that already read
/// the clock would.
mod call {
    use super::*;
    use stormguard_core::call::{Answer, Answered, Call, Step};
    use stormguard_core::guard::Guard;
    use stormguard_core::policy::{GatePolicy, ValidPolicy};

    fn healthy_call(bencher: Bencher, gate: bool) {
        let policy = ValidPolicy::try_from(RetryPolicy {
            budget: BudgetPolicy {
                enabled: false,
                ..BudgetPolicy::default()
            },
            gate: GatePolicy {
                enabled: gate,
                ..GatePolicy::default()
            },
            ..RetryPolicy::default()
        })
        .unwrap();
        let now = tokio::time::Instant::now();
        let guard = Guard::from_policy_at(&policy, now);
        let mut rng = SmallRng::seed_from_u64(1);
        bencher.bench_local(|| {
            let now = black_box(now);
            let mut call = Call::begin_at(&guard, now, None);
            let Step::Send(send) = call.next_at(&guard, now, None) else {
                unreachable!("a healthy call sends at once");
            };
            let answered = call.answered_at(&guard, send, Answer::Succeeded, now, &mut rng);
            assert_eq!(answered, Answered::Succeeded);
        });
    }

    #[divan::bench]
    fn without_gate(bencher: Bencher) {
        healthy_call(bencher, false);
    }

    #[divan::bench]
    fn gate_off(bencher: Bencher) {
        healthy_call(bencher, true);
    }
}

/// One clock read, for scale: a budget check or a breaker call reads the clock twice.
mod clock {
    #[divan::bench]
    fn tokio_now() -> tokio::time::Instant {
        tokio::time::Instant::now()
    }
}
