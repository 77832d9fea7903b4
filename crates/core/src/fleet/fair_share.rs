//! Dividing a rate among processes by what each wants: max-min fairness
//! (water-filling), as Doorman's FAIR_SHARE divides a resource. Whoever
//! wants less than an equal part gets what it wants; the rest share what
//! remains equally. A process that claims to want everything gets no more
//! than those that truly want more than their part.

/// The water level for `total` among `wants`: each gets `min(want, level)`,
/// and those parts add up to `total` unless everyone is satisfied (then the
/// level is the largest want). `wants` are sorted here; `scratch` avoids an
/// allocation per call.
pub fn level(total: f64, wants: impl Iterator<Item = f64>, scratch: &mut Vec<(f64, u32)>) -> f64 {
    level_of_groups(total, wants.map(|want| (want, 1)), scratch)
}

/// [`level`] among groups of processes, each `(want, members)`: `members`
/// processes that each want `want`. A daemon replica reports its processes
/// this way (their mean want and how many they are), and the replicas
/// divide a fleet's rate among themselves as Doorman's intermediate servers
/// do, by their processes' aggregated demand.
pub fn level_of_groups(
    total: f64,
    groups: impl Iterator<Item = (f64, u32)>,
    scratch: &mut Vec<(f64, u32)>,
) -> f64 {
    scratch.clear();
    scratch.extend(
        groups
            .filter(|&(_, members)| members > 0)
            .map(|(w, members)| (if w.is_finite() { w.max(0.0) } else { 0.0 }, members)),
    );
    scratch.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut left = total.max(0.0);
    let mut count: f64 = scratch.iter().map(|&(_, members)| f64::from(members)).sum();
    for &(want, members) in scratch.iter() {
        let equal = left / count;
        if want > equal {
            return equal;
        }
        left -= want * f64::from(members);
        count -= f64::from(members);
    }
    scratch.last().map_or(0.0, |&(want, _)| want)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn level_of(total: f64, wants: &[f64]) -> f64 {
        level(total, wants.iter().copied(), &mut Vec::new())
    }

    #[test]
    fn a_group_divides_as_its_members_would_one_by_one() {
        let groups = [(10.0, 10), (100.0, 1)];
        let grouped = level_of_groups(100.0, groups.iter().copied(), &mut Vec::new());
        let mut one_by_one = vec![10.0; 10];
        one_by_one.push(100.0);
        assert_eq!(grouped, level_of(100.0, &one_by_one));
        assert!((grouped - 100.0 / 11.0).abs() < 1e-12, "{grouped}");
        assert_eq!(
            level_of_groups(5.0, [(3.0, 0), (1.0, 5)].into_iter(), &mut Vec::new()),
            1.0,
            "an empty group wants nothing"
        );
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
        fn groups_agree_with_their_members_one_by_one(
            total in 0.0..10_000.0f64,
            groups in proptest::collection::vec((0.0..1_000.0f64, 0u32..20), 1..20),
        ) {
            let grouped = level_of_groups(total, groups.iter().copied(), &mut Vec::new());
            let members: Vec<f64> = groups
                .iter()
                .flat_map(|&(want, n)| std::iter::repeat_n(want, n as usize))
                .collect();
            let reference = level_of(total, &members);
            prop_assert!((grouped - reference).abs() <= 1e-9 * (1.0 + reference), "{grouped} vs {reference}");
        }

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
