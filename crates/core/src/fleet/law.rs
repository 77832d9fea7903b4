//! The fleet's rate law: the gate's (probe, slow start, CUBIC, never below
//! what was just accepted), fed with the outcomes many processes report
//! rather than one process's own. Under `overloadWhen: most-refused` it
//! also judges what the refusals are: calm (pacing nobody) while they stay
//! within what failure at random explains ([`Excess`]), paced as for a
//! capacity once they go beyond, and calm again when its cuts leave them
//! at the same share ([`Trials`]). A controller runs it over its own
//! processes; the replica that owns a dependency's shared pace runs a
//! second one over every replica's.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use super::excess::Excess;
use super::feedback::Feedback;
use super::handover::{sound, Handover, Refused, Restored, Taken, HANDOVER_VERSION};
use super::replicas::Published;
use super::{FIRST_WINDOW, PROBERS, ROUND};
use crate::gate::rate::{Rate, RateHandover};
use crate::gate::trial::{Finding, Trials, TrialsHandover};
use crate::gate::Judged;
use crate::policy::{GatePolicy, ValidPolicy};

/// What a law learns from at once: outcomes since the last time, and the
/// demand now.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Learned {
    pub(super) accepted: u32,
    pub(super) overloaded: f64,
    pub(super) timed_out: f64,
    /// Attempts per second the fleet wants.
    pub(super) demand: f64,
    /// Calls waiting in the fleet's lines (while it probes: what the first
    /// acceptance opens to).
    pub(super) line: f64,
}

impl Learned {
    /// `outcomes`, while the fleet wants `demand`.
    pub(super) fn from_outcomes(outcomes: super::Outcomes, demand: f64) -> Self {
        Self {
            accepted: u32::try_from(outcomes.accepted).unwrap_or(u32::MAX),
            overloaded: outcomes.overloaded as f64,
            timed_out: outcomes.timed_out as f64,
            demand,
            line: 0.0,
        }
    }
}

/// The rate law and what it has learned.
#[derive(Debug)]
pub(super) struct Law {
    pub(super) policy: GatePolicy,
    /// The attempts' own timeout: a timed-out attempt was sent this long
    /// before its report.
    per_try_timeout: Option<Duration>,
    pub(super) rate: Rate,
    /// The slow-start round: when it began, and the rate then.
    round: (Instant, f64),
    /// When the rate last probed above what was delivered.
    probed: Instant,
    /// Probes refused in a row: each doubles the wait before the next.
    refused_probes: u32,
    /// Whether the last probe's refusal or room is still to be seen.
    probe_pending: bool,
    /// Under `most-refused`, what cuts do to the refusals: a capacity's or
    /// a share failed at random.
    trials: Trials,
    /// Under `most-refused`, while the dependency is judged to fail a share
    /// at random: whether its refusals go beyond that share.
    excess: Excess,
    /// Whether the fleet's refusals have been judged a capacity's: a law
    /// that probes since then does so because of them.
    judged_capacity: bool,
    /// While cuts follow one another, what the dependency delivered at the
    /// first: the rate the refusals began at.
    refused_from: Option<f64>,
    /// Once refusals that cut the rate below `beta` times what was
    /// delivered when they began have stopped, the rate the law doubles
    /// back to, a round at a time: as TCP slow-starts back to half its
    /// window after a timeout.
    regrow_to: Option<f64>,
    /// How long its processes' feedback takes: its rounds and waits are
    /// sized from it.
    feedback: Feedback,
    /// Whether the dependency has refused everything for a second after
    /// accepting: a limit that counts the requests it refuses (HAProxy's,
    /// as usually set) refuses a whole burst that way, not just its
    /// excess, until the sender slows. Against it the law probes on the
    /// last second's delivery alone, and so crosses the limit seldom.
    refuses_bursts: bool,
}

/// A [`Law`] as a handover carries it: its times as nanoseconds before the
/// handover. Its processes' feedback loop is not in it: the controller
/// that takes it up measures its own.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub(super) struct LawHandover {
    rate: RateHandover,
    round_ns: u64,
    round_rate: f64,
    probed_ns: u64,
    refused_probes: u32,
    probe_pending: bool,
    trials: TrialsHandover,
    evidence: f64,
    judged_capacity: bool,
    refused_from: Option<f64>,
    regrow_to: Option<f64>,
    refuses_bursts: bool,
}

