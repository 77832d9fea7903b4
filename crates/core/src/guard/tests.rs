//! Tests of a call through the guard: backoff, the breaker, budgets and throttling, hedges, and
//! the send gate's line.

use super::*;
use std::cell::RefCell;
use std::time::Duration;

use tokio::time::{sleep, Instant};

use crate::breaker::CircuitState;
use crate::call::Options;
use crate::policy::{
    BudgetPolicy, CircuitBreakerPolicy, GatePolicy, HedgingPolicy, Jitter, RetryCondition, RetryOn,
    RetryPolicy, RetryThrottlingPolicy,
};
use crate::retry::{Cause, Failure, GaveUp};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// 3 retries at 100, 200, 400 ms; no budget unless a test adds one.
fn policy() -> RetryPolicy {
    RetryPolicy {
        jitter: Jitter::None,
        budget: BudgetPolicy {
            enabled: false,
            ..BudgetPolicy::default()
        },
        ..RetryPolicy::default()
    }
}

fn valid(policy: RetryPolicy) -> ValidPolicy {
    policy.try_into().expect("a valid policy")
}

fn unavailable() -> Failure {
    Failure::Status {
        code: 503,
        retry_after: None,
    }
}

/// An error the dependency answered with (retried, but no sign of overload).
fn server_error() -> Failure {
    Failure::Status {
        code: 500,
        retry_after: None,
    }
}

/// Calls through `guard` with an operation that always answers `failure`,
/// returning the error and the attempts the operation saw.
async fn failing_call(guard: &Guard, failure: Failure) -> (RetryError<Failure>, Vec<Attempt>) {
    let seen = RefCell::new(Vec::new());
    let error = guard
        .call(
            |attempt| {
                seen.borrow_mut().push(attempt);
                async move { Err::<(), _>(failure) }
            },
            |f| guard.verdict(*f),
            Options::default(),
        )
        .await
        .unwrap_err();
    (error, seen.into_inner())
}

/// A guard whose breaker opens after two failures in a row.
fn opens_after_two_failures() -> Guard {
    let mut p = policy();
    p.circuit_breaker = CircuitBreakerPolicy {
        enabled: true,
        consecutive_failures: 2,
        ..CircuitBreakerPolicy::default()
    };
    Guard::from_policy(&valid(p))
}

#[test]
fn each_block_is_set_up_only_when_enabled() {
    let plain = Guard::from_policy(&valid(policy()));
    assert!(plain.budget().is_none() && plain.throttle().is_none());
    assert!(plain.breaker().is_none() && plain.hedge().is_none());

    let mut all = policy();
    all.budget.enabled = true;
    all.retry_throttling.enabled = true;
    all.circuit_breaker.enabled = true;
    all.hedging = HedgingPolicy {
        enabled: true,
        delay: ms(20),
        max_hedges: 2,
    };
    let guard = Guard::from_policy(&valid(all));
    assert!(guard.budget().is_some() && guard.throttle().is_some() && guard.breaker().is_some());
    assert_eq!(
        guard.hedge(),
        Some(&Hedge {
            delay: ms(20),
            max_hedges: 2
        })
    );
    assert_eq!(guard.retry().max_retries, 3);
}

#[tokio::test(start_paused = true)]
async fn an_update_keeps_the_state_of_blocks_it_did_not_change() {
    let guard = opens_after_two_failures();
    failing_call(&guard, server_error()).await;
    assert_eq!(guard.breaker().unwrap().state(), CircuitState::Open);

    let mut fewer_retries = RetryPolicy::from(guard.policy().clone());
    fewer_retries.max_retries = 1;
    let next = guard.updated(&valid(fewer_retries.clone()));
    assert_eq!(next.retry().max_retries, 1);
    assert_eq!(
        next.breaker().unwrap().state(),
        CircuitState::Open,
        "same breaker block: same breaker"
    );

    let mut new_breaker = fewer_retries.clone();
    new_breaker.circuit_breaker.consecutive_failures = 9;
    let retuned = next.updated(&valid(new_breaker.clone()));
    assert_eq!(
        retuned.breaker().unwrap().state(),
        CircuitState::Open,
        "a changed block retunes the breaker; it stays open"
    );
    assert_eq!(
        retuned.policy().circuit_breaker.consecutive_failures,
        9,
        "under the new block"
    );

    let mut off = new_breaker.clone();
    off.circuit_breaker.enabled = false;
    let off = retuned.updated(&valid(off));
    assert!(off.breaker().is_none());
    let on = off.updated(&valid(new_breaker));
    assert_eq!(
        on.breaker().unwrap().state(),
        CircuitState::Closed,
        "turned off and on: a new breaker"
    );
}

