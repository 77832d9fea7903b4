//! The async loop against the paused clock: waits, attempts, timeouts,
//! deadlines and cancellation, with no breaker, gate or budget (a guard's
//! own are tested in `guard/tests.rs`).

use std::future::{Future, Ready};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::rngs::SmallRng;
use rand::SeedableRng;
use tokio::time::{sleep, Instant};

use super::{run, Options, Unguarded};
use crate::policy::RetryPolicy;
use crate::retry::tests::{ms, retry};
use crate::retry::{Cause, GaveUp, Retry, RetryError, Verdict};

fn rng() -> SmallRng {
    SmallRng::seed_from_u64(1)
}

/// The plain retry loop over `retry`, with a seeded random source.
async fn plain<T, E, Fut>(
    retry: &Retry,
    operation: impl FnMut(u32) -> Fut,
    classify: impl Fn(&E) -> Verdict,
) -> Result<T, RetryError<E>>
where
    Fut: Future<Output = Result<T, E>>,
{
    let mut rng = rng();
    run(
        &Unguarded(retry),
        operation,
        classify,
        Options::default().rng(&mut rng),
    )
    .await
}

/// When each attempt started, relative to the first.
type Starts = Arc<Mutex<Vec<Duration>>>;

/// An operation that fails `failures` times with `error`, recording when each attempt started.
fn flaky(
    failures: u32,
    error: &'static str,
) -> (Starts, impl FnMut(u32) -> Ready<Result<u32, &'static str>>) {
    let start = Instant::now();
    let starts = Arc::new(Mutex::new(Vec::new()));
    let log = starts.clone();
    let op = move |attempt: u32| {
        log.lock().unwrap().push(start.elapsed());
        std::future::ready(if attempt < failures {
            Err(error)
        } else {
            Ok(attempt)
        })
    };
    (starts, op)
}

fn always(_: &&str) -> Verdict {
    Verdict::Retry { after: None }
}

#[tokio::test(start_paused = true)]
async fn waits_the_exact_backoff_between_attempts() {
    let (starts, op) = flaky(2, "busy");
    let result = plain(&retry(), op, always).await;
    assert_eq!(result, Ok(2));
    assert_eq!(*starts.lock().unwrap(), [0, 100, 300].map(ms));
}

#[tokio::test(start_paused = true)]
async fn makes_one_plus_max_retries_attempts_then_reports_the_last_error() {
    let (starts, op) = flaky(u32::MAX, "down");
    let error = plain(&retry(), op, always).await.unwrap_err();
    assert_eq!(error.attempts, 4);
    assert_eq!(error.gave_up, GaveUp::Exhausted);
    assert_eq!(error.last, Cause::Error("down"));
    assert_eq!(*starts.lock().unwrap(), [0, 100, 300, 700].map(ms));
    assert_eq!(
        error.to_string(),
        "gave up after 4 attempt(s): every attempt failed; last error: down"
    );
}

#[tokio::test(start_paused = true)]
async fn a_non_retryable_error_stops_at_once() {
    let (starts, op) = flaky(u32::MAX, "bad request");
    let error = plain(&retry(), op, |_| Verdict::Fail).await.unwrap_err();
    assert_eq!((error.attempts, error.gave_up), (1, GaveUp::NotRetryable));
    assert_eq!(starts.lock().unwrap().len(), 1);
}

#[tokio::test(start_paused = true)]
async fn retry_after_lengthens_the_wait_up_to_max_delay() {
    let (starts, op) = flaky(2, "429");
    let asks = |seconds| {
        move |_: &&str| Verdict::Retry {
            after: Some(Duration::from_secs(seconds)),
        }
    };
    plain(&retry(), op, asks(2)).await.unwrap();
    assert_eq!(*starts.lock().unwrap(), [0, 2000, 4000].map(ms));

    let (starts, op) = flaky(1, "503");
    plain(&retry(), op, asks(3600)).await.unwrap();
    assert_eq!(
        *starts.lock().unwrap(),
        [0, 10_000].map(ms),
        "capped at maxDelay (10 s)"
    );
}