impl LawHandover {
    /// Whether its numbers could have come from a law.
    pub(super) fn check(&self) -> Result<(), Refused> {
        self.rate.check()?;
        self.trials.check()?;
        sound(self.round_rate, "round's rate")?;
        sound(self.evidence, "evidence")?;
        sound(self.refused_from.unwrap_or(0.0), "rate the refusals began at")?;
        sound(self.regrow_to.unwrap_or(0.0), "rate to regrow to")
    }
}

/// How far past what the dependency delivers the fleet's rate probes, per
/// round, while the fleet wants more than its rate: BBR's probing gain.
pub(super) const PROBE_GAIN: f64 = 1.25;
/// The first probe after a cut goes only this far past what was delivered:
/// at a dependency that is full (a brownout that lasts), a refused probe
/// costs a tenth of a second's worth, and one that finds room is followed
/// by probes at [`PROBE_GAIN`].
const FIRST_PROBE_GAIN: f64 = 1.1;
/// The share of the fleet's line, per second, the first acceptance after
/// an outage opens to when that is more than [`FIRST_WINDOW`] turns a
/// round: the 120 a second tuned for the simulator's herd of 1,000
/// callers, and 12,000 for 100,000 callers at 20,000 a second, where
/// [`FIRST_WINDOW`] alone left the herd 2.2 s behind the even-sender limit
/// (seeds 101-103; 0.1 s with the line's share, at every capacity from 10
/// to 20,000 a second on a quota).
const LINE_SHARE: f64 = 0.12;
/// Rounds within which cuts are one episode of refusals, whose first says
/// what the dependency delivered before it refused: 500 ms nearby.
const EPISODE_ROUNDS: u32 = 2;
/// A cut this soon after a probe was the probe's refusal: the dependency
/// had no room. A second and four rounds (2 s nearby): a dependency that
/// limits by the second may take a probe's extra attempts until its second
/// is full, and the reports of the refusals arrive a round or two after
/// that.
const REFUSED_WITHIN: Duration = Duration::from_secs(1);
const REFUSED_WITHIN_ROUNDS: u32 = 4;
/// Under `most-refused`, the share of a second's answers refused that ends
/// slow start: past what a dependency failing a share at random after an
/// outage is likely to refuse (the tenths seen in the field), short of
/// the half a doubling rate meets once past a capacity.
const SLOW_START_SHARE: f64 = 0.25;
/// A law that has probed this long without an acceptance (a second, or
/// four rounds if that is longer) found its dependency down, rather than
/// short of capacity.
const DOWN_FOR: Duration = Duration::from_secs(1);
const DOWN_FOR_ROUNDS: u32 = 4;
/// After a refused probe, the next waits this many rounds after the cut (2 s
/// nearby), as BBR probes one round in eight once it has found the
/// bottleneck, so that a fleet at capacity is not refused every other round.
/// It doubles for each probe refused in a row before, up to four times (a
/// brownout that lasts is probed every 8 s nearby).
const PROBE_AGAIN_ROUNDS: u32 = 8;

impl Law {
    /// Probing, under the gate `policy` sets.
    pub(super) fn new_at(policy: &ValidPolicy, now: Instant) -> Self {
        Self {
            rate: Rate::probing_for_fleet(&policy.gate, now),
            policy: policy.gate.clone(),
            per_try_timeout: policy.per_try_timeout,
            round: (now, 0.0),
            probed: now,
            refused_probes: 0,
            probe_pending: false,
            trials: Trials::default(),
            excess: Excess::default(),
            judged_capacity: false,
            refused_from: None,
            regrow_to: None,
            feedback: Feedback::default(),
            refuses_bursts: false,
        }
    }

    /// Takes up `policy`'s settings from now on, keeping what the law has
    /// learned: the policy changed in what shapes the rate's next steps
    /// (see [`GatePolicy::unlearned_by`](crate::policy::GatePolicy::unlearned_by)),
    /// and the rate stays within its new bounds.
    pub(super) fn retune(&mut self, policy: &ValidPolicy) {
        self.policy = policy.gate.clone();
        self.per_try_timeout = policy.per_try_timeout;
        self.rate.now = self.rate.now.clamp(self.policy.min_rate, self.policy.max_rate);
    }

