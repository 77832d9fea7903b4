//! What a dependency answered over the last three seconds, counted by the
//! tenth of a second: the attempts it accepted and those it refused. From
//! these a rate law reads what the dependency delivers (BBR's delivery
//! rate), and, under `overloadWhen: most-refused`, whether its refusals
//! say overload: only once they outnumber acceptances by more than chance
//! would, as Google's client-side throttling (SRE book, "Handling
//! Overload") holds nothing back until requests exceed K = 2 times the
//! accepts. A dependency that fails a share at random (a bad replica behind
//! a balancer, a flaky disk) up to a half is then never taken for
//! overloaded.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use crate::fleet::handover::{Restored, Taken};

/// Tenths kept: three seconds, the longest a timeout's cut looks back.
const TENTHS: usize = 30;
const TENTH: Duration = Duration::from_millis(100);

/// Standard deviations by which refusals must go beyond a random share, over
/// a second, for a test made once a report (a fleet's law, its trials and
/// its slow start): with fewer, a dependency that fails half its answers at
/// random would seem overloaded every few seconds.
pub(crate) const BEYOND_CHANCE: f64 = 3.0;

/// Standard deviations a process's gate asks for (Google's K = 2 test, its
/// refusals while judged to answer, its trials): it tests again at every
/// answer, scores of times a second, and at three a dependency failing half
/// at random seemed overloaded to one of ten processes of 100 calls a second
/// every few seconds, each time pacing its calls into a backlog.
pub(crate) const OWN_CHANCE: f64 = 4.0;

/// Counts per tenth of a second over the last three seconds.
#[derive(Debug, Clone, Copy)]
struct Counts {
    /// The count per tenth, the current tenth at `current % TENTHS`.
    tenths: [u32; TENTHS],
    /// The current tenth, counted from `origin`.
    current: u64,
    origin: Instant,
}

impl Counts {
    fn new(now: Instant) -> Self {
        Self {
            tenths: [0; TENTHS],
            current: 0,
            origin: now,
        }
    }

    /// The counts as handed over at `taken`, the newest tenth first.
    fn handed(mut self, taken: Taken) -> CountsHandover {
        self.roll(taken.at);
        let back = std::array::from_fn(|i| self.tenths[(self.current as usize + TENTHS - i) % TENTHS]);
        let since_origin = taken.at.saturating_duration_since(self.origin);
        let into = since_origin.saturating_sub(TENTH * u32::try_from(self.current).unwrap_or(u32::MAX));
        CountsHandover {
            back,
            counted_tenths: self.current.min(Taken::OLDEST_TENTHS),
            into_ns: taken.nanos(into.min(TENTH)),
        }
    }

    /// Counts taken up from `handed`, restored to this clock. A clock that
    /// does not reach back to when counting began (a machine booted since)
    /// counts from the handover's tenth instead.
    fn taken_up(handed: &CountsHandover, restored: Restored) -> Self {
        let into = Duration::from_nanos(handed.into_ns.min(99_999_999));
        let counted = handed.counted_tenths.min(Taken::OLDEST_TENTHS);
        let (current, origin) = match restored.reaches_back(TENTH * counted as u32 + into) {
            Some(origin) => (counted, origin),
            None => (0, restored.back(into)),
        };
        let mut tenths = [0; TENTHS];
        for (i, &count) in handed.back.iter().enumerate() {
            tenths[(current as usize + TENTHS - i) % TENTHS] = count;
        }
        Self {
            tenths,
            current,
            origin,
        }
    }

    /// Moves to the tenth holding `now`, emptying those that have passed.
    fn roll(&mut self, now: Instant) {
        let tenth = (now.saturating_duration_since(self.origin).as_millis() / 100) as u64;
        let passed = tenth.saturating_sub(self.current).min(TENTHS as u64);
        for i in 1..=passed {
            self.tenths[((self.current + i) % TENTHS as u64) as usize] = 0;
        }
        self.current = self.current.max(tenth);
    }

    fn add(&mut self, count: u32, now: Instant) {
        self.roll(now);
        let slot = &mut self.tenths[(self.current % TENTHS as u64) as usize];
        *slot = slot.saturating_add(count);
    }

    /// The count over the second that ended `back` tenths ago.
    fn second_ending(&self, back: u64) -> f64 {
        self.tenths_ending(back, 10)
    }

    /// The count over the `tenths` that ended `back` tenths ago.
    fn tenths_ending(&self, back: u64, tenths: u64) -> f64 {
        (back..back + tenths.min(TENTHS as u64 - back))
            .map(|i| {
                let slot = (self.current + TENTHS as u64 - i) % TENTHS as u64;
                f64::from(self.tenths[slot as usize])
            })
            .sum()
    }

    /// The most counted in any second of the last three.
    fn peak(&self) -> f64 {
        (0..=(TENTHS as u64 - 10))
            .map(|back| self.second_ending(back))
            .fold(0.0, f64::max)
    }

    fn is_empty(&self) -> bool {
        self.tenths.iter().all(|&n| n == 0)
    }

