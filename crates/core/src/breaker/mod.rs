//! The circuit breaker: stops calls to a dependency that keeps failing, so it
//! gets room to recover, then lets a few trial calls through to see whether
//! it has.
//!
//! - **Closed** (0): calls pass. The breaker opens after `consecutiveFailures`
//!   failures in a row that chance does not explain at the failure rate
//!   the window held before them (see [`RUN_BY_CHANCE`]; a run of twice
//!   that many always opens it),
//!   or once the window (the last N calls, or
//!   the calls of the last T) holds `minimumCalls` calls and the share that
//!   failed reaches `failureRateThreshold`, or the share slower than
//!   `slowCallDuration` reaches `slowCallRateThreshold` (Resilience4j).
//! - **Open** (2): calls are refused at once, for `openTimeout`.
//! - **Half-open** (1): at most `halfOpenMaxCalls` trial calls at a time (the
//!   seed let any number through). `successThreshold` good trials in a row
//!   close the breaker; a failed or slow trial opens it again.
//!
//! A dependency that refuses calls as overloaded ([`CallOutcome::Refused`]:
//! a 429 or 503 with no send gate to pace it) may be down, or up with less
//! room than its callers want; only its answers over time tell which. So a
//! breaker that refusals trip goes half-open, not open, and its trials
//! follow what the dependency accepts: about [`TRIALS_PER_ACCEPTED`] for
//! each accepted in the last [`TRIAL_WINDOW`], `halfOpenMaxCalls` a window
//! when none is, the rest refused at once. Refused trials open it only
//! after a whole window with none accepted. An overload that lasts then
//! costs the callers what the dependency cannot take, not the whole
//! dependency for `openTimeout` (simulated, 800 calls a second from 160
//! processes against 150 a second after an outage: 12 % of what it could
//! take served before, 83 % with this).
//!
//! The move from open to half-open happens when a call asks for a permit
//! after `openTimeout`, so a breaker nobody calls stays open. A call's
//! outcome counts only in the state it started in: a call sent before the
//! breaker opened cannot close it.
//!
//! Under `scope: fleet`, an open breaker leaves the trials to the daemon,
//! which runs one half-open for the whole fleet (see
//! [`fleet::breaker`](crate::fleet::breaker)): it sends a trial only on a
//! slot the daemon granted ([`heard_at`](CircuitBreaker::heard_at)),
//! reports the trial's outcome at its next ask
//! ([`fleet_report_at`](CircuitBreaker::fleet_report_at)), and closes when
//! the daemon says the fleet's trials succeeded. Without a word from the
//! daemon for a lease, it decides alone, as under `scope: process`.
//!
//! ```
//! use stormguard_core::breaker::{CallOutcome, CircuitBreaker, CircuitState};
//! use stormguard_core::policy::CircuitBreakerPolicy;
//!
//! let breaker = CircuitBreaker::new(&CircuitBreakerPolicy {
//!     enabled: true,
//!     consecutive_failures: 2,
//!     ..CircuitBreakerPolicy::default()
//! });
//! for _ in 0..2 {
//!     let permit = breaker.try_acquire().expect("closed: calls pass");
//!     // ... the call fails with a 503 ...
//!     permit.record(CallOutcome::Failure);
//! }
//! assert_eq!(breaker.state(), CircuitState::Open);
//! let refused = breaker.try_acquire().unwrap_err();
//! assert_eq!(refused.state.as_metric(), 2);
//! ```

mod chance;
pub(crate) mod state;
mod window;

use std::sync::atomic::{
    AtomicU64,
    Ordering::{Acquire, Relaxed, Release},
};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use arc_swap::ArcSwap;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::fleet::breaker::{BreakerReport, BreakerVerdict};
use crate::policy::{BreakerScope, CircuitBreakerPolicy, SlidingWindow};
pub use chance::{BOUND_Z, RUN_BY_CHANCE};
pub use state::CircuitState;
pub use window::Tally;
use window::Window;

