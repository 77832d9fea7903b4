//! Tests of the fleet breaker: a fleet's open breakers given the policy's trials between them,
//! alone and across replicas sharing a store.

use super::episode::{Episode, EpisodeAnswer, EpisodePhase, Heard, HeardFrom};
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

/// A fleet of 200 whose breakers opened at `t0`, closed by three
/// successful trials `openTimeout` later: the fleet and when it closed.
fn closed_after_an_outage(t0: Instant) -> (FleetBreaker<u32>, Instant) {
    let mut fleet = breaker(false, t0);
    fleet.ask_at(0, open(Duration::ZERO), t0);
    let due = t0 + OPEN_TIMEOUT;
    let holders = round(&mut fleet, 200, due);
    for &p in &holders[..3] {
        fleet.ask_at(p, outcome(1, 0), due + ms(10));
    }
    (fleet, due + ms(10))
}

/// Processes `0..200` whose breakers opened at `t0` ask at `at`, those in
/// `reopened` with a breaker that opened again 50 ms before: how many
/// of the first kind are told to close.
fn closed_by(fleet: &mut FleetBreaker<u32>, t0: Instant, at: Instant, reopened: &[u32]) -> usize {
    (0..200)
        .filter(|&p| {
            let report = if reopened.contains(&p) {
                open(ms(50))
            } else {
                open(at - t0)
            };
            fleet.ask_at(p, report, at).state == CircuitState::Closed && !reopened.contains(&p)
        })
        .count()
}

#[tokio::test(start_paused = true)]
async fn without_a_gate_the_breakers_close_in_a_ramp_that_doubles_while_none_reopens() {
    let t0 = Instant::now();
    let (mut fleet, closed_at) = closed_after_an_outage(t0);
    assert_eq!(
        closed_by(&mut fleet, t0, closed_at + ms(100), &[]),
        10,
        "as many as the trials at once"
    );
    let waiting = fleet.ask_at(150, open(closed_at + ms(100) - t0), closed_at + ms(100));
    assert_eq!((waiting.state, waiting.retry_in), (CircuitState::Open, ms(400)));
    assert_eq!(
        closed_by(&mut fleet, t0, closed_at + ms(600), &[]),
        20,
        "twice as many after a step; told ones stay told"
    );
    assert_eq!(closed_by(&mut fleet, t0, closed_at + ms(1_100), &[]), 40);
    assert_eq!(closed_by(&mut fleet, t0, closed_at + ms(2_600), &[]), 200);
}

#[tokio::test(start_paused = true)]
async fn the_ramps_step_is_as_long_as_a_closed_breaker_takes_to_open_again() {
    // 20 calls a second a process, refused while open: five failures in a
    // row take 250 ms, and the process asks within 100 ms after.
    let t0 = Instant::now();
    let mut fleet = breaker(false, t0);
    let calling = |open_for| BreakerReport {
        refused: 2,
        ..open(open_for)
    };
    let mut now = t0;
    while now < t0 + OPEN_TIMEOUT {
        for p in 0..200 {
            fleet.ask_at(p, calling(now - t0), now);
        }
        now += ms(100);
    }
    let holders: Vec<u32> = (0..200)
        .filter(|&p| fleet.ask_at(p, calling(now - t0), now).trials == 1)
        .collect();
    for &p in &holders[..3] {
        fleet.ask_at(p, outcome(1, 0), now + ms(10));
    }
    let closed_at = now + ms(10);
    assert_eq!(closed_by(&mut fleet, t0, closed_at + ms(20), &[]), 10);
    let waiting = fleet.ask_at(150, calling(closed_at - t0), closed_at + ms(20));
    assert_eq!((waiting.state, waiting.retry_in), (CircuitState::Open, ms(330)));
    assert_eq!(closed_by(&mut fleet, t0, closed_at + ms(360), &[]), 20);
}

