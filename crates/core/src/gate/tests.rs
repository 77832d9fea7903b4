//! Tests of the send gate: its line, its pace, leases from the fleet, and what turns it on and
//! off.

use std::sync::atomic::AtomicUsize;
use std::sync::Arc;
use std::task::Wake;
use std::time::Duration;

use super::*;
use crate::policy::{Criticality, RetryPolicy};

/// The gate's settings with `overloadWhen: any-refusal`: every refusal
/// says overload, the law most of these tests are about.
fn any_refusal() -> GatePolicy {
    GatePolicy {
        overload_when: OverloadWhen::AnyRefusal,
        ..GatePolicy::default()
    }
}

fn policy(gate: GatePolicy) -> ValidPolicy {
    ValidPolicy::try_from(RetryPolicy {
        gate,
        ..RetryPolicy::default()
    })
    .unwrap()
}

/// A gate whose slow start adds one turn per second per accepted attempt,
/// for round figures.
fn gate(now: Instant) -> SendGate {
    SendGate::new_at(
        &policy(GatePolicy {
            ramp: 1.0,
            ..any_refusal()
        }),
        now,
    )
}

fn secs(s: f64) -> Duration {
    Duration::from_secs_f64(s)
}

/// Turns on `gate` at `t0` with a refused attempt, with no credit: the
/// first turn comes a whole interval later (in use, the first credit is
/// drawn at random, so that processes that failed together do not probe together).
fn overload(gate: &SendGate, t0: Instant) {
    gate.record_at(Signal::Overloaded, t0, t0);
    gate.lock().pacer = Pacer::new(0.0, t0);
}

fn queued(turn: Turn) -> Ticket {
    match turn {
        Turn::Queued(ticket) => ticket,
        Turn::Now => panic!("expected to wait in line"),
        Turn::Shed => panic!("expected to wait in line, not to be shed"),
    }
}

#[derive(Default)]
struct Count(AtomicUsize);

impl Wake for Count {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
}

#[test]
fn off_it_gives_every_turn_at_once_and_ignores_good_answers() {
    let t0 = Instant::now();
    let gate = gate(t0);
    for _ in 0..1000 {
        assert_eq!(gate.turn_at(t0), Turn::Now);
        gate.record_at(Signal::Accepted, t0, t0);
    }
    assert!(!gate.is_on());
    assert_eq!(gate.rate(), None);
}

#[test]
fn the_first_overload_turns_it_on_and_the_line_moves_at_the_probe_rate() {
    let t0 = Instant::now();
    let gate = gate(t0);
    overload(&gate, t0);
    assert_eq!(gate.rate(), Some(0.5));
    let first = queued(gate.turn_at(t0));
    let second = queued(gate.turn_at(t0));
    assert_eq!(gate.claim_at(&first, t0, None), Claim::At(t0 + secs(2.0)));
    assert_eq!(gate.claim_at(&second, t0, None), Claim::Behind);
    assert_eq!(gate.first_in_line(), Some((first.number(), t0 + secs(2.0))));
    assert_eq!(
        gate.claim_at(&second, t0 + secs(2.0), None),
        Claim::Behind,
        "first come, first served"
    );
    assert_eq!(gate.claim_at(&first, t0 + secs(2.0), None), Claim::Go);
    assert_eq!(
        gate.claim_at(&second, t0 + secs(2.0), None),
        Claim::At(t0 + secs(4.0))
    );
    assert_eq!(gate.claim_at(&second, t0 + secs(4.0), None), Claim::Go);
    assert_eq!(gate.waiting(), 0);
    assert_eq!(gate.turn_at(t0 + secs(6.0)), Turn::Now, "due, nobody in line");
    assert!(matches!(gate.turn_at(t0 + secs(6.0)), Turn::Queued(_)));
}

#[test]
fn the_first_in_line_is_woken_when_the_rate_grows_and_the_next_when_it_goes_or_leaves() {
    let t0 = Instant::now();
    let gate = gate(t0);
    overload(&gate, t0);
    let (first_waker, second_waker) = (Arc::new(Count::default()), Arc::new(Count::default()));
    let first = queued(gate.turn_at(t0));
    let second = queued(gate.turn_at(t0));
    let third = queued(gate.turn_at(t0));
    assert_eq!(
        gate.claim_at(&first, t0, Some(&Waker::from(first_waker.clone()))),
        Claim::At(t0 + secs(2.0))
    );
    assert_eq!(
        gate.claim_at(&second, t0, Some(&Waker::from(second_waker.clone()))),
        Claim::Behind
    );
    gate.record_at(Signal::Accepted, t0, t0 + secs(0.5));
    assert_eq!(first_waker.0.load(Ordering::Relaxed), 1);
    assert_eq!(
        gate.claim_at(&first, t0 + secs(0.5), None),
        Claim::At(t0 + secs(0.5 + 0.75 / 1.5)),
        "a quarter turn accrued by 0.5 s; the rest at 1.5 turns a second"
    );
    gate.leave(first);
    assert_eq!(
        second_waker.0.load(Ordering::Relaxed),
        1,
        "the new first in line is woken"
    );
    assert_eq!(gate.claim_at(&second, t0 + secs(1.0), None), Claim::Go);
    assert_eq!(gate.first_in_line().map(|(n, _)| n), Some(third.number()));
}