/// How a call that held a permit ended, for the breaker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallOutcome {
    /// The dependency answered well.
    Success,
    /// The dependency failed (a connect error, a timeout, a 5xx): counts against it.
    Failure,
    /// The dependency refused the call as overloaded or down (a failure
    /// the policy's `gate.overloadOn` names: a 429 or 503, or a connect
    /// error, by default) while no send gate paces it. Closed, it counts as
    /// a failure, but a breaker it trips goes half-open, not open: the
    /// dependency may be up with less room than its callers want, and the
    /// trials find out. Half-open, trials follow what the dependency
    /// accepts (see [`TRIALS_PER_ACCEPTED`]), and refusals open the breaker
    /// again only when nothing is accepted. Under `scope: fleet` that holds
    /// in the overload that follows a return (the daemon's trials found the
    /// dependency up and closed the breaker, until a trial window passes
    /// with no refusal); otherwise a refusal opens the breaker as a failure does,
    /// for the daemon's one half-open for the fleet. A trial on one of the
    /// daemon's slots that is refused is a failed trial to the daemon.
    Refused,
}

/// Trials a half-open breaker may send for each one the dependency
/// accepted in the last [`TRIAL_WINDOW`], beyond its first
/// `halfOpenMaxCalls`: two, the multiplier of client-side adaptive
/// throttling in Google's SRE book (Chapter 21). The breaker then sends
/// about twice what the dependency takes, so it sees the room grow, and no
/// more, so an overload lasting minutes costs the dependency one refusal
/// per call it serves, not one per call its callers make.
pub const TRIALS_PER_ACCEPTED: u32 = 2;

/// How far back a half-open breaker counts its trials and their answers,
/// at most: ten seconds, long enough to hold a few answers at a process's
/// share of a small room, short enough that a room that grows or shrinks
/// is followed within seconds. A breaker whose `openTimeout` is shorter
/// counts over that (at least [`SHORTEST_TRIAL_WINDOW`]): it was told to
/// leave the dependency alone for less, and judges it as briefly (with
/// `openTimeout: 3s`, ten seconds of trials were most of each cycle, and
/// breakers saw HAProxy back 4 s late, not 1.7 s).
pub const TRIAL_WINDOW: Duration = Duration::from_secs(10);

/// The shortest window a half-open breaker counts its trials over: a
/// second.
pub const SHORTEST_TRIAL_WINDOW: Duration = Duration::from_secs(1);

/// A call refused by the breaker.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("circuit breaker is {}; calls are refused for {retry_in:?}", state.name())]
pub struct CallNotPermitted {
    /// The state that refused the call: open, or half-open with every trial
    /// slot taken or the trials its answers earned spent.
    pub state: CircuitState,
    /// How long until the breaker admits trial calls (zero when half-open).
    pub retry_in: Duration,
}

/// A breaker's counts, for metrics and reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BreakerSnapshot {
    /// The state now.
    pub state: CircuitState,
    /// Calls, failures and slow calls in the closed state's window.
    pub window: Tally,
    /// Failures in a row while closed.
    pub consecutive_failures: u32,
    /// Calls refused since the breaker was created.
    pub rejected: u64,
    /// State changes since the breaker was created.
    pub transitions: u64,
}

/// A circuit breaker shared by every task that calls one dependency; clones share state.
#[derive(Debug, Clone)]
pub struct CircuitBreaker {
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    /// Its `circuitBreaker` block, which an update retunes in place.
    policy: ArcSwap<CircuitBreakerPolicy>,
    machine: Mutex<Machine>,
    state: watch::Sender<CircuitState>,
    /// The machine's generation and state (`generation << 2 | state`), so a
    /// closed breaker grants permits without taking the lock.
    phase: AtomicU64,
    rejected: AtomicU64,
}

/// The mutable part, behind one short-held lock.
#[derive(Debug)]
struct Machine {
    state: CircuitState,
    /// Bumped at each state change, so outcomes of calls from an older state are ignored.
    generation: u64,
    consecutive_failures: u32,
    window: Window,
    opened_at: Instant,
    trials_in_flight: u32,
    /// Trials accepted in a row, none refused between.
    trial_successes: u32,
    /// Half-open: trials of the last `trial_span`, a refusal as a failure.
    trials: Window,
    /// When it last went half-open.
    half_open_since: Instant,
    /// The window its trials are counted over since: [`TRIAL_WINDOW`], or
    /// `openTimeout` if shorter.
    trial_span: Duration,
    /// Half-open because refusals tripped it from closed: the dependency
    /// answers, and the trials are this process's own. Under `scope:
    /// fleet` the daemon hears of the breaker only once it opens.
    refusing: bool,
    /// Under `scope: fleet`, until when refusals are the overload that
    /// follows the dependency's return: a trial window past the daemon's
    /// close, and past each refusal since. Until then they trip the breaker
    /// half-open; after, they open it, for the fleet's one half-open.
    after_return_until: Option<Instant>,
    transitions: u64,
    /// When it last opened from closed.
    opened_from_closed: Instant,
    fleet: FleetWord,
}

