//! Turns at a rate, as credit: credit accrues at the pace and a turn spends
//! one. When the pace changes, the credit accrued so far is kept, so a
//! faster pace speeds up what is left of the wait rather than granting at
//! once every turn the new pace would have earned since the last one.

use std::time::Duration;

use tokio::time::Instant;

/// How much more than one turn of credit may build up: what accrues over
/// this long, so that a turn claimed late by a timer's lag is made up, but
/// a lull earns no burst.
const LAG: f64 = 0.002;

/// Credit this close to a whole turn is one: a wait computed from the
/// missing credit rounds to whole nanoseconds, and must not come back to a
/// claim a rounding error short of its turn.
const EPSILON: f64 = 1e-9;

/// A rate the fleet granted this process, until it runs out.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Lease {
    /// Turns per second.
    pub rate: f64,
    /// When the grant ends; the gate's own rate applies after it.
    pub until: Instant,
    /// When it was granted.
    pub(super) since: Instant,
    /// Whether a refusal has cut it already.
    pub(super) cut: bool,
}

#[derive(Debug, Clone, Copy)]
pub(super) struct Pacer {
    credit: f64,
    at: Instant,
    pub(super) lease: Option<Lease>,
}

impl Pacer {
    /// A pacer at `now` with `credit` (below 1: the first turn comes after a wait).
    pub(super) fn new(credit: f64, now: Instant) -> Self {
        Self {
            credit,
            at: now,
            lease: None,
        }
    }

    /// An attempt sent at `sent` was refused or timed out: the first such
    /// attempt sent under the current lease cuts it by `beta` until the
    /// next grant, which the fleet sets knowing of it, arrives.
    pub(super) fn overloaded(&mut self, beta: f64, sent: Instant) {
        if let Some(lease) = &mut self.lease {
            if !lease.cut && sent >= lease.since {
                lease.rate *= beta;
                lease.cut = true;
            }
        }
    }

    /// The pace at the last accrual: the lease's while it lasts, else `own`.
    pub(super) fn pace(&self, own: f64) -> f64 {
        match self.lease {
            Some(lease) if self.at < lease.until => lease.rate,
            _ => own,
        }
    }

    /// The pace at `now`: the lease's if it still runs, else `own`.
    pub(super) fn pace_at(&self, own: f64, now: Instant) -> f64 {
        match self.lease {
            Some(lease) if now < lease.until => lease.rate,
            _ => own,
        }
    }

    /// Accrues credit up to `now`: at the lease's rate until it ends, then at `own`.
    pub(super) fn accrue(&mut self, own: f64, now: Instant) {
        if now <= self.at {
            return;
        }
        if let Some(lease) = self.lease {
            if self.at < lease.until {
                let end = lease.until.min(now);
                self.credit += lease.rate * secs(end - self.at);
                self.at = end;
            }
            if now >= lease.until {
                self.lease = None;
            }
        }
        self.credit += own * secs(now.saturating_duration_since(self.at));
        self.at = now;
        self.credit = self.credit.min(1.0 + self.pace(own) * LAG);
    }

    /// The credit as of the last accrual.
    pub(super) fn credit(&self) -> f64 {
        self.credit
    }

    /// Spends a turn if one has accrued (call [`accrue`](Self::accrue) first).
    pub(super) fn take(&mut self) -> bool {
        let ready = self.credit >= 1.0 - EPSILON;
        if ready {
            self.credit = (self.credit - 1.0).max(0.0);
        }
        ready
    }

    /// When a turn will have accrued at the present pace (call
    /// [`accrue`](Self::accrue) first); no later than the lease's end, when
    /// the pace changes.
    pub(super) fn due(&self, own: f64) -> Instant {
        let missing = 1.0 - self.credit;
        if missing <= EPSILON {
            return self.at;
        }
        let wait = Duration::from_secs_f64(missing / self.pace(own)).max(Duration::from_nanos(1));
        let due = self.at + wait;
        match self.lease {
            Some(lease) if self.at < lease.until => due.min(lease.until),
            _ => due,
        }
    }
}

fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}