#[test]
fn an_overload_cuts_the_rate_once_not_once_per_attempt_sent_before_the_cut() {
    let t0 = Instant::now();
    let gate = gate(t0);
    overload(&gate, t0);
    for _ in 0..100 {
        gate.record_at(Signal::Accepted, t0, t0 + secs(1.0));
    }
    let ends_slow_start = t0 + secs(1.05);
    gate.record_at(Signal::Overloaded, ends_slow_start, ends_slow_start);
    assert_eq!(gate.rate(), Some(100.0), "slow start ends at the 100 accepted");
    // Two seconds on, the accepted attempts are out of the last second.
    let sent = t0 + secs(3.0);
    gate.record_at(Signal::Overloaded, sent, t0 + secs(3.1));
    let cut = gate.rate().unwrap();
    assert!((cut - 100.0 * 0.7).abs() < 1e-9, "{cut}");
    gate.record_at(Signal::Overloaded, sent, t0 + secs(3.2));
    assert_eq!(gate.rate(), Some(cut), "sent before the cut");
    gate.record_at(Signal::Overloaded, t0 + secs(3.15), t0 + secs(3.2));
    assert!(gate.rate().unwrap() < cut, "sent after it");
}

#[test]
fn a_cut_never_goes_below_what_was_accepted_over_the_last_second() {
    let t0 = Instant::now();
    let gate = gate(t0);
    overload(&gate, t0);
    for i in 0..100 {
        gate.record_at(Signal::Accepted, t0, t0 + secs(0.5 + f64::from(i) * 0.005));
    }
    assert_eq!(gate.rate(), Some(100.5));
    for i in 0..10 {
        let t = t0 + secs(1.0 + f64::from(i) * 0.01);
        gate.record_at(Signal::Overloaded, t, t);
    }
    assert_eq!(
        gate.rate(),
        Some(100.0),
        "100 accepted since 0.5 s: refusals in a row stop there"
    );
    let later = t0 + secs(1.6);
    gate.record_at(Signal::Overloaded, later, later);
    assert!(
        (gate.rate().unwrap() - 70.0).abs() < 1e-9,
        "those before 0.6 s no longer count"
    );
}

#[test]
fn the_refusal_that_ends_slow_start_cuts_to_what_was_accepted_not_by_beta() {
    let t0 = Instant::now();
    let gate = gate(t0);
    overload(&gate, t0);
    for _ in 0..100 {
        gate.record_at(Signal::Accepted, t0, t0 + secs(0.2));
    }
    for _ in 0..20 {
        gate.record_at(Signal::Accepted, t0, t0 + secs(1.5));
    }
    assert_eq!(
        gate.rate(),
        Some(120.5),
        "slow start, far ahead of the last second's 20"
    );
    let refused = t0 + secs(1.5);
    gate.record_at(Signal::Overloaded, refused, refused);
    assert_eq!(
        gate.rate(),
        Some(20.0),
        "what was accepted over the last second, not 0.7 × 120.5"
    );
}

#[test]
fn during_an_outage_it_stays_at_the_probe_rate() {
    let t0 = Instant::now();
    let gate = gate(t0);
    for i in 0..20 {
        let t = t0 + secs(f64::from(i));
        gate.record_at(Signal::Overloaded, t, t);
    }
    assert_eq!(gate.rate(), Some(0.5));
}

#[test]
fn good_answers_ramp_it_up_and_cubic_regrows_it_past_the_rate_it_failed_at() {
    let t0 = Instant::now();
    let gate = SendGate::new_at(
        &policy(GatePolicy {
            quiet: Duration::from_secs(60),
            ramp: 1.0,
            ..any_refusal()
        }),
        t0,
    );
    overload(&gate, t0);
    for _ in 0..100 {
        gate.record_at(Signal::Accepted, t0, t0 + secs(1.0));
    }
    assert_eq!(
        gate.rate(),
        Some(100.5),
        "slow start: one turn per second per good answer"
    );
    let failed_at = t0 + secs(3.0);
    gate.record_at(Signal::Overloaded, failed_at, failed_at);
    let cut = gate.rate().unwrap();
    // Back to the rate it failed at after k = ∛(100.5 × 0.3 / 0.4) ≈ 4.22 s.
    let k = (100.5_f64 * 0.3 / 0.4).cbrt();
    gate.record_at(Signal::Accepted, failed_at, failed_at + secs(k / 2.0));
    let half_way = gate.rate().unwrap();
    assert!(cut < half_way && half_way < 100.5, "{half_way}");
    gate.record_at(Signal::Accepted, failed_at, failed_at + secs(k));
    assert!((gate.rate().unwrap() - 100.5).abs() < 1e-6);
    gate.record_at(Signal::Accepted, failed_at, failed_at + secs(k + 2.0));
    assert!(gate.rate().unwrap() > 100.5, "CUBIC probes past the old maximum");
}

#[test]
fn it_turns_off_after_a_quiet_time_without_refusals_or_waiting() {
    let t0 = Instant::now();
    let gate = gate(t0);
    overload(&gate, t0);
    gate.record_at(Signal::Accepted, t0, t0 + secs(4.9));
    assert!(gate.is_on());
    // Waiting counts as trouble: a gate that still paces is still needed.
    assert_eq!(gate.turn_at(t0 + secs(4.9)), Turn::Now);
    let ticket = queued(gate.turn_at(t0 + secs(4.9)));
    gate.record_at(Signal::Accepted, t0, t0 + secs(9.8));
    assert!(gate.is_on(), "4.9 s since someone waited");
    gate.record_at(Signal::Accepted, t0, t0 + secs(10.0));
    assert!(gate.is_on(), "quiet, but someone still waits");
    gate.leave(ticket);
    gate.record_at(Signal::Accepted, t0, t0 + secs(10.0));
    assert!(!gate.is_on());
    assert_eq!(gate.turn_at(t0 + secs(10.0)), Turn::Now);
}

#[test]
fn an_idle_gate_turns_off_when_next_asked_after_the_quiet_time() {
    let t0 = Instant::now();
    let gate = gate(t0);
    overload(&gate, t0);
    assert_eq!(gate.turn_at(t0 + secs(60.0)), Turn::Now);
    assert!(!gate.is_on());
}

