//! Fleet coordination: one controller per dependency, in the daemon, that
//! paces a whole fleet's return to it.
//!
//! A process whose send gate is on asks about every [`ASK_EVERY`] for its
//! share, with its [`Tally`] since its last ask: what it sent, what was
//! accepted and refused, and how many calls wait. Under `overloadWhen:
//! most-refused` a process whose gate only watches asks too, and the law
//! judges from the whole fleet's answers whether the refusals are a
//! capacity's or a share failed at random (`law`, `excess`, `trial`); a
//! grant's `pace` tells a watching gate to turn on. The controller learns one
//! rate for the whole fleet from every process's outcomes, with the gate's
//! own law (probe, slow start, never below what was just accepted), and
//! after a cut probes upward while the fleet wants more than its rate
//! (`law`). It divides the rate among the processes by what each wants
//! ([`share`]), and keeps account of what it has given: the shares it
//! hands out add up to the rate (floors aside), however stale the division
//! they come from. The answer is a [`Grant`]: a rate and a lease. A
//! process paces at its grant until the lease ends, then at its own gate's
//! rate, so a daemon that cannot be reached makes nothing worse than it was
//! without one.
//!
//! What a report claims is bounded by what the process could have sent at
//! twice its grant, and what it wants by twice what it sends plus an equal
//! part: a process cannot take the fleet's share by claiming outcomes or
//! demand it does not have, and max-min division gives a process that
//! claims to want everything no more than an honest one that wants more
//! than its part.
//!
//! Daemon replicas can pace as one through a store they share ([`shared`]):
//! the controller then divides its part of the fleet's rate, and falls
//! back to its own rate law when the store stops answering.
//!
//! A fleet-scoped retry budget's floor is divided here too ([`floor`]).
//!
//! Pure and time-injectable (`_at`), like the gate, so the simulator runs
//! this very code with a feedback delay.

pub mod breaker;
mod excess;
pub mod fair_share;
mod feedback;
pub mod floor;
pub mod handover;
mod law;
pub mod replicas;

use std::collections::BTreeMap;
use std::hash::Hash;
use std::time::Duration;

use tokio::time::Instant;

pub use self::feedback::Feedback;
use self::law::{Law, Learned};
use self::replicas::{Contribution, Demand, Outcomes, Part, Published, Shared, Tallies};
use crate::gate::{Judged, Tally};
use crate::policy::{Criticality, ValidPolicy};

/// How often a process whose gate is on asks for its share.
pub const ASK_EVERY: Duration = Duration::from_millis(100);
/// The longest a process waits for its grant: a later one is stale, and the
/// process asks again at once, pacing by its own gate meanwhile. Across a
/// link whose round trip is longer no grant is heard, and each process's
/// gate paces it alone.
pub const ASK_TIMEOUT: Duration = Duration::from_millis(500);
/// How long a grant lasts nearby: ten asks, so that a few lost ones change
/// nothing. A process across a slower link gets ten of its own asks
/// ([`Feedback::lease`]).
pub const LEASE: Duration = Duration::from_secs(1);
/// How often a replica exchanges with the store it shares its pace through,
/// while it paces a dependency: three quarters of an ask's period. The
/// owner folds what the others left in the store at its own exchange, so a
/// report to another replica waits up to a period there before it counts;
/// at an ask's period, 2 replicas sharing a store recovered the simulator's
/// herd up to 0.4 s behind one daemon (seeds 1-25, request-rate limit, 200
/// processes: 18.37 s against one daemon's 17.94 s; 17.96 s at 75 ms).
/// Shorter still (50 ms) gained little more and sent 2-3 % more attempts
/// that failed.
pub const SHARE_EVERY: Duration = Duration::from_millis(75);
/// A dependency nobody has asked about for this long is healthy again (its
/// processes' gates have turned off): its controller is done, and the next
/// trouble starts a new one.
pub const IDLE: Duration = Duration::from_secs(10);
/// How often the division is recomputed, at most: it sorts every process's want.
const DIVIDE_EVERY: Duration = Duration::from_millis(25);
/// Calls waiting in a process count as wanting to be sent within this long.
const BACKLOG_HORIZON: f64 = 1.0;
/// In slow start, the fleet's rate at most doubles per round (as a TCP
/// window doubles per round trip), or grows by [`FIRST_WINDOW`] turns per
/// round if that is more: outcomes come back a round late (an ask every
/// 100 ms, and the way there and back), and growing faster than they come
/// back overshoots the dependency. The round of a daemon nearby; across a
/// slower link it stretches with the ask interval ([`Feedback::round`]).
const ROUND: Duration = Duration::from_millis(250);
/// Turns a round the rate may grow by however low it is, and the rate the
/// first acceptance after an outage opens: 120 a second with 250 ms
/// rounds. Three times TCP's initial window of ten segments, because
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
/// How many times the median process's line one process's counts for, at
/// most, in the fleet's line.
const LINE_OUTLIER: f64 = 4.0;
/// No process's grant falls below this share of an equal part, so one that
/// wanted nothing at its last ask (or is new) is not stuck at nothing until
/// its next. The grants of a fleet add up to at most its rate plus twice this
/// share of it (floors, and processes new since the last division).
const FLOOR: f64 = 0.1;

