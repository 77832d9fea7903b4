//! Tests of fleet pacing: one rate learnt from every process's outcomes, probing, and its division
//! among the processes that ask.

use super::*;
use crate::gate::rate::SETTLE;
use crate::gate::Judgement;
use crate::policy::{GatePolicy, RetryPolicy};
use proptest::prelude::*;

/// A policy whose gate is on under `overloadWhen: any-refusal` (every
/// refusal says overload), otherwise at its defaults.
fn gated() -> ValidPolicy {
    ValidPolicy::try_from(RetryPolicy {
        gate: GatePolicy {
            enabled: true,
            overload_when: crate::policy::OverloadWhen::AnyRefusal,
            ..GatePolicy::default()
        },
        ..RetryPolicy::default()
    })
    .unwrap()
}

fn controller(now: Instant) -> FleetController<u32> {
    FleetController::new_at(&gated(), now)
}

fn tally(sent: u64, accepted: u64, overloaded: u64, waiting: u64) -> Tally {
    Tally {
        sent,
        accepted,
        overloaded,
        timed_out: 0,
        waiting,
        watching: false,
        ..Tally::default()
    }
}

/// One round: every process in `who` asks at `now` with what `report` says; the grants.
fn round(
    fleet: &mut FleetController<u32>,
    who: std::ops::Range<u32>,
    now: Instant,
    report: impl Fn(u32) -> Tally,
) -> Vec<f64> {
    who.map(|p| fleet.ask_at(p, report(p), now).rate).collect()
}

#[test]
fn while_nothing_is_accepted_the_whole_fleet_probes_as_a_few_processes_would() {
    let t0 = Instant::now();
    let mut fleet = controller(t0);
    let mut grants = Vec::new();
    for i in 0..50 {
        let now = t0 + ASK_EVERY * i;
        grants = round(&mut fleet, 0..200, now, |p| tally(0, 0, u64::from(p % 7 == 0), 5));
    }
    assert_eq!(
        fleet.rate(),
        PROBERS * 0.5,
        "{PROBERS} processes' minRate, not 200"
    );
    assert_eq!(fleet.members(), 200);
    let total: f64 = grants.iter().sum();
    let probe = fleet.rate();
    assert!((probe..=probe * (1.0 + FLOOR) + 1e-9).contains(&total), "{total}");
    let one = grants.iter().filter(|g| **g >= probe).count();
    assert_eq!(one, 1, "one process probes for all: {grants:?}");

    let mut pair = controller(t0);
    round(&mut pair, 0..2, t0, |_| tally(0, 0, 1, 5));
    assert_eq!(pair.rate(), 2.0 * 0.5, "two processes probe as two would");
}

#[test]
fn the_fleets_probes_never_pass_max_rate() {
    let t0 = Instant::now();
    let low_ceiling = ValidPolicy::try_from(RetryPolicy {
        gate: GatePolicy {
            enabled: true,
            overload_when: crate::policy::OverloadWhen::AnyRefusal,
            min_rate: 0.5,
            max_rate: 2.0,
            ..GatePolicy::default()
        },
        ..RetryPolicy::default()
    })
    .unwrap();
    let mut fleet = FleetController::new_at(&low_ceiling, t0);
    let grants = round(&mut fleet, 0..20, t0, |_| tally(0, 0, 1, 5));
    assert_eq!(fleet.rate(), 2.0, "eight probers' 4 a second, held to maxRate");
    let total: f64 = grants.iter().sum();
    assert!(total <= 2.0 * (1.0 + FLOOR) + 1e-9, "{grants:?}");
}

#[test]
fn accepted_attempts_from_every_process_grow_one_rate() {
    let t0 = Instant::now();
    let ramp = GatePolicy::default().ramp;
    let four_accepted = |p| tally(1, u64::from(p < 4), 0, 10);
    // Down for a second, then four accepted.
    let mut fleet = controller(t0);
    round(&mut fleet, 0..100, t0, |_| tally(0, 0, 1, 10));
    round(&mut fleet, 0..100, t0 + Duration::from_secs(1), four_accepted);
    assert_eq!(
        fleet.rate(),
        FIRST_WINDOW / ROUND.as_secs_f64() + ramp * 3.0,
        "the first acceptance opens the first window, then ramp per accepted attempt, fleet-wide"
    );
    // Accepting again within a second of its first refusal, as in a brownout.
    let mut fleet = controller(t0);
    round(&mut fleet, 0..100, t0, |_| tally(0, 0, 1, 10));
    round(&mut fleet, 0..100, t0 + ASK_EVERY, four_accepted);
    assert_eq!(
        fleet.rate(),
        PROBERS * 0.5 + ramp * 4.0,
        "slow start from the probe rate: what it delivers says more than a window"
    );
}

/// A line too long for the first window opens to a share of it: 100
/// processes with 1,000 callers waiting each open at 12,000 a second, not
/// at the 120 a fleet of 1,000 callers opens at; one process that claims a
/// line it does not have counts for four times the median's, no more.
#[test]
fn the_first_window_follows_the_fleets_line() {
    let t0 = Instant::now();
    let back = t0 + Duration::from_secs(1);
    let opened = |waiting: &dyn Fn(u32) -> u64| {
        let mut fleet = controller(t0);
        round(&mut fleet, 0..100, t0, |p| tally(0, 0, 1, waiting(p)));
        round(&mut fleet, 0..100, back, |p| {
            tally(1, u64::from(p == 0), 0, waiting(p))
        });
        fleet.rate()
    };
    let long = opened(&|_| 1_000);
    assert!((long - 0.12 * 100_000.0).abs() < 1.0, "{long}");
    let short = opened(&|_| 10);
    assert_eq!(
        short,
        FIRST_WINDOW / ROUND.as_secs_f64(),
        "a short line: the first window"
    );
    let one_liar = opened(&|p| if p == 7 { 1_000_000_000 } else { 1_000 });
    assert!((one_liar - 0.12 * (99_000.0 + 4_000.0)).abs() < 1.0, "{one_liar}");
}

/// Three processes asking of a dependency that has accepted, at 90 a second.
fn three_at_ninety(t0: Instant) -> FleetController<u32> {
    let mut fleet = controller(t0);
    round(&mut fleet, 0..3, t0, |_| tally(0, 0, 1, 0));
    let policy = fleet.law.policy.clone();
    fleet.law.rate.accepted_many(&policy, 1, t0);
    fleet.law.rate.now = 90.0;
    fleet
}

/// Process `p`, which sends all it was granted (`previous`) over an ask's
/// 100 ms and has a long line.
fn sending_its_grant(previous: &[f64], p: u32) -> Tally {
    let sent = previous.get(p as usize).map_or(0.0, |g| g * 0.1).floor() as u64;
    tally(sent, 0, 0, 1000)
}

#[test]
fn processes_that_want_less_than_a_part_get_it_and_the_rest_share_equally() {
    let t0 = Instant::now();
    let mut fleet = three_at_ninety(t0);
    let mut grants = Vec::new();
    for i in 1..=20 {
        // Process 0 needs 5 a second; 1 and 2 send all they are granted and have long lines.
        let previous = grants.clone();
        grants = round(&mut fleet, 0..3, t0 + ASK_EVERY * i, |p| match p {
            0 => tally(0, 0, 0, 5),
            p => sending_its_grant(&previous, p),
        });
    }
    assert!((grants[0] - 5.0).abs() < 1e-9, "{grants:?}");
    assert!(
        (grants[1] - 42.5).abs() < 1e-9 && (grants[2] - 42.5).abs() < 1e-9,
        "{grants:?}"
    );
}

#[test]
fn a_scarce_rate_goes_to_the_critical_calls_first_and_then_by_process() {
    let t0 = Instant::now();
    let mut fleet = three_at_ninety(t0);
    let asking = |previous: &[f64], p: u32, demand: [f64; 3]| Tally {
        demand,
        ..sending_its_grant(previous, p)
    };
    let mut grants: Vec<f64> = Vec::new();
    for i in 1..=20 {
        // Process 0's calls are critical, 1's default, 2's sheddable.
        let previous = grants.clone();
        grants = round(&mut fleet, 0..3, t0 + ASK_EVERY * i, |p| {
            let mut demand = [0.0; 3];
            demand[p as usize] = 100.0;
            asking(&previous, p, demand)
        });
    }
    assert_eq!(
        grants,
        [90.0, 3.0, 3.0],
        "the critical calls want the whole rate and get it; the others their floor (a tenth of an equal part)"
    );
    assert_eq!(fleet.class_rates_at(t0 + ASK_EVERY * 20), [90.0, 0.0, 0.0]);
    // Without classes, the same wants divide equally.
    for i in 21..=60 {
        let previous = grants.clone();
        grants = round(&mut fleet, 0..3, t0 + ASK_EVERY * i, |p| {
            asking(&previous, p, [0.0, 100.0, 0.0])
        });
    }
    assert!(grants.iter().all(|g| (g - 30.0).abs() < 1e-6), "{grants:?}");
}

