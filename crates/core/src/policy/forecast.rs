//! A policy file's `forecast:` block: the herd `stormguard check`,
//! `simulate --policy` and `tune` run each service's policy against, and
//! the fleet that sends it, set to match the traffic its callers send.
//!
//! ```yaml
//! forecast:
//!   clients: 1000            # calls failing at once (1-10,000)
//!   capacity: 200            # requests a second the service takes once back (1-1,000,000)
//!   outages: [2s, 10s, 60s]  # 1 to 3 outages, each at most 10m
//!   processes: 50            # processes the calls come from (1-10,000)
//!   replicas: 2              # daemon replicas pacing them (1-16)
//!   paceStore: false         # whether the replicas share their pace through Redis
//!   latency: 1ms             # a request's round trip (at most 10s)
//!   dependency: token-bucket # how it refuses: quota (default), token-bucket, concurrency, request-rate
//!   burst: 200               # token bucket: requests it takes at once (default: capacity)
//!   workers: 20              # concurrency: requests served at once (default: 20)
//!   queue: 200               # concurrency: requests waiting for a worker (default: capacity)
//!   services:
//!     checkout-service: {clients: 5000, capacity: 800}
//! ```
//!
//! It is not part of any served policy: only the forecasts read it. The
//! bounds keep a check of a file with many services to seconds.

use std::collections::BTreeMap;
use std::time::Duration;

use super::duration::GoDuration;
use super::layer::Leaf;
use super::name::check_service_name;
use super::tree::{entries, unknown_key, Errors, KeyPath, Node, PolicyError};

/// The keys of the `forecast:` block (`services` only at its top, last).
pub const FORECAST_KEYS: &[&str] = &[
    "clients",
    "capacity",
    "outages",
    "processes",
    "replicas",
    "paceStore",
    "latency",
    "dependency",
    "burst",
    "workers",
    "queue",
    "services",
];
/// The most calls a forecast's herd may have.
pub const MAX_FORECAST_CLIENTS: u32 = 10_000;
/// The most requests a second a forecast's service may take.
pub const MAX_FORECAST_CAPACITY: u32 = 1_000_000;
/// The most outages a forecast may run.
pub const MAX_FORECAST_OUTAGES: usize = 3;
/// The longest outage a forecast may run.
pub const MAX_FORECAST_OUTAGE: Duration = Duration::from_secs(600);
/// The most processes a forecast's calls may come from.
pub const MAX_FORECAST_PROCESSES: u32 = 10_000;
/// The most daemon replicas a forecast may pace through.
pub const MAX_FORECAST_REPLICAS: u32 = 16;
/// The longest round trip a forecast's requests may take.
pub const MAX_FORECAST_LATENCY: Duration = Duration::from_secs(10);
/// The most workers a forecast's concurrency-limited dependency may have.
pub const MAX_FORECAST_WORKERS: u32 = 10_000;
/// The workers of a concurrency-limited dependency when the file does not say.
pub const DEFAULT_WORKERS: u32 = 20;

/// How a dependency refuses what it cannot take: which limit it runs out
/// of. The forecasts run each model against its `capacity` (requests a
/// second), so a policy can be compared on all three.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Dependency {
    /// Takes `capacity` requests in each calendar second and refuses the
    /// rest until the next: a fixed-window counter, as a quota service or
    /// a per-second `INCR` in Redis keeps. The simplest limit, and the
    /// kindest to a herd: a burst that arrives early in a second is taken
    /// whole.
    #[default]
    Quota,
    /// A token bucket refilled continuously at `capacity` tokens a second,
    /// holding at most `burst`: each request takes a token or is refused.
    /// The rate limit of API gateways and of web servers and proxies
    /// (nginx's `limit_req` is its leaky-bucket twin). Envoy's
    /// `local_ratelimit` adds its tokens in steps instead, `tokens_per_fill`
    /// every `fill_interval`: with a fill a second it is closer to
    /// [`Quota`](Self::Quota) with a bucket that carries over. Full when the
    /// dependency comes back, so a herd gets `burst` at once and then
    /// `capacity` a second, however it times its sends.
    TokenBucket {
        /// Requests it takes at once, from full. In [1, 1,000,000].
        burst: u32,
    },
    /// `workers` serve one request at a time each, taking
    /// `workers / capacity` seconds a request; requests that find every
    /// worker busy wait in a line of at most `queue`, first come first
    /// served, and those that find the line full are refused at once. A
    /// worker pool behind an accept queue (a thread-per-request server, a
    /// database's connection slots with `queue: 0`): before it refuses it
    /// slows, and a caller's per-try timeout may fire while its request
    /// still waits, the work done for nobody.
    Concurrency {
        /// Requests served at once. In [1, 10,000].
        workers: u32,
        /// Requests that may wait for a worker. In [0, 1,000,000].
        queue: u32,
    },
    /// Counts every request over a sliding second, the refused ones too,
    /// and refuses each while the count is above `capacity`: HAProxy's
    /// stick-table `http_req_rate(1s)` with a `deny` rule, as its guides
    /// configure a rate limit (the count is this second's requests and the
    /// last second's, weighted by what is left of it). A herd that sends
    /// more than the limit is refused whole, not just its excess, until it
    /// slows below it.
    RequestRate,
}

