//! How the gate's rate is learned from outcomes: probing at the lowest rate
//! until something is accepted, a slow start that a refusal ends at what the
//! dependency accepted over the last second, then CUBIC after overloads,
//! never cut below the rate the dependency has just been seen to accept.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use super::answers::{Answers, AnswersHandover, HALF};
use super::judgement::{Judged, Judgement, RECENT};
use crate::fleet::handover::{sound, Refused, Restored, Taken};
use crate::policy::{GatePolicy, OverloadWhen};

/// The rate a gate paces at, and what it has learned.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Rate {
    /// Turns per second now.
    pub(crate) now: f64,
    phase: Phase,
    /// When the rate was last cut: an overload of an attempt sent before
    /// then was answered under the old rate, and does not cut it again.
    last_cut: Instant,
    /// Whether the latest overload was a timeout: the dependency is slow,
    /// and answers come late, so the rate grows no faster than what it
    /// delivers ([`GAIN`] times its delivery rate). A refusal clears it: a
    /// dependency that refuses at once is answering, not stuck.
    slow: bool,
    /// After a refusal, whether CUBIC's target is the cut (never below what
    /// the dependency was just seen to take) rather than the refused rate:
    /// the rate holds at the cut for CUBIC's k seconds, then probes above
    /// it. The fleet's delivery rate is the whole fleet's, a fair measure of
    /// what the dependency takes; a process's gate sees its own share of it
    /// only, too noisy to hold to, and climbs back towards the refused rate,
    /// as CUBIC does.
    holds_at_cut: bool,
    /// Until when a fleet's rate rises to what the dependency accepted over
    /// the last second: for [`SETTLE`] after slow start ends on a refusal.
    /// The cut then went to what was delivered as reported so far, and a
    /// fleet's reports come up to a round late: the acceptances still on
    /// their way raise the estimate as they arrive.
    settling_until: Option<Instant>,
    /// When the first acceptance ended probing: a fleet's slow start that
    /// ends within a second of it has been delivered to for less than the
    /// second its delivery rate is counted over.
    accepting_since: Option<Instant>,
    answers: Answers,
    /// The share of its requests the dependency is taken to fail at
    /// random, whatever the rate: its refusals cut the rate only beyond
    /// what that share explains, and the rate is never below what it
    /// delivers divided by what it does not fail, `1 / (1 − share)` times
    /// (Google's client-side throttling's K). 0: every refusal says
    /// overload. A gate under `overloadWhen: most-refused` that has seen
    /// the dependency accept something takes a half (K = 2), the most it
    /// tolerates: a dependency failing up to a half at random is never
    /// paced below what it answers. A fleet's law learns the share by trial
    /// (see the fleet's `trial` module).
    random_share: f64,
    /// When a refusal or a timeout was last taken for overload.
    judged_overloaded: Option<Instant>,
}

/// How far past what a slow dependency delivers the rate may grow: BBR's
/// gain when it probes for more bandwidth.
const GAIN: f64 = 1.25;

/// How long a fleet's rate settles after slow start ends: see
/// [`Rate::settling_until`](Rate).
pub(crate) const SETTLE: Duration = Duration::from_secs(1);

/// A fleet's [`Rate`] as a handover carries it: its times as nanoseconds
/// before the handover (`settling_ns` after it).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub(crate) struct RateHandover {
    now: f64,
    phase: PhaseHandover,
    last_cut_ns: u64,
    slow: bool,
    holds_at_cut: bool,
    settling_ns: Option<u64>,
    accepting_ns: Option<u64>,
    answers: AnswersHandover,
    random_share: f64,
    judged_overloaded_ns: Option<u64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