    /// What the law has learned, handed over at `now`.
    pub(super) fn handover_at(&self, now: Instant) -> Handover {
        let taken = Taken { at: now };
        Handover {
            version: HANDOVER_VERSION,
            law: LawHandover {
                rate: self.rate.handed(taken),
                round_ns: taken.age(self.round.0),
                round_rate: self.round.1,
                probed_ns: taken.age(self.probed),
                refused_probes: self.refused_probes,
                probe_pending: self.probe_pending,
                trials: self.trials.handed(taken),
                evidence: self.excess.evidence(),
                judged_capacity: self.judged_capacity,
                refused_from: self.refused_from,
                regrow_to: self.regrow_to,
                refuses_bursts: self.refuses_bursts,
            },
        }
    }

    /// The law `handover` carries, handed over `age` before `now`, under
    /// `policy` (a checked handover: see [`Handover::checked`]).
    pub(super) fn taken_up(policy: &ValidPolicy, handover: &Handover, age: Duration, now: Instant) -> Self {
        let restored = Restored::new(now, age);
        let law = &handover.law;
        let base = Self::new_at(policy, now);
        Self {
            rate: Rate::taken_up(&policy.gate, &law.rate, restored),
            round: (restored.back_ns(law.round_ns), law.round_rate),
            probed: restored.back_ns(law.probed_ns),
            refused_probes: law.refused_probes,
            probe_pending: law.probe_pending,
            trials: Trials::taken_up(&law.trials, restored),
            excess: Excess::with_evidence(law.evidence),
            judged_capacity: law.judged_capacity,
            refused_from: law.refused_from,
            regrow_to: law.regrow_to,
            refuses_bursts: law.refuses_bursts,
            ..base
        }
    }

    /// Its processes' feedback now takes `feedback`: the law's rounds and
    /// waits follow.
    pub(super) fn hear_feedback(&mut self, feedback: Feedback) {
        self.feedback = feedback;
    }

    fn round(&self) -> Duration {
        self.feedback.round()
    }

    /// Under `most-refused`, for processes that see the dependency accept
    /// and refuse (their gates watch): judged to fail up to a half at
    /// random, pacing nobody, until a second's answers show overload.
    pub(super) fn answering_at(policy: &ValidPolicy, now: Instant) -> Self {
        let mut law = Self::new_at(policy, now);
        law.rate = Rate::answering_for_fleet(&law.policy, now);
        law
    }

    /// Whether the law probes only because the first processes to ask had
    /// turned their gates on (each judging the dependency down on what it
    /// alone heard), not because the fleet's refusals were judged a
    /// capacity's: a watching gate's report of acceptances then shows the
    /// dependency answering, and the law is judged again from the fleet's.
    pub(super) fn probes_on_hearsay(&self) -> bool {
        self.rate.is_probing() && !self.judged_capacity && self.judges_by_share()
    }

    /// Whether the law judges the dependency to fail a share at random,
    /// and paces nobody for it.
    pub(super) fn is_calm(&self) -> bool {
        self.rate.is_answering()
    }

    /// Whether the law tells a capacity from failure at random.
    fn judges_by_share(&self) -> bool {
        self.policy.overload_when.weighs_refusals()
    }

    /// Whether the law holds the fleet back at `now`: it takes the
    /// dependency's refusals for a capacity's, not for failure at random,
    /// and judges it down, overloaded or slow. A process whose gate only
    /// watches is then told to pace: left off, it would send past the pace,
    /// be refused, and cut it.
    pub(super) fn holds_back_at(&mut self, now: Instant) -> bool {
        !self.is_calm() && self.rate.judged_at(now).judgement.holds_back()
    }

    /// Carries on from a rate another replica published: probing if it
    /// was, else holding at it and regrowing along CUBIC's curve.
    pub(super) fn resumed_at(policy: &ValidPolicy, published: Published, now: Instant) -> Self {
        let mut law = Self::new_at(policy, now);
        if !published.probing {
            law.rate = Rate::resumed_for_fleet(&law.policy, published.rate, now);
            law.round = (now, law.rate.now);
        }
        law
    }

