//! The discrete-event simulation: clients retrying against a server with a
//! per-second capacity and an outage, in virtual time.
//!
//! Each client drives a `stormguard_core::call::Call`, the state machine a
//! real client's retry loop drives: every decision (send, wait for a turn,
//! back off, give up, ask the budget or the breaker) is the same
//! `stormguard-core` call at a virtual instant, in the same order. Events
//! are kept in a radix heap with one pending event per client (none while
//! it waits in a gate's line behind others; a client woken sooner leaves
//! its old event behind, skipped when popped), so memory is O(clients)
//! whatever the number of events.

use std::cmp::Reverse;
use std::time::Duration;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use stormguard_core::breaker::CircuitState;
use stormguard_core::call::{Answer, Answered, Call, Send, Step as CallStep};
use stormguard_core::fleet::breaker::BreakerVerdict;
use stormguard_core::fleet::{self, Ask, Grant};
use stormguard_core::guard::Guard;
use stormguard_core::policy::limits::gate::MAX_WAIT;
use stormguard_core::policy::{Criticality, MaxWait, RetryPolicy, ValidPolicy};
use stormguard_core::retry::{Failure, GaveUp};
use tokio::time::Instant;

use super::collapse::{Busy, Next};
use super::dependency::{Limit, Taken};
use super::fleet_budget::FleetBudget;
use super::replicas::{self, Replicas};
use super::scenario::{Backends, Scenario};
use super::strategy::Strategy;
use super::time::nanos;

const NANOS_PER_SECOND: u64 = 1_000_000_000;

/// What happened in one run.
#[derive(Debug, Clone, PartialEq)]
pub struct Run {
    /// The strategy's label.
    pub strategy: String,
    /// The scenario it ran in.
    pub scenario: Scenario,
    /// Whether its processes were paced through the daemon's replicas.
    pub paced_by_fleet: bool,
    /// Requests that reached the server, per second.
    pub requests: Vec<u64>,
    /// Requests the server accepted, per second.
    pub accepted: Vec<u64>,
    /// Requests rejected because an outage was on.
    pub rejected_in_outage: u64,
    /// Clients served, per second of their success: the goodput.
    pub served: Vec<u64>,
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
    /// What became of the calls of each class (in `Criticality::ALL`'s
    /// order), a call naming none counted in the policy's `criticality`.
    pub classes: [ClassOutcome; 3],
    /// The times to success, sorted, of the calls that began a second or
    /// more after the outage: what callers meet once the dependency is back.
    pub times_after_recovery: Vec<Duration>,
    /// How long each call that failed before it sent anything (shed, or
    /// refused by its breaker) took to fail, sorted.
    pub times_to_fail_fast: Vec<Duration>,
    /// When each half-open trial was sent (the calls the processes'
    /// breakers let through to see whether the dependency is back), from
    /// t = 0, in order.
    pub trials: Vec<Duration>,
    /// The breakers' `openTimeout`, if the strategy has breakers: the
    /// window trials are counted over.
    pub open_timeout: Option<Duration>,
    /// When the last of the breakers open at the end of the outage first
    /// closed after it, from t = 0; `None` if none was open then, or one
    /// never closed. A breaker that opens again later (a dependency back
    /// with less capacity than its callers want, and no gate) does not
    /// count: the fleet had come back.
    pub breakers_closed: Option<Duration>,
    /// Events processed.
    pub events: u64,
}

/// What became of the calls of one class.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ClassOutcome {
    /// Calls that began.
    pub calls: u32,
    /// Of those, served.
    pub served: u32,
    /// Of those, shed by the send gate: at once, or after waiting their
    /// class's `maxWait` in line.
    pub shed: u32,
    /// The served ones' times to success, sorted.
    pub times_to_success: Vec<Duration>,
    /// Of the calls, those that began a second or more after the outage...
    pub calls_after_recovery: u32,
    /// ...and of those, served...
    pub served_after_recovery: u32,
    /// ...and their times to success, sorted.
    pub times_after_recovery: Vec<Duration>,
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
    /// The send gate had no turn before `maxElapsed` or the class's
    /// `maxWait`, while it waited.
    pub no_turn: u32,
    /// The send gate would have had no turn before then: shed at once.
    pub shed: u32,
}

impl GaveUpCounts {
    /// All of them.
    pub fn total(&self) -> u32 {
        self.exhausted + self.budget + self.circuit_open + self.deadline + self.no_turn + self.shed
    }

