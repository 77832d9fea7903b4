//! Whether refusals are a capacity's or a share failed at random, told by
//! what a cut does to them: a fleet's law tries every cut (see the fleet's
//! `law` module), and under `overloadWhen: evidence` a process's gate tries
//! the cuts it makes after finding its dependency down, in case a chance
//! run of refusals misled it. A capacity refuses what is
//! sent past it: cut to what it delivered, its refusals vanish. A
//! dependency failing a share at random (a bad replica behind a balancer, a
//! flaky disk) refuses that share at any rate. As BBR learns its bottleneck
//! from what a change of its sending rate does to the delivery rate, a
//! trial learns which of the two it is from what a cut does to the share
//! refused: the rate is held at the cut, and the answers to attempts sent
//! since are counted until there are enough to tell.
//!
//! While a trial holds the rate, refusals that keep the share they had
//! before the cut do not cut it again: without the hold, a dependency
//! failing a tenth at random would see its rate cut by a tenth at every
//! refusal, faster than a trial at a low rate can count enough answers.
//! Refusals beyond that share end the trial at once: the rate is still
//! past a capacity, and the next refusal cuts it. A fleet's law holds for
//! at most [`FLEET_HOLD`] at a cut, counting on across the cuts after it:
//! a fleet at a few answers a second would otherwise hold a rate past a
//! capacity for as long as twenty answers take, and one failing at random
//! loses a share of its rate per hold, not per refusal.
//!
//! One trial is not enough: the first cut of a dependency whose capacity
//! has just fallen (a brownout's first second) goes to what it delivered
//! before it fell, still past it, and its refusals keep their share. Only
//! refusals that keep their share over two cuts in a row, the rate lower
//! each time, are taken for failure at random. While the dependency fails
//! at random, the cost is those two cuts and the holds after them: about
//! twenty refusals' worth of answers, under a second at a fleet's hundreds
//! of answers a second.

use std::time::Duration;

use tokio::time::Instant;

use super::{beyond_random_by, BEYOND_CHANCE, OWN_CHANCE};

/// Refusals a trial expects, at the share before its cut, before it
/// judges: with ten, a dependency failing a share at random shows so few
/// that they seem to vanish (see [`FEWER_THAN_CHANCE`]) about once in a
/// hundred trials, while a capacity's vanish outright.
const EVIDENCE: f64 = 10.0;
/// However high the share, a trial counts at least this many answers.
const LEAST_ANSWERS: f64 = 20.0;
/// Standard deviations below the refusals the share before the cut
/// expects, for them to have vanished.
const FEWER_THAN_CHANCE: f64 = 2.0;
/// Trials in a row whose refusals kept their share, to judge failure at
/// random: two, because the first cut after a capacity falls may still be
/// past it.
const IN_A_ROW: u32 = 2;
/// How long a fleet's trial holds the rate at its cut, at most, before
/// the next refusal may cut it again (and the hold begins anew at that
/// cut, the trial counting on): a trial at a few answers a second would
/// otherwise hold a rate past a capacity for as long as it takes to count
/// twenty. Eight rounds of the fleet's law: a fleet at tens of answers a
/// second or more decides well within it.
pub(crate) const FLEET_HOLD: Duration = Duration::from_secs(2);

/// What a trial's answers say, once they say something.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Finding {
    /// The refusals went beyond their share before the cut, or vanished:
    /// a capacity's. The trials start again from the next cut.
    Capacity,
    /// The refusals kept their share: the next cut begins the next trial.
    Kept,
    /// They kept it over [`IN_A_ROW`] trials: the dependency fails this
    /// share at random.
    Random(f64),
}

/// The trials of one fleet's law, or of one process's gate.
#[derive(Debug, Default)]
pub(crate) struct Trials {
    current: Option<Trial>,
    /// Trials in a row whose refusals kept their share.
    kept: u32,
    /// What those trials counted, accepted and refused.
    pooled: (f64, f64),
    /// Whether a process's gate runs them: it weighs every answer as it
    /// comes, not a report's at a time, and asks for more evidence.
    own: bool,
}

#[derive(Debug, Clone, Copy)]
struct Trial {
    /// When the cut was: only attempts sent since tell of its rate.
    since: Instant,
    /// When the rate was last held at a cut: the trial's, or a later one's.
    held_since: Instant,
    /// The share refused over the second before the cut.
    share_before: f64,
    accepted: f64,
    refused: f64,
}

