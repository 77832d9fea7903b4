//! Tests of the circuit breaker: what opens it, its half-open trials, its slow calls and windows,
//! and the fleet's verdicts it hears.

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
        scope: BreakerScope::Process,
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

mod model {
    //! The breaker against a plain reference model, over random sequences of
    //! calls, outcomes, cancellations and clock steps.
    use super::*;
    use proptest::prelude::*;

    const IN_A_ROW: u32 = 3;
    const WINDOW: usize = 20;
    const MINIMUM: usize = 10;
    const MAX_TRIALS: u32 = 2;
    const SUCCESSES: u32 = 2;
    const OPEN_MS: u64 = 1000;

    #[derive(Debug, Clone)]
    enum Op {
        Acquire,
        Record(usize, bool),
        Cancel(usize),
        Advance(u64),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            3 => Just(Op::Acquire),
            // Three in ten fail: backgrounds that chance excuses runs at, and rates past the threshold.
            4 => (any::<usize>(), 0u8..10).prop_map(|(i, draw)| Op::Record(i, draw >= 3)),
            1 => any::<usize>().prop_map(Op::Cancel),
            2 => (0u64..1500).prop_map(Op::Advance),
        ]
    }

    /// What the model expects of the breaker.
    struct Model {
        state: CircuitState,
        episode: u64,
        in_a_row: u32,
        /// The closed state's last `WINDOW` outcomes (true: failed).
        window: std::collections::VecDeque<bool>,
        opened_at: Instant,
        trials: u32,
        successes: u32,
    }

    impl Model {
        fn enter(&mut self, state: CircuitState, now: Instant) {
            self.state = state;
            self.episode += 1;
            self.in_a_row = 0;
            self.window.clear();
            self.trials = 0;
            self.successes = 0;
            if state == CircuitState::Open {
                self.opened_at = now;
            }
        }

        /// A closed call's outcome: whether it opens the breaker.
        fn closed_call_opens(&mut self, failed: bool) -> bool {
            self.in_a_row = if failed { self.in_a_row + 1 } else { 0 };
            if self.window.len() == WINDOW {
                self.window.pop_front();
            }
            self.window.push_back(failed);
            let failures = self.window.iter().filter(|f| **f).count();
            let rate_past = self.window.len() >= MINIMUM && 2 * failures >= self.window.len();
            rate_past || (self.in_a_row >= IN_A_ROW && !self.run_excused(failures))
        }

        /// The run is chance: under twice `IN_A_ROW`, at least as many calls
        /// before it, a failure among them at a rate under one half, and the
        /// run's odds at that rate's upper Wilson bound above 1e-5.
        fn run_excused(&self, failures: usize) -> bool {
            let run = self.in_a_row as usize;
            let before = self.window.len() - run;
            let failed_before = failures - run;
            if run >= 2 * IN_A_ROW as usize
                || before < run
                || failed_before == 0
                || 2 * failed_before >= before
            {
                return false;
            }
            let (n, p, z) = (before as f64, failed_before as f64 / before as f64, 1.96_f64);
            let bound = (p + z * z / (2.0 * n) + z * ((p * (1.0 - p) + z * z / (4.0 * n)) / n).sqrt())
                / (1.0 + z * z / n);
            bound.powi(self.in_a_row as i32) > 1e-5
        }
    }

    proptest! {
        #[test]
        fn the_breaker_follows_the_model(ops in prop::collection::vec(op(), 1..300)) {
            let policy = CircuitBreakerPolicy {
                consecutive_failures: IN_A_ROW,
                failure_rate_threshold: 0.5,
                slow_call_duration: Duration::from_secs(3_600),
                minimum_calls: MINIMUM as u32,
                sliding_window: SlidingWindow::Count { calls: WINDOW as u32 },
                open_timeout: ms(OPEN_MS),
                half_open_max_calls: MAX_TRIALS,
                success_threshold: SUCCESSES,
                ..policy()
            };
            let mut now = Instant::now();
            let breaker = CircuitBreaker::new_at(&policy, now);
            let mut model = Model { state: CircuitState::Closed, episode: 0, in_a_row: 0, window: Default::default(), opened_at: now, trials: 0, successes: 0 };
            let mut held: Vec<(Permit, u64)> = Vec::new();
            for op in ops {
                match op {
                    Op::Acquire => {
                        if model.state == CircuitState::Open && now >= model.opened_at + ms(OPEN_MS) {
                            model.enter(CircuitState::HalfOpen, now);
                        }
                        let result = breaker.try_acquire_at(now);
                        match model.state {
                            CircuitState::Open => {
                                let refused = result.expect_err("open refuses");
                                prop_assert_eq!(refused.retry_in, model.opened_at + ms(OPEN_MS) - now);
                            }
                            CircuitState::HalfOpen if model.trials >= MAX_TRIALS => {
                                prop_assert!(result.is_err(), "a trial over the limit was admitted");
                            }
                            state => {
                                let permit = result.expect("a permit");
                                prop_assert_eq!(permit.is_trial(), state == CircuitState::HalfOpen);
                                model.trials += u32::from(permit.is_trial());
                                held.push((permit, model.episode));
                            }
                        }
                    }
                    Op::Record(i, ok) if !held.is_empty() => {
                        let (permit, episode) = held.swap_remove(i % held.len());
                        permit.record_at(if ok { CallOutcome::Success } else { CallOutcome::Failure }, now);
                        if episode == model.episode {
                            match (model.state, ok) {
                                (CircuitState::Closed, ok) => {
                                    if model.closed_call_opens(!ok) {
                                        model.enter(CircuitState::Open, now);
                                    }
                                }
                                (CircuitState::HalfOpen, false) => model.enter(CircuitState::Open, now),
                                (CircuitState::HalfOpen, true) => {
                                    model.trials -= 1;
                                    model.successes += 1;
                                    if model.successes >= SUCCESSES {
                                        model.enter(CircuitState::Closed, now);
                                    }
                                }
                                (CircuitState::Open, _) => {}
                            }
                        }
                    }
                    Op::Cancel(i) if !held.is_empty() => {
                        let (permit, episode) = held.swap_remove(i % held.len());
                        if permit.is_trial() && episode == model.episode {
                            model.trials -= 1;
                        }
                        drop(permit);
                    }
                    Op::Advance(step) => now += ms(step),
                    Op::Record(..) | Op::Cancel(_) => {}
                }
                prop_assert_eq!(breaker.state(), model.state);
                prop_assert_eq!(breaker.snapshot().transitions, model.episode);
            }
        }
    }
}