/// What a process tells the daemon about one dependency in an ask.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Ask {
    /// Its gate's tally, while the gate asks for a share of the rate.
    pub tally: Option<Tally>,
    /// Its fleet-scoped breaker, while open or with trials to report.
    pub breaker: Option<breaker::BreakerReport>,
}

/// The daemon's grant for an ask whose breaker got `verdict` (if it
/// reported one): a share of the rate from `pace` if the dependency has a
/// gate to pace (`gate`) and the process's gate asks (`gate_asks`) or the
/// fleet's breaker closes it, in which case the grant says `pace`, so that
/// the fleet returns at the daemon's pace rather than at once; else no
/// share ([`Grant::NONE`]).
pub fn answer<E>(
    gate: bool,
    gate_asks: bool,
    verdict: Option<breaker::BreakerVerdict>,
    pace: impl FnOnce() -> Result<Grant, E>,
) -> Result<Grant, E> {
    let closes = verdict.is_some_and(|verdict| verdict.closes());
    if !(gate && (gate_asks || closes)) {
        return Ok(Grant::NONE);
    }
    let mut grant = pace()?;
    grant.pace |= closes;
    Ok(grant)
}

/// A process's share of the fleet's rate.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Grant {
    /// Attempts per second this process may send.
    pub rate: f64,
    /// How long the grant holds.
    pub lease: Duration,
    /// Whether the controller holds the fleet back (the dependency is down,
    /// overloaded or slow, and not judged to fail at random): a process
    /// whose gate only watches turns it on and paces at the grant.
    pub pace: bool,
}

impl Grant {
    /// No share: the answer to an ask for a breaker alone.
    pub const NONE: Grant = Grant {
        rate: 0.0,
        lease: LEASE,
        pace: false,
    };
}

/// The controller of one dependency: see the [module docs](self). `K` names a process.
#[derive(Debug)]
pub struct FleetController<K> {
    policy: ValidPolicy,
    /// The rate learned from this controller's own processes.
    law: Law,
    /// Ordered by name: sums of their wants come out the same, to the last
    /// bit, in every run of the simulator for a seed.
    members: BTreeMap<K, Member>,
    division: Division,
    /// While nothing has been accepted, one process probes for the fleet,
    /// so that probes come evenly at the probe rate, and not at random from
    /// a thousand tiny parts.
    prober: Option<K>,
    last_ask: Instant,
    scratch: Vec<(f64, u32)>,
    /// What the processes' last shares add up to: a share may rise only
    /// into the rate the others do not hold (as Doorman's leases do), so
    /// a fleet's shares add up to its rate, however stale the division
    /// they come from.
    held: f64,
    /// What its processes reported since its last contribution to a
    /// shared pace, and when the newest report with an overload began.
    outbox: (Outcomes, Option<Instant>),
    /// Its part of a shared pace, while the store answers.
    shared: Option<Part>,
    /// The fleet's rate law, while this replica owns the shared pace.
    owner: Option<Law>,
    /// What its last exchange showed: its processes' want and number, and
    /// the other replicas'.
    view: (Demand, Vec<Demand>),
    /// Its processes' feedback loop, as the mean of their ask intervals at
    /// the last division.
    feedback: Feedback,
}