    fn count(&mut self, why: GaveUp) {
        match why {
            GaveUp::BudgetExhausted => self.budget += 1,
            GaveUp::CircuitOpen => self.circuit_open += 1,
            GaveUp::Deadline => self.deadline += 1,
            GaveUp::NoTurn => self.no_turn += 1,
            GaveUp::Shed => self.shed += 1,
            GaveUp::Exhausted | GaveUp::NotRetryable | GaveUp::Cancelled => self.exhausted += 1,
        }
    }
}

/// One client's state between its events.
struct Client {
    /// When it made its first attempt, in virtual nanoseconds.
    start: u64,
    /// Its call, from its first event on.
    call: Option<Call>,
    /// The class it names, if any.
    class: Option<Criticality>,
    /// While an attempt is in flight: the attempt and what became of it.
    in_flight: Option<(Send, InFlight)>,
    /// The ticket it holds in its process's gate line, if it waits in one.
    ticket: Option<u64>,
    process: usize,
    /// When its pending event is; the queue may also hold older ones for
    /// it, left when it was woken sooner, which are skipped.
    due: Option<u64>,
}

/// What became of an attempt in flight.
#[derive(Clone, Copy, PartialEq, Eq)]
enum InFlight {
    /// The server said at once: its answer (`None` accepted, else the
    /// status it refused with) arrives at the client's next event.
    Decided(Option<u16>),
    /// Request `.0` is on its way (the collapse scenario): the client's next
    /// event is its timeout, unless the answer comes first.
    Awaiting(u32),
    /// The server is still working on it when the client stops waiting,
    /// at its next event.
    Late,
}

/// The herd's server: its limit (see [`Limit`]), with its outages and
/// brownout, its random failures and its backends down, and its counts per
/// calendar second since t = 0.
struct Server {
    capacity: u64,
    limit: Limit,
    /// The share of requests it fails at random, whatever its load, and
    /// the status they are answered with.
    random_failures: f64,
    random_status: u16,
    /// The backends behind its balancer, and the requests dealt so far.
    backends: Option<(Backends, u64)>,
    /// When it rejects everything: [start, end) in nanoseconds.
    outages: Vec<(u64, u64)>,
    /// When it takes less: [start, end) and the capacity then.
    brownout: Option<(u64, u64, u64)>,
    requests: Vec<u64>,
    accepted: Vec<u64>,
    rejected_in_outage: u64,
}

impl Server {
    /// The calendar second of `t`, with room for its counts.
    fn second(&mut self, t: u64) -> usize {
        let second = (t / NANOS_PER_SECOND) as usize;
        if second >= self.requests.len() {
            self.requests.resize(second + 1, 0);
            self.accepted.resize(second + 1, 0);
        }
        second
    }

    /// Counts a request sent at `t` whose fate is decided later.
    fn sent(&mut self, t: u64) {
        let second = self.second(t);
        self.requests[second] += 1;
    }

    /// Counts an answer that reached its caller in time, at `t`.
    fn served(&mut self, t: u64) {
        let second = self.second(t);
        self.accepted[second] += 1;
    }

    /// Counts a request at `t` and says what becomes of it: refused at
    /// once with a status if it fails at random (`random_status`), or with
    /// a 503 if it goes to a backend that is down, falls in an outage, or
    /// finds the limit reached; else served, its answer leaving the server
    /// at an instant. It counts as accepted if that answer reaches its
    /// caller, `latency` later, by `deadline`.
    fn handle(&mut self, t: u64, latency: u64, deadline: Option<u64>, rng: &mut impl Rng) -> Handled {
        let second = self.second(t);
        self.requests[second] += 1;
        if self.random_failures > 0.0 && rng.random::<f64>() < self.random_failures {
            return Handled::Refused(self.random_status);
        }
        if let Some((backends, dealt)) = &mut self.backends {
            *dealt += 1;
            if backends.down_for(*dealt - 1) {
                return Handled::Refused(UNAVAILABLE);
            }
        }
        if self
            .outages
            .iter()
            .any(|(start, end)| (*start..*end).contains(&t))
        {
            self.rejected_in_outage += 1;
            return Handled::Refused(UNAVAILABLE);
        }
        let capacity = match self.brownout {
            Some((start, end, capacity)) if (start..end).contains(&t) => capacity,
            _ => self.capacity,
        };
        let capacity = match self.backends {
            Some((backends, _)) => backends.capacity_up(capacity),
            None => capacity,
        };
        match self.limit.take(t, capacity, self.accepted[second]) {
            Taken::Refused => Handled::Refused(UNAVAILABLE),
            Taken::Served(done) => {
                let heard = done.saturating_add(latency);
                let in_time = deadline.is_none_or(|deadline| heard <= deadline);
                self.accepted[second] += u64::from(in_time);
                Handled::Served { heard, in_time }
            }
        }
    }
}

