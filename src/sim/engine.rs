//! The discrete-event simulation: clients retrying against a server with a
//! per-second capacity and an outage, in virtual time.
//!
//! Every decision a client makes (send, back off, give up, ask the budget or
//! the breaker) is a `stormguard-core` call at a virtual instant, the same
//! calls `Guard::call` makes in a real client. Events are kept in a radix
//! heap holding one pending event per client, so memory is O(clients)
//! whatever the number of events.

use std::cmp::Reverse;
use std::time::Duration;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use stormguard_core::breaker::Permit;
use stormguard_core::guard::Guard;
use stormguard_core::retry::{AttemptOutcome, GaveUp, Verdict};
use tokio::time::Instant;

use super::strategy::Strategy;

const NANOS_PER_SECOND: u64 = 1_000_000_000;

/// The world a strategy is tried in; [`Scenario::default`] is seed 004's.
#[derive(Debug, Clone, PartialEq)]
pub struct Scenario {
    /// Clients, each wanting one request served.
    pub clients: u32,
    /// Requests the server accepts per calendar second (counted from t = 0).
    pub capacity: u32,
    /// The server rejects everything from t = 0 until this.
    pub outage: Duration,
    /// Clients make their first attempt at a uniformly drawn time in [0, spread).
    pub spread: Duration,
    /// Time from sending a request to its answer.
    pub latency: Duration,
    /// Processes the clients are dealt into, round-robin; a process's clients
    /// share its retry budget and circuit breaker. Zero: one per client.
    pub processes: u32,
    /// Virtual time after which the run stops; clients still retrying are unfinished.
    pub horizon: Duration,
    /// Events after which the run stops (a guard against policies that never advance time).
    pub max_events: u64,
    /// Seed of the random source: the same seed gives the same run.
    pub seed: u64,
}

impl Default for Scenario {
    /// Seed 004: 1000 clients at t = 0, 200 requests/s, a 10 s outage, no latency.
    fn default() -> Self {
        Self {
            clients: 1000,
            capacity: 200,
            outage: Duration::from_secs(10),
            spread: Duration::ZERO,
            latency: Duration::ZERO,
            processes: 0,
            horizon: Duration::from_secs(3600),
            max_events: 200_000_000,
            seed: 1,
        }
    }
}

/// What happened in one run.
#[derive(Debug, Clone, PartialEq)]
pub struct Run {
    /// The strategy's label.
    pub strategy: String,
    /// The scenario it ran in.
    pub scenario: Scenario,
    /// Requests that reached the server, per second.
    pub requests: Vec<u64>,
    /// Requests the server accepted, per second.
    pub accepted: Vec<u64>,
    /// Requests rejected because the outage was still on.
    pub rejected_in_outage: u64,
    /// Each served client's time from its first attempt to its success, sorted.
    pub times_to_success: Vec<Duration>,
    /// When the last client succeeded, from t = 0.
    pub last_success: Duration,
    /// When the last client finished, served or not, from t = 0.
    pub drained: Duration,
    /// Clients that stopped without success, by reason.
    pub gave_up: GaveUpCounts,
    /// Clients still retrying when the run stopped.
    pub unfinished: u32,
    /// Events processed.
    pub events: u64,
}

/// Clients that gave up, by why.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GaveUpCounts {
    /// Every retry the policy allows was used.
    pub exhausted: u32,
    /// The budget (or throttling) refused a retry.
    pub budget: u32,
    /// The breaker refused an attempt.
    pub circuit_open: u32,
    /// `maxElapsed` passed.
    pub deadline: u32,
}

impl GaveUpCounts {
    /// All of them.
    pub fn total(&self) -> u32 {
        self.exhausted + self.budget + self.circuit_open + self.deadline
    }