#[test]
fn a_late_claim_keeps_the_pace_but_a_lull_earns_no_burst() {
    let t0 = Instant::now();
    let gate = gate(t0);
    overload(&gate, t0);
    gate.lease_at(1000.0, t0 + secs(60.0), t0);
    let ms = |n: f64| t0 + secs(n / 1000.0);
    let first = queued(gate.turn_at(t0));
    assert_eq!(gate.claim_at(&first, t0, None), Claim::At(ms(1.0)));
    assert_eq!(
        gate.claim_at(&first, ms(1.5), None),
        Claim::Go,
        "half a millisecond late"
    );
    let next = queued(gate.turn_at(ms(1.5)));
    assert_eq!(
        gate.claim_at(&next, ms(1.5), None),
        Claim::At(ms(2.0)),
        "on the old schedule"
    );
    assert_eq!(gate.claim_at(&next, ms(2.0), None), Claim::Go);
    let after_lull = ms(500.0);
    assert_eq!(gate.turn_at(after_lull), Turn::Now);
    assert_eq!(gate.turn_at(after_lull), Turn::Now);
    assert_eq!(gate.turn_at(after_lull), Turn::Now);
    assert!(
        matches!(gate.turn_at(after_lull), Turn::Queued(_)),
        "what accrues in 2 ms (two turns) beyond one, not the 498 nobody took"
    );
}

#[test]
fn a_faster_pace_speeds_up_the_rest_of_the_wait_without_a_burst() {
    let t0 = Instant::now();
    let gate = gate(t0);
    overload(&gate, t0);
    let first = queued(gate.turn_at(t0));
    assert_eq!(gate.claim_at(&first, t0, None), Claim::At(t0 + secs(2.0)));
    gate.lease_at(10.0, t0 + secs(60.0), t0 + secs(1.0));
    assert_eq!(
        gate.claim_at(&first, t0 + secs(1.0), None),
        Claim::At(t0 + secs(1.05)),
        "half a turn accrued at 0.5/s; the other half at 10/s"
    );
}

#[test]
fn a_refusal_under_a_lease_cuts_it_once_until_the_next_grant() {
    let t0 = Instant::now();
    let gate = gate(t0);
    overload(&gate, t0);
    let granted = t0 + secs(1.0);
    gate.lease_at(10.0, t0 + secs(2.0), granted);
    let before_the_grant = t0 + secs(0.9);
    gate.record_at(Signal::Overloaded, before_the_grant, t0 + secs(1.1));
    assert_eq!(
        gate.rate(),
        Some(10.0),
        "sent before the grant: the fleet knew of it"
    );
    let under_it = t0 + secs(1.2);
    gate.record_at(Signal::Overloaded, under_it, under_it);
    assert_eq!(gate.rate(), Some(7.0), "0.7 × the grant, at once");
    gate.record_at(Signal::Overloaded, under_it, t0 + secs(1.3));
    assert_eq!(gate.rate(), Some(7.0), "once per grant");
    gate.lease_at(9.0, t0 + secs(3.0), t0 + secs(1.4));
    assert_eq!(gate.rate(), Some(9.0), "the next grant replaces it");
}

#[test]
fn a_lease_paces_until_it_ends_then_the_gates_own_rate_does() {
    let t0 = Instant::now();
    let gate = gate(t0);
    overload(&gate, t0);
    gate.lease_at(4.0, t0 + secs(1.0), t0);
    assert_eq!(gate.rate(), Some(4.0));
    assert_eq!(gate.own_rate(), Some(0.5));
    let first = queued(gate.turn_at(t0));
    assert_eq!(gate.claim_at(&first, t0, None), Claim::At(t0 + secs(0.25)));
    assert_eq!(gate.claim_at(&first, t0 + secs(0.25), None), Claim::Go);
    assert_eq!(gate.turn_at(t0 + secs(0.9)), Turn::Now, "a turn accrued since");
    let second = queued(gate.turn_at(t0 + secs(0.9)));
    assert_eq!(
        gate.claim_at(&second, t0 + secs(0.9), None),
        Claim::At(t0 + secs(1.0)),
        "due at the lease's end, when the pace changes"
    );
    // 0.4 turns accrued by 1 s at 4/s (and 0.008 left over, what accrues in
    // 2 ms); the rest comes at the gate's own 0.5/s.
    let Claim::At(due) = gate.claim_at(&second, t0 + secs(1.0), None) else {
        panic!("expected a wait");
    };
    let expected = t0 + secs(1.0 + (1.0 - 0.408) / 0.5);
    assert!(
        due.max(expected) - due.min(expected) < Duration::from_micros(1),
        "{:?}",
        due - t0
    );
    assert_eq!(gate.rate(), Some(0.5));
    for bad in [0.0, -1.0, f64::NAN, f64::INFINITY] {
        gate.lease_at(bad, t0 + secs(9.0), t0 + secs(1.0));
        assert_eq!(gate.rate(), Some(0.5), "{bad}");
    }
}

#[test]
fn the_tally_counts_what_was_sent_and_answered_since_the_last_one() {
    let t0 = Instant::now();
    let gate = gate(t0);
    gate.record_at(Signal::Accepted, t0, t0);
    assert_eq!(gate.tally(), Tally::default(), "nothing counts while off");
    overload(&gate, t0);
    let first = queued(gate.turn_at(t0));
    let _second = queued(gate.turn_at(t0));
    assert_eq!(gate.claim_at(&first, t0 + secs(2.0), None), Claim::Go);
    gate.record_at(Signal::Accepted, t0 + secs(2.0), t0 + secs(2.1));
    gate.record_at(Signal::Overloaded, t0 + secs(2.0), t0 + secs(2.1));
    gate.record_at(Signal::TimedOut, t0 + secs(2.0), t0 + secs(2.1));
    let tally = gate.tally();
    assert_eq!(
        tally,
        Tally {
            sent: 1,
            accepted: 1,
            overloaded: 3,
            timed_out: 1,
            waiting: 1,
            watching: false,
            shed: [0; 3],
            demand: [0.0, 3.0, 0.0],
        },
        "the refusal that turned it on, and the two after; two calls asked, one waits"
    );
    assert_eq!(
        gate.tally(),
        Tally {
            waiting: 1,
            demand: [0.0, 1.0, 0.0],
            ..Tally::default()
        },
        "the one that waits still wants its turn"
    );
}

