//! Fleet coordination: one controller per dependency, in the daemon, that
//! paces a whole fleet's return to it.
//!
//! A process whose send gate is on asks about every [`ASK_EVERY`] for its
//! share, with its [`Tally`] since its last ask: what it sent, what was
//! accepted and refused, and how many calls wait. The controller learns one
//! rate for the whole fleet from every process's outcomes, with the gate's
//! own law (probe, slow start, CUBIC, never below what was just accepted),
//! and divides it among the processes by what each wants ([`share`]). The
//! answer is a [`Grant`]: a rate and a lease. A process paces at its grant
//! until the lease ends, then at its own gate's rate, so a daemon that
//! cannot be reached makes nothing worse than it was without one.
//!
//! What a report claims is bounded by what the process could have sent at
//! twice its grant, and what it wants by twice what it sends plus an equal
//! part: a process cannot take the fleet's share by claiming outcomes or
//! demand it does not have, and max-min division gives a process that
//! claims to want everything no more than an honest one that wants more
//! than its part.
//!
//! Pure and time-injectable (`_at`), like the gate, so the simulator runs
//! this very code with a feedback delay.

pub mod share;

use std::collections::HashMap;
use std::hash::Hash;
use std::time::Duration;

use tokio::time::Instant;

use crate::gate::rate::Rate;
use crate::gate::Tally;
use crate::policy::{GatePolicy, ValidPolicy};

/// How often a process whose gate is on asks for its share.
pub const ASK_EVERY: Duration = Duration::from_millis(100);
/// How long a grant lasts: ten asks, so that a few lost ones change nothing.
pub const LEASE: Duration = Duration::from_secs(1);
/// A dependency nobody has asked about for this long is healthy again (its
/// processes' gates have turned off): its controller is done, and the next
/// trouble starts a new one.
pub const IDLE: Duration = Duration::from_secs(10);
/// A process not heard from for this long no longer counts.
const FORGET_AFTER: Duration = Duration::from_secs(2);
/// How often the division is recomputed, at most: it sorts every process's want.
const DIVIDE_EVERY: Duration = Duration::from_millis(25);
/// Calls waiting in a process count as wanting to be sent within this long.
const BACKLOG_HORIZON: f64 = 1.0;
/// In slow start, the fleet's rate at most doubles per round (as a TCP
/// window doubles per round trip), or grows by [`FIRST_WINDOW`] turns per
/// round if that is more: outcomes come back a round late (an ask every
/// 100 ms, and the way there and back), and growing faster than they come
/// back overshoots the dependency.
const ROUND: Duration = Duration::from_millis(250);
/// Turns a round the rate may grow by however low it is: 120 a second with
/// 250 ms rounds. Three times TCP's initial window of ten segments, because
/// a fleet's first round after an outage serves a whole fleet's line, and
/// the refusal that ends slow start cuts to what was delivered rather than
/// by a share of the rate; in the simulator's herd (50 and 200 processes,
/// seeds 1-25) ten left the last callers 0.2-0.3 s later, and forty
/// overshot into cuts that cost more than they saved.
const FIRST_WINDOW: f64 = 30.0;
/// While nothing gets through, the fleet probes as often as this many
/// processes would alone (each at `minRate`), no more: four probes a second
/// at the default 0.5 a second, so a recovery is found an eighth of a
/// second late on average, for 40 refused probes over a 10 s outage;
/// 50 processes probing alone would send 25 a second, and one probing for
/// all would find it a second late on average.
const PROBERS: f64 = 8.0;
/// No process's grant falls below this share of an equal part, so one that
/// wanted nothing at its last ask (or is new) is not stuck at nothing until
/// its next. The grants of a fleet add up to at most its rate plus twice this
/// share of it (floors, and processes new since the last division).
const FLOOR: f64 = 0.1;

/// A process's share of the fleet's rate.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Grant {
    /// Attempts per second this process may send.
    pub rate: f64,
    /// How long the grant holds.
    pub lease: Duration,
}