named_values!(DependencyModel, "dependency", {
    Quota => "quota",
    TokenBucket => "token-bucket",
    Concurrency => "concurrency",
    RequestRate => "request-rate",
});

/// Which [`Dependency`] a `dependency:` key names, before its settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DependencyModel {
    /// [`Dependency::Quota`].
    Quota,
    /// [`Dependency::TokenBucket`].
    TokenBucket,
    /// [`Dependency::Concurrency`].
    Concurrency,
    /// [`Dependency::RequestRate`].
    RequestRate,
}

/// A dependency as a forecast states it: the model, and the settings the
/// file or the command line gave. [`at`](Self::at) fills in the rest for a
/// capacity, so that a capacity given later (`--capacity`) still sizes them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DependencySpec {
    /// Which limit it has.
    pub model: DependencyModel,
    /// A token bucket's burst. Default: the capacity (a second's worth).
    pub burst: Option<u32>,
    /// A concurrency limit's workers. Default: [`DEFAULT_WORKERS`].
    pub workers: Option<u32>,
    /// A concurrency limit's queue. Default: the capacity (at full speed,
    /// a second's wait for the last in line).
    pub queue: Option<u32>,
}

impl Default for DependencySpec {
    fn default() -> Self {
        Self {
            model: DependencyModel::Quota,
            burst: None,
            workers: None,
            queue: None,
        }
    }
}

impl DependencySpec {
    /// The dependency, at `capacity` requests a second.
    pub fn at(&self, capacity: u32) -> Dependency {
        match self.model {
            DependencyModel::Quota => Dependency::Quota,
            DependencyModel::TokenBucket => Dependency::TokenBucket {
                burst: self.burst.unwrap_or(capacity).max(1),
            },
            DependencyModel::Concurrency => Dependency::Concurrency {
                workers: self.workers.unwrap_or(DEFAULT_WORKERS),
                queue: self.queue.unwrap_or(capacity),
            },
            DependencyModel::RequestRate => Dependency::RequestRate,
        }
    }
}

impl Dependency {
    /// The model's name, as a file writes it.
    pub fn model(&self) -> DependencyModel {
        match self {
            Self::Quota => DependencyModel::Quota,
            Self::TokenBucket { .. } => DependencyModel::TokenBucket,
            Self::Concurrency { .. } => DependencyModel::Concurrency,
            Self::RequestRate => DependencyModel::RequestRate,
        }
    }

    /// What a shape line says of it, at `capacity` requests a second:
    /// "a quota of 200/s a second", "a token bucket of 200/s, burst 20",
    /// "20 workers at 100ms a request, queue 200".
    pub fn describe(&self, capacity: u32) -> String {
        match *self {
            Self::Quota => format!("a quota of {capacity} a second"),
            Self::TokenBucket { burst } => format!("a token bucket of {capacity}/s, burst {burst}"),
            Self::Concurrency { workers, queue } => format!(
                "{workers} workers at {} a request, queue {queue}",
                GoDuration(service_time(workers, capacity))
            ),
            Self::RequestRate => {
                format!("a limit of {capacity} requests over a sliding second, refused ones counted")
            }
        }
    }
}

