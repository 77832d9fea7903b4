use super::*;
use crate::policy::SlidingWindow;
use tokio::time::advance;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Opens after 3 failures in a row; rates judged over the last 10 calls once
/// 10 are seen; 1 s open; 2 trials at once, 2 good ones close it.
fn policy() -> CircuitBreakerPolicy {
    CircuitBreakerPolicy {
        enabled: true,
        consecutive_failures: 3,
        failure_rate_threshold: 0.5,
        slow_call_rate_threshold: 1.0,
        slow_call_duration: Duration::from_secs(60),
        minimum_calls: 10,
        sliding_window: SlidingWindow::Count { calls: 10 },
        open_timeout: Duration::from_secs(1),
        half_open_max_calls: 2,
        success_threshold: 2,
    }
}

fn call(b: &CircuitBreaker, outcome: CallOutcome) {
    b.try_acquire().expect("permitted").record(outcome);
}

fn open(b: &CircuitBreaker) {
    for _ in 0..3 {
        call(b, CallOutcome::Failure);
    }
    assert_eq!(b.state(), CircuitState::Open);
}

#[test]
fn states_are_numbered_as_the_alerts_expect() {
    assert_eq!(CircuitState::Closed.as_metric(), 0);
    assert_eq!(CircuitState::HalfOpen.as_metric(), 1);
    assert_eq!(CircuitState::Open.as_metric(), 2);
}

#[tokio::test(start_paused = true)]
async fn consecutive_failures_open_it_and_a_success_resets_the_count() {
    let b = CircuitBreaker::new(&policy());
    call(&b, CallOutcome::Failure);
    call(&b, CallOutcome::Failure);
    call(&b, CallOutcome::Success);
    call(&b, CallOutcome::Failure);
    call(&b, CallOutcome::Failure);
    assert_eq!(b.state(), CircuitState::Closed, "the success broke the run");
    assert_eq!(b.snapshot().consecutive_failures, 2);
    call(&b, CallOutcome::Failure);
    assert_eq!(b.state(), CircuitState::Open);
}

#[tokio::test(start_paused = true)]
async fn zero_consecutive_failures_turns_that_trigger_off() {
    let b = CircuitBreaker::new(&CircuitBreakerPolicy {
        consecutive_failures: 0,
        ..policy()
    });
    for _ in 0..9 {
        call(&b, CallOutcome::Failure);
    }
    assert_eq!(b.state(), CircuitState::Closed, "9 calls: below minimumCalls");
    call(&b, CallOutcome::Failure);
    assert_eq!(b.state(), CircuitState::Open, "10 calls, all failed");
}

#[tokio::test(start_paused = true)]
async fn the_failure_rate_opens_it_once_the_window_holds_minimum_calls() {
    let b = CircuitBreaker::new(&CircuitBreakerPolicy {
        consecutive_failures: 0,
        failure_rate_threshold: 0.4,
        ..policy()
    });
    // Alternate: 50 % failures, but never two in a row.
    for i in 0..9 {
        call(
            &b,
            if i % 2 == 0 {
                CallOutcome::Failure
            } else {
                CallOutcome::Success
            },
        );
    }
    assert_eq!(b.state(), CircuitState::Closed);
    assert_eq!(
        b.snapshot().window,
        Tally {
            calls: 9,
            failures: 5,
            slow: 0
        }
    );
    call(&b, CallOutcome::Success);
    assert_eq!(b.state(), CircuitState::Open, "5 of 10 failed ≥ 40 %");
}

#[tokio::test(start_paused = true)]
async fn old_calls_slide_out_of_a_count_window() {
    let b = CircuitBreaker::new(&CircuitBreakerPolicy {
        consecutive_failures: 0,
        ..policy()
    });
    for _ in 0..4 {
        call(&b, CallOutcome::Failure);
    }
    for _ in 0..20 {
        call(&b, CallOutcome::Success);
    }
    for _ in 0..4 {
        call(&b, CallOutcome::Failure);
    }
    assert_eq!(b.state(), CircuitState::Closed, "4 of the last 10 failed");
    call(&b, CallOutcome::Failure);
    assert_eq!(b.state(), CircuitState::Open, "5 of the last 10");
}

