//! Dividing a rate among processes by what each wants: max-min fairness
//! (water-filling), as Doorman's FAIR_SHARE divides a resource. Whoever
//! wants less than an equal part gets what it wants; the rest share what
//! remains equally. A process that claims to want everything gets no more
//! than those that truly want more than their part.

/// The water level for `total` among `wants`: each gets `min(want, level)`,
/// and those parts add up to `total` unless everyone is satisfied (then the
/// level is the largest want). `wants` are sorted here; `scratch` avoids an
/// allocation per call.
pub fn level(total: f64, wants: impl Iterator<Item = f64>, scratch: &mut Vec<f64>) -> f64 {
    scratch.clear();
    scratch.extend(wants.map(|w| if w.is_finite() { w.max(0.0) } else { 0.0 }));
    scratch.sort_by(f64::total_cmp);
    let mut left = total.max(0.0);
    let mut count = scratch.len();
    for &want in scratch.iter() {
        let equal = left / count as f64;
        if want > equal {
            return equal;
        }
        left -= want;
        count -= 1;
    }
    scratch.last().copied().unwrap_or(0.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn level_of(total: f64, wants: &[f64]) -> f64 {
        level(total, wants.iter().copied(), &mut Vec::new())
    }

    #[test]
    fn small_wants_are_met_and_the_rest_is_shared_equally() {
        assert_eq!(level_of(90.0, &[10.0, 100.0, 100.0]), 40.0);
        assert_eq!(level_of(90.0, &[30.0, 30.0, 30.0]), 30.0);
        assert_eq!(level_of(90.0, &[10.0, 20.0]), 20.0, "everyone satisfied");
        assert_eq!(level_of(90.0, &[]), 0.0);
        assert_eq!(
            level_of(9.0, &[f64::INFINITY, 1.0]),
            1.0,
            "a want that is not a number wants nothing"
        );
    }

    #[test]
    fn claiming_everything_gets_no_more_than_an_honest_large_want() {
        let honest = level_of(100.0, &[50.0, 50.0, 50.0, 50.0]);
        let with_liar = level_of(100.0, &[50.0, 50.0, 50.0, 1e12]);
        assert_eq!(honest, 25.0);
        assert_eq!(with_liar, 25.0);
    }

    /// The reference: raise the level in tiny steps until the parts fill the total.
    fn stepped_level(total: f64, wants: &[f64]) -> f64 {
        let parts = |level: f64| wants.iter().map(|w| w.min(level)).sum::<f64>();
        let most = wants.iter().copied().fold(0.0, f64::max);
        let (mut lo, mut hi) = (0.0, most);
        for _ in 0..200 {
            let mid = (lo + hi) / 2.0;
            if parts(mid) < total {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        hi
    }

    proptest! {
        #[test]
        fn agrees_with_a_bisection_of_the_level(
            total in 0.0..10_000.0f64,
            wants in proptest::collection::vec(0.0..1_000.0f64, 1..50),
        ) {
            let ours = level_of(total, &wants);
            let reference = stepped_level(total, &wants);
            prop_assert!((ours - reference).abs() <= 1e-6 * (1.0 + reference), "{ours} vs {reference}");
            let given: f64 = wants.iter().map(|w| w.min(ours)).sum();
            let wanted: f64 = wants.iter().sum();
            prop_assert!((given - total.min(wanted)).abs() <= 1e-6 * (1.0 + total), "{given}");
        }
    }
}