/// Under `scope: fleet`, what the daemon last said, and what to tell it.
#[derive(Debug, Default)]
struct FleetWord {
    /// Until when its word holds: meanwhile the daemon, not `openTimeout`,
    /// decides when the open breaker sends trials.
    until: Option<Instant>,
    /// Trial slots it granted that have not been used, good until the
    /// lease of the answer that granted them ends (not the last answer's:
    /// the daemon takes an unsettled slot back after two leases, and a
    /// process must not hold it then).
    slots: u32,
    slots_until: Option<Instant>,
    /// Calls it refused, as of the last report: the daemon grants slots to
    /// processes that have calls to try them with.
    refused_reported: u64,
    /// When the fleet's breaker goes half-open, or this process's turn in
    /// the closing ramp comes, as it said.
    retry_at: Option<Instant>,
    /// Outcomes of trials sent on its slots, since the last report.
    succeeded: u32,
    failed: u32,
}

impl FleetWord {
    fn holds_at(&self, now: Instant) -> bool {
        self.until.is_some_and(|until| now < until)
    }

    fn slots_at(&self, now: Instant) -> u32 {
        match self.slots_until {
            Some(until) if now < until => self.slots,
            _ => 0,
        }
    }
}

/// Leave to make one call; tell the breaker how it went with [`record`](Self::record).
/// Dropped unrecorded (the call was cancelled), it counts for nothing and frees its slot.
#[derive(Debug)]
#[must_use = "a permit must be recorded, or the call does not count"]
pub struct Permit {
    breaker: CircuitBreaker,
    generation: u64,
    trial: bool,
    /// A trial on a slot the daemon granted: its outcome is the fleet's.
    fleet_trial: bool,
    started: Instant,
    done: bool,
}

impl CircuitBreaker {
    /// A closed breaker from a policy's `circuitBreaker` block, whose ranges
    /// validation has checked (rates in (0, 1], counts 1 to 10,000, a time
    /// window of 1 s to 1 h). `consecutiveFailures: 0` turns that trigger off.
    pub fn new(policy: &CircuitBreakerPolicy) -> Self {
        Self::new_at(policy, Instant::now())
    }

    /// [`new`](Self::new) at a given instant (for simulations in virtual time).
    pub fn new_at(policy: &CircuitBreakerPolicy, now: Instant) -> Self {
        let machine = Machine {
            state: CircuitState::Closed,
            generation: 0,
            consecutive_failures: 0,
            window: Window::new(policy.sliding_window, now),
            opened_at: now,
            trials_in_flight: 0,
            trial_successes: 0,
            trials: trial_window(trial_span(policy), now),
            half_open_since: now,
            trial_span: trial_span(policy),
            refusing: false,
            after_return_until: None,
            transitions: 0,
            opened_from_closed: now,
            fleet: FleetWord::default(),
        };
        Self {
            shared: Arc::new(Shared {
                policy: ArcSwap::from_pointee(policy.clone()),
                machine: Mutex::new(machine),
                state: watch::Sender::new(CircuitState::Closed),
                phase: AtomicU64::new(phase(0, CircuitState::Closed)),
                rejected: AtomicU64::new(0),
            }),
        }
    }

    /// Asks leave to make a call now.
    pub fn try_acquire(&self) -> Result<Permit, CallNotPermitted> {
        self.try_acquire_at(Instant::now())
    }