/// What becomes of a request the server handles.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Handled {
    /// Refused at once, with this status.
    Refused(u16),
    /// Served, its answer reaching the caller at `heard`: `in_time`, or
    /// after the caller stopped waiting.
    Served { heard: u64, in_time: bool },
}

/// What a server out of capacity, in an outage, or a balancer with no
/// backend up answers: 503 Service Unavailable.
const UNAVAILABLE: u16 = 503;

/// Runs `strategy` in `scenario`.
pub fn run(scenario: &Scenario, strategy: &Strategy) -> Run {
    World::new(scenario, strategy).run()
}

/// The pending events: (virtual nanoseconds, client).
type Queue = radix_heap::RadixHeapMap<Reverse<u64>, u32>;

/// The clients, their processes and the server, with the pending events.
struct World<'a> {
    scenario: &'a Scenario,
    /// Virtual t = 0 as an instant, for the budget, breaker and gate clocks.
    origin: Instant,
    /// The class of a call that names none.
    default_class: Criticality,
    /// A second after the outage, in virtual nanoseconds: calls that begin
    /// from then meet a dependency that is back.
    back: u64,
    processes: Vec<Process>,
    clients: Vec<Client>,
    /// The daemon replicas, when the strategy is fleet-paced or its
    /// breakers' half-open is the fleet's.
    replicas: Option<Replicas<'a>>,
    /// Whether the processes' gates ask the replicas for their pace.
    fleet_paced: bool,
    /// The collapse scenario's server and requests.
    busy: Option<Busy>,
    /// The daemon's division of a fleet-scoped budget's floor.
    fleet_budget: Option<FleetBudget>,
    queue: Queue,
    server: Server,
    rng: SmallRng,
    outcome: Run,
}

/// A process: the guard its clients share, and who holds which ticket in its gate's line.
struct Process {
    guard: Guard,
    line: foldhash::HashMap<u64, u32>,
    /// With fleet pacing: where its exchange with the daemon stands.
    asking: Asking,
    /// When its pending exchange event is (as a client's `due`).
    due: Option<u64>,
    /// When it last sent a report.
    asked: u64,
    /// Whether its breaker is open or half-open, as of its last answer.
    broken: bool,
    /// When its breaker last opened.
    broke_at: u64,
    /// When its breaker, open at the end of the outage, first closed after it.
    closed_after_outage: Option<u64>,
}

/// A process's exchange with its daemon replica: one at a time, as a
/// client awaiting an HTTP answer.
enum Asking {
    /// Its gate is off and its breaker closed: nothing to ask.
    Idle,
    /// Asks at its next event.
    Due,
    /// Its report reaches the daemon at its next event.
    Travelling(Ask),
    /// Its grant, and the fleet breaker's word, arrive at its next event.
    Returning(Grant, Option<BreakerVerdict>),
}

