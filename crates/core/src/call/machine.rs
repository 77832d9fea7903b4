//! The state machine of one call: see the [module docs](super).

use std::sync::Arc;
use std::task::Waker;
use std::time::Duration;

use rand::Rng;
use tokio::time::Instant;

use crate::breaker::Permit;
use crate::gate::{Asker, Claim, SendGate, Signal, Ticket, Turn};
use crate::policy::Criticality;
use crate::retry::{AttemptOutcome, GaveUp, Retry, Verdict};

/// What a call checks around each attempt: the breaker, the send gate, the
/// budget, and what learns from outcomes. [`Guard`](crate::guard::Guard)
/// is the full set; [`Unguarded`] checks nothing.
pub trait Controls {
    /// The retry settings: backoff, attempts, timeouts.
    fn retry(&self) -> &Retry;
    /// A call begins: the budget counts a request.
    fn begin_at(&self, now: Instant);
    /// The breaker's leave to send an attempt: `Err` if it refuses.
    fn admit_at(&self, now: Instant) -> Result<Option<Permit>, GaveUp>;
    /// The send gate, if the policy has one.
    fn gate(&self) -> Option<&Arc<SendGate>>;
    /// The attempt holding `permit` ended with `outcome`: the breaker and throttle learn.
    fn settle_at(&self, permit: Option<Permit>, outcome: AttemptOutcome, now: Instant);
    /// The budget's and the throttle's leave to retry; a granted retry is spent.
    fn allow_retry_at(&self, now: Instant) -> bool;
}

/// Controls that check nothing: the plain retry loop's.
#[derive(Debug, Clone, Copy)]
pub struct Unguarded<'a>(pub &'a Retry);

impl Controls for Unguarded<'_> {
    fn retry(&self) -> &Retry {
        self.0
    }
    fn begin_at(&self, _: Instant) {}
    fn admit_at(&self, _: Instant) -> Result<Option<Permit>, GaveUp> {
        Ok(None)
    }
    fn gate(&self) -> Option<&Arc<SendGate>> {
        None
    }
    fn settle_at(&self, _: Option<Permit>, _: AttemptOutcome, _: Instant) {}
    fn allow_retry_at(&self, _: Instant) -> bool {
        true
    }
}

/// One call in progress; see the [module docs](super).
#[derive(Debug)]
pub struct Call {
    start: Instant,
    deadline: Option<Instant>,
    /// Attempts sent so far.
    sent: u32,
    /// The last backoff delay.
    previous: Duration,
    /// Its place in the gate's line, from the first time it waited there:
    /// a retry takes that place again rather than going to the back.
    place: Option<u64>,
    /// Its class, if the caller named one; else the gate's policy's.
    class: Option<Criticality>,
    stage: Stage,
}

#[derive(Debug)]
enum Stage {
    /// Next: ask for leave to send.
    Ready,
    /// Backing off until then.
    Backoff(Instant),
    /// In the gate's line, holding the breaker's permit (boxed: the
    /// simulator keeps a call per client, most of them not in line).
    Queued(Box<Queued>),
}

#[derive(Debug)]
struct Queued {
    gate: Arc<SendGate>,
    ticket: Ticket,
    permit: Option<Permit>,
    /// When it stops waiting: its class's `maxWait` after the call began,
    /// or the call's deadline if sooner.
    by: Option<Instant>,
}

/// What the driver does next.
#[derive(Debug)]
pub enum Step {
    /// Send this attempt.
    Send(Send),
    /// Wait until this instant, or until woken if `None`, then call
    /// [`next_at`](Call::next_at) again (sooner is harmless).
    Wait(Option<Instant>),
    /// The call ends without success.
    Stop(GaveUp),
}

/// An attempt to send, to hand back to [`answered_at`](Call::answered_at).
#[derive(Debug)]
pub struct Send {
    /// The attempt number: 0 first, then 1 for the first retry, and so on.
    pub attempt: u32,
    /// When the attempt times out (its per-try timeout, or the call's deadline).
    pub until: Option<Instant>,
    permit: Option<Permit>,
    sent: Instant,
}

impl Send {
    /// Whether the attempt is one of its breaker's half-open trials: the
    /// calls a breaker lets through, after `openTimeout`, to see whether
    /// its dependency is back.
    pub fn is_trial(&self) -> bool {
        self.permit.as_ref().is_some_and(Permit::is_trial)
    }
}

/// How an attempt ended, as the driver saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// It succeeded.
    Succeeded,
    /// It failed, judged so.
    Failed(Verdict),
    /// No answer before [`Send::until`].
    TimedOut,
}

