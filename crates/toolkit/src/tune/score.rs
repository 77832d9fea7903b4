//! How a candidate is judged: its figures on every outage of the family,
//! the bounds it must keep, and one score to rank candidates by.

use std::cmp::Ordering;
use std::sync::atomic::{AtomicUsize, Ordering as AtomicOrdering};
use std::sync::Mutex;
use std::time::Duration;

use serde::Serialize;
use stormguard_core::policy::RetryPolicy;

use crate::sim::{self, Scenario, Summary};

/// A policy's figures on one outage, as means over the seeds.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Figures {
    /// The outage, in seconds.
    pub outage_seconds: f64,
    /// Requests the server rejected.
    pub wasted: f64,
    /// 99th percentile time to success; `None` if a seed served too few clients to have one.
    pub p99_seconds: Option<f64>,
    /// How far the seeds' p99s spread about it (their standard deviation);
    /// `None` with a single seed or no p99.
    pub p99_spread_seconds: Option<f64>,
    /// Share of the clients that gave up (or were still retrying at the horizon).
    pub gave_up: f64,
}

/// What a candidate must keep to on every outage.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Bounds {
    /// The most p99 time to success, per outage; `None`: no bound.
    pub max_p99_seconds: Vec<Option<f64>>,
    /// The largest share of clients that may give up.
    pub max_gave_up: f64,
}

/// A candidate's rank: those within bounds first, by waste, then by p99.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Score {
    /// How far outside the bounds it is, summed over the outages (relative
    /// p99 excess plus gave-up share excess); 0 within them.
    pub violation: f64,
    /// The geometric mean of the wasted requests over the outages, so that
    /// each outage counts alike whatever its length.
    pub waste: f64,
    /// The mean p99 over the outages, to break ties.
    pub p99: f64,
}

impl Score {
    /// Whether it keeps every bound.
    pub fn feasible(&self) -> bool {
        self.violation == 0.0
    }

    /// Orders better first.
    pub fn rank(&self, other: &Self) -> Ordering {
        self.violation
            .total_cmp(&other.violation)
            .then(self.waste.total_cmp(&other.waste))
            .then(self.p99.total_cmp(&other.p99))
    }

    /// The score of `figures` against `bounds`.
    pub fn of_figures(figures: &[Figures], bounds: &Bounds) -> Self {
        let mut violation = 0.0;
        for (f, bound) in figures.iter().zip(&bounds.max_p99_seconds) {
            if let Some(bound) = bound {
                violation += match f.p99_seconds {
                    Some(p99) => ((p99 - bound) / bound.max(1e-9)).max(0.0),
                    None => 1.0,
                };
            }
            violation += (f.gave_up - bounds.max_gave_up).max(0.0);
        }
        let n = figures.len().max(1) as f64;
        let log_waste: f64 = figures.iter().map(|f| (f.wasted + 1.0).ln()).sum();
        let p99: f64 = figures
            .iter()
            .map(|f| f.p99_seconds.unwrap_or(f64::MAX / 4.0))
            .sum();
        Self {
            violation,
            waste: (log_waste / n).exp() - 1.0,
            p99: p99 / n,
        }
    }
}

/// The world a policy is judged in: a scenario whose outage each of
/// `outages` replaces in turn, on `seeds` seeds from the scenario's own.
#[derive(Debug, Clone)]
pub struct Family {
    /// Clients, capacity, spread, first seed.
    pub scenario: Scenario,
    /// The outages.
    pub outages: Vec<Duration>,
    /// Seeds per outage.
    pub seeds: u32,
}

impl Family {
    /// The runs of `policy`, labelled `label`: per outage, one summary per seed.
    /// `None` if the policy is invalid.
    pub fn runs(&self, label: &str, policy: &RetryPolicy, seeds: u32) -> Option<Vec<Vec<Summary>>> {
        (0..self.outages.len())
            .map(|o| {
                (0..seeds)
                    .map(|i| self.run_labelled(label, policy, o, i))
                    .collect()
            })
            .collect()
    }

    /// One run of a candidate `policy`: outage `o` of the family, on its `i`th seed.
    pub(super) fn run(&self, policy: &RetryPolicy, o: usize, i: u32) -> Option<Summary> {
        self.run_labelled("candidate", policy, o, i)
    }

