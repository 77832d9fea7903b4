//! One dependency: its policy and its reports, around each call.

use std::future::Future;
use std::sync::atomic::{AtomicU32, Ordering::Relaxed};

use stormguard_core::call::Options;
use stormguard_core::guard::Attempt;
use stormguard_core::policy::Criticality;
use stormguard_core::retry::{Cause, Failure, RetryError, Verdict};
use tokio::time::Instant;

use crate::policy::PolicyClient;
use crate::report::{Outcome, Reporter};

/// Calls to one dependency, under its current policy, with every attempt reported.
#[derive(Clone)]
pub struct Dependency {
    policy: PolicyClient,
    reporter: Reporter,
    class: Option<Criticality>,
}

impl Dependency {
    /// Calls to `policy`'s service, reported through `reporter`.
    pub fn new(policy: PolicyClient, reporter: Reporter) -> Self {
        Self {
            policy,
            reporter,
            class: None,
        }
    }

    /// The same dependency, its calls of `class` rather than the policy's
    /// `gate.criticality`: while the send gate cannot serve every call,
    /// critical ones go first and sheddable ones last, and each waits for a
    /// turn no longer than its class's `gate.maxWait`. A request sent
    /// through the [layer](Self::layer) or the reqwest middleware may name
    /// its own class instead, as a [`Criticality`] in its extensions.
    pub fn with_criticality(&self, class: Criticality) -> Self {
        Self {
            class: Some(class),
            ..self.clone()
        }
    }

    /// The policy client.
    pub fn policy(&self) -> &PolicyClient {
        &self.policy
    }

    /// Runs an HTTP call to `endpoint`: `operation` sends one attempt and
    /// answers `Ok` or a [`Failure`]; the policy's `retryOn` decides which
    /// failures are retried.
    pub async fn call<T, Op, Fut>(&self, endpoint: &str, operation: Op) -> Result<T, RetryError<Failure>>
    where
        Op: Fn(Attempt) -> Fut,
        Fut: Future<Output = Result<T, Failure>>,
    {
        let guard = self.policy.guard();
        self.call_with(endpoint, operation, move |failure| {
            (guard.verdict(*failure), outcome_of(failure))
        })
        .await
    }

    /// Runs a call to `endpoint` with any error type: `classify` says whether
    /// an error is retried and how it counts in reports.
    pub async fn call_with<T, E, Op, Fut>(
        &self,
        endpoint: &str,
        operation: Op,
        classify: impl Fn(&E) -> (Verdict, Outcome),
    ) -> Result<T, RetryError<E>>
    where
        Op: Fn(Attempt) -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        self.guarded(endpoint, operation, classify, None, None).await
    }

    /// Sends a request to `endpoint` whose every attempt gets a response or
    /// an error ([`Sent`]), as a client stack does: the answer is the last
    /// response, whatever its status (a 503 the policy stopped retrying is
    /// returned as the 503), and the error only when no attempt was
    /// answered. A request that cannot be sent again (`resendable` false)
    /// is not retried. The call ends by `deadline`, if given, and is of
    /// `class` if given (else this dependency's).
    pub(crate) async fn send<R, E, Op, Fut>(
        &self,
        endpoint: &str,
        operation: Op,
        resendable: bool,
        deadline: Option<Instant>,
        class: Option<Criticality>,
    ) -> Result<R, RetryError<E>>
    where
        Op: Fn(Attempt) -> Fut,
        Fut: Future<Output = Result<R, Sent<R, E>>>,
    {
        let guard = self.policy.guard();
        let classify = move |sent: &Sent<R, E>| {
            let failure = sent.failure();
            let verdict = if resendable {
                guard.verdict(failure)
            } else {
                Verdict::Fail
            };
            (verdict, outcome_of(&failure))
        };
        let RetryError {
            attempts,
            gave_up,
            last,
        } = match self.guarded(endpoint, operation, classify, deadline, class).await {
            Ok(response) => return Ok(response),
            Err(error) => error,
        };
        let last = match last {
            Cause::Error(Sent::Answered(response, _)) => return Ok(response),
            Cause::Error(Sent::Failed(error, _)) => Cause::Error(error),
            Cause::TimedOut => Cause::TimedOut,
            Cause::None => Cause::None,
        };
        Err(RetryError {
            attempts,
            gave_up,
            last,
        })
    }

    async fn guarded<T, E, Op, Fut>(
        &self,
        endpoint: &str,
        operation: Op,
        classify: impl Fn(&E) -> (Verdict, Outcome),
        deadline: Option<Instant>,
        class: Option<Criticality>,
    ) -> Result<T, RetryError<E>>
    where
        Op: Fn(Attempt) -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        let guard = self.policy.guard();
        let service = self.policy.service();
        self.reporter.track(service, &guard);
        let _in_flight = self.reporter.in_flight(service);
        let classify = &classify;
        let won = &AtomicU32::new(NO_WINNER);
        let reported = |attempt: Attempt| {
            let mut unfinished = Unfinished {
                reporter: &self.reporter,
                service,
                endpoint,
                attempt,
                won,
                done: false,
            };
            let sent = operation(attempt);
            async move {
                let result = sent.await;
                let outcome = match &result {
                    Ok(_) => {
                        won.store(attempt.retry, Relaxed);
                        Outcome::Success
                    }
                    Err(error) => classify(error).1,
                };
                unfinished.finish(outcome);
                result
            }
        };
        let mut options = Options::default();
        if let Some(at) = deadline {
            options = options.deadline(at);
        }
        if let Some(class) = class.or(self.class) {
            options = options.criticality(class);
        }
        guard.call(reported, |error| classify(error).0, options).await
    }
}

/// What one attempt through a client stack gave that is not the answer
/// wanted: a response the policy reads as a failure, or the stack's error;
/// each with the [`Failure`] it stands for.
pub(crate) enum Sent<R, E> {
    /// A response, such as a 503.
    Answered(R, Failure),
    /// No response: the stack's error.
    Failed(E, Failure),
}

impl<R, E> Sent<R, E> {
    fn failure(&self) -> Failure {
        match self {
            Sent::Answered(_, failure) | Sent::Failed(_, failure) => *failure,
        }
    }
}

/// No attempt of the call has succeeded yet.
const NO_WINNER: u32 = u32::MAX;

/// An attempt sent and not yet answered. Dropped unanswered (its per-try
/// timeout fired, or the call was cancelled) it counts as an `error`: no
/// answer came. A hedge dropped because another attempt of the same retry
/// succeeded is not counted: it was cancelled, not failed.
struct Unfinished<'a> {
    reporter: &'a Reporter,
    service: &'a str,
    endpoint: &'a str,
    attempt: Attempt,
    won: &'a AtomicU32,
    done: bool,
}

impl Unfinished<'_> {
    fn finish(&mut self, outcome: Outcome) {
        self.done = true;
        self.reporter
            .record(self.service, self.endpoint, self.attempt.retry, outcome);
    }
}

impl Drop for Unfinished<'_> {
    fn drop(&mut self) {
        if !self.done && self.won.load(Relaxed) != self.attempt.retry {
            self.finish(Outcome::Error);
        }
    }
}

/// How an HTTP failure counts in reports: 5xx answers are server errors,
/// other answers successes, no answer an error.
fn outcome_of(failure: &Failure) -> Outcome {
    match failure {
        Failure::Status { code, .. } if (500..600).contains(code) => Outcome::ServerError,
        Failure::Status { .. } => Outcome::Success,
        Failure::Connect | Failure::Timeout | Failure::Reset => Outcome::Error,
    }
}
