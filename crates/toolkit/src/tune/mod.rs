//! `stormguard tune`: searches retry policies with the herd simulator for
//! the one that wastes the fewest requests over a family of outages, while
//! its callers are served no later (p99) and give up no more often than the
//! bounds say.
//!
//! The search runs in three steps, every candidate on the same seeds
//! (common random numbers), so that two candidates differ by their
//! settings and not by their luck:
//! 1. a coarse grid of backoff shapes ([`space::grid`]), each run on the
//!    first seed of the family's middle outage, and the best dozen of those
//!    on the first seed of every outage;
//! 2. the best few of those, and the current policy's own settings, run
//!    on every seed;
//! 3. from each of those, a local search that moves one setting a rung at
//!    a time ([`space::neighbours`]) while a move improves the score. Each
//!    round races the moves: all run on the first seed, and only those that
//!    rank better than the incumbent there, or are nearly as far within the
//!    bounds with less waste, run on every seed (most moves of a round are
//!    clearly worse, and a run of a herd of thousands is what a tune spends
//!    its time on).
//!
//! The search holds candidates to half the stated share of give-ups, so
//! that what it recommends keeps the bound on other seeds too. Then, among
//! the candidates within [`NEAR`] of the best's waste, it prefers the first
//! whose bounds also hold on the fleets around the stated one
//! ([`neighbours`]), and reports how the recommendation does on each.

pub mod neighbours;
pub mod output;
mod score;
mod space;
#[cfg(test)]
mod tests;

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use stormguard_core::policy::RetryPolicy;

pub use neighbours::OnNeighbour;
pub use output::{json, svg, text};
pub use score::{Bounds, Family, Figures, Score};
pub use space::Knobs;

use crate::sim::{Named, Scenario};

/// Grid candidates run on every seed after the coarse pass.
const FINALISTS: usize = 4;
/// Grid candidates kept, on the family's middle outage, to be run on all of them.
const SCREENED: usize = 3 * FINALISTS;
/// Rounds of the local search at most (it stops earlier when no move helps).
const MAX_ROUNDS: usize = 30;
/// The share of the stated give-up bound the search holds candidates to:
/// a bound met at its edge on five seeds is broken on the sixth.
pub const GAVE_UP_MARGIN: f64 = 0.5;
/// How much more waste than the best a candidate may have and still be
/// preferred for holding its bounds on the neighbouring fleets.
pub const NEAR: f64 = 0.10;
/// Candidates tried on the neighbouring fleets at most, the best first.
const MAX_ALTERNATIVES: usize = 4;
/// How much further outside the bounds than the incumbent a move may be on
/// the first seed and still be run on every seed: one seed's share of
/// give-ups is noisy near the bound (0.6 % on one seed, 0.4 % on five).
const RACE_VIOLATION_SLACK: f64 = 0.02;

/// What to tune, and against what.
#[derive(Debug, Clone)]
pub struct Request {
    /// Where the current policy comes from, for the report: a service of a
    /// policy file, or `None` for the simulator's full-jitter herd.
    pub service: Option<(String, String)>,
    /// The policy to improve on.
    pub current: RetryPolicy,
    /// The herd, its fleet, spread and the first seed; each outage of
    /// `outages` replaces its outage in turn.
    pub scenario: Scenario,
    /// The outage family.
    pub outages: Vec<Duration>,
    /// Seeds per outage.
    pub seeds: u32,
    /// Where the seeds the result is reported on begin, and how many: a
    /// set the search never ran, so that its figures are not the luck of
    /// the seeds it chose by (a candidate picked as the best of hundreds
    /// on five seeds is, on those five, better than it is).
    pub fresh: (u64, u32),
    /// The most p99 time to success on every outage; `None`: the current
    /// policy's on each, or full jitter's (100ms × 2^attempt, capped at
    /// 10s, retried until served) where the current one serves fewer than
    /// it should.
    pub max_p99: Option<Duration>,
    /// The largest share of clients that may give up, in [0, 1].
    pub max_gave_up: f64,
    /// Whether the send gate may be recommended.
    pub gate: bool,
}

/// A policy and how it fares.
#[derive(Debug, Clone)]
pub struct Candidate {
    /// The searched settings.
    pub knobs: Knobs,
    /// The whole policy.
    pub policy: RetryPolicy,
    /// Per outage of the family.
    pub figures: Vec<Figures>,
    /// Its rank.
    pub score: Score,
    /// How it does on the fleets around the stated one.
    pub neighbours: Vec<OnNeighbour>,
}