#[tokio::test(start_paused = true)]
async fn an_update_retunes_the_send_gate_unless_it_changes_what_says_overload() {
    let mut gated = policy();
    gated.gate.enabled = true;
    gated.gate.overload_when = crate::policy::OverloadWhen::AnyRefusal;
    let guard = Guard::from_policy(&valid(gated.clone()));
    let gate = guard.gate().unwrap();
    let now = Instant::now();
    gate.record_at(crate::gate::Signal::Overloaded, now, now);
    assert!(gate.is_on());

    let mut quieter = gated;
    quieter.gate.quiet = Duration::from_secs(60);
    quieter.gate.min_rate = 2.0;
    let next = guard.updated(&valid(quieter.clone()));
    let kept = next.gate().unwrap();
    assert!(kept.is_on(), "still pacing: new calls wait in the same line");
    assert_eq!(kept.own_rate(), Some(2.0), "probing, at the new lowest rate");
    assert_eq!(kept.policy().quiet, Duration::from_secs(60));

    let mut hears_otherwise = quieter;
    hears_otherwise.gate.overload_when = crate::policy::OverloadWhen::Evidence;
    let fresh = next.updated(&valid(hears_otherwise));
    assert!(!fresh.gate().unwrap().is_on(), "a new gate, off, learns afresh");
    assert!(kept.is_on(), "calls in flight keep theirs");
}

#[tokio::test(start_paused = true)]
async fn a_plain_policy_retries_with_its_backoff() {
    let guard = Guard::from_policy(&valid(policy()));
    let start = Instant::now();
    let (error, seen) = failing_call(&guard, unavailable()).await;
    assert_eq!((error.attempts, error.gave_up), (4, GaveUp::Exhausted));
    assert_eq!(seen.len(), 4);
    assert_eq!(start.elapsed(), ms(700), "waits of 100, 200 and 400 ms");
}

#[tokio::test(start_paused = true)]
async fn an_open_breaker_ends_the_call_before_anything_is_sent() {
    let guard = opens_after_two_failures();
    let (error, seen) = failing_call(&guard, server_error()).await;
    assert_eq!(
        (error.attempts, error.gave_up),
        (2, GaveUp::CircuitOpen),
        "the third attempt was refused"
    );
    assert_eq!(seen.len(), 2);
    assert_eq!(guard.breaker().unwrap().state(), CircuitState::Open);

    let (error, seen) = failing_call(&guard.clone(), server_error()).await;
    assert_eq!(
        (error.attempts, error.gave_up, error.last),
        (0, GaveUp::CircuitOpen, Cause::None)
    );
    assert!(seen.is_empty(), "clones share the breaker");
}

#[tokio::test(start_paused = true)]
async fn without_a_gate_refusals_trip_the_breaker_half_open_and_only_a_window_with_none_accepted_opens_it() {
    let guard = opens_after_two_failures();
    let (error, seen) = failing_call(&guard, unavailable()).await;
    assert_eq!(
        seen.len(),
        3,
        "two refusals trip it; the third attempt is its first trial"
    );
    assert_eq!(error.gave_up, GaveUp::CircuitOpen, "the next was held back");
    let breaker = guard.breaker().unwrap();
    assert_eq!(
        breaker.state(),
        CircuitState::HalfOpen,
        "503s say overloaded, or down: trials tell which"
    );

    for _ in 0..12 {
        sleep(Duration::from_secs(1)).await;
        failing_call(&guard, unavailable()).await;
    }
    assert_eq!(
        breaker.state(),
        CircuitState::Open,
        "ten seconds of trials, none accepted"
    );

    let guard = opens_after_two_failures();
    failing_call(&guard, unavailable()).await;
    for second in 0..30 {
        sleep(Duration::from_secs(1)).await;
        let answer = if second % 3 == 0 {
            Ok(())
        } else {
            Err(unavailable())
        };
        let _ = guard
            .call(
                |_| async move { answer },
                |f| guard.verdict(*f),
                Options::default(),
            )
            .await;
    }
    assert_eq!(
        guard.breaker().unwrap().state(),
        CircuitState::HalfOpen,
        "a dependency that takes a third of the calls is up: the trials go on"
    );
}

#[tokio::test(start_paused = true)]
async fn failures_that_are_not_retryable_do_not_open_the_breaker() {
    let guard = opens_after_two_failures();
    for _ in 0..5 {
        let (error, _) = failing_call(
            &guard,
            Failure::Status {
                code: 404,
                retry_after: None,
            },
        )
        .await;
        assert_eq!(error.gave_up, GaveUp::NotRetryable);
    }
    assert_eq!(guard.breaker().unwrap().state(), CircuitState::Closed);
}

