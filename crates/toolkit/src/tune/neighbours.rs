//! How a policy does on fleets near the one stated: half and double the
//! processes, one more daemon replica, a slower network, and the same fleet
//! against the dependency models not stated (a quota, a token bucket, a
//! concurrency limit, a request-rate limit). A fleet's shape is an estimate, and so is how its
//! dependency refuses; a recommendation that keeps its bounds only on the
//! exact shape and model stated is a bet on numbers nobody measured.

use std::time::Duration;

use serde::Serialize;
use stormguard_core::policy::{DependencyModel, DependencySpec, RetryPolicy};

use super::score::{in_parallel, Bounds, Family, Figures, Score};
use crate::sim::{Named, Scenario};

/// The latency a neighbour tries when the stated one is below it.
const SLOW_NETWORK: Duration = Duration::from_millis(5);

/// A fleet near the stated one, with the bounds a policy keeps there: the
/// current policy's p99 on that fleet, and the stated share of give-ups.
#[derive(Debug, Clone)]
pub struct Neighbour {
    /// What differs from the stated fleet, in words.
    pub label: String,
    family: Family,
    bounds: Bounds,
    /// The current policy there, run to set the bounds.
    current: OnNeighbour,
}

/// A policy's figures on one neighbouring fleet.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OnNeighbour {
    /// What differs from the stated fleet, in words.
    pub fleet: String,
    /// The whole fleet in one line.
    pub shape: String,
    /// Per outage of the family.
    pub figures: Vec<Figures>,
    /// Whether it keeps that fleet's bounds on every outage.
    pub within_bounds: bool,
}

/// The fleets around `family`'s, each with its bounds set by `current`
/// (or full jitter's p99 where `current` gives up on too many), as
/// [`Family::bounds`] sets them on the stated fleet.
pub fn around(
    family: &Family,
    current: &RetryPolicy,
    max_p99: Option<Duration>,
    max_gave_up: f64,
) -> Vec<Neighbour> {
    let shapes = shapes(&family.scenario);
    in_parallel(&shapes, |(label, scenario)| {
        let family = Family {
            scenario: scenario.clone(),
            ..family.clone()
        };
        let figures = family.figures(current, family.seeds).unwrap_or_default();
        let reference = || family.figures(&Named::FullJitter.policy(), family.seeds);
        let bounds = Family::bounds(&figures, reference, max_p99, max_gave_up);
        let current = on(label, &family, &bounds, figures);
        Neighbour {
            label: label.clone(),
            family,
            bounds,
            current,
        }
    })
}

impl Neighbour {
    /// The current policy on this fleet.
    pub fn current(&self) -> OnNeighbour {
        self.current.clone()
    }
}

/// `policy` on each of `neighbours` (no figures, and no bounds kept, if it is invalid).
pub fn judge(neighbours: &[Neighbour], policy: &RetryPolicy) -> Vec<OnNeighbour> {
    let tasks: Vec<(usize, usize, u32)> = neighbours
        .iter()
        .enumerate()
        .flat_map(|(n, neighbour)| neighbour.family.tasks().map(move |(o, i)| (n, o, i)))
        .collect();
    let mut runs = in_parallel(&tasks, |&(n, o, i)| neighbours[n].family.run(policy, o, i)).into_iter();
    neighbours
        .iter()
        .map(|n| {
            let per_fleet = n.family.tasks().count();
            let figures = n.family.figures_of(runs.by_ref().take(per_fleet).collect());
            on(&n.label, &n.family, &n.bounds, figures.unwrap_or_default())
        })
        .collect()
}

fn on(label: &str, family: &Family, bounds: &Bounds, figures: Vec<Figures>) -> OnNeighbour {
    OnNeighbour {
        fleet: label.to_owned(),
        shape: family.scenario.shape(),
        within_bounds: !figures.is_empty() && Score::of_figures(&figures, bounds).feasible(),
        figures,
    }
}

/// Whether `on` keeps its bounds on every neighbour.
pub fn hold_everywhere(on: &[OnNeighbour]) -> bool {
    on.iter().all(|n| n.within_bounds)
}