    /// Carries on alone at `now` from `last`, this replica's last part of
    /// a shared pace: in the phase this law was in, never below the part (a
    /// slow-start round begins at it).
    pub(super) fn carry_on_from(&mut self, last: Published, now: Instant) {
        self.rate
            .carry_on_from(&self.policy, last.rate, last.probing, now);
        if self.rate.is_slow_start() {
            self.round = (now, self.rate.now);
        }
        // Probes this law made while its processes sent by the shared pace
        // measured that pace, not this rate.
        self.refused_probes = 0;
        self.probe_pending = false;
    }

    /// Attempts per second now.
    pub(super) fn rate(&self) -> f64 {
        self.rate.now
    }

    /// Whether nothing has been accepted yet.
    pub(super) fn is_probing(&self) -> bool {
        self.rate.is_probing()
    }

    /// What the law believes of the dependency at `now`.
    pub(super) fn judged_at(&mut self, now: Instant) -> Judged {
        self.rate.judged_at(now)
    }

    /// What the rate is to publish at `now` for the other replicas, with
    /// what the law has learned for the next owner.
    pub(super) fn published_at(&self, now: Instant) -> Published {
        Published {
            rate: self.rate.now,
            probing: self.rate.is_probing(),
            handover: Some(self.handover_at(now)),
        }
    }

    /// Outcomes reported at `now`, of attempts sent since `window_start`,
    /// while the fleet wants `demand` attempts a second: `accepted` grow the
    /// rate; `overloaded` (of which `timed_out`) cut it.
    ///
    /// Overloads reported while the law probes were of probes, sent while
    /// nothing got through: they neither cut the rate nor, reported beside
    /// the first accepted attempts, end the slow start those begin.
    pub(super) fn learn(&mut self, outcomes: Learned, window_start: Instant, now: Instant) {
        let probing = self.rate.is_probing();
        let last_cut = self.rate.last_cut();
        self.grow(outcomes.accepted, outcomes.line, now);
        let by_share = self.judges_by_share() && !probing;
        if by_share {
            self.judge(outcomes, window_start, now);
        }
        if !probing {
            self.overloaded(outcomes.overloaded, outcomes.timed_out, window_start, now);
            self.refuses_bursts = self.refuses_bursts || self.rate.refused_all_last_second_at(now);
        }
        let cut = self.rate.last_cut() > last_cut;
        if cut {
            self.regrow_to = None;
            let new_episode = now.saturating_duration_since(last_cut) >= self.round() * EPISODE_ROUNDS;
            if new_episode || self.refused_from.is_none() {
                self.refused_from = Some(self.rate.delivered_at(now));
            }
        }
        if by_share && cut && !self.rate.is_answering() && !self.rate.is_slow() {
            let share = self.rate.refused_share_last_second(now);
            self.trials.cut(share, now);
        }
        if !self.trials.holds_at(now) {
            self.probe_up(outcomes.demand, now);
        }
    }

    /// Under `most-refused`: while the dependency is judged to fail a share
    /// at random, whether its refusals have gone beyond it (then they are a
    /// capacity's: cut to what it delivers); while paced for a capacity,
    /// what the cuts did to the refusals (if they kept their share, they
    /// are random).
    fn judge(&mut self, outcomes: Learned, window_start: Instant, now: Instant) {
        let refused = outcomes.overloaded - outcomes.timed_out;
        let accepted = f64::from(outcomes.accepted);
        if self.rate.is_answering() {
            if self.excess.weigh(accepted, refused, self.rate.random_share()) {
                let share = self.rate.refused_share_last_second(now);
                self.rate.capacity_verdict(&self.policy, now);
                self.judged_capacity = true;
                self.trials.reset();
                self.trials.cut(share, now);
            }
            return;
        }
        if let Some(Finding::Random(share)) = self.trials.answered(accepted, refused, window_start) {
            self.rate.random_verdict(&self.policy, share, now);
            self.excess.reset();
        }
    }