#[test]
fn a_process_that_has_sent_its_last_call_wants_nothing_and_the_rate_goes_to_the_lines() {
    let t0 = Instant::now();
    let mut fleet = controller(t0);
    round(&mut fleet, 0..20, t0, |_| tally(0, 0, 1, 1));
    let policy = fleet.law.policy.clone();
    fleet.law.rate.accepted_many(&policy, 1, t0);
    fleet.law.rate.now = 100.0;
    // Processes 0-9 sent their one call and it was accepted; 10-19 still wait.
    let served_or_waiting = |p| {
        if p < 10 {
            tally(1, 1, 0, 0)
        } else {
            tally(0, 0, 0, 1)
        }
    };
    round(&mut fleet, 0..20, t0 + ASK_EVERY, served_or_waiting);
    let grants = round(&mut fleet, 0..20, t0 + ASK_EVERY * 2, |p| {
        if p < 10 {
            tally(0, 0, 0, 0)
        } else {
            tally(0, 0, 0, 1)
        }
    });
    let waiting: f64 = grants[10..].iter().sum();
    assert!(
        waiting >= 0.9 * fleet.rate(),
        "{waiting} of {}: {grants:?}",
        fleet.rate()
    );
}

#[test]
fn a_lying_process_gets_no_more_than_an_honest_one_that_wants_more_than_its_part() {
    let t0 = Instant::now();
    let mut fleet = controller(t0);
    let mut granted = [0.5_f64; 10];
    let mut now = t0;
    for _ in 0..100 {
        now += ASK_EVERY;
        let before = fleet.rate();
        for p in 0..10u32 {
            let report = if p == 9 {
                // Claims a huge line, a huge send rate and everything accepted.
                tally(u64::MAX, u64::MAX, 0, u64::MAX)
            } else {
                // Sends what it was granted, all accepted, and has a long line.
                let sent = (granted[p as usize] * 0.1).floor() as u64;
                tally(sent, sent, 0, 10_000)
            };
            granted[p as usize] = fleet.ask_at(p, report, now).rate;
        }
        let grown = fleet.rate() - before;
        // The first window opens once, at the first acceptance, however it is claimed.
        let first = if before <= PROBERS * 0.5 {
            FIRST_WINDOW / ROUND.as_secs_f64()
        } else {
            0.0
        };
        assert!(
            grown <= 8.0 * 2.0 * before * 0.1 * 10.0 + 8.0 * 10.0 + first + 1e-6,
            "{grown} from {before}"
        );
    }
    let honest = granted[..9].iter().copied().fold(f64::INFINITY, f64::min);
    assert!(
        granted[9] <= honest * 1.000_001,
        "liar {} vs honest {honest}",
        granted[9]
    );
}

#[test]
fn processes_that_stop_asking_are_forgotten() {
    let t0 = Instant::now();
    let mut fleet = controller(t0);
    round(&mut fleet, 0..10, t0, |_| tally(0, 0, 1, 1));
    assert_eq!(fleet.members(), 10);
    fleet.ask_at(
        0,
        tally(0, 0, 0, 1),
        t0 + Feedback::default().forget_after() + DIVIDE_EVERY,
    );
    assert_eq!(fleet.members(), 1);
}

proptest! {
    /// One round's grants add up to no more than the fleet's rate (plus the
    /// floors), whatever the processes report; each grant is a part of the
    /// rate at the time it is given, so the bound is the highest rate of the round.
    #[test]
    fn a_rounds_grants_add_up_to_the_fleets_rate(
        reports in proptest::collection::vec((0u64..1000, 0u64..1000, 0u64..3, 0u64..10_000), 1..40),
        rounds in 1usize..20,
        judged_by_share in any::<bool>(),
    ) {
        let t0 = Instant::now();
        let policy = if judged_by_share { most_refused() } else { gated() };
        let mut fleet = FleetController::new_at(&policy, t0);
        let n = reports.len() as u32;
        for r in 0..rounds {
            let now = t0 + ASK_EVERY * (r as u32 + 1);
            let mut highest = fleet.rate();
            let mut grants = Vec::new();
            for p in 0..n {
                let (sent, accepted, overloaded, waiting) = reports[p as usize];
                grants.push(fleet.ask_at(p, tally(sent, accepted.min(sent), overloaded, waiting), now).rate);
                highest = highest.max(fleet.rate());
            }
            let rate = highest;
            let total: f64 = grants.iter().sum();
            prop_assert!(grants.iter().all(|g| g.is_finite() && *g > 0.0));
            prop_assert!(total <= rate * (1.0 + 2.0 * FLOOR) + 1e-6, "{total} of {rate}");
        }
    }
}

#[test]
fn while_probing_one_process_probes_for_the_fleet() {
    let t0 = Instant::now();
    let mut fleet = controller(t0);
    let grants = round(&mut fleet, 0..50, t0, |_| tally(0, 0, 1, 3));
    assert_eq!(grants[0], 0.5, "the first to ask probes");
    assert!(
        grants[1..].iter().all(|g| *g <= FLOOR * fleet.rate() / 2.0),
        "at most the floor of an equal part: {grants:?}"
    );
    // The prober stops asking: another takes over once it is forgotten.
    let later = t0 + Feedback::default().forget_after() + DIVIDE_EVERY;
    let grants = round(&mut fleet, 1..50, later, |_| tally(0, 0, 1, 3));
    let probe = fleet.rate();
    assert_eq!(grants.iter().filter(|g| **g == probe).count(), 1, "{grants:?}");
}

#[test]
fn slow_start_at_most_doubles_per_round_once_past_the_first_window() {
    let t0 = Instant::now();
    let mut fleet = controller(t0);
    fleet.ask_at(0, tally(0, 0, 1, 100), t0);
    // Far more accepted than a round's growth allows, asked for every
    // 50 ms (a daemon nearby: the rounds are 250 ms), the rate read at the
    // end of each round.
    let step = ROUND / 5;
    let mut now = t0 + Duration::from_secs(1);
    let mut rates = Vec::new();
    for _ in 0..8 {
        for _ in 0..5 {
            now += step;
            let granted = fleet.members[&0].granted;
            let sent = (2.0 * granted * step.as_secs_f64()).ceil() as u64;
            fleet.ask_at(0, tally(sent, sent, 0, 100), now);
        }
        rates.push(fleet.rate());
    }
    assert_eq!(fleet.feedback().interval(), ASK_EVERY, "asks nearby");
    // Each report claims twice its grant accepted: 8 per accepted attempt
    // would more than double the rate every round.
    let first_window = FIRST_WINDOW / ROUND.as_secs_f64();
    assert!(
        rates[0] <= 2.0 * first_window,
        "the first window's round: {rates:?}"
    );
    assert_eq!(rates[7], 2.0 * rates[6], "doubling: {rates:?}");
    for pair in rates.windows(2) {
        assert!(
            pair[1] <= (2.0 * pair[0]).max(pair[0] + first_window) + 1e-9,
            "{rates:?}"
        );
    }
}

#[test]
fn a_timeout_cuts_once_for_the_attempts_sent_before_the_cut() {
    let t0 = Instant::now();
    let policy = ValidPolicy::try_from(RetryPolicy {
        per_try_timeout: Some(Duration::from_secs(3)),
        gate: GatePolicy {
            enabled: true,
            overload_when: crate::policy::OverloadWhen::AnyRefusal,
            ..GatePolicy::default()
        },
        ..RetryPolicy::default()
    })
    .unwrap();
    let mut fleet = FleetController::new_at(&policy, t0);
    // From the first timeout on, 20 a second are accepted, not 50.
    let timed_out = Tally {
        overloaded: 1,
        timed_out: 1,
        ..tally(2, 2, 0, 10)
    };
    // Five seconds of answers, then the first timeout: one cut.
    let mut now = t0;
    for _ in 0..50 {
        now += ASK_EVERY;
        fleet.ask_at(0, tally(5, 5, 0, 10), now);
    }
    fleet.ask_at(0, timed_out, now + ASK_EVERY);
    let cut = fleet.rate();
    // Timeouts for the next three seconds are of attempts sent before the
    // cut (each was sent its 3 s timeout before its report): no cut again.
    for i in 2..32 {
        fleet.ask_at(0, timed_out, now + ASK_EVERY * i);
        assert!(
            fleet.rate() >= cut,
            "cut again {i} asks later: {} < {cut}",
            fleet.rate()
        );
    }
    // A timeout of an attempt sent after the cut cuts.
    fleet.ask_at(0, timed_out, now + ASK_EVERY * 32);
    assert!(
        fleet.rate() < cut,
        "{} after a timeout sent after the cut",
        fleet.rate()
    );
}

