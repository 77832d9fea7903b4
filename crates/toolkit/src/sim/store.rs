//! The pace store the simulator's replicas share, as the daemon's Redis
//! scripts keep it: the same answers in the same terms
//! (`stormguard_core::fleet::replicas`), in virtual time. A test holds it
//! to the scripts themselves, against a real Redis.

use std::time::Duration;

use stormguard_core::fleet::breaker::episode::{Episode, EpisodeAnswer, Heard, HeardFrom, OtherRules, Share};
use stormguard_core::fleet::replicas::{Contribution, Demand, Published, Shared, Tallies};
use stormguard_core::fleet::LEASE;

use super::scenario::Failover;
use super::time::nanos;

/// The pace store as the daemon's Redis scripts keep it (`exchange.lua`,
/// `publish.lua`, and the fleet breaker's compare-and-set of its
/// episode), in virtual time: nanoseconds since the run began.
pub struct StoreModel {
    /// Its round trip from a replica.
    pub(super) round_trip: u64,
    /// Who owns the pace (a replica and its incarnation: a restarted pod
    /// is another name to the store), since when and until when.
    owner: Option<Lease>,
    /// Contributions since the owner last took them, with when the newest
    /// overload's window began.
    pending: (Tallies, Option<u64>),
    /// Each replica's demand as it last wrote it, and when.
    wants: Vec<Option<(Demand, u64)>>,
    /// The rate as last published, and when.
    rate: Option<(Published, u64)>,
    /// When a contribution last arrived: the pending tallies and the
    /// published rate are kept for [`KEPT_FOR`] leases after it.
    written: u64,
    /// The fleet breaker's episode, and what each replica said of itself.
    episode: Episode,
    heard: HeardFrom,
    /// When it stops answering, for good.
    lost_at: Option<u64>,
    /// When it restarts, empty (Redis restarted without persistence, or
    /// failed over to a replica that had nothing yet).
    restarts_at: Option<u64>,
    /// When it fails over to a replica with all it held, and how far that
    /// replica's clock is behind.
    failover: Option<(u64, u64)>,
}

/// A replica, and how many times it restarted: the store knows each
/// incarnation under its own name, as the daemon names itself anew at
/// every start.
pub type Incarnation = (usize, u32);

/// Who owns the pace, as `exchange.lua` keeps it.
#[derive(Debug, Clone, Copy)]
struct Lease {
    owner: Incarnation,
    granted: u64,
    until: u64,
}

impl Lease {
    /// Whether it holds at `t`: granted in the store's future (its clock
    /// stepped back since), it is over.
    fn is_on_at(&self, t: u64) -> bool {
        self.until > t && self.granted <= t
    }
}

/// Leases the store keeps what it was last told, as the scripts' key
/// expiries do.
const KEPT_FOR: u64 = 10;

impl StoreModel {
    /// Whether a call reaching it at `t` goes unanswered.
    pub(super) fn is_lost_at(&self, t: u64) -> bool {
        self.lost_at.is_some_and(|lost| t >= lost)
    }

    /// An empty store for `replicas` replicas, `round_trip` away from
    /// each, that stops answering at `lost_at` if given.
    pub fn new(replicas: usize, round_trip: Duration, lost_at: Option<Duration>) -> Self {
        Self {
            written: 0,
            lost_at: lost_at.map(nanos),
            round_trip: nanos(round_trip),
            owner: None,
            pending: (Tallies::default(), None),
            wants: vec![None; replicas],
            rate: None,
            episode: Episode::default(),
            heard: HeardFrom::default(),
            restarts_at: None,
            failover: None,
        }
    }

    /// The same store, failed over at `failover`'s time, if given, to a
    /// replica whose clock is behind.
    pub fn failed_over(self, failover: Option<Failover>) -> Self {
        Self {
            failover: failover.map(|f| (nanos(f.at), nanos(f.clock_behind))),
            ..self
        }
    }

    /// The store's clock at the run's time `t`: behind, once failed over.
    fn clock(&self, t: u64) -> u64 {
        match self.failover {
            Some((at, behind)) if t >= at => t.saturating_sub(behind),
            _ => t,
        }
    }

    /// The same store, restarted empty at `at` if given.
    pub fn restarted_at(self, at: Option<Duration>) -> Self {
        Self {
            restarts_at: at.map(nanos),
            ..self
        }
    }

    /// At the first call from its restart on, everything it held is gone.
    fn restart_if_due(&mut self, t: u64) {
        if self.restarts_at.is_some_and(|at| t >= at) {
            self.restarts_at = None;
            self.owner = None;
            self.pending = (Tallies::default(), None);
            self.wants.fill(None);
            self.rate = None;
            self.episode = Episode::default();
            self.heard.clear();
        }
    }