impl<'a> World<'a> {
    fn new(scenario: &'a Scenario, strategy: &'a Strategy) -> Self {
        let origin = Instant::now();
        let mut rng = SmallRng::seed_from_u64(scenario.seed);
        let spread = nanos(scenario.spread);
        let starts: Vec<u64> = match (&scenario.collapse, &scenario.errors) {
            (Some(model), _) => model.arrivals(&mut rng),
            (None, Some(errors)) => errors.arrivals(&mut rng),
            (None, None) => (0..scenario.clients)
                .map(|_| {
                    if spread > 0 {
                        rng.random_range(0..spread)
                    } else {
                        0
                    }
                })
                .collect(),
        };
        let processes = match scenario.processes {
            0 => starts.len(),
            n => (n as usize).min(starts.len()),
        }
        .max(1);
        let classes = scenario.classes;
        let clients: Vec<Client> = starts
            .iter()
            .enumerate()
            .map(|(i, &start)| Client {
                start,
                call: None,
                class: classes.any().then(|| classes.of_draw(rng.random())).flatten(),
                in_flight: None,
                ticket: None,
                process: i % processes,
                due: Some(start),
            })
            .collect();
        let mut queue = Queue::new();
        for (i, c) in clients.iter().enumerate() {
            queue.push(Reverse(c.start), i as u32);
        }
        let policy = policy_for(scenario, strategy);
        Self {
            scenario,
            origin,
            default_class: policy.gate.criticality,
            back: nanos(scenario.outage) + NANOS_PER_SECOND,
            processes: (0..processes)
                .map(|_| Process {
                    guard: Guard::seeded_at(&policy, origin, rng.random())
                        .with_max_retries(strategy.max_retries),
                    line: foldhash::HashMap::default(),
                    asking: Asking::Idle,
                    due: None,
                    asked: 0,
                    broken: false,
                    broke_at: 0,
                    closed_after_outage: None,
                })
                .collect(),
            replicas: (strategy.fleet || strategy.fleet_breaker)
                .then(|| Replicas::new(scenario, &strategy.policy, strategy.fleet)),
            fleet_paced: strategy.fleet,
            clients,
            busy: scenario.collapse.map(Busy::new),
            fleet_budget: strategy.fleet_budget.then(|| {
                let floor = f64::from(strategy.policy.budget.min_retries_per_second);
                let shared = scenario.pace_store.is_some();
                FleetBudget::new(
                    floor,
                    processes,
                    scenario.replicas,
                    shared,
                    scenario.feedback_delay,
                )
            }),
            queue,
            server: Server {
                limit: Limit::of(scenario.dependency),
                // A collapse's server is its own model (`busy`).
                capacity: scenario.capacity_limit().map_or(u64::MAX, u64::from),
                random_failures: scenario.failure_share(),
                random_status: scenario.random_failure_status,
                backends: scenario.backends.map(|b| (b, 0)),
                outages: std::iter::once((0, nanos(scenario.outage)))
                    .chain(
                        scenario
                            .second_outage
                            .map(|(at, lasting)| (nanos(at), nanos(at.saturating_add(lasting)))),
                    )
                    .collect(),
                brownout: scenario.brownout.map(|b| {
                    (
                        nanos(b.at),
                        nanos(b.at.saturating_add(b.lasting)),
                        u64::from(b.capacity),
                    )
                }),
                requests: Vec::new(),
                accepted: Vec::new(),
                rejected_in_outage: 0,
            },
            rng,
            outcome: Run {
                strategy: strategy.label.clone(),
                scenario: Scenario {
                    clients: starts.len() as u32,
                    ..scenario.clone()
                },
                paced_by_fleet: strategy.fleet,
                requests: Vec::new(),
                accepted: Vec::new(),
                rejected_in_outage: 0,
                served: Vec::new(),
                times_to_success: Vec::new(),
                last_success: Duration::ZERO,
                drained: Duration::ZERO,
                gave_up: GaveUpCounts::default(),
                unfinished: 0,
                classes: Default::default(),
                times_after_recovery: Vec::new(),
                times_to_fail_fast: Vec::new(),
                trials: Vec::new(),
                breakers_closed: None,
                open_timeout: strategy
                    .policy
                    .circuit_breaker
                    .enabled
                    .then_some(strategy.policy.circuit_breaker.open_timeout),
                events: 0,
            },
        }
    }

    fn run(mut self) -> Run {
        let horizon = nanos(self.scenario.horizon);
        let max_events = self.scenario.max_events;
        // A client has one pending event, or none while it waits in a gate's
        // line behind others; the first in line is woken by its gate. (A
        // radix heap pops and pushes in amortised constant time.)
        while let Some((Reverse(t), client)) = self.queue.pop() {
            if t > horizon || self.outcome.events >= max_events {
                break;
            }
            self.divide_budget_floor(t);
            self.handle(t, client);
        }
        let unfinished = self
            .clients
            .iter()
            .filter(|c| c.due.is_some() || c.ticket.is_some() || c.in_flight.is_some())
            .count();
        self.finish(unfinished)
    }

    /// With a fleet-scoped budget: the daemon's rounds due by `t`, and the
    /// parts they hand the processes.
    fn divide_budget_floor(&mut self, t: u64) {
        let now = self.at(t);
        let Some(parts) = self.fleet_budget.as_mut().and_then(|b| b.tick(t, now)) else {
            return;
        };
        for (process, part) in self.processes.iter().zip(parts) {
            if let Some(budget) = process.guard.budget() {
                budget.set_min_retries_per_second(part);
            }
        }
    }