/// The controller of one dependency: see the [module docs](self). `K` names a process.
#[derive(Debug)]
pub struct FleetController<K> {
    policy: GatePolicy,
    /// The attempts' own timeout: a timed-out attempt was sent this long
    /// before its report.
    per_try_timeout: Option<Duration>,
    rate: Rate,
    members: HashMap<K, Member>,
    division: Division,
    /// While nothing has been accepted, one process probes for the fleet,
    /// so that probes come evenly at the probe rate, and not at random from
    /// a thousand tiny parts.
    prober: Option<K>,
    /// The slow-start round: when it began, and the rate then.
    round: (Instant, f64),
    last_ask: Instant,
    scratch: Vec<f64>,
}

#[derive(Debug, Clone, Copy)]
struct Member {
    /// Attempts per second it wants, as bounded.
    want: f64,
    /// Its want when the rate was last divided: its part is at most that
    /// division's, so a want that rose since takes nothing the division
    /// already gave the others.
    divided: f64,
    /// Its last grant.
    granted: f64,
    last_ask: Instant,
}

/// The last division of the rate.
#[derive(Debug, Clone, Copy)]
struct Division {
    /// The rate divided.
    total: f64,
    /// Each process gets `min(want, level)`...
    level: f64,
    /// ...times this when everyone's want is met (the rest is shared in
    /// proportion), and scaled to the rate when it is given.
    scale: f64,
    at: Instant,
    stale: bool,
}

impl<K: Eq + Hash + Clone> FleetController<K> {
    /// A controller for a dependency whose gate `policy` sets, probing.
    pub fn new_at(policy: &ValidPolicy, now: Instant) -> Self {
        let per_try_timeout = policy.per_try_timeout;
        let policy = policy.gate.clone();
        Self {
            rate: Rate::probing_for_fleet(&policy, now),
            policy,
            per_try_timeout,
            members: HashMap::new(),
            division: Division {
                total: 1.0,
                level: 0.0,
                scale: 1.0,
                at: now,
                stale: true,
            },
            prober: None,
            round: (now, 0.0),
            last_ask: now,
            scratch: Vec::new(),
        }
    }

    /// The rate the whole fleet may send, attempts per second.
    pub fn rate(&self) -> f64 {
        self.rate.now
    }

    /// Processes that asked within the last two seconds.
    pub fn members(&self) -> usize {
        self.members.len()
    }

    /// Whether `who` is among the processes counted.
    pub fn knows(&self, who: &K) -> bool {
        self.members.contains_key(who)
    }

    /// Whether nobody has asked for [`IDLE`] by `now`: the controller is
    /// no longer needed.
    pub fn is_idle_at(&self, now: Instant) -> bool {
        now.saturating_duration_since(self.last_ask) >= IDLE
    }

    /// Process `who` reports `tally` at `now` and asks for its share.
    pub fn ask_at(&mut self, who: K, tally: Tally, now: Instant) -> Grant {
        self.last_ask = now;
        let is_new = !self.members.contains_key(&who);
        let fair = self.rate.now / ((self.members.len() + usize::from(is_new)) as f64);
        let member = self.members.entry(who.clone()).or_insert(Member {
            want: 0.0,
            divided: 0.0,
            granted: fair,
            last_ask: now.checked_sub(ASK_EVERY).unwrap_or(now),
        });
        let elapsed = now.saturating_duration_since(member.last_ask).max(ASK_EVERY / 10);
        let seconds = elapsed.as_secs_f64();
        // At most what it could have sent at twice its grant (or the lowest rate).
        let could = (2.0 * member.granted.max(self.policy.min_rate) * seconds).ceil() + 1.0;
        let bounded = |n: u64| (n as f64).min(could);
        let (sent, accepted, overloaded) = (
            bounded(tally.sent),
            bounded(tally.accepted),
            bounded(tally.overloaded),
        );
        let sending = sent / seconds;
        let claimed = sending + tally.waiting as f64 / BACKLOG_HORIZON;
        member.want = claimed.min(2.0 * sending + fair);
        let window_start = member.last_ask;
        member.last_ask = now;

        self.grow(accepted as u32, now);
        self.overloaded(overloaded, bounded(tally.timed_out), window_start, now);
        if self.rate.is_probing() {
            let probers = (self.members.len() as f64).min(PROBERS);
            self.rate.now = self.policy.min_rate * probers;
        }
        self.division.stale = true;
        self.divide(now);
        let want = self.members.get(&who).map_or(0.0, |m| m.want.min(m.divided));
        let rate = if self.rate.is_probing() {
            self.probe_part(&who, fair)
        } else if is_new {
            // Not in the division yet: the floor, until its next ask.
            FLOOR * fair
        } else {
            self.division.part(want, self.rate.now, fair)
        };
        if let Some(member) = self.members.get_mut(&who) {
            member.granted = rate;
        }
        Grant { rate, lease: LEASE }
    }