#[derive(Debug, Clone, Copy)]
struct Member {
    /// Attempts per second it wants, as bounded.
    want: f64,
    /// Its last grant, or an equal part until it has one (the bound on
    /// what it may claim to have sent).
    granted: f64,
    /// Its last share of the rate, as counted in what the controller has
    /// given out (floors come on top).
    held: f64,
    last_ask: Instant,
    /// Calls waiting in it at its last ask.
    waiting: u64,
    /// What it counts for in the last division, as its want has changed
    /// since: `min(want, level)`, and whether its want is above the level.
    counted: (f64, bool),
    /// Whether its gate watched at its last ask: off, judging alone that
    /// the dependency answers (its refusals within what chance explains).
    watching: bool,
    /// Its asks' interval: how long it may go unheard, and its lease.
    feedback: Feedback,
    /// The share of its want of each class (in `Criticality::ALL`'s
    /// order), as its last ask that said showed them.
    classes: [f64; 3],
}

/// A want of calls that name no class.
const UNCLASSED: [f64; 3] = [0.0, 1.0, 0.0];

/// The last division of the rate.
#[derive(Debug, Clone, Copy)]
struct Division {
    /// The rate divided.
    total: f64,
    /// Each process gets `min(want, level)`, and a part of the rest
    /// (see [`Division::part`]).
    level: f64,
    /// What the processes divided among wanted, in all.
    wanted: f64,
    /// What they count for at the level, `Σ min(want, level)`, as their
    /// wants have changed since the division: the rate at the level is
    /// `total` less this.
    counted: f64,
    /// How many of them want more than the level: they share what is left.
    above: u32,
    /// While the processes want more than the rate and some want it for
    /// calls of a class other than the default: each class's level, the
    /// rate given to more critical classes first.
    classes: Option<[f64; 3]>,
    /// What each class was given in it.
    given: [f64; 3],
    at: Instant,
    stale: bool,
}

impl<K: Ord + Hash + Clone> FleetController<K> {
    /// A controller for a dependency whose gate `policy` sets, probing.
    pub fn new_at(policy: &ValidPolicy, now: Instant) -> Self {
        Self {
            law: Law::new_at(policy, now),
            policy: policy.clone(),
            members: BTreeMap::new(),
            division: Division {
                total: 1.0,
                level: 0.0,
                wanted: 0.0,
                counted: 0.0,
                above: 0,
                classes: None,
                given: [0.0; 3],
                at: now,
                stale: true,
            },
            prober: None,
            last_ask: now,
            scratch: Vec::new(),
            held: 0.0,
            outbox: (Outcomes::default(), None),
            shared: None,
            owner: None,
            view: (Demand::default(), Vec::new()),
            feedback: Feedback::default(),
        }
    }

    /// Takes up `policy`, a new version of this dependency's, keeping what
    /// the fleet has learned (its rate, judgement and trials, its division
    /// and its part of a shared pace): for a change that
    /// [`GatePolicy::unlearned_by`](crate::policy::GatePolicy::unlearned_by)
    /// finds nothing in. A change it names needs a new controller.
    pub fn retune(&mut self, policy: &ValidPolicy) {
        self.law.retune(policy);
        if let Some(owner) = &mut self.owner {
            owner.retune(policy);
        }
        self.policy = policy.clone();
    }

    /// Its processes' feedback loop, as of the last division.
    pub fn feedback(&self) -> Feedback {
        self.feedback
    }

    /// The rate the whole fleet may send, attempts per second: the shared
    /// one while this controller paces with other replicas.
    pub fn rate(&self) -> f64 {
        self.shared.map_or(self.law.rate(), |part| part.fleet)
    }

    /// What this controller's processes may send in all at `now`, attempts
    /// per second: its part of a shared pace, or the rate it learned alone.
    /// Summed over replicas, the fleet's rate.
    pub fn part_at(&self, now: Instant) -> f64 {
        self.budget_at(now).0
    }

    /// What the last division gave the calls of each class (in
    /// [`Criticality::ALL`](crate::policy::Criticality::ALL)'s order),
    /// attempts per second, scaled to what there is to divide at `now`: a
    /// fleet that wants more than its rate gives it to more critical
    /// classes first.
    pub fn class_rates_at(&self, now: Instant) -> [f64; 3] {
        let division = &self.division;
        let divided: f64 = division.given.iter().sum();
        if divided <= 0.0 {
            return [0.0; 3];
        }
        let scale = self.part_at(now).min(division.total) / divided;
        division.given.map(|given| given * scale)
    }

    /// Processes that asked within the last two seconds.
    pub fn members(&self) -> usize {
        self.members.len()
    }

