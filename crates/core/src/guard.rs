//! One call to a service under everything its policy says, composed here and
//! nowhere else, in one order (outermost first):
//!
//! 1. **Circuit breaker**: every attempt needs a permit. An open breaker ends
//!    the call at once ([`GaveUp::CircuitOpen`]), sending nothing.
//! 2. **Send gate**: while the dependency is unwell, an attempt with a permit
//!    waits in line for its turn ([`SendGate`]), up to the call's deadline
//!    ([`GaveUp::NoTurn`]). It stands after the breaker so that a call the
//!    breaker would refuse does not wait for nothing; a call in line asks the
//!    breaker again if it changed state meanwhile, and leaves the line unsent
//!    if it now refuses, or at once as the fleet's trial if it grants one.
//! 3. **Retry budget** and **retry throttling**: every retry (and every hedge)
//!    needs their leave; when they refuse, the call ends
//!    ([`GaveUp::BudgetExhausted`]) instead of adding load to a struggling
//!    dependency. While the send gate is on, retries wait for turns instead:
//!    the gate bounds the load they add, to what the dependency accepts, and
//!    a budget's fixed share would only turn away calls it would pace. No
//!    hedges are sent while the gate is on.
//! 4. **Retry loop**: backoff with jitter, `Retry-After`, the per-try timeout
//!    and the `maxElapsed` deadline ([`Retry`]), in the order of [`Call`](crate::call::Call).
//! 5. **Hedging**, inside each attempt: the per-try timeout covers an
//!    attempt and its hedges together ([`Hedge`]).
//!
//! The breaker, the throttle and the gate learn from every attempt: a
//! success, or a failure that says the dependency is unwell (retryable, or
//! timed out). A failure that is not retryable (a 4xx) says nothing about
//! its health and counts for none of them. A [`Guard`]'s clones share its
//! budget, breaker and gate, so make one per service and clone it into every
//! task that calls it.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! use stormguard_core::call::Options;
//! use stormguard_core::guard::Guard;
//! use stormguard_core::policy::{RetryPolicy, ValidPolicy};
//! use stormguard_core::retry::{Failure, Verdict};
//!
//! // The policy the daemon served, checked before anything acts on it.
//! let policy = ValidPolicy::try_from(RetryPolicy { max_retries: 2, ..RetryPolicy::default() }).unwrap();
//! let guard = Guard::from_policy(&policy);
//! let reply = guard
//!     .call(
//!         |attempt| async move {
//!             // Send the request here. This server is restarting: the first try gets a 503.
//!             match attempt.retry {
//!                 0 => Err(Failure::Status { code: 503, retry_after: None }),
//!                 _ => Ok("200 OK"),
//!             }
//!         },
//!         |failure| guard.retry_on().verdict(*failure),
//!         Options::default(),
//!     )
//!     .await;
//! assert_eq!(reply, Ok("200 OK"));
//! # }
//! ```

use std::future::Future;
use std::sync::Arc;

use tokio::time::Instant;

use crate::breaker::{CallNotPermitted, CallOutcome, CircuitBreaker, Permit};
use crate::budget::{RetryBudget, RetryThrottle};
use crate::call::{run, Controls, Options};
use crate::fleet::{self, breaker::BreakerVerdict};
use crate::gate::SendGate;
use crate::hedge::Hedge;
use crate::policy::{RetryOn, ValidPolicy};
use crate::retry::{AttemptOutcome, Failure, GaveUp, Retry, RetryError, Verdict};

/// Which request an operation is asked to send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Attempt {
    /// The retry-loop attempt: 0 first, then 1 for the first retry, and so on.
    pub retry: u32,
    /// The hedge within that attempt: 0 for the attempt itself, then 1, 2, ...
    pub hedge: u32,
}

/// A service's policy, ready to guard calls to it; see the [module docs](self).
#[derive(Debug, Clone)]
pub struct Guard {
    policy: Arc<ValidPolicy>,
    retry: Retry,
    retry_on: RetryOn,
    budget: Option<Arc<RetryBudget>>,
    throttle: Option<Arc<RetryThrottle>>,
    breaker: Option<CircuitBreaker>,
    gate: Option<Arc<SendGate>>,
    hedge: Option<Hedge>,
}

