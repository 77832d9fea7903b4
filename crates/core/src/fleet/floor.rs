//! A fleet-scoped retry budget's floor, divided among the processes that
//! call a dependency in proportion to their requests. A budget's ratio is
//! already fleet-wide (20 % of each process's requests adds up to 20 % of
//! the fleet's); its floor is not (10 retries a second in each of 200
//! processes is 2,000 a second, whatever the traffic). Dividing the floor
//! makes the parts add up to the fleet's.
//!
//! The daemon keeps a [`Division`] per dependency, fed by reports: each
//! report's first tries over the time they cover (as the sender says, or
//! else the time since the process's previous report) is its request rate,
//! its *claim*. A process's [`Part`] is the floor
//! times its claim over every claim. Replicas that share a store add the
//! other replicas' [`Claims`] to the sum, so the parts they hand out add
//! up to one floor; without a store each replica divides a whole floor
//! among the processes it hears from.
//!
//! A claim is bounded: a rate above [`MAX_CLAIM`] times the median
//! process's counts as that much, so one process reporting more than it
//! sends takes a bounded part, not the others' floors.
//!
//! A part is answered as soon as a process reports, from the claims known
//! then: while a fleet joins (the daemon or the fleet just started), the
//! k-th process heard from gets about `floor ÷ k`, so the parts add up to
//! about `floor × ln n` for that first interval (6 floors for 200
//! processes, against 200 before any answer). Waiting for a full interval
//! of reports would leave every process the whole floor meanwhile.
//!
//! A process applies its part through a [`LocalFloor`], which also says
//! what to retry by while the daemon cannot be reached.

use std::collections::HashMap;
use std::hash::Hash;
use std::time::Duration;

use tokio::time::Instant;

/// The most a process's request rate counts for, as a multiple of the
/// median process's: a fleet's processes share its traffic within a few
/// times of each other behind a load balancer.
pub const MAX_CLAIM: f64 = 4.0;
/// Processes a division keeps claims for, at most; one more is answered an
/// equal part without being kept.
pub const MAX_PROCESSES: usize = 10_000;
/// The span a process's first report is taken to cover when it does not
/// say: clients with a fleet-scoped budget send their first report a second
/// after they start (and say what it covers).
pub const FIRST_SPAN: Duration = Duration::from_secs(1);
/// A claim is dropped once its process has been silent for three of its
/// report intervals, and never sooner than this.
pub const KEPT_AT_LEAST: Duration = Duration::from_secs(30);
/// How often the median, the sum of claims and the expired claims are
/// recomputed at most, unless a process joins: it is a pass over every claim.
const REFRESH: Duration = Duration::from_secs(1);

/// Each process's part of `floor` retries a second, from the requests each
/// made in the same interval, in their order. With no requests anywhere,
/// equal parts; the parts add up to `floor`.
pub fn divide(floor: f64, requests: &[u64]) -> Vec<f64> {
    let rates: Vec<f64> = requests.iter().map(|&r| r as f64).collect();
    let Some(cap) = cap(&rates) else {
        return Vec::new();
    };
    let counted: Vec<f64> = rates.iter().map(|&r| r.min(cap)).collect();
    let total: f64 = counted.iter().sum();
    counted
        .iter()
        .map(|&c| share(floor, c, total, rates.len() as u64))
        .collect()
}

/// The most a claim counts for among `rates`: [`MAX_CLAIM`] times their median.
fn cap(rates: &[f64]) -> Option<f64> {
    if rates.is_empty() {
        return None;
    }
    let mut sorted = rates.to_vec();
    let middle = sorted.len() / 2;
    let (_, median, _) = sorted.select_nth_unstable_by(middle, f64::total_cmp);
    Some(*median * MAX_CLAIM)
}

/// `floor × counted ÷ total`, or an equal part among `processes` when
/// nobody made a request.
fn share(floor: f64, counted: f64, total: f64, processes: u64) -> f64 {
    // A running sum of claims that all went to 0 may be left a rounding
    // error above it.
    if total > 1e-9 {
        floor * counted / total
    } else {
        floor / processes.max(1) as f64
    }
}

/// What a set of processes claims in all: what replicas tell each other
/// through the store they share.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Claims {
    /// Their request rates, each bounded by [`MAX_CLAIM`], summed: requests a second.
    pub requests_per_second: f64,
    /// How many processes.
    pub processes: u64,
}

impl std::ops::Add for Claims {
    type Output = Claims;

    fn add(self, other: Claims) -> Claims {
        Claims {
            requests_per_second: self.requests_per_second + other.requests_per_second,
            processes: self.processes.saturating_add(other.processes),
        }
    }
}

/// A process's part of the fleet's floor.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Part {
    /// Retries a second always allowed to this process.
    pub per_second: f64,
    /// Processes the floor is divided among, this one included: with the
    /// part, what lets a process fall back to an even part when the daemon
    /// cannot be reached.
    pub processes: u64,
}

/// One process's request rate, as its reports tell it.
#[derive(Debug, Clone, Copy)]
struct Claim {
    rate: f64,
    seen: Instant,
    span: Duration,
}

impl Claim {
    fn kept_until(&self) -> Instant {
        self.seen + (self.span * 3).max(KEPT_AT_LEAST)
    }
}

/// The sum and cap of the claims, as last recomputed.
#[derive(Debug, Clone, Copy)]
struct Summary {
    claims: Claims,
    cap: f64,
    at: Instant,
}