    fn at(&self, t: u64) -> Instant {
        self.origin + Duration::from_nanos(t)
    }

    /// The event at `t` of a client; past the clients' ids, of a process's
    /// exchange with the daemon, of a replica's exchange with the store or
    /// its publishing there, or of a request; unless a sooner one replaced it.
    fn handle(&mut self, t: u64, id: u32) {
        if let Some(past_clients) = (id as usize).checked_sub(self.clients.len()) {
            let replicas = self.replicas.as_ref().map_or(0, Replicas::len);
            let Some(past_processes) = past_clients.checked_sub(self.processes.len()) else {
                return self.exchange(t, past_clients);
            };
            let Some(past_exchanges) = past_processes.checked_sub(replicas) else {
                return self.replica_exchange(t, past_processes);
            };
            let Some(past_publishes) = past_exchanges.checked_sub(replicas) else {
                return self.replica_publish(t, past_exchanges);
            };
            return match past_publishes.checked_sub(replicas) {
                None => {
                    let now = self.at(t);
                    self.replicas
                        .as_mut()
                        .expect("replicas")
                        .pushed(past_publishes, t, now)
                }
                Some(request) => self.request(t, request as u32),
            };
        }
        let client = &mut self.clients[id as usize];
        if client.due != Some(t) {
            return;
        }
        client.due = None;
        self.outcome.events += 1;
        if let Some((send, in_flight)) = client.in_flight.take() {
            let answer = match in_flight {
                InFlight::Decided(refused) => self.answer_of(id, refused),
                InFlight::Awaiting(_) | InFlight::Late => Answer::TimedOut,
            };
            self.answer(t, id, send, answer);
        } else {
            self.step(t, id);
        }
        let process = self.clients[id as usize].process;
        self.wake_first_in_line(t, process);
        self.start_asking(t, process);
    }

    /// With replicas, a process whose gate has turned on (with fleet
    /// pacing) or whose fleet-scoped breaker has opened starts asking its replica.
    fn start_asking(&mut self, t: u64, p: usize) {
        let now = self.at(t);
        if self.replicas.is_none() || !matches!(self.processes[p].asking, Asking::Idle) {
            return;
        }
        if !self.asks_at(p, now) {
            return;
        }
        self.processes[p].asking = Asking::Due;
        self.schedule_exchange(t, p);
    }

    /// Whether process `p` has something to ask its replica at `now`.
    fn asks_at(&self, p: usize, now: Instant) -> bool {
        let guard = &self.processes[p].guard;
        let gate = self.fleet_paced && guard.gate().is_some_and(|gate| gate.asks_fleet_at(now));
        gate || guard.breaker().is_some_and(|breaker| breaker.asks_fleet_at(now))
    }

    /// What process `p` asks its replica at `now`: its gate's tally only
    /// if the gates are fleet-paced.
    fn ask_of(&self, p: usize, now: Instant) -> Option<Ask> {
        let mut ask = self.processes[p].guard.fleet_ask_at(now)?;
        if !self.fleet_paced {
            ask.tally = None;
        }
        (ask.tally.is_some() || ask.breaker.is_some()).then_some(ask)
    }

    fn schedule_exchange(&mut self, at: u64, p: usize) {
        self.processes[p].due = Some(at);
        self.queue.push(Reverse(at), (self.clients.len() + p) as u32);
    }

    /// The next step of process `p`'s exchange with its replica: it asks
    /// (if it still has something to ask), its report arrives, or its
    /// grant does.
    fn exchange(&mut self, t: u64, p: usize) {
        if self.processes[p].due != Some(t) {
            return;
        }
        self.processes[p].due = None;
        self.outcome.events += 1;
        let half = nanos(self.scenario.feedback_delay) / 2;
        let now = self.at(t);
        match std::mem::replace(&mut self.processes[p].asking, Asking::Idle) {
            Asking::Idle => {}
            Asking::Due => {
                if let Some(ask) = self.ask_of(p, now) {
                    let process = &mut self.processes[p];
                    process.asked = t;
                    process.asking = Asking::Travelling(ask);
                    self.schedule_exchange(t + half, p);
                }
            }
            Asking::Travelling(ask) => {
                let replicas = self.replicas.as_mut().expect("a process asks only with replicas");
                let replica = p % replicas.len();
                let (grant, verdict, next) = replicas.ask_at(replica, p as u32, ask, t, now);
                self.schedule_replica(replica, next);
                let given_up = self.processes[p].asked + nanos(fleet::ASK_TIMEOUT);
                if t + half > given_up {
                    // The grant comes back after the process stopped waiting
                    // for it: it asks again, as a client does, and hears nothing.
                    self.processes[p].asking = Asking::Due;
                    self.schedule_exchange(given_up.max(t), p);
                } else {
                    self.processes[p].asking = Asking::Returning(grant, verdict);
                    self.schedule_exchange(t + half, p);
                }
            }
            Asking::Returning(grant, verdict) => {
                let process = &mut self.processes[p];
                process.guard.heard_at(grant, verdict, now);
                process.asking = Asking::Due;
                let next = (process.asked + nanos(fleet::ASK_EVERY)).max(t);
                self.schedule_exchange(next, p);
                self.note_breaker(t, p);
                self.wake_first_in_line(t, p);
            }
        }
    }