/// A fleet of one process in slow start, reporting `accepted` every ask
/// for two seconds (the first asks' claims are bounded by the probe rate,
/// and are out of the last second by the end); the controller and the time.
fn in_slow_start(accepted: u64) -> (FleetController<u32>, Instant, Instant) {
    let t0 = Instant::now();
    let mut fleet = controller(t0);
    fleet.ask_at(0, tally(0, 0, 1, 1000), t0);
    let mut now = t0;
    for _ in 0..20 {
        now += ASK_EVERY;
        fleet.ask_at(0, tally(accepted, accepted, 0, 1000), now);
    }
    (fleet, t0, now)
}

/// [`in_slow_start`] at 200 a second accepted, then refused: slow start
/// ends at what was accepted. The controller and the time of the cut.
fn cut_at_what_was_accepted() -> (FleetController<u32>, Instant) {
    let (mut fleet, _, mut now) = in_slow_start(20);
    now += ASK_EVERY;
    fleet.ask_at(0, tally(20, 20, 20, 1000), now);
    (fleet, now)
}

/// One ask, a round after `now`, from a process with a long line that sent
/// the fleet's whole rate, all of it `accepted` or all refused; the time.
fn ask_sending_its_rate(fleet: &mut FleetController<u32>, now: Instant, accepted: bool) -> Instant {
    let now = now + ASK_EVERY;
    let sent = (fleet.rate() * ASK_EVERY.as_secs_f64()).round() as u64;
    let (yes, no) = if accepted { (sent, 0) } else { (0, sent) };
    fleet.ask_at(0, tally(sent, yes, no, 1000), now);
    now
}

#[test]
fn after_a_refusal_the_fleet_probes_from_what_was_delivered_not_back_to_the_refused_rate() {
    // 200 a second accepted, and the rate far past it.
    let (mut fleet, t0, mut now) = in_slow_start(20);
    let refused_at = fleet.rate();
    assert!(refused_at > 400.0, "{refused_at}");
    now += ASK_EVERY;
    fleet.ask_at(0, tally(20, 20, 20, 1000), now);
    let cut = fleet.rate();
    assert_eq!(
        cut, 200.0,
        "slow start ends at the 200 accepted over the last second"
    );
    // A dependency that takes 20 of each ask's attempts and refuses the
    // rest, and a line of callers: the fleet probes above the cut, a
    // probing gain at a time, and a refusal brings it back; CUBIC would
    // sit at the cut for k = ∛(200 × 0.3 / 0.4) = 5.3 s, or climb back
    // towards the refused rate.
    let cut_at = now;
    let (mut highest, mut probed) = (cut, false);
    while now < cut_at + Duration::from_secs(5) {
        now += ASK_EVERY;
        let sent = (fleet.rate() * ASK_EVERY.as_secs_f64()).round() as u64;
        let accepted = sent.min(20);
        fleet.ask_at(0, tally(sent, accepted, sent - accepted, 1000), now);
        probed |= fleet.rate() > cut;
        highest = highest.max(fleet.rate());
    }
    assert!(probed, "it probed above the cut while callers waited");
    assert!(
        highest <= cut * law::PROBE_GAIN * law::PROBE_GAIN + 1e-9,
        "{highest} at most two probing gains above what was delivered, not {refused_at}: {:?}",
        now - t0
    );
}

#[test]
fn a_probe_goes_no_higher_than_a_probing_gain_over_what_the_fleet_delivered() {
    let (mut fleet, mut now) = cut_at_what_was_accepted();
    // The fleet sends its whole rate and all is accepted: its probes find
    // room, a probing gain a round.
    for _ in 0..20 {
        now = ask_sending_its_rate(&mut fleet, now, true);
    }
    let found = fleet.rate();
    // Callers still wait, yet the fleet sends only 100 a second: a higher
    // rate would prove nothing until its processes send it, and they
    // would send it at once.
    for _ in 0..50 {
        now += ASK_EVERY;
        fleet.ask_at(0, tally(10, 10, 0, 1000), now);
    }
    assert!(found > law::PROBE_GAIN * 100.0, "{found}");
    assert!(
        fleet.rate() <= found + 1e-9,
        "{} from {found}, against 100 a second delivered",
        fleet.rate()
    );
}

/// Two seconds of everything accepted, from `fleet` at `now`: the rate then.
fn two_seconds_of_room(fleet: &mut FleetController<u32>, mut now: Instant) -> f64 {
    let from = now;
    while now < from + Duration::from_secs(2) {
        now = ask_sending_its_rate(fleet, now, true);
    }
    fleet.rate()
}

#[test]
fn probes_that_find_room_climb_a_probing_gain_a_round_unless_the_limit_refuses_whole_bursts() {
    let (mut fleet, now) = cut_at_what_was_accepted();
    let cut = fleet.rate();
    // Everything accepted: the last round's delivery shows each probe's
    // rate taken at once, where the last second's still holds the cut.
    let climbed = two_seconds_of_room(&mut fleet, now);
    assert!(
        climbed >= cut * law::PROBE_GAIN.powi(3),
        "{climbed} two seconds after a cut at {cut}"
    );

    // A limit that counts what it refuses: after the cut, a second of
    // everything refused. Each crossing costs that, so the climb after it
    // gains on the last second's delivery alone: a probing gain a round
    // over a count that lags the rate.
    let (mut burst_refused, mut now) = cut_at_what_was_accepted();
    for _ in 0..10 {
        now = ask_sending_its_rate(&mut burst_refused, now, false);
    }
    let low = burst_refused.rate();
    for _ in 0..10 {
        now = ask_sending_its_rate(&mut burst_refused, now, true);
    }
    let regrown = burst_refused.rate();
    let slow = two_seconds_of_room(&mut burst_refused, now);
    assert!(
        slow < regrown * law::PROBE_GAIN.powi(3),
        "{slow} two seconds after regrowing to {regrown} from {low}"
    );
}

#[test]
fn a_limit_still_full_from_the_burst_that_cut_the_rate_is_regrown_to_a_round_after_its_refusals_stop() {
    // 200 a second accepted, then a limit that counts what it refuses
    // refuses everything for a second: the cuts follow what it delivers
    // down.
    let (mut fleet, mut now) = cut_at_what_was_accepted();
    let delivered = fleet.rate();
    for _ in 0..10 {
        now = ask_sending_its_rate(&mut fleet, now, false);
    }
    let low = fleet.rate();
    assert!(
        low < 0.5 * delivered,
        "{low}: the refusals cut it far below {delivered}"
    );
    // It takes everything sent again: back to beta × 200 by doubling, a
    // round at a time.
    let beta = fleet.law.policy.beta;
    let stopped = now;
    let mut last = low;
    while fleet.rate() < beta * delivered - 1e-9 {
        now = ask_sending_its_rate(&mut fleet, now, true);
        assert!(
            fleet.rate() <= 2.0 * last + 1e-9,
            "{} after {last}: at most doubled in a round",
            fleet.rate()
        );
        last = fleet.rate();
        assert!(
            now - stopped <= Duration::from_secs(1),
            "{} a second after the refusals stopped, from {low}",
            fleet.rate()
        );
    }
}

#[test]
fn a_fleet_that_wants_no_more_than_its_rate_holds_at_its_cut() {
    let (mut fleet, mut now) = cut_at_what_was_accepted();
    let cut = fleet.rate();
    // Every attempt accepted, nobody waiting: no reason to probe.
    let cut_at = now;
    while now < cut_at + Duration::from_secs(5) {
        now += ASK_EVERY;
        fleet.ask_at(0, tally(20, 20, 0, 0), now);
        assert!(
            fleet.rate() <= cut * 1.001,
            "{} after {:?}",
            fleet.rate(),
            now - cut_at
        );
    }
}

