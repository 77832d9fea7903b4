//! The async driver of a [`Call`]: real time, real sends, and what may end
//! the call early.

use std::fmt;
use std::future::{pending, poll_fn, Future, Pending};
use std::pin::{pin, Pin};
use std::task::Poll;

use rand::rngs::SmallRng;
use rand::{RngCore, SeedableRng};
use tokio::time::{sleep_until, timeout_at, Instant, Sleep};

use super::machine::{Answer, Answered, Call, Controls, Step};
use crate::policy::Criticality;
use crate::retry::{Cause, GaveUp, RetryError, Verdict};

/// What a call may be given besides its operation, as one value:
/// [`Options::default()`] runs until the policy ends the call, with a
/// random source of its own.
///
/// ```
/// # use stormguard_core::call::Options;
/// # use rand::{rngs::SmallRng, SeedableRng};
/// # use tokio::time::{Duration, Instant};
/// let mut rng = SmallRng::seed_from_u64(7);
/// let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
/// let options = Options::default()
///     .cancel_on(async { stopped.await.ok(); })
///     .rng(&mut rng)
///     .deadline(Instant::now() + Duration::from_secs(2));
/// # drop((options, stop));
/// ```
pub struct Options<'r, Cancel = Pending<()>> {
    cancel: Cancel,
    rng: Option<&'r mut (dyn RngCore + Send)>,
    deadline: Option<Instant>,
    criticality: Option<Criticality>,
}

impl Default for Options<'_> {
    fn default() -> Self {
        Self {
            cancel: pending(),
            rng: None,
            deadline: None,
            criticality: None,
        }
    }
}

impl<'r, Cancel> Options<'r, Cancel> {
    /// The call stops as soon as `cancel` resolves, with
    /// [`GaveUp::Cancelled`] and what it had so far: the attempt in flight
    /// is dropped.
    pub fn cancel_on<F: Future<Output = ()>>(self, cancel: F) -> Options<'r, F> {
        Options {
            cancel,
            rng: self.rng,
            deadline: self.deadline,
            criticality: self.criticality,
        }
    }

    /// Jitter is drawn from `rng`, so that a seeded source replays a call's
    /// delays exactly. Without one, each call seeds its own from the thread's.
    pub fn rng(self, rng: &'r mut (dyn RngCore + Send)) -> Self {
        Self {
            rng: Some(rng),
            ..self
        }
    }

    /// The call ends by `at` (the caller's deadline) if the policy's
    /// `maxElapsed` does not end it sooner: an attempt is cut off there, and
    /// a wait for backoff or for a turn that would pass it ends the call at
    /// once.
    pub fn deadline(self, at: Instant) -> Self {
        Self {
            deadline: Some(at),
            ..self
        }
    }

    /// The call is of `class` rather than the policy's `gate.criticality`:
    /// while the send gate paces, more critical calls are served first,
    /// and each waits for a turn no longer than its class's `gate.maxWait`.
    pub fn criticality(self, class: Criticality) -> Self {
        Self {
            criticality: Some(class),
            ..self
        }
    }
}

impl<Cancel> fmt::Debug for Options<'_, Cancel> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Options")
            .field("rng", &self.rng.as_ref().map(|_| "given"))
            .field("deadline", &self.deadline)
            .field("criticality", &self.criticality)
            .finish_non_exhaustive()
    }
}

/// Runs `operation` (given the attempt number, 0 first) under `controls`
/// until it succeeds or the call gives up; `classify` judges each error.
/// [`Unguarded`](super::Unguarded) controls make it the plain retry loop;
/// a [`Guard`](crate::guard::Guard) adds its breaker, gate and budget.
pub async fn run<T, E, Op, Fut, C, Cancel>(
    controls: &C,
    operation: Op,
    classify: impl Fn(&E) -> Verdict,
    options: Options<'_, Cancel>,
) -> Result<T, RetryError<E>>
where
    Op: FnMut(u32) -> Fut,
    Fut: Future<Output = Result<T, E>>,
    C: Controls,
    Cancel: Future<Output = ()>,
{
    let Options {
        cancel,
        rng,
        deadline,
        criticality,
    } = options;
    let mut own;
    let rng: &mut (dyn RngCore + Send) = match rng {
        Some(rng) => rng,
        None => {
            own = SmallRng::from_rng(&mut rand::rng());
            &mut own
        }
    };
    let mut call = Call::begin_at(controls, Instant::now(), deadline);
    if let Some(class) = criticality {
        call = call.of_class(class);
    }
    let mut last = Cause::None;
    let result = tokio::select! {
        result = attempts(operation, classify, rng, controls, &mut call, &mut last) => result,
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
async fn attempts<T, E, Op, Fut, C>(
    mut operation: Op,
    classify: impl Fn(&E) -> Verdict,
    rng: &mut (dyn RngCore + Send),
    controls: &C,
    call: &mut Call,
    last: &mut Cause<E>,
) -> Result<T, GaveUp>
where
    Op: FnMut(u32) -> Fut,
    Fut: Future<Output = Result<T, E>>,
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