/// What the search found.
#[derive(Debug, Clone)]
pub struct Tuning {
    /// What was asked.
    pub request: Request,
    /// The bounds asked for; the search held candidates to
    /// [`GAVE_UP_MARGIN`] of its give-ups.
    pub bounds: Bounds,
    /// The current policy.
    pub current: Candidate,
    /// The best policy found (the current one if nothing beat it).
    pub recommended: Candidate,
    /// The best found without the send gate, when the recommendation turns
    /// the gate on: it needs the client library's gate, which not every
    /// caller has.
    pub without_gate: Option<Candidate>,
    /// Distinct policies tried, on one outage and seed or more.
    pub searched: usize,
    /// The current policy, the recommendation and the one without the
    /// gate on the fresh seeds.
    pub fresh: Fresh,
}

/// Figures on seeds the search never ran: what to expect of a policy.
#[derive(Debug, Clone)]
pub struct Fresh {
    /// The first seed.
    pub seed: u64,
    /// How many.
    pub seeds: u32,
    /// Per outage, of the current policy.
    pub current: Vec<Figures>,
    /// Per outage, of the recommendation.
    pub recommended: Vec<Figures>,
    /// Per outage, of the best without the gate, if there is one.
    pub without_gate: Option<Vec<Figures>>,
}

/// The largest herd `tune` searches for: every candidate runs it many times.
pub const MAX_CLIENTS: u32 = 100_000;

/// How far a search has got, for a display of its progress.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Progress {
    /// What it is doing.
    pub stage: Stage,
    /// Distinct policies run so far, on one outage and seed or more.
    pub searched: usize,
    /// Policies in the coarse grid.
    pub grid: usize,
}

/// A step of the search.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// The coarse grid and its best, on every seed.
    Grid,
    /// The local search from the best of the grid.
    Climb,
    /// The same without the send gate.
    WithoutGate,
    /// The recommendation on the fleets around the stated one.
    Fleets,
    /// The current policy and the recommendation on fresh seeds.
    Fresh,
}

impl std::fmt::Display for Stage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Stage::Grid => "the coarse grid",
            Stage::Climb => "one setting at a time from the best",
            Stage::WithoutGate => "the same without the send gate",
            Stage::Fleets => "the recommendation on the fleets around the stated one",
            Stage::Fresh => "the current policy and the recommendation on fresh seeds",
        })
    }
}

/// Why a request cannot be tuned.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TuneError {
    /// The herd is larger than the search runs.
    #[error("--clients: tune searches herds of at most {MAX_CLIENTS} calls, found {0}")]
    TooManyClients(u32),
    /// A server that takes nothing.
    #[error("--capacity: a server that takes nothing leaves nothing to tune; give 1 or more")]
    NoCapacity,
    /// The policy to tune does not run.
    #[error("the current policy is invalid; nothing was tuned")]
    InvalidCurrent,
    /// A set of seeds runs past the last seed there is.
    #[error(
        "{flag}: {count} seeds from {first} run past the last seed, {}; start them lower",
        u64::MAX
    )]
    SeedsPastTheLast {
        /// The flag that gave the first seed.
        flag: &'static str,
        /// The first seed.
        first: u64,
        /// How many.
        count: u32,
    },
    /// The fresh seeds share some with the search's.
    #[error(
        "--fresh-seed: the fresh seeds {fresh_from}-{fresh_to} overlap the searched ones \
         {searched_from}-{searched_to} (--seed, --seeds): start them past {searched_to}"
    )]
    FreshSeedsOverlap {
        /// The search's first seed.
        searched_from: u64,
        /// Its last.
        searched_to: u64,
        /// The first fresh seed.
        fresh_from: u64,
        /// The last.
        fresh_to: u64,
    },
}

