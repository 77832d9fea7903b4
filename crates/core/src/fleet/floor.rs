//! A fleet-scoped retry budget's floor, divided among the processes that
//! call a dependency in proportion to their requests. A budget's ratio is
//! already fleet-wide (20 % of each process's requests adds up to 20 % of
//! the fleet's); its floor is not (10 retries a second in each of 200
//! processes is 2,000 a second, whatever the traffic). Dividing the floor
//! makes the parts add up to the fleet's.
//!
//! A claim is bounded: requests above [`MAX_CLAIM`] times the median
//! process's count as that much, so one process reporting more than it
//! sends takes a bounded part, not the others' floors.

/// The most a process's requests count for, as a multiple of the median
/// process's: a fleet's processes share its traffic within a few times of
/// each other behind a load balancer.
pub const MAX_CLAIM: f64 = 4.0;

/// Each process's part of `floor` retries a second, from the requests each
/// made in the same interval, in their order. With no requests anywhere,
/// equal parts; the parts add up to `floor`.
pub fn divide(floor: f64, requests: &[u64]) -> Vec<f64> {
    if requests.is_empty() {
        return Vec::new();
    }
    let mut sorted: Vec<u64> = requests.to_vec();
    sorted.sort_unstable();
    let median = sorted[sorted.len() / 2] as f64;
    let counted: Vec<f64> = requests
        .iter()
        .map(|&r| (r as f64).min(median * MAX_CLAIM))
        .collect();
    let total: f64 = counted.iter().sum();
    if total <= 0.0 {
        let part = floor / requests.len() as f64;
        return vec![part; requests.len()];
    }
    counted.iter().map(|c| floor * c / total).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: &[f64], b: &[f64]) -> bool {
        a.len() == b.len() && a.iter().zip(b).all(|(x, y)| (x - y).abs() < 1e-9)
    }

    #[test]
    fn parts_follow_the_requests_and_add_up_to_the_floor() {
        let parts = divide(10.0, &[100, 300, 100, 500]);
        assert!(close(&parts, &[1.0, 3.0, 1.0, 5.0]), "{parts:?}");
        assert!((parts.iter().sum::<f64>() - 10.0).abs() < 1e-9);
        assert!(
            close(&divide(200.0, &[5; 200]), &[1.0; 200]),
            "an even fleet: equal parts"
        );
    }

    #[test]
    fn with_no_traffic_the_floor_is_shared_equally_and_nobody_is_nothing() {
        assert!(close(&divide(9.0, &[0, 0, 0]), &[3.0, 3.0, 3.0]));
        assert!(divide(9.0, &[]).is_empty());
    }

    #[test]
    fn a_process_claiming_far_more_than_the_others_counts_as_four_times_the_median() {
        let parts = divide(10.0, &[100, 100, 100, 1_000_000]);
        assert!(
            close(&parts, &[10.0 / 7.0, 10.0 / 7.0, 10.0 / 7.0, 40.0 / 7.0]),
            "{parts:?}"
        );
    }
}