    /// The count over the last three seconds.
    fn total(&self) -> f64 {
        self.tenths.iter().map(|&n| f64::from(n)).sum()
    }
}

/// Attempts accepted and refused over the last three seconds.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Answers {
    accepted: Counts,
    refused: Counts,
}

/// [`Counts`] as a handover carries them: the tenths, the newest (the one
/// the handover was taken in) first, how far into it the handover was
/// taken, and how many whole tenths had been counted by then.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub(crate) struct CountsHandover {
    back: [u32; TENTHS],
    counted_tenths: u64,
    into_ns: u64,
}

/// [`Answers`] as a handover carries them.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub(crate) struct AnswersHandover {
    accepted: CountsHandover,
    refused: CountsHandover,
}

impl Answers {
    /// The answers as handed over at `taken`.
    pub(crate) fn handed(&self, taken: Taken) -> AnswersHandover {
        AnswersHandover {
            accepted: self.accepted.handed(taken),
            refused: self.refused.handed(taken),
        }
    }

    /// Answers taken up from `handed`, restored to this clock.
    pub(crate) fn taken_up(handed: &AnswersHandover, restored: Restored) -> Self {
        Self {
            accepted: Counts::taken_up(&handed.accepted, restored),
            refused: Counts::taken_up(&handed.refused, restored),
        }
    }

    /// Nothing counted yet, at `now`.
    pub(crate) fn new(now: Instant) -> Self {
        Self {
            accepted: Counts::new(now),
            refused: Counts::new(now),
        }
    }

    /// Moves to `now`, forgetting what is older than three seconds.
    pub(crate) fn roll(&mut self, now: Instant) {
        self.accepted.roll(now);
        self.refused.roll(now);
    }

    /// Counts `count` attempts accepted at `now`.
    pub(crate) fn accepted(&mut self, count: u32, now: Instant) {
        self.accepted.add(count, now);
        self.refused.roll(now);
    }

    /// Counts `count` attempts refused at `now`.
    pub(crate) fn refused(&mut self, count: u32, now: Instant) {
        self.refused.add(count, now);
        self.accepted.roll(now);
    }

    /// Accepted over the last second, per second: what the dependency
    /// delivers.
    pub(crate) fn delivered(&self) -> f64 {
        self.accepted.second_ending(0)
    }

    /// [`delivered`](Self::delivered) at `now`, counting only the time since
    /// counting began if that is less than a second: what a fleet's law a
    /// few tenths old has seen delivered, per second.
    pub(crate) fn delivered_rate_at(&self, now: Instant) -> f64 {
        let counted = now.saturating_duration_since(self.accepted.origin).as_secs_f64();
        self.delivered() / counted.clamp(0.1, 1.0)
    }

    /// Accepted per second over the last `span` (whole tenths, at least
    /// one, at most a second) before the current tenth: what the
    /// dependency delivers lately, while a rate that rose in the last
    /// second still shows only in part in [`delivered`](Self::delivered).
    pub(crate) fn delivered_lately(&self, span: std::time::Duration) -> f64 {
        let tenths = (span.as_millis() / 100).clamp(1, 10) as u64;
        self.accepted.tenths_ending(1, tenths) / (tenths as f64 / 10.0)
    }

    /// Whether the last second refused everything, after acceptances in
    /// the two before it: a limit that counts what it refuses refuses a
    /// whole burst this way, where a quota or a bucket refuses its excess.
    pub(crate) fn refused_all_last_second(&self) -> bool {
        self.accepted.second_ending(0) == 0.0
            && self.refused.second_ending(0) > 0.0
            && self.accepted.total() > 0.0
    }

    /// Whether counting began a second or more before `now`.
    pub(crate) fn counted_for_a_second_at(&self, now: Instant) -> bool {
        now.saturating_duration_since(self.accepted.origin).as_secs() >= 1
    }

    /// The most accepted in any second of the last three (BBR's windowed
    /// maximum of the delivery rate).
    pub(crate) fn peak(&self) -> f64 {
        self.accepted.peak()
    }

    /// Refusals counted over the last three seconds.
    pub(crate) fn refusals(&self) -> f64 {
        self.refused.total()
    }

    /// Of the answers over the last three seconds, the share refused; 0
    /// with none.
    pub(crate) fn refused_share(&self) -> f64 {
        share(self.accepted.total(), self.refused.total())
    }

    /// Whether anything was accepted in the last three seconds.
    pub(crate) fn any_accepted(&self) -> bool {
        !self.accepted.is_empty()
    }

    /// Whether, over the last second, refusals outnumbered acceptances by
    /// more than chance would ([`OWN_CHANCE`]): fewer than half accepted, as
    /// Google's K = 2.
    pub(crate) fn shows_overload(&self) -> bool {
        self.shows_refusals_beyond(HALF)
    }

    /// Whether, over the last second, more was refused than a dependency
    /// failing `random_share` at random would refuse, by more than one
    /// process's chance ([`OWN_CHANCE`]).
    pub(crate) fn shows_refusals_beyond(&self, random_share: f64) -> bool {
        let (accepted, refused) = (self.accepted.second_ending(0), self.refused.second_ending(0));
        beyond_random_by(accepted, refused, random_share, OWN_CHANCE)
    }

