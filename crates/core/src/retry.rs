//! The retry loop: run an operation up to `1 + maxRetries` times, waiting the
//! policy's backoff between attempts, within a per-try timeout and an overall
//! deadline, until it succeeds, fails for good, or the caller cancels.
//!
//! Which failures are worth retrying is the caller's call ([`Verdict`]); for
//! HTTP, [`RetryOn::verdict`] applies a policy's `retryOn` list to a
//! [`Failure`]. A server's `Retry-After` lengthens the wait, never beyond the
//! policy's `maxDelay`.

use std::fmt;
use std::future::Future;
use std::time::{Duration, SystemTime};

use std::future::poll_fn;
use std::pin::{pin, Pin};
use std::task::Poll;

use rand::Rng;
use tokio::time::{sleep_until, timeout_at, Instant, Sleep};

use crate::backoff::Backoff;
use crate::call::{Answer, Answered, Call, Controls, Step, Unguarded};
use crate::policy::{RetryCondition, RetryOn, ValidPolicy};

/// What to do after a failed attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Try again; if the server said when (`Retry-After`), wait at least that long.
    Retry {
        /// The server's `Retry-After`, if it sent one.
        after: Option<Duration>,
    },
    /// Give up: retrying cannot help (a 4xx, a 501, a non-idempotent call).
    Fail,
}

/// How an HTTP attempt failed, in the terms of a policy's `retryOn`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// The connection could not be made.
    Connect,
    /// No answer within the per-try timeout.
    Timeout,
    /// The connection dropped before an answer.
    Reset,
    /// An answer with an error status, and its `Retry-After` if any.
    Status {
        /// The HTTP status code.
        code: u16,
        /// The parsed `Retry-After` header.
        retry_after: Option<Duration>,
    },
}

impl RetryOn {
    /// Whether `failure` is retried under this list: the default list retries
    /// connect errors, timeouts, resets, 429 and every 5xx but 501.
    pub fn verdict(&self, failure: Failure) -> Verdict {
        let retry = match failure {
            Failure::Connect => self.contains(RetryCondition::ConnectFailure),
            Failure::Timeout => self.contains(RetryCondition::Timeout),
            Failure::Reset => self.contains(RetryCondition::Reset),
            Failure::Status { code, .. } => self.covers_status(code),
        };
        match (retry, failure) {
            (false, _) => Verdict::Fail,
            (true, Failure::Status { retry_after, .. }) => Verdict::Retry { after: retry_after },
            (true, _) => Verdict::Retry { after: None },
        }
    }
}

/// Parses a `Retry-After` value: delay-seconds or an HTTP date (RFC 9110).
/// A date in the past means "now"; anything else unreadable is ignored.
pub fn parse_retry_after(value: &str, now: SystemTime) -> Option<Duration> {
    let value = value.trim();
    if let Ok(seconds) = value.parse::<u64>() {
        return Some(Duration::from_secs(seconds));
    }
    let at = httpdate::parse_http_date(value).ok()?;
    Some(at.duration_since(now).unwrap_or_default())
}

/// The retry settings of a policy, ready to run operations.
#[derive(Debug, Clone, PartialEq)]
pub struct Retry {
    /// The delays between attempts.
    pub backoff: Backoff,
    /// Retries after the first attempt.
    pub max_retries: u32,
    /// Timeout of each attempt.
    pub per_try_timeout: Option<Duration>,
    /// Deadline for all attempts and waits together.
    pub max_elapsed: Option<Duration>,
    /// Whether an attempt that timed out is retried (`retryOn: [timeout]`).
    pub retry_timeouts: bool,
}

/// Why the loop ended without a success.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GaveUp {
    /// The last failure was not retryable.
    NotRetryable,
    /// Every attempt was used.
    Exhausted,
    /// The next wait or attempt would pass `maxElapsed`.
    Deadline,
    /// The caller cancelled.
    Cancelled,
    /// The retry budget (or retry throttling) refused another attempt.
    BudgetExhausted,
    /// The circuit breaker refused the attempt.
    CircuitOpen,
    /// The send gate had no turn for the attempt before the deadline.
    NoTurn,
}

/// What the last attempt ended with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cause<E> {
    /// The operation's own error.
    Error(E),
    /// The attempt ran out of time (per-try timeout or deadline).
    TimedOut,
    /// No attempt had ended (cancelled before the first finished).
    None,
}

/// The loop's failure: how many attempts it made, why it stopped, and the last cause.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetryError<E> {
    /// Attempts made, the first included.
    pub attempts: u32,
    /// Why no more were made.
    pub gave_up: GaveUp,
    /// What the last attempt ended with.
    pub last: Cause<E>,
}