#[test]
fn slow_start_ends_at_what_was_accepted_and_reports_still_on_their_way_raise_it() {
    let (mut fleet, _, mut now) = in_slow_start(10);
    assert!(fleet.rate() > 400.0, "slow start, far ahead: {}", fleet.rate());
    now += ASK_EVERY;
    fleet.ask_at(0, tally(10, 10, 5, 1000), now);
    assert_eq!(
        fleet.rate(),
        100.0,
        "what was accepted over the last second, not 0.7 × the rate"
    );
    // More is accepted over the next asks than the last second's reports
    // said (in a fleet, the reports of other processes, still on their way
    // at the refusal): the estimate rises with them.
    let ended = now;
    for _ in 0..5 {
        now += ASK_EVERY;
        fleet.ask_at(0, tally(20, 20, 0, 1000), now);
    }
    assert_eq!(fleet.rate(), 50.0 + 100.0, "five tenths of 10 and five of 20");
    while now < ended + SETTLE {
        now += ASK_EVERY;
        fleet.ask_at(0, tally(20, 20, 0, 1000), now);
    }
    // Once the rate has settled, it holds at it while the fleet wants no
    // more, as after any refusal.
    let settled = fleet.rate();
    let sent = (settled * ASK_EVERY.as_secs_f64()) as u64;
    for _ in 0..10 {
        now += ASK_EVERY;
        fleet.ask_at(0, tally(sent, sent, 0, 0), now);
        assert_eq!(fleet.rate(), settled, "{:?} after slow start ended", now - ended);
    }
}

/// A slow start that ends within a second of the first acceptance after an
/// outage ends at what was accepted per second of it, not per second of a
/// second that was half outage: that cut a token bucket of 200 a second
/// with a burst of 20 to 95 a second in the simulator's herd.
#[test]
fn a_slow_start_ended_within_a_second_of_the_outage_ends_at_its_delivery_rate() {
    let t0 = Instant::now();
    let mut fleet = controller(t0);
    let mut now = t0;
    while now < t0 + Duration::from_millis(1500) {
        fleet.ask_at(0, tally(1, 0, 1, 1000), now);
        now += ASK_EVERY;
    }
    let first = now;
    fleet.ask_at(0, tally(1, 1, 0, 1000), now);
    // 200 a second accepted for half a second, then refusals.
    for _ in 0..4 {
        now += ASK_EVERY;
        fleet.ask_at(0, tally(20, 20, 0, 1000), now);
    }
    now += ASK_EVERY;
    fleet.ask_at(0, tally(40, 20, 20, 1000), now);
    let seconds = (now - first).as_secs_f64();
    assert!(
        (fleet.rate() - 101.0 / seconds).abs() < 1e-6,
        "cut to {}: 101 were accepted over {seconds} s, not over the second",
        fleet.rate()
    );
}

/// The case the property test once shrank to: a process whose want rose
/// after the round's division was given its new want scaled up by the
/// surplus the others were already given.
#[test]
fn a_want_that_rose_since_the_division_gets_no_more_than_its_divided_part() {
    let t0 = Instant::now();
    let mut fleet = controller(t0);
    let reports = [tally(109, 109, 0, 1150), tally(0, 0, 0, 30)];
    for r in 1..=2u32 {
        let now = t0 + ASK_EVERY * r;
        let mut highest = fleet.rate();
        let mut total = 0.0;
        for (p, report) in reports.iter().enumerate() {
            total += fleet.ask_at(p as u32, *report, now).rate;
            highest = highest.max(fleet.rate());
        }
        assert!(
            total <= highest * (1.0 + 2.0 * FLOOR) + 1e-6,
            "round {r}: {total} granted of {highest}"
        );
    }
}

#[test]
fn refusals_beside_the_first_acceptances_do_not_end_the_slow_start_they_begin() {
    let t0 = Instant::now();
    let mut fleet = controller(t0);
    round(&mut fleet, 0..200, t0, |_| tally(0, 0, 1, 5));
    let probe = fleet.rate();
    // A probe sent during the outage refused, and one after it accepted.
    let now = t0 + ASK_EVERY;
    fleet.ask_at(0, tally(2, 1, 1, 5), now);
    assert!(
        fleet.rate() > probe,
        "slow start from the probe rate, not a cut to the one accepted: {}",
        fleet.rate()
    );
}

#[test]
fn no_cut_takes_the_fleet_below_the_rate_it_probes_at() {
    let t0 = Instant::now();
    let mut fleet = controller(t0);
    round(&mut fleet, 0..200, t0, |_| tally(0, 0, 1, 5));
    let probe = fleet.rate();
    fleet.ask_at(0, tally(1, 1, 0, 5), t0 + ASK_EVERY);
    // Refused next, with one accepted over the last second.
    fleet.ask_at(0, tally(1, 0, 1, 5), t0 + ASK_EVERY * 2);
    assert_eq!(fleet.rate(), probe, "not 1, what was delivered");
}

/// Rounds of 20 processes asking on one beat at a rate of 100 (nothing
/// reported accepted grows it), each reporting what `report(process,
/// round)` says; the grants of each round after the first, in all.
fn rounds_on_one_beat(report: impl Fn(u32, u32) -> Tally) -> Vec<f64> {
    let t0 = Instant::now();
    let mut fleet = controller(t0);
    round(&mut fleet, 0..20, t0, |_| tally(0, 0, 1, 10));
    fleet.law.rate.accepted_many(&fleet.law.policy.clone(), 1, t0);
    fleet.law.rate.now = 100.0;
    (1..=5)
        .map(|r| {
            round(&mut fleet, 0..20, t0 + ASK_EVERY * r, |p| report(p, r))
                .iter()
                .sum::<f64>()
        })
        .skip(1)
        .collect()
}

/// A process whose line has shrunk below the level since the division
/// wants less than it was counted for: what it no longer wants goes at
/// once to those that want more than the level, not at the next division
/// (which a fleet asking on one beat meets only a round later), so that
/// the grants add up to the rate.
#[test]
fn the_rate_a_shrinking_line_no_longer_wants_goes_to_the_long_lines_within_the_round() {
    // Ten lines shrinking below the level, ten long ones above it.
    let granted = rounds_on_one_beat(|p, r| match p {
        0..10 => tally(1, 0, 0, u64::from(6 - r)),
        _ => tally(10, 0, 0, 1000),
    });
    assert!(
        granted.iter().all(|g| (g - 100.0).abs() < 1e-6),
        "{granted:?} granted of 100 a second"
    );
}

#[test]
fn a_process_silent_for_three_asks_holds_no_share() {
    let t0 = Instant::now();
    let mut fleet = controller(t0);
    round(&mut fleet, 0..2, t0, |_| tally(0, 0, 1, 100));
    fleet.law.rate.accepted_many(&fleet.law.policy.clone(), 1, t0);
    fleet.law.rate.now = 100.0;
    // Both want far more than the rate: each holds half.
    let mut now = t0;
    for _ in 0..5 {
        now += ASK_EVERY;
        round(&mut fleet, 0..2, now, |_| tally(10, 0, 0, 1000));
    }
    assert!(
        (fleet.members[&0].held - 50.0).abs() < 1e-9,
        "{}",
        fleet.members[&0].held
    );
    // Process 1's callers are served and its gate is off: it stops asking.
    now += Feedback::default().silent_after() + DIVIDE_EVERY;
    let mut grant = 0.0;
    for _ in 0..3 {
        grant = fleet.ask_at(0, tally(10, 0, 0, 1000), now).rate;
        now += ASK_EVERY;
    }
    assert!(grant > 99.0, "the whole rate, not what 1 held: {grant}");
}

/// Across a loop too slow to steer (asks 400 ms apart or more) the fleet
/// hands the processes' gates the wheel: its grants carry no share, and
/// still say whether it holds the fleet back.
#[test]
fn a_loop_too_slow_to_steer_hands_each_gate_the_wheel() {
    let grants_at = |apart: Duration| {
        let t0 = Instant::now();
        let mut fleet = controller(t0);
        let mut now = t0;
        let mut last = Vec::new();
        for _ in 0..10 {
            last = round(&mut fleet, 0..5, now, |_| tally(1, 0, 1, 100));
            now += apart;
        }
        (fleet.steers(), last)
    };
    let (steers, grants) = grants_at(Duration::from_millis(300));
    assert!(steers && grants.iter().sum::<f64>() > 0.0, "{grants:?}");
    let (steers, grants) = grants_at(Duration::from_millis(450));
    assert!(!steers);
    assert!(grants.iter().all(|&g| g == 0.0), "{grants:?}");
}