#[test]
fn the_first_tally_tells_the_failure_that_turned_the_gate_on() {
    let t0 = Instant::now();
    let gate = gate(t0);
    gate.record_at(Signal::TimedOut, t0, t0 + secs(3.0));
    assert_eq!(
        gate.tally(),
        Tally {
            overloaded: 1,
            timed_out: 1,
            ..Tally::default()
        },
        "the daemon hears that the dependency is slow, not only that a gate is on"
    );
}

#[test]
fn the_rate_never_passes_its_bounds() {
    let t0 = Instant::now();
    let gate = SendGate::new_at(
        &policy(GatePolicy {
            max_rate: 50.0,
            ..any_refusal()
        }),
        t0,
    );
    overload(&gate, t0);
    for _ in 0..1000 {
        gate.record_at(Signal::Accepted, t0, t0);
    }
    assert_eq!(gate.rate(), Some(50.0));
    for i in 0..1000 {
        let t = t0 + secs(2.0 + f64::from(i) * 0.001);
        gate.record_at(Signal::Overloaded, t, t);
    }
    assert_eq!(gate.rate(), Some(0.5));
}

mod against_an_ideal_pacer {
    use super::*;
    use proptest::prelude::*;

    /// The ideal pacer: turns are the integral of the rate. Over a run where
    /// someone always waits, the gate gives as many turns as the integral,
    /// give or take one; and over any stretch, never more than the integral
    /// plus one turn and what accrues in the timer-lag allowance.
    fn integral(rates: &[(f64, f64)], from: f64, to: f64) -> f64 {
        let mut start = 0.0;
        let mut total = 0.0;
        for &(rate, lasting) in rates {
            let end = start + lasting;
            let overlap = (end.min(to) - start.max(from)).max(0.0);
            total += rate * overlap;
            start = end;
        }
        total
    }

    proptest! {
        #[test]
        fn a_busy_gate_gives_the_turns_its_rates_add_up_to(
            rates in proptest::collection::vec((0.5..400.0f64, 0.05..2.0f64), 1..8),
        ) {
            let t0 = Instant::now();
            let gate = gate(t0);
            overload(&gate, t0);
            let at = |s: f64| t0 + secs(s);
            // Each rate is a lease for its stretch of time; a line of waiters
            // is always there, claiming exactly when told.
            let mut start = 0.0;
            let mut turns = Vec::new();
            for &(rate, lasting) in &rates {
                let end = start + lasting;
                gate.lease_at(rate, at(end), at(start));
                let mut now = start;
                'stretch: loop {
                    let ticket = match gate.turn_at(at(now)) {
                        Turn::Now => {
                            turns.push(now);
                            continue;
                        }
                        Turn::Queued(ticket) => ticket,
                        Turn::Shed => unreachable!("no turn here has a time to come by"),
                    };
                    loop {
                        match gate.claim_at(&ticket, at(now), None) {
                            Claim::Go => {
                                turns.push(now);
                                break;
                            }
                            Claim::At(due) if (due - t0).as_secs_f64() < end => {
                                now = (due - t0).as_secs_f64();
                            }
                            Claim::At(_) | Claim::Behind => {
                                gate.leave(ticket);
                                break 'stretch;
                            }
                        }
                    }
                }
                start = end;
            }
            let ideal = integral(&rates, 0.0, start);
            let given = turns.len() as f64;
            prop_assert!((given - ideal).abs() <= 1.0 + 1e-6, "{given} turns, ideal {ideal}: {rates:?}");
            // Stretches of 1, 2, 4, ... turns from every turn.
            for (i, &from) in turns.iter().enumerate() {
                let mut span = 1;
                while let Some(&to) = turns.get(i + span) {
                    let bound = integral(&rates, from, to) + 1.0 + 400.0 * 0.002 + 1e-6;
                    prop_assert!(span as f64 <= bound, "{span} turns in [{from}, {to}]");
                    span *= 2;
                }
            }
        }
    }
}

#[test]
fn a_timeout_cuts_to_a_share_of_the_most_accepted_in_a_second_of_the_last_three() {
    let t0 = Instant::now();
    let gate = gate(t0);
    overload(&gate, t0);
    for i in 0..100 {
        gate.record_at(Signal::Accepted, t0, t0 + secs(0.5 + f64::from(i) * 0.001));
    }
    assert_eq!(gate.rate(), Some(100.5));
    // All 100 were accepted within one second before 1.2 s.
    let at = t0 + secs(1.2);
    gate.record_at(Signal::TimedOut, at, at);
    assert!(
        (gate.rate().unwrap() - 70.0).abs() < 1e-9,
        "0.7 × 100 accepted: {:?}",
        gate.rate()
    );
    let later = t0 + secs(3.0);
    gate.record_at(Signal::TimedOut, later, later);
    assert!(
        (gate.rate().unwrap() - 49.0).abs() < 1e-9,
        "the 100 are still within three seconds, but a cut never raises the rate: 0.7 × 70: {:?}",
        gate.rate()
    );
    let much_later = t0 + secs(4.0);
    gate.record_at(Signal::TimedOut, much_later, much_later);
    assert_eq!(
        gate.rate(),
        Some(0.5),
        "nothing accepted in the last three seconds: down to the probe rate"
    );
    let refused = t0 + secs(4.5);
    gate.record_at(Signal::Overloaded, refused, refused);
    assert_eq!(gate.rate(), Some(0.5));
}