#[tokio::test(start_paused = true)]
async fn a_window_smaller_than_minimum_calls_is_judged_once_full() {
    let b = CircuitBreaker::new(&CircuitBreakerPolicy {
        consecutive_failures: 0,
        minimum_calls: 100,
        sliding_window: SlidingWindow::Count { calls: 4 },
        ..policy()
    });
    for _ in 0..3 {
        call(&b, CallOutcome::Failure);
    }
    assert_eq!(b.state(), CircuitState::Closed);
    call(&b, CallOutcome::Failure);
    assert_eq!(b.state(), CircuitState::Open);
}

#[tokio::test(start_paused = true)]
async fn a_time_window_counts_only_recent_calls() {
    let b = CircuitBreaker::new(&CircuitBreakerPolicy {
        consecutive_failures: 0,
        minimum_calls: 4,
        sliding_window: SlidingWindow::Time {
            duration: Duration::from_secs(10),
        },
        ..policy()
    });
    call(&b, CallOutcome::Failure);
    call(&b, CallOutcome::Failure);
    advance(Duration::from_secs(11)).await;
    call(&b, CallOutcome::Success);
    call(&b, CallOutcome::Failure);
    call(&b, CallOutcome::Success);
    assert_eq!(
        b.state(),
        CircuitState::Closed,
        "the first two failures are 11 s old"
    );
    call(&b, CallOutcome::Failure);
    assert_eq!(b.state(), CircuitState::Open, "2 of the 4 calls of the last 10 s");
}

#[tokio::test(start_paused = true)]
async fn slow_calls_open_it_at_the_slow_call_rate() {
    let b = CircuitBreaker::new(&CircuitBreakerPolicy {
        consecutive_failures: 0,
        slow_call_rate_threshold: 0.5,
        slow_call_duration: ms(200),
        minimum_calls: 4,
        ..policy()
    });
    for duration in [ms(199), ms(10), ms(200)] {
        let permit = b.try_acquire().unwrap();
        advance(duration).await;
        permit.record(CallOutcome::Success);
    }
    assert_eq!(b.state(), CircuitState::Closed, "1 of 3 slow; 199 ms is not slow");
    let permit = b.try_acquire().unwrap();
    advance(ms(500)).await;
    permit.record(CallOutcome::Success);
    assert_eq!(b.state(), CircuitState::Open, "2 of 4 took 200 ms or more");
}

#[tokio::test(start_paused = true)]
async fn open_refuses_calls_for_exactly_the_open_timeout() {
    let b = CircuitBreaker::new(&policy());
    open(&b);
    advance(ms(400)).await;
    let refused = b.try_acquire().unwrap_err();
    assert_eq!(
        refused,
        CallNotPermitted {
            state: CircuitState::Open,
            retry_in: ms(600)
        }
    );
    advance(ms(599)).await;
    assert!(b.try_acquire().is_err(), "1 ms early");
    advance(ms(1)).await;
    let trial = b.try_acquire().expect("the open timeout has passed");
    assert!(trial.is_trial());
    assert_eq!(b.state(), CircuitState::HalfOpen);
    assert_eq!(b.snapshot().rejected, 2);
}

#[tokio::test(start_paused = true)]
async fn half_open_admits_at_most_half_open_max_calls_at_once() {
    let b = CircuitBreaker::new(&policy());
    open(&b);
    advance(Duration::from_secs(1)).await;
    let first = b.try_acquire().unwrap();
    let second = b.try_acquire().unwrap();
    let refused = b.try_acquire().unwrap_err();
    assert_eq!(
        refused,
        CallNotPermitted {
            state: CircuitState::HalfOpen,
            retry_in: Duration::ZERO
        }
    );
    drop(first);
    let third = b.try_acquire().expect("a cancelled trial frees its slot");
    assert!(b.try_acquire().is_err());
    second.record(CallOutcome::Success);
    assert_eq!(b.state(), CircuitState::HalfOpen, "one success of two");
    third.record(CallOutcome::Success);
    assert_eq!(b.state(), CircuitState::Closed);
    call(&b, CallOutcome::Failure);
    assert_eq!(
        b.snapshot().consecutive_failures,
        1,
        "closing starts the counts afresh"
    );
}

