//! Fleet half-open: one set of trial calls for the whole fleet's breakers,
//! not one per process.
//!
//! When a dependency goes down, every process's breaker opens within a
//! second of the others, and `openTimeout` later each would go half-open
//! and send `halfOpenMaxCalls` trials: a fleet of N processes sends N
//! times that at a dependency that is just coming back, the trials fail,
//! and every breaker opens for another `openTimeout`. Under
//! `circuitBreaker.scope: fleet`, a process whose breaker is open asks the
//! daemon instead (with its pace ask), and the daemon keeps one breaker
//! for the fleet, per dependency:
//!
//! - **Open** from the first process's report, for `openTimeout`.
//! - **Half-open**: at most `halfOpenMaxCalls` trials for the whole fleet
//!   (or `successThreshold`, if more), as Resilience4j permits that many
//!   calls in half-open: slots, at most one per process at a time, so
//!   that no process takes every slot, and only to processes whose breaker
//!   refused a call since their last ask, so that a slot goes where a
//!   call will use it. A slot is the process's until it reports the
//!   trial's outcome, or for [`SLOT_LIFE`]; a slot lost with its holder
//!   is granted again. A failed trial opens the fleet's breaker again;
//!   `successThreshold` successful ones close it.
//! - **Closed**: every process whose breaker opened before the close is
//!   told to close at its next ask. With the send gate on, the daemon
//!   hands them to its pace; without one, it closes them in a ramp
//!   ([`RAMP_STEP`]), so that the fleet's calls do not return all at once,
//!   and the ramp follows what it hears: it holds while breakers it closed
//!   open again, and widens at the pace their answers can show trouble.
//!   A breaker that opens after the close starts a new episode.
//!
//! Daemon replicas sharing a store share one episode ([`episode`]): the
//! store keeps the phase and divides the slots between the replicas, and
//! each replica mirrors it for its own processes.
//!
//! Each process's breaker still opens on its own evidence; the fleet
//! decides only when to try the dependency again. Pure and
//! time-injectable (`_at`), so the simulator runs this very code.

use std::collections::{HashMap, HashSet};
use std::hash::Hash;
use std::time::Duration;

use tokio::time::Instant;

use self::episode::{Episode, EpisodeAnswer, EpisodePhase, Rules, Share};
use super::{ASK_EVERY, LEASE};
use crate::breaker::state::CircuitState;
use crate::policy::CircuitBreakerPolicy;

pub mod episode;

/// How long a trial slot is its holder's if it reports no outcome: the
/// lease it may use the slot within, and as long again for the trial to
/// be answered. A slot lost with its process (or its ask) is then free
/// again, so a dead process cannot hold the fleet's breaker half-open.
pub const SLOT_LIFE: Duration = Duration::from_secs(2 * LEASE.as_secs());

/// Without a send gate to pace the fleet's return, the breakers close in a
/// ramp: `halfOpenMaxCalls` processes at first (as many as the trials
/// reached at once), then twice as many after each step in which no
/// breaker it closed opened again, and no more after a step in which one
/// did: TCP's slow start, which stops at a loss. A step lasts as long as a
/// breaker it closed takes to open again on a dependency that cannot take
/// its calls: `consecutiveFailures` of the process's calls, at the rate its
/// refusals showed while open, and an ask, within [`RAMP_STEP_BOUNDS`].
/// The ramp thus widens as fast as the dependency's answers can say it
/// keeps up (every 350 ms at 20 calls a second a process, every 200 ms
/// from 50), and no faster; this long if the rate is unknown.
pub const RAMP_STEP: Duration = Duration::from_millis(500);

/// The shortest and the longest step of the closing ramp: two asks, and a
/// step that would let a fleet of thousands wait minutes.
pub const RAMP_STEP_BOUNDS: (Duration, Duration) = (Duration::from_millis(200), Duration::from_secs(5));