impl<E: fmt::Display> fmt::Display for RetryError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let why = match self.gave_up {
            GaveUp::NotRetryable => "the failure is not retryable",
            GaveUp::Exhausted => "every attempt failed",
            GaveUp::Deadline => "the deadline (maxElapsed) passed",
            GaveUp::Cancelled => "cancelled",
            GaveUp::BudgetExhausted => "the retry budget is spent",
            GaveUp::CircuitOpen => "the circuit breaker is open",
            GaveUp::NoTurn => "the send gate had no turn for it before the deadline",
        };
        write!(f, "gave up after {} attempt(s): {why}", self.attempts)?;
        match &self.last {
            Cause::Error(e) => write!(f, "; last error: {e}"),
            Cause::TimedOut => f.write_str("; the last attempt timed out"),
            Cause::None => Ok(()),
        }
    }
}

impl<E: fmt::Debug + fmt::Display> std::error::Error for RetryError<E> {}

impl Retry {
    /// The retry settings of `policy` (validated: a timeout past the clock's
    /// range cannot reach the loop).
    pub fn from_policy(policy: &ValidPolicy) -> Self {
        Self {
            backoff: Backoff::from_policy(policy),
            max_retries: policy.max_retries,
            per_try_timeout: policy.per_try_timeout,
            max_elapsed: policy.max_elapsed,
            retry_timeouts: policy.retry_on.contains(RetryCondition::Timeout),
        }
    }

    /// Runs `operation` (given the attempt number, 0 first) until it succeeds
    /// or the loop gives up; `classify` judges each error.
    pub async fn run<T, E, Op, Fut, R>(
        &self,
        operation: Op,
        classify: impl Fn(&E) -> Verdict,
        rng: &mut R,
    ) -> Result<T, RetryError<E>>
    where
        Op: FnMut(u32) -> Fut,
        Fut: Future<Output = Result<T, E>>,
        R: Rng + ?Sized,
    {
        self.run_until(operation, classify, rng, std::future::pending())
            .await
    }

    /// [`run`](Self::run), stopping as soon as `cancel` resolves.
    pub async fn run_until<T, E, Op, Fut, R>(
        &self,
        operation: Op,
        classify: impl Fn(&E) -> Verdict,
        rng: &mut R,
        cancel: impl Future<Output = ()>,
    ) -> Result<T, RetryError<E>>
    where
        Op: FnMut(u32) -> Fut,
        Fut: Future<Output = Result<T, E>>,
        R: Rng + ?Sized,
    {
        Self::drive(operation, classify, rng, cancel, &Unguarded(self), None).await
    }

    /// The loop under `controls` (a guard's breaker, gate and budget),
    /// ending by `deadline` if given; see [`Call`].
    pub(crate) async fn drive<T, E, Op, Fut, R, C>(
        operation: Op,
        classify: impl Fn(&E) -> Verdict,
        rng: &mut R,
        cancel: impl Future<Output = ()>,
        controls: &C,
        deadline: Option<Instant>,
    ) -> Result<T, RetryError<E>>
    where
        Op: FnMut(u32) -> Fut,
        Fut: Future<Output = Result<T, E>>,
        R: Rng + ?Sized,
        C: Controls,
    {
        let mut call = Call::begin_at(controls, Instant::now(), deadline);
        let mut last = Cause::None;
        let result = tokio::select! {
            result = Self::attempts(operation, classify, rng, controls, &mut call, &mut last) => result,
            () = cancel => Err(GaveUp::Cancelled),
        };
        result.map_err(|gave_up| RetryError {
            attempts: call.attempts(),
            gave_up,
            last,
        })
    }

    /// The loop itself; `call` and `last` are kept outside it so that a
    /// cancellation can report them.
    async fn attempts<T, E, Op, Fut, R, C>(
        mut operation: Op,
        classify: impl Fn(&E) -> Verdict,
        rng: &mut R,
        controls: &C,
        call: &mut Call,
        last: &mut Cause<E>,
    ) -> Result<T, GaveUp>
    where
        Op: FnMut(u32) -> Fut,
        Fut: Future<Output = Result<T, E>>,
        R: Rng + ?Sized,
        C: Controls,
    {
        let mut timer = pin!(sleep_until(Instant::now()));
        loop {
            let send = match next_step(call, controls, timer.as_mut()).await {
                Step::Send(send) => send,
                Step::Stop(why) => return Err(why),
                Step::Wait(_) => unreachable!("next_step waits out every wait"),
            };
            let outcome = match send.until {
                Some(at) => timeout_at(at, operation(send.attempt)).await.ok(),
                None => Some(operation(send.attempt).await),
            };
            let (answer, value) = match outcome {
                Some(Ok(value)) => (Answer::Succeeded, Some(value)),
                Some(Err(error)) => {
                    let verdict = classify(&error);
                    *last = Cause::Error(error);
                    (Answer::Failed(verdict), None)
                }
                None => {
                    *last = Cause::TimedOut;
                    (Answer::TimedOut, None)
                }
            };
            match call.answered_at(controls, send, answer, Instant::now(), rng) {
                Answered::Succeeded => return Ok(value.expect("a success has a value")),
                Answered::Stop(why) => return Err(why),
                Answered::Retry(_) => {}
            }
        }
    }