enum PhaseHandover {
    Probing,
    SlowStart,
    Cubic { max: f64, since_ns: u64, k: f64 },
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Phase {
    /// Nothing accepted since the gate turned on: overloads keep the rate low.
    Probing,
    /// Accepted attempts grow the rate by `ramp` each.
    SlowStart,
    /// After an overload at rate `max` at `since`: the rate follows
    /// `scale × (t − k)³ + max`.
    Cubic { max: f64, since: Instant, k: f64 },
}

/// The random share a gate takes once something has got through after it
/// found its dependency down: a half under `most-refused` (refusals count
/// as overload only while they outnumber acceptances), none under
/// `any-refusal` and `evidence` (a recovering capacity refuses what is sent
/// past it). Under `evidence` a process's gate then tries its cuts (see the
/// `trial` module): a chance run of refusals from a dependency failing a
/// share at random may have looked like an outage, and taking every refusal
/// for overload from then on would pace that process into a backlog.
fn random_share_of(policy: &GatePolicy) -> f64 {
    match policy.overload_when {
        OverloadWhen::MostRefused => HALF,
        OverloadWhen::AnyRefusal | OverloadWhen::Evidence => 0.0,
    }
}

impl Rate {
    /// The rate as handed over at `taken`.
    pub(crate) fn handed(&self, taken: Taken) -> RateHandover {
        RateHandover {
            now: self.now,
            phase: match self.phase {
                Phase::Probing => PhaseHandover::Probing,
                Phase::SlowStart => PhaseHandover::SlowStart,
                Phase::Cubic { max, since, k } => PhaseHandover::Cubic {
                    max,
                    since_ns: taken.age(since),
                    k,
                },
            },
            last_cut_ns: taken.age(self.last_cut),
            slow: self.slow,
            holds_at_cut: self.holds_at_cut,
            settling_ns: self.settling_until.map(|until| taken.ahead(until)),
            accepting_ns: self.accepting_since.map(|since| taken.age(since)),
            answers: self.answers.handed(taken),
            random_share: self.random_share,
            judged_overloaded_ns: self.judged_overloaded.map(|at| taken.age(at)),
        }
    }

    /// A rate taken up from `handed`, restored to this clock, within
    /// `policy`'s bounds.
    pub(crate) fn taken_up(policy: &GatePolicy, handed: &RateHandover, restored: Restored) -> Self {
        Self {
            now: handed.now.clamp(policy.min_rate, policy.max_rate),
            phase: match handed.phase {
                PhaseHandover::Probing => Phase::Probing,
                PhaseHandover::SlowStart => Phase::SlowStart,
                PhaseHandover::Cubic { max, since_ns, k } => Phase::Cubic {
                    max,
                    since: restored.back_ns(since_ns),
                    k,
                },
            },
            last_cut: restored.back_ns(handed.last_cut_ns),
            slow: handed.slow,
            holds_at_cut: handed.holds_at_cut,
            settling_until: handed.settling_ns.map(|ns| restored.ahead_ns(ns)),
            accepting_since: handed.accepting_ns.map(|ns| restored.back_ns(ns)),
            answers: Answers::taken_up(&handed.answers, restored),
            random_share: handed.random_share,
            judged_overloaded: handed.judged_overloaded_ns.map(|ns| restored.back_ns(ns)),
        }
    }

    /// The rate of a gate that has just turned on at `now`.
    pub(crate) fn probing(policy: &GatePolicy, now: Instant) -> Self {
        Self {
            now: policy.min_rate,
            phase: Phase::Probing,
            last_cut: now,
            slow: false,
            holds_at_cut: false,
            settling_until: None,
            accepting_since: None,
            answers: Answers::new(now),
            random_share: 0.0,
            judged_overloaded: None,
        }
    }

    /// [`probing`](Self::probing), for the fleet's rate: after a refusal it
    /// holds at its cut.
    pub(crate) fn probing_for_fleet(policy: &GatePolicy, now: Instant) -> Self {
        Self {
            holds_at_cut: true,
            ..Self::probing(policy, now)
        }
    }