/// What a process says of its breaker when it asks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BreakerReport {
    /// Whether its breaker is open (or half-open on its own).
    pub open: bool,
    /// How long since its breaker last opened from closed.
    pub open_for: Duration,
    /// Calls its breaker refused since its last ask: a process with none
    /// has no call to send a trial with, and is granted no slot.
    pub refused: u32,
    /// Trials it sent on the fleet's slots that succeeded since its last ask...
    pub succeeded: u32,
    /// ...and that failed.
    pub failed: u32,
}

/// The fleet breaker's word to one process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BreakerVerdict {
    /// Closed: close the breaker. Half-open: send the trials granted, if
    /// any. Open: stay open.
    pub state: CircuitState,
    /// Trial slots granted by this answer (0 or 1): the process may send
    /// that many trials within the grant's lease.
    pub trials: u32,
    /// While open: how long until the fleet's breaker goes half-open, or
    /// this process's turn in the closing ramp.
    pub retry_in: Duration,
}

impl BreakerVerdict {
    /// Whether it tells the process to close its breaker.
    pub fn closes(&self) -> bool {
        self.state == CircuitState::Closed
    }
}

/// One dependency's breaker for the whole fleet; `K` names a process.
#[derive(Debug)]
pub struct FleetBreaker<K> {
    open_timeout: Duration,
    max_trials: u32,
    success_threshold: u32,
    /// Whether the close hands the fleet to the send gate's pace, rather
    /// than to a ramp of its own.
    paced: bool,
    phase: Phase<K>,
    /// The last close, and whom it has told so far: a breaker that opened
    /// before it is closed by it, even once a new episode has begun.
    closing: Option<Closing<K>>,
    /// Trial slots granted since it was made.
    granted: u64,
    last_ask: Instant,
    /// The episode as the replicas' store last told it, and what to tell it next.
    mirror: Mirror,
    /// How fast its processes call, from what their open breakers refuse.
    calls: Calls<K>,
    /// Calls in a row that open a process's breaker again.
    reopen_after: u32,
}

/// The calls a process makes a second, from the calls its open breaker
/// refused between two asks: a moving mean over the fleet's asks.
#[derive(Debug)]
struct Calls<K> {
    asked: HashMap<K, Instant>,
    per_second: Option<f64>,
}

/// A replica's view of the episode its store keeps.
#[derive(Debug, Default)]
struct Mirror {
    /// Until when the store's word holds: it decides alone after.
    until: Option<Instant>,
    /// The episode's epoch and last close as last heard.
    epoch: u64,
    closed_at: Option<u64>,
    /// Slots the store granted it, not yet handed to a process: when each was.
    allowance: Vec<Instant>,
    /// What happened since its last share.
    pending: Pending,
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Pending {
    /// The first report of an open breaker since the last close it knew of.
    opened: Option<Instant>,
    wanted: u32,
    succeeded: u32,
    failed: u32,
    settled: u32,
}

#[derive(Debug)]
enum Phase<K> {
    /// No breaker open since the last close.
    Closed,
    /// Open since then: the first report, or the last failed trial.
    Open(Instant),
    /// Trial slots out: who holds one, the successes so far, and the
    /// trials settled (reported) so far.
    HalfOpen {
        slots: HashMap<K, Slot>,
        successes: u32,
        settled: u32,
    },
}

#[derive(Debug)]
struct Closing<K> {
    at: Instant,
    /// Processes told to close, in the ramp without a gate.
    told: HashSet<K>,
    /// Of those, the ones whose breakers opened again since.
    reopened: HashSet<K>,
    ramp: Ramp,
}

/// How many processes the closing ramp may have told to close by now.
#[derive(Debug, Clone, Copy)]
struct Ramp {
    window: u64,
    step: Duration,
    step_began: Instant,
    /// Whether a breaker it closed opened again in this step.
    reopened: bool,
}

#[derive(Debug, Clone, Copy)]
struct Slot {
    granted: Instant,
    /// Whether its holder reported its trial's outcome.
    settled: bool,
    /// Whether the store granted it: only such a slot's outcome is the
    /// store's to count (one granted while deciding alone is not in it).
    from_store: bool,
}

impl<K: Eq + Hash + Clone> FleetBreaker<K> {
    /// The fleet's breaker for a dependency whose `circuitBreaker` block is
    /// `policy`; `paced` if its send gate is on, to take the fleet back at
    /// its pace once the breaker closes.
    pub fn new_at(policy: &CircuitBreakerPolicy, paced: bool, now: Instant) -> Self {
        Self {
            open_timeout: policy.open_timeout,
            max_trials: policy.half_open_max_calls.max(1),
            success_threshold: policy.success_threshold.max(1),
            paced,
            phase: Phase::Closed,
            closing: None,
            granted: 0,
            last_ask: now,
            mirror: Mirror::default(),
            calls: Calls {
                asked: HashMap::new(),
                per_second: None,
            },
            reopen_after: reopen_after(policy),
        }
    }