    /// After a refusal's cut, CUBIC would hold the rate for k seconds
    /// (about 5 s at 160 a second under the default policy: its constant
    /// is sized for windows of packets) while callers wait. A fleet that
    /// wants more than its rate instead probes, a round after the cut (once
    /// the end of slow start has settled, and [`PROBE_AGAIN_ROUNDS`] after
    /// a cut that refused a probe) and each round after that: to [`PROBE_GAIN`]
    /// times what was delivered over the last second if the last probe drew
    /// no refusal (it found room), else [`FIRST_PROBE_GAIN`] times: BBR's
    /// probe, a gain over the delivery rate. Never a gain over the rate
    /// itself: while the fleet sends less than its rate, a higher one
    /// proves nothing of the dependency, and the fleet may later send it
    /// all at once. A dependency that takes a probe answers with more
    /// delivered; one that does not refuses, which cuts back to what it
    /// delivered. Not after timeouts: a slow dependency regrows as CUBIC
    /// and its delivery rate allow. Refusals that cut far below what the
    /// dependency delivered are first regrown from.
    fn probe_up(&mut self, demand: f64, now: Instant) {
        if self.regrow(demand, now) {
            return;
        }
        self.settle_probe(now);
        let round = self.round();
        let rate = &mut self.rate;
        let last_cut = rate.last_cut();
        let wait = match self.refused_probes {
            0 => round,
            n => (round * PROBE_AGAIN_ROUNDS).saturating_mul(1 << (n - 1).min(2)),
        };
        let due = now.saturating_duration_since(self.probed) >= round
            && now.saturating_duration_since(last_cut) >= wait;
        if !rate.is_after_cut() || rate.is_slow() || rate.is_settling_at(now) || !due || demand <= rate.now {
            return;
        }
        let found_room = last_cut < self.probed;
        // After a probe that found room, what the last round delivered
        // too, up to the rate: the last second's count still holds the rate
        // before that probe, and a gain over it alone grew the rate by a
        // twentieth a round (two replicas pacing apart, the one left with
        // the smaller part took seconds to take up what the other no
        // longer wanted). Not against a limit that refuses whole bursts:
        // each crossing costs a second of refusals, and the slower climb
        // crosses less often.
        let delivered = if found_room && !self.refuses_bursts {
            let lately = rate.delivered_lately_at(now, round).min(rate.now);
            rate.delivered_at(now).max(lately)
        } else {
            rate.delivered_at(now)
        };
        let gain = if found_room { PROBE_GAIN } else { FIRST_PROBE_GAIN };
        let target = (gain * delivered).min(demand).min(self.policy.max_rate);
        if target > rate.now {
            rate.now = target;
            self.probed = now;
            self.probe_pending = true;
        }
    }

    /// What the last probe found, once it is known: refused if a cut came
    /// within [`REFUSED_WITHIN`] and [`REFUSED_WITHIN_ROUNDS`] of it, room
    /// if none did.
    fn settle_probe(&mut self, now: Instant) {
        if !self.probe_pending {
            return;
        }
        let last_cut = self.rate.last_cut();
        let within = REFUSED_WITHIN + self.round() * REFUSED_WITHIN_ROUNDS;
        if last_cut > self.probed {
            let refused = last_cut.saturating_duration_since(self.probed) < within;
            self.refused_probes = if refused { self.refused_probes + 1 } else { 0 };
            self.probe_pending = false;
        } else if now.saturating_duration_since(self.probed) >= within {
            self.refused_probes = 0;
            self.probe_pending = false;
        }
    }

    /// `members` processes are paced: while nothing gets through they probe
    /// as at most [`PROBERS`] would (never past `maxRate`), and no cut takes
    /// the rate below that.
    /// A cut to what was delivered, just as the first attempts get through,
    /// would otherwise leave the fleet slower than while it probed.
    pub(super) fn probe_for(&mut self, members: f64) {
        let probe = (self.policy.min_rate * members.min(PROBERS)).min(self.policy.max_rate);
        if self.rate.is_probing() {
            self.rate.now = probe;
        } else {
            self.rate.now = self.rate.now.max(probe);
        }
    }

