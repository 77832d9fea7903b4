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
    //! calls, outcomes, cancellations and clock steps. The model keeps its
    //! own list of the closed state's outcomes and works out from it, its
    //! own way, which runs chance explains: the textbook Wilson bound, and
    //! logarithms instead of a product.
    use super::*;
    use proptest::prelude::*;
    use std::collections::VecDeque;

    const IN_A_ROW: u32 = 3;
    const MAX_TRIALS: u32 = 2;
    const SUCCESSES: u32 = 2;
    const OPEN_MS: u64 = 1000;
    /// The count window's size, and the calls it holds before rates are judged.
    const WINDOW: usize = 100;

    #[derive(Debug, Clone)]
    enum Op {
        Acquire,
        Record(usize, bool),
        Cancel(usize),
        Advance(u64),
    }

    /// An op; a recorded call succeeds with odds `ok` to `10 - ok`.
    fn op(ok: u32) -> impl Strategy<Value = Op> {
        let outcome = prop_oneof![ok => Just(true), 10 - ok => Just(false)];
        prop_oneof![
            3 => Just(Op::Acquire),
            4 => (any::<usize>(), outcome).prop_map(|(i, ok)| Op::Record(i, ok)),
            1 => any::<usize>().prop_map(Op::Cancel),
            2 => (0u64..1500).prop_map(Op::Advance),
        ]
    }

    /// What the model expects of the breaker.
    struct Model {
        state: CircuitState,
        episode: u64,
        in_a_row: u32,
        opened_at: Instant,
        trials: u32,
        successes: u32,
        /// The closed state's last [`WINDOW`] outcomes, oldest first: whether
        /// each failed, and whether it is a failure of a run of
        /// [`IN_A_ROW`] or more.
        window: VecDeque<(bool, bool)>,
    }

    impl Model {
        fn enter(&mut self, state: CircuitState, now: Instant) {
            self.state = state;
            self.episode += 1;
            self.in_a_row = 0;
            self.trials = 0;
            self.successes = 0;
            match state {
                CircuitState::Open => self.opened_at = now,
                CircuitState::Closed => self.window.clear(),
                CircuitState::HalfOpen => {}
            }
        }

        /// Whether chance explains the current run: shorter than twice
        /// IN_A_ROW, after fifty calls or more outside long runs failing
        /// below `threshold`, and more likely than one in 100,000 at the
        /// 95 % lower bound of their failure rate.
        fn excuses(&self, threshold: f64) -> bool {
            let run = self.in_a_row;
            let background: Vec<bool> = self
                .window
                .iter()
                .filter(|(_, in_run)| !in_run)
                .map(|(failed, _)| *failed)
                .collect();
            let n = background.len() as f64;
            let p = background.iter().filter(|f| **f).count() as f64 / n;
            if run >= 2 * IN_A_ROW || background.len() < 50 || p >= threshold {
                return false;
            }
            let z: f64 = 1.644_853_626_951_472_2;
            let lower = (p + z * z / (2.0 * n) - z * (p * (1.0 - p) / n + z * z / (4.0 * n * n)).sqrt())
                / (1.0 + z * z / n);
            // A chance within a hair of one in 100,000 is taken as at it.
            f64::from(run) * lower.ln() > 1e-5f64.ln() + 1e-9
        }

        /// A call that started in the closed state ends: `ok` or failed.
        fn closed_call(&mut self, ok: bool, threshold: f64, now: Instant, seen: &mut Seen) {
            self.in_a_row = if ok { 0 } else { self.in_a_row + 1 };
            self.window.push_back((!ok, false));
            if self.window.len() > WINDOW {
                self.window.pop_front();
            }
            let long = self.in_a_row >= IN_A_ROW;
            if long {
                for outcome in self.window.iter_mut().rev().take(self.in_a_row as usize) {
                    outcome.1 = true;
                }
            }
            let believed = long && !self.excuses(threshold);
            let rate = self.window.len() == WINDOW
                && self.window.iter().filter(|(failed, _)| *failed).count() as f64 / WINDOW as f64
                    >= threshold;
            if believed && self.in_a_row >= 2 * IN_A_ROW {
                seen.capped += 1;
            }
            let background = self.window.iter().filter(|(_, in_run)| !in_run).count();
            if believed && self.in_a_row < 2 * IN_A_ROW && background >= 50 {
                seen.bounded += 1;
            }
            if long && !believed {
                seen.excused += 1;
            }
            if believed || rate {
                self.enter(CircuitState::Open, now);
            }
        }
    }

    /// What a sequence of ops went through: runs excused; runs that
    /// opened the breaker because they reached twice IN_A_ROW; shorter
    /// runs that opened it after fifty calls or more, as the bound said.
    #[derive(Debug, Default)]
    struct Seen {
        excused: u32,
        capped: u32,
        bounded: u32,
    }

    impl Seen {
        fn add(&mut self, other: Seen) {
            self.excused += other.excused;
            self.capped += other.capped;
            self.bounded += other.bounded;
        }
    }

    /// One step of a closed breaker's calls, one after another: a call that
    /// fails if its draw (of 1,000) is below the background's share, or a
    /// run of failures.
    #[derive(Debug, Clone)]
    enum Step {
        Call(u32),
        Run(u32),
    }

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            25 => (0u32..1000).prop_map(Step::Call),
            1 => (1u32..8).prop_map(Step::Run),
        ]
    }

    /// Plays `steps` on a closed breaker and on the model, a call at a
    /// time, until the model says the breaker opened: a background failing
    /// `failing` calls in 1,000 with runs among it.
    fn follow_runs(threshold: f64, failing: u32, steps: Vec<Step>) -> Result<Seen, TestCaseError> {
        let policy = CircuitBreakerPolicy {
            consecutive_failures: IN_A_ROW,
            failure_rate_threshold: threshold,
            minimum_calls: 10_000,
            sliding_window: SlidingWindow::Count { calls: WINDOW as u32 },
            ..policy()
        };
        let now = Instant::now();
        let breaker = CircuitBreaker::new_at(&policy, now);
        let mut model = Model {
            state: CircuitState::Closed,
            episode: 0,
            in_a_row: 0,
            opened_at: now,
            trials: 0,
            successes: 0,
            window: VecDeque::new(),
        };
        let mut seen = Seen::default();
        let calls = steps.into_iter().flat_map(|step| match step {
            Step::Call(draw) => vec![draw >= failing],
            Step::Run(n) => vec![false; n as usize],
        });
        for ok in calls {
            let outcome = if ok {
                CallOutcome::Success
            } else {
                CallOutcome::Failure
            };
            breaker
                .try_acquire_at(now)
                .expect("closed")
                .record_at(outcome, now);
            model.closed_call(ok, threshold, now, &mut seen);
            prop_assert_eq!(breaker.state(), model.state);
            if model.state != CircuitState::Closed {
                break;
            }
        }
        Ok(seen)
    }

    /// Plays `ops` on a breaker whose failure-rate threshold is
    /// `threshold` and on the model, step by step.
    fn follow(threshold: f64, ops: Vec<Op>) -> Result<Seen, TestCaseError> {
        // Slow calls never count; rates are judged once the window is full.
        let policy = CircuitBreakerPolicy {
            consecutive_failures: IN_A_ROW,
            failure_rate_threshold: threshold,
            slow_call_duration: Duration::from_secs(86_400),
            minimum_calls: 10_000,
            sliding_window: SlidingWindow::Count { calls: WINDOW as u32 },
            open_timeout: ms(OPEN_MS),
            half_open_max_calls: MAX_TRIALS,
            success_threshold: SUCCESSES,
            ..policy()
        };
        let mut now = Instant::now();
        let breaker = CircuitBreaker::new_at(&policy, now);
        let mut model = Model {
            state: CircuitState::Closed,
            episode: 0,
            in_a_row: 0,
            opened_at: now,
            trials: 0,
            successes: 0,
            window: VecDeque::new(),
        };
        let mut seen = Seen::default();
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
                    permit.record_at(
                        if ok {
                            CallOutcome::Success
                        } else {
                            CallOutcome::Failure
                        },
                        now,
                    );
                    if episode == model.episode {
                        match (model.state, ok) {
                            (CircuitState::Closed, ok) => model.closed_call(ok, threshold, now, &mut seen),
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
        Ok(seen)
    }

    proptest! {
        #[test]
        fn the_breaker_follows_the_model(
            threshold in prop::sample::select(vec![0.3, 0.6, 1.0]),
            ops in (1u32..10).prop_flat_map(|ok| prop::collection::vec(op(ok), 1..300)),
        ) {
            follow(threshold, ops)?;
        }

        #[test]
        fn runs_after_a_background_are_excused_as_the_model_says(
            threshold in prop::sample::select(vec![0.1, 0.5, 1.0]),
            failing in 0u32..250,
            steps in prop::collection::vec(step(), 1..500),
        ) {
            follow_runs(threshold, failing, steps)?;
        }
    }

    /// The properties reach what they are for: over fixed draws of their
    /// inputs, runs are excused, runs open the breaker at twice IN_A_ROW,
    /// and shorter ones open it as the bound says.
    #[test]
    fn the_model_sees_runs_excused_capped_and_bounded() {
        use proptest::strategy::ValueTree;
        use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
        let seed = [7; 32];
        let mut runner =
            TestRunner::new_with_rng(Config::default(), TestRng::from_seed(RngAlgorithm::ChaCha, &seed));
        let (mut ops, mut runs) = (Seen::default(), Seen::default());
        for failing in (0..250).step_by(10) {
            let steps = prop::collection::vec(step(), 400)
                .new_tree(&mut runner)
                .unwrap()
                .current();
            runs.add(follow_runs(1.0, failing, steps).unwrap());
        }
        let mut runner =
            TestRunner::new_with_rng(Config::default(), TestRng::from_seed(RngAlgorithm::ChaCha, &seed));
        for _ in 0..32 {
            let sequence = prop::collection::vec(op(7), 600)
                .new_tree(&mut runner)
                .unwrap()
                .current();
            ops.add(follow(1.0, sequence).unwrap());
        }
        assert!(ops.excused > 0 && ops.capped > 0, "{ops:?}");
        assert!(
            runs.excused > 0 && runs.capped > 0 && runs.bounded > 0,
            "{runs:?}"
        );
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

/// [`runs_policy`] with `failureRateThreshold: 0.95`, so that a background
/// of up to 49 % is judged by the excuse alone, never by the failure rate.
fn lenient_policy() -> CircuitBreakerPolicy {
    CircuitBreakerPolicy {
        failure_rate_threshold: 0.95,
        ..runs_policy()
    }
}

/// One call that fails or succeeds at `now`, on a closed breaker.
fn feed(b: &CircuitBreaker, now: Instant, failed: bool) {
    let outcome = if failed {
        CallOutcome::Failure
    } else {
        CallOutcome::Success
    };
    b.try_acquire_at(now).expect("closed").record_at(outcome, now);
}

/// Calls of which `failing` (at most 7) of every ten fail, from the
/// fourth: a background rate with no run longer than `failing`, that
/// begins and ends with successes.
fn pattern(b: &CircuitBreaker, now: Instant, calls: u32, failing: u32) {
    for i in 0..calls {
        feed(b, now, (3..3 + failing).contains(&(i % 10)));
    }
}

/// Fails calls until the breaker opens; the failures in a row it opened
/// at (the run counts failures of the background just before, if any).
/// Panics past 100.
fn run_that_opens(b: &CircuitBreaker, now: Instant) -> u32 {
    for _ in 0..100 {
        feed(b, now, true);
        if b.state() == CircuitState::Open {
            return b.snapshot().consecutive_failures;
        }
    }
    panic!("100 failures in a row did not open it");
}

/// A closed breaker with `policy` that has seen `calls` calls fail at
/// random at `rate` (drawn from `rng`) without opening; a background whose
/// own runs open the breaker is drawn again on a fresh one.
fn after_background(
    policy: &CircuitBreakerPolicy,
    rng: &mut impl rand::Rng,
    rate: f64,
    calls: u32,
    now: Instant,
) -> CircuitBreaker {
    'draw: loop {
        let b = CircuitBreaker::new_at(policy, now);
        for _ in 0..calls {
            feed(&b, now, rng.random_bool(rate));
            if b.state() == CircuitState::Open {
                continue 'draw;
            }
        }
        return b;
    }
}

#[test]
fn the_background_is_taken_at_the_low_end_of_what_the_window_shows() {
    assert_eq!(background_floor(0, 100), 0.0, "no failure: no background");
    assert_eq!(background_floor(0, 0), 0.0);
    let z = BACKGROUND_Z;
    for (f, n) in [
        (1, 2),
        (9, 90),
        (27, 90),
        (49, 100),
        (100, 100),
        (1, 10_000),
        (5_000, 10_000),
    ] {
        let (p, n_) = (f64::from(f) / f64::from(n), f64::from(n));
        let textbook = (p + z * z / (2.0 * n_) - z * (p * (1.0 - p) / n_ + z * z / (4.0 * n_ * n_)).sqrt())
            / (1.0 + z * z / n_);
        let floor = background_floor(f, n);
        assert!(
            (floor - textbook).abs() < 1e-12,
            "{f} of {n}: {floor} against {textbook}"
        );
        assert!(floor < p, "{f} of {n}: the low end is below the rate");
    }
    assert!(
        background_floor(1, 2) < 0.125,
        "one failure in two calls is little evidence of a rate"
    );
    assert!(
        background_floor(10, 20) < background_floor(50, 100)
            && background_floor(50, 100) < background_floor(500, 1000),
        "the more calls at one rate, the closer the bound comes to it"
    );
}

#[test]
fn a_chance_of_exactly_one_in_100000_is_believed() {
    let product = 0.1f64 * 0.1 * 0.1 * 0.1 * 0.1;
    assert!(
        product > RUN_BY_CHANCE,
        "in floating point 0.1⁵ rounds above 1e-5"
    );
    assert!(rare(0.1, 5), "but it is one in 100,000, and believed");
    assert!(!rare(0.1, 4), "0.1⁴ is one in 10,000");
    assert!(!rare(0.100_000_01, 5), "a hair above one in 100,000 is excused");
    assert!(rare(0.0, 1));
    assert!(rare(0.316, 10) && !rare(0.317, 10));
}

#[test]
fn a_run_is_excused_only_on_enough_background_below_the_threshold_and_short_of_twice_consecutive_failures() {
    let background = |calls, failures| Background { calls, failures };
    // 30 of 100 calls failed: at least 23.1 %, 95 % sure; 0.231⁷ = 3.5e-5, 0.231⁸ = 8e-6.
    assert!(chance_explains(7, 5, background(100, 30), 0.5));
    assert!(!chance_explains(8, 5, background(100, 30), 0.5));
    // At 45 %, chance explains ten in a row, but ten is twice five.
    assert!(chance_explains(9, 5, background(100, 45), 0.95));
    assert!(!chance_explains(10, 5, background(100, 45), 0.95));
    assert!(
        !chance_explains(5, 5, background(100, 45), 0.45),
        "at the threshold: a failing dependency"
    );
    assert!(chance_explains(5, 5, background(50, 15), 0.5));
    assert!(
        !chance_explains(5, 5, background(49, 15), 0.5),
        "fewer than fifty calls"
    );
    assert!(
        !chance_explains(5, 5, background(100, 0), 0.5),
        "no failures before the run"
    );
}

/// Every call failing after 300 calls failing at random (seeds 0 to 11):
/// the failures in a row that opened the breaker were 5 (twice 6) at 10 %,
/// 7 to 9 at 30 %, and 10 (the cap) at 49 %. With the window's plain rate
/// and no cap they were 5 to 7, 9 to 12, and 15 to 19.
#[test]
fn a_true_outage_after_a_random_background_opens_it_within_twice_consecutive_failures() {
    use rand::SeedableRng;
    let now = Instant::now();
    let policy = lenient_policy();
    let cap = 2 * policy.consecutive_failures;
    for rate in [0.1, 0.3, 0.49] {
        let mut runs = Vec::new();
        for seed in 0..12 {
            let mut rng = rand::rngs::SmallRng::seed_from_u64(seed);
            let b = after_background(&policy, &mut rng, rate, 300, now);
            runs.push(run_that_opens(&b, now));
        }
        assert!(
            runs.iter().all(|&run| run <= cap),
            "a {rate} background: the outage opened it after {runs:?} failures in a row"
        );
    }
}

#[test]
fn a_ten_percent_background_opens_it_at_consecutive_failures() {
    let now = Instant::now();
    let b = CircuitBreaker::new_at(&runs_policy(), now);
    // Exactly one call in ten failing before the run: 0.1⁵ is one in 100,000.
    pattern(&b, now, 90, 1);
    assert_eq!(run_that_opens(&b, now), 5);
}

#[test]
fn a_window_of_few_calls_does_not_excuse_a_run() {
    let now = Instant::now();
    // Twenty calls, eight failed (never two in a row): 40 %, on too little.
    let fresh = CircuitBreaker::new_at(&lenient_policy(), now);
    for i in 0..20 {
        feed(&fresh, now, i % 5 == 0 || i % 5 == 2);
    }
    assert_eq!(run_that_opens(&fresh, now), 5, "twenty calls excuse nothing");

    // A window of forty calls never holds enough, however long the background.
    let small = CircuitBreaker::new_at(
        &CircuitBreakerPolicy {
            minimum_calls: 40,
            sliding_window: SlidingWindow::Count { calls: 40 },
            ..lenient_policy()
        },
        now,
    );
    pattern(&small, now, 400, 3);
    assert_eq!(run_that_opens(&small, now), 5, "forty calls excuse nothing");
}

#[test]
fn a_run_of_twice_consecutive_failures_opens_it_whatever_the_background() {
    let now = Instant::now();
    let b = CircuitBreaker::new_at(&lenient_policy(), now);
    // 40 % failing, in runs of four.
    pattern(&b, now, 100, 4);
    assert_eq!(
        run_that_opens(&b, now),
        10,
        "ten in a row open it, excuse or none"
    );
}

#[test]
fn a_flapping_dependency_does_not_excuse_its_next_real_run() {
    let now = Instant::now();
    // 30 % failing, in runs of three: the background a real run is judged against.
    let steady = CircuitBreaker::new_at(&runs_policy(), now);
    pattern(&steady, now, 80, 3);
    let alone = run_that_opens(&steady, now);
    assert!(
        alone < 10,
        "the background alone excuses fewer than twice five: {alone}"
    );

    // The same background, with two brief outages of seven calls among it:
    // each excused, as chance explains it, but neither is background.
    let flapping = CircuitBreaker::new_at(&runs_policy(), now);
    pattern(&flapping, now, 60, 3);
    for _ in 0..2 {
        for _ in 0..7 {
            feed(&flapping, now, true);
        }
        assert_eq!(
            flapping.state(),
            CircuitState::Closed,
            "a flap of seven is excused"
        );
        pattern(&flapping, now, 10, 3);
    }
    assert_eq!(
        run_that_opens(&flapping, now),
        alone,
        "the flaps did not make its outage look like chance"
    );
}

/// A dependency failing 30 % of calls at random (a bad replica behind a
/// balancer), under the defaults: over 1,000,000 calls (seed 30) the
/// breaker opened 80 times, about once in 12,500 calls (with the window's
/// plain rate and no bound, 12 times); a breaker that believed every run
/// of five would open about once in 590.
#[test]
fn a_dependency_failing_30_percent_at_random_is_rarely_opened_by_chance() {
    use rand::{Rng, SeedableRng};
    let now = Instant::now();
    let mut rng = rand::rngs::SmallRng::seed_from_u64(30);
    let mut b = CircuitBreaker::new_at(&runs_policy(), now);
    let mut opened = 0;
    for _ in 0..1_000_000 {
        feed(&b, now, rng.random_bool(0.3));
        if b.state() == CircuitState::Open {
            opened += 1;
            b = CircuitBreaker::new_at(&runs_policy(), now);
        }
    }
    assert!(opened <= 120, "opened {opened} times in 1,000,000 calls");
}

#[tokio::test(start_paused = true)]
async fn a_run_that_a_dependency_failing_at_random_makes_by_chance_does_not_open_it() {
    let b = CircuitBreaker::new(&runs_policy());
    // 30 % of calls failing, spread out: three in every ten.
    for i in 0..90 {
        let outcome = if i % 10 < 3 {
            CallOutcome::Failure
        } else {
            CallOutcome::Success
        };
        call(&b, outcome);
    }
    for _ in 0..7 {
        call(&b, CallOutcome::Failure);
    }
    assert_eq!(
        b.state(),
        CircuitState::Closed,
        "seven in a row at 30 % (at least 22.7 %, 95 % sure): 0.227⁷ = 3e-5, more than one in 100,000"
    );
    call(&b, CallOutcome::Failure);
    assert_eq!(b.state(), CircuitState::Open, "eight in a row: 0.227⁸ = 7e-6");
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
    for i in 0..80 {
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
        "81 calls: the rate is not judged yet"
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
