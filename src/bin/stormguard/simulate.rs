//! `stormguard simulate`: a thundering herd, or another world, in
//! virtual time.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use stormguard_core::policy::{DependencyModel, ForecastScenario};
use stormguard_toolkit::flags::{count_in, duration_in, secs};
use stormguard_toolkit::shape::ShapeFlags;
use stormguard_toolkit::sim::{Modifiers, Named, Scenario};

/// The worlds `simulate` can put strategies in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum World {
    /// A herd failing at once against a recovering server (the flags below set it).
    Herd,
    /// A metastable failure, after Marc Brooker's simple_collapse_sim: calls
    /// arrive at 40/s, 80/s from 20 s to 25 s, until 80 s; the server takes
    /// 1 s + 10 ms per request in progress, and finishes work its callers
    /// gave up on; callers time out after 3 s and try 3 times, at once.
    /// Replaces --clients, --capacity, --outage and --spread.
    Collapse,
    /// Calls arriving at --rate a second for 60 s against a dependency that
    /// fails --error-rate of requests at random and never runs out of
    /// capacity: what retries and their budgets add to the load (the JSON's
    /// `amplification`). Callers try 4 times unless --max-retries says.
    /// With --outage the dependency is down from t = 0 until then, and the
    /// JSON's `half_open_trials_per_window` shows the processes' breakers
    /// probing its return (default: no outage); with --capacity or a
    /// --dependency model it takes only that much once back. Calls arrive
    /// until --until. Replaces --clients and --spread.
    Errors,
}