#[test]
fn after_a_timeout_the_rate_grows_no_faster_than_the_dependency_delivers() {
    let t0 = Instant::now();
    let gate = SendGate::new_at(&policy(any_refusal()), t0);
    gate.record_at(Signal::TimedOut, t0, t0);
    assert_eq!(gate.rate(), Some(0.5), "a timeout turns the gate on, probing");
    // Twenty answers in the next second: slow start would add `ramp` for each.
    for i in 0..20 {
        let at = t0 + secs(0.05 * f64::from(i + 1));
        gate.record_at(Signal::Accepted, at, at);
        let rate = gate.rate().unwrap();
        assert!(
            rate <= 1.25 * f64::from(i + 1) + 1e-9,
            "at most 1.25 × the {} delivered: {rate}",
            i + 1
        );
    }
    assert_eq!(
        gate.rate(),
        Some(23.75),
        "1.25 × 19, the most delivered within one second (tenths are whole)"
    );

    let answering = SendGate::new_at(&policy(any_refusal()), t0);
    answering.record_at(Signal::TimedOut, t0, t0);
    answering.record_at(Signal::Overloaded, t0, t0 + secs(0.01));
    for i in 0..20 {
        let at = t0 + secs(0.05 * f64::from(i + 1));
        answering.record_at(Signal::Accepted, at, at);
    }
    let slow_start = 0.5 + GatePolicy::default().ramp * 20.0;
    assert_eq!(
        answering.rate(),
        Some(slow_start),
        "a refusal after the timeout: the dependency answers at once, slow start again"
    );

    let fresh = SendGate::new_at(&policy(any_refusal()), t0);
    fresh.record_at(Signal::Overloaded, t0, t0);
    for i in 0..20 {
        let at = t0 + secs(0.05 * f64::from(i + 1));
        fresh.record_at(Signal::Accepted, at, at);
    }
    assert_eq!(
        fresh.rate(),
        Some(slow_start),
        "after refusals alone, slow start: 0.5 + ramp per accepted"
    );
}

#[test]
fn a_call_that_rejoins_waits_ahead_of_those_that_came_after_it() {
    let t0 = Instant::now();
    let gate = gate(t0);
    overload(&gate, t0);
    let first = queued(gate.turn_at(t0));
    let second = queued(gate.turn_at(t0));
    let place = first.number();
    assert_eq!(gate.claim_at(&first, t0 + secs(2.0), None), Claim::Go);
    // The first's attempt is refused; it comes back while the second waits.
    let again = queued(gate.rejoin_at(place, Asker::default(), t0 + secs(2.1)));
    assert_eq!(again.number(), place);
    assert_eq!(gate.first_in_line().map(|(n, _)| n), Some(place));
    assert_eq!(gate.claim_at(&second, t0 + secs(4.0), None), Claim::Behind);
    assert_eq!(gate.claim_at(&again, t0 + secs(4.0), None), Claim::Go);
    assert_eq!(gate.claim_at(&second, t0 + secs(6.0), None), Claim::Go);
}

#[test]
fn a_lease_paces_until_it_ends_though_nothing_happens_after() {
    let t0 = Instant::now();
    let gate = gate(t0);
    overload(&gate, t0);
    gate.lease_at(7.25, t0 + Duration::from_millis(600), t0);
    assert_eq!(gate.rate_at(t0 + Duration::from_millis(599)), Some(7.25));
    assert_eq!(
        gate.rate_at(t0 + Duration::from_millis(600)),
        Some(0.5),
        "its own again"
    );
    assert_eq!(gate.rate(), Some(7.25), "as of its last turn or outcome");
}

/// A gate under `overloadWhen: most-refused`, otherwise the default.
fn most_refused(now: Instant) -> SendGate {
    SendGate::new_at(
        &policy(GatePolicy {
            overload_when: OverloadWhen::MostRefused,
            ..GatePolicy::default()
        }),
        now,
    )
}

/// `count` outcomes of `signal` spread evenly over the `millis` after `from`.
fn answers(gate: &SendGate, signal: Signal, count: u32, from: Instant, millis: u64) {
    for i in 0..count {
        let at = from + Duration::from_millis(millis * u64::from(i) / u64::from(count));
        gate.record_at(signal, at, at);
    }
}

#[test]
fn under_most_refused_a_refusal_among_acceptances_only_starts_watching() {
    let t0 = Instant::now();
    let gate = most_refused(t0);
    answers(&gate, Signal::Accepted, 30, t0, 900);
    gate.record_at(Signal::Overloaded, t0 + secs(0.95), t0 + secs(0.95));
    assert!(!gate.is_on(), "one refusal in 31 is no overload");
    assert!(gate.is_watching());
    assert_eq!(gate.turn_at(t0 + secs(0.96)), Turn::Now);
    // Ten percent refused for a second, as a bad replica would.
    for i in 0..40 {
        let at = t0 + secs(1.0 + f64::from(i) * 0.025);
        let signal = if i % 10 == 0 {
            Signal::Overloaded
        } else {
            Signal::Accepted
        };
        gate.record_at(signal, at, at);
    }
    assert!(!gate.is_on(), "a tenth refused at random never turns it on");
    // Quiet for `quiet`: watching ends.
    gate.record_at(Signal::Accepted, t0 + secs(7.0), t0 + secs(7.0));
    assert!(!gate.is_watching());
    let default = gate_with_accepts_then_a_refusal(t0);
    assert!(default.is_on(), "under any-refusal, the same refusal turns it on");
}

fn gate_with_accepts_then_a_refusal(t0: Instant) -> SendGate {
    let gate = SendGate::new_at(&policy(any_refusal()), t0);
    answers(&gate, Signal::Accepted, 30, t0, 900);
    gate.record_at(Signal::Overloaded, t0 + secs(0.95), t0 + secs(0.95));
    gate
}