    /// After failed attempt `attempt` (0 first), judged `verdict`, with
    /// `elapsed` since the first began: the wait before the next attempt, or
    /// why there is none. The retry loop and the simulator both decide here;
    /// leave to retry from a budget is asked after, by the caller.
    pub fn next_delay<R: Rng + ?Sized>(
        &self,
        attempt: u32,
        previous: Duration,
        verdict: Verdict,
        elapsed: Duration,
        rng: &mut R,
    ) -> Result<Duration, GaveUp> {
        let Verdict::Retry { after } = verdict else {
            return Err(GaveUp::NotRetryable);
        };
        if attempt >= self.max_retries {
            return Err(GaveUp::Exhausted);
        }
        let delay = self.wait(attempt, previous, after, rng);
        if self
            .max_elapsed
            .is_some_and(|max| elapsed.saturating_add(delay) >= max)
        {
            return Err(GaveUp::Deadline);
        }
        Ok(delay)
    }

    /// The wait before the next attempt: the backoff's delay, lengthened to the
    /// server's `Retry-After` if it asked for more, never beyond `maxDelay`.
    pub fn wait<R: Rng + ?Sized>(
        &self,
        attempt: u32,
        previous: Duration,
        retry_after: Option<Duration>,
        rng: &mut R,
    ) -> Duration {
        let delay = self.backoff.delay(attempt, previous, rng);
        delay.max(retry_after.unwrap_or_default()).min(self.backoff.max)
    }
}

/// How an attempt ended, for what watches the dependency's health (a
/// breaker, retry throttling).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttemptOutcome {
    /// It succeeded.
    Succeeded,
    /// It failed in a way that says the dependency is unwell (retryable, or timed out).
    Failed,
    /// It failed in a way that says nothing of the dependency (a 4xx).
    Ignored,
}