impl Guard {
    /// Everything `policy` sets up, each block only if it is enabled: the
    /// one call a client makes with the policy the daemon served, once it
    /// has been validated.
    pub fn from_policy(policy: &ValidPolicy) -> Self {
        Self::from_policy_at(policy, Instant::now())
    }

    fn build_at(policy: &ValidPolicy, now: Instant, seed: Option<u64>) -> Self {
        Self {
            policy: Arc::new(policy.clone()),
            retry: Retry::from_policy(policy),
            retry_on: policy.retry_on.clone(),
            budget: policy
                .budget
                .enabled
                .then(|| Arc::new(RetryBudget::new_at(&policy.budget, now))),
            throttle: policy
                .retry_throttling
                .enabled
                .then(|| Arc::new(RetryThrottle::new(&policy.retry_throttling))),
            breaker: policy
                .circuit_breaker
                .enabled
                .then(|| CircuitBreaker::new_at(&policy.circuit_breaker, now)),
            gate: policy.gate.enabled.then(|| {
                Arc::new(match seed {
                    Some(seed) => SendGate::seeded_at(policy, now, seed),
                    None => SendGate::new_at(policy, now),
                })
            }),
            hedge: policy
                .hedging
                .enabled
                .then(|| Hedge::from_policy(&policy.hedging)),
        }
    }

    /// A guard for a new version of the policy that keeps this one's budget
    /// and throttle (and their state) where their blocks did not change, so
    /// a policy update does not reset a spent budget; its breaker, retuned
    /// ([`CircuitBreaker::retune_at`]), so an edit mid-outage does not
    /// close an open one; and its send gate, retuned, unless the update changes what
    /// the gate hears as overload (see [`GatePolicy::unlearned_by`](crate::policy::GatePolicy::unlearned_by)):
    /// an update mid-incident neither lets new calls past the line nor
    /// sends the gate back to probing. Calls in flight keep the guard they
    /// started with.
    pub fn updated(&self, policy: &ValidPolicy) -> Self {
        let mut next = Self::from_policy(policy);
        let old = &self.policy;
        if old.budget == policy.budget {
            next.budget = self.budget.clone();
        }
        if old.retry_throttling == policy.retry_throttling {
            next.throttle = self.throttle.clone();
        }
        if let (Some(breaker), true) = (&self.breaker, policy.circuit_breaker.enabled) {
            if old.circuit_breaker != policy.circuit_breaker {
                breaker.retune_at(&policy.circuit_breaker, Instant::now());
            }
            next.breaker = Some(breaker.clone());
        }
        if let Some(gate) = &self.gate {
            if old.gate == policy.gate || (policy.gate.enabled && gate.retune(&policy.gate)) {
                next.gate = Some(gate.clone());
            }
        }
        next
    }

    /// The policy this guard applies.
    pub fn policy(&self) -> &ValidPolicy {
        &self.policy
    }

    /// The retry settings.
    pub fn retry(&self) -> &Retry {
        &self.retry
    }

    /// The policy's `retryOn` list, whose [`verdict`](RetryOn::verdict) classifies HTTP failures.
    pub fn retry_on(&self) -> &RetryOn {
        &self.retry_on
    }

    /// What to do after an HTTP attempt failed with `failure`: retried if
    /// `retryOn` lists it, and heard by the send gate as overload only if
    /// `gate.overloadOn` does (see [`GatePolicy::judge`](crate::policy::GatePolicy::judge)).
    pub fn verdict(&self, failure: Failure) -> Verdict {
        self.policy.gate.judge(self.retry_on.verdict(failure), failure)
    }

    /// The retry budget, if the policy enables one.
    pub fn budget(&self) -> Option<&RetryBudget> {
        self.budget.as_deref()
    }