#[tokio::test(start_paused = true)]
async fn a_shared_budget_caps_retries_across_calls() {
    let mut p = policy();
    p.budget = BudgetPolicy {
        enabled: true,
        retry_ratio: 0.0,
        min_retries_per_second: 1,
        ttl: Duration::from_secs(10),
        ..BudgetPolicy::default()
    };
    let guard = Guard::from_policy(&valid(p));
    let mut sent = 0;
    let mut refused = 0;
    for _ in 0..5 {
        let (error, seen) = failing_call(&guard.clone(), unavailable()).await;
        sent += seen.len();
        refused += usize::from(error.gave_up == GaveUp::BudgetExhausted);
    }
    assert_eq!(
        sent,
        5 + 10,
        "5 first attempts and the 10 retries 1/s × 10 s allows"
    );
    assert_eq!(
        refused, 2,
        "three calls retry 3 times each, the fourth once, the fifth not at all"
    );
}

#[tokio::test(start_paused = true)]
async fn throttling_stops_retries_below_half_the_tokens() {
    let mut p = policy();
    p.retry_throttling = RetryThrottlingPolicy {
        enabled: true,
        max_tokens: 4,
        token_ratio: 0.1,
    };
    let guard = Guard::from_policy(&valid(p));
    let (error, seen) = failing_call(&guard, unavailable()).await;
    assert_eq!(error.gave_up, GaveUp::BudgetExhausted);
    assert_eq!(seen.len(), 2, "4 tokens, 2 failures leave 2: not more than half");
}

#[tokio::test(start_paused = true)]
async fn hedges_run_inside_each_attempt() {
    let mut p = policy();
    p.hedging = HedgingPolicy {
        enabled: true,
        delay: ms(50),
        max_hedges: 1,
    };
    let guard = Guard::from_policy(&valid(p));
    let start = Instant::now();
    let reply = guard
        .call(
            |attempt| async move {
                match attempt {
                    Attempt { retry: 0, .. } => Err(unavailable()),
                    Attempt { hedge: 0, .. } => {
                        sleep(Duration::from_secs(10)).await;
                        Ok(attempt)
                    }
                    _ => Ok(attempt),
                }
            },
            |f| guard.verdict(*f),
            Options::default(),
        )
        .await;
    assert_eq!(reply, Ok(Attempt { retry: 1, hedge: 1 }));
    assert_eq!(
        start.elapsed(),
        ms(150),
        "attempt 0 and its hedge failed at once; the retry's hedge answered 50 ms after its 100 ms wait"
    );
}

/// The send gate on under `overloadWhen: any-refusal` (a herd's refusals
/// are a capacity's), with no budget unless a test adds one.
fn gated() -> RetryPolicy {
    RetryPolicy {
        max_retries: 100,
        max_delay: Duration::from_secs(1),
        gate: waiting_gate(),
        ..policy()
    }
}

/// A gate under `overloadWhen: any-refusal` whose callers wait for a turn
/// however long it takes (an hour), unless their deadline says otherwise.
fn waiting_gate() -> GatePolicy {
    let hour = Duration::from_secs(3600);
    GatePolicy {
        enabled: true,
        overload_when: crate::policy::OverloadWhen::AnyRefusal,
        max_wait: crate::policy::MaxWait {
            critical: hour,
            default: hour,
            sheddable: hour,
        },
        ..GatePolicy::default()
    }
}

/// `callers` calls at once through `guard` to a service that refuses every
/// request until `down` has passed; returns when each request was sent,
/// and each call's result.
async fn herd(guard: &Guard, callers: usize, down: Duration) -> (Vec<Duration>, Vec<Result<(), GaveUp>>) {
    let (sent, results) = herd_by_caller(guard, callers, down).await;
    (sent.into_iter().map(|(_, at)| at).collect(), results)
}

/// [`herd`], with the caller (0, 1, ... in the order the calls began) of each request.
async fn herd_by_caller(
    guard: &Guard,
    callers: usize,
    down: Duration,
) -> (Vec<(usize, Duration)>, Vec<Result<(), GaveUp>>) {
    let start = Instant::now();
    let sent = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut calls = tokio::task::JoinSet::new();
    for caller in 0..callers {
        let (guard, sent) = (guard.clone(), sent.clone());
        calls.spawn(async move {
            let result = guard
                .call(
                    |_| {
                        let at = start.elapsed();
                        sent.lock().unwrap().push((caller, at));
                        async move {
                            if at < down {
                                Err(unavailable())
                            } else {
                                Ok(())
                            }
                        }
                    },
                    |f| guard.verdict(*f),
                    Options::default(),
                )
                .await;
            result.map_err(|e| e.gave_up)
        });
    }
    let results = calls.join_all().await;
    let sent = std::mem::take(&mut *sent.lock().unwrap());
    (sent, results)
}