/// One late ask (a process busy for half a second) does not hand the fleet
/// over: a process's measure speaks for the loop only after three intervals.
#[test]
fn one_late_ask_does_not_hand_the_fleet_over() {
    let t0 = Instant::now();
    let mut fleet = controller(t0);
    fleet.ask_at(0, tally(0, 0, 1, 100), t0);
    let grant = fleet.ask_at(0, tally(1, 0, 1, 100), t0 + Duration::from_millis(600));
    assert!(fleet.steers() && grant.rate > 0.0, "{grant:?}");
}

/// Across a slower link the law's rounds stretch with the ask interval:
/// slow start doubles once per 750 ms at a 300 ms interval, as often as its
/// outcomes can come back, where nearby it doubles every 250 ms.
#[test]
fn slow_start_doubles_once_a_round_and_a_round_follows_the_loop() {
    let t0 = Instant::now();
    let grown = |feedback: Feedback| {
        let mut law = law::Law::new_at(&gated(), t0);
        law.hear_feedback(feedback);
        let learned = |accepted| law::Learned {
            accepted,
            overloaded: 0.0,
            timed_out: 0.0,
            demand: 10_000.0,
            line: 0.0,
        };
        law.learn(
            law::Learned {
                overloaded: 1.0,
                ..learned(0)
            },
            t0,
            t0,
        );
        let back = t0 + Duration::from_secs(2);
        law.learn(learned(1), back, back);
        let opened = law.rate();
        let mut now = back;
        for _ in 0..14 {
            now += Duration::from_millis(50);
            law.learn(learned(50), now, now);
        }
        (opened, law.rate())
    };
    let (opened, near) = grown(Feedback::default());
    let (_, far) = grown(Feedback::of_interval(Duration::from_millis(300)));
    assert!(
        far <= 2.0 * opened + 1e-9,
        "one round in 700 ms: {far} from {opened}"
    );
    assert!(
        near >= 4.0 * opened,
        "two rounds or more nearby: {near} from {opened}"
    );
}

/// Processes across a link of 300 ms ask a round trip apart, on one beat:
/// each is still counted between its asks, so every one gets an even share
/// of the rate, and its lease lasts ten of its asks. Counted only for three
/// nearby asks (300 ms), the others had fallen out of the division when the
/// first of a beat asked, and it was given the whole rate it could claim.
#[test]
fn processes_asking_a_round_trip_apart_each_get_an_even_share() {
    let t0 = Instant::now();
    let mut fleet = controller(t0);
    round(&mut fleet, 0..10, t0, |_| tally(0, 0, 1, 100));
    fleet.law.rate.accepted_many(&fleet.law.policy.clone(), 1, t0);
    fleet.law.rate.now = 100.0;
    let apart = Duration::from_millis(300);
    let mut now = t0;
    for beat in 0..10 {
        now += apart;
        let grants: Vec<Grant> = (0..10)
            .map(|p| fleet.ask_at(p, tally(10, 0, 0, 1000), now))
            .collect();
        if beat >= 2 {
            for grant in &grants {
                assert!((grant.rate - 10.0).abs() < 1e-6, "beat {beat}: {grants:?}");
                assert_eq!(grant.lease, Duration::from_secs(3), "ten asks of 300 ms");
            }
        }
    }
    assert_eq!(fleet.feedback().interval(), apart);
}

/// The store two replicas share, as the daemon's script keeps it: the
/// contributions since the owner took them, each replica's demand, the
/// owner, and the published rate.
#[derive(Default)]
struct Store {
    pending: Tallies,
    wants: [Option<replicas::Demand>; 2],
    owner: Option<usize>,
    rate: Option<Published>,
}

impl Store {
    fn exchange(&mut self, r: usize, replica: &mut FleetController<u32>, now: Instant) {
        let mine = replica.contribute_at(now);
        self.pending = self.pending.plus(mine.tallies);
        self.wants[r] = Some(mine.demand);
        let owner = *self.owner.get_or_insert(r);
        let shared = Shared {
            published: self.rate.map(|rate| (rate, Duration::ZERO)),
            others: self.wants[1 - r].into_iter().collect(),
            taken: (owner == r).then(|| std::mem::take(&mut self.pending)),
        };
        if let Some(rate) = replica.shared_at(&mine, &shared, now) {
            self.rate = Some(rate);
        }
    }
}

/// The owner of a shared pace opens the first window to the fleet's line
/// as it estimates it: its own processes' line, as long again for each
/// other replica's processes (the others' lines are not in the store).
#[test]
fn a_shared_pace_opens_to_the_line_of_every_replicas_processes() {
    let t0 = Instant::now();
    let mut replicas = [controller(t0), controller(t0)];
    let mut store = Store {
        owner: Some(0),
        ..Store::default()
    };
    let back = t0 + Duration::from_secs(1);
    for (now, accepted) in [(t0, 0), (back, 1)] {
        for (r, replica) in replicas.iter_mut().enumerate() {
            for p in 0..10 {
                let report = if accepted == 0 {
                    tally(0, 0, 1, 1_000)
                } else {
                    tally(1, u64::from(p == 0), 0, 1_000)
                };
                replica.ask_at(10 * r as u32 + p, report, now);
            }
        }
        for (r, replica) in replicas.iter_mut().enumerate().rev() {
            store.exchange(r, replica, now);
        }
    }
    let published = store.rate.expect("the owner published").rate;
    // 12 % of the 20,000 waiting, and the ramp for what was accepted.
    assert!((2_400.0..2_450.0).contains(&published), "{published}");
}

/// Two replicas pacing one process each, every process accepted `accepted`
/// an ask, exchanging with the store after each round of asks: replica 0
/// owns the pace, and exchanges after the other, so that it folds what
/// both contributed in the round.
fn two_replicas(asks: u32, accepted: u64) -> ([FleetController<u32>; 2], Store, Instant) {
    let t0 = Instant::now();
    let mut replicas = [controller(t0), controller(t0)];
    let mut store = Store {
        owner: Some(0),
        ..Store::default()
    };
    let mut now = t0;
    for i in 0..asks {
        now = t0 + ASK_EVERY * i;
        for (r, replica) in replicas.iter_mut().enumerate() {
            let report = if i == 0 {
                tally(0, 0, 1, 100)
            } else {
                tally(accepted, accepted, 0, 100)
            };
            replica.ask_at(r as u32, report, now);
        }
        for (r, replica) in replicas.iter_mut().enumerate().rev() {
            store.exchange(r, replica, now);
        }
        // The store pushes what the owner published to the other replica.
        if let Some(rate) = store.rate {
            replicas[1].published_at(rate, now);
        }
    }
    (replicas, store, now)
}

#[test]
fn replicas_sharing_a_store_learn_the_rate_one_controller_would() {
    let (replicas, _, now) = two_replicas(4, 1);
    let t0 = now - ASK_EVERY * 3;
    let mut one = controller(t0);
    for i in 0..4 {
        let report = |_| {
            if i == 0 {
                tally(0, 0, 1, 100)
            } else {
                tally(1, 1, 0, 100)
            }
        };
        round(&mut one, 0..2, t0 + ASK_EVERY * i, report);
    }
    assert!(replicas[0].is_owner() && !replicas[1].is_owner());
    assert_eq!(
        replicas[0].rate(),
        one.rate(),
        "the owner folded both replicas' acceptances"
    );
    assert_eq!(
        replicas[1].rate(),
        one.rate(),
        "and the other paces by the rate it published"
    );
    assert!(replicas.iter().all(|r| r.is_shared_at(now)));
}

#[test]
fn replicas_parts_add_up_to_the_fleets_rate() {
    let (replicas, _, now) = two_replicas(6, 2);
    let fleet = replicas[0].rate();
    let parts: f64 = replicas.iter().map(|r| r.budget_at(now).0).sum();
    assert!((parts - fleet).abs() < 1e-9, "{parts} of {fleet}");
}

#[test]
fn a_replica_the_store_stops_answering_paces_alone_after_a_lease_from_its_part() {
    // Only replica 0's processes are accepted: replica 1's own law has
    // learned nothing, its part of the fleet's rate is what it paces by.
    let (mut replicas, now) = uneven_replicas(1);
    let own = replicas[1].law.rate();
    let part = replicas[1].budget_at(now).0;
    assert!(
        part > own,
        "its part {part} of the fleet's rate, above its own {own}"
    );
    let later = now + LEASE;
    assert!(!replicas[1].is_shared_at(later));
    replicas[1].ask_at(1, tally(0, 0, 0, 1000), later);
    assert!(!replicas[1].is_shared_at(later));
    assert_eq!(replicas[1].rate(), replicas[1].law.rate(), "alone");
    assert!(
        replicas[1].law.rate() >= part,
        "carries on from its part {part}, not from what its own processes taught it ({own})"
    );
}