    /// The retry throttle, if the policy enables it.
    pub fn throttle(&self) -> Option<&RetryThrottle> {
        self.throttle.as_deref()
    }

    /// The circuit breaker, if the policy enables one.
    pub fn breaker(&self) -> Option<&CircuitBreaker> {
        self.breaker.as_ref()
    }

    /// The send gate, if the policy enables it.
    pub fn gate(&self) -> Option<&SendGate> {
        self.gate.as_deref()
    }

    /// The hedging settings, if the policy enables hedging.
    pub fn hedge(&self) -> Option<&Hedge> {
        self.hedge.as_ref()
    }

    /// Runs `operation` under the policy; `classify` judges each error, and
    /// `options` say what else may end the call (a cancellation, a deadline)
    /// and where its jitter comes from.
    pub async fn call<T, E, Op, Fut, Cancel>(
        &self,
        operation: Op,
        classify: impl Fn(&E) -> Verdict,
        options: Options<'_, Cancel>,
    ) -> Result<T, RetryError<E>>
    where
        Op: Fn(Attempt) -> Fut,
        Fut: Future<Output = Result<T, E>>,
        Cancel: Future<Output = ()>,
    {
        let (operation, classify) = (&operation, &classify);
        let attempt = |retry| async move {
            match &self.hedge {
                None => operation(Attempt { retry, hedge: 0 }).await,
                Some(hedge) => hedge
                    .race(
                        |hedge| operation(Attempt { retry, hedge }),
                        classify,
                        || self.allow_hedge_at(Instant::now()),
                    )
                    .await
                    .map_err(|lost| lost.last),
            }
        };
        run(self, attempt, classify, options).await
    }
}

/// The steps of a call at explicit instants, for callers that run their own
/// loop in virtual time (the herd simulator) through a [`Call`](crate::call::Call): the same
/// decisions [`call`](Guard::call) makes, in the same order.
impl Guard {
    /// [`from_policy`](Self::from_policy) with its budget, breaker and gate clocks starting at `now`.
    pub fn from_policy_at(policy: &ValidPolicy, now: Instant) -> Self {
        Self::build_at(policy, now, None)
    }

    /// [`from_policy_at`](Self::from_policy_at) with the gate's random
    /// source seeded, for a simulation that must run the same way twice.
    pub fn seeded_at(policy: &ValidPolicy, now: Instant, seed: u64) -> Self {
        Self::build_at(policy, now, Some(seed))
    }

    /// This guard with `max_retries` in place of the policy's, even past the
    /// range a policy file may set: for what-if simulations of clients that
    /// retry until they succeed. Retries stay bounded by the budget, the
    /// breaker and the deadline the policy sets.
    pub fn with_max_retries(mut self, max_retries: u32) -> Self {
        self.retry.max_retries = max_retries;
        self
    }

    /// A call begins: the budget counts a request.
    pub fn begin_at(&self, now: Instant) {
        if let Some(budget) = &self.budget {
            budget.deposit_at(now);
        }
    }

    /// Leave to send an attempt: `Ok` with the breaker's permit (if there is a
    /// breaker), `Err` if the breaker refuses.
    pub fn admit_at(&self, now: Instant) -> Result<Option<Permit>, CallNotPermitted> {
        match &self.breaker {
            None => Ok(None),
            Some(breaker) => breaker.try_acquire_at(now).map(Some),
        }
    }