#[derive(Args)]
pub struct SimulateArgs {
    /// The world to simulate.
    #[arg(long, value_enum, default_value = "herd")]
    scenario: World,
    /// A strategy to run; repeat for several. Default: full-jitter, or with --compare all of them.
    #[arg(long = "strategy", value_enum)]
    strategies: Vec<Named>,
    /// Run several strategies on the same scenario and print one table.
    #[arg(long)]
    compare: bool,
    #[command(flatten)]
    shape: ShapeFlags,
    /// With --scenario errors: first tries a second, in all. Default: 1000.
    #[arg(long, value_parser = count_in(0.01f64, 1_000_000.0))]
    rate: Option<f64>,
    /// With --scenario errors: when calls stop arriving. Default: 60s.
    #[arg(long, value_parser = duration_in(secs(1), secs(86_400)))]
    until: Option<Duration>,
    /// The share of requests the dependency fails at random, whatever its
    /// load, in [0, 1]. With --scenario errors, the scenario's (default 0.5);
    /// with a herd, on top of its outage and capacity (a dependency that
    /// recovers and then fails a share at random). Default: 0.
    #[arg(long, value_parser = stormguard_toolkit::flags::share)]
    error_rate: Option<f64>,
    /// The HTTP status the random failures are answered with: 503 (the
    /// default) says overload to a send gate, and 500 is an error that the
    /// default gate.overloadOn does not count.
    #[arg(long, default_value_t = 503, value_parser = count_in(500u16, 599))]
    error_status: u16,
    /// The dependency is this many backends behind a round-robin load
    /// balancer; --down of them refuse every request at once, and the
    /// capacity is the rest's share of it.
    #[arg(long, value_parser = count_in(1u32, 1_000))]
    backends: Option<u32>,
    /// With --backends: how many are down, for the whole run (fewer than --backends).
    #[arg(long, requires = "backends", value_parser = count_in(0u32, 999))]
    down: Option<u32>,
    /// The server rejects everything from t = 0 until then. Default: with
    /// --policy, the first outage of the file's `forecast:` block for the
    /// service, else 10s.
    #[arg(long, value_parser = duration_in(secs(0), secs(86_400)))]
    outage: Option<Duration>,
    /// A second outage, START:LASTING (e.g. 30s:5s): the server rejects everything again.
    #[arg(long, value_parser = stormguard_toolkit::flags::window)]
    second_outage: Option<(Duration, Duration)>,
    /// A brownout, START:LASTING:CAPACITY (e.g. 20s:20s:50): the server takes
    /// only CAPACITY requests a second meanwhile.
    #[arg(long, value_parser = stormguard_toolkit::flags::brownout)]
    brownout: Option<(Duration, Duration, u32)>,
    /// Clients first fail at random times in [0, spread) instead of all at t = 0.
    #[arg(long, default_value = "0s", value_parser = duration_in(secs(0), secs(86_400)))]
    spread: Duration,
    /// Give up after this many retries (clients that give up are counted).
    /// Default: until success; 2 in the collapse scenario; 3 in the errors
    /// scenario, where a --policy keeps its own.
    #[arg(long)]
    max_retries: Option<u32>,
    /// Time each attempt out after this long. Default: the strategy's
    /// (none for the named ones); 3s in the collapse scenario.
    #[arg(long, value_parser = duration_in(Duration::from_millis(1), secs(86_400)))]
    per_try_timeout: Option<Duration>,
    /// Add the library's retry budget (default settings) to each strategy.
    #[arg(long)]
    budget: bool,
    /// Add the library's retry budget (default settings) with its floor the
    /// fleet's (minRetriesPerSecond for all the processes together): the
    /// daemon divides it among the processes by their requests, each report
    /// interval (10 s), a --feedback-delay after each report.
    #[arg(long)]
    fleet_budget: bool,
    /// Add the library's circuit breaker (default settings) to each strategy.
    #[arg(long)]
    breaker: bool,
    /// Add the library's circuit breaker (default settings) with its
    /// half-open the fleet's: an open breaker sends trials only on slots
    /// the daemon grants, halfOpenMaxCalls at once for all the processes
    /// together, and the daemon closes every breaker when they succeed.
    #[arg(long)]
    fleet_breaker: bool,
    /// Add the library's send gate (default settings) to each strategy: one
    /// per process, pacing every attempt while the server is unwell. With
    /// --compare, each strategy runs without and with it, side by side.
    #[arg(long)]
    gate: bool,
    /// Add the send gate and pace every process's gate through the daemon,
    /// which learns one rate for the whole fleet and divides it by demand
    /// (a --policy whose gate is on is paced so already, as its fleet runs
    /// it). With --compare, each strategy runs without and with it, side by side.
    #[arg(long)]
    fleet: bool,
    /// A --policy whose gate is on paces each process alone, as callers that
    /// never ask the daemon for pace (the client's fleet pacing turned off).
    #[arg(long, requires = "policy", conflicts_with = "fleet")]
    no_fleet_pacing: bool,
    /// With a shared pace store: a replica's round trip to it. Default: 1ms.
    #[arg(long, value_parser = duration_in(secs(0), secs(10)))]
    store_delay: Option<Duration>,
    /// With a shared pace store: it stops answering at this time, for good
    /// (Redis killed), and each replica paces alone from then on.
    #[arg(long, value_parser = duration_in(secs(0), secs(86_400)))]
    store_lost_at: Option<Duration>,
    /// With a shared pace store: it restarts empty at this time (Redis
    /// restarted without persistence, or failed over to an empty replica).
    #[arg(long, value_parser = duration_in(secs(0), secs(86_400)))]
    store_restarted_at: Option<Duration>,
    /// With a shared pace store: it fails over at this time to its replica,
    /// which had every write and whose clock is --store-clock-behind
    /// behind (Sentinel promoting a replica on another machine).
    #[arg(long, value_parser = duration_in(secs(0), secs(86_400)))]
    store_failed_over_at: Option<Duration>,
    /// With --store-failed-over-at: how far the promoted replica's clock is
    /// behind the old primary's.
    #[arg(long, requires = "store_failed_over_at", default_value = "5s", value_parser = duration_in(secs(0), secs(86_400)))]
    store_clock_behind: Duration,
    /// A rolling restart of the daemon's replicas: the first restarts at
    /// this time, each next one 5 s later, losing what it held in memory
    /// and starting again at once (with a pace store it takes up the pace
    /// from the store).
    #[arg(long, value_parser = duration_in(secs(0), secs(86_400)))]
    replicas_restart_at: Option<Duration>,
    /// With --fleet: the time from a process's report to its grant taking effect.
    #[arg(long, default_value = "100ms", value_parser = duration_in(secs(0), secs(60)))]
    feedback_delay: Duration,
    /// Seed of the random source: the same seed gives the same run.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// With --scenario errors: the share of calls that name themselves
    /// critical (served first by a send gate, shed last), drawn call by
    /// call. A herd's callers wait for a turn however long it takes; an
    /// errors scenario's calls wait as long as their class's gate.maxWait.
    #[arg(long, default_value_t = 0.0, value_parser = stormguard_toolkit::flags::share)]
    critical: f64,
    /// With --scenario errors: the share of calls that name themselves
    /// sheddable (served last, shed first); the rest name no class.
    #[arg(long, default_value_t = 0.0, value_parser = stormguard_toolkit::flags::share)]
    sheddable: f64,
    /// Virtual time after which the run stops; clients still retrying count as unfinished.
    #[arg(long, default_value = "1h", value_parser = duration_in(secs(1), secs(86_400)))]
    horizon: Duration,
    /// A policy file whose --service policy to simulate too.
    #[arg(long, requires = "service")]
    policy: Option<PathBuf>,
    /// The service (in --policy) whose resolved policy to simulate.
    #[arg(long, requires = "policy")]
    service: Option<String>,
    /// Print JSON: one object, or an array with --compare.
    #[arg(long)]
    json: bool,
    /// Draw the per-second histograms to this SVG file, one panel per strategy, same axes.
    #[arg(long)]
    svg: Option<PathBuf>,
}

