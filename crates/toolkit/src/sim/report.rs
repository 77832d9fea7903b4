//! What a run means: wasted requests, p99 time to success and the rest,
//! as JSON (keys scripts can rely on) and as text.

use std::time::Duration;

use serde::Serialize;

use super::collapse::Collapse;
use stormguard_core::policy::Criticality;

use super::engine::{ClassOutcome, Run};
use super::errors_scenario::Errors;
use super::scenario::{Backends, Fleet};

/// The figures of one run, as `--json` prints them.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Summary {
    /// The strategy's label.
    pub strategy: String,
    /// The scenario: `herd`, `collapse` or `errors`.
    pub scenario: &'static str,
    /// The collapse scenario's settings; `None` otherwise.
    pub collapse: Option<Collapse>,
    /// The errors scenario's settings; `None` otherwise.
    pub errors: Option<Errors>,
    /// Clients in the scenario (in the collapse and errors scenarios: the
    /// calls that arrived).
    pub clients: u32,
    /// The server's capacity per second; `None` in a collapse, whose server
    /// slows with its load instead, and in the errors scenario, whose never
    /// runs out unless it is limited.
    pub capacity: Option<u32>,
    /// The outage, in seconds.
    pub outage_seconds: f64,
    /// The share of requests the server failed at random, whatever its
    /// load (the errors scenario's error rate, or the mixed world's).
    pub random_failures: f64,
    /// The HTTP status those failures were answered with.
    pub random_failure_status: u16,
    /// The backends behind the server's balancer and how many were down;
    /// `None` for one server.
    pub backends: Option<Backends>,
    /// The seed of the run.
    pub seed: u64,
    /// The fleet the clients came from.
    #[serde(flatten)]
    pub fleet: Fleet,
    /// Requests that reached the server.
    pub total_requests: u64,
    /// Requests it accepted.
    pub accepted: u64,
    /// Attempts per first try: requests that reached the server ÷ clients.
    pub amplification: f64,
    /// Retries (requests beyond the first tries) per second: over the
    /// arrivals' length in an open-loop scenario, else until the last
    /// client finished.
    pub retries_per_second: f64,
    /// Requests it rejected: retries that did nothing but add load.
    pub wasted: u64,
    /// Of those, rejected because the outage was still on.
    pub wasted_during_outage: u64,
    /// Of those, rejected after the outage, for lack of capacity.
    pub wasted_after_outage: u64,
    /// Requests beyond capacity, summed over the seconds after the outage.
    pub over_capacity: u64,
    /// Largest requests − capacity in one second after the outage.
    pub peak_overshoot: u64,
    /// Most requests in one second after the outage.
    pub peak_requests_per_second_after_outage: u64,
    /// Seconds from the end of the outage (the first whole second after
    /// it) to the first second with requests and none of them refused: how
    /// long the herd took to settle, counted as the published thundering-herd
    /// simulation counts it (exponential backoff: 42).
    pub time_to_stable_seconds: Option<u64>,
    /// Median time from a client's first attempt to its success.
    pub p50_seconds: Option<f64>,
    /// 99th percentile of the same (index ⌊0.99 n⌋ of the sorted times).
    pub p99_seconds: Option<f64>,
    /// Longest of the same.
    pub max_seconds: Option<f64>,
    /// When the last client succeeded, from t = 0.
    pub last_success_seconds: Option<f64>,
    /// When the last client finished, served or not, from t = 0.
    pub drain_seconds: f64,
    /// Clients served.
    pub succeeded: u32,
    /// Clients served, as a share of the clients (of the calls that arrived,
    /// in an open-loop scenario): what a script compares with and without a
    /// gate.
    pub served_share: f64,
    /// Clients that gave up.
    pub gave_up: u32,
    /// Of those: out of retries, refused by the budget, by the breaker, past maxElapsed.
    pub gave_up_exhausted: u32,
    /// Refused a retry by the retry budget or throttling.
    pub gave_up_budget: u32,
    /// Refused an attempt by the circuit breaker.
    pub gave_up_circuit_open: u32,
    /// Past `maxElapsed`.
    pub gave_up_deadline: u32,
    /// Clients whose send gate had no turn for them before `maxElapsed`,
    /// or their class's `maxWait`, while they waited in line.
    pub gave_up_no_turn: u32,
    /// Clients whose send gate would have had no turn for them by then,
    /// at its pace: shed at once.
    pub gave_up_shed: u32,
    /// Clients served from the end of the outage until calls stopped
    /// arriving (the end of the run in a herd): what the dependency's
    /// capacity after the outage was used for.
    pub served_after_outage: u64,
    /// 99th percentile of the time to success of the calls that began a
    /// second or more after the outage: what callers meet once it is back.
    pub p99_after_recovery_seconds: Option<f64>,
    /// 99th percentile of the time calls that were shed, or refused by
    /// their breaker, before they sent anything took to fail: the fail-fast
    /// answers.
    pub fail_fast_p99_seconds: Option<f64>,
    /// What became of each class's calls, when some name a class.
    pub classes: Option<Vec<ClassSummary>>,
    /// Clients still retrying at the horizon.
    pub unfinished: u32,
    /// Half-open trials: the calls the processes' breakers let through, in
    /// all, to see whether the dependency was back.
    pub half_open_trials: u64,
    /// The most half-open trials sent within any one `openTimeout`: what a
    /// dependency coming back meets at once from the whole fleet. 0 without
    /// breakers.
    pub half_open_trials_per_window: u64,
    /// When the last of the breakers open at the end of the outage first
    /// closed after it, in seconds from the end of the outage; `None` if
    /// none was open then, or one never closed.
    pub breakers_closed_seconds: Option<f64>,
    /// Events the simulation processed.
    pub events: u64,
    /// Requests per second, index = second.
    pub requests_per_second: Vec<u64>,
    /// Accepted requests per second, index = second.
    pub accepted_per_second: Vec<u64>,
    /// Clients served per second (by when their call succeeded): the goodput.
    pub goodput_per_second: Vec<u64>,
}