    /// Notes whether process `p`'s breaker is open or half-open at `t`,
    /// and, if it was open at the end of the outage, when it first closed after.
    fn note_breaker(&mut self, t: u64, p: usize) {
        let outage_end = nanos(self.scenario.outage);
        let process = &mut self.processes[p];
        let Some(breaker) = process.guard.breaker() else {
            return;
        };
        let broken = breaker.state() != CircuitState::Closed;
        match (process.broken, broken) {
            (false, true) => process.broke_at = t,
            (true, false) if process.broke_at < outage_end && t >= outage_end => {
                process.closed_after_outage.get_or_insert(t);
            }
            _ => {}
        }
        process.broken = broken;
    }

    /// A replica's exchange with the store steps at `t`.
    fn replica_exchange(&mut self, t: u64, r: usize) {
        let now = self.at(t);
        let replicas = self.replicas.as_mut().expect("a replica's event");
        for next in replicas.exchange(r, t, now) {
            self.schedule_replica(r, Some(next));
        }
    }

    /// A replica's published rate reaches the store, which pushes it on.
    fn replica_publish(&mut self, t: u64, r: usize) {
        let base = self.clients.len() + self.processes.len();
        let count = self.replicas.as_ref().map_or(0, Replicas::len);
        let pushed = self.replicas.as_mut().expect("a replica's event").publish(r, t);
        for (other, at) in pushed {
            self.queue.push(Reverse(at), (base + 2 * count + other) as u32);
        }
    }

    fn schedule_replica(&mut self, r: usize, next: Option<replicas::Next>) {
        let base = self.clients.len() + self.processes.len();
        let count = self.replicas.as_ref().map_or(0, Replicas::len);
        let (at, id) = match next {
            None => return,
            Some(replicas::Next::Exchange(at)) => (at, base + r),
            Some(replicas::Next::Publish(at)) => (at, base + count + r),
        };
        self.queue.push(Reverse(at), id as u32);
    }

    fn schedule(&mut self, at: u64, id: u32) {
        self.clients[id as usize].due = Some(at);
        self.queue.push(Reverse(at), id);
    }

    /// The client's call decides at `t`: send, wait, or stop.
    fn step(&mut self, t: u64, id: u32) {
        let now = self.at(t);
        let client = &mut self.clients[id as usize];
        let process = &mut self.processes[client.process];
        if client.call.is_none() {
            if let Some(budget) = &mut self.fleet_budget {
                budget.count(client.process);
            }
            let class = &mut self.outcome.classes[client.class.unwrap_or(self.default_class).rank()];
            class.calls += 1;
            class.calls_after_recovery += u32::from(client.start >= self.back);
        }
        let call = client.call.get_or_insert_with(|| {
            let call = Call::begin_at(&process.guard, now, None);
            match client.class {
                Some(class) => call.of_class(class),
                None => call,
            }
        });
        let step = call.next_at(&process.guard, now, None);
        let ticket = call.ticket();
        if client.ticket != ticket {
            if let Some(old) = client.ticket.take() {
                process.line.remove(&old);
            }
            if let Some(new) = ticket {
                process.line.insert(new, id);
            }
            client.ticket = ticket;
        }
        if let CallStep::Send(send) = &step {
            if send.is_trial() {
                self.outcome.trials.push(Duration::from_nanos(t));
            }
        }
        match step {
            CallStep::Send(send) if self.busy.is_some() => self.send_request(t, id, send),
            CallStep::Send(send) => {
                let latency = nanos(self.scenario.latency);
                let deadline = send.until.map(|until| nanos_since(self.origin, until).max(t));
                let (heard, at) = match self.server.handle(t, latency, deadline, &mut self.rng) {
                    Handled::Refused(status) => (InFlight::Decided(Some(status)), t.saturating_add(latency)),
                    Handled::Served { heard, in_time: true } => (InFlight::Decided(None), heard),
                    Handled::Served { in_time: false, .. } => {
                        (InFlight::Late, deadline.expect("late only with a deadline"))
                    }
                };
                match heard {
                    InFlight::Decided(refused) if at == t => {
                        let answer = self.answer_of(id, refused);
                        self.answer(t, id, send, answer);
                    }
                    heard => {
                        self.clients[id as usize].in_flight = Some((send, heard));
                        self.schedule(at, id);
                    }
                }
            }
            CallStep::Wait(Some(until)) => self.schedule(nanos_since(self.origin, until).max(t), id),
            CallStep::Wait(None) => {}
            CallStep::Stop(why) => self.give_up(t, id, why),
        }
    }