/// Two replicas sharing a store for 12 asks: replica 0 paces process 0,
/// the one accepted; replica 1 paces `others` processes that have sent
/// nothing yet, with long lines.
fn uneven_replicas(others: u32) -> ([FleetController<u32>; 2], Instant) {
    let t0 = Instant::now();
    let mut replicas = [controller(t0), controller(t0)];
    let mut store = Store {
        owner: Some(0),
        ..Store::default()
    };
    let mut now = t0;
    for i in 0..12 {
        now = t0 + ASK_EVERY * i;
        // The first ask reports the refusal that turned each gate on.
        let report = |sent_and_accepted| match i {
            0 => tally(0, 0, 1, 100),
            _ => tally(sent_and_accepted, sent_and_accepted, 0, 1000),
        };
        replicas[0].ask_at(0, report(8), now);
        for p in 1..=others {
            replicas[1].ask_at(p, report(0), now);
        }
        for (r, replica) in replicas.iter_mut().enumerate().rev() {
            store.exchange(r, replica, now);
        }
        if let Some(rate) = store.rate {
            replicas[1].published_at(rate, now);
        }
    }
    (replicas, now)
}

#[test]
fn processes_of_a_replica_that_held_little_may_want_their_share_of_the_fleets_rate() {
    let (replicas, now) = uneven_replicas(10);
    let fleet = replicas[0].rate();
    let part = replicas[1].budget_at(now).0;
    assert!(
        part >= 0.5 * fleet,
        "ten processes of eleven, wanting more than all of it: {part} of {fleet}"
    );
}

#[test]
fn a_new_owner_carries_on_from_the_rate_the_last_one_published() {
    let (mut replicas, mut store, now) = two_replicas(6, 2);
    let published = store.rate.expect("published");
    assert!(!published.probing && published.rate > 10.0, "{published:?}");
    // The owner is gone; its ownership lapses and the other takes it.
    store.owner = Some(1);
    let later = now + ASK_EVERY;
    replicas[1].ask_at(1, tally(0, 0, 0, 100), later);
    store.exchange(1, &mut replicas[1], later);
    assert!(replicas[1].is_owner());
    assert_eq!(
        store.rate.expect("published").rate,
        published.rate,
        "not probing afresh"
    );
}

fn most_refused() -> ValidPolicy {
    ValidPolicy::try_from(RetryPolicy {
        gate: GatePolicy {
            enabled: true,
            overload_when: crate::policy::OverloadWhen::MostRefused,
            ..GatePolicy::default()
        },
        ..RetryPolicy::default()
    })
    .unwrap()
}

#[test]
fn a_shared_pace_carried_on_under_most_refused_is_not_cut_by_a_random_tenth() {
    let t0 = Instant::now();
    let published = Published {
        rate: 200.0,
        probing: false,
        handover: None,
    };
    let mut law = law::Law::resumed_at(&most_refused(), published, t0);
    let mut now = t0;
    for _ in 0..20 {
        now += ASK_EVERY;
        let outcomes = law::Learned {
            accepted: 18,
            overloaded: 2.0,
            timed_out: 0.0,
            demand: 200.0,
            line: 0.0,
        };
        law.learn(outcomes, now - ASK_EVERY, now);
        assert!(law.rate() >= 200.0, "a tenth refused: {}", law.rate());
    }
}

/// A fleet at a few answers a second whose refusals keep their share
/// after a cut: the trial counts on, but holds the rate at the cut only
/// for a while, and a refusal after that cuts again.
#[test]
fn a_trial_at_a_few_answers_a_second_holds_the_rate_only_for_a_while() {
    let t0 = Instant::now();
    let mut law = law::Law::new_at(&most_refused(), t0);
    let learned = |accepted: u32, overloaded: f64, demand: f64| law::Learned {
        accepted,
        overloaded,
        timed_out: 0.0,
        demand,
        line: 0.0,
    };
    law.learn(learned(0, 1.0, 5.0), t0, t0);
    let back = t0 + Duration::from_secs(2);
    law.learn(learned(3, 0.0, 5.0), back, back);
    // Slow start meets most refused: cut, and a trial of the cut begins.
    let cut_at = back + ASK_EVERY;
    law.learn(learned(1, 9.0, 5.0), back, cut_at);
    let cut = law.rate();
    assert!(cut < 50.0, "{cut}");
    // One answer a second, refused every other time: too few to tell.
    let mut now = cut_at;
    let mut refusals = Vec::new();
    for answer in 0..10 {
        now += Duration::from_millis(500);
        let refused = answer % 2 == 1;
        let rate = law.rate();
        law.learn(
            learned(u32::from(!refused), f64::from(u8::from(refused)), 1.0),
            now - ASK_EVERY,
            now,
        );
        if refused {
            refusals.push((now.saturating_duration_since(cut_at), rate, law.rate()));
        }
    }
    let cuts = |i: usize| refusals[i].2 < refusals[i].1;
    assert_eq!(refusals[1].0, crate::gate::trial::FLEET_HOLD, "{refusals:?}");
    assert!(!cuts(0), "held at the cut: {refusals:?}");
    assert!(cuts(1), "past the hold, a refusal cuts: {refusals:?}");
    assert!(!cuts(2), "and the hold begins again at that cut: {refusals:?}");
}

#[test]
fn under_most_refused_the_fleet_cuts_for_refusals_that_outnumber_acceptances_not_for_a_random_tenth() {
    let t0 = Instant::now();
    let policy = most_refused();
    let mut fleet = FleetController::new_at(&policy, t0);
    fleet.ask_at(0, tally(0, 0, 1, 1000), t0);
    let mut now = t0;
    // Twenty asks a tenth refused at random, with callers waiting.
    let mut rates = Vec::new();
    for _ in 0..20 {
        now += ASK_EVERY;
        let sent = ((fleet.rate() * ASK_EVERY.as_secs_f64()).round() as u64).max(10);
        let refused = sent / 10;
        fleet.ask_at(0, tally(sent, sent - refused, refused, 1000), now);
        rates.push(fleet.rate());
    }
    assert!(
        rates.windows(2).all(|pair| pair[1] >= pair[0]),
        "a tenth refused cuts nothing: {rates:?}"
    );
    // Then nine tenths refused, for a second: the refusals come to
    // outnumber the acceptances of the last second, and cut the rate.
    let before = fleet.rate();
    for _ in 0..10 {
        now += ASK_EVERY;
        let sent = (fleet.rate() * ASK_EVERY.as_secs_f64()).round() as u64;
        fleet.ask_at(0, tally(sent, sent / 10, sent - sent / 10, 1000), now);
    }
    assert!(fleet.rate() < before / 2.0, "{} after {before}", fleet.rate());
}

#[test]
fn under_most_refused_one_random_refusal_among_the_first_answers_does_not_end_slow_start() {
    let t0 = Instant::now();
    let mut fleet = FleetController::new_at(&most_refused(), t0);
    fleet.ask_at(0, tally(0, 0, 1, 1000), t0);
    let back = t0 + Duration::from_secs(10);
    fleet.ask_at(0, tally(1, 1, 0, 1000), back);
    let opened = fleet.rate();
    // A third of the first three answers refused: a dependency failing a
    // tenth at random does that one time in four.
    fleet.ask_at(0, tally(3, 2, 1, 1000), back + ASK_EVERY);
    assert!(fleet.law.rate.is_slow_start(), "{}", fleet.law.rate.phase_name());
    assert!(fleet.rate() >= opened, "{} after {opened}", fleet.rate());
    // Most of a round refused is past what a quarter at random explains.
    let sent = (fleet.rate() * ASK_EVERY.as_secs_f64()) as u64;
    let most_refused = tally(sent, sent / 3, sent - sent / 3, 1000);
    fleet.ask_at(0, most_refused, back + ASK_EVERY * 2);
    assert!(!fleet.law.rate.is_slow_start(), "{}", fleet.rate());
}

/// A fleet under `policy` whose dependency refuses `refused` of every ten
/// attempts it is sent, for two seconds, with callers waiting; the
/// controller and the time.
fn refusing_tenths(policy: &ValidPolicy, refused: u64) -> (FleetController<u32>, Instant) {
    let t0 = Instant::now();
    let mut fleet = FleetController::new_at(policy, t0);
    fleet.ask_at(0, tally(0, 0, 1, 1000), t0);
    let mut now = t0;
    for _ in 0..20 {
        now += ASK_EVERY;
        let sent = ((fleet.rate() * ASK_EVERY.as_secs_f64()).round() as u64).max(10);
        let refusals = sent * refused / 10;
        fleet.ask_at(0, tally(sent, sent - refusals, refusals, 1000), now);
    }
    (fleet, now)
}