#[tokio::test(start_paused = true)]
async fn per_try_timeout_ends_slow_attempts_and_retries_them() {
    let r = Retry {
        per_try_timeout: Some(ms(1000)),
        ..retry()
    };
    let start = Instant::now();
    let starts = Arc::new(Mutex::new(Vec::new()));
    let op = |_| {
        starts.lock().unwrap().push(start.elapsed());
        async { std::future::pending::<Result<(), &str>>().await }
    };
    let error = plain(&r, op, always).await.unwrap_err();
    assert_eq!(
        (error.attempts, error.gave_up, error.last),
        (4, GaveUp::Exhausted, Cause::TimedOut)
    );
    assert_eq!(*starts.lock().unwrap(), [0, 1100, 2300, 3700].map(ms));

    let no_timeout_retries = Retry {
        retry_timeouts: false,
        ..r
    };
    let error = plain(
        &no_timeout_retries,
        |_| std::future::pending::<Result<(), &str>>(),
        always,
    )
    .await;
    assert_eq!(error.unwrap_err().gave_up, GaveUp::NotRetryable);
}

#[tokio::test(start_paused = true)]
async fn max_elapsed_is_a_deadline_for_the_whole_loop() {
    let r = Retry {
        max_retries: 100,
        max_elapsed: Some(ms(1000)),
        ..retry()
    };
    let start = Instant::now();
    let (starts, op) = flaky(u32::MAX, "down");
    let error = plain(&r, op, always).await.unwrap_err();
    assert_eq!(error.gave_up, GaveUp::Deadline);
    assert_eq!(
        *starts.lock().unwrap(),
        [0, 100, 300, 700].map(ms),
        "the next wait (800 ms) would pass 1 s"
    );
    assert_eq!(
        start.elapsed(),
        ms(700),
        "gives up at once rather than sleep past the deadline"
    );

    let slow = |_| async {
        sleep(ms(5000)).await;
        Ok::<(), &str>(())
    };
    let error = plain(&r, slow, always).await.unwrap_err();
    assert_eq!((error.gave_up, error.last), (GaveUp::Deadline, Cause::TimedOut));
}

#[tokio::test(start_paused = true)]
async fn cancellation_stops_the_loop_with_what_it_had() {
    let (starts, op) = flaky(u32::MAX, "down");
    let cancel = sleep(ms(250));
    let options = Options::default().cancel_on(cancel);
    let error = run(&Unguarded(&retry()), op, always, options).await.unwrap_err();
    assert_eq!(error.gave_up, GaveUp::Cancelled);
    assert_eq!((error.attempts, error.last), (2, Cause::Error("down")));
    assert_eq!(starts.lock().unwrap().len(), 2);
}

#[tokio::test(start_paused = true)]
async fn the_callers_deadline_ends_the_call_before_max_elapsed_would() {
    let start = Instant::now();
    let (starts, op) = flaky(u32::MAX, "down");
    let options = Options::default().deadline(start + ms(250));
    let error = run(&Unguarded(&retry()), op, always, options).await.unwrap_err();
    assert_eq!((error.attempts, error.gave_up), (2, GaveUp::Deadline));
    assert_eq!(
        *starts.lock().unwrap(),
        [0, 100].map(ms),
        "a wait to 300 ms would pass 250 ms"
    );
    assert_eq!(
        start.elapsed(),
        ms(100),
        "gives up at once rather than sleep past it"
    );

    let slow = |_| async {
        sleep(ms(5000)).await;
        Ok::<(), &str>(())
    };
    let start = Instant::now();
    let options = Options::default().deadline(start + ms(1000));
    let error = run(&Unguarded(&retry()), slow, always, options)
        .await
        .unwrap_err();
    assert_eq!((error.gave_up, error.last), (GaveUp::Deadline, Cause::TimedOut));
    assert_eq!(
        start.elapsed(),
        ms(1000),
        "the attempt in flight is cut off at the deadline"
    );
}

#[tokio::test(start_paused = true)]
async fn a_seeded_random_source_replays_the_jittered_waits() {
    let jittered = Retry::from_policy(&RetryPolicy::default().try_into().unwrap());
    let starts_with = |seed| {
        let jittered = jittered.clone();
        async move {
            let (starts, op) = flaky(3, "busy");
            let mut rng = SmallRng::seed_from_u64(seed);
            let options = Options::default().rng(&mut rng);
            run(&Unguarded(&jittered), op, always, options).await.unwrap();
            let starts = starts.lock().unwrap().clone();
            starts
        }
    };
    let first = starts_with(7).await;
    assert_eq!(first.len(), 4);
    assert_eq!(first, starts_with(7).await, "the same seed, the same waits");
    assert_ne!(first, starts_with(8).await, "another seed, other waits");
}