    /// Slow start, at most doubling per round; CUBIC as the gate's. The
    /// first acceptance after an outage opens to [`FIRST_WINDOW`] turns a
    /// round, or [`LINE_SHARE`] of the fleet's `line` a second if that is
    /// more.
    fn grow(&mut self, accepted: u32, line: f64, now: Instant) {
        let round = self.round();
        if now.saturating_duration_since(self.round.0) >= round {
            self.round = (now, self.rate.now);
        }
        let slow_start = self.rate.is_slow_start() || self.rate.is_probing();
        let probing = self.rate.is_probing();
        let down_for = DOWN_FOR.max(round * DOWN_FOR_ROUNDS);
        let down = now.saturating_duration_since(self.rate.last_cut()) >= down_for;
        self.rate.accepted_many(&self.policy, accepted, now);
        if probing && down && accepted > 0 {
            // The first acceptance after an outage opens the first window,
            // as TCP starts from its initial window rather than from one
            // segment: grown from the probes' rate by what was accepted,
            // the fleet took a second to reach a capacity of 200 a second.
            // Not for a dependency that accepted within a second of the
            // first refusal (a brownout's): what it delivers says more.
            // Outcomes learned together (a shared pace's) grow it as they
            // would one ask at a time. A line of callers too long for that
            // opens to a share of it: the first window follows the scale of
            // what waits.
            let window = (FIRST_WINDOW / ROUND.as_secs_f64()).max(LINE_SHARE * line);
            let first = window + self.policy.ramp * f64::from(accepted - 1);
            self.rate.now = self.rate.now.max(first.min(self.policy.max_rate));
            self.round = (now, self.rate.now);
        }
        if accepted > 0 && slow_start && self.rate.is_slow_start() {
            let base = self.round.1.max(self.policy.min_rate);
            let cap = (2.0 * base).max(base + FIRST_WINDOW / ROUND.as_secs_f64());
            self.rate.now = self.rate.now.min(cap);
        }
    }

    /// Once refusals have stopped for a round, doubles the rate each round
    /// back to [`regrow_to`](Self) if they cut it far below what was
    /// delivered when they began: a limit that counts the requests it
    /// refuses (HAProxy's, as usually set) refuses everything while the
    /// burst that cut the rate is in its window, and the cuts that follow
    /// go down with what it delivers, far below its limit.
    /// Returns whether the law is regrowing.
    fn regrow(&mut self, demand: f64, now: Instant) -> bool {
        let round = self.round();
        let quiet = now.saturating_duration_since(self.rate.last_cut()) >= round;
        let target = self.refused_from.map(|from| self.policy.beta * from);
        if let (true, Some(target)) = (quiet, target) {
            if self.rate.now < target {
                self.regrow_to = Some(target);
                self.refused_from = None;
            }
        }
        let Some(target) = self.regrow_to else {
            return false;
        };
        if self.rate.now >= target || self.rate.is_slow() {
            self.regrow_to = None;
            return false;
        }
        if now.saturating_duration_since(self.probed) >= round && demand > self.rate.now {
            self.rate.now = (2.0 * self.rate.now).min(target).min(demand);
            self.probed = now;
        }
        true
    }

    /// Under `most-refused`, whether slow start goes on past a refusal at
    /// `now`: while the last second's refusals are within what
    /// [`SLOW_START_SHARE`] refused at random explains, beyond chance. A
    /// dependency back from an outage that fails a share at random would
    /// otherwise end it at the first random refusal, far below its
    /// capacity (one refusal in the first three answers is a third); one
    /// that is full refuses more, as slow start doubles past it within a
    /// round.
    fn slow_start_goes_on(&mut self, now: Instant) -> bool {
        self.judges_by_share()
            && self.rate.is_slow_start()
            && !self.rate.shows_refusals_beyond_at(SLOW_START_SHARE, now)
    }

    /// Cuts the rate for what was refused or timed out since
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
            self.rate.refused((overloaded - timed_out) as u32, now);
            // A trial holds the rate while the refusals keep their share.
            if !self.trials.holds_at(now) && !self.slow_start_goes_on(now) {
                self.rate.overloaded(&self.policy, window_start, now, false);
            }
        }
    }
}