    /// Takes up a new version of the dependency's `circuitBreaker` block,
    /// and whether its send gate is on, keeping the episode: a reload
    /// mid-outage neither closes the fleet's breaker nor starts its
    /// `openTimeout` again. The new timeout counts from when the episode
    /// opened; new trial counts apply to the slots granted from now on.
    pub fn retune(&mut self, policy: &CircuitBreakerPolicy, paced: bool) {
        self.open_timeout = policy.open_timeout;
        self.max_trials = policy.half_open_max_calls.max(1);
        self.success_threshold = policy.success_threshold.max(1);
        self.reopen_after = reopen_after(policy);
        self.paced = paced;
    }

    /// The fleet's breaker state at `now` (the move to half-open waits for an ask).
    pub fn state(&self) -> CircuitState {
        match self.phase {
            Phase::Closed => CircuitState::Closed,
            Phase::Open(_) => CircuitState::Open,
            Phase::HalfOpen { .. } => CircuitState::HalfOpen,
        }
    }

    /// Trial slots granted since it was made.
    pub fn slots_granted(&self) -> u64 {
        self.granted
    }

    /// Whether nobody has asked for `idle` by `now` and it is closed: it is
    /// no longer needed.
    pub fn is_idle_at(&self, now: Instant, idle: Duration) -> bool {
        matches!(self.phase, Phase::Closed) && now.saturating_duration_since(self.last_ask) >= idle
    }

    /// Process `who` reports its breaker at `now`; the answer says what its
    /// breaker is to do.
    pub fn ask_at(&mut self, who: K, report: BreakerReport, now: Instant) -> BreakerVerdict {
        self.last_ask = now;
        self.settle(&who, report, now);
        self.close_if_due(now);
        if !report.open {
            return verdict(CircuitState::Closed, 0, Duration::ZERO);
        }
        let opened = now.checked_sub(report.open_for).unwrap_or(now);
        self.calls.heard(&who, report.refused, now);
        let paced = self.paced;
        if let Some(closing) = self.closing.as_mut() {
            if opened <= closing.at {
                return closing.verdict(who, paced, now);
            }
            closing.opened_again(&who, now);
        }
        if let Phase::Closed = self.phase {
            // A breaker that opened since the last close: a new episode.
            self.phase = Phase::Open(now);
            self.mirror.pending.opened.get_or_insert(now);
        }
        if let Phase::Open(since) = self.phase {
            let half_open = since + self.open_timeout;
            if now < half_open {
                if report.refused > 0 {
                    // Its demand, for the store to divide the slots by.
                    self.mirror.pending.wanted = self.mirror.pending.wanted.saturating_add(1);
                }
                return verdict(CircuitState::Open, 0, half_open - now);
            }
            self.phase = Phase::HalfOpen {
                slots: HashMap::new(),
                successes: 0,
                settled: 0,
            };
        }
        let trials = if report.refused > 0 {
            self.grant_slot(who, now)
        } else {
            0
        };
        verdict(CircuitState::HalfOpen, trials, Duration::ZERO)
    }