    fn count(&mut self, why: GaveUp) {
        match why {
            GaveUp::BudgetExhausted => self.budget += 1,
            GaveUp::CircuitOpen => self.circuit_open += 1,
            GaveUp::Deadline => self.deadline += 1,
            GaveUp::Exhausted | GaveUp::NotRetryable | GaveUp::Cancelled => self.exhausted += 1,
        }
    }
}

/// One client's state between its events.
struct Client {
    /// When it made its first attempt, in virtual nanoseconds.
    start: u64,
    /// The attempt about to be sent (0 first).
    attempt: u32,
    /// The previous backoff delay.
    previous: Duration,
    /// While an attempt is in flight: the breaker's permit and whether the server accepted it.
    in_flight: Option<(Option<Permit>, bool)>,
    process: usize,
}

/// The server of seed 004: a count per calendar second since t = 0.
struct Server {
    capacity: u64,
    outage: u64,
    requests: Vec<u64>,
    accepted: Vec<u64>,
    rejected_in_outage: u64,
}

impl Server {
    /// Counts a request at `t` and says whether it is accepted.
    fn handle(&mut self, t: u64) -> bool {
        let second = (t / NANOS_PER_SECOND) as usize;
        if second >= self.requests.len() {
            self.requests.resize(second + 1, 0);
            self.accepted.resize(second + 1, 0);
        }
        self.requests[second] += 1;
        if t < self.outage {
            self.rejected_in_outage += 1;
            return false;
        }
        let accept = self.accepted[second] < self.capacity;
        self.accepted[second] += u64::from(accept);
        accept
    }
}

/// Runs `strategy` in `scenario`.
pub fn run(scenario: &Scenario, strategy: &Strategy) -> Run {
    Simulation::new(scenario, strategy).run()
}

/// The pending events, one per client: (virtual nanoseconds, client).
type Queue = radix_heap::RadixHeapMap<Reverse<u64>, u32>;

struct Simulation<'a> {
    queue: Queue,
    world: World<'a>,
}

/// Everything but the queue, so a handler can run while the queue's top is held.
struct World<'a> {
    scenario: &'a Scenario,
    /// Virtual t = 0 as an instant, for the budget and breaker clocks.
    origin: Instant,
    guards: Vec<Guard>,
    clients: Vec<Client>,
    server: Server,
    rng: SmallRng,
    outcome: Run,
}

impl<'a> Simulation<'a> {
    fn new(scenario: &'a Scenario, strategy: &Strategy) -> Self {
        let origin = Instant::now();
        let processes = match scenario.processes {
            0 => scenario.clients,
            n => n.min(scenario.clients),
        }
        .max(1) as usize;
        let mut rng = SmallRng::seed_from_u64(scenario.seed);
        let spread = nanos(scenario.spread);
        let clients: Vec<Client> = (0..scenario.clients as usize)
            .map(|i| Client {
                start: if spread > 0 {
                    rng.random_range(0..spread)
                } else {
                    0
                },
                attempt: 0,
                previous: Duration::ZERO,
                in_flight: None,
                process: i % processes,
            })
            .collect();
        let mut queue = Queue::new();
        for (i, c) in clients.iter().enumerate() {
            queue.push(Reverse(c.start), i as u32);
        }
        let world = World {
            scenario,
            origin,
            guards: (0..processes)
                .map(|_| {
                    Guard::from_policy_at(&strategy.policy, origin).with_max_retries(strategy.max_retries)
                })
                .collect(),
            clients,
            server: Server {
                capacity: u64::from(scenario.capacity),
                outage: nanos(scenario.outage),
                requests: Vec::new(),
                accepted: Vec::new(),
                rejected_in_outage: 0,
            },
            rng,
            outcome: Run {
                strategy: strategy.label.clone(),
                scenario: scenario.clone(),
                requests: Vec::new(),
                accepted: Vec::new(),
                rejected_in_outage: 0,
                times_to_success: Vec::new(),
                last_success: Duration::ZERO,
                drained: Duration::ZERO,
                gave_up: GaveUpCounts::default(),
                unfinished: 0,
                events: 0,
            },
        };
        Self { queue, world }
    }