impl Summary {
    /// The figures of `run`.
    pub fn of(run: &Run) -> Self {
        let total_requests: u64 = run.requests.iter().sum();
        let accepted: u64 = run.accepted.iter().sum();
        let limit = run.scenario.capacity_limit();
        let capacity = limit.map_or(u64::MAX, u64::from);
        let recovered =
            run.scenario.outage.as_secs() as usize + usize::from(run.scenario.outage.subsec_nanos() > 0);
        let after = || run.requests.iter().zip(&run.accepted).enumerate().skip(recovered);
        let over = |(_, (requests, _)): (usize, (&u64, &u64))| requests.saturating_sub(capacity);
        let times = &run.times_to_success;
        let at = |q: f64| times.get(((times.len() as f64 * q) as usize).min(times.len().saturating_sub(1)));
        Self {
            strategy: run.strategy.clone(),
            scenario: match (&run.scenario.collapse, &run.scenario.errors) {
                (Some(_), _) => "collapse",
                (None, Some(_)) => "errors",
                (None, None) => "herd",
            },
            collapse: run.scenario.collapse,
            errors: run.scenario.errors,
            clients: run.scenario.clients,
            capacity: limit,
            outage_seconds: run.scenario.outage.as_secs_f64(),
            random_failures: run.scenario.failure_share(),
            random_failure_status: run.scenario.random_failure_status,
            backends: run.scenario.backends,
            seed: run.scenario.seed,
            fleet: Fleet::of_run(&run.scenario, run.paced_by_fleet),
            total_requests,
            accepted,
            amplification: total_requests as f64 / f64::from(run.scenario.clients.max(1)),
            retries_per_second: total_requests.saturating_sub(u64::from(run.scenario.clients)) as f64
                / run_seconds(run),
            wasted: total_requests - accepted,
            wasted_during_outage: run.rejected_in_outage,
            wasted_after_outage: total_requests - accepted - run.rejected_in_outage,
            over_capacity: after().map(over).sum(),
            peak_overshoot: after().map(over).max().unwrap_or(0),
            peak_requests_per_second_after_outage: after().map(|(_, (r, _))| *r).max().unwrap_or(0),
            time_to_stable_seconds: after()
                .find(|(_, (requests, accepted))| **requests > 0 && requests == accepted)
                .map(|(second, _)| (second - recovered) as u64),
            p50_seconds: at(0.5).map(Duration::as_secs_f64),
            p99_seconds: at(0.99).map(Duration::as_secs_f64),
            max_seconds: times.last().map(Duration::as_secs_f64),
            last_success_seconds: (!times.is_empty()).then_some(run.last_success.as_secs_f64()),
            drain_seconds: run.drained.as_secs_f64(),
            succeeded: times.len() as u32,
            served_share: times.len() as f64 / f64::from(run.scenario.clients.max(1)),
            gave_up: run.gave_up.total(),
            gave_up_exhausted: run.gave_up.exhausted,
            gave_up_budget: run.gave_up.budget,
            gave_up_circuit_open: run.gave_up.circuit_open,
            gave_up_deadline: run.gave_up.deadline,
            gave_up_no_turn: run.gave_up.no_turn,
            gave_up_shed: run.gave_up.shed,
            served_after_outage: served_after_outage(run),
            p99_after_recovery_seconds: p99(&run.times_after_recovery),
            fail_fast_p99_seconds: p99(&run.times_to_fail_fast),
            classes: run.scenario.classes.any().then(|| {
                Criticality::ALL
                    .iter()
                    .zip(&run.classes)
                    .map(|(class, outcome)| ClassSummary::of(*class, outcome))
                    .collect()
            }),
            unfinished: run.unfinished,
            half_open_trials: run.trials.len() as u64,
            half_open_trials_per_window: run
                .open_timeout
                .map_or(0, |window| most_within(&run.trials, window)),
            breakers_closed_seconds: run
                .breakers_closed
                .map(|at| at.saturating_sub(run.scenario.outage).as_secs_f64()),
            events: run.events,
            requests_per_second: run.requests.clone(),
            accepted_per_second: run.accepted.clone(),
            goodput_per_second: run.served.clone(),
        }
    }
}