    fn run_labelled(&self, label: &str, policy: &RetryPolicy, o: usize, i: u32) -> Option<Summary> {
        let scenario = Scenario {
            outage: self.outages[o],
            seed: self.scenario.seed.wrapping_add(u64::from(i)),
            ..self.scenario.clone()
        };
        sim::forecast(label, policy.clone(), &scenario).ok()
    }

    /// Means of `policy`'s figures per outage over the first `seeds` seeds.
    pub fn figures(&self, policy: &RetryPolicy, seeds: u32) -> Option<Vec<Figures>> {
        let runs = self.runs("candidate", policy, seeds)?;
        Some(self.means(&runs))
    }

    /// Every run of the family on its seeds, for one policy: (outage, seed) pairs
    /// in the order [`figures_of`](Self::figures_of) reads them.
    pub(super) fn tasks(&self) -> impl Iterator<Item = (usize, u32)> + '_ {
        (0..self.outages.len()).flat_map(move |o| (0..self.seeds).map(move |i| (o, i)))
    }

    /// The figures of `runs`, per outage, one summary per seed each.
    fn means(&self, runs: &[Vec<Summary>]) -> Vec<Figures> {
        runs.iter()
            .zip(&self.outages)
            .map(|(summaries, outage)| means(summaries, *outage, self.scenario.clients))
            .collect()
    }

    /// The bounds: `max_p99` on every outage if given; else, on each, what
    /// `current` reaches, or `reference`'s p99 where `current` has none or
    /// lets more than `max_gave_up` of its clients give up (a p99 reached
    /// by giving up is no bound to keep). At most `max_gave_up` of the
    /// clients giving up.
    pub fn bounds(
        current: &[Figures],
        reference: impl FnOnce() -> Option<Vec<Figures>>,
        max_p99: Option<Duration>,
        max_gave_up: f64,
    ) -> Bounds {
        let max_p99_seconds = match max_p99 {
            Some(d) => vec![Some(d.as_secs_f64()); current.len()],
            None => {
                let kept = |f: &Figures| f.p99_seconds.filter(|_| f.gave_up <= max_gave_up);
                let mut bounds: Vec<Option<f64>> = current.iter().map(kept).collect();
                if bounds.iter().any(Option::is_none) {
                    let reference = reference().unwrap_or_default();
                    for (bound, r) in bounds.iter_mut().zip(&reference) {
                        *bound = bound.or(r.p99_seconds);
                    }
                }
                bounds
            }
        };
        Bounds {
            max_p99_seconds,
            max_gave_up,
        }
    }

    /// The figures of each of `policies` over the first `seeds` seeds, and
    /// their score against `bounds`, on every core: each
    /// run is a task of its own, so that a handful of policies keeps every
    /// core busy too.
    pub fn score_all(
        &self,
        policies: &[RetryPolicy],
        seeds: u32,
        bounds: &Bounds,
    ) -> Vec<Option<(Vec<Figures>, Score)>> {
        let seeded = Family {
            seeds,
            ..self.clone()
        };
        let per_policy = self.outages.len() * seeds as usize;
        let tasks: Vec<(usize, usize, u32)> = (0..policies.len())
            .flat_map(|p| seeded.tasks().map(move |(o, i)| (p, o, i)))
            .collect();
        let mut summaries = in_parallel(&tasks, |&(p, o, i)| self.run(&policies[p], o, i)).into_iter();
        (0..policies.len())
            .map(|_| {
                let figures = self.figures_of(summaries.by_ref().take(per_policy).collect())?;
                let score = Score::of_figures(&figures, bounds);
                Some((figures, score))
            })
            .collect()
    }

    /// The figures of one policy's runs, outage by outage and seed by seed
    /// within each (as [`run`](Self::run) numbers them); `None` if any is.
    pub(super) fn figures_of(&self, runs: Vec<Option<Summary>>) -> Option<Vec<Figures>> {
        let runs: Vec<Summary> = runs.into_iter().collect::<Option<_>>()?;
        let seeds = (runs.len() / self.outages.len().max(1)).max(1);
        let by_outage: Vec<Vec<Summary>> = runs.chunks(seeds).map(<[Summary]>::to_vec).collect();
        Some(self.means(&by_outage))
    }
}