#[tokio::test(start_paused = true)]
async fn a_failed_or_slow_trial_opens_it_again_for_a_full_timeout() {
    let b = CircuitBreaker::new(&CircuitBreakerPolicy {
        slow_call_duration: ms(300),
        ..policy()
    });
    open(&b);
    advance(Duration::from_secs(1)).await;
    call(&b, CallOutcome::Success);
    call(&b, CallOutcome::Failure);
    assert_eq!(b.state(), CircuitState::Open, "one failure is enough");
    assert_eq!(b.try_acquire().unwrap_err().retry_in, Duration::from_secs(1));

    advance(Duration::from_secs(1)).await;
    let slow = b.try_acquire().unwrap();
    advance(ms(300)).await;
    slow.record(CallOutcome::Success);
    assert_eq!(b.state(), CircuitState::Open, "a slow trial is not a recovery");
}

#[tokio::test(start_paused = true)]
async fn calls_from_before_a_state_change_do_not_count_after_it() {
    let b = CircuitBreaker::new(&policy());
    let early = b.try_acquire().unwrap();
    open(&b);
    advance(Duration::from_secs(1)).await;
    let trial = b.try_acquire().unwrap();
    early.record(CallOutcome::Failure);
    assert_eq!(
        b.state(),
        CircuitState::HalfOpen,
        "the old call does not re-open it"
    );
    trial.record(CallOutcome::Success);
    call(&b, CallOutcome::Success);
    assert_eq!(b.state(), CircuitState::Closed);
}

#[tokio::test(start_paused = true)]
async fn subscribers_see_every_state_change() {
    let b = CircuitBreaker::new(&policy());
    let mut states = b.subscribe();
    assert_eq!(*states.borrow_and_update(), CircuitState::Closed);
    open(&b);
    assert!(states.has_changed().unwrap());
    assert_eq!(*states.borrow_and_update(), CircuitState::Open);
    advance(Duration::from_secs(1)).await;
    let trial = b.try_acquire().unwrap();
    assert_eq!(*states.borrow_and_update(), CircuitState::HalfOpen);
    trial.record(CallOutcome::Success);
    call(&b, CallOutcome::Success);
    assert_eq!(*states.borrow_and_update(), CircuitState::Closed);
    assert_eq!(b.snapshot().transitions, 3);
}

#[test]
fn concurrent_trials_never_exceed_the_limit() {
    let now = Instant::now();
    let b = CircuitBreaker::new_at(&policy(), now);
    for _ in 0..3 {
        b.try_acquire_at(now)
            .unwrap()
            .record_at(CallOutcome::Failure, now);
    }
    let later = now + Duration::from_secs(1);
    let in_flight = Arc::new(std::sync::atomic::AtomicU32::new(0));
    let peak = Arc::new(std::sync::atomic::AtomicU32::new(0));
    std::thread::scope(|s| {
        for _ in 0..8 {
            let (b, in_flight, peak) = (b.clone(), in_flight.clone(), peak.clone());
            s.spawn(move || {
                for _ in 0..2_000 {
                    if let Ok(permit) = b.try_acquire_at(later) {
                        let n = in_flight.fetch_add(1, Relaxed) + 1;
                        peak.fetch_max(n, Relaxed);
                        in_flight.fetch_sub(1, Relaxed);
                        drop(permit);
                    }
                }
            });
        }
    });
    assert_eq!(b.state(), CircuitState::HalfOpen);
    assert!(
        peak.load(Relaxed) <= 2,
        "peak {} trials at once",
        peak.load(Relaxed)
    );
}