    /// The answer a client hears: accepted, or refused with a status its
    /// policy judges (retried or not, and whether its gate hears overload).
    fn answer_of(&self, id: u32, refused: Option<u16>) -> Answer {
        let Some(code) = refused else {
            return Answer::Succeeded;
        };
        let guard = &self.processes[self.clients[id as usize].process].guard;
        Answer::Failed(guard.verdict(Failure::Status {
            code,
            retry_after: None,
        }))
    }

    /// The collapse scenario: the attempt travels to the server as a
    /// request; the client waits for its answer or its timeout.
    fn send_request(&mut self, t: u64, id: u32, send: Send) {
        self.server.sent(t);
        let busy = self.busy.as_mut().expect("the collapse scenario");
        let (request, arrives) = busy.send(id, t, &mut self.rng);
        self.queue.push(Reverse(arrives), self.request_id(request));
        if let Some(until) = send.until {
            self.schedule(nanos_since(self.origin, until).max(t), id);
        }
        self.clients[id as usize].in_flight = Some((send, InFlight::Awaiting(request)));
    }

    fn request_id(&self, request: u32) -> u32 {
        let replicas = self.replicas.as_ref().map_or(0, Replicas::len);
        (self.clients.len() + self.processes.len() + 3 * replicas) as u32 + request
    }

    /// A request's event: it reaches the server, is served, or its answer
    /// reaches its client, who takes it if it still waits for it.
    fn request(&mut self, t: u64, request: u32) {
        let busy = self.busy.as_mut().expect("the collapse scenario");
        let client = match busy.step(request, t, &mut self.rng) {
            Next::At(at) => return self.queue.push(Reverse(at), self.request_id(request)),
            Next::Answer { client } => client,
        };
        let waiting = &mut self.clients[client as usize];
        if waiting.in_flight.as_ref().map(|(_, f)| *f) != Some(InFlight::Awaiting(request)) {
            return;
        }
        let (send, _) = waiting.in_flight.take().expect("checked");
        waiting.due = None;
        self.outcome.events += 1;
        self.server.served(t);
        self.answer(t, client, send, Answer::Succeeded);
        let process = self.clients[client as usize].process;
        self.wake_first_in_line(t, process);
        self.start_asking(t, process);
    }

    /// The answer to the client's attempt arrives: done, or back off and retry.
    fn answer(&mut self, t: u64, id: u32, send: Send, answer: Answer) {
        let now = self.at(t);
        let client = &mut self.clients[id as usize];
        let process = &mut self.processes[client.process];
        let call = client.call.as_mut().expect("a call in progress");
        let answered = call.answered_at(&process.guard, send, answer, now, &mut self.rng);
        let p = client.process;
        self.note_breaker(t, p);
        let client = &mut self.clients[id as usize];
        match answered {
            Answered::Succeeded => {
                let second = (t / NANOS_PER_SECOND) as usize;
                if second >= self.outcome.served.len() {
                    self.outcome.served.resize(second + 1, 0);
                }
                self.outcome.served[second] += 1;
                let took = Duration::from_nanos(t - client.start);
                self.outcome.times_to_success.push(took);
                let class = &mut self.outcome.classes[client.class.unwrap_or(self.default_class).rank()];
                class.served += 1;
                class.times_to_success.push(took);
                if client.start >= self.back {
                    class.served_after_recovery += 1;
                    class.times_after_recovery.push(took);
                    self.outcome.times_after_recovery.push(took);
                }
                self.outcome.last_success = Duration::from_nanos(t);
                self.outcome.drained = self.outcome.drained.max(Duration::from_nanos(t));
                client.call = None;
            }
            Answered::Retry(delay) => self.schedule(t.saturating_add(nanos(delay)), id),
            Answered::Stop(why) => self.give_up(t, id, why),
        }
    }

