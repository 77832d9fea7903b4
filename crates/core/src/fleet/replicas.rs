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

/// What a replica's processes want of one dependency, as the store keeps
/// it for the other replicas.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Demand {
    /// Attempts per second its processes want, in all (each as bounded).
    pub want: f64,
    /// Processes it paces for the dependency.
    pub members: u32,
    /// Of `want`, each class's (critical, default, sheddable), so that the
    /// fleet's rate goes to every replica's critical calls first; `None`
    /// from a replica (or store) that does not say: then all the default's.
    pub classes: Option<[f64; 3]>,
}

impl Demand {
    /// Its want by class: the default's whole if it said none.
    fn by_class(&self) -> [f64; 3] {
        self.classes.unwrap_or([0.0, self.want, 0.0])
    }

    /// Whether it names a class other than the default.
    fn is_classed(&self) -> bool {
        self.classes.is_some_and(|c| c[0] > 0.0 || c[2] > 0.0)
    }
}

/// What a replica adds to the store each tick, for one dependency.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Contribution {
    /// What its processes reported since its last contribution.
    pub tallies: Tallies,
    /// What its processes want.
    pub demand: Demand,
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
    /// The other replicas' demand as each last wrote it; the store leaves
    /// out what a replica wrote more than a lease ago.
    pub others: Vec<Demand>,
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

/// This replica's part of `fleet`, when it paces `mine` and the other
/// replicas `others`: max-min over every replica's processes, each
/// replica's counted as `members` processes wanting their mean; when a
/// replica names classes and the fleet wants more than its rate, class by
/// class, the most critical first, as one daemon divides among its
/// processes. While the fleet probes, or nobody wants anything, each
/// replica's part is in proportion to its processes.
pub(super) fn part_of(
    fleet: Published,
    mine: Demand,
    others: &[Demand],
    scratch: &mut Vec<(f64, u32)>,
) -> f64 {
    let all = || others.iter().chain(std::iter::once(&mine));
    let members: f64 = all().map(|d| f64::from(d.members)).sum();
    let wanted: f64 = all().map(|d| d.want.max(0.0)).sum();
    if mine.members == 0 || members == 0.0 {
        return 0.0;
    }
    if fleet.probing || !wanted.is_finite() || wanted <= 0.0 {
        return fleet.rate * f64::from(mine.members) / members;
    }
    if wanted <= fleet.rate {
        // Everyone's want is met: the rest in proportion to it.
        return fleet.rate * mine.want.max(0.0) / wanted;
    }
    if all().any(Demand::is_classed) {
        return classed_part(fleet.rate, mine, others, scratch);
    }
    let groups = all().map(|d| mean(d.want, d.members));
    let level = super::fair_share::level_of_groups(fleet.rate, groups, scratch);
    let (mean_want, n) = mean(mine.want, mine.members);
    mean_want.min(level) * f64::from(n)
}

/// `rate` divided among the replicas class by class, the most critical
/// first (each class takes what its processes want of it, up to what is
/// left, max-min among the replicas), and this replica's part of each.
fn classed_part(rate: f64, mine: Demand, others: &[Demand], scratch: &mut Vec<(f64, u32)>) -> f64 {
    let mut left = rate;
    let mut part = 0.0;
    for rank in 0..3 {
        let groups = others
            .iter()
            .chain(std::iter::once(&mine))
            .map(|d| mean(d.by_class()[rank], d.members));
        let level = super::fair_share::level_of_groups(left, groups, scratch);
        let given: f64 = scratch
            .iter()
            .map(|&(want, n)| want.min(level) * f64::from(n))
            .sum();
        let (mean_want, n) = mean(mine.by_class()[rank], mine.members);
        part += mean_want.min(level) * f64::from(n);
        left = (left - given).max(0.0);
    }
    part
}

/// A replica's want as `members` processes each wanting the mean.
fn mean(want: f64, members: u32) -> (f64, u32) {
    (
        if members == 0 {
            0.0
        } else {
            want / f64::from(members)
        },
        members,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn demand((want, members): (f64, u32)) -> Demand {
        Demand {
            want,
            members,
            classes: None,
        }
    }

    fn part(rate: f64, mine: (f64, u32), others: &[(f64, u32)]) -> f64 {
        let fleet = Published {
            rate,
            probing: false,
            handover: None,
        };
        let others: Vec<Demand> = others.iter().copied().map(demand).collect();
        part_of(fleet, demand(mine), &others, &mut Vec::new())
    }

    fn classed(classes: [f64; 3], members: u32) -> Demand {
        Demand {
            want: classes.iter().sum(),
            members,
            classes: Some(classes),
        }
    }

    #[test]
    fn replicas_give_every_replicas_critical_calls_the_rate_first() {
        let fleet = Published {
            rate: 150.0,
            probing: false,
            handover: None,
        };
        // Critical calls on one replica, sheddable ones on the other, each wanting 100.
        let critical = classed([100.0, 0.0, 0.0], 10);
        let sheddable = classed([0.0, 0.0, 100.0], 10);
        let a = part_of(fleet, critical, &[sheddable], &mut Vec::new());
        let b = part_of(fleet, sheddable, &[critical], &mut Vec::new());
        assert_eq!((a, b), (100.0, 50.0));

        // A replica that says no class: all its calls the default's.
        let plain = demand((100.0, 10));
        let c = part_of(fleet, critical, &[plain], &mut Vec::new());
        let d = part_of(fleet, plain, &[critical], &mut Vec::new());
        assert_eq!((c, d), (100.0, 50.0));

        // Within a class, max-min among the replicas' processes.
        let few = classed([10.0, 90.0, 0.0], 1);
        let many = classed([200.0, 0.0, 0.0], 10);
        let e = part_of(fleet, few, &[many], &mut Vec::new());
        let f = part_of(fleet, many, &[few], &mut Vec::new());
        assert!((e - 10.0).abs() < 1e-9 && (f - 140.0).abs() < 1e-9, "{e} {f}");
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
        assert_eq!(
            part_of(fleet, demand((50.0, 1)), &[demand((0.0, 3))], &mut Vec::new()),
            1.0
        );
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