/// Opens after 5 failures in a row, rates over the last 100 calls: the
/// defaults' triggers.
fn runs_policy() -> CircuitBreakerPolicy {
    CircuitBreakerPolicy {
        enabled: true,
        ..CircuitBreakerPolicy::default()
    }
}

/// Fills a breaker's window with `calls` calls of which `per_hundred` in
/// every hundred fail, spread out, none of them in a run that opens it.
fn background(b: &CircuitBreaker, calls: u32, per_hundred: u32) {
    for i in 0..calls {
        let outcome = if (i * per_hundred) % 100 < per_hundred {
            CallOutcome::Failure
        } else {
            CallOutcome::Success
        };
        call(b, outcome);
    }
    assert_eq!(
        b.state(),
        CircuitState::Closed,
        "the background alone opens nothing"
    );
}

#[tokio::test(start_paused = true)]
async fn a_run_that_a_dependency_failing_at_random_makes_by_chance_does_not_open_it() {
    let b = CircuitBreaker::new(&runs_policy());
    background(&b, 200, 30);
    for _ in 0..9 {
        call(&b, CallOutcome::Failure);
    }
    assert_eq!(
        b.state(),
        CircuitState::Closed,
        "nine in a row at 30 % (bound 0.4): 0.4^9 = 3e-4, more than one in 100,000"
    );
    call(&b, CallOutcome::Failure);
    assert_eq!(
        b.state(),
        CircuitState::Open,
        "ten in a row: twice consecutiveFailures"
    );
}