/// [`Trials`] as a handover carries them: the trial under way with its
/// times as nanoseconds before the handover, and the evidence pooled.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub(crate) struct TrialsHandover {
    /// The trial under way: since, held since, the share refused before
    /// its cut, its answers accepted and refused.
    current: Option<(u64, u64, f64, f64, f64)>,
    kept: u32,
    pooled: (f64, f64),
    own: bool,
}

impl TrialsHandover {
    /// Whether its numbers could have come from trials.
    pub(crate) fn check(&self) -> Result<(), crate::fleet::handover::Refused> {
        use crate::fleet::handover::sound;
        if let Some((_, _, share, accepted, refused)) = self.current {
            sound(share, "trial's share")?;
            sound(accepted, "trial's acceptances")?;
            sound(refused, "trial's refusals")?;
        }
        sound(self.pooled.0, "trials' pooled acceptances")?;
        sound(self.pooled.1, "trials' pooled refusals")
    }
}

impl Trials {
    /// The trials as handed over at `taken`.
    pub(crate) fn handed(&self, taken: crate::fleet::handover::Taken) -> TrialsHandover {
        TrialsHandover {
            current: self.current.map(|t| {
                (
                    taken.age(t.since),
                    taken.age(t.held_since),
                    t.share_before,
                    t.accepted,
                    t.refused,
                )
            }),
            kept: self.kept,
            pooled: self.pooled,
            own: self.own,
        }
    }

    /// Trials taken up from `handed`, restored to this clock.
    pub(crate) fn taken_up(handed: &TrialsHandover, restored: crate::fleet::handover::Restored) -> Self {
        Self {
            current: handed
                .current
                .map(|(since, held, share_before, accepted, refused)| Trial {
                    since: restored.back_ns(since),
                    held_since: restored.back_ns(held),
                    share_before,
                    accepted,
                    refused,
                }),
            kept: handed.kept,
            pooled: handed.pooled,
            own: handed.own,
        }
    }

    /// The rate was cut at `now`, after `share_before` of the answers over
    /// the last second were refused: a trial begins unless one is under way.
    /// A cut while a trial is under way (its hold ran out) holds the rate
    /// again, at the new cut.
    pub(crate) fn cut(&mut self, share_before: f64, now: Instant) {
        match &mut self.current {
            Some(trial) => trial.held_since = now,
            None if share_before > 0.0 => {
                self.current = Some(Trial {
                    since: now,
                    held_since: now,
                    share_before,
                    accepted: 0.0,
                    refused: 0.0,
                });
            }
            None => {}
        }
    }

    /// Whether a trial holds the rate: refusals do not cut it, and it does
    /// not probe.
    pub(crate) fn holds(&self) -> bool {
        self.current.is_some()
    }

    /// Whether a fleet's trial holds the rate at `now`: for at most
    /// [`FLEET_HOLD`] since its last cut.
    pub(crate) fn holds_at(&self, now: Instant) -> bool {
        self.current
            .is_some_and(|trial| now.saturating_duration_since(trial.held_since) < FLEET_HOLD)
    }

    /// The trials of a process's gate.
    pub(crate) fn of_a_process() -> Self {
        Self {
            own: true,
            ..Self::default()
        }
    }

    /// Forgets every trial.
    pub(crate) fn reset(&mut self) {
        *self = Self {
            own: self.own,
            ..Self::default()
        };
    }