    /// [`try_acquire`](Self::try_acquire) at a given instant.
    pub fn try_acquire_at(&self, now: Instant) -> Result<Permit, CallNotPermitted> {
        let seen = self.shared.phase.load(Acquire);
        if seen & 3 == CircuitState::Closed as u64 {
            // If the breaker opens meanwhile, this permit's outcome is ignored, as any call's from before.
            return Ok(self.permit(seen >> 2, false, now));
        }
        let mut m = self.lock();
        if m.state == CircuitState::Open && self.is_fleet_scoped() && m.fleet.holds_at(now) {
            return self.fleet_trial(m, now);
        }
        if m.state == CircuitState::Open {
            let reopens = m.opened_at + self.shared.policy.load().open_timeout;
            if now < reopens {
                drop(m);
                return Err(self.refuse(CircuitState::Open, reopens - now));
            }
            self.transition(&mut m, CircuitState::HalfOpen, now);
        }
        let trial = m.state == CircuitState::HalfOpen;
        if trial {
            let most = self.shared.policy.load().half_open_max_calls.max(1);
            if m.trials_in_flight >= most {
                drop(m);
                return Err(self.refuse(CircuitState::HalfOpen, Duration::ZERO));
            }
            if !m.trial_credit_at(most, now) {
                drop(m);
                return Err(self.refuse(CircuitState::HalfOpen, Duration::ZERO));
            }
            m.trials_in_flight += 1;
        }
        Ok(self.permit(m.generation, trial, now))
    }

    /// An open breaker the daemon speaks for: a trial on one of its slots, if any is left.
    fn fleet_trial(&self, mut m: MutexGuard<'_, Machine>, now: Instant) -> Result<Permit, CallNotPermitted> {
        if m.fleet.slots_at(now) == 0 {
            let retry_in = m
                .fleet
                .retry_at
                .map_or(Duration::ZERO, |at| at.saturating_duration_since(now));
            drop(m);
            return Err(self.refuse(CircuitState::Open, retry_in));
        }
        m.fleet.slots -= 1;
        let mut permit = self.permit(m.generation, true, now);
        permit.fleet_trial = true;
        Ok(permit)
    }

    fn permit(&self, generation: u64, trial: bool, now: Instant) -> Permit {
        Permit {
            breaker: self.clone(),
            generation,
            trial,
            fleet_trial: false,
            started: now,
            done: false,
        }
    }

    /// Takes up a new version of its `circuitBreaker` block at `now`,
    /// keeping its state: an operator's edit mid-outage must not close an
    /// open breaker and let every call through. A new `openTimeout` counts
    /// from when it opened; new trial counts apply to trials from now on;
    /// new thresholds to its next judgement. A window of another shape
    /// starts afresh (outcomes kept by count cannot be read by time, or
    /// by another count); the same shape keeps its outcomes. Turned from
    /// `fleet` to `process`, it no longer waits for the daemon's word.
    pub fn retune_at(&self, policy: &CircuitBreakerPolicy, now: Instant) {
        let mut m = self.lock();
        let old = self.shared.policy.load();
        if old.sliding_window != policy.sliding_window {
            m.window = Window::new(policy.sliding_window, now);
        }
        if policy.scope != BreakerScope::Fleet {
            m.fleet = FleetWord::default();
        }
        self.shared.policy.store(Arc::new(policy.clone()));
    }

    /// Whether the daemon decides this breaker's trials (`scope: fleet`).
    pub fn is_fleet_scoped(&self) -> bool {
        self.shared.policy.load().scope == BreakerScope::Fleet
    }

    /// Whether, at `now`, the breaker has something to tell the daemon: it
    /// is fleet-scoped and open (or half-open alone), or its trials'
    /// outcomes are still to be reported.
    pub fn asks_fleet_at(&self, _now: Instant) -> bool {
        if !self.is_fleet_scoped() {
            return false;
        }
        let m = self.lock();
        m.is_open_for_the_fleet() || m.fleet.succeeded > 0 || m.fleet.failed > 0
    }

    /// What to tell the daemon at `now`, if fleet-scoped: whether the
    /// breaker is open, since when, the calls it refused and its trials'
    /// outcomes since the last report (which this takes: they are
    /// reported once).
    pub fn fleet_report_at(&self, now: Instant) -> Option<BreakerReport> {
        if !self.is_fleet_scoped() {
            return None;
        }
        let mut m = self.lock();
        let rejected = self.shared.rejected.load(Relaxed);
        let refused = rejected.saturating_sub(std::mem::replace(&mut m.fleet.refused_reported, rejected));
        let report = BreakerReport {
            open: m.is_open_for_the_fleet(),
            open_for: now.saturating_duration_since(m.opened_from_closed),
            refused: u32::try_from(refused).unwrap_or(u32::MAX),
            succeeded: std::mem::take(&mut m.fleet.succeeded),
            failed: std::mem::take(&mut m.fleet.failed),
        };
        Some(report)
    }