#[tokio::test(start_paused = true)]
async fn an_outage_after_any_background_below_the_threshold_opens_it_within_two_runs() {
    for per_hundred in [10, 30, 49] {
        let b = CircuitBreaker::new(&runs_policy());
        background(&b, 300, per_hundred);
        let mut failures = 0;
        while b.state() == CircuitState::Closed {
            call(&b, CallOutcome::Failure);
            failures += 1;
        }
        let most = 2 * runs_policy().consecutive_failures;
        assert!(
            failures <= most,
            "{per_hundred} % before: opened after {failures}, more than {most}"
        );
        assert!(
            failures > runs_policy().consecutive_failures || per_hundred == 49,
            "{per_hundred} %: {failures} excused nothing"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn a_run_longer_than_the_calls_before_it_is_not_excused() {
    let b = CircuitBreaker::new(&runs_policy());
    for outcome in [
        CallOutcome::Success,
        CallOutcome::Failure,
        CallOutcome::Success,
        CallOutcome::Success,
    ] {
        call(&b, outcome);
    }
    for _ in 0..5 {
        call(&b, CallOutcome::Failure);
    }
    assert_eq!(
        b.state(),
        CircuitState::Open,
        "four calls before a run of five measure no background"
    );
}

#[tokio::test(start_paused = true)]
async fn a_dependency_that_was_answering_and_goes_down_still_opens_it_after_five() {
    let b = CircuitBreaker::new(&runs_policy());
    for _ in 0..200 {
        call(&b, CallOutcome::Success);
    }
    for _ in 0..4 {
        call(&b, CallOutcome::Failure);
    }
    assert_eq!(b.state(), CircuitState::Closed);
    call(&b, CallOutcome::Failure);
    assert_eq!(
        b.state(),
        CircuitState::Open,
        "no failure before the run: none by chance"
    );

    let fresh = CircuitBreaker::new(&runs_policy());
    for _ in 0..5 {
        call(&fresh, CallOutcome::Failure);
    }
    assert_eq!(
        fresh.state(),
        CircuitState::Open,
        "nothing before the run to excuse it"
    );
}

#[tokio::test(start_paused = true)]
async fn a_run_at_a_failure_rate_past_the_threshold_opens_it_whatever_its_odds() {
    let b = CircuitBreaker::new(&runs_policy());
    // 60 % failing, never more than three in a row.
    for i in 0..20 {
        let outcome = match i % 10 {
            0 | 2 | 4 | 6 | 8 | 9 => CallOutcome::Failure,
            _ => CallOutcome::Success,
        };
        call(&b, outcome);
    }
    call(&b, CallOutcome::Success);
    for _ in 0..4 {
        call(&b, CallOutcome::Failure);
    }
    assert_eq!(
        b.state(),
        CircuitState::Closed,
        "21 calls: the rate is not judged yet"
    );
    call(&b, CallOutcome::Failure);
    assert_eq!(
        b.state(),
        CircuitState::Open,
        "over half failing before the run: past the 50 % threshold"
    );
}

fn fleet_scoped() -> CircuitBreaker {
    CircuitBreaker::new(&CircuitBreakerPolicy {
        scope: BreakerScope::Fleet,
        ..policy()
    })
}

fn said(state: CircuitState, trials: u32, retry_in: Duration) -> BreakerVerdict {
    BreakerVerdict {
        state,
        trials,
        retry_in,
    }
}

#[tokio::test(start_paused = true)]
async fn a_fleet_scoped_open_breaker_sends_trials_only_on_the_daemons_slots() {
    let b = fleet_scoped();
    assert!(!b.asks_fleet_at(Instant::now()), "closed: nothing to say");
    open(&b);
    assert!(b.asks_fleet_at(Instant::now()));
    advance(ms(400)).await;
    let report = b.fleet_report_at(Instant::now()).expect("fleet-scoped");
    assert_eq!((report.open, report.open_for), (true, ms(400)));

    // The daemon holds the fleet open past this breaker's own timeout.
    let now = Instant::now();
    assert!(!b.heard_at(said(CircuitState::Open, 0, ms(900)), now + ms(1000), now));
    advance(ms(700)).await;
    let refused = b.try_acquire().unwrap_err();
    assert_eq!((refused.state, refused.retry_in), (CircuitState::Open, ms(200)));

    // One slot: one trial, which does not close the breaker by itself.
    let now = Instant::now();
    b.heard_at(
        said(CircuitState::HalfOpen, 1, Duration::ZERO),
        now + ms(1000),
        now,
    );
    let trial = b.try_acquire().expect("the slot");
    assert!(trial.is_trial() && trial.is_fleet_trial());
    assert!(b.try_acquire().is_err(), "one slot, one trial");
    trial.record(CallOutcome::Success);
    assert_eq!(b.state(), CircuitState::Open);
    let report = b.fleet_report_at(Instant::now()).unwrap();
    assert_eq!((report.succeeded, report.failed), (1, 0));
    assert_eq!(
        b.fleet_report_at(Instant::now()).unwrap().succeeded,
        0,
        "reported once"
    );

    // The fleet's trials succeeded: the daemon closes every breaker.
    let now = Instant::now();
    assert!(b.heard_at(said(CircuitState::Closed, 0, Duration::ZERO), now + ms(1000), now));
    assert_eq!(b.state(), CircuitState::Closed);
    assert!(!b.asks_fleet_at(now));
    assert!(!b.heard_at(said(CircuitState::Closed, 0, Duration::ZERO), now + ms(1000), now));
}

#[tokio::test(start_paused = true)]
async fn an_unused_slot_stays_the_processs_until_the_daemons_word_lapses() {
    let b = fleet_scoped();
    open(&b);
    let now = Instant::now();
    b.heard_at(
        said(CircuitState::HalfOpen, 1, Duration::ZERO),
        now + ms(1000),
        now,
    );
    drop(b.try_acquire().expect("the slot"));
    let failed = b.try_acquire().expect("the slot again, unused");
    failed.record(CallOutcome::Failure);
    assert_eq!(b.fleet_report_at(Instant::now()).unwrap().failed, 1);
    let now = Instant::now();
    b.heard_at(
        said(CircuitState::HalfOpen, 1, Duration::ZERO),
        now + ms(100),
        now,
    );
    advance(ms(100)).await;
    // The word lapsed with its slot: the breaker decides alone, and its own
    // timeout runs from the failed trial.
    assert_eq!(b.try_acquire().unwrap_err().state, CircuitState::Open);
}

#[tokio::test(start_paused = true)]
async fn without_the_daemons_word_a_fleet_scoped_breaker_goes_half_open_alone() {
    let alone = fleet_scoped();
    let process = CircuitBreaker::new(&policy());
    for b in [&alone, &process] {
        open(b);
    }
    advance(ms(1000)).await;
    for b in [&alone, &process] {
        let trials = [b.try_acquire(), b.try_acquire(), b.try_acquire()];
        assert_eq!(
            trials.iter().filter(|t| t.is_ok()).count(),
            2,
            "halfOpenMaxCalls, as today"
        );
    }
    // The daemon speaks again: its trials govern, its own half-open ends.
    let now = Instant::now();
    alone.heard_at(said(CircuitState::Open, 0, ms(500)), now + ms(1000), now);
    assert_eq!(alone.state(), CircuitState::Open);
    assert_eq!(alone.try_acquire().unwrap_err().retry_in, ms(500));
    // A process-scoped breaker has nothing to say and hears nothing.
    assert!(process.fleet_report_at(now).is_none() && !process.asks_fleet_at(now));
    assert!(!process.heard_at(said(CircuitState::Closed, 0, Duration::ZERO), now, now));
    assert_eq!(process.state(), CircuitState::HalfOpen);
}

#[tokio::test(start_paused = true)]
async fn a_retuned_open_breaker_stays_open_and_its_new_timeout_counts_from_the_open() {
    let b = CircuitBreaker::new(&policy());
    open(&b);
    advance(ms(300)).await;
    let longer = CircuitBreakerPolicy {
        open_timeout: ms(2_000),
        failure_rate_threshold: 0.9,
        ..policy()
    };
    b.retune_at(&longer, Instant::now());
    assert_eq!(b.state(), CircuitState::Open);
    assert_eq!(b.try_acquire().unwrap_err().retry_in, ms(1_700));
    let shorter = CircuitBreakerPolicy {
        open_timeout: ms(500),
        ..longer
    };
    b.retune_at(&shorter, Instant::now());
    assert_eq!(b.try_acquire().unwrap_err().retry_in, ms(200));
    advance(ms(200)).await;
    assert!(b.try_acquire().expect("500 ms since it opened").is_trial());
}

#[tokio::test(start_paused = true)]
async fn a_retune_keeps_the_windows_outcomes_unless_the_window_changes_shape() {
    let b = CircuitBreaker::new(&policy());
    for _ in 0..4 {
        call(&b, CallOutcome::Success);
        call(&b, CallOutcome::Failure);
    }
    let tighter = CircuitBreakerPolicy {
        minimum_calls: 9,
        ..policy()
    };
    b.retune_at(&tighter, Instant::now());
    assert_eq!(b.snapshot().window.calls, 8, "same shape: kept");
    call(&b, CallOutcome::Failure);
    assert_eq!(
        b.state(),
        CircuitState::Open,
        "5 of 9 failed, judged at the new minimum"
    );

    let b = CircuitBreaker::new(&policy());
    call(&b, CallOutcome::Failure);
    call(&b, CallOutcome::Success);
    let timed = CircuitBreakerPolicy {
        sliding_window: SlidingWindow::Time {
            duration: Duration::from_secs(10),
        },
        ..policy()
    };
    b.retune_at(&timed, Instant::now());
    assert_eq!(b.snapshot().window.calls, 0, "another shape: afresh");
}

#[tokio::test(start_paused = true)]
async fn a_breaker_retuned_from_fleet_to_process_scope_decides_alone_at_once() {
    let b = fleet_scoped();
    open(&b);
    let now = Instant::now();
    b.heard_at(said(CircuitState::Open, 0, ms(30_000)), now + ms(60_000), now);
    advance(ms(1_000)).await;
    assert!(b.try_acquire().is_err(), "the daemon holds it open");
    b.retune_at(&policy(), Instant::now());
    assert!(b
        .try_acquire()
        .expect("its own 1 s timeout has passed")
        .is_trial());
}

/// [`policy`], but open for 10 s: its trials are counted over ten seconds.
fn open_ten_seconds() -> CircuitBreakerPolicy {
    CircuitBreakerPolicy {
        open_timeout: Duration::from_secs(10),
        ..policy()
    }
}

/// Refusals in a row trip a closed breaker: half-open.
fn tripped_by_refusals(b: &CircuitBreaker) {
    for _ in 0..3 {
        call(b, CallOutcome::Refused);
    }
    assert_eq!(b.state(), CircuitState::HalfOpen);
}

#[tokio::test(start_paused = true)]
async fn refusals_trip_a_closed_breaker_half_open_and_failures_open_it() {
    let b = CircuitBreaker::new(&open_ten_seconds());
    call(&b, CallOutcome::Refused);
    call(&b, CallOutcome::Failure);
    call(&b, CallOutcome::Failure);
    assert_eq!(b.state(), CircuitState::Open, "the run ended on a failure");

    let b = CircuitBreaker::new(&open_ten_seconds());
    tripped_by_refusals(&b);
    assert!(b.try_acquire().expect("a trial, at once").is_trial());
}

#[tokio::test(start_paused = true)]
async fn half_open_trials_follow_what_the_dependency_accepts() {
    let b = CircuitBreaker::new(&open_ten_seconds());
    tripped_by_refusals(&b);
    call(&b, CallOutcome::Refused);
    assert!(b.try_acquire().is_err(), "one refusal spends the first share");
    advance(Duration::from_secs(5)).await;
    call(&b, CallOutcome::Refused);
    assert!(
        b.try_acquire().is_err(),
        "two a window, the second after half of it"
    );

    advance(Duration::from_secs(5)).await;
    call(&b, CallOutcome::Success);
    call(&b, CallOutcome::Refused);
    call(&b, CallOutcome::Refused);
    assert!(
        b.try_acquire().is_err(),
        "the window holds 3 refused and 1 accepted: refusals may outnumber acceptances by two"
    );
    advance(Duration::from_secs(5)).await;
    call(&b, CallOutcome::Success);
    call(&b, CallOutcome::Refused);
    call(&b, CallOutcome::Refused);
    assert!(b.try_acquire().is_err(), "2 accepted, 4 refused in the window");
    assert_eq!(b.state(), CircuitState::HalfOpen);
}

#[tokio::test(start_paused = true)]
async fn refused_trials_open_the_breaker_only_after_a_window_with_none_accepted() {
    let b = CircuitBreaker::new(&open_ten_seconds());
    tripped_by_refusals(&b);
    call(&b, CallOutcome::Refused);
    advance(Duration::from_secs(5)).await;
    call(&b, CallOutcome::Refused);
    advance(Duration::from_secs(5)).await;
    call(&b, CallOutcome::Refused);
    assert_eq!(
        b.state(),
        CircuitState::Open,
        "ten seconds of refusals, nothing accepted"
    );
    assert_eq!(b.try_acquire().unwrap_err().retry_in, Duration::from_secs(10));

    let b = CircuitBreaker::new(&open_ten_seconds());
    tripped_by_refusals(&b);
    advance(Duration::from_secs(9)).await;
    call(&b, CallOutcome::Success);
    advance(Duration::from_secs(2)).await;
    call(&b, CallOutcome::Refused);
    assert_eq!(
        b.state(),
        CircuitState::HalfOpen,
        "a trial accepted 2 s ago: the dependency is up"
    );
    advance(Duration::from_secs(9)).await;
    call(&b, CallOutcome::Refused);
    assert_eq!(
        b.state(),
        CircuitState::Open,
        "the accepted trial slid out of the window"
    );
}

#[tokio::test(start_paused = true)]
async fn accepted_trials_in_a_row_close_it_and_an_overload_then_trips_it_half_open_again() {
    let b = CircuitBreaker::new(&open_ten_seconds());
    tripped_by_refusals(&b);
    advance(Duration::from_secs(5)).await;
    call(&b, CallOutcome::Success);
    call(&b, CallOutcome::Refused);
    call(&b, CallOutcome::Success);
    assert_eq!(b.state(), CircuitState::HalfOpen, "a refusal broke the run");
    call(&b, CallOutcome::Success);
    assert_eq!(b.state(), CircuitState::Closed, "two accepted in a row");
    tripped_by_refusals(&b);
}

/// A fleet-scoped breaker the daemon's trials closed.
fn closed_by_the_fleet() -> CircuitBreaker {
    let b = CircuitBreaker::new(&CircuitBreakerPolicy {
        scope: BreakerScope::Fleet,
        ..open_ten_seconds()
    });
    open(&b);
    let now = Instant::now();
    assert!(b.heard_at(
        said(CircuitState::Closed, 0, Duration::ZERO),
        now + ms(1_000),
        now
    ));
    b
}

#[tokio::test(start_paused = true)]
async fn fleet_scoped_refusals_follow_acceptance_after_a_return_and_open_it_otherwise() {
    let b = fleet_scoped();
    for _ in 0..3 {
        call(&b, CallOutcome::Refused);
    }
    assert_eq!(
        b.state(),
        CircuitState::Open,
        "no return to follow: the fleet's half-open judges"
    );

    let b = closed_by_the_fleet();
    tripped_by_refusals(&b);
    let now = Instant::now();
    assert!(
        !b.asks_fleet_at(now),
        "half-open on the overload: nothing for the daemon"
    );
    assert!(!b.fleet_report_at(now).unwrap().open);
    assert!(
        !b.heard_at(
            said(CircuitState::Closed, 0, Duration::ZERO),
            now + ms(1_000),
            now
        ),
        "the fleet's word is for open breakers"
    );
    assert_eq!(b.state(), CircuitState::HalfOpen);
    call(&b, CallOutcome::Refused);
    advance(Duration::from_secs(5)).await;
    call(&b, CallOutcome::Refused);
    advance(Duration::from_secs(5)).await;
    call(&b, CallOutcome::Refused);
    assert_eq!(b.state(), CircuitState::Open, "ten seconds, none accepted");
    assert!(b.asks_fleet_at(Instant::now()));
    assert!(b.fleet_report_at(Instant::now()).unwrap().open);

    let b = closed_by_the_fleet();
    advance(Duration::from_secs(10)).await;
    for _ in 0..3 {
        call(&b, CallOutcome::Refused);
    }
    assert_eq!(
        b.state(),
        CircuitState::Open,
        "ten seconds without a refusal: the return's overload ended"
    );

    let b = fleet_scoped();
    open(&b);
    let now = Instant::now();
    b.heard_at(
        said(CircuitState::HalfOpen, 1, Duration::ZERO),
        now + ms(1_000),
        now,
    );
    let trial = b.try_acquire().expect("the daemon's slot");
    assert!(trial.is_fleet_trial());
    trial.record(CallOutcome::Refused);
    assert_eq!(
        b.fleet_report_at(Instant::now()).unwrap().failed,
        1,
        "the daemon judges its trials"
    );
}

#[tokio::test(start_paused = true)]
async fn a_breaker_open_for_less_than_ten_seconds_judges_its_trials_as_briefly() {
    // openTimeout 1 s: two trials a second, and a second of refusals opens it.
    let b = CircuitBreaker::new(&policy());
    tripped_by_refusals(&b);
    call(&b, CallOutcome::Refused);
    assert!(b.try_acquire().is_err());
    advance(ms(500)).await;
    call(&b, CallOutcome::Refused);
    assert_eq!(b.state(), CircuitState::HalfOpen);
    advance(ms(500)).await;
    call(&b, CallOutcome::Refused);
    assert_eq!(b.state(), CircuitState::Open, "a second, none accepted");
}
