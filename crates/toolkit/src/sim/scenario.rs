//! The world a strategy is tried in: the herd, the server, and the fleet's shape.

use std::fmt::Write;
use std::time::Duration;

use serde::Serialize;
use stormguard_core::policy::{Criticality, Dependency, ForecastScenario, GoDuration};

use super::collapse::Collapse;
use super::errors_scenario::Errors;

/// A replica's round trip to a shared pace store, where nothing says
/// otherwise: a store in the same cluster.
pub const STORE_ROUND_TRIP: Duration = Duration::from_millis(1);

/// How far apart a rolling restart restarts the replicas, one at a time.
pub const RESTART_APART: Duration = Duration::from_secs(5);

/// The world a strategy is tried in; [`Scenario::default`] is the thundering herd.
#[derive(Debug, Clone, PartialEq)]
pub struct Scenario {
    /// Clients, each wanting one request served.
    pub clients: u32,
    /// Requests a second the server takes once back, by its `dependency`'s limit.
    pub capacity: u32,
    /// How the server refuses what it cannot take: a quota per calendar
    /// second (counted from t = 0), a token bucket, or workers and a queue.
    pub dependency: Dependency,
    /// The server rejects everything from t = 0 until this.
    pub outage: Duration,
    /// A second outage: the server rejects everything from `.0` for `.1`.
    pub second_outage: Option<(Duration, Duration)>,
    /// A brownout: the server takes only `capacity` requests a second from `at` for `lasting`.
    pub brownout: Option<Brownout>,
    /// Instead of the clients, outage and capacity above: Brooker's
    /// metastable failure (see [`Collapse`]).
    pub collapse: Option<Collapse>,
    /// Instead of the clients, outage and capacity above: calls at a
    /// steady rate against a dependency failing a share of them (see [`Errors`]).
    pub errors: Option<Errors>,
    /// The share of requests the server fails at random, whatever its load,
    /// on top of its outages and capacity (a bad replica behind a load
    /// balancer, a flaky disk): the mixed world. The errors scenario states
    /// its own share instead.
    pub random_failures: f64,
    /// The HTTP status random failures are answered with: 503 (a sign of
    /// overload to a gate, by default) or an error such as 500, which a
    /// gate's `overloadOn` may not count.
    pub random_failure_status: u16,
    /// The server is this many backends behind a round-robin load balancer,
    /// some of them down (see [`Backends`]): the partial world.
    pub backends: Option<Backends>,
    /// Clients make their first attempt at a uniformly drawn time in [0, spread).
    pub spread: Duration,
    /// Time from sending a request to its answer.
    pub latency: Duration,
    /// Processes the clients are dealt into, round-robin; a process's clients
    /// share its retry budget, circuit breaker and send gate. Zero: one per client.
    pub processes: u32,
    /// Daemon replicas coordinating a fleet-paced strategy; processes are
    /// dealt to them round-robin, and each replica paces the processes that
    /// reach it.
    pub replicas: u32,
    /// Whether the replicas share their pace through a store, and its round
    /// trip from a replica: they then pace as one controller, as the
    /// daemon's replicas do through Redis.
    pub pace_store: Option<Duration>,
    /// With a store: the time it stops answering, for good (Redis killed).
    /// Each replica's exchanges fail from then on, and it paces alone.
    pub store_lost_at: Option<Duration>,
    /// With a store: the time it restarts, empty (Redis restarted without
    /// persistence, or failed over to a replica that had nothing yet).
    pub store_restarted_at: Option<Duration>,
    /// With a store: Redis failed over to its replica at this time, whose
    /// clock is this far behind the old primary's. The replica had every
    /// write (it was in sync); every time the store compares, from the
    /// published rate's age to a lease's end, is then read on its clock.
    pub store_failover: Option<Failover>,
    /// A rolling restart of the replicas (a Deployment's rollout): the
    /// first restarts at this time, each next one [`RESTART_APART`] later.
    /// A restarted replica has lost what it held in memory (its controller
    /// and fleet breaker, its exchange under way) and starts again at once,
    /// as its processes' next asks reach it; with a store it takes up the
    /// pace as the store keeps it.
    pub replicas_restart_at: Option<Duration>,
    /// The time from a process sending its report to the daemon to its
    /// grant taking effect: half there, half back.
    pub feedback_delay: Duration,
    /// Virtual time after which the run stops; clients still retrying are unfinished.
    pub horizon: Duration,
    /// Events after which the run stops (a guard against policies that never advance time).
    pub max_events: u64,
    /// Seed of the random source: the same seed gives the same run.
    pub seed: u64,
    /// The shares of calls that name themselves critical and sheddable;
    /// the rest name no class (the policy's `gate.criticality` is theirs).
    pub classes: Classes,
    /// Whether the calls wait for a turn however long it takes, whatever
    /// the policy's `gate.maxWait`: the herd's callers, who each want one
    /// request served, and the figures of how long that takes.
    pub waits_until_served: bool,
}