    fn run(mut self) -> Run {
        let horizon = nanos(self.world.scenario.horizon);
        let max_events = self.world.scenario.max_events;
        // Each client has one pending event: handling it pops it and pushes
        // the client's next one, so the heap never holds more than one per
        // client. (A radix heap pops and pushes in amortised constant time.)
        while let Some((Reverse(t), client)) = self.queue.pop() {
            if t > horizon || self.world.outcome.events >= max_events {
                self.queue.push(Reverse(t), client);
                break;
            }
            if let Some(next) = self.world.handle(t, client) {
                self.queue.push(Reverse(next), client);
            }
        }
        self.world.finish(self.queue.len())
    }
}

impl World<'_> {
    fn at(&self, t: u64) -> Instant {
        self.origin + Duration::from_nanos(t)
    }

    /// The client's event at `t`; returns when its next event is, if any.
    fn handle(&mut self, t: u64, client: u32) -> Option<u64> {
        self.outcome.events += 1;
        if self.clients[client as usize].in_flight.is_some() {
            self.answer(t, client)
        } else {
            self.send(t, client)
        }
    }

    /// The client sends its next attempt, if its breaker lets it.
    fn send(&mut self, t: u64, id: u32) -> Option<u64> {
        let now = self.at(t);
        let client = &self.clients[id as usize];
        let guard = &self.guards[client.process];
        if client.attempt == 0 {
            guard.begin_at(now);
        }
        let Ok(permit) = guard.admit_at(now) else {
            self.give_up(t, GaveUp::CircuitOpen);
            return None;
        };
        let accepted = self.server.handle(t);
        self.clients[id as usize].in_flight = Some((permit, accepted));
        match nanos(self.scenario.latency) {
            0 => self.answer(t, id),
            latency => Some(t.saturating_add(latency)),
        }
    }

    /// The answer to the client's attempt arrives: done, or back off and retry.
    fn answer(&mut self, t: u64, id: u32) -> Option<u64> {
        let now = self.at(t);
        let client = &mut self.clients[id as usize];
        let (permit, accepted) = client.in_flight.take().expect("an attempt in flight");
        let guard = &self.guards[client.process];
        if accepted {
            guard.settle_at(permit, AttemptOutcome::Succeeded, now);
            self.outcome
                .times_to_success
                .push(Duration::from_nanos(t - client.start));
            self.outcome.last_success = Duration::from_nanos(t);
            self.outcome.drained = self.outcome.drained.max(Duration::from_nanos(t));
            return None;
        }
        guard.settle_at(permit, AttemptOutcome::Failed, now);
        let elapsed = Duration::from_nanos(t - client.start);
        let retry = Verdict::Retry { after: None };
        let next = guard
            .retry()
            .next_delay(client.attempt, client.previous, retry, elapsed, &mut self.rng);
        match next {
            Ok(delay) if guard.allow_retry_at(now) => {
                client.attempt += 1;
                client.previous = delay;
                Some(t.saturating_add(nanos(delay)))
            }
            Ok(_) => self.give_up(t, GaveUp::BudgetExhausted),
            Err(why) => self.give_up(t, why),
        }
    }

    fn give_up(&mut self, t: u64, why: GaveUp) -> Option<u64> {
        self.outcome.gave_up.count(why);
        self.outcome.drained = self.outcome.drained.max(Duration::from_nanos(t));
        None
    }

    fn finish(mut self, unfinished: usize) -> Run {
        self.outcome.unfinished = unfinished as u32;
        self.outcome.times_to_success.sort_unstable();
        self.outcome.requests = self.server.requests;
        self.outcome.accepted = self.server.accepted;
        self.outcome.rejected_in_outage = self.server.rejected_in_outage;
        self.outcome
    }
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}
