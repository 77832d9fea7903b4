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
