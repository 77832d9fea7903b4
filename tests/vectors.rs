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

#[path = "vectors/gate.rs"]
mod gate;

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
/// times: each retry's verdict, for every client to reproduce. A
/// fleet-scoped budget's scenario also hands it the daemon's answers (its
/// part of the floor, the processes sharing it) and the reports it could
/// not deliver, which it takes as its floor as `LocalFloor` says.
fn budget_vectors() -> Value {
    use rand::{Rng, SeedableRng};
    use stormguard_core::budget::RetryBudget;
    use stormguard_core::fleet::floor::{LocalFloor, Part};
    use stormguard_core::policy::{BudgetPolicy, BudgetScope};
    use tokio::time::Instant;

    let process = BudgetScope::Process;
    let fleet = BudgetScope::Fleet;
    let policies = [
        (0.2, 1, 10_000, process),
        (0.5, 0, 1_000, process),
        (0.1, 2, 60_000, process),
        (0.2, 0, 5, process),
        (0.2, 10, 10_000, fleet),
        (0.05, 3, 2_000, fleet),
    ];
    // Parts a daemon hands out: shares of a fleet, more than the floor, less than nothing.
    let answers = [(0.05, 200), (2.5, 4), (0.0, 12), (50.0, 1), (-1.0, 3), (1.0, 10)];
    let mut scenarios = Vec::new();
    for (seed, (ratio, floor, ttl_ms, scope)) in policies.into_iter().enumerate() {
        let policy = BudgetPolicy {
            enabled: true,
            retry_ratio: ratio,
            min_retries_per_second: floor,
            ttl: Duration::from_millis(ttl_ms),
            scope,
        };
        let t0 = Instant::now();
        let budget = RetryBudget::new_at(&policy, t0);
        let mut local = LocalFloor::new(f64::from(floor));
        let mut rng = rand::rngs::SmallRng::seed_from_u64(seed as u64);
        let step = (ttl_ms * 1_000_000 / 10).max(1_000_000);
        let mut at = 0u64;
        let mut ops = Vec::new();
        for _ in 0..400 {
            at += rng.random_range(0..step / 2);
            let now = t0 + Duration::from_nanos(at);
            if scope == fleet && rng.random_bool(0.05) {
                if rng.random_bool(0.7) {
                    let (per_second, processes) = answers[rng.random_range(0..answers.len())];
                    budget.set_min_retries_per_second(local.answered(Part {
                        per_second,
                        processes,
                    }));
                    ops.push(json!(["answer", at, per_second, processes]));
                } else {
                    budget.set_min_retries_per_second(local.unreachable());
                    ops.push(json!(["unreachable", at]));
                }
            } else if rng.random_bool(0.5) {
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
            "scope": scope.name(),
            "ops": ops,
        }));
    }
    json!({
        "about": "stormguard-core's retry budget: for each scenario, a budget created at time 0 and fed `deposit` (a first attempt) and `retry` (a retry asking the budget, with the verdict core gave) at the given nanoseconds. A fleet-scoped budget also gets `answer` (the daemon's answer to a report: this process's part of the floor in retries a second, and the processes sharing it) and `unreachable` (a report not delivered); its floor is the part, at most the configured floor and at least 0, or while unreachable the configured floor divided by the processes last heard of (the whole floor before any answer). Regenerate with STORMGUARD_WRITE_VECTORS=1 cargo test --test vectors.",
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
    check_or_write_text(path, serde_json::to_string_pretty(value).unwrap() + "\n");
}

/// [`check_or_write`] of `text` as it is.
fn check_or_write_text(path: &str, text: String) {
    if std::env::var_os("STORMGUARD_WRITE_VECTORS").is_some() {
        std::fs::write(path, &text).unwrap();
    }
    let committed = std::fs::read_to_string(path).unwrap_or_default();
    assert!(
        committed == text,
        "{path} is not what stormguard-core computes: regenerate it with STORMGUARD_WRITE_VECTORS=1"
    );
}

const BREAKER: &str = "clients/vectors/breaker.json";

/// Circuit breakers fed the same asks, outcomes and cancellations at the
/// same times: each ask's verdict and the state after every step, for
/// every client to reproduce.
fn breaker_vectors() -> Value {
    use rand::{Rng, SeedableRng};
    use stormguard_core::breaker::{CallOutcome, CircuitBreaker, CircuitState, Permit};
    use stormguard_core::fleet::breaker::BreakerVerdict;
    use stormguard_core::policy::{BreakerScope, CircuitBreakerPolicy, SlidingWindow};
    use tokio::time::Instant;

    let count = |calls| SlidingWindow::Count { calls };
    let time = |ms| SlidingWindow::Time {
        duration: Duration::from_millis(ms),
    };
    use BreakerScope::{Fleet, Process};
    // (consecutive, failure rate, slow rate, slow ms, minimum calls, window, open ms, half-open calls, successes, scope)
    let shapes = [
        (3, 0.5, 1.0, 2_000, 5, count(10), 1_000, 2, 2, Process),
        (0, 0.3, 0.5, 100, 10, time(10_000), 5_000, 1, 1, Process),
        (0, 0.6, 1.0, 60_000, 100, count(4), 700, 3, 3, Process),
        (5, 0.5, 1.0, 60_000, 100, count(100), 30_000, 10, 3, Process),
        (2, 1.0, 0.25, 250, 3, time(1_500), 400, 4, 2, Process),
        (3, 0.5, 1.0, 2_000, 5, count(10), 1_000, 2, 2, Fleet),
        (2, 0.5, 0.5, 300, 3, time(2_000), 3_000, 3, 2, Fleet),
        // Runs that chance explains, and outages after them.
        (3, 0.5, 1.0, 60_000, 20, count(40), 1_000, 2, 2, Process),
        (4, 0.45, 1.0, 60_000, 15, time(5_000), 800, 2, 1, Process),
    ];
    let mut excused = 0;
    let mut scenarios = Vec::new();
    for (
        seed,
        (
            consecutive,
            failure_rate,
            slow_rate,
            slow_ms,
            minimum,
            window,
            open_ms,
            half_open,
            successes,
            scope,
        ),
    ) in shapes.into_iter().enumerate()
    {
        let policy = CircuitBreakerPolicy {
            enabled: true,
            consecutive_failures: consecutive,
            failure_rate_threshold: failure_rate,
            slow_call_rate_threshold: slow_rate,
            slow_call_duration: Duration::from_millis(slow_ms),
            minimum_calls: minimum,
            sliding_window: window,
            open_timeout: Duration::from_millis(open_ms),
            half_open_max_calls: half_open,
            success_threshold: successes,
            scope,
        };
        let t0 = Instant::now();
        let breaker = CircuitBreaker::new_at(&policy, t0);
        let mut rng = rand::rngs::SmallRng::seed_from_u64(100 + seed as u64);
        let step = open_ms * 1_000_000 / 6;
        let mut at = 0u64;
        let mut permits: Vec<(usize, Permit)> = Vec::new();
        let mut granted = 0usize;
        let mut ops = Vec::new();
        for i in 0..600 {
            at += rng.random_range(0..step);
            let now = t0 + Duration::from_nanos(at);
            // Phases: healthy, failing, failing at random, down.
            let failing = [0.05, 0.9, 0.3, 1.0][(i / 75) % 4];
            if scope == Fleet && rng.random_bool(0.25) {
                ops.push(fleet_op(&breaker, &mut rng, at, now));
                continue;
            }
            if permits.is_empty() || (permits.len() < 12 && rng.random_bool(0.5)) {
                let verdict = match breaker.try_acquire_at(now) {
                    Ok(permit) => {
                        let verdict = json!(["permit", granted, permit.is_trial()]);
                        permits.push((granted, permit));
                        granted += 1;
                        verdict
                    }
                    Err(refused) => json!([refused.state.name(), refused.retry_in.as_nanos() as u64]),
                };
                ops.push(json!(["acquire", at, verdict, breaker.state().name()]));
                continue;
            }
            let (id, permit) = permits.swap_remove(rng.random_range(0..permits.len()));
            if rng.random_bool(0.1) {
                drop(permit);
                ops.push(json!(["cancel", at, id, breaker.state().name()]));
                continue;
            }
            // Of the failures, most are refusals (a 503, say) that say overload or down.
            let (outcome, name) = if !rng.random_bool(failing) {
                (CallOutcome::Success, "success")
            } else if rng.random_bool(0.6) {
                (CallOutcome::Refused, "refused")
            } else {
                (CallOutcome::Failure, "failure")
            };
            permit.record_at(outcome, now);
            let run = breaker.snapshot().consecutive_failures;
            excused +=
                usize::from(breaker.state() == CircuitState::Closed && consecutive > 0 && run >= consecutive);
            ops.push(json!(["record", at, id, name, breaker.state().name()]));
        }
        scenarios.push(json!({ "policy": policy, "ops": ops }));
    }
    assert!(
        excused > 0,
        "no run was excused as chance: the vectors do not check the rule"
    );
    /// A fleet-scoped breaker hears a random word from the daemon (as
    /// [state, trial slots, nanoseconds to retry in, nanoseconds the word
    /// holds], and whether it closed the breaker), or reports what it has
    /// to tell (as [open, nanoseconds open, calls refused, trials
    /// succeeded, trials failed]).
    fn fleet_op(breaker: &CircuitBreaker, rng: &mut impl Rng, at: u64, now: Instant) -> Value {
        if rng.random_bool(0.3) {
            let report = breaker.fleet_report_at(now).expect("fleet-scoped");
            let fields = json!([
                report.open,
                report.open_for.as_nanos() as u64,
                report.refused,
                report.succeeded,
                report.failed
            ]);
            return json!(["report", at, fields, breaker.state().name()]);
        }
        let state =
            [CircuitState::Open, CircuitState::HalfOpen, CircuitState::Closed][rng.random_range(0..3)];
        let verdict = BreakerVerdict {
            state,
            trials: u32::from(state == CircuitState::HalfOpen && rng.random_bool(0.6)),
            retry_in: Duration::from_millis(rng.random_range(0..2_000)),
        };
        let lease = Duration::from_millis(rng.random_range(100..1_500));
        let closed = breaker.heard_at(verdict, now + lease, now);
        let fields = json!([
            state.name(),
            verdict.trials,
            verdict.retry_in.as_nanos() as u64,
            lease.as_nanos() as u64
        ]);
        json!(["heard", at, fields, closed, breaker.state().name()])
    }

    json!({
        "about": "stormguard-core's circuit breaker: for each scenario, a breaker with `policy` (a policy's circuitBreaker block as the daemon serves it) created at time 0 and fed, at the given nanoseconds: `acquire` (a call asks leave; the verdict is [\"permit\", its id, whether it is a half-open trial] or [the refusing state, nanoseconds until trial calls are admitted]), `record` (the permit with that id ends with that outcome: success, failure, or refused, the dependency refusing it as overloaded with no send gate pacing it; its duration since its acquire decides whether it was slow) and `cancel` (the permit's call was cancelled, unrecorded). A fleet-scoped breaker (scope: fleet) also gets `heard` (the daemon's word on the fleet's breaker: [state, trial slots granted, nanoseconds until it retries, nanoseconds the word holds], then whether it closed the breaker) and `report` (what it tells the daemon, which resets its counts: [open, nanoseconds since it opened from closed, calls refused since the last report, trials on the daemon's slots that succeeded, and that failed or were slow]). Each op ends with the breaker's state after it. Regenerate with STORMGUARD_WRITE_VECTORS=1 cargo test --test vectors.",
        "scenarios": scenarios,
    })
}

#[test]
fn the_committed_breaker_vectors_are_what_core_decides() {
    let vectors = breaker_vectors();
    let states: std::collections::BTreeSet<&str> = vectors["scenarios"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|s| s["ops"].as_array().unwrap())
        .filter_map(|op| op.as_array().unwrap().last().unwrap().as_str())
        .collect();
    assert_eq!(states.len(), 3, "the scenarios visit every state: {states:?}");
    check_or_write(BREAKER, &vectors);
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

/// The range of every policy setting: the file, and the copies the Go and
/// Python clients carry inside their packages.
const LIMITS: [&str; 3] = [
    "clients/vectors/limits.json",
    "clients/go/internal/limits/limits.json",
    "clients/python/stormguard_client/limits.json",
];

/// The ranges the daemon validates a policy against, for the clients to
/// check a policy against the same.
#[test]
fn the_committed_limits_are_cores() {
    let limits = json!({
        "about": "stormguard-core's range for each policy setting, as the daemon validates it: `key` names the setting as the daemon's messages do, `unit` says what `low` and `high` count (count: a whole number, number: a real number, duration: nanoseconds), `lowAllowed` and `highAllowed` whether each end itself is allowed, and `refusals` what the values just outside the range are told, word for word (durations as a policy file writes them). gate.maxRate is never below the policy's gate.minRate either. Regenerate with STORMGUARD_WRITE_VECTORS=1 cargo test --test vectors.",
        "limits": stormguard_core::policy::limits::all()
            .into_iter()
            .map(with_refusals)
            .collect::<Vec<_>>(),
    });
    for path in LIMITS {
        check_or_write(path, &limits);
    }
}

/// `range` as JSON, with what the values just outside it are told.
fn with_refusals(range: stormguard_core::policy::limits::Range) -> serde_json::Value {
    let refusals: Vec<_> = range
        .just_outside()
        .into_iter()
        .map(|value| json!({"value": value, "message": range.refusal(value)}))
        .collect();
    let mut value = serde_json::to_value(range).unwrap();
    value["refusals"] = json!(refusals);
    value
}

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

#[test]
fn the_committed_gate_vectors_are_what_core_decides() {
    let (vectors, seen) = gate::vectors();
    for phase in [
        "probing",
        "slow_start",
        "beta_cut",
        "cubic",
        "regrown",
        "turned_off",
        "watching",
        "answering",
        "refusal_not_overload",
        "paced_by_fleet",
        "evidence_down",
        "accepted_after_an_outage_run",
        "trial_found_random",
    ] {
        assert!(
            seen.contains(phase),
            "the gate vectors no longer visit {phase}: visited {seen:?}"
        );
    }
    // One op to a line: pretty-printed, the file would be three times the size.
    check_or_write_text(gate::PATH, gate::one_op_a_line(&vectors));
}