#[test]
fn under_most_refused_refusals_that_outnumber_acceptances_turn_it_on_at_twice_what_is_delivered() {
    let t0 = Instant::now();
    let gate = most_refused(t0);
    answers(&gate, Signal::Accepted, 20, t0, 500);
    gate.record_at(Signal::Overloaded, t0 + secs(0.5), t0 + secs(0.5));
    assert!(gate.is_watching());
    // Then far more refused than accepted: 12 accepted, and refusals until
    // they outnumber them by four standard deviations: 42 of 54.
    answers(&gate, Signal::Accepted, 12, t0 + secs(0.55), 400);
    let mut refused = 1;
    while !gate.is_on() {
        let at = t0 + secs(0.6 + f64::from(refused) * 0.005);
        gate.record_at(Signal::Overloaded, at, at);
        refused += 1;
    }
    assert_eq!(refused, 42, "the refusals in all, the first one included");
    assert!(gate.is_answering(), "it accepts some: judged to answer");
    assert_eq!(
        gate.own_rate(),
        Some(24.0),
        "twice the 12 accepted since watching began, not the lowest rate"
    );
    // The refusals go on outnumbering the acceptances: each cuts, as overload.
    gate.record_at(Signal::Overloaded, t0 + secs(0.9), t0 + secs(0.9));
    assert_eq!(gate.own_rate(), Some(12.0), "to what was accepted");
}

#[test]
fn under_most_refused_a_dependency_that_accepts_nothing_is_probed_then_judged_by_its_share() {
    let t0 = Instant::now();
    let gate = most_refused(t0);
    gate.record_at(Signal::Overloaded, t0, t0);
    gate.record_at(Signal::Overloaded, t0, t0);
    assert!(
        !gate.is_on(),
        "two refusals, as a dependency failing half at random could give first"
    );
    gate.record_at(Signal::Overloaded, t0, t0);
    assert!(gate.is_on(), "three and nothing accepted lately: down");
    assert_eq!(gate.rate(), Some(0.5), "probing at the lowest rate");
    assert!(!gate.is_answering());
    // It answers again, and fails a tenth at random.
    gate.record_at(Signal::Accepted, t0 + secs(1.0), t0 + secs(1.0));
    assert!(gate.is_answering(), "something got through");
    answers(&gate, Signal::Accepted, 50, t0 + secs(1.0), 500);
    let before = gate.own_rate().unwrap();
    for i in 0..10 {
        let at = t0 + secs(1.5 + f64::from(i) * 0.05);
        gate.record_at(Signal::Overloaded, at, at);
        gate.record_at(Signal::Accepted, at, at);
    }
    assert!(
        gate.own_rate().unwrap() >= before,
        "ten refusals among 60 acceptances cut nothing: {before} then {:?}",
        gate.own_rate()
    );
    // Then it refuses far more than it accepts: that is overload.
    answers(&gate, Signal::Overloaded, 200, t0 + secs(2.0), 200);
    assert!(
        gate.own_rate().unwrap() < before,
        "refusals that outnumber acceptances cut it: {:?}",
        gate.own_rate()
    );
}

#[test]
fn under_most_refused_a_watching_gate_tells_the_fleet_what_it_hears_and_paces_when_told() {
    let t0 = Instant::now();
    let gate = most_refused(t0);
    answers(&gate, Signal::Accepted, 30, t0, 900);
    assert_eq!(gate.tally(), Tally::default(), "healthy, it counts nothing");
    gate.record_at(Signal::Overloaded, t0 + secs(0.95), t0 + secs(0.95));
    assert!(
        gate.asks_fleet_at(t0 + secs(0.95)),
        "watching a dependency that accepts"
    );
    answers(&gate, Signal::Accepted, 5, t0 + secs(1.0), 50);
    answers(&gate, Signal::Overloaded, 2, t0 + secs(1.05), 50);
    assert_eq!(
        gate.tally(),
        Tally {
            sent: 7,
            accepted: 5,
            overloaded: 2,
            watching: true,
            ..Tally::default()
        },
        "what it heard since it began to watch, the refusal that began it left out"
    );
    let now = t0 + secs(1.1);
    assert!(gate.pace_by_fleet_at(now));
    assert!(gate.is_on() && gate.is_answering());
    gate.lease_at(40.0, now + secs(1.0), now);
    assert_eq!(gate.rate_at(now), Some(40.0), "the grant paces it");
    assert!(!gate.pace_by_fleet_at(now), "on already");
}

#[test]
fn under_most_refused_a_gate_that_has_seen_nothing_accepted_waits_to_see_it_down() {
    let t0 = Instant::now();
    let gate = most_refused(t0);
    gate.record_at(Signal::Overloaded, t0, t0);
    assert!(gate.is_watching());
    assert!(
        !gate.asks_fleet_at(t0),
        "it would tell the fleet of a dependency it has not seen accept"
    );
    assert!(gate.pace_by_fleet_at(t0 + secs(0.1)), "told to pace all the same");
    assert_eq!(gate.rate(), Some(0.5), "it probes, as for a dependency down");
}

#[test]
fn a_timeout_turns_the_gate_on_at_once_under_most_refused_too() {
    let t0 = Instant::now();
    let gate = most_refused(t0);
    answers(&gate, Signal::Accepted, 30, t0, 900);
    gate.record_at(Signal::TimedOut, t0, t0 + secs(1.0));
    assert!(gate.is_on());
    assert!(!gate.is_answering());
}

/// A gate as shipped: `overloadWhen: evidence`.
fn shipped(now: Instant) -> SendGate {
    SendGate::seeded_at(&policy(GatePolicy::default()), now, 7)
}

#[test]
fn the_shipped_gate_judges_by_the_evidence() {
    assert_eq!(GatePolicy::default().overload_when, OverloadWhen::Evidence);
}