    /// A fleet's rate carried on at `rate` from another replica's: held
    /// there as after a cut, then regrown along CUBIC's curve.
    pub(crate) fn resumed_for_fleet(policy: &GatePolicy, rate: f64, now: Instant) -> Self {
        let rate = rate.clamp(policy.min_rate, policy.max_rate);
        let k = (rate * (1.0 - policy.beta) / policy.scale).cbrt();
        Self {
            now: rate,
            phase: Phase::Cubic {
                max: rate,
                since: now,
                k,
            },
            // The pace it carries on was the dependency's, taking what was
            // sent: under `most-refused` it is judged to answer, failing up
            // to a half at random, until refusals go beyond that.
            random_share: random_share_of(policy),
            ..Self::probing_for_fleet(policy, now)
        }
    }

    /// A fleet's rate that carries on alone from `rate`, a part of a pace
    /// it shared with other replicas (`probing` if that pace still probed):
    /// in the phase it was in, but never below the part. A shared pace that
    /// found the dependency accepting ends probing here too.
    pub(crate) fn carry_on_from(&mut self, policy: &GatePolicy, rate: f64, probing: bool, now: Instant) {
        let rate = rate.clamp(policy.min_rate, policy.max_rate);
        match self.phase {
            Phase::Probing if probing => {}
            Phase::Probing | Phase::SlowStart => {
                self.phase = Phase::SlowStart;
                self.now = self.now.max(rate);
            }
            Phase::Cubic { .. } if rate > self.now => {
                let k = (rate * (1.0 - policy.beta) / policy.scale).cbrt();
                self.now = rate;
                self.phase = Phase::Cubic {
                    max: rate,
                    since: now,
                    k,
                };
            }
            Phase::Cubic { .. } => {}
        }
    }

    /// Where the rate is in its law: `probing`, `slow_start`, `cubic`
    /// (after a cut, below the rate it was cut at) or `regrown` (after a
    /// cut, back at or past that rate).
    pub(crate) fn phase_name(&self) -> &'static str {
        match self.phase {
            Phase::Probing => "probing",
            Phase::SlowStart => "slow_start",
            Phase::Cubic { max, .. } if self.now < max => "cubic",
            Phase::Cubic { .. } => "regrown",
        }
    }

    /// Whether nothing has been accepted since the gate turned on.
    pub(crate) fn is_probing(&self) -> bool {
        self.phase == Phase::Probing
    }

    /// Whether the rate has been cut since it last probed or ramped: CUBIC's phase.
    pub(crate) fn is_after_cut(&self) -> bool {
        matches!(self.phase, Phase::Cubic { .. })
    }

    /// Whether the latest overload was a timeout: the dependency is slow.
    pub(crate) fn is_slow(&self) -> bool {
        self.slow
    }

    /// Whether, at `now`, the rate still rises to what was delivered since
    /// slow start ended.
    pub(crate) fn is_settling_at(&self, now: Instant) -> bool {
        self.settling_until.is_some_and(|until| now < until)
    }

    /// When the rate was last cut.
    pub(crate) fn last_cut(&self) -> Instant {
        self.last_cut
    }

    /// Attempts accepted over the last second, per second, as of `now`.
    pub(crate) fn delivered_at(&mut self, now: Instant) -> f64 {
        self.answers_at(now).delivered()
    }

    /// The answers, rolled to `now`: what they say at `now`.
    fn answers_at(&mut self, now: Instant) -> &Answers {
        self.answers.roll(now);
        &self.answers
    }

    /// Attempts accepted per second over the last `span` before `now`'s
    /// tenth: see [`Answers::delivered_lately`].
    pub(crate) fn delivered_lately_at(&mut self, now: Instant, span: Duration) -> f64 {
        self.answers_at(now).delivered_lately(span)
    }

    /// Whether the second before `now` refused everything after
    /// acceptances: see [`Answers::refused_all_last_second`].
    pub(crate) fn refused_all_last_second_at(&mut self, now: Instant) -> bool {
        self.answers_at(now).refused_all_last_second()
    }