    /// Counts `accepted` and `refused` answers to attempts sent since
    /// `sent_since`; what the trial under way found, once it has found it.
    pub(crate) fn answered(&mut self, accepted: f64, refused: f64, sent_since: Instant) -> Option<Finding> {
        let trial = self.current.as_mut()?;
        if sent_since < trial.since {
            return None;
        }
        trial.accepted += accepted;
        trial.refused += refused;
        let trial = *trial;
        let deviations = if self.own { OWN_CHANCE } else { BEYOND_CHANCE };
        if beyond_random_by(trial.accepted, trial.refused, trial.share_before, deviations) {
            self.reset();
            return Some(Finding::Capacity);
        }
        let answered = trial.accepted + trial.refused;
        let expected = answered * trial.share_before;
        if expected < EVIDENCE || answered < LEAST_ANSWERS {
            return None;
        }
        self.current = None;
        let spread = (expected * (1.0 - trial.share_before)).sqrt();
        let kept = expected - trial.refused <= FEWER_THAN_CHANCE * spread;
        // Refusals that outnumber acceptances by two standard deviations are
        // overload whatever their share did: no more than a half is taken
        // for random.
        let most = trial.refused - trial.accepted > 2.0 * answered.sqrt();
        if !kept || most {
            self.reset();
            return Some(Finding::Capacity);
        }
        self.kept += 1;
        self.pooled.0 += trial.accepted;
        self.pooled.1 += trial.refused;
        if self.kept < IN_A_ROW {
            return Some(Finding::Kept);
        }
        let (accepted, refused) = self.pooled;
        self.reset();
        Some(Finding::Random(refused / (accepted + refused)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(t0: Instant, millis: u64) -> Instant {
        t0 + Duration::from_millis(millis)
    }

    #[test]
    fn refusals_that_keep_their_share_over_two_cuts_are_random() {
        let t0 = Instant::now();
        let mut trials = Trials::default();
        trials.cut(0.1, t0);
        assert!(trials.holds());
        assert_eq!(
            trials.answered(45.0, 5.0, t0),
            None,
            "five refusals expected: too few"
        );
        assert_eq!(trials.answered(46.0, 4.0, ms(t0, 100)), Some(Finding::Kept));
        assert!(!trials.holds(), "the next cut begins the next");
        trials.cut(0.1, ms(t0, 300));
        let found = trials.answered(92.0, 8.0, ms(t0, 310));
        assert_eq!(found, Some(Finding::Random(17.0 / 200.0)));
    }

    #[test]
    fn refusals_that_vanish_after_a_cut_are_a_capacity() {
        let t0 = Instant::now();
        let mut trials = Trials::default();
        // A brownout's first cut is still past the capacity: its share holds.
        trials.cut(0.5, t0);
        assert_eq!(trials.answered(10.0, 10.0, ms(t0, 10)), Some(Finding::Kept));
        // The second goes to it: the refusals vanish.
        trials.cut(0.5, ms(t0, 300));
        assert_eq!(trials.answered(19.0, 1.0, ms(t0, 310)), Some(Finding::Capacity));
        trials.cut(0.1, ms(t0, 600));
        assert_eq!(
            trials.answered(90.0, 10.0, ms(t0, 610)),
            Some(Finding::Kept),
            "a row begins again"
        );
    }

    #[test]
    fn a_tenth_random_seldom_seems_to_vanish() {
        // Two standard deviations below ten expected: three or fewer of a
        // hundred, about one trial in a hundred at a tenth.
        let t0 = Instant::now();
        let mut trials = Trials::default();
        trials.cut(0.1, t0);
        assert_eq!(trials.answered(96.0, 4.0, t0), Some(Finding::Kept));
        trials.cut(0.1, t0);
        assert_eq!(trials.answered(97.0, 3.0, t0), Some(Finding::Capacity));
    }

    #[test]
    fn refusals_beyond_the_share_before_end_a_trial_at_once() {
        let t0 = Instant::now();
        let mut trials = Trials::default();
        trials.cut(0.1, t0);
        assert_eq!(
            trials.answered(2.0, 8.0, ms(t0, 10)),
            Some(Finding::Capacity),
            "8 of 10, a tenth expected"
        );
        assert!(!trials.holds());
    }

    #[test]
    fn refusals_that_outnumber_acceptances_are_never_random() {
        let t0 = Instant::now();
        let mut trials = Trials::default();
        trials.cut(0.9, t0);
        assert_eq!(trials.answered(2.0, 28.0, ms(t0, 10)), Some(Finding::Capacity));
    }

    #[test]
    fn answers_to_attempts_sent_before_the_cut_or_too_few_tell_nothing() {
        let t0 = Instant::now();
        let mut trials = Trials::default();
        trials.cut(0.2, ms(t0, 100));
        assert_eq!(trials.answered(0.0, 100.0, t0), None);
        assert_eq!(trials.answered(5.0, 1.0, ms(t0, 100)), None);
        assert!(trials.holds(), "it counts on until it can tell");
    }

    #[test]
    fn a_fleets_hold_ends_after_a_while_and_begins_again_at_the_next_cut() {
        let t0 = Instant::now();
        let mut trials = Trials::default();
        trials.cut(0.3, t0);
        trials.answered(3.0, 1.0, ms(t0, 10));
        assert!(trials.holds_at(ms(t0, 1_990)));
        assert!(
            !trials.holds_at(ms(t0, 2_000)),
            "a few answers a second: the next refusal may cut"
        );
        trials.cut(0.9, ms(t0, 2_500));
        assert!(trials.holds_at(ms(t0, 2_600)), "held at the new cut");
        // The trial counted on across the cut, at the share before the first.
        assert_eq!(trials.answered(20.0, 10.0, ms(t0, 2_600)), Some(Finding::Kept));
    }
}