/// What follows an answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answered {
    /// The call succeeded.
    Succeeded,
    /// Back off this long, then call [`next_at`](Call::next_at).
    Retry(Duration),
    /// The call ends without success.
    Stop(GaveUp),
}

impl Call {
    /// A call beginning at `now`, to end by the policy's `maxElapsed` or by
    /// `deadline` (the caller's), whichever is sooner.
    pub fn begin_at(controls: &impl Controls, now: Instant, deadline: Option<Instant>) -> Self {
        controls.begin_at(now);
        let max_elapsed = controls.retry().max_elapsed.map(|d| now + d);
        Self {
            start: now,
            deadline: earliest(max_elapsed, deadline),
            sent: 0,
            previous: Duration::ZERO,
            place: None,
            class: None,
            stage: Stage::Ready,
        }
    }

    /// The call is of `class`, whatever the policy's default: the send
    /// gate serves more critical calls first, and sheds less critical ones
    /// first.
    pub fn of_class(mut self, class: Criticality) -> Self {
        self.class = Some(class);
        self
    }

    /// Attempts sent so far.
    pub fn attempts(&self) -> u32 {
        self.sent
    }

    /// The number of the ticket this call holds in its gate's line, if it waits in one.
    pub fn ticket(&self) -> Option<u64> {
        match &self.stage {
            Stage::Queued(queued) => Some(queued.ticket.number()),
            _ => None,
        }
    }

    /// What to do at `now`: send, wait, or stop. `waker` is woken when a
    /// wait in the gate's line may end sooner.
    pub fn next_at(&mut self, controls: &impl Controls, now: Instant, waker: Option<&Waker>) -> Step {
        match std::mem::replace(&mut self.stage, Stage::Ready) {
            Stage::Backoff(until) if now < until => {
                self.stage = Stage::Backoff(until);
                Step::Wait(Some(until))
            }
            Stage::Backoff(_) | Stage::Ready => self.ask(controls, now, waker),
            Stage::Queued(queued) => self.claim(controls, *queued, now, waker),
        }
    }

    /// Leave from the breaker, then a turn from the gate. The breaker asks
    /// first so that a call it would refuse does not wait in line for
    /// nothing; a call in line asks it again if it changed state meanwhile.
    fn ask(&mut self, controls: &impl Controls, now: Instant, waker: Option<&Waker>) -> Step {
        let permit = match controls.admit_at(now) {
            Ok(permit) => permit,
            Err(why) => return Step::Stop(why),
        };
        if permit.as_ref().is_some_and(Permit::is_fleet_trial) {
            return self.send(controls, permit, now);
        }
        let Some(gate) = controls.gate().filter(|gate| gate.is_on()) else {
            return self.send(controls, permit, now);
        };
        let asker = self.asker(gate);
        let turn = match self.place {
            Some(place) => gate.rejoin_at(place, asker, now),
            None => gate.turn_for_at(asker, now),
        };
        match turn {
            Turn::Now => self.send(controls, permit, now),
            Turn::Shed => Step::Stop(GaveUp::Shed),
            Turn::Queued(ticket) => {
                self.place.get_or_insert(ticket.number());
                let queued = Queued {
                    gate: gate.clone(),
                    ticket,
                    permit,
                    by: asker.by,
                };
                self.claim(controls, queued, now, waker)
            }
        }
    }

    /// Its class, and when its turn must come by: its class's `maxWait`
    /// after it began, or its deadline if sooner.
    fn asker(&self, gate: &SendGate) -> Asker {
        let policy = gate.policy();
        let class = self.class.unwrap_or(policy.criticality);
        let bound = self.start.checked_add(policy.max_wait.of(class));
        Asker {
            class,
            by: earliest(bound, self.deadline),
        }
    }

    fn claim(
        &mut self,
        controls: &impl Controls,
        queued: Queued,
        now: Instant,
        waker: Option<&Waker>,
    ) -> Step {
        let Queued {
            gate,
            ticket,
            permit,
            by,
        } = queued;
        if by.is_some_and(|by| now >= by) {
            gate.give_up(ticket);
            return Step::Stop(GaveUp::NoTurn);
        }
        // A breaker that left the state it gave the permit in (it opened
        // while the call waited) decides again. A refusal leaves the line
        // before a turn is spent, so the calls behind move up at once; the
        // fleet's trial leaves it to go now, as one does that never waited.
        let permit = match permit {
            Some(stale) if !stale.is_current() => {
                drop(stale);
                match controls.admit_at(now) {
                    Ok(Some(trial)) if trial.is_fleet_trial() => {
                        gate.leave(ticket);
                        return self.send(controls, Some(trial), now);
                    }
                    Ok(fresh) => fresh,
                    Err(why) => {
                        gate.leave(ticket);
                        return Step::Stop(why);
                    }
                }
            }
            permit => permit,
        };
        let wait = match gate.claim_at(&ticket, now, waker) {
            Claim::Go => return self.send(controls, permit, now),
            Claim::At(due) => earliest(Some(due), by),
            Claim::Behind => by,
        };
        self.stage = Stage::Queued(Box::new(Queued {
            gate,
            ticket,
            permit,
            by,
        }));
        Step::Wait(wait)
    }