    /// A fleet's law that starts from processes that see the dependency
    /// accept and refuse (their gates watch): judged to fail up to a half
    /// at random until a second's answers show more, it paces nobody
    /// meanwhile (at `maxRate`).
    pub(crate) fn answering_for_fleet(policy: &GatePolicy, now: Instant) -> Self {
        let max = policy.max_rate;
        Self {
            now: max,
            phase: Phase::Cubic {
                max,
                since: now,
                k: 0.0,
            },
            random_share: HALF,
            ..Self::probing_for_fleet(policy, now)
        }
    }

    /// The dependency's refusals are a capacity's (they went beyond its
    /// random share, or did not keep their share when the rate fell): the
    /// rate is cut at `now` to what it delivered, held there as after a
    /// refusal, and every refusal from here on says overload.
    /// If the law has counted for less than a second, what it saw
    /// delivered is no measure yet: the rate starts a slow start from it
    /// instead, which the next refusal ends at what was delivered by then,
    /// or probes if it saw nothing delivered.
    pub(crate) fn capacity_verdict(&mut self, policy: &GatePolicy, now: Instant) {
        let delivered = self.answers.delivered_rate_at(now);
        let cut = delivered.min(self.now).clamp(policy.min_rate, policy.max_rate);
        let k = (cut * (1.0 - policy.beta) / policy.scale).cbrt();
        self.random_share = 0.0;
        self.slow = false;
        self.judged_overloaded = Some(now);
        self.last_cut = now;
        self.now = cut;
        let measured =
            self.answers.counted_for_a_second_at(now) || policy.overload_when == OverloadWhen::Evidence;
        self.phase = if measured {
            Phase::Cubic {
                max: cut,
                since: now,
                k,
            }
        } else if delivered < policy.min_rate {
            Phase::Probing
        } else {
            Phase::SlowStart
        };
    }

    /// The dependency's refusals kept `share` while the rate fell: it fails
    /// that share at random. From `now` refusals no longer cut the rate
    /// (unless they go beyond that share, which the fleet's law tests), and
    /// it grows as in slow start from what the dependency answers (what it
    /// delivers over `1 − share`) until it paces nobody: at once, it would
    /// release every line the pace held back.
    pub(crate) fn random_verdict(&mut self, policy: &GatePolicy, share: f64, now: Instant) {
        let delivered = self.answers.delivered_rate_at(now);
        self.judged_random(policy, share, delivered);
    }

    /// Judges the dependency to fail `share` at random (at most a half),
    /// delivering `delivered` a second: refusals cut only beyond that share,
    /// and the rate grows as in slow start from what it answers.
    fn judged_random(&mut self, policy: &GatePolicy, share: f64, delivered: f64) {
        self.random_share = share.clamp(0.0, HALF);
        self.judged_overloaded = None;
        self.slow = false;
        self.phase = Phase::SlowStart;
        let answered = delivered / (1.0 - self.random_share);
        self.now = self.now.max(answered).clamp(policy.min_rate, policy.max_rate);
    }

    /// A process's gate found, by trying its cuts, that its refusals keep
    /// their share: from `now` the dependency is judged to answer, failing
    /// up to a half at random (as under `most-refused`), and the rate grows
    /// as in slow start from twice what it delivers.
    pub(crate) fn answering_verdict(&mut self, policy: &GatePolicy, now: Instant) {
        let delivered = self.answers_at(now).delivered();
        self.judged_random(policy, HALF, delivered);
    }

    /// Whether, over the last second to `now`, more was refused than a
    /// dependency failing `share` at random would refuse, beyond chance.
    pub(crate) fn shows_refusals_beyond_at(&mut self, share: f64, now: Instant) -> bool {
        self.answers_at(now).shows_refusals_beyond_by_reports(share)
    }