    /// Counts the outcomes of `who`'s trial, if it holds a slot of this
    /// half-open phase: a failure opens the fleet's breaker again, the
    /// `successThreshold`-th success closes it.
    fn settle(&mut self, who: &K, report: BreakerReport, now: Instant) {
        if report.succeeded == 0 && report.failed == 0 {
            return;
        }
        let Phase::HalfOpen {
            slots,
            successes,
            settled,
        } = &mut self.phase
        else {
            return;
        };
        let Some(slot) = slots.get_mut(who) else {
            return;
        };
        if slot.from_store {
            let pending = &mut self.mirror.pending;
            if !slot.settled {
                pending.settled += 1;
            }
            pending.succeeded = pending.succeeded.saturating_add(report.succeeded);
            pending.failed = pending.failed.saturating_add(report.failed);
        }
        if !slot.settled {
            *settled += 1;
        }
        slot.settled = true;
        if report.failed > 0 {
            self.phase = Phase::Open(now);
            return;
        }
        *successes = successes.saturating_add(report.succeeded);
    }

    /// Closes it if this half-open's trials have had `successThreshold`
    /// successes, unless it shares a store: then the close is the store's,
    /// which counts every replica's trials. (A replica whose store went
    /// quiet after its last successes closes at its next ask.)
    fn close_if_due(&mut self, now: Instant) {
        let Phase::HalfOpen { successes, .. } = self.phase else {
            return;
        };
        if successes >= self.success_threshold && !self.mirror.holds_at(now) {
            self.phase = Phase::Closed;
            self.closing = Some(Closing::new(now, self.max_trials, self.ramp_step()));
            self.calls.forget_processes();
        }
    }

    /// A slot for `who` if it holds none, fewer than `halfOpenMaxCalls`
    /// are out, and this half-open has not had that many trials (or
    /// `successThreshold`, if more) already: 1, else 0. Slots lost with
    /// their holders do not count.
    fn grant_slot(&mut self, who: K, now: Instant) -> u32 {
        let Phase::HalfOpen { slots, settled, .. } = &mut self.phase else {
            return 0;
        };
        let out = |slot: &Slot| !slot.settled && now.saturating_duration_since(slot.granted) < SLOT_LIFE;
        if slots.get(&who).is_some_and(out) {
            return 0;
        }
        let from_store = self.mirror.holds_at(now);
        if from_store {
            if self.mirror.allowance.pop().is_none() {
                self.mirror.pending.wanted = self.mirror.pending.wanted.saturating_add(1);
                return 0;
            }
        } else {
            let in_flight = slots.values().filter(|slot| out(slot)).count() as u32;
            let trials = self.max_trials.max(self.success_threshold);
            if in_flight >= self.max_trials || in_flight + *settled >= trials {
                return 0;
            }
        }
        slots.insert(
            who,
            Slot {
                granted: now,
                settled: false,
                from_store,
            },
        );
        self.granted += 1;
        1
    }
}

impl<K: Eq + Hash + Clone> FleetBreaker<K> {
    /// How long a step of the closing ramp lasts: as long as a process's
    /// breaker takes to open again on a dependency that cannot take its calls.
    fn ramp_step(&self) -> Duration {
        let Some(per_second) = self.calls.per_second.filter(|&rate| rate > 0.0) else {
            return RAMP_STEP;
        };
        let shows = f64::from(self.reopen_after) / per_second + ASK_EVERY.as_secs_f64();
        let (shortest, longest) = RAMP_STEP_BOUNDS;
        Duration::from_secs_f64(shows.min(longest.as_secs_f64())).max(shortest)
    }
}

/// Calls that open a breaker under `policy` on a dependency that refuses
/// them all: `consecutiveFailures`, or `minimumCalls` if fewer (the failure
/// rate opens it then) or with that trigger off.
fn reopen_after(policy: &CircuitBreakerPolicy) -> u32 {
    match policy.consecutive_failures {
        0 => policy.minimum_calls.max(1),
        calls => calls.min(policy.minimum_calls.max(1)),
    }
}

impl<K: Eq + Hash + Clone> Calls<K> {
    /// Weight of one ask in the mean.
    const WEIGHT: f64 = 0.05;

