//! Tests of a fleet budget's floor divided among processes by their requests.

use super::*;

fn close(a: &[f64], b: &[f64]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| (x - y).abs() < 1e-9)
}

fn secs(s: f64) -> Duration {
    Duration::from_secs_f64(s)
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

/// Every process of `rates` (requests a second) reports every 10 s from
/// `t0`, in order; the parts of the last round.
fn rounds(division: &mut Division<usize>, rates: &[u64], rounds: u32, t0: Instant) -> Vec<Part> {
    let mut parts = Vec::new();
    for round in 0..rounds {
        parts.clear();
        let at = t0 + Duration::from_secs(10 * u64::from(round));
        for (p, rate) in rates.iter().enumerate() {
            let span = if round == 0 { 1 } else { 10 };
            division.report(&p, rate * span, None, at);
            parts.push(division.part(&p, 10.0, Claims::default(), at));
        }
    }
    parts
}

#[test]
fn a_fleet_heard_from_twice_has_parts_that_add_up_to_the_floor() {
    let t0 = Instant::now();
    let mut division = Division::new();
    let first = rounds(&mut division, &[5; 200], 1, t0);
    let handed: f64 = first.iter().map(|p| p.per_second).sum();
    assert!(
        handed > 10.0 && handed < 10.0 * 6.0,
        "the first round hands out more (each process is divided among those heard so far), \
         at most the harmonic sum of the fleet: {handed}"
    );
    // At each process's second report, every claim is known.
    let mut division = Division::new();
    let second = rounds(&mut division, &[5; 200], 2, t0);
    let handed: f64 = second.iter().map(|p| p.per_second).sum();
    assert!((handed - 10.0).abs() < 1e-6, "{handed}");
    assert!(second.iter().all(|p| p.processes == 200));
}

#[test]
fn a_claim_is_a_rate_over_the_time_between_reports() {
    let t0 = Instant::now();
    let mut division = Division::new();
    division.report(&"busy", 10, None, t0);
    division.report(&"quiet", 1, None, t0);
    let later = t0 + secs(10.0);
    division.report(&"busy", 300, None, later);
    division.report(&"quiet", 100, None, later);
    let busy = division.part(&"busy", 8.0, Claims::default(), later).per_second;
    let quiet = division.part(&"quiet", 8.0, Claims::default(), later).per_second;
    assert!(
        (busy - 6.0).abs() < 1e-9 && (quiet - 2.0).abs() < 1e-9,
        "{busy} {quiet}"
    );
}

#[test]
fn other_replicas_claims_shrink_this_replicas_parts() {
    let t0 = Instant::now();
    let mut division = Division::new();
    division.report(&"a", 50, None, t0);
    let others = Claims {
        requests_per_second: 150.0,
        processes: 3,
    };
    let part = division.part(&"a", 10.0, others, t0);
    assert!((part.per_second - 2.5).abs() < 1e-9, "{part:?}");
    assert_eq!(part.processes, 4);
    assert_eq!(
        division.claims(t0),
        Claims {
            requests_per_second: 50.0,
            processes: 1
        }
    );
}

#[test]
fn a_silent_process_is_forgotten_after_three_intervals_or_thirty_seconds() {
    let t0 = Instant::now();
    let mut division = Division::new();
    division.report(&"gone", 10, None, t0);
    division.report(&"here", 10, None, t0);
    for s in [10.0, 20.0, 29.0] {
        division.report(&"here", 100, None, t0 + secs(s));
    }
    assert_eq!(division.claims(t0 + secs(29.5)).processes, 2, "kept for 30 s");
    division.report(&"here", 100, None, t0 + secs(31.0));
    assert_eq!(division.claims(t0 + secs(31.0)).processes, 1, "forgotten after");
    let part = division.part(&"here", 10.0, Claims::default(), t0 + secs(31.0));
    assert!((part.per_second - 10.0).abs() < 1e-9, "{part:?}");
}

#[test]
fn a_full_division_answers_a_newcomer_an_equal_part_without_keeping_it() {
    let t0 = Instant::now();
    let mut division = Division::new();
    for p in 0..MAX_PROCESSES {
        assert!(division.report(&p, 1, None, t0));
    }
    assert!(!division.report(&MAX_PROCESSES, 1_000_000, None, t0));
    let part = division.part(&MAX_PROCESSES, 10_001.0, Claims::default(), t0);
    assert!((part.per_second - 1.0).abs() < 1e-9, "{part:?}");
    assert_eq!(division.claims(t0).processes, MAX_PROCESSES as u64);
}

#[test]
fn a_local_floor_starts_whole_follows_the_daemon_and_falls_back_to_an_even_part() {
    let mut floor = LocalFloor::new(10.0);
    assert_eq!(floor.initial(), 10.0);
    assert_eq!(
        floor.unreachable(),
        10.0,
        "never heard a fleet size: the whole floor"
    );
    let part = |per_second, processes| Part {
        per_second,
        processes,
    };
    assert_eq!(floor.answered(part(0.25, 40)), 0.25);
    assert_eq!(floor.unreachable(), 0.25, "10 among the 40 last heard of");
    assert_eq!(
        floor.answered(part(50.0, 2)),
        10.0,
        "never above the configured floor"
    );
    assert_eq!(floor.answered(part(-1.0, 0)), 0.0);
    assert_eq!(floor.unreachable(), 10.0, "a fleet of none counts as one");
    assert_eq!(floor.answered(part(f64::NAN, 4)), 2.5);
}

#[test]
fn the_parts_add_up_to_the_floor_however_the_claims_move_between_refreshes() {
    let t0 = Instant::now();
    let mut division = Division::new();
    for p in 0..4 {
        division.report(&p, 10, None, t0);
    }
    assert_eq!(division.claims(t0).processes, 4, "the sum is cached from here on");
    // Each process's second report, 100 ms later: rates ten times the first
    // guess, before the cached sum's refresh.
    let at = t0 + secs(0.1);
    let mut handed = 0.0;
    for p in 0..4 {
        division.report(&p, 1 + p as u64, None, at);
    }
    for p in 0..4 {
        handed += division.part(&p, 10.0, Claims::default(), at).per_second;
    }
    assert!((handed - 10.0).abs() < 1e-9, "{handed}");
}

#[test]
fn processes_joining_between_refreshes_count_in_the_sum_at_once() {
    let t0 = Instant::now();
    let mut division = Division::new();
    division.report(&0, 10, None, t0);
    assert_eq!(division.claims(t0).processes, 1);
    for p in 1..4 {
        division.report(&p, 10, None, t0 + secs(0.1));
    }
    let at = t0 + secs(0.1);
    assert_eq!(
        division.claims(at),
        Claims {
            requests_per_second: 40.0,
            processes: 4
        }
    );
    let handed: f64 = (0..4)
        .map(|p| division.part(&p, 10.0, Claims::default(), at).per_second)
        .sum();
    assert!((handed - 10.0).abs() < 1e-9, "{handed}");
}

#[test]
fn claims_that_all_went_to_nothing_share_the_floor_equally() {
    let t0 = Instant::now();
    let mut division = Division::new();
    for p in 0..3 {
        division.report(&p, 7, None, t0);
    }
    division.claims(t0);
    for p in 0..3 {
        division.report(&p, 0, None, t0 + secs(0.3));
    }
    let part = division.part(&0, 9.0, Claims::default(), t0 + secs(0.3));
    assert!((part.per_second - 3.0).abs() < 1e-9, "{part:?}");
}

#[test]
fn a_span_the_sender_states_beats_the_time_between_arrivals() {
    let t0 = Instant::now();
    let mut division = Division::new();
    // Both report 10 s of traffic; b's report comes late, as a batch kept
    // through an outage and sent with the next one, 1 ms apart.
    division.report(&"a", 100, Some(secs(10.0)), t0);
    division.report(&"b", 100, Some(secs(10.0)), t0);
    division.report(&"b", 100, Some(secs(10.0)), t0 + secs(0.001));
    let a = division.part(&"a", 10.0, Claims::default(), t0 + secs(0.001));
    assert!((a.per_second - 5.0).abs() < 1e-9, "{a:?}");
    let mut by_arrival = Division::new();
    by_arrival.report(&"a", 100, None, t0);
    by_arrival.report(&"b", 100, None, t0);
    by_arrival.report(&"b", 100, None, t0 + secs(0.001));
    let a = by_arrival.part(&"a", 10.0, Claims::default(), t0 + secs(0.001));
    assert!(
        a.per_second < 2.5,
        "without a span b's claim is its 100 over a millisecond, capped: {a:?}"
    );
}