/// The shares of calls of each named class, drawn call by call.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Classes {
    /// The share that name themselves critical.
    pub critical: f64,
    /// The share that name themselves sheddable.
    pub sheddable: f64,
}

impl Classes {
    /// Whether any call names a class.
    pub fn any(&self) -> bool {
        self.critical > 0.0 || self.sheddable > 0.0
    }

    /// The class a call drawing `draw` (uniform in [0, 1)) names, if any.
    pub fn of_draw(&self, draw: f64) -> Option<Criticality> {
        if draw < self.critical {
            Some(Criticality::Critical)
        } else if draw < self.critical + self.sheddable {
            Some(Criticality::Sheddable)
        } else {
            None
        }
    }
}

/// A failover of the replicas' store to its replica (Sentinel or an
/// operator promoting it), whose clock is behind.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Failover {
    /// When.
    pub at: Duration,
    /// How far the promoted replica's clock is behind the old primary's.
    pub clock_behind: Duration,
}

impl Default for Scenario {
    /// The thundering herd: 1000 clients at t = 0, 200 requests/s, a 10 s outage, no latency.
    fn default() -> Self {
        Self {
            clients: 1000,
            capacity: 200,
            dependency: Dependency::Quota,
            outage: Duration::from_secs(10),
            second_outage: None,
            brownout: None,
            collapse: None,
            errors: None,
            random_failures: 0.0,
            random_failure_status: 503,
            backends: None,
            spread: Duration::ZERO,
            latency: Duration::ZERO,
            processes: 0,
            replicas: 1,
            pace_store: None,
            store_lost_at: None,
            store_restarted_at: None,
            store_failover: None,
            replicas_restart_at: None,
            feedback_delay: Duration::from_millis(100),
            horizon: Duration::from_secs(3600),
            max_events: 200_000_000,
            seed: 1,
            classes: Classes::default(),
            waits_until_served: true,
        }
    }
}

impl Scenario {
    /// The world of a forecast's `outage`: its herd, its fleet, the rest as
    /// [`Scenario::default`]. `check`, `simulate` and `tune` all build their
    /// world here, so a fleet stated once is the fleet all three run.
    pub fn forecast(herd: &ForecastScenario, outage: Duration) -> Self {
        let fleet = &herd.fleet;
        Self {
            clients: herd.clients,
            capacity: herd.capacity,
            dependency: herd.dependency.at(herd.capacity),
            outage,
            latency: fleet.latency,
            processes: fleet.processes,
            replicas: fleet.replicas,
            pace_store: fleet.pace_store.then_some(STORE_ROUND_TRIP),
            ..Self::default()
        }
    }

    /// The herd and the fleet in one line, as every command prints the world
    /// it ran: "1000 calls from 50 processes through 2 daemon replicas
    /// pacing apart (no shared pace store), 1ms latency".
    pub fn shape(&self) -> String {
        self.shape_of(true)
    }

    /// [`shape`](Self::shape) for a run whose processes are paced by the
    /// daemon's replicas (`paced`) or not: a policy without a gate, or
    /// gates that pace alone, run through no daemon.
    pub fn shape_of(&self, paced: bool) -> String {
        let mut line = match self.open_loop() {
            true => "calls".to_owned(),
            false => format!("{} calls", self.clients),
        };
        let _ = match self.processes_dealt() {
            0 => write!(
                line,
                " from a process per call (each with its own gate, budget and breaker)"
            ),
            n => write!(line, " from {n} processes"),
        };
        let _ = match (self.replicas, self.pace_store) {
            _ if !paced => write!(line, " (not paced through a daemon)"),
            (1, _) => write!(line, " through 1 daemon"),
            (n, Some(_)) => write!(line, " through {n} daemon replicas sharing a pace store"),
            (n, None) => write!(
                line,
                " through {n} daemon replicas pacing apart (no shared pace store)"
            ),
        };
        let _ = match self.collapse {
            Some(model) => write!(
                line,
                ", {} network each way (exponential)",
                GoDuration(model.network)
            ),
            None => write!(line, ", {} latency", GoDuration(self.latency)),
        };
        if !self.open_loop() {
            let _ = write!(line, ", against {}", self.dependency.describe(self.capacity));
        }
        line
    }

    /// Whether calls arrive over time (the collapse and errors scenarios)
    /// rather than as a herd at once.
    fn open_loop(&self) -> bool {
        self.collapse.is_some() || self.errors.is_some()
    }

    /// The processes the calls are dealt into (0: one per call): in a herd,
    /// no more than its calls, as a process without one holds none.
    fn processes_dealt(&self) -> u32 {
        match self.processes {
            0 => 0,
            n if self.open_loop() => n,
            n => n.min(self.clients).max(1),
        }
    }