    /// Schedules the first in the process's gate line for when its turn is due.
    fn wake_first_in_line(&mut self, t: u64, process: usize) {
        let Some(gate) = self.processes[process].guard.gate() else {
            return;
        };
        let Some((ticket, due)) = gate.first_in_line() else {
            return;
        };
        let Some(&id) = self.processes[process].line.get(&ticket) else {
            return;
        };
        let at = nanos_since(self.origin, due).max(t);
        if self.clients[id as usize]
            .due
            .is_none_or(|scheduled| at < scheduled)
        {
            self.schedule(at, id);
        }
    }

    fn give_up(&mut self, t: u64, id: u32, why: GaveUp) {
        let client = &mut self.clients[id as usize];
        let unsent = client.call.take().is_some_and(|call| call.attempts() == 0);
        if let Some(ticket) = client.ticket.take() {
            self.processes[client.process].line.remove(&ticket);
        }
        self.outcome.gave_up.count(why);
        if matches!(why, GaveUp::Shed | GaveUp::NoTurn) {
            self.outcome.classes[client.class.unwrap_or(self.default_class).rank()].shed += 1;
        }
        if unsent && matches!(why, GaveUp::Shed | GaveUp::CircuitOpen) {
            self.outcome
                .times_to_fail_fast
                .push(Duration::from_nanos(t.saturating_sub(client.start)));
        }
        self.outcome.drained = self.outcome.drained.max(Duration::from_nanos(t));
    }

    fn finish(mut self, unfinished: usize) -> Run {
        self.outcome.unfinished = unfinished as u32;
        let outage_end = nanos(self.scenario.outage);
        let never_closed = self
            .processes
            .iter()
            .any(|p| p.broken && p.broke_at < outage_end && p.closed_after_outage.is_none());
        let last = self.processes.iter().filter_map(|p| p.closed_after_outage).max();
        self.outcome.breakers_closed = last.filter(|_| !never_closed).map(Duration::from_nanos);
        self.outcome.times_to_success.sort_unstable();
        self.outcome.times_after_recovery.sort_unstable();
        self.outcome.times_to_fail_fast.sort_unstable();
        for class in &mut self.outcome.classes {
            class.times_to_success.sort_unstable();
            class.times_after_recovery.sort_unstable();
        }
        self.outcome.requests = self.server.requests;
        self.outcome.accepted = self.server.accepted;
        self.outcome.rejected_in_outage = self.server.rejected_in_outage;
        // Every series covers the whole run, zeros included: a collapse's
        // length is the scenario's, however early its last success.
        let run = &mut self.outcome;
        let arrivals = match (self.scenario.collapse, self.scenario.errors) {
            (Some(collapse), _) => Some(collapse.until),
            (None, Some(errors)) => Some(errors.until),
            (None, None) => None,
        };
        let scenario_seconds = arrivals.map_or(0, |until| {
            until.min(self.scenario.horizon).as_secs_f64().ceil() as usize
        });
        let seconds = [
            run.requests.len(),
            run.accepted.len(),
            run.served.len(),
            scenario_seconds,
        ];
        let seconds = seconds.into_iter().max().unwrap_or(0);
        for series in [&mut run.requests, &mut run.accepted, &mut run.served] {
            series.resize(seconds, 0);
        }
        self.outcome
    }
}

/// The strategy's policy as the scenario's callers run it: a herd's wait
/// for a turn however long it takes.
fn policy_for(scenario: &Scenario, strategy: &Strategy) -> ValidPolicy {
    if !scenario.waits_until_served {
        return strategy.policy.clone();
    }
    let mut policy = RetryPolicy::from(strategy.policy.clone());
    let longest = MAX_WAIT[Criticality::Default.rank()].high;
    policy.gate.max_wait = MaxWait {
        critical: longest,
        default: longest,
        sheddable: longest,
    };
    ValidPolicy::try_from(policy).expect("the longest wait is within its range")
}

fn nanos_since(origin: Instant, at: Instant) -> u64 {
    nanos(at.saturating_duration_since(origin))
}