    /// Of the answers over the last second, the share refused.
    pub(crate) fn refused_share_last_second(&mut self, now: Instant) -> f64 {
        self.answers_at(now).refused_share_last_second()
    }

    /// Whether the dependency is judged to answer, failing a share at
    /// random: see [`Rate::random_share`](Rate).
    pub(crate) fn is_answering(&self) -> bool {
        self.random_share > 0.0
    }

    /// The share of requests the dependency is taken to fail at random.
    pub(crate) fn random_share(&self) -> f64 {
        self.random_share
    }

    /// The rate of a gate that turns on at `now`, under `most-refused`,
    /// because refusals came to outnumber acceptances while the dependency
    /// still accepted some (`answers` counts them): judging it to answer,
    /// failing up to a half at random, at twice what it delivers, growing
    /// as in slow start.
    pub(crate) fn answering(policy: &GatePolicy, answers: Answers, now: Instant) -> Self {
        let probing = Self::probing(policy, now);
        Self {
            phase: Phase::SlowStart,
            answers,
            random_share: HALF,
            now: (answers.delivered() / (1.0 - HALF)).clamp(policy.min_rate, policy.max_rate),
            ..probing
        }
    }

    /// Whether the rate grows in slow start (by `ramp` per accepted attempt).
    pub(crate) fn is_slow_start(&self) -> bool {
        self.phase == Phase::SlowStart
    }

    /// Counts `count` attempts refused at `now`; [`overloaded`](Self::overloaded)
    /// judges what they say.
    pub(crate) fn refused(&mut self, count: u32, now: Instant) {
        self.answers.refused(count, now);
    }

    /// An attempt sent at `sent` was refused (or, if `timed_out`, got no
    /// answer in time) at `now`; whether that says the dependency is
    /// overloaded (if not, nothing is cut: see [`Rate::random_share`](Rate)).
    /// [`refused`](Self::refused) has counted a refusal already.
    pub(crate) fn overloaded(
        &mut self,
        policy: &GatePolicy,
        sent: Instant,
        now: Instant,
        timed_out: bool,
    ) -> bool {
        self.answers.roll(now);
        if !timed_out && self.refusal_is_random() {
            return false;
        }
        self.slow = timed_out;
        self.judged_overloaded = Some(now);
        if sent < self.last_cut {
            return true;
        }
        self.last_cut = now;
        let cut = if timed_out {
            // The dependency may still be busy with what timed out: send no
            // more than a share of the most it has lately managed to answer.
            let peak = self.answers.peak().min(self.now);
            (peak * policy.beta).max(policy.min_rate)
        } else {
            // Refusals that follow the last accepted attempt of a burst would
            // otherwise cut again and again; what was just accepted can be sent.
            let delivered = self.answers.delivered().min(self.now);
            let kept = if self.phase == Phase::SlowStart {
                // Slow start grew the rate ahead of the answers: a share of
                // it is no measure of the dependency, what it accepted is.
                if self.holds_at_cut {
                    self.settling_until = Some(now + SETTLE);
                    self.delivered_since_accepting(now).min(self.now)
                } else {
                    0.0
                }
            } else {
                self.now * policy.beta
            };
            kept.max(delivered).max(policy.min_rate)
        };
        if self.phase != Phase::Probing {
            // CUBIC: back to `max` after k seconds, k = ∛(max (1 − β) / C).
            // After a timeout the rate it was sent at is no target: regrow
            // from the cut, slowly at first.
            let max = if timed_out || self.holds_at_cut {
                cut
            } else {
                self.now
            };
            let k = (max * (1.0 - policy.beta) / policy.scale).cbrt();
            let k = if timed_out { 0.0 } else { k };
            self.phase = Phase::Cubic { max, since: now, k };
        }
        self.now = cut;
        true
    }

