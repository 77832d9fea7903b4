//! The retry settings and what a retry loop decides with them: run an
//! operation up to `1 + maxRetries` times, waiting the policy's backoff
//! between attempts, within a per-try timeout and an overall deadline, until
//! it succeeds, fails for good, or the caller cancels. The loop itself is
//! [`call::run`](crate::call::run); the decisions here take no clock.
//!
//! Which failures are worth retrying is the caller's call ([`Verdict`]); for
//! HTTP, [`RetryOn::verdict`] applies a policy's `retryOn` list to a
//! [`Failure`]. A server's `Retry-After` lengthens the wait, never beyond the
//! policy's `maxDelay`.

use std::fmt;
use std::time::{Duration, SystemTime};

use rand::Rng;

use crate::backoff::Backoff;
use crate::policy::{GatePolicy, RetryCondition, RetryOn, ValidPolicy};

/// What to do after a failed attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Try again; if the server said when (`Retry-After`), wait at least
    /// that long. The failure says the dependency is overloaded or down:
    /// the send gate paces for it.
    Retry {
        /// The server's `Retry-After`, if it sent one.
        after: Option<Duration>,
    },
    /// Try again, as [`Retry`](Verdict::Retry), but the failure is an error
    /// the dependency answered with (a 500, say) and says nothing of its
    /// load: the send gate counts the attempt as answered. See
    /// [`GatePolicy::judge`].
    RetryError {
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
    /// Whether a listed condition covers `failure`.
    pub fn covers(&self, failure: Failure) -> bool {
        match failure {
            Failure::Connect => self.contains(RetryCondition::ConnectFailure),
            Failure::Timeout => self.contains(RetryCondition::Timeout),
            Failure::Reset => self.contains(RetryCondition::Reset),
            Failure::Status { code, .. } => self.covers_status(code),
        }
    }

    /// Whether `failure` is retried under this list: the default list retries
    /// connect errors, timeouts, resets, 429 and every 5xx but 501.
    pub fn verdict(&self, failure: Failure) -> Verdict {
        match (self.covers(failure), failure) {
            (false, _) => Verdict::Fail,
            (true, Failure::Status { retry_after, .. }) => Verdict::Retry { after: retry_after },
            (true, _) => Verdict::Retry { after: None },
        }
    }
}

impl GatePolicy {
    /// `verdict`, on `failure`, as the send gate should hear it: a retried
    /// failure that `overloadOn` does not cover, and that asks for no wait
    /// (`Retry-After`), is an error the dependency answered with
    /// ([`Verdict::RetryError`]), not a sign of overload.
    pub fn judge(&self, verdict: Verdict, failure: Failure) -> Verdict {
        let asked_to_wait = matches!(
            failure,
            Failure::Status {
                retry_after: Some(_),
                ..
            }
        );
        match verdict {
            Verdict::Retry { after } if !asked_to_wait && !self.overload_on.covers(failure) => {
                Verdict::RetryError { after }
            }
            verdict => verdict,
        }
    }

    /// Whether a timed-out attempt says the dependency is overloaded or down.
    pub fn overloaded_by_timeouts(&self) -> bool {
        self.overload_on.contains(RetryCondition::Timeout)
    }

    /// The setting, if any, whose change from this policy to `next` voids
    /// what a gate learned under this one: whether it is on, which
    /// failures it hears as overload (`overloadOn`), and when refusals say
    /// overload (`overloadWhen`). Its rates, CUBIC's constants and `quiet`
    /// only shape what comes next, so a change of them keeps the pace.
    pub fn unlearned_by(&self, next: &GatePolicy) -> Option<&'static str> {
        if self.enabled != next.enabled {
            Some("gate.enabled")
        } else if self.overload_on != next.overload_on {
            Some("gate.overloadOn")
        } else if self.overload_when != next.overload_when {
            Some("gate.overloadWhen")
        } else {
            None
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
    /// The send gate had no turn for the attempt before the deadline, or
    /// before its class's `maxWait` ran out, while it waited in line.
    NoTurn,
    /// The send gate's turn for the attempt would have come after the
    /// deadline or its class's `maxWait`, at the pace it kept: the call
    /// failed at once rather than wait in line for nothing.
    Shed,
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
            GaveUp::NoTurn => "the send gate had no turn for it before its wait bound (maxWait) or deadline",
            GaveUp::Shed => {
                "shed: at the pace the service can take, its turn would come after its wait bound (maxWait) or deadline"
            }
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
        let after = match verdict {
            Verdict::Retry { after } | Verdict::RetryError { after } => after,
            Verdict::Fail => return Err(GaveUp::NotRetryable),
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
    /// It was refused as overload (an answer, or a refused connection,
    /// that the gate's `overloadOn` names; not a timeout) while the send
    /// gate paces the dependency:
    /// the gate's to answer, by pacing, not the breaker's, which would turn
    /// an overload the gate is already easing into an outage of its own (a
    /// trial so answered found the dependency up). Retry throttling counts
    /// it as a failure.
    Paced,
    /// It was refused as overload (a failure `gate.overloadOn` names) while
    /// no send gate paces the dependency: the breaker follows what the
    /// dependency accepts (see [`CallOutcome::Refused`]). Retry throttling
    /// counts it as a failure.
    ///
    /// [`CallOutcome::Refused`]: crate::breaker::CallOutcome::Refused
    Refused,
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::policy::{Jitter, RetryPolicy};
    use rand::rngs::SmallRng;
    use rand::SeedableRng;

    pub(crate) fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// 100 ms × 2^attempt, no jitter, 3 retries: attempts at 0, 100, 300, 700 ms.
    pub(crate) fn retry() -> Retry {
        Retry::from_policy(
            &RetryPolicy {
                jitter: Jitter::None,
                ..RetryPolicy::default()
            }
            .try_into()
            .unwrap(),
        )
    }

    #[test]
    fn the_next_delay_is_decided_without_a_clock() {
        let r = Retry {
            max_elapsed: Some(ms(1000)),
            ..retry()
        };
        let again = Verdict::Retry { after: None };
        let rng = &mut SmallRng::seed_from_u64(1);
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