    /// Of the processes heard from within the last three asks at `now`,
    /// those whose own gate watches (it has heard refusals and judges,
    /// alone, that the dependency answers) and those whose gate is on (it
    /// judges the dependency down or overloaded, or the fleet told it to
    /// pace): what each process believes, beside what the fleet does.
    pub fn gates_at(&self, now: Instant) -> (usize, usize) {
        self.members
            .values()
            .filter(|member| is_active(member, now))
            .fold((0, 0), |(watching, on), member| {
                (
                    watching + usize::from(member.watching),
                    on + usize::from(!member.watching),
                )
            })
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

    /// Whether, at `now`, this controller paces by its part of a shared
    /// pace rather than alone.
    pub fn is_shared_at(&self, now: Instant) -> bool {
        self.shared.is_some_and(|part| now < part.until)
    }

    /// Whether this controller owns the shared pace: it folds every
    /// replica's contributions and publishes the fleet's rate.
    pub fn is_owner(&self) -> bool {
        self.owner.is_some()
    }

    /// What paces the dependency at `now`, as the rate law that sets the
    /// pace believes: the shared pace's, while this replica owns it (it
    /// hears every replica's processes), else this replica's own.
    pub fn judged_at(&mut self, now: Instant) -> Judged {
        match self.owner.as_mut() {
            Some(owner) => owner.judged_at(now),
            None => self.law.judged_at(now),
        }
    }

    /// What there is to divide among this controller's processes at `now`,
    /// and whether it probes: its part of a shared pace, or its own rate.
    fn budget_at(&self, now: Instant) -> (f64, bool) {
        match self.shared {
            Some(part) if now < part.until => (
                part.budget(self.law.rate(), self.law.policy.min_rate),
                part.probing,
            ),
            _ => (self.law.rate(), self.law.is_probing()),
        }
    }

    /// Process `who` reports `tally` at `now` and asks for its share.
    pub fn ask_at(&mut self, who: K, tally: Tally, now: Instant) -> Grant {
        let accepting = self.members.is_empty() || tally.accepted > 0;
        if tally.watching && accepting && self.law.probes_on_hearsay() {
            // A process whose gate watches has seen the dependency accept
            // within three seconds (the first to ask), or does now: it is
            // judged by what the fleet's answers show, not taken for down.
            self.law = Law::answering_at(&self.policy, now);
        }
        self.last_ask = now;
        self.alone_after_lapse(now);
        let is_new = !self.members.contains_key(&who);
        let (budget, _) = self.budget_at(now);
        let fair = budget / ((self.members.len() + usize::from(is_new)) as f64);
        let fleet_fair = self.fleet_fair_at(now);
        let min_rate = self.law.policy.min_rate;
        let member = self.members.entry(who.clone()).or_insert(Member {
            want: 0.0,
            granted: fair,
            held: 0.0,
            last_ask: now.checked_sub(ASK_EVERY).unwrap_or(now),
            waiting: 0,
            counted: (0.0, false),
            classes: UNCLASSED,
            watching: tally.watching,
            feedback: Feedback::default(),
        });
        member.watching = tally.watching;
        let elapsed = now.saturating_duration_since(member.last_ask).max(ASK_EVERY / 10);
        if !is_new {
            // One back after long enough to be forgotten starts afresh: its
            // gate was off meanwhile, its link no slower.
            member.feedback = if elapsed < member.feedback.forget_after() {
                member.feedback.heard_after(elapsed)
            } else {
                Feedback::default()
            };
        }
        let lease = member.feedback.lease();
        let seconds = elapsed.as_secs_f64();
        // At most what it could have sent at twice its grant (or the lowest rate).
        let could = (2.0 * member.granted.max(min_rate) * seconds).ceil() + 1.0;
        let bounded = |n: u64| (n as f64).min(could);
        let outcomes = Outcomes {
            sent: bounded(tally.sent) as u64,
            accepted: bounded(tally.accepted) as u64,
            overloaded: bounded(tally.overloaded) as u64,
            timed_out: bounded(tally.timed_out) as u64,
        };
        // It wants what arrives (what was accepted, and what its line grew
        // by) and its line. Not what it sent: a refused attempt is sent
        // again, and a process that has just sent its last call wants no
        // more. Counting what was sent, a thousand processes of a call or
        // two each drew most of a recovering fleet's rate to processes with
        // nothing left to send.
        let arriving = outcomes
            .accepted
            .saturating_add(tally.shed.iter().fold(0u64, |sum, n| sum.saturating_add(*n)))
            .saturating_add(tally.waiting)
            .saturating_sub(member.waiting) as f64
            / seconds;
        member.waiting = tally.waiting;
        let claimed = arriving + tally.waiting as f64 / BACKLOG_HORIZON;
        // It claims no more than twice what it showed it can send, and a fair share.
        let sending = outcomes.sent as f64 / seconds;
        member.want = claimed.min(2.0 * sending + fair.max(fleet_fair));
        member.classes = class_shares(tally.demand, claimed, member.want);
        let window_start = member.last_ask;
        member.last_ask = now;

        let mut learned = Learned::from_outcomes(outcomes, self.division.wanted);
        // Only the acceptance that ends probing opens to the line: counted
        // at every ask of an outage, it would walk every process each time.
        if self.law.is_probing() && outcomes.accepted > 0 {
            learned.line = self.line();
        }
        self.law.hear_feedback(self.feedback);
        self.law.learn(learned, window_start, now);
        self.law.probe_for(self.members.len() as f64);
        self.post(outcomes, window_start);
        let (budget, probing) = self.budget_at(now);
        self.division.stale = true;
        self.divide(budget, now);
        self.recount(&who);
        let (want, held) = self.members.get(&who).map_or((0.0, 0.0), |m| (m.want, m.held));
        let part = if probing {
            self.probe_part(&who, budget)
        } else if is_new {
            // Not in the division yet: the floor, until its next ask.
            0.0
        } else {
            let classes = self.members.get(&who).map_or(UNCLASSED, |m| m.classes);
            self.division.part(want, classes, budget)
        };
        let unheld = (budget - (self.held - held)).max(held);
        let share = part.min(unheld);
        let rate = share.max(FLOOR * fair);
        if let Some(member) = self.members.get_mut(&who) {
            member.granted = rate;
            member.held = share;
        }
        self.held += share - held;
        Grant {
            // Across a loop too slow to steer, no share: each gate paces
            // by its own rate, as it would without a daemon.
            rate: if self.steers() { rate } else { 0.0 },
            lease,
            pace: self.holds_back_at(now),
        }
    }

    /// Whether its processes' feedback loop is quick enough for the fleet
    /// to steer them: if not, its grants carry no share, and each process's
    /// gate paces by its own rate.
    pub fn steers(&self) -> bool {
        self.feedback.steers()
    }

    /// Calls waiting in its processes' lines, each process counted for at
    /// most four times the median's: one that claims a line it does not have
    /// cannot open the first window past what the others wait with.
    fn line(&mut self) -> f64 {
        self.scratch.clear();
        self.scratch
            .extend(self.members.values().map(|m| (m.waiting as f64, 0)));
        if self.scratch.is_empty() {
            return 0.0;
        }
        let middle = self.scratch.len() / 2;
        let (_, &mut (median, _), _) = self
            .scratch
            .select_nth_unstable_by(middle, |a, b| a.0.total_cmp(&b.0));
        let most = LINE_OUTLIER * median;
        self.members.values().map(|m| (m.waiting as f64).min(most)).sum()
    }

    /// Whether the law that sets the pace holds the fleet back at `now`.
    fn holds_back_at(&mut self, now: Instant) -> bool {
        match self.owner.as_mut() {
            Some(owner) if self.shared.is_some() => owner.holds_back_at(now),
            _ => self.law.holds_back_at(now),
        }
    }

    /// A process's even share of the whole fleet's rate at `now`, over
    /// every replica's processes, while this controller paces by a shared
    /// pace; 0 alone. A process may claim to want this much more than it
    /// sent: bounded by its replica's even share instead, the processes of
    /// a replica that held little of the fleet's rate would want little,
    /// and so be given little, round after round.
    fn fleet_fair_at(&self, now: Instant) -> f64 {
        let Some(part) = self.shared.filter(|part| now < part.until) else {
            return 0.0;
        };
        let (mine, ref others) = self.view;
        let members = others.iter().map(|d| u64::from(d.members)).sum::<u64>() + u64::from(mine.members);
        if members == 0 {
            return 0.0;
        }
        part.fleet / members as f64
    }

    /// Once the last part of a shared pace has lapsed at `now` (the store
    /// went quiet), paces alone, carrying on from that part: what this
    /// replica's processes alone taught its own law lags a recovery the
    /// whole fleet drove, and falling back to it would slow them down.
    fn alone_after_lapse(&mut self, now: Instant) {
        let Some(part) = self.shared.filter(|part| now >= part.until) else {
            return;
        };
        let rate = part
            .budget(self.law.rate(), self.law.policy.min_rate)
            .max(part.rate);
        let last = Published {
            rate,
            probing: part.probing,
            handover: None,
        };
        self.law.carry_on_from(last, now);
        self.shared = None;
        self.division.stale = true;
    }

    /// Forgets the processes not heard from for twenty of their asks, and
    /// counts again what the others hold.
    fn forget_silent(&mut self, now: Instant) {
        self.members
            .retain(|_, m| now.saturating_duration_since(m.last_ask) < m.feedback.forget_after());
        self.held = self
            .members
            .values()
            .filter(|m| is_active(m, now))
            .map(|m| m.held)
            .sum();
    }

    /// Keeps a report's outcomes for the next contribution to a shared pace.
    fn post(&mut self, outcomes: Outcomes, window_start: Instant) {
        let (sum, newest) = &mut self.outbox;
        *sum = sum.plus(outcomes);
        if outcomes.overloaded > 0 {
            *newest = Some(newest.map_or(window_start, |t| t.max(window_start)));
        }
    }

    /// What this replica adds to a shared pace at `now`: what its processes
    /// reported since its last contribution, and what they want.
    pub fn contribute_at(&mut self, now: Instant) -> Contribution {
        let (outcomes, newest) = std::mem::take(&mut self.outbox);
        self.forget_silent(now);
        Contribution {
            tallies: Tallies {
                outcomes,
                overloaded_since: newest.map(|t| now.saturating_duration_since(t)),
            },
            demand: self.demand(),
        }
    }

    /// What this replica's processes want, in all and by class.
    fn demand(&self) -> Demand {
        let mut classes = [0.0; 3];
        for member in self.members.values() {
            for (rank, want) in classes.iter_mut().enumerate() {
                *want += member.want * member.classes[rank];
            }
        }
        Demand {
            want: self.members.values().map(|m| m.want).sum(),
            members: u32::try_from(self.members.len()).unwrap_or(u32::MAX),
            classes: Some(classes),
        }
    }

    /// Takes back `mine`, a contribution made at `now` that surely never
    /// reached the store (the call was refused, or never sent): its
    /// outcomes go with the next one instead of being lost.
    pub fn unsent_at(&mut self, mine: &Contribution, now: Instant) {
        let tallies = mine.tallies;
        let window_start = tallies
            .overloaded_since
            .and_then(|age| now.checked_sub(age))
            .unwrap_or(now);
        self.post(tallies.outcomes, window_start);
    }

    /// The store's answer, at `now`, to the contribution `mine`: this
    /// replica paces by its part of the fleet's rate for a [`LEASE`]. If it
    /// owns the pace, it first folds everyone's contributions into the
    /// fleet's law, and returns the rate to publish.
    pub fn shared_at(&mut self, mine: &Contribution, shared: &Shared, now: Instant) -> Option<Published> {
        let fresh = shared
            .published
            .filter(|(_, age)| *age < LEASE)
            .map(|(published, _)| published);
        let publish = match shared.taken {
            Some(taken) => {
                let members: f64 = shared.others.iter().map(|d| f64::from(d.members)).sum();
                let members = members + f64::from(mine.demand.members);
                // The other replicas' lines are not in the store: theirs
                // are taken to be as long as this one's, process for process.
                let probing = self.owner.as_ref().is_none_or(Law::is_probing);
                let opens = probing && taken.outcomes.accepted > 0;
                let line = if opens && mine.demand.members > 0 {
                    self.line() * members / f64::from(mine.demand.members)
                } else {
                    0.0
                };
                let policy = &self.policy;
                let calm = self.law.is_calm();
                let law = self.owner.get_or_insert_with(|| match shared.published {
                    // What the last owner learned goes on here.
                    Some((
                        Published {
                            handover: Some(handover),
                            ..
                        },
                        age,
                    )) if handover.checked().is_ok() => Law::taken_up(policy, &handover, age, now),
                    Some((published, _)) => Law::resumed_at(policy, published, now),
                    // The fleet's law starts as this replica's did: calm if
                    // its processes saw the dependency accept and refuse.
                    None if calm => Law::answering_at(policy, now),
                    None => Law::new_at(policy, now),
                });
                let outcomes = taken.outcomes;
                let window_start = taken
                    .overloaded_since
                    .and_then(|age| now.checked_sub(age))
                    .unwrap_or(now);
                let demand = shared.others.iter().map(|d| d.want).sum::<f64>() + mine.demand.want;
                law.hear_feedback(self.feedback);
                let learned = Learned {
                    line,
                    ..Learned::from_outcomes(outcomes, demand)
                };
                law.learn(learned, window_start, now);
                law.probe_for(members);
                Some(law.published_at(now))
            }
            None => {
                self.owner = None;
                None
            }
        };
        self.view = (mine.demand, shared.others.clone());
        self.catch_up(shared, now);
        if let Some(fleet) = publish.or(fresh) {
            self.take_part(fleet, now);
        }
        publish
    }

    /// A replica whose own law still probes (it has just started, or its
    /// processes have not yet seen the dependency accept) while the shared
    /// pace is past probing takes up what the fleet's law learned: its own
    /// law sets what it adds to its part between exchanges, and whether its
    /// processes are held back; a slow start from nothing there would send
    /// its processes past the fleet's pace (a restart during a brownout),
    /// and a law that has heard nothing would not know the brownout.
    fn catch_up(&mut self, shared: &Shared, now: Instant) {
        if !self.law.is_probing() {
            return;
        }
        if let Some((
            Published {
                handover: Some(handover),
                probing: false,
                ..
            },
            age,
        )) = shared.published
        {
            if handover.checked().is_ok() && age < LEASE {
                self.law = Law::taken_up(&self.policy, &handover, age, now);
                self.law.hear_feedback(self.feedback);
            }
        }
    }

    /// The owner published `fleet` (the store pushes it to every replica
    /// as it arrives): this replica's part of it, by the demand its last
    /// exchange showed.
    pub fn published_at(&mut self, fleet: Published, now: Instant) {
        if !self.is_owner() {
            self.take_part(fleet, now);
        }
    }

    fn take_part(&mut self, fleet: Published, now: Instant) {
        let (mine, ref others) = self.view;
        // A replica whose processes want next to nothing still gives its
        // new ones a floor of something.
        let rate = replicas::part_of(fleet, mine, others, &mut self.scratch).max(self.law.policy.min_rate);
        self.shared = Some(Part {
            fleet: fleet.rate,
            rate,
            probing: fleet.probing,
            own: self.law.rate(),
            until: now + LEASE,
        });
        self.division.stale = true;
    }

    /// While probing: the whole probe rate (`budget`) to one process, which
    /// keeps probing while it asks; nothing but the floor to the others.
    fn probe_part(&mut self, who: &K, budget: f64) -> f64 {
        let prober_gone = self.prober.as_ref().is_none_or(|p| !self.members.contains_key(p));
        if prober_gone {
            self.prober = Some(who.clone());
        }
        if self.prober.as_ref() == Some(who) {
            budget
        } else {
            0.0
        }
    }

    /// Recomputes the division of `total` if it is stale and old enough,
    /// forgetting processes that stopped asking.
    fn divide(&mut self, total: f64, now: Instant) {
        let old = now.saturating_duration_since(self.division.at) >= DIVIDE_EVERY;
        if !(self.division.stale && (old || self.members.len() <= 1)) {
            return;
        }
        self.forget_silent(now);
        let wants = self
            .members
            .values()
            .filter(|m| is_active(m, now))
            .map(|m| m.want);
        let level = fair_share::level(total, wants, &mut self.scratch);
        let wanted: f64 = self.scratch.iter().map(|&(want, _)| want).sum();
        self.feedback = mean_feedback(
            self.members
                .values()
                .filter(|m| is_active(m, now) && m.feedback.is_settled()),
        );
        let (mut counted, mut above) = (0.0, 0);
        for member in self.members.values_mut() {
            member.counted = if is_active(member, now) {
                (member.want.min(level), member.want > level)
            } else {
                (0.0, false)
            };
            counted += member.counted.0;
            above += u32::from(member.counted.1);
        }
        let classed = self
            .members
            .values()
            .any(|m| is_active(m, now) && m.classes != UNCLASSED);
        let classes = (classed && wanted > total).then(|| self.class_levels(total, now));
        let mut given = [0.0; 3];
        for member in self.members.values().filter(|m| is_active(m, now)) {
            for (rank, part) in given.iter_mut().enumerate() {
                let share = member.want * member.classes[rank];
                *part += match classes {
                    Some(levels) => share.min(levels[rank]),
                    None => member.counted.0 * member.classes[rank],
                };
            }
        }
        self.division = Division {
            total,
            level,
            wanted,
            counted,
            above,
            classes,
            given,
            at: now,
            stale: false,
        };
    }

    /// Each class's level when `total` is divided among the classes first,
    /// the most critical first (each takes what its processes want of it,
    /// up to what is left), then among the processes within each class.
    fn class_levels(&mut self, total: f64, now: Instant) -> [f64; 3] {
        let mut left = total;
        let mut levels = [0.0; 3];
        for (rank, level) in levels.iter_mut().enumerate() {
            let wants = self
                .members
                .values()
                .filter(|m| is_active(m, now))
                .map(|m| m.want * m.classes[rank]);
            *level = fair_share::level(left, wants, &mut self.scratch);
            let given: f64 = self.scratch.iter().map(|&(want, _)| want.min(*level)).sum();
            left = (left - given).max(0.0);
        }
        levels
    }

    /// Counts `who`'s want as it is now in the last division. Between
    /// divisions the lines of a fleet whose asks fall on one beat shrink
    /// at each ask, and a level set from the wants of the ask before would
    /// leave what they no longer want undivided until the next division:
    /// up to 15 % of the rate, in the simulator's herd of 50 processes.
    fn recount(&mut self, who: &K) {
        let Some(member) = self.members.get_mut(who) else {
            return;
        };
        let division = &mut self.division;
        let (was, was_above) = member.counted;
        let counted = (member.want.min(division.level), member.want > division.level);
        division.counted += counted.0 - was;
        division.above = (division.above + u32::from(counted.1)).saturating_sub(u32::from(was_above));
        member.counted = counted;
    }
}

/// The share of a process's `want` (its `claimed` rate, bounded) that is
/// each class's: what it claims is split by its demand's classes, and what
/// it may want goes to the more critical classes' claims first, so that a
/// process whose few critical calls are among many others wants the rate
/// for them before any other's. Every call of the default class, or no
/// demand said (a process that names no class sends none): the default's.
fn class_shares(demand: [f64; 3], claimed: f64, want: f64) -> [f64; 3] {
    let total: f64 = demand.iter().sum();
    let classed = demand[0] > 0.0 || demand[2] > 0.0;
    if !(classed && total > 0.0 && claimed > 0.0 && want > 0.0) {
        return UNCLASSED;
    }
    let mut left = want;
    let mut shares = demand.map(|count| {
        let part = (claimed * count / total).min(left);
        left -= part;
        part / want
    });
    // What the claims leave of the want (it may claim less than it showed
    // it can send) is the default class's.
    shares[Criticality::Default.rank()] += left / want;
    shares
}

/// Whether `member` was heard from within three of its asks: a process not
/// heard from for longer has turned its gate off (its callers are served)
/// or lost the daemon, and neither its want nor its grant counts in the
/// division, though it is known until twenty.
fn is_active(member: &Member, now: Instant) -> bool {
    now.saturating_duration_since(member.last_ask) < member.feedback.silent_after()
}

/// The feedback loop of `members` (those whose measure has settled): the
/// mean of their ask intervals, or a daemon nearby's if there are none.
fn mean_feedback<'a>(members: impl Iterator<Item = &'a Member>) -> Feedback {
    let (sum, count) = members.fold((Duration::ZERO, 0u32), |(sum, count), m| {
        (sum + m.feedback.interval(), count + 1)
    });
    match count {
        0 => Feedback::default(),
        n => Feedback::of_interval(sum / n),
    }
}

impl Division {
    /// The part of a process that wants `want`, when the fleet's rate is
    /// `rate`: its part of the division, scaled to the rate as it is now
    /// (it may have changed since). The division's level is moved by what
    /// the wants counted at it have become since, one step of the
    /// water-filling, exact while no want crosses the level: when everyone's
    /// want was met, the rest is shared in proportion to the wants as they
    /// are; when not, those above the level share what the others do not
    /// count for.
    ///
    /// While the processes want more than the rate and classes divide it,
    /// its part is what it wants of each class up to that class's level.
    fn part(&self, want: f64, classes: [f64; 3], rate: f64) -> f64 {
        if let Some(levels) = self.classes {
            let divided: f64 = (0..3).map(|rank| (want * classes[rank]).min(levels[rank])).sum();
            return divided * (rate / self.total);
        }
        let at_level = want.min(self.level);
        let divided = if self.wanted <= self.total {
            if self.counted > 0.0 {
                at_level * self.total / self.counted
            } else {
                at_level
            }
        } else if want > self.level && self.above > 0 {
            let left = self.total - self.counted;
            (self.level + left / f64::from(self.above)).max(0.0)
        } else {
            at_level
        };
        divided * (rate / self.total)
    }
}

#[cfg(test)]
mod tests;