    /// What the rate believes of the dependency at `now`, and the answers
    /// that belief rests on.
    pub(crate) fn judged_at(&mut self, now: Instant) -> Judged {
        self.answers.roll(now);
        let recent = |at: Instant| now.saturating_duration_since(at) < RECENT;
        let judgement = if self.is_probing() {
            Judgement::Down
        } else if self.judged_overloaded.is_some_and(recent) {
            if self.slow {
                Judgement::Slow
            } else {
                Judgement::Overloaded
            }
        } else if self.answers.refusals() > 0.0 {
            Judgement::FailingAtRandom
        } else {
            Judgement::Recovering
        };
        Judged {
            judgement,
            refused_share: self.answers.refused_share(),
            delivered: self.answers.delivered(),
        }
    }

    /// Whether a refusal says nothing of overload: while the dependency is
    /// judged to fail a share at random, until refusals go beyond it. A
    /// fleet's law weighs every report's answers instead (its `excess`
    /// module).
    fn refusal_is_random(&self) -> bool {
        if self.random_share == 0.0 {
            return false;
        }
        if self.holds_at_cut {
            return true;
        }
        !self.answers.shows_refusals_beyond(self.random_share)
    }

    /// What was accepted over the last second, per second of it since the
    /// first acceptance ended probing: a slow start that ends within a
    /// second of it has been delivered to for less than that second, and
    /// the whole second's count would take it for a dependency that takes
    /// half as much (95 a second for a token bucket of 200 a second, in the
    /// simulator's herd of 50 processes).
    fn delivered_since_accepting(&self, now: Instant) -> f64 {
        let delivered = self.answers.delivered();
        match self.accepting_since {
            Some(since) => {
                let counted = now.saturating_duration_since(since).as_secs_f64();
                delivered / counted.clamp(0.25, 1.0)
            }
            None => delivered,
        }
    }

    /// An attempt was accepted at `now`.
    pub(crate) fn accepted(&mut self, policy: &GatePolicy, now: Instant) {
        self.accepted_many(policy, 1, now);
    }

    /// `count` attempts were accepted by `now` (a fleet's report).
    pub(crate) fn accepted_many(&mut self, policy: &GatePolicy, count: u32, now: Instant) {
        if count == 0 {
            return;
        }
        self.answers.accepted(count, now);
        let ramp = policy.ramp * f64::from(count);
        let grown = match self.phase {
            Phase::Probing => {
                self.phase = Phase::SlowStart;
                self.accepting_since = Some(now);
                // A fleet that probed found the dependency down: its
                // refusals from here on are a recovering capacity's until a
                // trial shows otherwise.
                if !self.holds_at_cut {
                    self.random_share = random_share_of(policy);
                }
                self.now + ramp
            }
            Phase::SlowStart => self.now + ramp,
            Phase::Cubic { max, since, k } => {
                let t = now.saturating_duration_since(since).as_secs_f64();
                self.now.max(policy.scale * (t - k).powi(3) + max)
            }
        };
        let grown = if self.slow {
            grown.min((GAIN * self.answers.peak()).max(self.now))
        } else if self.settling_until.is_some_and(|until| now < until) {
            grown.max(self.delivered_since_accepting(now))
        } else {
            grown
        };
        let grown = if self.random_share > 0.0 {
            grown.max(self.answers.delivered() / (1.0 - self.random_share))
        } else {
            grown
        };
        self.now = grown.clamp(policy.min_rate, policy.max_rate);
    }
}

impl RateHandover {
    /// Whether its numbers could have come from a rate.
    pub(crate) fn check(&self) -> Result<(), Refused> {
        sound(self.now, "rate")?;
        if let PhaseHandover::Cubic { max, k, .. } = self.phase {
            sound(max, "CUBIC's max")?;
            sound(k, "CUBIC's k")?;
        }
        sound(self.random_share, "random share")?;
        if self.random_share > HALF {
            return Err(Refused::OutOfRange("random share"));
        }
        Ok(())
    }
}