#[test]
fn as_shipped_a_dependency_failing_a_share_at_random_is_never_paced() {
    // 30 calls a second for a minute, a tenth or three tenths refused at
    // random, as a bad replica behind a balancer refuses: under
    // any-refusal (the default before) the first refusal paced it.
    for share in [0.1, 0.3] {
        let t0 = Instant::now();
        let gate = shipped(t0);
        let mut rng = SmallRng::seed_from_u64(11);
        for i in 0..1_800 {
            let at = t0 + secs(f64::from(i) / 30.0);
            assert_eq!(gate.turn_at(at), Turn::Now, "paced at {share} after {i} calls");
            let signal = if rng.random_bool(share) {
                Signal::Overloaded
            } else {
                Signal::Accepted
            };
            gate.record_at(signal, at, at + Duration::from_millis(5));
        }
        assert!(
            !gate.is_on() && gate.is_watching(),
            "a share at random keeps it watching"
        );
    }
}

#[test]
fn as_shipped_five_refusals_in_a_row_from_a_dependency_accepting_nothing_show_it_down() {
    let t0 = Instant::now();
    let gate = shipped(t0);
    answers(&gate, Signal::Overloaded, 4, t0, 4);
    assert!(
        !gate.is_on(),
        "four in a row: a half at random does that once in 16 runs"
    );
    assert!(gate.is_watching());
    gate.record_at(Signal::Overloaded, t0 + secs(0.01), t0 + secs(0.01));
    assert!(gate.is_on(), "the fifth: down");
    assert_eq!(gate.phase(), "probing");
    assert!(!gate.is_answering());
}

#[test]
fn as_shipped_three_refusals_over_a_second_show_a_dependency_accepting_nothing_down() {
    let t0 = Instant::now();
    let gate = shipped(t0);
    gate.record_at(Signal::Overloaded, t0, t0);
    gate.record_at(Signal::Overloaded, t0 + secs(0.3), t0 + secs(0.3));
    gate.record_at(Signal::Overloaded, t0 + secs(0.9), t0 + secs(0.9));
    assert!(!gate.is_on(), "three within a second: a trickle's chance run");
    gate.record_at(Signal::Overloaded, t0 + secs(1.0), t0 + secs(1.0));
    assert!(gate.is_on(), "the run has lasted a second with nothing accepted");
}

#[test]
fn as_shipped_a_dependency_found_down_recovers_as_a_capacity_until_cuts_show_its_refusals_random() {
    let t0 = Instant::now();
    let gate = shipped(t0);
    // A chance run of five refusals from a dependency that fails half its
    // requests at random looks like an outage.
    answers(&gate, Signal::Overloaded, 5, t0, 5);
    assert!(gate.is_on());
    gate.record_at(Signal::Accepted, t0 + secs(1.0), t0 + secs(1.0));
    assert_eq!(gate.phase(), "slow_start");
    assert!(
        !gate.is_answering(),
        "a recovering capacity's refusals say overload"
    );
    // A half refused at any rate: the gate's cuts leave the refusals at
    // their share, and two trials in a row judge them random.
    let mut rng = SmallRng::seed_from_u64(3);
    let answering = answers_until_judged_random(&gate, &mut rng, t0 + secs(1.0), 400);
    assert!(
        answering.is_some_and(|i| i <= 200),
        "judged to answer after {answering:?} answers"
    );
    assert_eq!(gate.phase(), "slow_start");
}

#[test]
fn as_shipped_a_recovery_from_twenty_refusals_in_a_row_is_tried_for_failure_at_random_only_once_it_has_lasted_the_outage(
) {
    // The same half refused as above, after an outage no chance explains
    // (twenty refusals, on at the fifth, down for 4 s): the refusals of its
    // recovery are a capacity's, and no trial holds them for as long again;
    // after that, a dependency still refusing half is tried, and judged to
    // fail it at random.
    let t0 = Instant::now();
    let gate = shipped(t0);
    answers(&gate, Signal::Overloaded, 20, t0, 5_000);
    gate.record_at(Signal::Accepted, t0 + secs(5.0), t0 + secs(5.0));
    let mut rng = SmallRng::seed_from_u64(3);
    for i in 1..400 {
        half_at_random(&gate, &mut rng, t0 + secs(5.0 + f64::from(i) * 0.01));
        assert!(
            !gate.is_answering(),
            "judged to answer {i} answers into its recovery"
        );
    }
    let answering = answers_until_judged_random(&gate, &mut rng, t0 + secs(8.99), 400);
    assert!(
        answering.is_some(),
        "never tried once the recovery had lasted the outage"
    );
}

#[test]
fn as_shipped_nineteen_refusals_in_a_row_are_a_run_chance_may_give() {
    let t0 = Instant::now();
    let gate = shipped(t0);
    answers(&gate, Signal::Overloaded, 19, t0, 5_000);
    gate.record_at(Signal::Accepted, t0 + secs(5.0), t0 + secs(5.0));
    let mut rng = SmallRng::seed_from_u64(3);
    let answering = answers_until_judged_random(&gate, &mut rng, t0 + secs(5.0), 400);
    assert!(
        answering.is_some_and(|i| i <= 200),
        "tried at once: judged to answer after {answering:?}"
    );
}

/// An attempt answered at `at`, refused half the time at random.
fn half_at_random(gate: &SendGate, rng: &mut SmallRng, at: Instant) {
    let signal = if rng.random_bool(0.5) {
        Signal::Overloaded
    } else {
        Signal::Accepted
    };
    gate.record_at(signal, at, at);
}

/// Up to `most` attempts answered [`half_at_random`], 10 ms apart from
/// 10 ms after `from`: after how many the gate judges its dependency to
/// answer, failing a share at random.
fn answers_until_judged_random(gate: &SendGate, rng: &mut SmallRng, from: Instant, most: u32) -> Option<u32> {
    (1..=most).find(|i| {
        half_at_random(gate, rng, from + secs(f64::from(*i) * 0.01));
        gate.is_answering()
    })
}