    /// The daemon's `verdict` on the fleet's breaker, heard at `now`,
    /// holding until `until` (the grant's lease): closed closes this one;
    /// open or half-open leaves its trials to the daemon's slots until
    /// then. True if it closed the breaker, for the caller to hand the
    /// dependency to its pace.
    pub fn heard_at(&self, verdict: BreakerVerdict, until: Instant, now: Instant) -> bool {
        if !self.is_fleet_scoped() {
            return false;
        }
        let mut m = self.lock();
        if m.refusing {
            // Its trials follow what the dependency accepts; the fleet's word is for open breakers.
            return false;
        }
        if verdict.state == CircuitState::Closed {
            m.fleet.until = None;
            m.fleet.slots_until = None;
            let closes = m.state != CircuitState::Closed;
            if closes {
                self.transition(&mut m, CircuitState::Closed, now);
                m.after_return_until = Some(now + trial_span(&self.shared.policy.load()));
            }
            return closes;
        }
        if m.state == CircuitState::HalfOpen {
            // It had gone half-open alone, without the daemon: the daemon's trials govern again.
            self.transition(&mut m, CircuitState::Open, now);
        }
        m.fleet.until = Some(until);
        if verdict.trials > 0 {
            m.fleet.slots = verdict.trials;
            m.fleet.slots_until = Some(until);
        } else if verdict.state == CircuitState::Open {
            m.fleet.slots_until = None;
        }
        m.fleet.retry_at = Some(now + verdict.retry_in);
        false
    }

    /// The state now (the move from open to half-open waits for the next call).
    pub fn state(&self) -> CircuitState {
        *self.shared.state.borrow()
    }

    /// A receiver that sees every state change, for metrics and logs.
    pub fn subscribe(&self) -> watch::Receiver<CircuitState> {
        self.shared.state.subscribe()
    }

    /// The breaker's counts now.
    pub fn snapshot(&self) -> BreakerSnapshot {
        let m = self.lock();
        BreakerSnapshot {
            state: m.state,
            window: m.window.tally(Instant::now()),
            consecutive_failures: m.consecutive_failures,
            rejected: self.shared.rejected.load(Relaxed),
            transitions: m.transitions,
        }
    }

    fn refuse(&self, state: CircuitState, retry_in: Duration) -> CallNotPermitted {
        self.shared.rejected.fetch_add(1, Relaxed);
        CallNotPermitted { state, retry_in }
    }

    fn lock(&self) -> MutexGuard<'_, Machine> {
        // The lock guards plain counters: a panic elsewhere cannot leave them unusable.
        self.shared.machine.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn record(&self, permit: &Permit, outcome: CallOutcome, now: Instant) {
        let mut m = self.lock();
        let refused = outcome == CallOutcome::Refused;
        let failed = outcome != CallOutcome::Success;
        let slow =
            now.saturating_duration_since(permit.started) >= self.shared.policy.load().slow_call_duration;
        if permit.fleet_trial {
            // The fleet's trial: its outcome is the daemon's to judge, whatever this breaker did since.
            if failed || slow {
                m.fleet.failed = m.fleet.failed.saturating_add(1);
                if m.state == CircuitState::Open {
                    m.opened_at = now;
                }
            } else {
                m.fleet.succeeded = m.fleet.succeeded.saturating_add(1);
            }
            return;
        }
        if m.generation != permit.generation {
            return;
        }
        let refused = refused && self.follows_refusal_at(&mut m, now);
        match m.state {
            CircuitState::Closed => self.record_closed(&mut m, failed, slow, refused, now),
            CircuitState::HalfOpen if refused && !slow => self.record_refused_trial(&mut m, now),
            CircuitState::HalfOpen => self.record_trial(&mut m, failed || slow, now),
            CircuitState::Open => {}
        }
    }

    /// Whether the breaker follows a refusal at `now` (it trips the breaker
    /// half-open, and a refused trial does not open it again): always under
    /// `scope: process`; under `scope: fleet`, in the overload that follows
    /// a return, which each such refusal extends. Outside it, refusals are
    /// the fleet's to judge, as failures are.
    fn follows_refusal_at(&self, m: &mut Machine, now: Instant) -> bool {
        let after_return = m.after_return_until.is_some_and(|until| now < until);
        if after_return {
            m.after_return_until = Some(now + trial_span(&self.shared.policy.load()));
        }
        after_return || !self.is_fleet_scoped()
    }