#[tokio::test(start_paused = true)]
async fn the_ramp_holds_while_breakers_it_closed_open_again() {
    let t0 = Instant::now();
    let (mut fleet, closed_at) = closed_after_an_outage(t0);
    assert_eq!(closed_by(&mut fleet, t0, closed_at + ms(100), &[]), 10);
    // One of the ten opens again in each of the next three steps.
    for (step, reopened) in [0, 1, 2].into_iter().enumerate() {
        let step_ends = closed_at + RAMP_STEP * (step as u32 + 1);
        let heard = fleet.ask_at(reopened, open(ms(50)), step_ends - ms(100));
        assert_eq!(heard.state, CircuitState::Open, "a new episode for it");
        let reopened_so_far: Vec<u32> = (0..=reopened).collect();
        assert_eq!(
            closed_by(&mut fleet, t0, step_ends + ms(100), &reopened_so_far),
            10 - reopened_so_far.len(),
            "held at ten told, step {step}"
        );
    }
    // Steps with none opening again: it widens from where it held.
    assert_eq!(closed_by(&mut fleet, t0, closed_at + ms(2_100), &[0, 1, 2]), 17);
    assert_eq!(closed_by(&mut fleet, t0, closed_at + ms(2_600), &[0, 1, 2]), 37);
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

/// Two replicas' fleet breakers and the store they share, with no delay
/// between them; the store's clock runs 5 s ahead of theirs.
struct Replicated {
    store: Episode,
    heard: HeardFrom,
    replicas: [FleetBreaker<u32>; 2],
    t0: Instant,
}

impl Replicated {
    fn new(t0: Instant) -> Self {
        Self {
            store: Episode::default(),
            heard: HeardFrom::default(),
            replicas: [breaker(true, t0), breaker(true, t0)],
            t0,
        }
    }

    /// Replica `r` shares and adopts the answer at `now`.
    fn exchange(&mut self, r: usize, now: Instant) {
        let Some(share) = self.replicas[r].share_at(now) else {
            return;
        };
        let at = 5_000 + (now - self.t0).as_millis() as u64;
        let granted = self.store.merge(&r.to_string(), &share, &self.heard, at).unwrap();
        self.heard.insert(r.to_string(), Heard::of(&share, at));
        let answer = EpisodeAnswer {
            episode: self.store.clone(),
            granted,
            at,
        };
        self.replicas[r].adopt_at(&answer, now);
    }

    /// Processes `0..200` ask at `now`, the even ones replica 0, the odd
    /// ones replica 1, each with `report(p)`: the processes granted a slot.
    fn ask(&mut self, now: Instant, report: impl Fn(u32) -> BreakerReport) -> Vec<u32> {
        (0..200)
            .filter(|&p| self.replicas[(p % 2) as usize].ask_at(p, report(p), now).trials == 1)
            .collect()
    }

    /// Both replicas exchange, then every process asks, every 100 ms from
    /// `from` for `span`: the slots granted.
    fn run(&mut self, from: Instant, span: Duration, report: impl Fn(u32) -> BreakerReport) -> Vec<u32> {
        let mut holders = Vec::new();
        let mut now = from;
        while now < from + span {
            self.exchange(0, now);
            self.exchange(1, now + ms(30));
            holders.extend(self.ask(now + ms(50), &report));
            now += ms(100);
        }
        holders
    }
}

#[tokio::test(start_paused = true)]
async fn replicas_sharing_a_store_send_the_policys_trials_between_them_not_each() {
    let t0 = Instant::now();
    let mut fleet = Replicated::new(t0);
    fleet.ask(t0, |_| open(Duration::ZERO));
    let opened = fleet.run(t0, OPEN_TIMEOUT - ms(100), |_| open(OPEN_TIMEOUT));
    assert!(opened.is_empty(), "open for openTimeout");
    assert_eq!(fleet.store.phase, EpisodePhase::Open { since: 5_000 });

    let due = t0 + OPEN_TIMEOUT - ms(100);
    let holders = fleet.run(due, ms(1_500), |_| open(OPEN_TIMEOUT));
    assert_eq!(
        holders.len(),
        10,
        "halfOpenMaxCalls for both replicas: {holders:?}"
    );

    // Three trials succeed, on either replica: the store closes, and every
    // breaker of both replicas is told to close.
    let succeeded = |p: u32| {
        if holders[..3].contains(&p) {
            outcome(1, 0)
        } else {
            open(OPEN_TIMEOUT)
        }
    };
    let after = due + ms(1_500);
    fleet.run(after, ms(100), succeeded);
    fleet.run(after + ms(100), ms(200), |_| open(OPEN_TIMEOUT));
    assert_eq!(fleet.store.phase, EpisodePhase::Closed);
    assert!(
        holders.iter().any(|p| p % 2 == 0) && holders.iter().any(|p| p % 2 == 1),
        "both replicas' processes wait as many: each gets slots {holders:?}"
    );
    let later = after + ms(300);
    for p in 0..200 {
        let told = fleet.replicas[(p % 2) as usize].ask_at(p, open(later - t0), later);
        assert_eq!((p, told.state), (p, CircuitState::Closed));
    }
}

#[tokio::test(start_paused = true)]
async fn a_trial_failed_on_one_replica_opens_the_others_breaker_again() {
    let t0 = Instant::now();
    let mut fleet = Replicated::new(t0);
    fleet.ask(t0, |_| open(Duration::ZERO));
    let due = t0 + OPEN_TIMEOUT;
    let holders = fleet.run(due, ms(500), |_| open(OPEN_TIMEOUT));
    let failed = *holders
        .iter()
        .find(|&&p| p % 2 == 0)
        .expect("a holder on replica 0");
    let after = due + ms(500);
    fleet.run(after, ms(200), |p| {
        if p == failed {
            outcome(0, 1)
        } else {
            open(OPEN_TIMEOUT)
        }
    });
    assert!(matches!(fleet.store.phase, EpisodePhase::Open { .. }));
    assert_eq!(fleet.replicas[1].state(), CircuitState::Open);
    let told = fleet.replicas[1].ask_at(1, open(OPEN_TIMEOUT), after + ms(250));
    assert!(
        told.state == CircuitState::Open && told.retry_in > OPEN_TIMEOUT - ms(500),
        "{told:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_replica_the_store_stops_answering_decides_alone_after_a_lease() {
    let t0 = Instant::now();
    let mut fleet = Replicated::new(t0);
    fleet.ask(t0, |_| open(Duration::ZERO));
    let due = t0 + OPEN_TIMEOUT;
    fleet.run(due, ms(200), |_| open(OPEN_TIMEOUT));
    // Replica 1's store is gone: within the lease it grants only what the
    // store granted it; after it, slots of its own, as a lone daemon.
    let lost = due + ms(200);
    let within: Vec<u32> = (1..200)
        .step_by(2)
        .filter(|&p| {
            fleet.replicas[1]
                .ask_at(p, open(OPEN_TIMEOUT), lost + ms(500))
                .trials
                == 1
        })
        .collect();
    let alone: Vec<u32> = (1..200)
        .step_by(2)
        .filter(|&p| {
            fleet.replicas[1]
                .ask_at(p, open(OPEN_TIMEOUT), lost + LEASE + ms(100))
                .trials
                == 1
        })
        .collect();
    assert!(within.len() <= 10 && !alone.is_empty(), "{within:?} {alone:?}");
    assert_eq!(within.len() + alone.len(), 10, "its own halfOpenMaxCalls, alone");
}

#[tokio::test(start_paused = true)]
async fn a_replica_whose_store_went_quiet_after_the_last_success_closes_alone() {
    let t0 = Instant::now();
    let policy = CircuitBreakerPolicy {
        enabled: true,
        open_timeout: OPEN_TIMEOUT,
        half_open_max_calls: 3,
        success_threshold: 3,
        ..CircuitBreakerPolicy::default()
    };
    let mut fleet = Replicated::new(t0);
    fleet.replicas = [
        FleetBreaker::new_at(&policy, true, t0),
        FleetBreaker::new_at(&policy, true, t0),
    ];
    fleet.ask(t0, |_| open(Duration::ZERO));
    let due = t0 + OPEN_TIMEOUT;
    let holders: Vec<u32> = fleet
        .run(due, ms(500), |_| open(OPEN_TIMEOUT))
        .into_iter()
        .filter(|p| p % 2 == 0)
        .collect();
    assert_eq!(holders.len(), 3, "replica 0 asked first and holds every slot");
    // Its holders succeed, and the store never hears of it: sharing, the
    // replica leaves the close to the store; a lease later it closes alone.
    let after = due + ms(500);
    for &p in &holders {
        fleet.replicas[0].ask_at(p, outcome(1, 0), after);
    }
    assert_eq!(fleet.replicas[0].state(), CircuitState::HalfOpen);
    let alone = after + LEASE;
    let told = fleet.replicas[0].ask_at(0, open(OPEN_TIMEOUT), alone);
    assert_eq!(told.state, CircuitState::Closed);
}

#[tokio::test(start_paused = true)]
async fn a_store_that_lost_the_episode_is_told_again_and_the_wait_goes_on() {
    let t0 = Instant::now();
    let mut fleet = Replicated::new(t0);
    fleet.ask(t0, |_| open(Duration::ZERO));
    fleet.run(t0, ms(10_000), |_| open(ms(10_000)));
    assert!(matches!(fleet.store.phase, EpisodePhase::Open { .. }));
    // Redis restarts empty 10 s into the episode.
    fleet.store = Episode::default();
    fleet.heard.clear();
    fleet.run(t0 + ms(10_000), ms(1_000), |_| open(ms(10_000)));
    assert_eq!(
        fleet.store.phase,
        EpisodePhase::Open { since: 5_000 },
        "the episode as it began, not a new one"
    );
    let holders = fleet.run(t0 + OPEN_TIMEOUT, ms(1_000), |_| open(OPEN_TIMEOUT));
    assert_eq!(
        holders.len(),
        10,
        "half-open after openTimeout from the first open"
    );
}

#[tokio::test(start_paused = true)]
async fn a_slot_granted_while_deciding_alone_is_not_settled_in_the_store() {
    let t0 = Instant::now();
    let mut fleet = Replicated::new(t0);
    fleet.ask(t0, |_| open(Duration::ZERO));
    let due = t0 + OPEN_TIMEOUT;
    let shared = fleet.run(due, ms(500), |_| open(OPEN_TIMEOUT));
    assert_eq!((shared.len(), fleet.store.slots_out()), (10, 10));
    // Replica 1 hears nothing for a lease and grants slots of its own...
    let alone_at = due + ms(500) + LEASE + ms(100);
    let alone: Vec<u32> = (1..200)
        .step_by(2)
        .filter(|p| !shared.contains(p))
        .filter(|&p| fleet.replicas[1].ask_at(p, open(OPEN_TIMEOUT), alone_at).trials == 1)
        .collect();
    assert!(!alone.is_empty());
    // ...whose trials succeed: the store's slots stay the store's.
    for &p in &alone {
        fleet.replicas[1].ask_at(p, outcome(1, 0), alone_at + ms(50));
    }
    let share = fleet.replicas[1].share_at(alone_at + ms(60)).expect("a share");
    assert_eq!((share.settled, share.succeeded), (0, 0), "{share:?}");
}

#[tokio::test(start_paused = true)]
async fn trial_outcomes_heard_while_a_share_is_out_stay_in_their_half_open() {
    let t0 = Instant::now();
    let mut fleet = breaker(true, t0);
    fleet.ask_at(0, open(Duration::ZERO), t0);
    let half_open = |epoch, granted, at| EpisodeAnswer {
        episode: Episode {
            phase: EpisodePhase::HalfOpen,
            epoch,
            ..Episode::default()
        },
        granted,
        at,
    };
    let due = t0 + OPEN_TIMEOUT;
    fleet.adopt_at(&half_open(2, 1, 30_000), due);
    assert_eq!(
        fleet.ask_at(0, open(OPEN_TIMEOUT), due).trials,
        1,
        "the store's slot"
    );
    let share = fleet.share_at(due + ms(10)).expect("a share while half-open");
    assert_eq!(share.epoch, 2);
    // The trial succeeds while the share is on its way; the answer brings
    // a later half-open (another replica's trial failed, and the store
    // waited openTimeout again while this replica could not reach it).
    fleet.ask_at(0, outcome(1, 0), due + ms(20));
    fleet.adopt_at(&half_open(4, 0, 60_000), due + ms(30));
    let next = fleet.share_at(due + ms(40)).expect("a share while half-open");
    assert_eq!(next.epoch, 4);
    assert_eq!(
        (next.succeeded, next.settled),
        (0, 0),
        "the success belongs to half-open 2, not 4"
    );
}

#[tokio::test(start_paused = true)]
async fn a_close_forgets_which_processes_asked_but_not_how_fast_they_call() {
    let t0 = Instant::now();
    let mut fleet = breaker(false, t0);
    fleet.ask_at(0, open(Duration::ZERO), t0);
    let due = t0 + OPEN_TIMEOUT;
    for p in 0..200 {
        fleet.ask_at(p, open(OPEN_TIMEOUT - ms(100)), due - ms(100));
    }
    let holders = round(&mut fleet, 200, due);
    assert_eq!(fleet.calls.asked.len(), 200);
    for &p in &holders[..3] {
        fleet.ask_at(p, outcome(1, 0), due + ms(10));
    }
    assert_eq!(
        fleet.calls.asked.len(),
        1,
        "only the process heard since the close: those gone are not kept"
    );
    assert!(fleet.calls.per_second.is_some());
}