    /// Slow start, at most doubling per round; CUBIC as the gate's.
    fn grow(&mut self, accepted: u32, now: Instant) {
        if now.saturating_duration_since(self.round.0) >= ROUND {
            self.round = (now, self.rate.now);
        }
        let slow_start = self.rate.is_slow_start() || self.rate.is_probing();
        self.rate.accepted_many(&self.policy, accepted, now);
        if accepted > 0 && slow_start && self.rate.is_slow_start() {
            let base = self.round.1.max(self.policy.min_rate);
            let cap = (2.0 * base).max(base + FIRST_WINDOW / ROUND.as_secs_f64());
            self.rate.now = self.rate.now.min(cap);
        }
    }

    /// Cuts the rate for what a report says was refused or timed out since
    /// `window_start`, once: an attempt sent before the last cut does not
    /// cut again. A refusal's attempt was sent within the window, a
    /// timed-out one its timeout before that.
    fn overloaded(&mut self, overloaded: f64, timed_out: f64, window_start: Instant, now: Instant) {
        if timed_out > 0.0 {
            let sent = self
                .per_try_timeout
                .and_then(|timeout| window_start.checked_sub(timeout))
                .unwrap_or(window_start);
            self.rate.overloaded(&self.policy, sent, now, true);
        }
        if overloaded > timed_out {
            self.rate.overloaded(&self.policy, window_start, now, false);
        }
    }

    /// While probing: the whole probe rate to one process, which keeps probing
    /// while it asks; the floor to the others.
    fn probe_part(&mut self, who: &K, fair: f64) -> f64 {
        let prober_gone = self.prober.as_ref().is_none_or(|p| !self.members.contains_key(p));
        if prober_gone {
            self.prober = Some(who.clone());
        }
        if self.prober.as_ref() == Some(who) {
            self.rate.now
        } else {
            FLOOR * fair
        }
    }

    /// Recomputes the division if it is stale and old enough, forgetting
    /// processes that stopped asking.
    fn divide(&mut self, now: Instant) {
        let old = now.saturating_duration_since(self.division.at) >= DIVIDE_EVERY;
        if !(self.division.stale && (old || self.members.len() <= 1)) {
            return;
        }
        self.members
            .retain(|_, m| now.saturating_duration_since(m.last_ask) < FORGET_AFTER);
        let total = self.rate.now;
        for member in self.members.values_mut() {
            member.divided = member.want;
        }
        let wants = self.members.values().map(|m| m.want);
        let level = share::level(total, wants, &mut self.scratch);
        let wanted: f64 = self.scratch.iter().sum();
        let met = wanted <= total;
        self.division = Division {
            total,
            level,
            scale: if met && wanted > 0.0 { total / wanted } else { 1.0 },
            at: now,
            stale: false,
        };
    }
}

impl Division {
    /// The grant of a process that wants `want`, when the fleet's rate is
    /// `rate` and an equal part of it `fair`: its part of the division,
    /// scaled to the rate as it is now (it may have changed since).
    fn part(&self, want: f64, rate: f64, fair: f64) -> f64 {
        let part = want.min(self.level) * self.scale * (rate / self.total);
        part.max(FLOOR * fair)
    }
}

#[cfg(test)]
mod tests;