/// Runs the search, telling `progress` how far it has got after each batch
/// of runs; an error names what is wrong with the request.
pub fn tune(request: &Request, progress: &dyn Fn(Progress)) -> Result<Tuning, TuneError> {
    let scenario = &request.scenario;
    if scenario.clients > MAX_CLIENTS {
        return Err(TuneError::TooManyClients(scenario.clients));
    }
    if scenario.capacity == 0 {
        return Err(TuneError::NoCapacity);
    }
    fresh_apart(request)?;
    let family = Family {
        scenario: request.scenario.clone(),
        outages: request.outages.clone(),
        seeds: request.seeds,
    };
    let current_figures = family
        .figures(&request.current, request.seeds)
        .ok_or(TuneError::InvalidCurrent)?;
    let reference = || family.figures(&Named::FullJitter.policy(), request.seeds);
    let bounds = Family::bounds(&current_figures, reference, request.max_p99, request.max_gave_up);
    let with_margin = Bounds {
        max_gave_up: bounds.max_gave_up * GAVE_UP_MARGIN,
        ..bounds.clone()
    };
    let mut search = Search {
        family: &family,
        base: &request.current,
        bounds: &with_margin,
        seen: HashMap::new(),
        raced: HashMap::new(),
        tried: HashSet::new(),
        progress,
        stage: Stage::Grid,
        grid: 0,
    };
    let around = neighbours::around(&family, &request.current, request.max_p99, request.max_gave_up);
    let current = Candidate {
        knobs: Knobs::of(&request.current),
        policy: request.current.clone(),
        score: score::Score::of_figures(&current_figures, &with_margin),
        figures: current_figures,
        neighbours: around.iter().map(neighbours::Neighbour::current).collect(),
    };
    let starts = search.starts();
    search.stage = Stage::Climb;
    let best = search.climb_all(&starts, request.gate);
    let without_gate = match (best.knobs.gate, current.knobs.gate) {
        (true, false) => {
            search.stage = Stage::WithoutGate;
            let plain: Vec<Candidate> = starts.into_iter().filter(|c| !c.knobs.gate).collect();
            Some(search.climb_all(&plain, false))
        }
        _ => None,
    };
    search.stage = Stage::Fleets;
    search.report();
    let recommended = search.holding(better(best, &current), &current, &around, |_| true);
    let without_gate =
        without_gate.map(|c| search.holding(better(c, &current), &current, &around, |k| !k.gate));
    let searched = search.tried.len();
    search.stage = Stage::Fresh;
    search.report();
    let fresh = Fresh::of(request, &current, &recommended, without_gate.as_ref());
    Ok(Tuning {
        request: request.clone(),
        bounds,
        searched,
        current,
        recommended,
        without_gate,
        fresh,
    })
}

/// Refuses seed sets that run past the last seed there is, and fresh seeds
/// that share any with the search's.
fn fresh_apart(request: &Request) -> Result<(), TuneError> {
    let last = |flag: &'static str, first: u64, count: u32| {
        first
            .checked_add(u64::from(count.max(1)) - 1)
            .ok_or(TuneError::SeedsPastTheLast { flag, first, count })
    };
    let (searched_from, fresh_from) = (request.scenario.seed, request.fresh.0);
    let searched_to = last("--seed", searched_from, request.seeds)?;
    let fresh_to = last("--fresh-seed", fresh_from, request.fresh.1)?;
    if fresh_from <= searched_to && searched_from <= fresh_to {
        return Err(TuneError::FreshSeedsOverlap {
            searched_from,
            searched_to,
            fresh_from,
            fresh_to,
        });
    }
    Ok(())
}

impl Fresh {
    /// `current`, `recommended` and `without_gate` run on `request`'s fresh seeds.
    fn of(
        request: &Request,
        current: &Candidate,
        recommended: &Candidate,
        without_gate: Option<&Candidate>,
    ) -> Self {
        let (seed, seeds) = request.fresh;
        let family = Family {
            scenario: Scenario {
                seed,
                ..request.scenario.clone()
            },
            outages: request.outages.clone(),
            seeds,
        };
        // Each ran on the search's seeds, so each runs on these.
        let figures = |c: &Candidate| family.figures(&c.policy, seeds).unwrap_or_default();
        Self {
            seed,
            seeds,
            current: figures(current),
            recommended: figures(recommended),
            without_gate: without_gate.map(figures),
        }
    }
}

impl Tuning {
    /// Whether `c` keeps the bounds asked for on every outage (the search
    /// held candidates to tighter ones, with a margin on give-ups).
    pub fn keeps_bounds(&self, c: &Candidate) -> bool {
        Score::of_figures(&c.figures, &self.bounds).feasible()
    }
}