    /// A call that ended closed: `refused` if the dependency refused it as
    /// overloaded, which trips the breaker half-open, not open.
    fn record_closed(&self, m: &mut Machine, failed: bool, slow: bool, refused: bool, now: Instant) {
        let policy = self.shared.policy.load();
        m.consecutive_failures = if failed {
            m.consecutive_failures.saturating_add(1)
        } else {
            0
        };
        m.window.record(now, failed, slow);
        let in_a_row = policy.consecutive_failures > 0
            && m.consecutive_failures >= policy.consecutive_failures
            && !chance::Run {
                length: m.consecutive_failures,
                tally: m.window.tally(now),
                opens_at: policy.consecutive_failures,
                threshold: policy.failure_rate_threshold,
            }
            .by_chance();
        if in_a_row || self.rates_exceeded(m, now) {
            let to = if refused {
                CircuitState::HalfOpen
            } else {
                CircuitState::Open
            };
            self.transition(m, to, now);
            m.refusing = refused;
        }
    }

    /// Whether the window holds enough calls and too many failed or were slow.
    /// A count window smaller than `minimumCalls` is judged once full.
    fn rates_exceeded(&self, m: &Machine, now: Instant) -> bool {
        let policy = self.shared.policy.load();
        let tally = m.window.tally(now);
        if tally.calls == 0 || tally.calls < self.minimum_calls(m) {
            return false;
        }
        let share = |n: u32| f64::from(n) / f64::from(tally.calls);
        share(tally.failures) >= policy.failure_rate_threshold
            || share(tally.slow) >= policy.slow_call_rate_threshold
    }

    /// Calls the window must hold before its rates are judged:
    /// `minimumCalls`, or a smaller count window once full.
    fn minimum_calls(&self, m: &Machine) -> u32 {
        let minimum = self.shared.policy.load().minimum_calls;
        m.window.capacity().map_or(minimum, |c| c.min(minimum))
    }

    /// A trial that ended: a failed or slow one opens the breaker again;
    /// `successThreshold` accepted in a row close it.
    fn record_trial(&self, m: &mut Machine, bad: bool, now: Instant) {
        m.trials_in_flight = m.trials_in_flight.saturating_sub(1);
        if bad {
            self.transition(m, CircuitState::Open, now);
            return;
        }
        m.trials.record(now, false, false);
        m.trial_successes += 1;
        if m.trial_successes >= self.shared.policy.load().success_threshold {
            self.transition(m, CircuitState::Closed, now);
        }
    }

    /// A trial the dependency refused as overloaded: it opens the breaker
    /// again only once the breaker has been half-open a whole
    /// trial window and the window holds `halfOpenMaxCalls` refused
    /// trials and none accepted, so a dependency that is down (or answers
    /// nothing but 503s) is left alone, and one that takes a share is not.
    /// A refusal alone says little: a dependency with a per-second quota
    /// refuses every call late in a second, retries included.
    fn record_refused_trial(&self, m: &mut Machine, now: Instant) {
        m.trials_in_flight = m.trials_in_flight.saturating_sub(1);
        m.trial_successes = 0;
        m.trials.record(now, true, false);
        let tally = m.trials.tally(now);
        let most = self.shared.policy.load().half_open_max_calls.max(1);
        let judged = now.saturating_duration_since(m.half_open_since) >= m.trial_span;
        if judged && tally.failures == tally.calls && tally.failures >= most {
            self.transition(m, CircuitState::Open, now);
        }
    }

    fn release(&self, permit: &Permit) {
        let mut m = self.lock();
        if permit.fleet_trial {
            // Unused: the slot is this process's until its lease ends.
            m.fleet.slots = m.fleet.slots.saturating_add(1);
        } else if permit.trial && m.generation == permit.generation {
            m.trials_in_flight = m.trials_in_flight.saturating_sub(1);
        }
    }