    /// `who`, whose breaker is open, refused `refused` calls since its
    /// last ask, heard at `now`.
    fn heard(&mut self, who: &K, refused: u32, now: Instant) {
        let Some(last) = self.asked.insert(who.clone(), now) else {
            return;
        };
        let between = now.saturating_duration_since(last);
        if between < ASK_EVERY / 2 || between > 10 * ASK_EVERY {
            return;
        }
        let rate = f64::from(refused) / between.as_secs_f64();
        let mean = self.per_second.get_or_insert(rate);
        *mean += (rate - *mean) * Self::WEIGHT;
    }

    /// Forgets when each process last asked, keeping the rate: at a close,
    /// so that processes gone since the last one are not kept for ever.
    fn forget_processes(&mut self) {
        self.asked.clear();
    }
}

impl<K: Eq + Hash + Clone> FleetBreaker<K> {
    /// What to tell the replicas' store at `now`, if anything: `None` while
    /// closed with nothing new. Slots the store granted that no process took
    /// within a [`LEASE`] go back.
    pub fn share_at(&mut self, now: Instant) -> Option<Share> {
        let mirror = &mut self.mirror;
        let kept = mirror.allowance.len();
        mirror
            .allowance
            .retain(|&granted| now.saturating_duration_since(granted) < LEASE);
        let unused = (kept - mirror.allowance.len()) as u32;
        let pending = std::mem::take(&mut mirror.pending);
        if matches!(self.phase, Phase::Closed) && pending == Pending::default() && unused == 0 {
            return None;
        }
        Some(Share {
            rules: Rules {
                open_timeout_ms: self.open_timeout.as_millis() as u64,
                max_trials: self.max_trials,
                success_threshold: self.success_threshold,
            },
            epoch: mirror.epoch,
            opened_ago_ms: pending
                .opened
                .map(|at| now.saturating_duration_since(at).as_millis() as u64),
            wanted: pending.wanted,
            succeeded: pending.succeeded,
            failed: pending.failed,
            settled: pending.settled,
            unused,
        })
    }

    /// Takes back `share`, made at `now`, which never reached the store:
    /// its news goes with the next. (Slots it gave back the store frees on
    /// its own, after their [`SLOT_LIFE`].)
    pub fn unshare(&mut self, share: &Share, now: Instant) {
        let pending = &mut self.mirror.pending;
        if let Some(ago) = share.opened_ago_ms {
            let opened = now.checked_sub(Duration::from_millis(ago)).unwrap_or(now);
            pending.opened = Some(pending.opened.map_or(opened, |at| at.min(opened)));
        }
        pending.wanted = pending.wanted.saturating_add(share.wanted);
        if share.epoch == self.mirror.epoch {
            pending.succeeded = pending.succeeded.saturating_add(share.succeeded);
            pending.failed = pending.failed.saturating_add(share.failed);
            pending.settled = pending.settled.saturating_add(share.settled);
        }
    }

