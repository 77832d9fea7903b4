//! Whether a fleet's refusals have gone beyond what failure at random
//! explains, weighed answer by answer as reports come: Page's CUSUM test
//! of the share refused against the share taken to be random.
//!
//! A test over a window, run at every report, finds an excess by chance
//! many times a minute at a dependency failing half at random; run once a
//! second, it sees a brownout up to a second late, while a fleet's retries
//! pile onto it unpaced. The CUSUM test weighs each answer as it comes and
//! says so as soon as the evidence suffices: thirty refusals in a row, or
//! about 150 answers with two thirds refused, while a dependency failing
//! exactly half at random (the most that is taken for random) sets it off
//! about once in 500,000 answers (a false alarm costs a trial: see the
//! `trial` module).

/// Above the random share, the share whose likelihood the test weighs
/// against it: refusals this much past it are an excess.
const EXCESS: f64 = 0.2;
/// The evidence, in log-likelihood, that says there is an excess: ten
/// (odds of e¹⁰ to one) for the numbers above.
const ENOUGH: f64 = 10.0;

/// The test of one fleet's law.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Excess {
    /// The evidence so far, never below none.
    evidence: f64,
}

impl Excess {
    /// Weighs `accepted` and `refused` answers against `random_share`;
    /// whether the refusals now show an excess (the evidence starts again).
    pub(super) fn weigh(&mut self, accepted: f64, refused: f64, random_share: f64) -> bool {
        let random = random_share.clamp(0.01, 0.5);
        let excess = (random + EXCESS).min(0.95);
        let per_refusal = (excess / random).ln();
        let per_acceptance = ((1.0 - excess) / (1.0 - random)).ln();
        self.evidence = (self.evidence + refused * per_refusal + accepted * per_acceptance).max(0.0);
        let shown = self.evidence > ENOUGH;
        if shown {
            self.evidence = 0.0;
        }
        shown
    }

    /// Starts again with no evidence.
    pub(super) fn reset(&mut self) {
        self.evidence = 0.0;
    }

    /// The evidence so far, as a handover carries it.
    pub(super) fn evidence(&self) -> f64 {
        self.evidence
    }

    /// The test with `evidence` so far, from a handover.
    pub(super) fn with_evidence(evidence: f64) -> Self {
        Self {
            evidence: evidence.max(0.0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::SmallRng;
    use rand::{Rng, SeedableRng};

    /// Answers, one report of ten at a time, until the test says excess.
    fn answers_until_shown(share: f64, random_share: f64, seed: u64, most: u32) -> Option<u32> {
        let mut rng = SmallRng::seed_from_u64(seed);
        let mut excess = Excess::default();
        for report in 0..most / 10 {
            let refused = (0..10).filter(|_| rng.random::<f64>() < share).count() as f64;
            if excess.weigh(10.0 - refused, refused, random_share) {
                return Some(report * 10 + 10);
            }
        }
        None
    }

    #[test]
    fn thirty_refusals_in_a_row_show_an_excess_over_half() {
        let mut excess = Excess::default();
        assert!(!excess.weigh(0.0, 28.0, 0.5));
        assert!(excess.weigh(0.0, 2.0, 0.5), "30 × ln(0.7 / 0.5) > 10");
    }

    #[test]
    fn two_thirds_refused_show_it_within_a_few_hundred_answers() {
        for seed in 0..20 {
            let shown = answers_until_shown(2.0 / 3.0, 0.5, seed, 1_000);
            assert!(shown.is_some(), "seed {seed}");
        }
    }

    #[test]
    fn half_failed_at_random_seldom_shows_it() {
        // A minute at a thousand answers a second, ten times over.
        let shown = (0..10)
            .filter(|&seed| answers_until_shown(0.5, 0.5, seed, 60_000).is_some())
            .count();
        assert!(shown <= 1, "{shown} of 10 minutes");
    }

    #[test]
    fn a_tenth_at_random_learned_then_a_third_refused_is_an_excess() {
        assert_eq!(answers_until_shown(0.1, 0.1, 1, 60_000), None);
        assert!(answers_until_shown(1.0 / 3.0, 0.1, 1, 1_000).is_some());
    }
}