    fn send(&mut self, controls: &impl Controls, permit: Option<Permit>, now: Instant) -> Step {
        let attempt = self.sent;
        self.sent += 1;
        let per_try = controls.retry().per_try_timeout.map(|t| now + t);
        Step::Send(Send {
            attempt,
            until: earliest(per_try, self.deadline),
            permit,
            sent: now,
        })
    }

    /// The attempt `send` ended with `answer` at `now`: learn from it and
    /// decide what follows.
    pub fn answered_at<R: Rng + ?Sized>(
        &mut self,
        controls: &impl Controls,
        send: Send,
        answer: Answer,
        now: Instant,
        rng: &mut R,
    ) -> Answered {
        let retry = controls.retry();
        let (outcome, verdict) = match answer {
            Answer::Succeeded => (AttemptOutcome::Succeeded, None),
            Answer::Failed(Verdict::Fail) => (AttemptOutcome::Ignored, Some(Verdict::Fail)),
            Answer::Failed(verdict) => (AttemptOutcome::Failed, Some(verdict)),
            Answer::TimedOut if retry.retry_timeouts => {
                (AttemptOutcome::Failed, Some(Verdict::Retry { after: None }))
            }
            Answer::TimedOut => (AttemptOutcome::Failed, Some(Verdict::Fail)),
        };
        let mut settled = match (outcome, answer) {
            // Refused as overload, with no gate to pace it: the breaker
            // follows what the dependency accepts. A paced refusal is
            // settled below.
            (AttemptOutcome::Failed, Answer::Failed(Verdict::Retry { .. })) => AttemptOutcome::Refused,
            _ => outcome,
        };
        if let Some(gate) = controls.gate() {
            let signal = match (outcome, answer) {
                (AttemptOutcome::Failed, Answer::TimedOut) if gate.overloaded_by_timeouts() => {
                    Signal::TimedOut
                }
                (AttemptOutcome::Failed, Answer::Failed(Verdict::Retry { .. })) => Signal::Overloaded,
                // An error the dependency answered with, or a timeout the
                // policy does not count as overload, says nothing of its load.
                _ => Signal::Accepted,
            };
            gate.record_at(signal, send.sent, now);
            // A refusal is the gate's to pace; a timeout says nothing
            // answered, and the breaker hears it (a trial that timed out
            // did not find the dependency up).
            if signal == Signal::Overloaded && gate.is_on() {
                settled = AttemptOutcome::Paced;
            }
        }
        controls.settle_at(send.permit, settled, now);
        let Some(verdict) = verdict else {
            return Answered::Succeeded;
        };
        let past_deadline = self.deadline.is_some_and(|deadline| now >= deadline);
        if answer == Answer::TimedOut && past_deadline {
            return Answered::Stop(GaveUp::Deadline);
        }
        let elapsed = now.saturating_duration_since(self.start);
        let delay = match retry.next_delay(send.attempt, self.previous, verdict, elapsed, rng) {
            Ok(delay) => delay,
            Err(why) => return Answered::Stop(why),
        };
        // While the gate paces, it bounds what retries add to the load, and
        // more tightly than a budget's fixed share: a retry waits for its
        // turn instead of asking the budget. The pace also spaces the
        // attempts, so a retry waits for its turn instead of a backoff too,
        // unless the dependency asked for a wait (Retry-After).
        let paced = controls.gate().is_some_and(|gate| gate.is_on());
        let wait = match verdict {
            Verdict::Retry { after } | Verdict::RetryError { after } if paced => after.unwrap_or_default(),
            _ => delay,
        };
        if self.deadline.is_some_and(|deadline| now + wait >= deadline) {
            return Answered::Stop(GaveUp::Deadline);
        }
        if !paced && !controls.allow_retry_at(now) {
            return Answered::Stop(GaveUp::BudgetExhausted);
        }
        self.previous = delay;
        self.stage = Stage::Backoff(now + wait);
        Answered::Retry(wait)
    }
}

impl Drop for Call {
    fn drop(&mut self) {
        if let Stage::Queued(queued) = std::mem::replace(&mut self.stage, Stage::Ready) {
            queued.gate.leave(queued.ticket);
        }
    }
}

fn earliest(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}
