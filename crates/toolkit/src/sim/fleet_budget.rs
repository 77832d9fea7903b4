//! A fleet-scoped retry budget through the simulated daemon, with the
//! daemon's own division (`stormguard_core::fleet::floor::Division`): each
//! process reports the first tries it made a second after it starts, then
//! every [`REPORT_EVERY`]; the replica it reaches records the report and
//! answers its part at once, as the daemon does, and the process's budget
//! takes that part a feedback delay later. Until the first part arrives a
//! process has the whole floor, as a client that has not yet heard from
//! the daemon.
//!
//! Processes are dealt to replicas round-robin. With a pace store the
//! replicas divide one floor among every process; without, each divides a
//! whole floor among the processes that reach it, as the daemon's replicas
//! do.

use std::collections::VecDeque;
use std::time::Duration;

use stormguard_core::fleet::floor::{Claims, Division, FIRST_SPAN};
use tokio::time::Instant;

use super::time::nanos;

/// How often a process reports: the client library's default interval.
pub const REPORT_EVERY: Duration = Duration::from_secs(10);

/// The daemon's division of a fleet-scoped floor, between rounds.
pub(super) struct FleetBudget {
    /// The policy's `minRetriesPerSecond`: the fleet's, to divide.
    floor: f64,
    /// One division per replica; one in all when the replicas share a store.
    divisions: Vec<Division<usize>>,
    /// The next report round, in nanoseconds.
    next_round: u64,
    /// The time the next round's counts cover.
    span: Duration,
    delay: u64,
    /// Each process's first tries since its last report.
    requests: Vec<u64>,
    /// Parts decided, and when they reach the processes.
    pending: VecDeque<(u64, Vec<f64>)>,
}

impl FleetBudget {
    /// The floor of `per_second` retries shared by `processes` through
    /// `replicas` (one division when `shared`), answers arriving
    /// `feedback_delay` after each report.
    pub(super) fn new(
        per_second: f64,
        processes: usize,
        replicas: u32,
        shared: bool,
        feedback_delay: Duration,
    ) -> Self {
        let divisions = if shared { 1 } else { replicas.max(1) as usize };
        Self {
            floor: per_second,
            divisions: (0..divisions).map(|_| Division::new()).collect(),
            next_round: nanos(FIRST_SPAN),
            span: FIRST_SPAN,
            delay: nanos(feedback_delay),
            requests: vec![0; processes],
            pending: VecDeque::new(),
        }
    }

    /// Process `p` made a first try.
    pub(super) fn count(&mut self, p: usize) {
        self.requests[p] += 1;
    }

    /// At `t` (`now`, in the engine's clock), before the event there:
    /// reports due are divided, and parts due are returned, one per
    /// process, to be applied.
    pub(super) fn tick(&mut self, t: u64, now: Instant) -> Option<Vec<f64>> {
        if t >= self.next_round {
            let at = now - Duration::from_nanos(t - self.next_round);
            let parts = self.round(at);
            self.pending
                .push_back((self.next_round.saturating_add(self.delay), parts));
            self.next_round = self.next_round.saturating_add(nanos(REPORT_EVERY));
            self.span = REPORT_EVERY;
        }
        match self.pending.front() {
            Some((at, _)) if t >= *at => self.pending.pop_front().map(|(_, parts)| parts),
            _ => None,
        }
    }

    /// Every process reports at `at`, in turn; each is answered its part as
    /// its replica stands then.
    fn round(&mut self, at: Instant) -> Vec<f64> {
        let replicas = self.divisions.len();
        (0..self.requests.len())
            .map(|p| {
                let division = &mut self.divisions[p % replicas];
                division.report(&p, std::mem::take(&mut self.requests[p]), Some(self.span), at);
                division.part(&p, self.floor, Claims::default(), at).per_second
            })
            .collect()
    }
}
