//! The pace store the simulator's replicas share, as the daemon's Redis
//! scripts keep it: the same answers in the same terms
//! (`stormguard_core::fleet::replicas`), in virtual time. A test holds it
//! to the scripts themselves, against a real Redis.

use std::time::Duration;

use stormguard_core::fleet::breaker::episode::{Episode, EpisodeAnswer, Heard, HeardFrom, OtherRules, Share};
use stormguard_core::fleet::replicas::{Contribution, Published, Shared, Tallies};
use stormguard_core::fleet::LEASE;

use super::time::nanos;

/// The pace store as the daemon's Redis scripts keep it (`exchange.lua`,
/// `publish.lua`, and the fleet breaker's compare-and-set of its
/// episode), in virtual time: nanoseconds since the run began.
pub struct StoreModel {
    /// Its round trip from a replica.
    pub(super) round_trip: u64,
    /// Who owns the pace, until when.
    owner: Option<(usize, u64)>,
    /// Contributions since the owner last took them, with when the newest
    /// overload's window began.
    pending: (Tallies, Option<u64>),
    /// Each replica's demand as it last wrote it: (want, members, when).
    wants: Vec<Option<(f64, u32, u64)>>,
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

    /// Replica `r`'s fleet breaker `share` arrives at `t`: merged into the
    /// episode, as the daemon's compare-and-set does, and answered (or
    /// refused, under other rules than the episode's).
    pub(super) fn merge(&mut self, r: usize, share: &Share, t: u64) -> Result<EpisodeAnswer, OtherRules> {
        self.restart_if_due(t);
        let at = t / 1_000_000;
        let replica = format!("replica-{r}");
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
    pub fn answer(&mut self, r: usize, mine: &Contribution, t: u64) -> Shared {
        self.restart_if_due(t);
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
        self.wants[r] = Some((mine.want, mine.members, t));
        if self.owner.is_none_or(|(owner, until)| owner == r || until <= t) {
            self.owner = Some((r, t + lease));
        }
        let taken = (self.owner.map(|(owner, _)| owner) == Some(r)).then(|| {
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
            .filter(|&(_, _, at)| at + lease > t)
            .map(|(want, members, _)| (want, members))
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
    pub fn publish(&mut self, r: usize, rate: Published, t: u64) -> bool {
        self.restart_if_due(t);
        let owns = self.owner.is_some_and(|(owner, until)| owner == r && until > t);
        if owns {
            self.rate = Some((rate, t));
        }
        owns
    }
}