/// One dependency's floor, divided among the processes a daemon replica
/// hears from. Pure and time-injectable, so the simulator divides with this
/// very code.
#[derive(Debug, Clone)]
pub struct Division<K> {
    claims: HashMap<K, Claim>,
    summary: Option<Summary>,
}

impl<K> Default for Division<K> {
    fn default() -> Self {
        Self {
            claims: HashMap::new(),
            summary: None,
        }
    }
}

impl<K: Hash + Eq + Clone> Division<K> {
    /// An empty division.
    pub fn new() -> Self {
        Self::default()
    }

    /// `process` reported `first_tries` made over `span` (the time its
    /// counts cover, as the sender says) at `now`: its claim becomes their
    /// rate. Without a span, the time since its previous report, or
    /// [`FIRST_SPAN`] for its first. False when the division is full and
    /// the process is new: it is not kept.
    pub fn report(&mut self, process: &K, first_tries: u64, span: Option<Duration>, now: Instant) -> bool {
        let known = self
            .claims
            .get(process)
            .filter(|claim| now < claim.kept_until())
            .copied();
        let rate = |span: Duration| first_tries as f64 / span.max(Duration::from_millis(1)).as_secs_f64();
        let claim = match known {
            Some(previous) => {
                let span = span.unwrap_or_else(|| now.saturating_duration_since(previous.seen));
                let claim = Claim {
                    rate: rate(span),
                    seen: now,
                    span,
                };
                // Keeps the sum in step with the claims until the next refresh.
                if let Some(summary) = &mut self.summary {
                    let counted = |c: &Claim| c.rate.min(summary.cap);
                    summary.claims.requests_per_second += counted(&claim) - counted(&previous);
                }
                claim
            }
            None => {
                let fresh = !self.claims.contains_key(process);
                if fresh && self.claims.len() >= MAX_PROCESSES {
                    return false;
                }
                let span = span.unwrap_or(FIRST_SPAN);
                let claim = Claim {
                    rate: rate(span),
                    seen: now,
                    span,
                };
                // A joining process adds to the sum as it stands (its cap a
                // second stale at most): a whole fleet joining costs a pass
                // over the claims per second, not one per process.
                match &mut self.summary {
                    Some(summary) if fresh && summary.claims.processes > 0 => {
                        summary.claims.requests_per_second += claim.rate.min(summary.cap);
                        summary.claims.processes += 1;
                    }
                    _ => self.summary = None,
                }
                claim
            }
        };
        self.claims.insert(process.clone(), claim);
        true
    }

    /// What this replica's processes claim in all at `now`.
    pub fn claims(&mut self, now: Instant) -> Claims {
        self.summary(now).claims
    }

    /// `process`'s part of `floor` retries a second at `now`, the other
    /// replicas' processes claiming `others`. A process not kept gets an
    /// equal part.
    pub fn part(&mut self, process: &K, floor: f64, others: Claims, now: Instant) -> Part {
        let summary = self.summary(now);
        let all = summary.claims + others;
        let Some(claim) = self.claims.get(process) else {
            let processes = all.processes.saturating_add(1);
            return Part {
                per_second: floor / processes as f64,
                processes,
            };
        };
        Part {
            per_second: share(
                floor,
                claim.rate.min(summary.cap),
                all.requests_per_second,
                all.processes,
            ),
            processes: all.processes,
        }
    }

    /// Whether no process's claim is kept.
    pub fn is_empty(&self) -> bool {
        self.claims.is_empty()
    }

    fn summary(&mut self, now: Instant) -> Summary {
        match self.summary {
            Some(summary) if now.saturating_duration_since(summary.at) < REFRESH => summary,
            _ => {
                self.claims.retain(|_, claim| now < claim.kept_until());
                let rates: Vec<f64> = self.claims.values().map(|c| c.rate).collect();
                let cap = cap(&rates).unwrap_or(0.0);
                let summary = Summary {
                    claims: Claims {
                        requests_per_second: rates.iter().map(|r| r.min(cap)).sum(),
                        processes: rates.len() as u64,
                    },
                    cap,
                    at: now,
                };
                self.summary = Some(summary);
                summary
            }
        }
    }
}

/// A process's floor under a fleet-scoped budget: the part the daemon last
/// gave it, or, while the daemon cannot be reached, the configured floor
/// divided by the fleet size it last heard (the whole floor if it never
/// heard one). Never more than the configured floor, whatever a daemon says.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LocalFloor {
    configured: f64,
    processes: Option<u64>,
}

impl LocalFloor {
    /// The floor of a budget whose `minRetriesPerSecond` is `configured`.
    pub fn new(configured: f64) -> Self {
        Self {
            configured: configured.max(0.0),
            processes: None,
        }
    }

    /// The floor before the daemon has answered: the whole configured one,
    /// as a process-scoped budget's.
    pub fn initial(&self) -> f64 {
        self.configured
    }

    /// The daemon gave `part`: the floor to apply.
    pub fn answered(&mut self, part: Part) -> f64 {
        self.processes = Some(part.processes.max(1));
        if part.per_second.is_nan() {
            return self.unreachable();
        }
        part.per_second.clamp(0.0, self.configured)
    }

    /// A report could not be delivered: the floor to apply until the daemon answers again.
    pub fn unreachable(&self) -> f64 {
        self.configured / self.processes.unwrap_or(1) as f64
    }
}

#[cfg(test)]
mod tests;