/// Runs `stormguard simulate`.
pub fn run(mut args: SimulateArgs) -> ExitCode {
    let collapse = (args.scenario == World::Collapse).then(stormguard_toolkit::sim::Collapse::brooker);
    if let Some(model) = collapse {
        // Brooker's clients: three tries, 3 s each, no wait between.
        args.max_retries.get_or_insert(2);
        args.per_try_timeout.get_or_insert(Duration::from_secs(3));
        if args.strategies.is_empty() && args.policy.is_none() {
            args.strategies.push(Named::Immediate);
        }
        args.horizon = args.horizon.min(model.until);
        args.outage = Some(Duration::ZERO);
    }
    let limited = args.shape.capacity.is_some()
        || args.shape.dependency.is_some_and(|d| d != DependencyModel::Quota)
        || args.shape.burst.is_some()
        || args.shape.workers.is_some()
        || args.shape.queue.is_some();
    let errors = match (args.scenario, args.rate, args.error_rate) {
        (World::Errors, _, _) => Some(stormguard_toolkit::sim::Errors {
            until: args.until.unwrap_or(Duration::from_secs(60)),
            limited,
            ..stormguard_toolkit::sim::Errors::new(
                args.rate.unwrap_or(1000.0),
                args.error_rate.unwrap_or(0.5),
            )
        }),
        (_, Some(_), _) => {
            eprintln!("--rate: only with --scenario errors");
            return ExitCode::from(1);
        }
        _ if args.until.is_some() => {
            eprintln!("--until: only with --scenario errors, whose calls arrive until then");
            return ExitCode::from(1);
        }
        (World::Collapse, _, Some(_)) => {
            eprintln!("--error-rate: not with --scenario collapse, whose server fails by its load alone");
            return ExitCode::from(1);
        }
        _ => None,
    };
    if args.critical + args.sheddable > 1.0 {
        eprintln!(
            "--critical {} and --sheddable {}: the shares add up to more than every call",
            args.critical, args.sheddable
        );
        return ExitCode::from(1);
    }
    if (args.critical > 0.0 || args.sheddable > 0.0) && errors.is_none() {
        eprintln!("--critical, --sheddable: only with --scenario errors, whose calls may be shed");
        return ExitCode::from(1);
    }
    if limited && args.scenario == World::Collapse {
        eprintln!(
            "--capacity, --dependency, --burst, --workers, --queue: not with --scenario collapse, whose server \
             slows by its own model"
        );
        return ExitCode::from(1);
    }
    let backends = match (args.backends, args.down.unwrap_or(0)) {
        (Some(count), down) if down >= count => {
            eprintln!("--down {down}: must be fewer than --backends {count}");
            return ExitCode::from(1);
        }
        (Some(_), _) if collapse.is_some() => {
            eprintln!("--backends: not with --scenario collapse, whose server fails by its load alone");
            return ExitCode::from(1);
        }
        (Some(count), down) => Some(stormguard_toolkit::sim::Backends { count, down }),
        (None, _) => None,
    };
    if errors.is_some() {
        // Three retries, as a client library's default: 1.875 attempts a
        // call at 50 % errors with nothing to cap them; a --policy keeps its own.
        if args.policy.is_none() {
            args.max_retries.get_or_insert(3);
        }
        args.outage.get_or_insert(Duration::ZERO);
    }
    let stated = match args.policy.as_deref().zip(args.service.as_deref()) {
        Some((path, service)) => match stormguard_toolkit::simulate::resolved_policy(path, service) {
            Ok(resolved) => resolved.herd,
            Err(message) => {
                eprintln!("{message}");
                return ExitCode::from(1);
            }
        },
        None => ForecastScenario::default(),
    };
    let herd = args.shape.apply(stated);
    let store_faults = [
        args.store_lost_at,
        args.store_restarted_at,
        args.store_failed_over_at,
    ];
    if store_faults.iter().any(Option::is_some) && !herd.fleet.pace_store {
        eprintln!("--store-lost-at, --store-restarted-at, --store-failed-over-at: the replicas share no pace store (give --pace-store, or paceStore: true in the file's forecast: block)");
        return ExitCode::from(1);
    }
    let outage = args.outage.unwrap_or(herd.outages[0]);
    let store = args
        .store_delay
        .unwrap_or(stormguard_toolkit::sim::STORE_ROUND_TRIP);
    let request = stormguard_toolkit::simulate::Request {
        scenario: Scenario {
            second_outage: args.second_outage,
            collapse,
            errors,
            random_failures: if errors.is_none() {
                args.error_rate.unwrap_or(0.0)
            } else {
                0.0
            },
            backends,
            random_failure_status: args.error_status,
            brownout: args
                .brownout
                .map(|(at, lasting, capacity)| stormguard_toolkit::sim::Brownout {
                    at,
                    lasting,
                    capacity,
                }),
            spread: args.spread,
            pace_store: herd.fleet.pace_store.then_some(store),
            store_lost_at: args.store_lost_at,
            store_restarted_at: args.store_restarted_at,
            store_failover: args
                .store_failed_over_at
                .map(|at| stormguard_toolkit::sim::Failover {
                    at,
                    clock_behind: args.store_clock_behind,
                }),
            replicas_restart_at: args.replicas_restart_at,
            feedback_delay: args.feedback_delay,
            horizon: args.horizon,
            seed: args.seed,
            classes: stormguard_toolkit::sim::Classes {
                critical: args.critical,
                sheddable: args.sheddable,
            },
            waits_until_served: collapse.is_none() && errors.is_none(),
            ..Scenario::forecast(&herd, outage)
        },
        strategies: args.strategies,
        policy: args.policy.zip(args.service),
        modifiers: Modifiers {
            budget: args.budget,
            breaker: args.breaker,
            gate: args.gate,
            fleet: args.fleet,
            gates_alone: args.no_fleet_pacing,
            fleet_budget: args.fleet_budget,
            fleet_breaker: args.fleet_breaker,
            max_retries: args.max_retries,
            per_try_timeout: args.per_try_timeout,
        },
        compare: args.compare,
        json: args.json,
        svg: args.svg,
    };
    match stormguard_toolkit::simulate::simulate(&request) {
        Ok(output) => {
            print!("{output}");
            ExitCode::SUCCESS
        }
        Err(message) => {
            eprintln!("{message}");
            ExitCode::from(1)
        }
    }
}