    /// Replica `r`'s fleet breaker `share` (in its `life`-th incarnation,
    /// under a name of its own, as a restarted daemon is) arrives at `t`: merged into the
    /// episode, as the daemon's compare-and-set does, and answered (or
    /// refused, under other rules than the episode's).
    pub(super) fn merge(
        &mut self,
        (r, life): Incarnation,
        share: &Share,
        t: u64,
    ) -> Result<EpisodeAnswer, OtherRules> {
        self.restart_if_due(t);
        let at = self.clock(t) / 1_000_000;
        let replica = format!("replica-{r}-{life}");
        let granted = self.episode.merge(&replica, share, &self.heard, at)?;
        self.heard.insert(replica, Heard::of(share, at));
        Ok(EpisodeAnswer {
            episode: self.episode.clone(),
            granted,
            at,
        })
    }

    /// Replica `r`'s contribution `mine` arrives at `t`: kept, and
    /// answered, as `exchange.lua` answers it.
    pub fn answer(&mut self, (r, life): Incarnation, mine: &Contribution, t: u64) -> Shared {
        self.restart_if_due(t);
        let t = self.clock(t);
        let lease = nanos(LEASE);
        if t >= self.written + KEPT_FOR * lease {
            self.pending = (Tallies::default(), None);
        }
        self.written = t;
        let (pending, newest) = &mut self.pending;
        pending.outcomes = pending.outcomes.plus(mine.tallies.outcomes);
        if let Some(age) = mine.tallies.overloaded_since {
            let began = t.saturating_sub(nanos(age));
            *newest = Some(newest.map_or(began, |n| n.max(began)));
        }
        self.wants[r] = Some((mine.demand, t));
        let who = (r, life);
        if self
            .owner
            .is_none_or(|held| held.owner == who || !held.is_on_at(t))
        {
            self.owner = Some(Lease {
                owner: who,
                granted: t,
                until: t + lease,
            });
        }
        let taken = self.owner.is_some_and(|held| held.owner == who).then(|| {
            let (tallies, newest) = std::mem::take(&mut self.pending);
            Tallies {
                overloaded_since: newest.map(|began| Duration::from_nanos(t.saturating_sub(began))),
                ..tallies
            }
        });
        let others = self
            .wants
            .iter()
            .enumerate()
            .filter(|&(other, _)| other != r)
            .filter_map(|(_, written)| *written)
            .filter(|&(_, at)| at <= t && at + lease > t)
            .map(|(demand, _)| demand)
            .collect();
        Shared {
            published: self
                .rate
                .filter(|&(_, at)| t < at + KEPT_FOR * lease)
                .map(|(rate, at)| (rate, Duration::from_nanos(t.saturating_sub(at)))),
            others,
            taken,
        }
    }

    /// Replica `r` publishes `rate` at `t`: written, as `publish.lua` writes
    /// it, only while `r` still owns the pace.
    pub fn publish(&mut self, who: Incarnation, rate: Published, t: u64) -> bool {
        self.restart_if_due(t);
        let t = self.clock(t);
        let owns = self.owner.is_some_and(|held| held.owner == who && held.until > t);
        if owns {
            self.rate = Some((rate, t));
        }
        owns
    }

    /// Replica `who` gives up the pace at `t`, if it owns it, as
    /// `release.lua` does at its shutdown.
    pub fn release(&mut self, who: Incarnation, t: u64) {
        self.restart_if_due(t);
        if self.owner.is_some_and(|held| held.owner == who) {
            self.owner = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use stormguard_core::fleet::replicas::Tallies;

    fn mine() -> Contribution {
        Contribution {
            tallies: Tallies::default(),
            demand: Demand {
                want: 1.0,
                members: 1,
                classes: None,
            },
        }
    }

    const SECOND: u64 = 1_000_000_000;

    #[test]
    fn a_lease_granted_before_the_stores_clock_stepped_back_is_over() {
        let failover = Failover {
            at: Duration::from_secs(10),
            clock_behind: Duration::from_secs(60),
        };
        let mut store = StoreModel::new(2, Duration::from_millis(1), None).failed_over(Some(failover));
        assert!(store.answer((0, 0), &mine(), 10 * SECOND - 1).taken.is_some());
        // The owner is gone with the old primary: the next replica owns the
        // pace at once, not when the lease ends on the old clock.
        assert!(store.answer((1, 0), &mine(), 10 * SECOND).taken.is_some());
        assert!(!store.publish((0, 0), published(), 10 * SECOND));
    }

    #[test]
    fn an_owner_that_gives_the_pace_up_leaves_it_to_the_next_that_asks() {
        let mut store = StoreModel::new(2, Duration::from_millis(1), None);
        assert!(store.answer((0, 0), &mine(), SECOND).taken.is_some());
        assert!(store.answer((1, 0), &mine(), SECOND + 1).taken.is_none());
        store.release((1, 0), SECOND + 2);
        assert!(
            store.answer((1, 0), &mine(), SECOND + 3).taken.is_none(),
            "not its to give"
        );
        store.release((0, 0), SECOND + 4);
        assert!(store.answer((1, 0), &mine(), SECOND + 5).taken.is_some());
    }

    fn published() -> Published {
        Published {
            rate: 10.0,
            probing: false,
            handover: None,
        }
    }
}