/// A concurrency-limited dependency's time per request: what lets
/// `workers` serve `capacity` requests a second.
pub fn service_time(workers: u32, capacity: u32) -> Duration {
    Duration::from_secs_f64(f64::from(workers) / f64::from(capacity.max(1)))
}

/// The fleet that sends a forecast's calls. Its [default](FleetShape::default)
/// is the one place a forecast's shape is chosen when a file does not state
/// it: `check`, `simulate` and `tune` all start from it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FleetShape {
    /// Processes the calls come from, dealt round-robin: a process's calls
    /// share its retry budget, circuit breaker and send gate. In [1, 10,000].
    pub processes: u32,
    /// Daemon replicas the processes reach, dealt round-robin; each paces
    /// the gated processes that reach it. In [1, 16].
    pub replicas: u32,
    /// Whether the replicas share their pace through a store (Redis), and
    /// so pace as one; without it each paces its share of the fleet alone.
    pub pace_store: bool,
    /// A request's round trip. Zero flatters every policy: the first
    /// refusal would be answered before the rest of the herd had sent.
    pub latency: Duration,
}

impl Default for FleetShape {
    /// 50 processes through 2 daemon replicas that share no pace store,
    /// 1 ms latency: the shipped Deployment (2 replicas; a pace store is an
    /// opt-in component) in front of a small fleet, on one network.
    fn default() -> Self {
        Self {
            processes: 50,
            replicas: 2,
            pace_store: false,
            latency: Duration::from_millis(1),
        }
    }
}

/// The herd one service's policy is forecast against: `clients` calls
/// failing at once from the fleet `fleet` describes, and a service that
/// takes `capacity` requests a second once each of `outages` ends.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ForecastScenario {
    /// Calls failing at once.
    pub clients: u32,
    /// Requests a second the service takes once back.
    pub capacity: u32,
    /// The outages, each forecast in turn.
    pub outages: Vec<Duration>,
    /// The fleet the calls come from.
    pub fleet: FleetShape,
    /// How the service refuses what it cannot take.
    pub dependency: DependencySpec,
}

impl Default for ForecastScenario {
    /// 1000 calls at once, 200 requests a second, a 10 s outage: a herd the
    /// size of a small fleet's, against a restart, from the default
    /// [`FleetShape`].
    fn default() -> Self {
        Self {
            clients: 1000,
            capacity: 200,
            outages: vec![Duration::from_secs(10)],
            fleet: FleetShape::default(),
            dependency: DependencySpec::default(),
        }
    }
}

/// The `forecast:` block as the file sets it: its own keys, and each service's.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ForecastBlock {
    defaults: Layer,
    services: BTreeMap<String, Layer>,
}

/// What one level of the block sets.
#[derive(Debug, Clone, Default, PartialEq)]
struct Layer {
    clients: Option<u32>,
    capacity: Option<u32>,
    outages: Option<Vec<Duration>>,
    processes: Option<u32>,
    replicas: Option<u32>,
    pace_store: Option<bool>,
    latency: Option<Duration>,
    dependency: Option<DependencyModel>,
    burst: Option<u32>,
    workers: Option<u32>,
    queue: Option<u32>,
}

impl ForecastBlock {
    /// The scenario of `service`: its own keys, else the block's, else the
    /// [default](ForecastScenario::default).
    pub fn resolve(&self, service: &str) -> ForecastScenario {
        let own = self.services.get(service).cloned().unwrap_or_default();
        let top = &self.defaults;
        let base = ForecastScenario::default();
        let fleet = base.fleet;
        ForecastScenario {
            clients: own.clients.or(top.clients).unwrap_or(base.clients),
            capacity: own.capacity.or(top.capacity).unwrap_or(base.capacity),
            dependency: DependencySpec {
                model: own
                    .dependency
                    .or(top.dependency)
                    .unwrap_or(DependencyModel::Quota),
                burst: own.burst.or(top.burst),
                workers: own.workers.or(top.workers),
                queue: own.queue.or(top.queue),
            },
            outages: own
                .outages
                .or_else(|| top.outages.clone())
                .unwrap_or(base.outages),
            fleet: FleetShape {
                processes: own.processes.or(top.processes).unwrap_or(fleet.processes),
                replicas: own.replicas.or(top.replicas).unwrap_or(fleet.replicas),
                pace_store: own.pace_store.or(top.pace_store).unwrap_or(fleet.pace_store),
                latency: own.latency.or(top.latency).unwrap_or(fleet.latency),
            },
        }
    }