/// What became of one class's calls.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ClassSummary {
    /// The class.
    pub class: &'static str,
    /// Calls that began.
    pub calls: u32,
    /// Of those, served.
    pub served: u32,
    /// Served, as a share of the calls.
    pub served_share: f64,
    /// Shed by the send gate.
    pub shed: u32,
    /// 99th percentile of the served calls' time to success.
    pub p99_seconds: Option<f64>,
    /// Of the calls that began a second or more after the outage, the
    /// share served...
    pub served_share_after_recovery: f64,
    /// ...and the 99th percentile of their time to success.
    pub p99_after_recovery_seconds: Option<f64>,
}

impl ClassSummary {
    fn of(class: Criticality, outcome: &ClassOutcome) -> Self {
        Self {
            class: class.name(),
            calls: outcome.calls,
            served: outcome.served,
            served_share: f64::from(outcome.served) / f64::from(outcome.calls.max(1)),
            shed: outcome.shed,
            p99_seconds: p99(&outcome.times_to_success),
            served_share_after_recovery: f64::from(outcome.served_after_recovery)
                / f64::from(outcome.calls_after_recovery.max(1)),
            p99_after_recovery_seconds: p99(&outcome.times_after_recovery),
        }
    }
}

/// The 99th percentile of sorted `times` (index ⌊0.99 n⌋), in seconds.
fn p99(times: &[Duration]) -> Option<f64> {
    let index = ((times.len() as f64 * 0.99) as usize).min(times.len().checked_sub(1)?);
    Some(times[index].as_secs_f64())
}

/// Calls served from the second the outage ended until calls stopped
/// arriving, or the end of the run.
fn served_after_outage(run: &Run) -> u64 {
    let from = run.scenario.outage.as_secs_f64().ceil() as usize;
    let until = run.scenario.errors.map_or(run.served.len(), |errors| {
        errors.until.as_secs_f64().ceil() as usize
    });
    run.served.iter().take(until).skip(from).sum()
}

/// The most of the instants `times` (in order) within any span of `window`.
fn most_within(times: &[Duration], window: Duration) -> u64 {
    let mut first = 0;
    let mut most = 0;
    for (last, &at) in times.iter().enumerate() {
        while at.saturating_sub(times[first]) >= window {
            first += 1;
        }
        most = most.max(last + 1 - first);
    }
    most as u64
}

/// The seconds `retries_per_second` is over: the arrivals' length in an
/// open-loop scenario, else until the last client finished (at least one).
fn run_seconds(run: &Run) -> f64 {
    let arrivals = match (run.scenario.collapse, run.scenario.errors) {
        (Some(c), _) => Some(c.until),
        (None, Some(e)) => Some(e.until),
        (None, None) => None,
    };
    arrivals.map_or(run.drained, |until| until).as_secs_f64().max(1.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_most_within_a_window_counts_a_span_shorter_than_it() {
        let at = |s: &[u64]| s.iter().map(|&s| Duration::from_secs(s)).collect::<Vec<_>>();
        let window = Duration::from_secs(5);
        assert_eq!(most_within(&at(&[]), window), 0);
        assert_eq!(most_within(&at(&[0, 1, 2, 10, 11]), window), 3);
        assert_eq!(
            most_within(&at(&[0, 5, 10]), window),
            1,
            "5 s apart is two windows"
        );
        assert_eq!(most_within(&at(&[3, 3, 3, 7]), window), 4);
    }
}