#[test]
fn a_fleet_that_nothing_gets_through_for_is_judged_down() {
    let t0 = Instant::now();
    let mut fleet = controller(t0);
    round(&mut fleet, 0..10, t0, |_| tally(0, 0, 1, 5));
    let judged = fleet.judged_at(t0 + ASK_EVERY);
    assert_eq!(judged.judgement, Judgement::Down);
    assert!(judged.judgement.holds_back());
}

#[test]
fn a_random_tenth_refused_is_judged_by_what_the_policy_believes_with_its_share() {
    let (mut fleet, now) = refusing_tenths(&most_refused(), 1);
    let judged = fleet.judged_at(now);
    assert_eq!(judged.judgement, Judgement::FailingAtRandom);
    assert!(!judged.judgement.holds_back());
    assert!((0.08..=0.12).contains(&judged.refused_share), "{judged:?}");
    assert!(
        fleet.rate() >= 2.0 * judged.delivered * 0.99,
        "{judged:?} at {}",
        fleet.rate()
    );

    // Under any-refusal the same answers are taken for overload, and say so.
    let (mut fleet, now) = refusing_tenths(&gated(), 1);
    let judged = fleet.judged_at(now);
    assert_eq!(judged.judgement, Judgement::Overloaded);
    assert!((0.08..=0.12).contains(&judged.refused_share), "{judged:?}");
}

#[test]
fn most_refused_is_judged_overloaded_once_refusals_outnumber_acceptances() {
    let (mut fleet, now) = refusing_tenths(&most_refused(), 9);
    assert_eq!(fleet.judged_at(now).judgement, Judgement::Overloaded);
}

#[test]
fn three_seconds_without_a_refusal_is_judged_recovering() {
    let (mut fleet, mut now) = refusing_tenths(&most_refused(), 1);
    for _ in 0..30 {
        now += ASK_EVERY;
        fleet.ask_at(0, tally(10, 10, 0, 1000), now);
    }
    let judged = fleet.judged_at(now);
    assert_eq!(judged.judgement, Judgement::Recovering);
    assert_eq!(judged.refused_share, 0.0);
}

#[test]
fn a_timeout_is_judged_slow() {
    let (mut fleet, now) = refusing_tenths(&most_refused(), 0);
    let timed_out = Tally {
        timed_out: 1,
        ..tally(10, 9, 1, 1000)
    };
    fleet.ask_at(0, timed_out, now + ASK_EVERY);
    assert_eq!(fleet.judged_at(now + ASK_EVERY).judgement, Judgement::Slow);
}

/// What a process whose gate only watches reports: every attempt it sent.
fn watching(accepted: u64, refused: u64) -> Tally {
    Tally {
        watching: true,
        ..tally(accepted + refused, accepted, refused, 0)
    }
}

/// Rounds of twenty watching processes every ask from `from` for
/// `seconds`, each reporting `accepted` and `refused`; the grants.
fn watching_rounds(
    fleet: &mut FleetController<u32>,
    from: Instant,
    seconds: u32,
    accepted: u64,
    refused: u64,
) -> Vec<Grant> {
    let mut grants = Vec::new();
    for i in 0..seconds * 10 {
        let now = from + ASK_EVERY * i;
        grants.extend((0..20).map(|p| fleet.ask_at(p, watching(accepted, refused), now)));
    }
    grants
}

#[test]
fn under_most_refused_watching_gates_are_not_paced_while_a_tenth_fails_at_random() {
    let t0 = Instant::now();
    let mut fleet = FleetController::new_at(&most_refused(), t0);
    let grants = watching_rounds(&mut fleet, t0, 60, 9, 1);
    assert!(
        grants.iter().all(|g| !g.pace),
        "a minute, a tenth refused: nobody paced"
    );
    let now = t0 + Duration::from_secs(60);
    assert_eq!(fleet.judged_at(now).judgement, Judgement::FailingAtRandom);
}

#[test]
fn under_most_refused_refusals_beyond_half_pace_the_fleet_at_what_it_delivers() {
    let t0 = Instant::now();
    let mut fleet = FleetController::new_at(&most_refused(), t0);
    let calm = watching_rounds(&mut fleet, t0, 2, 9, 1);
    assert!(calm.iter().all(|g| !g.pace));
    // A brownout: three of four refused, 60 accepted a second in all.
    let later = t0 + Duration::from_secs(2);
    let grants = watching_rounds(&mut fleet, later, 1, 3, 9);
    let first = grants.iter().position(|g| g.pace).expect("paced within a second");
    assert!(first < 40, "within two asks of each: {first}");
    assert!(grants[first..].iter().all(|g| g.pace));
    let now = later + Duration::from_secs(1);
    assert_eq!(fleet.judged_at(now).judgement, Judgement::Overloaded);
    assert!(
        fleet.rate() <= 600.0,
        "no more than is delivered: {}",
        fleet.rate()
    );
}

/// Rounds of one process that asks for the whole fleet, whose gate went on
/// when the dependency went down, and sends what it is granted every ask;
/// `answer` says how many of what it sent the dependency accepted. When the
/// law first judges the refusals random, or never.
fn paced_rounds(
    fleet: &mut FleetController<u32>,
    t0: Instant,
    mut answer: impl FnMut(u64) -> u64,
) -> Option<Instant> {
    fleet.ask_at(0, tally(0, 0, 1, 500), t0);
    for i in 1..100 {
        let now = t0 + ASK_EVERY * i;
        let sent = (fleet.rate() * ASK_EVERY.as_secs_f64()).ceil() as u64;
        let accepted = answer(sent);
        fleet.ask_at(0, tally(sent, accepted, sent - accepted, 500), now);
        if fleet.law.rate.is_answering() {
            return Some(now);
        }
    }
    None
}

#[test]
fn under_most_refused_a_paced_fleet_whose_refusals_keep_their_share_is_freed() {
    let t0 = Instant::now();
    let mut fleet = FleetController::new_at(&most_refused(), t0);
    // Back at once, and failing a third at random at whatever rate it is
    // sent (past what slow start goes on through): every third attempt.
    let mut sent_in_all = 0;
    let freed = paced_rounds(&mut fleet, t0, |sent| {
        let refused = (sent_in_all + sent) / 3 - sent_in_all / 3;
        sent_in_all += sent;
        sent - refused
    });
    let freed = freed.expect("judged random within ten seconds");
    // Slow start ended at the first refusals, cut to what a law a few
    // tenths old had seen delivered; two trials at some 20 answers a second.
    assert!(freed - t0 <= Duration::from_secs(8), "{:?}", freed - t0);
    assert_eq!(fleet.judged_at(freed).judgement, Judgement::FailingAtRandom);
    assert!(!fleet.ask_at(99, watching(2, 1), freed).pace);
}

#[test]
fn under_most_refused_a_capacity_whose_refusals_vanish_at_the_cut_stays_paced() {
    let t0 = Instant::now();
    let mut fleet = FleetController::new_at(&most_refused(), t0);
    // A capacity of 100 a second: ten an ask, whatever is sent past it refused.
    let freed = paced_rounds(&mut fleet, t0, |sent| sent.min(10));
    assert_eq!(freed, None, "a capacity for ten seconds, at {}", fleet.rate());
    assert!(fleet.rate() <= 150.0, "about what it takes: {}", fleet.rate());
}

#[test]
fn under_most_refused_a_fleet_probing_on_a_processs_word_is_calmed_by_a_watchers_acceptances() {
    let t0 = Instant::now();
    let mut fleet = FleetController::new_at(&most_refused(), t0);
    // The first to ask had turned its gate on alone, on a run of refusals.
    fleet.ask_at(0, tally(0, 0, 1, 5), t0);
    assert!(fleet.ask_at(1, watching(0, 1), t0).pace, "down, on that word");
    // A watcher then hears the dependency accept: it answers.
    let now = t0 + ASK_EVERY;
    assert!(!fleet.ask_at(1, watching(3, 1), now).pace);
    assert_eq!(fleet.judged_at(now).judgement, Judgement::FailingAtRandom);

    // Once the fleet's own refusals were judged a capacity's, its pace is
    // the fleet's, and a watcher's acceptance does not end it.
    let mut judged = FleetController::new_at(&most_refused(), t0);
    let calm = watching_rounds(&mut judged, t0, 1, 9, 1);
    assert!(calm.iter().all(|g| !g.pace));
    let down = watching_rounds(&mut judged, t0 + Duration::from_secs(1), 1, 0, 10);
    assert!(down.last().unwrap().pace);
    let later = t0 + Duration::from_secs(2);
    assert!(judged.ask_at(1, watching(1, 0), later).pace);
}