    /// The outages the block states for `service` (its own, else the
    /// block's), if it states any.
    pub fn stated_outages(&self, service: &str) -> Option<Vec<Duration>> {
        let own = self.services.get(service).and_then(|own| own.outages.clone());
        own.or_else(|| self.defaults.outages.clone())
    }

    /// Whether the file has a `forecast:` block with anything in it.
    pub fn is_set(&self) -> bool {
        *self != Self::default()
    }

    /// The scenario of a service with no keys of its own.
    pub fn defaults(&self) -> ForecastScenario {
        self.resolve("")
    }

    /// Decodes the block at `path`, pushing every problem onto `errors`.
    pub(super) fn decode(node: &Node, path: &KeyPath, errors: &mut Errors) -> Self {
        let mut block = Self::default();
        for (key, value) in entries(node, path, errors) {
            let at = path.key(key);
            if key == "services" {
                for (name, layer) in entries(value, &at, errors) {
                    let at = at.key(name);
                    if let Err(problem) = check_service_name(name) {
                        errors.push(PolicyError::key(&at, problem));
                    }
                    let mut own = Layer::default();
                    for (key, value) in entries(layer, &at, errors) {
                        let known = &FORECAST_KEYS[..FORECAST_KEYS.len() - 1];
                        own.set(key, value, &at.key(key), known, errors);
                    }
                    block.services.insert(name.to_owned(), own);
                }
            } else {
                block.defaults.set(key, value, &at, FORECAST_KEYS, errors);
            }
        }
        block
    }
}

impl Layer {
    fn set(&mut self, key: &str, value: &Node, at: &KeyPath, known: &[&str], errors: &mut Errors) {
        match key {
            "clients" => self.clients = count(value, at, MAX_FORECAST_CLIENTS, errors),
            "capacity" => self.capacity = count(value, at, MAX_FORECAST_CAPACITY, errors),
            "outages" => self.outages = outages(value, at, errors),
            "processes" => self.processes = count(value, at, MAX_FORECAST_PROCESSES, errors),
            "replicas" => self.replicas = count(value, at, MAX_FORECAST_REPLICAS, errors),
            "paceStore" => self.pace_store = bool::from_node(value, at, errors),
            "latency" => self.latency = at_most(value, at, MAX_FORECAST_LATENCY, errors),
            "dependency" => self.dependency = DependencyModel::from_node(value, at, errors),
            "burst" => self.burst = count(value, at, MAX_FORECAST_CAPACITY, errors),
            "workers" => self.workers = count(value, at, MAX_FORECAST_WORKERS, errors),
            "queue" => self.queue = at_most_count(value, at, MAX_FORECAST_CAPACITY, errors),
            other => errors.push(unknown_key(at, other, known)),
        }
    }
}

/// A whole number in `[1, max]`.
fn count(node: &Node, path: &KeyPath, max: u32, errors: &mut Errors) -> Option<u32> {
    let n = u32::from_node(node, path, errors)?;
    if !(1..=max).contains(&n) {
        errors.push(PolicyError::value(
            path,
            format!("must be between 1 and {max}, found {n}"),
        ));
        return None;
    }
    Some(n)
}

/// A whole number in `[0, max]`.
fn at_most_count(node: &Node, path: &KeyPath, max: u32, errors: &mut Errors) -> Option<u32> {
    let n = u32::from_node(node, path, errors)?;
    if n > max {
        errors.push(PolicyError::value(
            path,
            format!("must be at most {max}, found {n}"),
        ));
        return None;
    }
    Some(n)
}