    /// How the attempt holding `permit` ended: the breaker and the throttle
    /// learn from it. A refusal the send gate paces is the throttle's
    /// failure and no failure to the breaker: the dependency answered, and
    /// its overload is the gate's to ease. A trial so answered has its
    /// answer (the dependency is up, and paced), so it counts as a success;
    /// any other such attempt counts for nothing. A refusal no gate paces
    /// is the throttle's failure and the breaker's refusal, whose trials
    /// then follow what the dependency accepts.
    pub fn settle_at(&self, permit: Option<Permit>, outcome: AttemptOutcome, now: Instant) {
        let (throttled, heard) = match outcome {
            AttemptOutcome::Succeeded => (CallOutcome::Success, Some(CallOutcome::Success)),
            AttemptOutcome::Failed => (CallOutcome::Failure, Some(CallOutcome::Failure)),
            AttemptOutcome::Refused => (CallOutcome::Failure, Some(CallOutcome::Refused)),
            AttemptOutcome::Paced => {
                let trial = permit.as_ref().is_some_and(Permit::is_trial);
                (CallOutcome::Failure, trial.then_some(CallOutcome::Success))
            }
            AttemptOutcome::Ignored => return,
        };
        if let Some(throttle) = &self.throttle {
            match throttled {
                CallOutcome::Success => throttle.on_success(),
                CallOutcome::Failure | CallOutcome::Refused => throttle.on_failure(),
            }
        }
        if let (Some(permit), Some(heard)) = (permit, heard) {
            permit.record_at(heard, now);
        }
    }

    /// Leave from the throttle and the budget to retry; a granted retry is spent.
    pub fn allow_retry_at(&self, now: Instant) -> bool {
        self.throttle.as_ref().is_none_or(|t| t.allows_retry())
            && self.budget.as_ref().is_none_or(|b| b.try_retry_at(now))
    }

    /// What this process is to tell the daemon about the dependency at
    /// `now`, if anything: its gate's tally while the gate asks for the
    /// fleet's pace, and its breaker's report while a fleet-scoped breaker
    /// is open or has trials to report. The tally is taken: it is reported once.
    pub fn fleet_ask_at(&self, now: Instant) -> Option<fleet::Ask> {
        let tally = self
            .gate
            .as_ref()
            .filter(|gate| gate.asks_fleet_at(now))
            .map(|gate| gate.tally());
        let breaker = self
            .breaker
            .as_ref()
            .filter(|breaker| breaker.asks_fleet_at(now))
            .and_then(|breaker| breaker.fleet_report_at(now));
        (tally.is_some() || breaker.is_some()).then_some(fleet::Ask { tally, breaker })
    }

    /// The daemon's answer to this process's ask, heard at `now`: the
    /// fleet breaker's word, if it gave one, and the gate's share. A
    /// breaker the fleet closes turns the gate on if the grant says `pace`,
    /// so that the fleet returns at the daemon's pace; a gate that only
    /// watches turns on when told to pace.
    pub fn heard_at(&self, grant: fleet::Grant, breaker: Option<BreakerVerdict>, now: Instant) {
        let until = now + grant.lease;
        let closed = match (breaker, &self.breaker) {
            (Some(verdict), Some(breaker)) => breaker.heard_at(verdict, until, now),
            _ => false,
        };
        let Some(gate) = &self.gate else {
            return;
        };
        if grant.pace {
            if closed {
                gate.resume_by_fleet_at(now);
            } else {
                gate.pace_by_fleet_at(now);
            }
        }
        gate.lease_at(grant.rate, until, now);
    }

    /// Leave to send a hedge: none while the gate paces, else as a retry.
    pub fn allow_hedge_at(&self, now: Instant) -> bool {
        !self.gate.as_ref().is_some_and(|gate| gate.is_on()) && self.allow_retry_at(now)
    }
}

impl Controls for Guard {
    fn retry(&self) -> &Retry {
        &self.retry
    }

    fn begin_at(&self, now: Instant) {
        Guard::begin_at(self, now);
    }

    fn admit_at(&self, now: Instant) -> Result<Option<Permit>, GaveUp> {
        Guard::admit_at(self, now).map_err(|_| GaveUp::CircuitOpen)
    }

    fn gate(&self) -> Option<&Arc<SendGate>> {
        self.gate.as_ref()
    }

    fn settle_at(&self, permit: Option<Permit>, outcome: AttemptOutcome, now: Instant) {
        Guard::settle_at(self, permit, outcome, now);
    }

    fn allow_retry_at(&self, now: Instant) -> bool {
        Guard::allow_retry_at(self, now)
    }
}

#[cfg(test)]
mod tests;