/// Better first; the knobs break ties, so that a search's result does not
/// depend on the order candidates were run in.
fn ranking(a: &Candidate, b: &Candidate) -> std::cmp::Ordering {
    a.score.rank(&b.score).then(a.knobs.key().cmp(&b.knobs.key()))
}

/// `found`, unless the current policy ranks at least as well.
fn better(found: Candidate, current: &Candidate) -> Candidate {
    if found.score.rank(&current.score).is_lt() {
        found
    } else {
        current.clone()
    }
}

struct Search<'a> {
    family: &'a Family,
    base: &'a RetryPolicy,
    bounds: &'a Bounds,
    /// Every candidate run on every seed, by its knobs.
    seen: HashMap<[u64; 8], Option<Candidate>>,
    /// Every move raced on the first seed, by its knobs, with its score there.
    raced: HashMap<[u64; 8], Option<Score>>,
    /// Every policy run, on one outage and seed or more, by its knobs.
    tried: HashSet<[u64; 8]>,
    progress: &'a dyn Fn(Progress),
    stage: Stage,
    /// Policies in the coarse grid.
    grid: usize,
}

impl Search<'_> {
    /// Tells the progress display how far the search has got.
    fn report(&self) {
        (self.progress)(Progress {
            stage: self.stage,
            searched: self.tried.len(),
            grid: self.grid,
        });
    }

    /// `found`, or the first in rank of the candidates near it in waste
    /// (`allowed`, better than `current`) whose bounds hold on every fleet
    /// `around` the stated one, with how it does on each.
    fn holding(
        &self,
        found: Candidate,
        current: &Candidate,
        around: &[neighbours::Neighbour],
        allowed: impl Fn(&Knobs) -> bool,
    ) -> Candidate {
        if found.knobs == current.knobs && found.policy == current.policy {
            return current.clone();
        }
        let mut near: Vec<&Candidate> = self
            .seen
            .values()
            .flatten()
            .filter(|c| c.knobs != found.knobs && allowed(&c.knobs))
            .filter(|c| c.score.feasible() && c.score.rank(&current.score).is_lt())
            .filter(|c| c.score.waste <= found.score.waste * (1.0 + NEAR))
            .collect();
        near.sort_by(|a, b| ranking(a, b));
        let mut tried = Vec::new();
        for candidate in std::iter::once(&found).chain(near.into_iter().take(MAX_ALTERNATIVES - 1)) {
            let on = neighbours::judge(around, &candidate.policy);
            if neighbours::hold_everywhere(&on) {
                return Candidate {
                    neighbours: on,
                    ..candidate.clone()
                };
            }
            tried.push(on);
        }
        Candidate {
            neighbours: tried.swap_remove(0),
            ..found
        }
    }

    /// Steps 1 and 2: the grid on one seed, then its best and the current
    /// settings on all seeds: the starting points of the local search.
    fn starts(&mut self) -> Vec<Candidate> {
        let current = Knobs::of(self.base);
        let grid = self.screen(space::grid(&current));
        self.quick(&grid);
        let mut ranked: Vec<(Knobs, Score)> = grid
            .iter()
            .filter_map(|k| self.raced[&k.key()].map(|score| (*k, score)))
            .collect();
        ranked.sort_by(|a, b| a.1.rank(&b.1).then(a.0.key().cmp(&b.0.key())));
        let mut finalists: Vec<Knobs> = ranked.iter().take(FINALISTS).map(|(k, _)| *k).collect();
        finalists.push(current);
        self.run(&finalists);
        finalists
            .iter()
            .filter_map(|k| self.seen.get(&k.key()).cloned().flatten())
            .collect()
    }

    /// Step 3 from each of `starts`; the best found.
    fn climb_all(&mut self, starts: &[Candidate], gate: bool) -> Candidate {
        let climbed: Vec<Candidate> = starts.iter().map(|s| self.climb(s.clone(), gate)).collect();
        climbed
            .into_iter()
            .min_by(ranking)
            .expect("the current settings are valid, as the current policy is")
    }

    /// Step 3 from `from`: moves to the best neighbour while it ranks better.
    fn climb(&mut self, mut from: Candidate, gate: bool) -> Candidate {
        for _ in 0..MAX_ROUNDS {
            let around = self.race(&space::neighbours(&from.knobs, gate), &from.knobs);
            self.run(&around);
            let best = around
                .iter()
                .filter_map(|k| self.seen.get(&k.key()).cloned().flatten())
                .min_by(ranking);
            match best {
                Some(next) if next.score.rank(&from.score).is_lt() => from = next,
                _ => break,
            }
        }
        from
    }

    /// Those of `moves` worth running on every seed: each, and `incumbent`,
    /// runs on the first seed (once: a move raced out stays out against the
    /// same or a better incumbent), and a move is kept if it ranks better
    /// there, or keeps the bounds nearly as well with less waste.
    fn race(&mut self, moves: &[Knobs], incumbent: &Knobs) -> Vec<Knobs> {
        self.quick(&[moves, std::slice::from_ref(incumbent)].concat());
        let bar = self.raced[&incumbent.key()];
        let promising = |score: &Option<Score>| match (score, bar) {
            (None, _) => false,
            (Some(_), None) => true,
            (Some(s), Some(bar)) => {
                s.rank(&bar).is_lt()
                    || (s.violation <= bar.violation + RACE_VIOLATION_SLACK && s.waste < bar.waste)
            }
        };
        moves
            .iter()
            .filter(|k| self.seen.contains_key(&k.key()) || promising(&self.raced[&k.key()]))
            .copied()
            .collect()
    }

    /// Runs on the first seed, on every outage, those of `knobs` not run so yet.
    fn quick(&mut self, knobs: &[Knobs]) {
        let mut fresh: Vec<Knobs> = Vec::new();
        for k in knobs {
            if !self.raced.contains_key(&k.key()) && !fresh.iter().any(|f| f.key() == k.key()) {
                fresh.push(*k);
            }
        }
        let policies: Vec<RetryPolicy> = fresh.iter().map(|k| k.apply(self.base)).collect();
        let scored = self.family.score_all(&policies, 1, self.bounds);
        self.tried.extend(fresh.iter().map(Knobs::key));
        for (knobs, scored) in fresh.iter().zip(scored) {
            self.raced.insert(knobs.key(), scored.map(|(_, score)| score));
        }
        self.report();
    }

    /// The best [`SCREENED`] of `grid` on the family's middle outage, first
    /// seed: a grid of hundreds is not worth every outage of the family.
    fn screen(&mut self, grid: Vec<Knobs>) -> Vec<Knobs> {
        self.grid = grid.len();
        self.report();
        let outages = &self.family.outages;
        if outages.len() < 2 {
            return grid;
        }
        let mut by_length: Vec<usize> = (0..outages.len()).collect();
        by_length.sort_by_key(|&i| outages[i]);
        let middle = by_length[outages.len() / 2];
        let one = Family {
            outages: vec![outages[middle]],
            ..self.family.clone()
        };
        let bounds = Bounds {
            max_p99_seconds: vec![self.bounds.max_p99_seconds[middle]],
            ..self.bounds.clone()
        };
        let policies: Vec<RetryPolicy> = grid.iter().map(|k| k.apply(self.base)).collect();
        let scored = one.score_all(&policies, 1, &bounds);
        self.tried.extend(grid.iter().map(Knobs::key));
        let mut ranked: Vec<(Knobs, Score)> = grid
            .into_iter()
            .zip(scored)
            .filter_map(|(k, scored)| scored.map(|(_, score)| (k, score)))
            .collect();
        ranked.sort_by(|a, b| a.1.rank(&b.1).then(a.0.key().cmp(&b.0.key())));
        self.report();
        ranked.into_iter().take(SCREENED).map(|(k, _)| k).collect()
    }

    /// Runs on every seed those of `knobs` not run yet.
    fn run(&mut self, knobs: &[Knobs]) {
        let mut fresh: Vec<Knobs> = Vec::new();
        for k in knobs {
            if !self.seen.contains_key(&k.key()) && !fresh.iter().any(|f| f.key() == k.key()) {
                fresh.push(*k);
            }
        }
        let policies: Vec<RetryPolicy> = fresh.iter().map(|k| k.apply(self.base)).collect();
        let scored = self.family.score_all(&policies, self.family.seeds, self.bounds);
        self.tried.extend(fresh.iter().map(Knobs::key));
        for ((knobs, policy), scored) in fresh.into_iter().zip(policies).zip(scored) {
            let candidate = scored.map(|(figures, score)| Candidate {
                knobs,
                policy,
                figures,
                score,
                neighbours: Vec::new(),
            });
            self.seen.insert(knobs.key(), candidate);
        }
        self.report();
    }
}