/// Runs `call` until it has an attempt to send or stops, waiting out
/// backoffs on `timer` and turns in a gate's line on the task's waker.
async fn next_step<C: Controls>(call: &mut Call, controls: &C, mut timer: Pin<&mut Sleep>) -> Step {
    poll_fn(|cx| loop {
        match call.next_at(controls, Instant::now(), Some(cx.waker())) {
            Step::Wait(None) => return Poll::Pending,
            Step::Wait(Some(until)) => {
                timer.as_mut().reset(until);
                if timer.as_mut().poll(cx).is_pending() {
                    return Poll::Pending;
                }
            }
            step => return Poll::Ready(step),
        }
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::{Jitter, RetryPolicy};
    use rand::rngs::SmallRng;
    use rand::SeedableRng;
    use std::future::Ready;
    use std::sync::{Arc, Mutex};
    use tokio::time::sleep;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// 100 ms × 2^attempt, no jitter, 3 retries: attempts at 0, 100, 300, 700 ms.
    fn retry() -> Retry {
        Retry::from_policy(
            &RetryPolicy {
                jitter: Jitter::None,
                ..RetryPolicy::default()
            }
            .try_into()
            .unwrap(),
        )
    }

    fn rng() -> SmallRng {
        SmallRng::seed_from_u64(1)
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
        let result = retry().run(op, always, &mut rng()).await;
        assert_eq!(result, Ok(2));
        assert_eq!(*starts.lock().unwrap(), [0, 100, 300].map(ms));
    }

    #[tokio::test(start_paused = true)]
    async fn makes_one_plus_max_retries_attempts_then_reports_the_last_error() {
        let (starts, op) = flaky(u32::MAX, "down");
        let error = retry().run(op, always, &mut rng()).await.unwrap_err();
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
        let error = retry().run(op, |_| Verdict::Fail, &mut rng()).await.unwrap_err();
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
        retry().run(op, asks(2), &mut rng()).await.unwrap();
        assert_eq!(*starts.lock().unwrap(), [0, 2000, 4000].map(ms));

        let (starts, op) = flaky(1, "503");
        retry().run(op, asks(3600), &mut rng()).await.unwrap();
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
        let error = r.run(op, always, &mut rng()).await.unwrap_err();
        assert_eq!(
            (error.attempts, error.gave_up, error.last),
            (4, GaveUp::Exhausted, Cause::TimedOut)
        );
        assert_eq!(*starts.lock().unwrap(), [0, 1100, 2300, 3700].map(ms));

        let no_timeout_retries = Retry {
            retry_timeouts: false,
            ..r
        };
        let error = no_timeout_retries
            .run(|_| std::future::pending::<Result<(), &str>>(), always, &mut rng())
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
        let error = r.run(op, always, &mut rng()).await.unwrap_err();
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
        let error = r.run(slow, always, &mut rng()).await.unwrap_err();
        assert_eq!((error.gave_up, error.last), (GaveUp::Deadline, Cause::TimedOut));
    }

    #[tokio::test(start_paused = true)]
    async fn cancellation_stops_the_loop_with_what_it_had() {
        let (starts, op) = flaky(u32::MAX, "down");
        let cancel = sleep(ms(250));
        let error = retry()
            .run_until(op, always, &mut rng(), cancel)
            .await
            .unwrap_err();
        assert_eq!(error.gave_up, GaveUp::Cancelled);
        assert_eq!((error.attempts, error.last), (2, Cause::Error("down")));
        assert_eq!(starts.lock().unwrap().len(), 2);
    }

    #[test]
    fn the_next_delay_is_decided_without_a_clock() {
        let r = Retry {
            max_elapsed: Some(ms(1000)),
            ..retry()
        };
        let again = Verdict::Retry { after: None };
        let rng = &mut rng();
        assert_eq!(r.next_delay(0, Duration::ZERO, again, ms(0), rng), Ok(ms(100)));
        assert_eq!(r.next_delay(2, ms(200), again, ms(300), rng), Ok(ms(400)));
        let asked = Verdict::Retry { after: Some(ms(250)) };
        assert_eq!(r.next_delay(0, Duration::ZERO, asked, ms(0), rng), Ok(ms(250)));
        assert_eq!(
            r.next_delay(3, ms(400), again, ms(700), rng),
            Err(GaveUp::Exhausted)
        );
        assert_eq!(
            r.next_delay(0, Duration::ZERO, Verdict::Fail, ms(0), rng),
            Err(GaveUp::NotRetryable)
        );
        assert_eq!(
            r.next_delay(2, ms(200), again, ms(600), rng),
            Err(GaveUp::Deadline),
            "600 + 400 reaches 1 s"
        );
    }

    #[test]
    fn default_http_classification() {
        let on = RetryOn::default();
        let retry = Verdict::Retry { after: None };
        assert_eq!(on.verdict(Failure::Connect), retry);
        assert_eq!(on.verdict(Failure::Timeout), retry);
        assert_eq!(on.verdict(Failure::Reset), retry);
        for code in [429, 500, 502, 503, 504, 599] {
            assert_eq!(
                on.verdict(Failure::Status {
                    code,
                    retry_after: None
                }),
                retry,
                "{code}"
            );
        }
        for code in [400, 401, 404, 409, 501] {
            assert_eq!(
                on.verdict(Failure::Status {
                    code,
                    retry_after: None
                }),
                Verdict::Fail,
                "{code}"
            );
        }
        let after = Some(Duration::from_secs(7));
        assert_eq!(
            on.verdict(Failure::Status {
                code: 503,
                retry_after: after
            }),
            Verdict::Retry { after }
        );
        let gateway_only = RetryOn(vec![RetryCondition::GatewayError]);
        assert_eq!(gateway_only.verdict(Failure::Connect), Verdict::Fail);
        assert_eq!(
            gateway_only.verdict(Failure::Status {
                code: 500,
                retry_after: None
            }),
            Verdict::Fail
        );
        assert_eq!(
            gateway_only.verdict(Failure::Status {
                code: 502,
                retry_after: None
            }),
            retry
        );
    }

    #[test]
    fn retry_after_is_seconds_or_an_http_date() {
        let now = httpdate::parse_http_date("Sun, 22 Nov 2026 06:00:00 GMT").unwrap();
        assert_eq!(parse_retry_after("120", now), Some(Duration::from_secs(120)));
        assert_eq!(parse_retry_after(" 0 ", now), Some(Duration::ZERO));
        assert_eq!(
            parse_retry_after("Sun, 22 Nov 2026 06:01:30 GMT", now),
            Some(Duration::from_secs(90))
        );
        assert_eq!(
            parse_retry_after("Sun, 22 Nov 2026 05:00:00 GMT", now),
            Some(Duration::ZERO)
        );
        for bad in ["", "-1", "1.5", "soon", "Sun, 31 Feb 2026 06:00:00 GMT"] {
            assert_eq!(parse_retry_after(bad, now), None, "{bad:?}");
        }
    }
}
