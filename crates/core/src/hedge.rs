//! Hedged requests: when an attempt is slow, send another without cancelling
//! the first, and take whichever succeeds first. For idempotent calls only.
//!
//! A hedge goes out every `delay` while none has succeeded, up to
//! `maxHedges` extra attempts; a retryable failure sends the next one at
//! once (as gRPC does). The first success wins and the attempts still
//! running are dropped, which cancels them. A failure that is not retryable
//! ends the call at once; so does the last failure once no attempt is left
//! running and none may be sent: a hedger that waits for every attempt
//! would wait forever here.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! use std::time::Duration;
//! use stormguard_core::hedge::Hedge;
//! use stormguard_core::retry::Verdict;
//!
//! let hedge = Hedge { delay: Duration::from_millis(5), max_hedges: 1 };
//! let answer = hedge
//!     .run(
//!         |attempt| async move {
//!             if attempt == 0 {
//!                 tokio::time::sleep(Duration::from_secs(60)).await; // a stuck replica
//!             }
//!             Ok::<_, String>(attempt)
//!         },
//!         |_| Verdict::Retry { after: None },
//!     )
//!     .await;
//! assert_eq!(answer, Ok(1), "the hedge answered first");
//! # }
//! ```

use std::future::{poll_fn, Future};
use std::pin::{pin, Pin};
use std::task::Poll;
use std::time::Duration;

use tokio::time::{sleep, Instant};

use crate::policy::HedgingPolicy;
use crate::retry::{Cause, GaveUp, RetryError, Verdict};

/// The hedging settings of a policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hedge {
    /// Wait before each extra attempt.
    pub delay: Duration,
    /// Extra attempts at most (validation keeps this within 1 to 4).
    pub max_hedges: u32,
}

impl Hedge {
    /// The hedging settings of a policy's `hedging` block (whether it is enabled is the caller's call).
    pub fn from_policy(policy: &HedgingPolicy) -> Self {
        Self {
            delay: policy.delay,
            max_hedges: policy.max_hedges,
        }
    }

    /// Runs `operation` (given the attempt number, 0 first) with hedges;
    /// `classify` says which failures another attempt may cure.
    pub async fn run<T, E, Op, Fut>(
        &self,
        operation: Op,
        classify: impl Fn(&E) -> Verdict,
    ) -> Result<T, RetryError<E>>
    where
        Op: FnMut(u32) -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        self.run_gated(operation, classify, || true).await
    }

    /// [`run`](Self::run), sending each extra attempt only if `allow_hedge`
    /// says so (a retry budget: hedges are extra load, like retries).
    pub async fn run_gated<T, E, Op, Fut>(
        &self,
        operation: Op,
        classify: impl Fn(&E) -> Verdict,
        allow_hedge: impl FnMut() -> bool,
    ) -> Result<T, RetryError<E>>
    where
        Op: FnMut(u32) -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        self.race(operation, classify, allow_hedge)
            .await
            .map_err(|lost| RetryError {
                attempts: lost.sent,
                gave_up: lost.gave_up,
                last: Cause::Error(lost.last),
            })
    }

    /// The race itself, whose failure always has an error to show.
    pub(crate) async fn race<T, E, Op, Fut>(
        &self,
        mut operation: Op,
        classify: impl Fn(&E) -> Verdict,
        mut allow_hedge: impl FnMut() -> bool,
    ) -> Result<T, Lost<E>>
    where
        Op: FnMut(u32) -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        let mut running: Vec<Pin<Box<Fut>>> = vec![Box::pin(operation(0))];
        let mut sent = 1;
        let mut refused = false;
        let mut last = None;
        let mut hedge_now = false;
        let mut timer = pin!(sleep(self.delay));
        poll_fn(|cx| loop {
            let mut i = 0;
            while i < running.len() {
                match running[i].as_mut().poll(cx) {
                    Poll::Pending => i += 1,
                    Poll::Ready(Ok(value)) => return Poll::Ready(Ok(value)),
                    Poll::Ready(Err(error)) => {
                        drop(running.swap_remove(i));
                        if classify(&error) == Verdict::Fail {
                            return Poll::Ready(Err(Lost {
                                sent,
                                gave_up: GaveUp::NotRetryable,
                                last: error,
                            }));
                        }
                        last = Some(error);
                        hedge_now = true;
                    }
                }
            }
            // A failure sends the next hedge at once; otherwise the timer does.
            let may_send = sent <= self.max_hedges && !refused;
            if may_send && (hedge_now || timer.as_mut().poll(cx).is_ready()) {
                if allow_hedge() {
                    running.push(Box::pin(operation(sent)));
                    sent += 1;
                    hedge_now = false;
                    timer.as_mut().reset(Instant::now() + self.delay);
                    continue;
                }
                refused = true;
            }
            if running.is_empty() {
                let gave_up = if refused {
                    GaveUp::BudgetExhausted
                } else {
                    GaveUp::Exhausted
                };
                let last = last.take().expect("every attempt ended, so one failed");
                return Poll::Ready(Err(Lost { sent, gave_up, last }));
            }
            return Poll::Pending;
        })
        .await
    }
}

