//! A fleet-scoped retry budget through the simulated daemon: each process
//! reports the requests it made every [`REPORT_EVERY`], the daemon divides
//! the policy's floor among the processes by those requests
//! (`stormguard_core::fleet::floor`), and each process's budget takes its
//! part a feedback delay later. Until the first part arrives a process has
//! the whole floor, as a client that has not yet heard from the daemon.

use std::time::Duration;

use stormguard_core::fleet::floor;

use super::time::nanos;

/// How often a process reports: the client library's default interval.
pub const REPORT_EVERY: Duration = Duration::from_secs(10);

/// The daemon's division of a fleet-scoped floor, between rounds.
pub(super) struct FleetBudget {
    /// The policy's `minRetriesPerSecond`: the fleet's, to divide.
    floor: f64,
    /// The next report round, in nanoseconds.
    next_round: u64,
    delay: u64,
    /// Each process's first tries since the last round.
    requests: Vec<u64>,
    /// Parts decided, and when they reach the processes.
    pending: Option<(u64, Vec<f64>)>,
}

impl FleetBudget {
    /// The floor of `per_second` retries shared by `processes`, answers
    /// arriving `feedback_delay` after each report.
    pub(super) fn new(per_second: f64, processes: usize, feedback_delay: Duration) -> Self {
        Self {
            floor: per_second,
            next_round: nanos(REPORT_EVERY),
            delay: nanos(feedback_delay),
            requests: vec![0; processes],
            pending: None,
        }
    }

    /// Process `p` made a first try.
    pub(super) fn count(&mut self, p: usize) {
        self.requests[p] += 1;
    }

    /// At `t`, before the event there: reports due are divided, and parts
    /// due are returned, one per process, to be applied.
    pub(super) fn tick(&mut self, t: u64) -> Option<Vec<f64>> {
        if t >= self.next_round {
            let parts = floor::divide(self.floor, &self.requests);
            self.requests.iter_mut().for_each(|r| *r = 0);
            self.pending = Some((self.next_round.saturating_add(self.delay), parts));
            self.next_round = self.next_round.saturating_add(nanos(REPORT_EVERY));
        }
        match &self.pending {
            Some((at, _)) if t >= *at => self.pending.take().map(|(_, parts)| parts),
            _ => None,
        }
    }
}