    /// Takes the store's `answer` at `now`: the episode's phase and last
    /// close become this replica's, and its slots its processes'. Its own
    /// news the store has not heard yet (a new episode, a failed trial)
    /// stands until it has. For a [`LEASE`] from now the slots are only
    /// the store's.
    pub fn adopt_at(&mut self, answer: &EpisodeAnswer, now: Instant) {
        let local = |at: u64| {
            now.checked_sub(Duration::from_millis(answer.at.saturating_sub(at)))
                .unwrap_or(now)
        };
        let episode: &Episode = &answer.episode;
        let step = self.ramp_step();
        let mirror = &mut self.mirror;
        mirror.until = Some(now + LEASE);
        if episode.closed_at != mirror.closed_at {
            mirror.closed_at = episode.closed_at;
            let at = episode.closed_at.map(local);
            if let Some(at) = at.filter(|&at| self.closing.as_ref().is_none_or(|c| at > c.at)) {
                self.closing = Some(Closing::new(at, self.max_trials, step));
                self.calls.forget_processes();
            }
        }
        if episode.epoch < mirror.epoch {
            // The store lost the episode (restarted, failed over, evicted):
            // this replica's breaker stands, and it tells the store again.
            mirror.epoch = episode.epoch;
            mirror.allowance.clear();
            if let Phase::Open(since) = self.phase {
                mirror.pending.opened = Some(mirror.pending.opened.map_or(since, |at| at.min(since)));
                return;
            }
            if let Phase::HalfOpen { .. } = self.phase {
                mirror
                    .pending
                    .opened
                    .get_or_insert(now.checked_sub(self.open_timeout).unwrap_or(now));
                return;
            }
        }
        let new_epoch = episode.epoch != mirror.epoch;
        if new_epoch {
            mirror.epoch = episode.epoch;
            mirror.allowance.clear();
            // Trials settled since the share were of the epoch before:
            // the store counts outcomes only in the half-open they were
            // granted in, and sent now they would carry the new epoch.
            let pending = &mut mirror.pending;
            (pending.succeeded, pending.failed, pending.settled) = (0, 0, 0);
        }
        let pending = mirror.pending;
        match episode.phase {
            EpisodePhase::Closed if pending.opened.is_none() => self.phase = Phase::Closed,
            EpisodePhase::Closed => {}
            EpisodePhase::Open { since } => self.phase = Phase::Open(local(since)),
            EpisodePhase::HalfOpen if !new_epoch && pending.failed > 0 => {}
            EpisodePhase::HalfOpen => {
                if new_epoch || !matches!(self.phase, Phase::HalfOpen { .. }) {
                    self.phase = Phase::HalfOpen {
                        slots: HashMap::new(),
                        successes: 0,
                        settled: 0,
                    };
                }
            }
        }
        mirror
            .allowance
            .extend(std::iter::repeat_n(now, answer.granted as usize));
    }
}

impl Mirror {
    /// Whether the store's word holds at `now`.
    fn holds_at(&self, now: Instant) -> bool {
        self.until.is_some_and(|until| now < until)
    }
}

impl<K: Eq + Hash + Clone> Closing<K> {
    fn new(at: Instant, first: u32, step: Duration) -> Self {
        Self {
            at,
            told: HashSet::new(),
            reopened: HashSet::new(),
            ramp: Ramp {
                window: u64::from(first.max(1)),
                step,
                step_began: at,
                reopened: false,
            },
        }
    }

    /// The verdict for `who`, whose breaker opened before this close:
    /// closed, at once if `paced` (a gate paces the fleet back), else when
    /// the ramp reaches it.
    fn verdict(&mut self, who: K, paced: bool, now: Instant) -> BreakerVerdict {
        if paced || self.told.contains(&who) {
            return verdict(CircuitState::Closed, 0, Duration::ZERO);
        }
        self.ramp.advance_to(now);
        if (self.told.len() as u64) < self.ramp.window {
            self.told.insert(who);
            return verdict(CircuitState::Closed, 0, Duration::ZERO);
        }
        verdict(CircuitState::Open, 0, self.ramp.next_step(now))
    }

    /// `who` reports a breaker that opened after this close: if the ramp
    /// closed it, the ramp does not widen after this step.
    fn opened_again(&mut self, who: &K, now: Instant) {
        if self.told.contains(who) && !self.reopened.contains(who) {
            self.reopened.insert(who.clone());
            self.ramp.advance_to(now);
            self.ramp.reopened = true;
        }
    }
}

impl Ramp {
    /// Ends the steps that ended by `now`, each doubling the window unless
    /// a breaker it closed opened again in it.
    fn advance_to(&mut self, now: Instant) {
        while now >= self.step_began + self.step {
            if !self.reopened {
                self.window = self.window.saturating_mul(2);
            }
            self.reopened = false;
            self.step_began += self.step;
            if self.window == u64::MAX {
                // Every process is closed already: nothing left to step.
                self.step_began = now;
                return;
            }
        }
    }

    /// How long from `now` until its next step.
    fn next_step(&self, now: Instant) -> Duration {
        (self.step_began + self.step).saturating_duration_since(now)
    }
}

fn verdict(state: CircuitState, trials: u32, retry_in: Duration) -> BreakerVerdict {
    BreakerVerdict {
        state,
        trials,
        retry_in,
    }
}

#[cfg(test)]
mod tests;