/// The neighbouring scenarios of `stated`, each with its label.
fn shapes(stated: &Scenario) -> Vec<(String, Scenario)> {
    let with = |change: &dyn Fn(&mut Scenario)| {
        let mut s = stated.clone();
        change(&mut s);
        s
    };
    let mut out = Vec::new();
    let processes = stated.processes.min(stated.clients);
    if processes > 1 {
        let half = processes / 2;
        out.push((
            format!("half the processes ({half})"),
            with(&|s| s.processes = half),
        ));
    }
    if processes > 0 {
        let double = processes.saturating_mul(2);
        out.push((
            format!("double the processes ({double})"),
            with(&|s| s.processes = double),
        ));
    }
    let more = stated.replicas + 1;
    out.push((format!("one more replica ({more})"), with(&|s| s.replicas = more)));
    let slower = if stated.latency < SLOW_NETWORK {
        SLOW_NETWORK
    } else {
        stated.latency * 2
    };
    let label = format!("{} latency", stormguard_core::policy::GoDuration(slower));
    out.push((label, with(&|s| s.latency = slower)));
    for model in MODELS.into_iter().filter(|&m| m != stated.dependency.model()) {
        let spec = DependencySpec {
            model,
            ..DependencySpec::default()
        };
        let dependency = spec.at(stated.capacity);
        out.push((
            format!("against {}", dependency.describe(stated.capacity)),
            with(&|s| s.dependency = dependency),
        ));
    }
    out
}

/// The dependency models a recommendation is tried on.
const MODELS: [DependencyModel; 4] = [
    DependencyModel::Quota,
    DependencyModel::TokenBucket,
    DependencyModel::Concurrency,
    DependencyModel::RequestRate,
];

/// The other models `on` breaks its bounds against (as "against ..."),
/// when it keeps them on every fleet of the stated model: then the
/// recommendation rests on how the dependency refuses. Empty otherwise.
pub fn models_broken_alone(on: &[OnNeighbour]) -> Vec<&str> {
    let (models, fleets): (Vec<_>, Vec<_>) = on.iter().partition(|n| n.fleet.starts_with("against "));
    if !fleets.iter().all(|n| n.within_bounds) {
        return Vec::new();
    }
    models
        .iter()
        .filter(|n| !n.within_bounds)
        .map(|n| n.fleet.as_str())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_models_a_recommendation_breaks_alone_are_named_when_every_fleet_holds() {
        let on = |fleet: &str, within_bounds| OnNeighbour {
            fleet: fleet.to_owned(),
            shape: String::new(),
            figures: Vec::new(),
            within_bounds,
        };
        let fleets = [on("half the processes (25)", true), on("5ms latency", true)];
        let bucket = "against a token bucket of 200/s, burst 200";
        let bucket_broken = [&fleets[..], &[on(bucket, false)]].concat();
        assert_eq!(models_broken_alone(&bucket_broken), [bucket]);
        let everywhere = [&fleets[..], &[on(bucket, true)]].concat();
        assert!(models_broken_alone(&everywhere).is_empty());
        let fleet_broken = [&bucket_broken[..], &[on("one more replica (3)", false)]].concat();
        assert!(
            models_broken_alone(&fleet_broken).is_empty(),
            "broken on a fleet of the stated model too"
        );
    }

    #[test]
    fn the_neighbours_are_half_and_double_the_processes_one_more_replica_and_a_slower_network() {
        let stated = Scenario {
            processes: 50,
            replicas: 2,
            latency: Duration::from_millis(1),
            ..Scenario::default()
        };
        let labels: Vec<String> = shapes(&stated).into_iter().map(|(label, _)| label).collect();
        assert_eq!(
            labels,
            [
                "half the processes (25)",
                "double the processes (100)",
                "one more replica (3)",
                "5ms latency",
                "against a token bucket of 200/s, burst 200",
                "against 20 workers at 100ms a request, queue 200",
                "against a limit of 200 requests over a sliding second, refused ones counted"
            ]
        );
        let slow = Scenario {
            latency: Duration::from_millis(20),
            processes: 0,
            ..stated
        };
        let labels: Vec<String> = shapes(&slow).into_iter().map(|(label, _)| label).collect();
        assert_eq!(
            labels[..2],
            ["one more replica (3)", "40ms latency"],
            "a process per call has no half"
        );
    }
}