    fn transition(&self, m: &mut Machine, to: CircuitState, now: Instant) {
        if m.state == CircuitState::Closed && to == CircuitState::Open {
            m.opened_from_closed = now;
        }
        m.state = to;
        m.refusing = false;
        m.generation += 1;
        m.transitions += 1;
        m.trials_in_flight = 0;
        m.trial_successes = 0;
        match to {
            CircuitState::Open => {
                m.opened_at = now;
                m.after_return_until = None;
            }
            CircuitState::Closed => {
                m.consecutive_failures = 0;
                m.window.clear();
            }
            CircuitState::HalfOpen => {
                m.trial_span = trial_span(&self.shared.policy.load());
                m.trials = trial_window(m.trial_span, now);
                m.half_open_since = now;
            }
        }
        self.shared.phase.store(phase(m.generation, to), Release);
        self.shared.state.send_replace(to);
    }
}

impl Machine {
    /// Whether the daemon is to hear that this breaker is open: open, or
    /// half-open alone after `openTimeout`; not half-open on refusals.
    fn is_open_for_the_fleet(&self) -> bool {
        match self.state {
            CircuitState::Open => true,
            CircuitState::HalfOpen => !self.refusing,
            CircuitState::Closed => false,
        }
    }

    /// Whether a half-open breaker may send one more trial at `now`: while
    /// the trials the dependency refused in its trial window
    /// outnumber those it accepted by fewer than `most`, so that it sends
    /// about [`TRIALS_PER_ACCEPTED`] for each accepted, and `most` a window
    /// when none is. Trials nobody refused are limited only by `most` at a
    /// time.
    fn trial_credit_at(&self, most: u32, now: Instant) -> bool {
        let tally = self.trials.tally(now);
        let accepted = tally.calls.saturating_sub(tally.failures);
        tally.failures
            < accepted
                .saturating_mul(TRIALS_PER_ACCEPTED - 1)
                .saturating_add(self.unearned_trials_at(most, now))
    }

    /// The refusals a half-open breaker risks whatever the answers: `most`
    /// a window, the first window's coming one per `trial_span / most`,
    /// so that processes that went half-open together (opened by the same
    /// outage) do not spend them in one burst that a recovering dependency
    /// refuses almost whole.
    fn unearned_trials_at(&self, most: u32, now: Instant) -> u32 {
        let spacing = self.trial_span.as_nanos() / u128::from(most.max(1));
        let steps = now.saturating_duration_since(self.half_open_since).as_nanos() / spacing;
        u32::try_from(steps)
            .unwrap_or(u32::MAX)
            .saturating_add(1)
            .min(most)
    }
}

fn trial_window(span: Duration, now: Instant) -> Window {
    Window::new(SlidingWindow::Time { duration: span }, now)
}

/// The window a breaker under `policy` counts its half-open trials over.
fn trial_span(policy: &CircuitBreakerPolicy) -> Duration {
    policy.open_timeout.clamp(SHORTEST_TRIAL_WINDOW, TRIAL_WINDOW)
}

fn phase(generation: u64, state: CircuitState) -> u64 {
    generation << 2 | state as u64
}

impl Permit {
    /// Records how the call went; its duration (since the permit) decides whether it was slow.
    pub fn record(self, outcome: CallOutcome) {
        self.record_at(outcome, Instant::now());
    }

    /// [`record`](Self::record) with the call ending at a given instant.
    pub fn record_at(mut self, outcome: CallOutcome, now: Instant) {
        self.done = true;
        self.breaker.record(&self, outcome, now);
    }

    /// Whether the breaker is still in the state it granted this permit
    /// in: once it changed (it opened while the call waited in a send
    /// gate's line), the call's outcome would be ignored, and the breaker
    /// must be asked again before anything is sent. The fleet's trial is
    /// always current: its outcome is the daemon's to judge.
    pub fn is_current(&self) -> bool {
        self.fleet_trial || self.breaker.shared.phase.load(Acquire) >> 2 == self.generation
    }

    /// Whether this is a half-open trial call.
    pub fn is_trial(&self) -> bool {
        self.trial
    }

    /// Whether this is a trial on a slot the daemon granted the fleet: the
    /// fleet's trials are few already, so it does not wait for a send
    /// gate's turn.
    pub fn is_fleet_trial(&self) -> bool {
        self.fleet_trial
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        if !self.done {
            self.breaker.release(self);
        }
    }
}

#[cfg(test)]
mod tests;