/// How a hedged call failed: attempts sent, why no more were, the last error.
pub(crate) struct Lost<E> {
    pub(crate) sent: u32,
    pub(crate) gave_up: GaveUp,
    pub(crate) last: E,
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn hedge(max_hedges: u32) -> Hedge {
        Hedge {
            delay: ms(50),
            max_hedges,
        }
    }

    fn retryable(_: &String) -> Verdict {
        Verdict::Retry { after: None }
    }

    /// Attempt `n` answers after `took[n]`, with `Ok(n)` if `ok[n]`.
    async fn attempt(n: u32, took: &[u64], ok: &[bool]) -> Result<u32, String> {
        sleep(ms(took[n as usize])).await;
        if ok[n as usize] {
            Ok(n)
        } else {
            Err(format!("attempt {n} failed"))
        }
    }

    /// Marks an attempt finished or cancelled when dropped.
    struct Tracker<'a>(&'a RefCell<Vec<u32>>, u32);
    impl Drop for Tracker<'_> {
        fn drop(&mut self) {
            self.0.borrow_mut().push(self.1);
        }
    }

    #[tokio::test(start_paused = true)]
    async fn the_first_success_wins_and_the_others_are_cancelled() {
        let ended = RefCell::new(Vec::new());
        let start = Instant::now();
        let result = hedge(2)
            .run(
                |n| {
                    let tracker = Tracker(&ended, n);
                    async move {
                        let _tracker = tracker;
                        attempt(n, &[1000, 20, 1000], &[true, true, true]).await
                    }
                },
                retryable,
            )
            .await;
        assert_eq!(result, Ok(1));
        assert_eq!(
            start.elapsed(),
            ms(70),
            "the hedge went out at 50 ms and took 20 ms"
        );
        assert_eq!(
            *ended.borrow(),
            vec![1, 0],
            "the slow first attempt was dropped; no third was sent"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn when_every_attempt_fails_the_last_error_returns_at_once() {
        let start = Instant::now();
        let error = hedge(2)
            .run(|n| attempt(n, &[200, 200, 200], &[false; 3]), retryable)
            .await
            .unwrap_err();
        assert_eq!(
            start.elapsed(),
            ms(300),
            "sent at 0, 50 and 100 ms; the last failed at 300 ms"
        );
        assert_eq!(error.attempts, 3);
        assert_eq!(error.gave_up, GaveUp::Exhausted);
        assert_eq!(error.last, Cause::Error("attempt 2 failed".to_string()));
    }

    #[tokio::test(start_paused = true)]
    async fn a_quick_failure_sends_the_next_hedge_without_waiting() {
        let start = Instant::now();
        let result = hedge(1)
            .run(|n| attempt(n, &[10, 10], &[false, true]), retryable)
            .await;
        assert_eq!(result, Ok(1));
        assert_eq!(start.elapsed(), ms(20));
    }

    #[tokio::test(start_paused = true)]
    async fn a_failure_while_others_run_sends_the_next_hedge_at_once() {
        let start = Instant::now();
        let result = hedge(2)
            .run(|n| attempt(n, &[1000, 10, 5], &[true, false, true]), retryable)
            .await;
        assert_eq!(result, Ok(2));
        assert_eq!(
            start.elapsed(),
            ms(65),
            "hedge 1 failed at 60 ms; hedge 2 went out then, not at 110 ms"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_failure_that_is_not_retryable_ends_the_call_at_once() {
        let start = Instant::now();
        let error = hedge(2)
            .run(|n| attempt(n, &[500, 10], &[true, false]), |_| Verdict::Fail)
            .await
            .unwrap_err();
        assert_eq!(
            start.elapsed(),
            ms(60),
            "the hedge's 4xx ends it; the first attempt is dropped"
        );
        assert_eq!((error.attempts, error.gave_up), (2, GaveUp::NotRetryable));
    }

    #[tokio::test(start_paused = true)]
    async fn hedges_wait_for_leave_to_be_sent() {
        let asked = RefCell::new(0);
        let start = Instant::now();
        let error = hedge(3)
            .run_gated(
                |n| attempt(n, &[100, 100], &[false, false]),
                retryable,
                || {
                    *asked.borrow_mut() += 1;
                    *asked.borrow() < 2
                },
            )
            .await
            .unwrap_err();
        assert_eq!(error.attempts, 2, "the budget allowed one hedge");
        assert_eq!(error.gave_up, GaveUp::BudgetExhausted);
        assert_eq!(
            start.elapsed(),
            ms(150),
            "it did not wait for hedges it may not send"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn no_hedges_is_a_plain_call() {
        let error = hedge(0)
            .run(|n| attempt(n, &[10], &[false]), retryable)
            .await
            .unwrap_err();
        assert_eq!((error.attempts, error.gave_up), (1, GaveUp::Exhausted));
    }

    mod properties {
        use super::*;
        use proptest::prelude::*;

        proptest! {
            /// Whatever the attempts do, the call ends when the first success
            /// ends (with it), or when the last of every attempt fails: never later,
            /// never with a loser, never hanging.
            #[test]
            fn the_first_success_wins_and_failure_never_hangs(
                attempts in prop::collection::vec((0u64..300, any::<bool>()), 1..5),
                delay in 1u64..200,
            ) {
                let max_hedges = attempts.len() as u32 - 1;
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_time()
                    .start_paused(true)
                    .build()
                    .unwrap();
                let (result, elapsed, sent) = runtime.block_on(async {
                    let start = Instant::now();
                    let sent = RefCell::new(Vec::new());
                    let hedge = Hedge { delay: ms(delay), max_hedges };
                    let result = hedge
                        .run(
                            |n| {
                                let (took, ok) = attempts[n as usize];
                                sent.borrow_mut().push((n, start.elapsed() + ms(took)));
                                async move {
                                    sleep(ms(took)).await;
                                    if ok { Ok(n) } else { Err(format!("attempt {n} failed")) }
                                }
                            },
                            retryable,
                        )
                        .await;
                    (result, start.elapsed(), sent.into_inner())
                });
                let ok = |n: u32| attempts[n as usize].1;
                let first_success = sent.iter().filter(|(n, _)| ok(*n)).map(|(_, end)| *end).min();
                match result {
                    Ok(winner) => {
                        let end = sent.iter().find(|(n, _)| *n == winner).expect("the winner was sent").1;
                        prop_assert!(ok(winner));
                        prop_assert_eq!(Some(end), first_success, "a later success won");
                        prop_assert_eq!(elapsed, end);
                    }
                    Err(error) => {
                        prop_assert_eq!(first_success, None, "a success was lost");
                        prop_assert_eq!(sent.len(), attempts.len(), "every failure sends the next hedge");
                        prop_assert_eq!(error.attempts as usize, attempts.len());
                        let last_end = sent.iter().map(|(_, end)| *end).max().unwrap();
                        prop_assert_eq!(elapsed, last_end, "it returned when the last attempt failed");
                    }
                }
            }
        }
    }
}