/// A list of 1 to [`MAX_FORECAST_OUTAGES`] durations, each at most
/// [`MAX_FORECAST_OUTAGE`]; a single duration is a list of one.
fn outages(node: &Node, path: &KeyPath, errors: &mut Errors) -> Option<Vec<Duration>> {
    let items: Vec<(KeyPath, &Node)> = match node {
        Node::Seq(items) => items
            .iter()
            .enumerate()
            .map(|(i, n)| (path.index(i), n))
            .collect(),
        one => vec![(path.clone(), one)],
    };
    if items.is_empty() || items.len() > MAX_FORECAST_OUTAGES {
        errors.push(PolicyError::value(
            path,
            format!("lists {} outages; give 1 to {MAX_FORECAST_OUTAGES}", items.len()),
        ));
        return None;
    }
    let mut out = Vec::new();
    for (at, item) in items {
        out.push(at_most(item, &at, MAX_FORECAST_OUTAGE, errors)?);
    }
    Some(out)
}

/// A duration of at most `max`.
fn at_most(node: &Node, path: &KeyPath, max: Duration, errors: &mut Errors) -> Option<Duration> {
    let value = Duration::from_node(node, path, errors)?;
    if value > max {
        errors.push(PolicyError::value(
            path,
            format!("must be at most {}, found {}", GoDuration(max), GoDuration(value)),
        ));
        return None;
    }
    Some(value)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::tree::build::{map, s};

    fn decode(node: &Node) -> (ForecastBlock, Vec<String>) {
        let mut errors = Errors::new();
        let block = ForecastBlock::decode(node, &KeyPath::root().key("forecast"), &mut errors);
        (block, errors.iter().map(ToString::to_string).collect())
    }

    #[test]
    fn the_dependency_layers_key_by_key_and_sizes_what_is_left_out_by_the_capacity() {
        let (block, errors) = decode(&map(vec![
            ("dependency", s("token-bucket")),
            ("burst", Node::Int(20)),
            ("workers", Node::Int(64)),
            (
                "services",
                map(vec![
                    (
                        "orders",
                        map(vec![("dependency", s("concurrency")), ("queue", Node::Int(0))]),
                    ),
                    (
                        "search",
                        map(vec![("capacity", Node::Int(500)), ("burst", Node::Int(500))]),
                    ),
                    ("quota", map(vec![("dependency", s("quota"))])),
                ]),
            ),
        ]));
        assert!(errors.is_empty(), "{errors:?}");
        let at = |service: &str| {
            let herd = block.resolve(service);
            herd.dependency.at(herd.capacity)
        };
        assert_eq!(at("any"), Dependency::TokenBucket { burst: 20 });
        assert_eq!(at("search"), Dependency::TokenBucket { burst: 500 });
        assert_eq!(
            at("orders"),
            Dependency::Concurrency {
                workers: 64,
                queue: 0
            }
        );
        assert_eq!(at("quota"), Dependency::Quota);
        let unstated = DependencySpec {
            model: DependencyModel::Concurrency,
            ..DependencySpec::default()
        };
        assert_eq!(
            unstated.at(300),
            Dependency::Concurrency {
                workers: DEFAULT_WORKERS,
                queue: 300
            },
            "a second's queue at the capacity"
        );
        let bucket = DependencySpec {
            model: DependencyModel::TokenBucket,
            ..DependencySpec::default()
        };
        assert_eq!(
            bucket.at(300),
            Dependency::TokenBucket { burst: 300 },
            "a second's burst"
        );
        assert_eq!(
            Dependency::Concurrency {
                workers: 20,
                queue: 200
            }
            .describe(200),
            "20 workers at 100ms a request, queue 200"
        );
    }

    #[test]
    fn a_wrong_dependency_names_the_key_and_the_closest_model() {
        let (_, errors) = decode(&map(vec![
            ("dependency", s("token_bucket")),
            ("workers", Node::Int(0)),
            ("queue", Node::Int(-1)),
            ("burst", Node::Int(2_000_000)),
        ]));
        assert_eq!(errors.len(), 4, "{errors:?}");
        assert!(
            errors[0].contains("forecast.dependency") && errors[0].contains("\"token-bucket\""),
            "{}",
            errors[0]
        );
        assert!(
            errors[1].contains("forecast.workers") && errors[1].contains("between 1 and 10000"),
            "{}",
            errors[1]
        );
        assert!(
            errors[2].contains("forecast.queue") && errors[2].contains("negative"),
            "{}",
            errors[2]
        );
        assert!(
            errors[3].contains("forecast.burst") && errors[3].contains("1000000"),
            "{}",
            errors[3]
        );
    }

    #[test]
    fn a_service_takes_its_own_keys_then_the_blocks_then_the_default() {
        let (block, errors) = decode(&map(vec![
            ("clients", Node::Int(5000)),
            ("outages", Node::Seq(vec![s("2s"), s("1m")])),
            (
                "services",
                map(vec![("checkout", map(vec![("capacity", Node::Int(800))]))]),
            ),
        ]));
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(
            block.resolve("checkout"),
            ForecastScenario {
                clients: 5000,
                capacity: 800,
                outages: vec![Duration::from_secs(2), Duration::from_secs(60)],
                fleet: FleetShape::default(),
                dependency: DependencySpec::default(),
            }
        );
        assert_eq!(block.defaults().capacity, 200);
        assert_eq!(block.stated_outages("checkout").map(|o| o.len()), Some(2));
        assert_eq!(
            ForecastBlock::default().stated_outages("checkout"),
            None,
            "not stated"
        );
        assert_eq!(
            ForecastBlock::default().resolve("any"),
            ForecastScenario::default()
        );
    }

    #[test]
    fn the_fleets_shape_layers_key_by_key_like_the_herd() {
        let (block, errors) = decode(&map(vec![
            ("processes", Node::Int(20)),
            ("paceStore", Node::Bool(true)),
            ("latency", s("5ms")),
            (
                "services",
                map(vec![(
                    "checkout",
                    map(vec![("replicas", Node::Int(3)), ("processes", Node::Int(400))]),
                )]),
            ),
        ]));
        assert!(errors.is_empty(), "{errors:?}");
        let shape = |processes, replicas| FleetShape {
            processes,
            replicas,
            pace_store: true,
            latency: Duration::from_millis(5),
        };
        assert_eq!(block.resolve("checkout").fleet, shape(400, 3));
        assert_eq!(block.defaults().fleet, shape(20, 2), "replicas: the default");
        let fleet = FleetShape::default();
        assert!(
            fleet.latency > Duration::ZERO,
            "a default that flatters no policy"
        );
        assert_eq!(
            (fleet.processes, fleet.replicas, fleet.pace_store),
            (50, 2, false)
        );
    }

    #[test]
    fn a_single_outage_is_a_list_of_one() {
        let (block, errors) = decode(&map(vec![("outages", s("30s"))]));
        assert!(errors.is_empty());
        assert_eq!(block.defaults().outages, vec![Duration::from_secs(30)]);
    }

    #[test]
    fn every_bad_value_is_named_with_its_place() {
        let (_, errors) = decode(&map(vec![
            ("clients", Node::Int(0)),
            ("capacity", s("lots")),
            ("outages", Node::Seq(vec![s("1s"), s("2s"), s("3s"), s("4s")])),
            ("clinets", Node::Int(5)),
            ("processes", Node::Int(0)),
            ("replicas", Node::Int(17)),
            ("paceStore", s("yes")),
            ("latency", s("1m")),
            (
                "services",
                map(vec![
                    ("Checkout", map(vec![("outages", Node::Seq(vec![s("1h")]))])),
                    ("orders", map(vec![("services", map(vec![]))])),
                ]),
            ),
        ]));
        let has = |prefix: &str, text: &str| errors.iter().any(|e| e.starts_with(prefix) && e.contains(text));
        assert!(has("forecast.clients", "between 1 and 10000"), "{errors:?}");
        assert!(has("forecast.capacity", "whole number"), "{errors:?}");
        assert!(has("forecast.outages", "give 1 to 3"), "{errors:?}");
        assert!(has("forecast.clinets", "did you mean \"clients\""), "{errors:?}");
        assert!(has("forecast.processes", "between 1 and 10000"), "{errors:?}");
        assert!(has("forecast.replicas", "between 1 and 16"), "{errors:?}");
        assert!(has("forecast.paceStore", "true or false"), "{errors:?}");
        assert!(has("forecast.latency", "at most 10s"), "{errors:?}");
        assert!(has("forecast.services.Checkout", "DNS-1123"), "{errors:?}");
        assert!(
            has("forecast.services.Checkout.outages[0]", "at most 10m0s"),
            "{errors:?}"
        );
        assert!(
            has("forecast.services.orders.services", "unknown key"),
            "{errors:?}"
        );
    }
}
