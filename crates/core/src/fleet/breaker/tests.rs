use super::*;
use crate::policy::CircuitBreakerPolicy;

const OPEN_TIMEOUT: Duration = Duration::from_secs(30);

fn breaker(paced: bool, now: Instant) -> FleetBreaker<u32> {
    let policy = CircuitBreakerPolicy {
        enabled: true,
        open_timeout: OPEN_TIMEOUT,
        ..CircuitBreakerPolicy::default()
    };
    FleetBreaker::new_at(&policy, paced, now)
}

fn open(open_for: Duration) -> BreakerReport {
    BreakerReport {
        open: true,
        open_for,
        refused: 1,
        ..BreakerReport::default()
    }
}

fn outcome(succeeded: u32, failed: u32) -> BreakerReport {
    BreakerReport {
        succeeded,
        failed,
        ..open(OPEN_TIMEOUT)
    }
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Every process of a fleet asks once at `now` with its breaker open;
/// the slots they were granted.
fn round(fleet: &mut FleetBreaker<u32>, processes: u32, now: Instant) -> Vec<u32> {
    (0..processes)
        .filter(|&p| fleet.ask_at(p, open(OPEN_TIMEOUT), now).trials == 1)
        .collect()
}

#[tokio::test(start_paused = true)]
async fn two_hundred_open_breakers_get_the_policys_trials_between_them_not_each() {
    let t0 = Instant::now();
    let mut fleet = breaker(true, t0);
    let first = fleet.ask_at(0, open(Duration::ZERO), t0);
    assert_eq!((first.state, first.retry_in), (CircuitState::Open, OPEN_TIMEOUT));
    assert!(
        round(&mut fleet, 200, t0 + ms(29_900)).is_empty(),
        "open for openTimeout"
    );

    let due = t0 + OPEN_TIMEOUT;
    let holders = round(&mut fleet, 200, due);
    assert_eq!(holders.len(), 10, "halfOpenMaxCalls slots fleet-wide");
    assert_eq!(fleet.state(), CircuitState::HalfOpen);
    assert!(
        round(&mut fleet, 200, due + ms(100)).is_empty(),
        "no process holds two"
    );

    // Two trials succeed: the half-open has had its ten, and sends no more.
    for &p in &holders[..2] {
        assert_eq!(fleet.ask_at(p, outcome(1, 0), due + ms(200)).trials, 0);
    }
    assert!(round(&mut fleet, 200, due + ms(300)).is_empty());
    assert_eq!(fleet.slots_granted(), 10);
}

#[tokio::test(start_paused = true)]
async fn a_failed_trial_opens_the_fleets_breaker_again_for_open_timeout() {
    let t0 = Instant::now();
    let mut fleet = breaker(true, t0);
    fleet.ask_at(0, open(Duration::ZERO), t0);
    let holders = round(&mut fleet, 50, t0 + OPEN_TIMEOUT);
    let failed_at = t0 + OPEN_TIMEOUT + ms(50);
    let told = fleet.ask_at(holders[0], outcome(0, 1), failed_at);
    assert_eq!((told.state, told.retry_in), (CircuitState::Open, OPEN_TIMEOUT));
    // The other holders' successes, from before the failure, count for nothing.
    for &p in &holders[1..4] {
        assert_eq!(
            fleet.ask_at(p, outcome(1, 0), failed_at + ms(10)).state,
            CircuitState::Open
        );
    }
    assert!(round(&mut fleet, 50, failed_at + OPEN_TIMEOUT - ms(1)).is_empty());
    assert_eq!(round(&mut fleet, 50, failed_at + OPEN_TIMEOUT).len(), 10);
}

#[tokio::test(start_paused = true)]
async fn success_threshold_good_trials_close_every_breaker_that_opened_before() {
    let t0 = Instant::now();
    let mut fleet = breaker(true, t0);
    fleet.ask_at(0, open(Duration::ZERO), t0);
    let due = t0 + OPEN_TIMEOUT;
    let holders = round(&mut fleet, 20, due);
    for &p in &holders[..2] {
        fleet.ask_at(p, outcome(1, 0), due + ms(10));
    }
    assert_eq!(fleet.state(), CircuitState::HalfOpen, "two of three");
    // A success from a process that holds no slot is not a trial's.
    assert_eq!(
        fleet.ask_at(15, outcome(1, 0), due + ms(15)).state,
        CircuitState::HalfOpen
    );
    let closing = fleet.ask_at(holders[2], outcome(1, 0), due + ms(20));
    assert_eq!(closing.state, CircuitState::Closed);

    let later = due + ms(100);
    for p in 0..20 {
        let told = fleet.ask_at(p, open(later - t0), later);
        assert_eq!(
            (p, told.state),
            (p, CircuitState::Closed),
            "opened before the close"
        );
    }
    // A breaker that opened after the close is a new episode: open for openTimeout.
    let again = fleet.ask_at(21, open(ms(10)), later + ms(50));
    assert_eq!((again.state, again.retry_in), (CircuitState::Open, OPEN_TIMEOUT));
}

#[tokio::test(start_paused = true)]
async fn without_a_gate_the_breakers_close_in_a_doubling_ramp() {
    let t0 = Instant::now();
    let mut fleet = breaker(false, t0);
    fleet.ask_at(0, open(Duration::ZERO), t0);
    let due = t0 + OPEN_TIMEOUT;
    let holders = round(&mut fleet, 200, due);
    for &p in &holders[..3] {
        fleet.ask_at(p, outcome(1, 0), due + ms(10));
    }
    let closed_at = due + ms(10);
    let closed = |fleet: &mut FleetBreaker<u32>, at: Instant| {
        (0..200)
            .filter(|&p| fleet.ask_at(p, open(at - t0), at).state == CircuitState::Closed)
            .count()
    };
    assert_eq!(
        closed(&mut fleet, closed_at + ms(100)),
        10,
        "as many as the trials at once"
    );
    let waiting = fleet.ask_at(150, open(closed_at + ms(100) - t0), closed_at + ms(100));
    assert_eq!((waiting.state, waiting.retry_in), (CircuitState::Open, ms(400)));
    assert_eq!(closed(&mut fleet, closed_at + ms(600)), 20, "told ones stay told");
    assert_eq!(closed(&mut fleet, closed_at + ms(1_100)), 40);
    assert_eq!(closed(&mut fleet, closed_at + ms(2_600)), 200);
}

#[tokio::test(start_paused = true)]
async fn a_slot_whose_holder_never_answers_is_free_again_after_its_life() {
    let t0 = Instant::now();
    let mut fleet = breaker(true, t0);
    fleet.ask_at(0, open(Duration::ZERO), t0);
    let due = t0 + OPEN_TIMEOUT;
    assert_eq!(round(&mut fleet, 10, due).len(), 10);
    assert!(round(&mut fleet, 20, due + SLOT_LIFE - ms(1)).is_empty());
    assert_eq!(round(&mut fleet, 20, due + SLOT_LIFE).len(), 10);
    // A holder whose slot lapsed may still report its trial: it counts.
    fleet.ask_at(0, outcome(0, 1), due + SLOT_LIFE + ms(1));
    assert_eq!(fleet.state(), CircuitState::Open);
}

#[tokio::test(start_paused = true)]
async fn a_closed_breaker_only_reports_and_an_idle_closed_fleet_can_go() {
    let t0 = Instant::now();
    let mut fleet = breaker(true, t0);
    let calm = fleet.ask_at(0, BreakerReport::default(), t0);
    assert_eq!(calm.state, CircuitState::Closed);
    assert!(!fleet.is_idle_at(t0 + ms(9_999), ms(10_000)));
    assert!(fleet.is_idle_at(t0 + ms(10_000), ms(10_000)));
    fleet.ask_at(0, open(Duration::ZERO), t0);
    assert!(
        !fleet.is_idle_at(t0 + ms(60_000), ms(10_000)),
        "an open fleet breaker is kept"
    );
}

#[tokio::test(start_paused = true)]
async fn a_slot_goes_only_to_a_process_with_calls_to_try_it_with() {
    let t0 = Instant::now();
    let mut fleet = breaker(true, t0);
    fleet.ask_at(0, open(Duration::ZERO), t0);
    let idle = BreakerReport {
        refused: 0,
        ..open(OPEN_TIMEOUT)
    };
    let due = t0 + OPEN_TIMEOUT;
    assert_eq!(
        fleet.ask_at(1, idle, due).trials,
        0,
        "no call refused since its last ask"
    );
    assert_eq!(fleet.ask_at(1, open(OPEN_TIMEOUT), due).trials, 1);
}

#[tokio::test(start_paused = true)]
async fn fewer_slots_at_once_than_successes_needed_still_reach_a_close() {
    let t0 = Instant::now();
    let policy = CircuitBreakerPolicy {
        enabled: true,
        open_timeout: OPEN_TIMEOUT,
        half_open_max_calls: 1,
        success_threshold: 3,
        ..CircuitBreakerPolicy::default()
    };
    let mut fleet = FleetBreaker::new_at(&policy, true, t0);
    fleet.ask_at(0, open(Duration::ZERO), t0);
    let due = t0 + OPEN_TIMEOUT;
    assert_eq!(round(&mut fleet, 5, due), vec![0], "one at a time");
    assert_eq!(fleet.ask_at(0, outcome(1, 0), due + ms(100)).trials, 1);
    assert_eq!(fleet.ask_at(0, outcome(1, 0), due + ms(200)).trials, 1);
    assert_eq!(
        fleet.ask_at(0, outcome(1, 0), due + ms(300)).state,
        CircuitState::Closed
    );
    assert_eq!(fleet.slots_granted(), 3);
}