    /// [`shows_refusals_beyond`](Self::shows_refusals_beyond) by
    /// [`BEYOND_CHANCE`]: the test a law that looks at each report, not at
    /// each answer, makes.
    pub(crate) fn shows_refusals_beyond_by_reports(&self, random_share: f64) -> bool {
        let (accepted, refused) = (self.accepted.second_ending(0), self.refused.second_ending(0));
        beyond_random(accepted, refused, random_share)
    }

    /// Of the answers over the last second, the share refused; 0 with none.
    pub(crate) fn refused_share_last_second(&self) -> f64 {
        share(self.accepted.second_ending(0), self.refused.second_ending(0))
    }
}

/// The random share whose refusals the K = 2 test tolerates: refusals
/// outnumber acceptances only beyond it.
pub(crate) const HALF: f64 = 0.5;

/// Whether `refused` of `accepted + refused` answers are more than a
/// dependency failing `random_share` of its requests at random would
/// refuse, by [`BEYOND_CHANCE`] standard deviations of the binomial count.
pub(crate) fn beyond_random(accepted: f64, refused: f64, random_share: f64) -> bool {
    beyond_random_by(accepted, refused, random_share, BEYOND_CHANCE)
}

/// [`beyond_random`] by `deviations` standard deviations. At a share of a
/// half it is the K = 2 test (refusals outnumber acceptances beyond
/// chance); at none, any refusal is beyond it.
pub(crate) fn beyond_random_by(accepted: f64, refused: f64, random_share: f64, deviations: f64) -> bool {
    let answered = accepted + refused;
    let expected = random_share * answered;
    let spread = (answered * random_share * (1.0 - random_share)).sqrt();
    refused - expected > deviations * spread
}

fn share(accepted: f64, refused: f64) -> f64 {
    if accepted + refused == 0.0 {
        0.0
    } else {
        refused / (accepted + refused)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn at(t0: Instant, millis: u64) -> Instant {
        t0 + Duration::from_millis(millis)
    }

    #[test]
    fn counts_by_the_tenth_and_forgets_what_is_older_than_three_seconds() {
        let t0 = Instant::now();
        let mut answers = Answers::new(t0);
        answers.accepted(3, t0);
        answers.accepted(4, at(t0, 150));
        assert_eq!(answers.delivered(), 7.0);
        answers.roll(at(t0, 1_050));
        assert_eq!(
            answers.delivered(),
            4.0,
            "the first tenth has left the last second"
        );
        assert_eq!(answers.peak(), 7.0, "but not the last three");
        answers.roll(at(t0, 3_200));
        assert!(!answers.any_accepted());
    }

    #[test]
    fn a_second_refused_whole_after_acceptances_is_told_from_an_excess_refused_and_from_an_outage() {
        let t0 = Instant::now();
        let mut answers = Answers::new(t0);
        answers.refused(50, t0);
        assert!(!answers.refused_all_last_second(), "nothing accepted yet: down");
        answers.accepted(200, at(t0, 500));
        answers.refused(30, at(t0, 900));
        assert!(!answers.refused_all_last_second(), "the excess refused");
        answers.refused(250, at(t0, 1_400));
        assert!(
            !answers.refused_all_last_second(),
            "the acceptances are within the second"
        );
        answers.refused(250, at(t0, 2_200));
        assert!(answers.refused_all_last_second(), "a whole second refused");
        answers.roll(at(t0, 3_700));
        assert!(
            !answers.refused_all_last_second(),
            "the acceptances have left the three seconds"
        );
    }

    #[test]
    fn lately_counts_the_whole_tenths_before_this_one() {
        let t0 = Instant::now();
        let mut answers = Answers::new(t0);
        answers.accepted(10, t0);
        answers.accepted(30, at(t0, 800));
        answers.accepted(7, at(t0, 950));
        let quarter = std::time::Duration::from_millis(250);
        assert_eq!(answers.delivered_lately(quarter), 150.0, "30 over two tenths");
        assert_eq!(answers.delivered(), 47.0);
    }

    #[test]
    fn a_tenth_of_the_answers_refused_is_no_overload_most_of_them_is() {
        let t0 = Instant::now();
        let mut answers = Answers::new(t0);
        answers.accepted(90, t0);
        answers.refused(10, t0);
        assert!(!answers.shows_overload(), "90 accepted, 10 refused");
        answers.refused(80, t0);
        assert!(
            !answers.shows_overload(),
            "90 and 90: a dependency failing half at random"
        );
        answers.refused(60, t0);
        assert!(
            !answers.shows_overload(),
            "90 and 150: within four standard deviations"
        );
        answers.refused(10, t0);
        assert!(
            answers.shows_overload(),
            "90 and 160: beyond four standard deviations"
        );
        let mut down = Answers::new(t0);
        down.refused(16, t0);
        assert!(!down.shows_overload(), "sixteen refusals could be chance");
        down.refused(1, t0);
        assert!(down.shows_overload(), "seventeen and nothing accepted are not");
    }
}
