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

use tokio::time::Instant;

/// Tenths kept: three seconds, the longest a timeout's cut looks back.
const TENTHS: usize = 30;

/// Standard deviations by which refusals must outnumber acceptances over a
/// second to show overload: with fewer, a dependency that fails half its
/// answers at random would seem overloaded every few seconds.
const BEYOND_CHANCE: f64 = 3.0;

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
        (back..back + 10)
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

impl Answers {
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
    /// more than chance would: fewer than half accepted, as Google's K = 2.
    pub(crate) fn shows_overload(&self) -> bool {
        self.shows_refusals_beyond(HALF)
    }

    /// Whether, over the last second, more was refused than a dependency
    /// failing `random_share` at random would refuse, beyond chance.
    pub(crate) fn shows_refusals_beyond(&self, random_share: f64) -> bool {
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
/// At a share of a half it is the K = 2 test (refusals outnumber
/// acceptances beyond chance); at none, any refusal is beyond it.
pub(crate) fn beyond_random(accepted: f64, refused: f64, random_share: f64) -> bool {
    let answered = accepted + refused;
    let expected = random_share * answered;
    let spread = (answered * random_share * (1.0 - random_share)).sqrt();
    refused - expected > BEYOND_CHANCE * spread
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
        answers.refused(50, t0);
        assert!(
            answers.shows_overload(),
            "90 and 140: beyond three standard deviations"
        );
        let mut down = Answers::new(t0);
        down.refused(9, t0);
        assert!(!down.shows_overload(), "nine refusals could be chance");
        down.refused(1, t0);
        assert!(down.shows_overload(), "ten and nothing accepted are not");
    }
}