/// A law taken up from another's handover, as the store carries it (JSON,
/// taken at the moment it was written), decides as the law that wrote it:
/// fed the same reports round after round, through an outage, a recovery
/// into a capacity that also fails a tenth at random, and a brownout, the
/// two keep the same rate, judgement and refused share, to the last bit.
/// Handed over at every round of it.
#[test]
fn a_law_taken_up_from_a_handover_decides_as_the_law_that_wrote_it() {
    use rand::{rngs::SmallRng, Rng, SeedableRng};
    let evidence = ValidPolicy::try_from(RetryPolicy {
        gate: GatePolicy {
            enabled: true,
            ..GatePolicy::default()
        },
        ..RetryPolicy::default()
    })
    .unwrap();
    for (policy, seed) in [(most_refused(), 1), (evidence, 2), (gated(), 3)] {
        for handed_at in 0..320 {
            let t0 = Instant::now();
            let mut rng = SmallRng::seed_from_u64(seed);
            let mut original = law::Law::new_at(&policy, t0);
            let mut taken: Option<law::Law> = None;
            let mut now = t0;
            for round in 0..320 {
                now += ASK_EVERY;
                let seconds = now.duration_since(t0).as_secs_f64();
                // Down for 2 s, then 100 a second, 25 a second from 20 s to 26 s.
                let room = match seconds {
                    s if s < 2.0 => 0,
                    s if (20.0..26.0).contains(&s) => 3,
                    _ => 10,
                };
                let sent = (original.rate() / 10.0).ceil() as u32;
                let taken_in = sent.min(room);
                let failed = (0..taken_in).filter(|_| rng.random::<f64>() < 0.1).count() as u32;
                let outcomes = law::Learned {
                    accepted: taken_in - failed,
                    overloaded: f64::from(sent - taken_in + failed),
                    timed_out: 0.0,
                    demand: 300.0,
                    line: 0.0,
                };
                if round == handed_at {
                    let text = serde_json::to_string(&original.handover_at(now)).unwrap();
                    let handover: handover::Handover = serde_json::from_str(&text).unwrap();
                    let handover = handover.checked().expect("a law's own handover");
                    taken = Some(law::Law::taken_up(&policy, &handover, Duration::ZERO, now));
                }
                original.learn(outcomes, now - ASK_EVERY, now);
                original.probe_for(50.0);
                let Some(taken) = taken.as_mut() else { continue };
                taken.learn(outcomes, now - ASK_EVERY, now);
                taken.probe_for(50.0);
                let (a, b) = (original.judged_at(now), taken.judged_at(now));
                assert_eq!(
                    (original.rate().to_bits(), a.judgement, a.refused_share.to_bits()),
                    (taken.rate().to_bits(), b.judgement, b.refused_share.to_bits()),
                    "seed {seed}, handed over at round {handed_at}, round {round}: {} against {}",
                    original.rate(),
                    taken.rate()
                );
            }
        }
    }
}

/// A handover of another format, or torn, is refused, saying why.
#[test]
fn a_handover_of_another_format_or_torn_is_refused() {
    let t0 = Instant::now();
    let law = law::Law::new_at(&gated(), t0);
    let good = serde_json::to_value(law.handover_at(t0)).unwrap();
    let mut other = good.clone();
    other["version"] = 2.into();
    let other: handover::Handover = serde_json::from_value(other).unwrap();
    assert_eq!(other.checked(), Err(handover::Refused::Version(2)));
    let mut torn = good.clone();
    torn["law"]["rate"]["now"] = (-3.0).into();
    let torn: handover::Handover = serde_json::from_value(torn).unwrap();
    assert_eq!(torn.checked(), Err(handover::Refused::OutOfRange("rate")));
    let mut cut_short = good;
    cut_short["law"].as_object_mut().unwrap().remove("trials");
    assert!(serde_json::from_value::<handover::Handover>(cut_short).is_err());
}

/// A replica that takes over a shared pace in a lasting brownout (under
/// `most-refused`) goes on judging the dependency overloaded, as its last
/// owner did, and publishes the pace the last owner would have. From the
/// published rate alone it would take the dependency for one failing at
/// random (calm), and tell the gates not to pace.
#[test]
fn a_new_owner_goes_on_from_what_the_last_one_learned_not_from_its_rate_alone() {
    let policy = most_refused();
    let t0 = Instant::now();
    let tallies = |accepted: u64, refused: u64| replicas::Tallies {
        outcomes: replicas::Outcomes {
            sent: accepted + refused,
            accepted,
            overloaded: refused,
            timed_out: 0,
        },
        overloaded_since: (refused > 0).then_some(ASK_EVERY),
    };
    let mine = |tallies| replicas::Contribution {
        tallies,
        demand: replicas::Demand {
            want: 400.0,
            members: 5,
            classes: None,
        },
    };
    let exchange = |owner: &mut FleetController<u32>, published: Option<Published>, now| {
        let contribution = mine(tallies(10, 30));
        let shared = Shared {
            published: published.map(|p| (p, Duration::ZERO)),
            others: Vec::new(),
            taken: Some(contribution.tallies),
        };
        owner
            .shared_at(&contribution, &shared, now)
            .expect("the owner publishes")
    };
    let mut last = FleetController::<u32>::new_at(&policy, t0);
    let mut now = t0;
    let mut published = None;
    for _ in 0..60 {
        now += ASK_EVERY;
        published = Some(exchange(&mut last, published, now));
    }
    assert_eq!(
        last.judged_at(now).judgement,
        Judgement::Overloaded,
        "a brownout, three in four refused"
    );
    now += ASK_EVERY;
    let mut next = FleetController::<u32>::new_at(&policy, t0);
    let taken_over = exchange(&mut next, published, now);
    let went_on = exchange(&mut last, published, now);
    assert_eq!(next.judged_at(now).judgement, Judgement::Overloaded);
    assert_eq!(
        taken_over.rate.to_bits(),
        went_on.rate.to_bits(),
        "the pace the last owner would have set"
    );
    let mut from_the_rate = FleetController::<u32>::new_at(&policy, t0);
    let rate_alone = published.map(|p| Published { handover: None, ..p });
    exchange(&mut from_the_rate, rate_alone, now);
    assert_ne!(
        from_the_rate.judged_at(now).judgement,
        Judgement::Overloaded,
        "without the handover the brownout looks like failure at random"
    );
    // A replica that restarted and does not own the pace: its own law,
    // which sets what it adds to its part and whether its processes are
    // held back, catches up with the fleet's.
    let mut rejoined = FleetController::<u32>::new_at(&policy, t0);
    let contribution = mine(tallies(0, 0));
    let shared = Shared {
        published: published.map(|p| (p, Duration::ZERO)),
        others: vec![replicas::Demand {
            want: 400.0,
            members: 5,
            classes: None,
        }],
        taken: None,
    };
    rejoined.shared_at(&contribution, &shared, now);
    assert!(!rejoined.is_owner());
    assert_eq!(rejoined.judged_at(now).judgement, Judgement::Overloaded);
}

#[test]
fn a_process_wants_for_its_critical_calls_before_its_others() {
    assert_eq!(
        super::class_shares([1.0, 9.0, 0.0], 10.0, 5.0),
        [0.2, 0.8, 0.0],
        "claiming 10 a second, a tenth critical, wanting 5: the critical part first"
    );
    assert_eq!(
        super::class_shares([6.0, 4.0, 0.0], 10.0, 5.0),
        [1.0, 0.0, 0.0],
        "its critical calls claim 6 a second: all it wants"
    );
    assert_eq!(
        super::class_shares([1.0, 0.0, 1.0], 2.0, 5.0),
        [0.2, 0.6, 0.2],
        "it claims less than it may want: the rest is the default class's"
    );
    assert_eq!(
        super::class_shares([0.0, 0.0, 0.0], 10.0, 5.0),
        super::UNCLASSED,
        "no demand said"
    );
    assert_eq!(
        super::class_shares([0.0, 2.0, 0.0], 10.0, 5.0),
        super::UNCLASSED,
        "calls of the default class alone: divided as ever"
    );
}