/// `work` on each of `items`, on every core, in the items' order.
pub fn in_parallel<T: Sync, R: Send>(items: &[T], work: impl Fn(&T) -> R + Sync) -> Vec<R> {
    let next = AtomicUsize::new(0);
    let out: Mutex<Vec<Option<R>>> = Mutex::new(items.iter().map(|_| None).collect());
    let workers = std::thread::available_parallelism().map_or(1, |n| n.get());
    std::thread::scope(|scope| {
        for _ in 0..workers.min(items.len()) {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, AtomicOrdering::Relaxed);
                let Some(item) = items.get(i) else { break };
                let done = work(item);
                out.lock().expect("no worker panics holding it")[i] = Some(done);
            });
        }
    });
    out.into_inner()
        .expect("no worker panics holding it")
        .into_iter()
        .map(|r| r.expect("every item is worked on"))
        .collect()
}

fn means(summaries: &[Summary], outage: Duration, clients: u32) -> Figures {
    let n = summaries.len().max(1) as f64;
    let p99s: Option<Vec<f64>> = summaries.iter().map(|s| s.p99_seconds).collect();
    let p99_seconds = p99s.as_ref().map(|p| p.iter().sum::<f64>() / n);
    let p99_spread_seconds = p99s
        .as_ref()
        .zip(p99_seconds)
        .filter(|(p, _)| p.len() > 1)
        .map(|(p, mean)| {
            let squares: f64 = p.iter().map(|x| (x - mean).powi(2)).sum();
            (squares / (p.len() - 1) as f64).sqrt()
        });
    Figures {
        outage_seconds: outage.as_secs_f64(),
        wasted: summaries.iter().map(|s| s.wasted as f64).sum::<f64>() / n,
        p99_seconds,
        p99_spread_seconds,
        gave_up: summaries
            .iter()
            .map(|s| f64::from(s.gave_up + s.unfinished) / f64::from(clients.max(1)))
            .sum::<f64>()
            / n,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn figures(wasted: f64, p99: Option<f64>, gave_up: f64) -> Figures {
        Figures {
            outage_seconds: 10.0,
            wasted,
            p99_seconds: p99,
            p99_spread_seconds: None,
            gave_up,
        }
    }

    fn bounds(p99: Option<f64>) -> Bounds {
        Bounds {
            max_p99_seconds: vec![p99],
            max_gave_up: 0.01,
        }
    }

    #[test]
    fn within_bounds_less_waste_wins_and_outside_them_any_within_wins() {
        let b = bounds(Some(19.0));
        let lean = Score::of_figures(&[figures(2_000.0, Some(18.0), 0.0)], &b);
        let wasteful = Score::of_figures(&[figures(8_000.0, Some(18.0), 0.0)], &b);
        let slow = Score::of_figures(&[figures(500.0, Some(20.0), 0.0)], &b);
        let quitter = Score::of_figures(&[figures(500.0, Some(10.0), 0.5)], &b);
        assert!(lean.feasible() && wasteful.feasible());
        assert!(!slow.feasible() && !quitter.feasible());
        assert_eq!(lean.rank(&wasteful), Ordering::Less);
        assert_eq!(wasteful.rank(&slow), Ordering::Less);
        assert_eq!(wasteful.rank(&quitter), Ordering::Less);
    }

    #[test]
    fn no_p99_breaks_a_p99_bound_but_not_an_absent_one() {
        assert!(!Score::of_figures(&[figures(0.0, None, 0.0)], &bounds(Some(19.0))).feasible());
        assert!(Score::of_figures(&[figures(0.0, None, 0.0)], &bounds(None)).feasible());
    }

    #[test]
    fn waste_is_a_geometric_mean_so_a_short_outage_counts_as_much_as_a_long_one() {
        let b = Bounds {
            max_p99_seconds: vec![None, None],
            max_gave_up: 1.0,
        };
        let halved_short = Score::of_figures(&[figures(500.0, None, 0.0), figures(10_000.0, None, 0.0)], &b);
        let halved_long = Score::of_figures(&[figures(1_000.0, None, 0.0), figures(5_000.0, None, 0.0)], &b);
        assert!((halved_short.waste / halved_long.waste - 1.0).abs() < 0.001);
    }
}
