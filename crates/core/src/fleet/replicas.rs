//! Daemon replicas pacing as one, through a store they share.
//!
//! Each replica keeps pacing the processes that ask it, as a lone daemon
//! does, and once a tick it adds to the store a [`Contribution`]: what its
//! processes reported since its last one, and what they want. The store
//! answers with [`Shared`]: the rate the fleet may send as its owner last
//! [`Published`] it, and what the other replicas' processes want. One
//! replica owns each dependency's pace (the store elects it and its
//! ownership lapses when it stops renewing): it also takes every replica's
//! contributions, folds them into the fleet's rate law, and publishes the
//! rate. Every replica then divides the fleet's rate among the replicas by
//! their processes' demand, and its part among its own processes.
//!
//! What the store holds is data, and the store is any that answers in
//! these terms (the daemon's Redis script, the simulator's model): the
//! exchange is these types and [`FleetController::contribute_at`] and
//! [`FleetController::shared_at`], so the simulator runs the code the
//! daemon runs. A replica that gets no answer for a [`LEASE`] paces alone
//! again, with the rate its own processes taught it meanwhile.
//!
//! [`FleetController::contribute_at`]: super::FleetController::contribute_at
//! [`FleetController::shared_at`]: super::FleetController::shared_at
//! [`LEASE`]: super::LEASE

use std::time::Duration;

/// Attempts' outcomes, summed over the processes that reported them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Outcomes {
    /// Attempts sent.
    pub sent: u64,
    /// Attempts accepted.
    pub accepted: u64,
    /// Attempts refused or timed out.
    pub overloaded: u64,
    /// Of those, the ones that timed out.
    pub timed_out: u64,
}

impl Outcomes {
    /// Both sums, saturating.
    pub fn plus(self, other: Self) -> Self {
        Self {
            sent: self.sent.saturating_add(other.sent),
            accepted: self.accepted.saturating_add(other.accepted),
            overloaded: self.overloaded.saturating_add(other.overloaded),
            timed_out: self.timed_out.saturating_add(other.timed_out),
        }
    }
}

/// Outcomes reported to the replicas since their owner last took them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tallies {
    /// What they add up to.
    pub outcomes: Outcomes,
    /// How long before the exchange the newest report with an overload
    /// began its window (its process's previous ask): an overload of an
    /// attempt sent before the fleet's last cut does not cut again.
    pub overloaded_since: Option<Duration>,
}

impl Tallies {
    /// Both, as one: the sums, and the newer of the two windows.
    pub fn plus(self, other: Self) -> Self {
        Self {
            outcomes: self.outcomes.plus(other.outcomes),
            overloaded_since: match (self.overloaded_since, other.overloaded_since) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            },
        }
    }
}

/// What a replica adds to the store each tick, for one dependency.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Contribution {
    /// What its processes reported since its last contribution.
    pub tallies: Tallies,
    /// Attempts per second its processes want, in all (each as bounded).
    pub want: f64,
    /// Processes it paces for the dependency.
    pub members: u32,
}

/// The fleet's rate as its owner publishes it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Published {
    /// Attempts per second the whole fleet may send.
    pub rate: f64,
    /// Whether nothing has been accepted yet: then one process per
    /// replica probes with the replica's whole part.
    pub probing: bool,
    /// What the owner's law has learned, for whoever owns the pace next
    /// (`None` from a store or daemon that does not carry it: the next
    /// owner then carries on from the rate alone).
    pub handover: Option<super::handover::Handover>,
}

/// The store's answer to a replica's contribution.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Shared {
    /// The rate as the owner last published it, and how long before the
    /// answer. A rate older than a [`LEASE`](super::LEASE) is not paced by.
    pub published: Option<(Published, Duration)>,
    /// The other replicas' demand as each last wrote it, `(want, members)`;
    /// the store leaves out what a replica wrote more than a lease ago.
    pub others: Vec<(f64, u32)>,
    /// When this replica owns the pace: what every replica contributed
    /// since the owner last took it (the store empties it as it answers).
    pub taken: Option<Tallies>,
}

/// A replica's part of the fleet's rate while it paces with the others.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Part {
    /// The fleet's rate.
    pub(super) fleet: f64,
    /// This replica's part of it.
    pub(super) rate: f64,
    pub(super) probing: bool,
    /// The replica's own rate when it took this part: what its own
    /// processes' outcomes change that rate by since, it adds to the part
    /// until the next exchange, as the owner will when it folds them.
    pub(super) own: f64,
    /// Paced by until then, unless a newer answer comes.
    pub(super) until: tokio::time::Instant,
}