#[test]
fn as_shipped_half_failed_at_random_seldom_seems_overloaded_to_a_busy_process() {
    // 100 calls a second for ten minutes, half refused at random: the K = 2
    // test looks again at every answer, and at three standard deviations it
    // turned the gate on every minute or two, pacing the calls into a backlog.
    let t0 = Instant::now();
    let gate = shipped(t0);
    let mut rng = SmallRng::seed_from_u64(5);
    let mut turned_on = 0;
    for i in 0..60_000 {
        let at = t0 + secs(f64::from(i) / 100.0);
        let was_on = gate.is_on();
        half_at_random(&gate, &mut rng, at);
        turned_on += usize::from(!was_on && gate.is_on());
    }
    assert!(turned_on <= 1, "turned on {turned_on} times in ten minutes");
}

fn asker(class: Criticality, by: Option<Instant>) -> Asker {
    Asker { class, by }
}

#[test]
fn a_more_critical_call_waits_ahead_of_less_critical_ones_already_in_line() {
    let t0 = Instant::now();
    let gate = gate(t0);
    overload(&gate, t0);
    let sheddable = queued(gate.turn_for_at(asker(Criticality::Sheddable, None), t0));
    let default = queued(gate.turn_at(t0));
    let critical = queued(gate.turn_for_at(asker(Criticality::Critical, None), t0 + secs(0.5)));
    assert_eq!(
        gate.first_in_line().map(|(n, _)| n),
        Some(critical.number()),
        "the critical call came last and is first"
    );
    // Turns every 2 s at the lowest rate: critical, then default, then sheddable.
    assert_eq!(gate.claim_at(&default, t0 + secs(2.0), None), Claim::Behind);
    assert_eq!(gate.claim_at(&critical, t0 + secs(2.0), None), Claim::Go);
    assert_eq!(gate.claim_at(&sheddable, t0 + secs(4.0), None), Claim::Behind);
    assert_eq!(gate.claim_at(&default, t0 + secs(4.0), None), Claim::Go);
    assert_eq!(gate.claim_at(&sheddable, t0 + secs(6.0), None), Claim::Go);
}

#[test]
fn a_call_whose_turn_would_come_after_its_bound_is_shed_and_takes_no_place() {
    let t0 = Instant::now();
    let gate = gate(t0);
    overload(&gate, t0);
    // Probing at 0.5 a second with no credit: the next probe is at 2 s,
    // and the line moves at once when the dependency is back, so only the
    // next probe counts.
    let first = queued(gate.turn_for_at(asker(Criticality::Default, Some(t0 + secs(2.5))), t0));
    assert_eq!(
        gate.turn_for_at(asker(Criticality::Default, Some(t0 + secs(1.5))), t0),
        Turn::Shed,
        "the next probe comes after its bound"
    );
    let second = queued(gate.turn_for_at(asker(Criticality::Default, Some(t0 + secs(2.5))), t0));
    // Accepted: the rate is what the dependency takes, here one a second,
    // and those ahead count.
    let t1 = t0 + secs(0.1);
    gate.record_at(Signal::Accepted, t0, t1);
    {
        let mut state = gate.lock();
        state.rate.now = 1.0;
        state.pacer = Pacer::new(0.0, t1);
    }
    assert_eq!(
        gate.turn_for_at(asker(Criticality::Default, Some(t1 + secs(2.5))), t1),
        Turn::Shed,
        "behind two, its turn would come at 3 s"
    );
    assert_eq!(gate.waiting(), 2, "the shed calls took no place");
    let critical = queued(gate.turn_for_at(asker(Criticality::Critical, Some(t1 + secs(2.5))), t1));
    assert_eq!(
        gate.first_in_line().map(|(n, _)| n),
        Some(critical.number()),
        "with the same bound, a critical call waits: nobody of its class is ahead"
    );
    assert_eq!(
        gate.turn_for_at(asker(Criticality::Sheddable, Some(t1 + secs(3.5))), t1),
        Turn::Shed,
        "a sheddable call waits behind all three: its turn would come at 4 s"
    );
    let tally = gate.tally();
    assert_eq!(tally.shed, [0, 2, 1]);
    assert_eq!(
        tally.demand,
        [1.0 + 1.0, 4.0 + 2.0, 1.0],
        "the calls that asked, and those that wait, by class"
    );
    assert_eq!(gate.claim_at(&critical, t1 + secs(1.0), None), Claim::Go);
    assert_eq!(gate.claim_at(&first, t1 + secs(2.0), None), Claim::Go);
    assert_eq!(gate.claim_at(&second, t1 + secs(3.0), None), Claim::Go);
}

#[test]
fn a_call_is_sent_at_once_on_a_free_turn_whatever_its_bound() {
    let t0 = Instant::now();
    let gate = gate(t0);
    overload(&gate, t0);
    assert_eq!(
        gate.turn_for_at(
            asker(Criticality::Sheddable, Some(t0 + secs(2.0))),
            t0 + secs(2.0)
        ),
        Turn::Now,
        "a turn had accrued by 2 s: a bound of no wait at all is met"
    );
}

#[test]
fn a_call_that_waited_as_long_as_it_could_is_counted_shed() {
    let t0 = Instant::now();
    let gate = gate(t0);
    overload(&gate, t0);
    let waiting = queued(gate.turn_for_at(asker(Criticality::Critical, Some(t0 + secs(3.0))), t0));
    let cancelled = queued(gate.turn_at(t0));
    gate.give_up(waiting);
    gate.leave(cancelled);
    assert_eq!(gate.tally().shed, [1, 0, 0], "a cancelled call is not shed");
    assert_eq!(gate.waiting(), 0);
}