#[tokio::test(start_paused = true)]
async fn a_gate_paces_a_herd_through_an_outage_and_serves_every_call() {
    let down = Duration::from_secs(5);
    let (sent, results) = herd(&Guard::from_policy(&valid(gated())), 20, down).await;
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    let probes: Vec<Duration> = sent.iter().copied().filter(|t| *t < down).collect();
    assert!(
        probes.len() <= 1 + 3,
        "the first try, then a probe every 2 s: {sent:?}"
    );
    for pair in probes[1..].windows(2) {
        assert_eq!(pair[1] - pair[0], Duration::from_secs(2), "{sent:?}");
    }

    let (unpaced, results) = herd(
        &Guard::from_policy(&valid(RetryPolicy {
            gate: GatePolicy::default(),
            ..gated()
        })),
        20,
        down,
    )
    .await;
    assert!(results.iter().all(Result::is_ok));
    let during = unpaced
        .iter()
        .filter(|t| **t > Duration::ZERO && **t < down)
        .count();
    assert!(
        during > 20 * 5,
        "without it every caller retries through the outage: {during}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_call_that_gets_no_turn_before_its_deadline_ends_and_leaves_the_line() {
    let p = RetryPolicy {
        max_elapsed: Some(Duration::from_secs(3)),
        ..gated()
    };
    let guard = Guard::from_policy(&valid(p));
    let start = Instant::now();
    let (_, results) = herd(&guard, 5, Duration::from_secs(3600)).await;
    // The first turn comes within 2 s (the first credit is drawn at random),
    // the next 2 s later: at most two of the callers waiting in line get a
    // turn before the 3 s deadline, and their retry would pass it (it is
    // shed, or waits until the deadline for a turn that comes no sooner). While
    // the gate probes a dependency that accepts nothing, a call waits if
    // the next probe comes before its deadline: the line moves at once
    // when the dependency is back.
    let no_turn = results.iter().filter(|r| **r == Err(GaveUp::NoTurn)).count();
    assert!(no_turn >= 3, "{results:?}");
    assert!(
        results
            .iter()
            .all(|r| matches!(r, Err(GaveUp::NoTurn | GaveUp::Deadline | GaveUp::Shed))),
        "a refused caller whose retry's probe would come after its deadline is shed: {results:?}"
    );
    assert_eq!(
        start.elapsed(),
        Duration::from_secs(3),
        "the rest waited in line until their deadline"
    );
    assert_eq!(guard.gate().unwrap().waiting(), 0);
}

#[tokio::test(start_paused = true)]
async fn calls_beyond_what_a_dependency_takes_are_shed_at_once_sending_nothing() {
    let mut p = gated();
    p.gate.max_wait = crate::policy::MaxWait::default();
    let guard = Guard::from_policy(&valid(p));
    let start = Instant::now();
    // The dependency takes one call a second, and refuses the rest.
    let taken = std::sync::Arc::new(std::sync::Mutex::new(std::collections::BTreeSet::new()));
    let call = |guard: Guard| {
        let taken = taken.clone();
        async move {
            let begun = Instant::now();
            let result = guard
                .call(
                    |_| {
                        let second = start.elapsed().as_secs();
                        let first_this_second = taken.lock().unwrap().insert(second);
                        async move {
                            if first_this_second {
                                Ok(())
                            } else {
                                Err(unavailable())
                            }
                        }
                    },
                    |f| guard.verdict(*f),
                    Options::default(),
                )
                .await;
            (result.map_err(|e| (e.gave_up, e.attempts)), begun.elapsed())
        }
    };
    // Ten seconds of ten calls a second: the gate learns the dependency's pace.
    let mut results = Vec::new();
    for _ in 0..100 {
        let guard = guard.clone();
        results.push(tokio::spawn(call(guard)));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut outcomes = Vec::new();
    for result in results {
        outcomes.push(result.await.unwrap());
    }
    let late = &outcomes[50..];
    let shed_at_once = late
        .iter()
        .filter(|(r, took)| *r == Err((GaveUp::Shed, 0)) && *took == Duration::ZERO)
        .count();
    let served = late.iter().filter(|(r, _)| r.is_ok()).count();
    assert!(
        shed_at_once >= 30 && served >= 3,
        "of the last 50, most are shed at once and some served: {outcomes:?}"
    );
    assert!(
        late.iter().all(|(_, took)| *took <= Duration::from_secs(1)),
        "none waits past its second: {outcomes:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn calls_whose_breaker_opens_while_they_wait_in_line_leave_it_unsent_at_the_first_turn() {
    let p = RetryPolicy {
        max_retries: 0,
        circuit_breaker: CircuitBreakerPolicy {
            enabled: true,
            consecutive_failures: 2,
            ..CircuitBreakerPolicy::default()
        },
        ..gated()
    };
    let guard = Guard::from_policy(&valid(p));
    // One refusal turns the gate on (the breaker does not hear it: the
    // gate paces it).
    let (first, _) = failing_call(&guard, unavailable()).await;
    assert_eq!(first.gave_up, GaveUp::Exhausted);
    let gate = guard.gate().unwrap();
    let sent_before = gate.tally().sent;
    let sent = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
    let waiting: Vec<_> = (0..3)
        .map(|_| {
            let (guard, sent) = (guard.clone(), sent.clone());
            tokio::spawn(async move {
                let result = guard
                    .call(
                        |_| {
                            sent.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                            async { Ok::<(), Failure>(()) }
                        },
                        |f| guard.verdict(*f),
                        Options::default(),
                    )
                    .await;
                (result.map_err(|e| e.gave_up), Instant::now())
            })
        })
        .collect();
    // The first credit is less than a turn: the calls wait in line.
    while gate.waiting() < 3 {
        assert!(
            waiting.iter().all(|w| !w.is_finished()),
            "a call did not wait in line"
        );
        tokio::task::yield_now().await;
    }
    // Other calls' failures open the breaker meanwhile.
    let breaker = guard.breaker().unwrap();
    for _ in 0..2 {
        breaker
            .try_acquire()
            .unwrap()
            .record(crate::breaker::CallOutcome::Failure);
    }
    assert_eq!(breaker.state(), CircuitState::Open);
    let mut ended = Vec::new();
    for call in waiting {
        let (result, at) = call.await.unwrap();
        assert_eq!(result, Err(GaveUp::CircuitOpen));
        ended.push(at);
    }
    assert_eq!(sent.load(std::sync::atomic::Ordering::Relaxed), 0, "nothing sent");
    assert_eq!(gate.tally().sent, sent_before, "no turn spent on them");
    assert!(
        ended.iter().all(|&at| at == ended[0]),
        "the line emptied at the first turn, not one turn a call: {ended:?}"
    );
    assert_eq!(gate.waiting(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_call_dropped_while_in_line_leaves_it() {
    let guard = Guard::from_policy(&valid(gated()));
    let call = guard.call(
        |_| async { Err::<(), _>(unavailable()) },
        |f| guard.retry_on().verdict(*f),
        Options::default(),
    );
    let dropped = tokio::time::timeout(Duration::from_millis(500), call).await;
    assert!(dropped.is_err());
    assert_eq!(guard.gate().unwrap().waiting(), 0);
}

#[tokio::test(start_paused = true)]
async fn while_the_gate_paces_retries_wait_for_turns_instead_of_asking_the_budget() {
    let no_retries = BudgetPolicy {
        enabled: true,
        retry_ratio: 0.0,
        min_retries_per_second: 0,
        ttl: Duration::from_secs(10),
        ..BudgetPolicy::default()
    };
    let budgeted = RetryPolicy {
        budget: no_retries.clone(),
        ..policy()
    };
    let (_, results) = herd(&Guard::from_policy(&valid(budgeted)), 3, Duration::from_secs(5)).await;
    assert!(results.iter().all(|r| *r == Err(GaveUp::BudgetExhausted)));

    let paced = RetryPolicy {
        budget: no_retries,
        ..gated()
    };
    let (_, results) = herd(&Guard::from_policy(&valid(paced)), 3, Duration::from_secs(5)).await;
    assert!(results.iter().all(Result::is_ok), "{results:?}");
}

#[tokio::test(start_paused = true)]
async fn while_the_gate_paces_a_refused_call_keeps_its_place_and_waits_no_backoff() {
    let guard = Guard::from_policy(&valid(gated()));
    let down = Duration::from_secs(7);
    let (sent, results) = herd_by_caller(&guard, 20, down).await;
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    let probers: Vec<usize> = sent
        .iter()
        .filter(|(_, at)| *at > Duration::ZERO && *at < down)
        .map(|(caller, _)| *caller)
        .collect();
    assert!(probers.len() >= 2, "{sent:?}");
    assert!(
        probers.iter().all(|c| *c == probers[0]),
        "the first in line probes again and again, back in its place each time: {sent:?}"
    );
    let probes: Vec<Duration> = sent
        .iter()
        .filter(|(c, at)| *c == probers[0] && *at > Duration::ZERO)
        .map(|(_, at)| *at)
        .collect();
    for pair in probes.windows(2) {
        assert_eq!(
            pair[1] - pair[0],
            Duration::from_secs(2),
            "a turn every 2 s, no backoff besides: {sent:?}"
        );
    }
    let first_served = sent.iter().find(|(_, at)| *at >= down).map(|(c, _)| *c);
    assert_eq!(
        first_served,
        Some(probers[0]),
        "the longest in line is served first"
    );
}

/// [`gated`] with two retries, and the gate hearing overload in `overload_on`.
fn gated_hearing(overload_on: Option<RetryOn>) -> Guard {
    let mut p = gated();
    p.max_retries = 2;
    if let Some(overload_on) = overload_on {
        p.gate.overload_on = overload_on;
    }
    Guard::from_policy(&valid(p))
}

fn status(code: u16, retry_after: Option<Duration>) -> Failure {
    Failure::Status { code, retry_after }
}

#[tokio::test(start_paused = true)]
async fn the_gate_hears_overload_only_in_what_overload_on_lists() {
    let on_after = |guard: &Guard| guard.gate().unwrap().is_on();
    let cases = [
        (
            None,
            status(500, None),
            false,
            "a 500 is an error the service answered with",
        ),
        (None, status(503, None), true, "a 503 says it is overloaded"),
        (None, status(429, None), true, "so does a 429"),
        (None, Failure::Connect, true, "and a refused connection"),
        (
            None,
            status(500, Some(ms(10))),
            true,
            "a Retry-After always asks for a wait",
        ),
        (
            Some(vec![RetryCondition::ServerError]),
            status(500, None),
            true,
            "5xx listed: a 500 too",
        ),
        (
            Some(vec![RetryCondition::Status(429)]),
            status(503, None),
            false,
            "503 not listed",
        ),
    ];
    for (overload_on, failure, paced, why) in cases {
        let guard = gated_hearing(overload_on.map(RetryOn));
        let (error, attempts) = failing_call(&guard, failure).await;
        assert_eq!(attempts.len(), 3, "{why}: retried as retryOn says");
        assert_eq!(error.gave_up, GaveUp::Exhausted, "{why}");
        assert_eq!(on_after(&guard), paced, "{why}");
    }
}

#[tokio::test(start_paused = true)]
async fn a_timeout_turns_the_gate_on_only_if_overload_on_lists_timeouts() {
    for (overload_on, paced) in [
        (None, true),
        (Some(RetryOn(vec![RetryCondition::Status(503)])), false),
    ] {
        let mut p = gated();
        p.max_retries = 1;
        p.per_try_timeout = Some(ms(50));
        if let Some(overload_on) = overload_on {
            p.gate.overload_on = overload_on;
        }
        let guard = Guard::from_policy(&valid(p));
        let error = guard
            .call(
                |_| std::future::pending::<Result<(), Failure>>(),
                |f| guard.verdict(*f),
                Options::default(),
            )
            .await
            .unwrap_err();
        assert_eq!(error.last, Cause::TimedOut);
        assert_eq!(guard.gate().unwrap().is_on(), paced);
    }
}

/// A fleet-scoped breaker that two failures open, and a gate, off.
/// A guard with a fleet-scoped breaker and a gate under `overloadWhen:
/// any-refusal`, which one refusal turns on.
fn fleet_scoped_with_a_gate() -> Guard {
    Guard::from_policy(&valid(RetryPolicy {
        circuit_breaker: CircuitBreakerPolicy {
            enabled: true,
            consecutive_failures: 2,
            scope: crate::policy::BreakerScope::Fleet,
            ..CircuitBreakerPolicy::default()
        },
        gate: waiting_gate(),
        ..policy()
    }))
}

#[tokio::test(start_paused = true)]
async fn a_fleet_scoped_open_breaker_asks_and_a_fleet_close_hands_the_gate_to_the_pace() {
    let guard = fleet_scoped_with_a_gate();
    assert_eq!(
        guard.fleet_ask_at(Instant::now()),
        None,
        "closed, gate off: nothing to ask"
    );
    for _ in 0..2 {
        guard
            .admit_at(Instant::now())
            .unwrap()
            .unwrap()
            .record(crate::breaker::CallOutcome::Failure);
    }
    let ask = guard.fleet_ask_at(Instant::now()).expect("an open breaker asks");
    assert_eq!(ask.tally, None, "its gate is off");
    assert!(ask.breaker.is_some_and(|b| b.open));

    // The daemon closes the fleet's breakers and takes the fleet back at its pace.
    let closes = fleet::breaker::BreakerVerdict {
        state: CircuitState::Closed,
        trials: 0,
        retry_in: Duration::ZERO,
    };
    let now = Instant::now();
    let grant = fleet::Grant {
        rate: 12.0,
        lease: Duration::from_secs(1),
        pace: true,
    };
    guard.heard_at(grant, Some(closes), now);
    assert_eq!(guard.breaker().unwrap().state(), CircuitState::Closed);
    let gate = guard.gate().unwrap();
    assert!(gate.is_on(), "the gate paces the return");
    assert_eq!(gate.rate_at(now), Some(12.0), "at the fleet's grant");

    // A grant that does not say pace leaves an off gate off.
    let other = fleet_scoped_with_a_gate();
    other.heard_at(fleet::Grant { pace: false, ..grant }, Some(closes), now);
    assert!(!other.gate().unwrap().is_on());
}

/// Two failures at `now` open the breaker of [`fleet_scoped_with_a_gate`].
fn opens_at(guard: &Guard, now: Instant) {
    for _ in 0..2 {
        guard
            .admit_at(now)
            .unwrap()
            .unwrap()
            .record(crate::breaker::CallOutcome::Failure);
    }
}

#[tokio::test(start_paused = true)]
async fn a_trial_on_the_fleets_slot_is_sent_without_waiting_for_the_gates_turn() {
    use crate::call::{Call, Step};
    use crate::gate::Signal;
    let guard = fleet_scoped_with_a_gate();
    let now = Instant::now();
    opens_at(&guard, now);
    // The gate is on, probing at half an attempt a second: once any turn
    // due now is spent, a call waits in line, seconds from its turn.
    let gate = guard.gate().unwrap();
    gate.record_at(Signal::Overloaded, now, now);
    while matches!(gate.turn_at(now), crate::gate::Turn::Now) {}
    let mut queued = Call::begin_at(&guard, now, None);
    let slot = fleet::breaker::BreakerVerdict {
        state: CircuitState::HalfOpen,
        trials: 1,
        retry_in: Duration::ZERO,
    };
    guard.heard_at(fleet::Grant::NONE, Some(slot), now);
    let mut trial = Call::begin_at(&guard, now, None);
    let _sent = match trial.next_at(&guard, now, None) {
        Step::Send(send) => {
            assert!(send.is_trial());
            send
        }
        other => panic!("the fleet's trial waited: {other:?}"),
    };
    // Another call, with the slot in use, is refused by the open breaker.
    let refused = queued.next_at(&guard, now, None);
    assert!(matches!(refused, Step::Stop(GaveUp::CircuitOpen)), "{refused:?}");
}

#[tokio::test(start_paused = true)]
async fn a_call_in_line_granted_the_fleets_trial_meanwhile_leaves_the_line_and_goes() {
    use crate::call::{Call, Step};
    use crate::gate::Signal;
    let guard = fleet_scoped_with_a_gate();
    let now = Instant::now();
    let gate = guard.gate().unwrap();
    gate.record_at(Signal::Overloaded, now, now);
    while matches!(gate.turn_at(now), crate::gate::Turn::Now) {}
    // In line (behind the ticket that found no turn), seconds from its
    // turn, on the closed breaker's permit.
    let mut queued = Call::begin_at(&guard, now, None);
    assert!(matches!(queued.next_at(&guard, now, None), Step::Wait(_)));
    assert_eq!(gate.waiting(), 2);
    // The breaker opens meanwhile, and the daemon grants the fleet a slot.
    opens_at(&guard, now);
    let slot = fleet::breaker::BreakerVerdict {
        state: CircuitState::HalfOpen,
        trials: 1,
        retry_in: Duration::ZERO,
    };
    guard.heard_at(fleet::Grant::NONE, Some(slot), now);
    match queued.next_at(&guard, now + ms(10), None) {
        Step::Send(send) => assert!(send.is_trial(), "the fleet's trial"),
        other => panic!("the fleet's trial waited for a turn: {other:?}"),
    }
    assert_eq!(gate.waiting(), 1, "it left the line");
}

/// A gated guard (any refusal turns its gate on) whose breaker opens after
/// two failures in a row.
fn gated_with_a_breaker() -> Guard {
    let mut p = gated();
    p.circuit_breaker = CircuitBreakerPolicy {
        enabled: true,
        consecutive_failures: 2,
        ..CircuitBreakerPolicy::default()
    };
    Guard::from_policy(&valid(p))
}

#[tokio::test(start_paused = true)]
async fn refusals_the_gate_paces_do_not_open_the_breaker_and_errors_still_do() {
    // An overloaded dependency: the gate turns on at the first refusal and
    // paces the retries; the breaker hears none of them.
    let guard = gated_with_a_breaker();
    for _ in 0..3 {
        failing_call(&guard, unavailable()).await;
    }
    assert!(guard.gate().unwrap().is_on());
    let breaker = guard.breaker().unwrap();
    assert_eq!(
        breaker.state(),
        CircuitState::Closed,
        "overload is the gate's to pace"
    );
    assert_eq!(breaker.snapshot().consecutive_failures, 0);

    // Errors the dependency answers with say nothing of its load: the
    // gate does not pace them, and the breaker opens on them.
    let guard = gated_with_a_breaker();
    failing_call(&guard, status(500, None)).await;
    assert!(!guard.gate().unwrap().is_on());
    assert_eq!(guard.breaker().unwrap().state(), CircuitState::Open);
}

#[tokio::test(start_paused = true)]
async fn a_dependency_that_stops_answering_opens_the_breaker_though_the_gate_is_on() {
    // Timeouts turn the gate on, but nothing answered them: the breaker
    // hears them, and opens.
    let mut p = gated();
    p.per_try_timeout = Some(Duration::from_millis(100));
    p.max_retries = 3;
    p.circuit_breaker = CircuitBreakerPolicy {
        enabled: true,
        consecutive_failures: 2,
        ..CircuitBreakerPolicy::default()
    };
    let guard = Guard::from_policy(&valid(p));
    let result = guard
        .call(
            |_| std::future::pending::<Result<(), Failure>>(),
            |f| guard.verdict(*f),
            Options::default(),
        )
        .await;
    assert!(result.is_err());
    assert!(guard.gate().unwrap().is_on(), "a timeout turns the gate on");
    assert_eq!(guard.breaker().unwrap().state(), CircuitState::Open);
}

/// Calls to a dependency down until `down`, begun `after` the gate turned
/// on: each call's result, its attempts, and how long it took.
async fn calls_during_an_outage(
    guard: &Guard,
    classes: &[Option<crate::policy::Criticality>],
    down: Duration,
) -> Vec<(Result<(), GaveUp>, u32, Duration)> {
    let start = Instant::now();
    let mut calls = tokio::task::JoinSet::new();
    for (i, class) in classes.iter().enumerate() {
        let guard = guard.clone();
        let class = *class;
        calls.spawn(async move {
            let options = match class {
                Some(class) => Options::default().criticality(class),
                None => Options::default(),
            };
            let begun = Instant::now();
            let result = guard
                .call(
                    |_| async move {
                        if start.elapsed() < down {
                            Err(unavailable())
                        } else {
                            Ok(())
                        }
                    },
                    |f| guard.verdict(*f),
                    options,
                )
                .await;
            let took = begun.elapsed();
            (i, result.map_err(|e| (e.gave_up, e.attempts)), took)
        });
    }
    let mut results = calls.join_all().await;
    results.sort_by_key(|(i, _, _)| *i);
    results
        .into_iter()
        .map(|(_, result, took)| match result {
            Ok(()) => (Ok(()), 0, took),
            Err((why, attempts)) => (Err(why), attempts, took),
        })
        .collect()
}

#[tokio::test(start_paused = true)]
async fn while_nothing_gets_through_calls_are_shed_at_once_and_a_critical_one_waits_for_the_return() {
    let mut p = gated();
    p.gate.max_wait = crate::policy::MaxWait::default();
    let guard = Guard::from_policy(&valid(p));
    let down = Duration::from_secs(3);
    // One refused call turns the gate on; it probes at 0.5 a second.
    let first = calls_during_an_outage(&guard, &[None], Duration::from_secs(3600)).await;
    assert!(first[0].0.is_err());
    let critical = Some(crate::policy::Criticality::Critical);
    let classes = [None, None, None, None, None, critical];
    let results = calls_during_an_outage(&guard, &classes, down).await;
    let shed_at_once = results[..5]
        .iter()
        .filter(|(result, attempts, took)| {
            *result == Err(GaveUp::Shed) && *attempts == 0 && *took == Duration::ZERO
        })
        .count();
    assert!(
        shed_at_once >= 4,
        "turns 2 s apart leave at most one of them a turn within a second: {results:?}"
    );
    assert_eq!(
        results[5].0,
        Ok(()),
        "the critical call waits ahead of them, up to 5 s: {results:?}"
    );
    assert!(results[5].2 <= Duration::from_secs(5), "{results:?}");
}

#[tokio::test(start_paused = true)]
async fn a_call_waiting_in_line_leaves_it_with_no_turn_when_its_class_may_wait_no_longer() {
    let mut p = gated();
    p.max_retries = 0;
    p.gate.max_wait.default = Duration::from_secs(3);
    let guard = Guard::from_policy(&valid(p));
    let forever = Duration::from_secs(3600);
    // One refused call turns the gate on: turns 2 s apart, the first within 2 s.
    calls_during_an_outage(&guard, &[None], forever).await;
    // A default call's turn is due within its 3 s, and it waits; two
    // critical calls then go ahead of it, and its turn would come at 4 s
    // or later.
    let critical = Some(crate::policy::Criticality::Critical);
    let results = calls_during_an_outage(&guard, &[None, critical, critical], forever).await;
    assert_eq!(
        results[0],
        (Err(GaveUp::NoTurn), 0, Duration::from_secs(3)),
        "{results:?}"
    );
    for (result, attempts, _) in &results[1..] {
        assert_eq!((result, *attempts), (&Err(GaveUp::Exhausted), 1), "{results:?}");
    }
    assert_eq!(guard.gate().unwrap().waiting(), 0);
}