    /// The requests a second the server takes once back, if it has such a
    /// limit: a herd's server does, and the errors scenario's if it is
    /// limited; a collapse's slows with its load instead.
    pub fn capacity_limit(&self) -> Option<u32> {
        let limited = match (self.collapse, self.errors) {
            (None, None) => true,
            (None, Some(errors)) => errors.limited,
            (Some(_), _) => false,
        };
        limited.then_some(self.capacity)
    }

    /// The share of requests the server fails at random, whatever its load:
    /// the errors scenario's, else the mixed world's.
    pub fn failure_share(&self) -> f64 {
        self.errors.map_or(self.random_failures, |e| e.error_rate)
    }

    /// What the server does and when, in words: the outage and capacity of
    /// a herd, or the collapse scenario's own settings, then the random
    /// failures and backends down if any.
    pub fn settings(&self) -> String {
        let mut line = self.server_settings();
        if self.errors.is_none() && self.random_failures > 0.0 {
            let _ = write!(
                line,
                "; {}% of requests fail at random",
                self.random_failures * 100.0
            );
        }
        if let Some(b) = self.backends {
            let _ = write!(
                line,
                "; {} of {} backends behind a round-robin balancer are down and refuse at once",
                b.down, b.count
            );
        }
        line
    }

    fn server_settings(&self) -> String {
        if let Some(e) = self.errors {
            return format!(
                "errors: calls arrive at {}/s until {}, and the dependency fails {}% of requests at random \
                 and never runs out of capacity",
                e.rate,
                GoDuration(e.until),
                e.error_rate * 100.0
            );
        }
        match self.collapse {
            // The shape line says what the dependency takes once back.
            None => format!(
                "outage {}, spread {}",
                GoDuration(self.outage),
                GoDuration(self.spread)
            ),
            Some(c) => format!(
                "collapse: calls arrive at {}/s, at {}/s from {} for {}, until {}; the server takes {} \
                 plus {} per request in progress, and finishes work its callers gave up on",
                c.rate,
                c.spike_rate,
                GoDuration(c.spike_at),
                GoDuration(c.spike_for),
                GoDuration(c.until),
                GoDuration(c.service),
                GoDuration(c.per_request)
            ),
        }
    }
}

/// The fleet a run was in, as every command's JSON states it (flattened
/// into its object).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Fleet {
    /// The herd and the fleet in one line, as the text output prints them.
    pub shape: String,
    /// Processes the calls came from (0: one per call).
    pub processes: u32,
    /// Daemon replicas the processes reached.
    pub replicas: u32,
    /// Whether the replicas shared their pace through a store.
    pub pace_store: bool,
    /// A request's round trip, in seconds (in a collapse, the mean one-way
    /// network delay).
    pub latency_seconds: f64,
}

impl Fleet {
    /// The fleet a run ran in, its processes `paced` through the daemon's
    /// replicas or not.
    pub fn of_run(s: &Scenario, paced: bool) -> Self {
        Self {
            shape: s.shape_of(paced),
            ..Self::from(s)
        }
    }
}

impl From<&Scenario> for Fleet {
    /// The fleet as [`Scenario::shape`] states it: processes beyond the
    /// herd's calls hold none, and a collapse's network is its own.
    fn from(s: &Scenario) -> Self {
        Self {
            shape: s.shape(),
            processes: s.processes_dealt(),
            replicas: s.replicas,
            pace_store: s.pace_store.is_some(),
            latency_seconds: s.collapse.map_or(s.latency, |c| c.network).as_secs_f64(),
        }
    }
}

/// A time when the server takes less than its capacity.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Brownout {
    /// When it starts.
    pub at: Duration,
    /// How long it lasts.
    pub lasting: Duration,
    /// Requests the server accepts per calendar second meanwhile.
    pub capacity: u32,
}

/// A server that is several backends behind a load balancer that deals
/// requests round-robin (Envoy's and HAProxy's default), some of them down:
/// a down backend refuses at once, and the capacity is the backends' that
/// are up (each an equal part of the server's).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Backends {
    /// Backends in all, at least 1.
    pub count: u32,
    /// Of those, down from t = 0 for the whole run; fewer than `count`.
    pub down: u32,
}

impl Backends {
    /// Whether the `n`-th request (from 0) goes to a backend that is down.
    pub fn down_for(&self, n: u64) -> bool {
        n % u64::from(self.count) < u64::from(self.down)
    }

    /// What is left of `capacity` with the down backends' parts taken out.
    pub fn capacity_up(&self, capacity: u64) -> u64 {
        let up = u64::from(self.count - self.down);
        capacity.saturating_mul(up) / u64::from(self.count)
    }
}