impl Part {
    /// What this replica's processes may send in all while it paces by
    /// this part, its own rate now being `own_rate`: the part, plus what
    /// its own processes' outcomes changed its rate by since; never below
    /// `min_rate`.
    pub(super) fn budget(&self, own_rate: f64, min_rate: f64) -> f64 {
        (self.rate + own_rate - self.own).max(min_rate)
    }
}

/// This replica's part of `fleet`, when it paces `mine = (want, members)`
/// and the other replicas `others`: max-min over every replica's processes,
/// each replica's counted as `members` processes wanting their mean. While
/// the fleet probes, or nobody wants anything, each replica's part is in
/// proportion to its processes.
pub(super) fn part_of(
    fleet: Published,
    mine: (f64, u32),
    others: &[(f64, u32)],
    scratch: &mut Vec<(f64, u32)>,
) -> f64 {
    let members: f64 = others.iter().map(|&(_, n)| f64::from(n)).sum::<f64>() + f64::from(mine.1);
    let wanted: f64 = others.iter().map(|&(want, _)| want.max(0.0)).sum::<f64>() + mine.0.max(0.0);
    if mine.1 == 0 || members == 0.0 {
        return 0.0;
    }
    if fleet.probing || !wanted.is_finite() || wanted <= 0.0 {
        return fleet.rate * f64::from(mine.1) / members;
    }
    if wanted <= fleet.rate {
        // Everyone's want is met: the rest in proportion to it.
        return fleet.rate * mine.0.max(0.0) / wanted;
    }
    let mean = |(want, n): (f64, u32)| (if n == 0 { 0.0 } else { want / f64::from(n) }, n);
    let groups = others.iter().copied().chain(std::iter::once(mine)).map(mean);
    let level = super::fair_share::level_of_groups(fleet.rate, groups, scratch);
    let (mean_want, n) = mean(mine);
    mean_want.min(level) * f64::from(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn part(rate: f64, mine: (f64, u32), others: &[(f64, u32)]) -> f64 {
        let fleet = Published {
            rate,
            probing: false,
            handover: None,
        };
        part_of(fleet, mine, others, &mut Vec::new())
    }

    #[test]
    fn replicas_divide_as_their_processes_would_one_by_one() {
        // Ten processes wanting 10 each on one replica, one wanting 100 on the other.
        let many = part(100.0, (100.0, 10), &[(100.0, 1)]);
        let one = part(100.0, (100.0, 1), &[(100.0, 10)]);
        assert!((many - 1000.0 / 11.0).abs() < 1e-9, "{many}");
        assert!((one - 100.0 / 11.0).abs() < 1e-9, "{one}");
        assert!((many + one - 100.0).abs() < 1e-9);
    }

    #[test]
    fn a_met_demand_shares_the_rest_in_proportion() {
        let a = part(100.0, (30.0, 3), &[(10.0, 1)]);
        let b = part(100.0, (10.0, 1), &[(30.0, 3)]);
        assert_eq!((a, b), (75.0, 25.0));
    }

    #[test]
    fn while_probing_or_wanting_nothing_parts_follow_processes() {
        let fleet = Published {
            rate: 4.0,
            probing: true,
            handover: None,
        };
        assert_eq!(part_of(fleet, (50.0, 1), &[(0.0, 3)], &mut Vec::new()), 1.0);
        assert_eq!(part(8.0, (0.0, 2), &[(0.0, 6)]), 2.0);
        assert_eq!(part(8.0, (0.0, 0), &[(5.0, 6)]), 0.0, "no processes, no part");
    }

    #[test]
    fn tallies_add_up_and_keep_the_newest_overload() {
        let a = Tallies {
            outcomes: Outcomes {
                sent: 3,
                accepted: 1,
                overloaded: 2,
                timed_out: 0,
            },
            overloaded_since: Some(Duration::from_millis(80)),
        };
        let b = Tallies {
            outcomes: Outcomes {
                sent: 1,
                accepted: 1,
                overloaded: 0,
                timed_out: 0,
            },
            overloaded_since: None,
        };
        let c = Tallies {
            overloaded_since: Some(Duration::from_millis(30)),
            ..a
        };
        assert_eq!(a.plus(b).outcomes.sent, 4);
        assert_eq!(a.plus(b).overloaded_since, Some(Duration::from_millis(80)));
        assert_eq!(a.plus(c).overloaded_since, Some(Duration::from_millis(30)));
    }
}
