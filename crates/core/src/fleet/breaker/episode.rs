//! The fleet breaker's episode as daemon replicas share it through a store.
//!
//! Without a store each replica keeps its own [`FleetBreaker`] for the
//! processes that ask it. With one, the store holds one [`Episode`] per
//! dependency: its phase, the trial slots out, the last close. Every
//! [`SHARE_EVERY`] a replica whose breaker has something to say sends its
//! [`Share`]: when its processes' breakers first opened, how many of them
//! want a slot, the outcomes of the trials they sent. The store merges it
//! ([`Episode::merge`]: the daemon under compare-and-set in Redis, the
//! simulator's model directly, so both run this code) and answers with the
//! episode and the slots it granted that replica. The replica mirrors the
//! episode ([`FleetBreaker::adopt_at`]) and hands its slots to its
//! processes; a replica the store has not answered for a [`LEASE`] decides
//! alone again, from where the episode was.
//!
//! Times in an episode are the store's clock in milliseconds, and a share's
//! are ages, so the replicas' clocks need not agree.
//!
//! [`FleetBreaker`]: super::FleetBreaker
//! [`FleetBreaker::adopt_at`]: super::FleetBreaker::adopt_at
//! [`SHARE_EVERY`]: crate::fleet::SHARE_EVERY
//! [`LEASE`]: crate::fleet::LEASE

use serde::{Deserialize, Serialize};

use super::SLOT_LIFE;

/// Where the fleet's breaker is, for every replica.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "kebab-case")]
pub enum EpisodePhase {
    /// No breaker open since the last close.
    #[default]
    Closed,
    /// Open since this time: a first open, or the last failed trial.
    Open {
        /// The store's time, in ms.
        since: u64,
    },
    /// Trial slots are granted.
    HalfOpen,
}

/// One dependency's fleet breaker as the store keeps it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Episode {
    /// Its phase.
    pub phase: EpisodePhase,
    /// Counts its changes of phase: a replica's trial outcomes count only
    /// in the half-open they were granted in.
    pub epoch: u64,
    /// When its last close was (the store's ms): every breaker that opened
    /// before it is to close.
    pub closed_at: Option<u64>,
    /// Slots of this half-open granted and not yet settled: when each was.
    /// One not settled within [`SLOT_LIFE`] is free again.
    pub out: Vec<u64>,
    /// Trials of this half-open whose outcome was reported.
    pub settled: u32,
    /// Of those, the ones that succeeded.
    pub successes: u32,
}

/// The breaker's settings the store applies, from the policy's
/// `circuitBreaker` block (every replica sends its own, so a policy
/// change reaches the store with the first replica that has it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rules {
    /// `openTimeout`, in ms.
    pub open_timeout_ms: u64,
    /// `halfOpenMaxCalls`: trials out at once, fleet-wide (at least 1).
    pub max_trials: u32,
    /// `successThreshold`: successes that close it (at least 1).
    pub success_threshold: u32,
}

/// What a replica tells the store of its processes' breakers since its
/// last share.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Share {
    /// The breaker's settings.
    pub rules: Rules,
    /// The episode's epoch as the replica last heard it: the outcomes
    /// below belong to it.
    pub epoch: u64,
    /// How long before the share its processes first reported an open
    /// breaker since the last close it knew of.
    pub opened_ago_ms: Option<u64>,
    /// Asks for a slot it could not grant (a process asks once per
    /// [`ASK_EVERY`](crate::fleet::ASK_EVERY)).
    pub wanted: u32,
    /// Its processes' trials that succeeded...
    pub succeeded: u32,
    /// ...and that failed.
    pub failed: u32,
    /// Slots whose trials were reported (either way).
    pub settled: u32,
    /// Slots the store granted it that no process took in time: free again.
    pub unused: u32,
}

/// The store's answer to a share.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EpisodeAnswer {
    /// The episode after the share.
    pub episode: Episode,
    /// Slots granted to the replica that shared.
    pub granted: u32,
    /// The store's time of the answer, in ms.
    pub at: u64,
}

impl Episode {
    /// Merges `share` at the store's time `now` (ms): what the replica's
    /// processes' trials and breakers change, then the slots granted to it
    /// (at most `halfOpenMaxCalls` out at once fleet-wide, and no more in one
    /// half-open than that or `successThreshold`, if more).
    pub fn merge(&mut self, share: &Share, now: u64) -> u32 {
        self.no_later_than(now);
        let life = SLOT_LIFE.as_millis() as u64;
        self.out.retain(|&at| now.saturating_sub(at) < life);
        if share.epoch == self.epoch && self.phase == EpisodePhase::HalfOpen {
            self.settle(share, now);
        }
        if let Some(ago) = share.opened_ago_ms {
            let opened = now.saturating_sub(ago);
            let since_close = self.closed_at.is_none_or(|closed| opened > closed);
            if self.phase == EpisodePhase::Closed && since_close {
                self.enter(EpisodePhase::Open { since: opened });
            }
        }
        if let EpisodePhase::Open { since } = self.phase {
            if now >= since.saturating_add(share.rules.open_timeout_ms) {
                self.enter(EpisodePhase::HalfOpen);
            }
        }
        self.grant(share, now)
    }

    /// Brings every time the episode holds back to `now` at the latest. A
    /// store whose clock stepped back (a failover to a server behind, a
    /// clock set back) would otherwise find them in its future: slots that
    /// never expire and an open that outlasts openTimeout by the step,
    /// however long. Clamped, an open counts from `now`, and a slot lives
    /// its life from `now`.
    fn no_later_than(&mut self, now: u64) {
        if let EpisodePhase::Open { since } = &mut self.phase {
            *since = (*since).min(now);
        }
        if let Some(closed) = &mut self.closed_at {
            *closed = (*closed).min(now);
        }
        for at in &mut self.out {
            *at = (*at).min(now);
        }
    }

    /// The replica's trial outcomes of this half-open: a failure opens it
    /// again, the `successThreshold`-th success closes it.
    fn settle(&mut self, share: &Share, now: u64) {
        let freed = share.settled.saturating_add(share.unused) as usize;
        self.out.drain(..freed.min(self.out.len()));
        self.settled = self.settled.saturating_add(share.settled);
        if share.failed > 0 {
            self.enter(EpisodePhase::Open { since: now });
            return;
        }
        self.successes = self.successes.saturating_add(share.succeeded);
        if self.successes >= share.rules.success_threshold.max(1) {
            self.closed_at = Some(now);
            self.enter(EpisodePhase::Closed);
        }
    }

    fn grant(&mut self, share: &Share, now: u64) -> u32 {
        if self.phase != EpisodePhase::HalfOpen {
            return 0;
        }
        let rules = share.rules;
        let max_trials = rules.max_trials.max(1);
        let trials = max_trials.max(rules.success_threshold);
        let out = self.out.len() as u32;
        let free =
            (max_trials.saturating_sub(out)).min(trials.saturating_sub(out.saturating_add(self.settled)));
        let granted = share.wanted.min(free);
        self.out.extend(std::iter::repeat_n(now, granted as usize));
        granted
    }

    fn enter(&mut self, phase: EpisodePhase) {
        self.phase = phase;
        self.epoch = self.epoch.wrapping_add(1);
        self.out.clear();
        self.settled = 0;
        self.successes = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RULES: Rules = Rules {
        open_timeout_ms: 30_000,
        max_trials: 10,
        success_threshold: 3,
    };

    fn share(epoch: u64) -> Share {
        Share {
            rules: RULES,
            epoch,
            opened_ago_ms: None,
            wanted: 0,
            succeeded: 0,
            failed: 0,
            settled: 0,
            unused: 0,
        }
    }

    /// An episode half-open since `at`, as two replicas find it.
    fn half_open(at: u64) -> Episode {
        let mut episode = Episode::default();
        let opened = Share {
            opened_ago_ms: Some(0),
            ..share(0)
        };
        assert_eq!(episode.merge(&opened, at - RULES.open_timeout_ms), 0);
        assert_eq!(episode.phase, EpisodePhase::Open { since: at - 30_000 });
        episode.merge(&share(episode.epoch), at);
        assert_eq!(episode.phase, EpisodePhase::HalfOpen);
        episode
    }

    #[test]
    fn replicas_get_the_policys_slots_between_them_not_each() {
        let mut episode = half_open(40_000);
        let epoch = episode.epoch;
        let want = |n| Share {
            wanted: n,
            ..share(epoch)
        };
        assert_eq!(episode.merge(&want(6), 40_010), 6);
        assert_eq!(
            episode.merge(&want(100), 40_020),
            4,
            "ten out at once, fleet-wide"
        );
        assert_eq!(episode.merge(&want(100), 40_030), 0);
        // Two settle: two more may go, until this half-open has had its ten.
        let settled = Share {
            settled: 2,
            succeeded: 2,
            wanted: 5,
            ..share(epoch)
        };
        assert_eq!(episode.merge(&settled, 40_040), 0, "ten this half-open already");
        assert_eq!(episode.successes, 2);
    }

    #[test]
    fn slots_nobody_took_or_settled_are_free_again() {
        let mut episode = half_open(40_000);
        let epoch = episode.epoch;
        let want = |n| Share {
            wanted: n,
            ..share(epoch)
        };
        assert_eq!(episode.merge(&want(10), 40_000), 10);
        let returned = Share {
            unused: 4,
            wanted: 2,
            ..share(epoch)
        };
        assert_eq!(episode.merge(&returned, 40_100), 2, "four unused come back");
        let life = SLOT_LIFE.as_millis() as u64;
        assert_eq!(episode.merge(&want(10), 40_000 + life - 1), 2);
        // The first eight are lost with their holders; the last two are still out.
        assert_eq!(episode.merge(&want(10), 40_100 + life), 8);
    }

    #[test]
    fn a_failed_trial_anywhere_opens_it_again_and_stale_outcomes_do_not_count() {
        let mut episode = half_open(40_000);
        let epoch = episode.epoch;
        episode.merge(
            &Share {
                wanted: 3,
                ..share(epoch)
            },
            40_000,
        );
        let failed = Share {
            failed: 1,
            settled: 1,
            ..share(epoch)
        };
        episode.merge(&failed, 40_050);
        assert_eq!(episode.phase, EpisodePhase::Open { since: 40_050 });
        // The other replica's successes, from the half-open that failed.
        let late = Share {
            succeeded: 2,
            settled: 2,
            ..share(epoch)
        };
        episode.merge(&late, 40_060);
        assert_eq!(
            (episode.phase, episode.successes),
            (EpisodePhase::Open { since: 40_050 }, 0)
        );
        episode.merge(&share(episode.epoch), 70_050);
        assert_eq!(episode.phase, EpisodePhase::HalfOpen);
    }

    #[test]
    fn successes_from_several_replicas_close_it_and_a_later_open_starts_again() {
        let mut episode = half_open(40_000);
        let epoch = episode.epoch;
        let trial = |succeeded| Share {
            succeeded,
            settled: succeeded,
            ..share(epoch)
        };
        episode.merge(
            &Share {
                wanted: 3,
                ..share(epoch)
            },
            40_000,
        );
        episode.merge(&trial(2), 40_100);
        assert_eq!(episode.phase, EpisodePhase::HalfOpen);
        episode.merge(&trial(1), 40_150);
        assert_eq!(
            (episode.phase, episode.closed_at),
            (EpisodePhase::Closed, Some(40_150))
        );

        // A breaker that opened before the close does not open it again.
        let before = Share {
            opened_ago_ms: Some(100),
            ..share(episode.epoch)
        };
        episode.merge(&before, 40_200);
        assert_eq!(episode.phase, EpisodePhase::Closed);
        let after = Share {
            opened_ago_ms: Some(10),
            ..share(episode.epoch)
        };
        episode.merge(&after, 40_200);
        assert_eq!(episode.phase, EpisodePhase::Open { since: 40_190 });
    }

    #[test]
    fn a_store_clock_that_steps_back_an_hour_delays_nothing_by_an_hour() {
        let hour = 3_600_000;
        let mut episode = Episode::default();
        let opened = Share {
            opened_ago_ms: Some(0),
            ..share(0)
        };
        episode.merge(&opened, 10 * hour);
        // The store's clock is set back an hour: the open counts from the
        // first share after, and half-opens one openTimeout later.
        let back = 9 * hour;
        episode.merge(&share(episode.epoch), back);
        assert_eq!(episode.phase, EpisodePhase::Open { since: back });
        episode.merge(&share(episode.epoch), back + RULES.open_timeout_ms);
        assert_eq!(episode.phase, EpisodePhase::HalfOpen);
        // Slots granted before a step back are free one slot life after it.
        let epoch = episode.epoch;
        let want = |n| Share {
            wanted: n,
            ..share(epoch)
        };
        assert_eq!(episode.merge(&want(10), back + hour), 10);
        let life = SLOT_LIFE.as_millis() as u64;
        assert_eq!(episode.merge(&want(10), back), 0);
        assert_eq!(episode.merge(&want(10), back + life), 10);
    }

    #[test]
    fn the_store_keeps_it_as_json() {
        let episode = half_open(40_000);
        let text = serde_json::to_string(&episode).unwrap();
        assert_eq!(serde_json::from_str::<Episode>(&text).unwrap(), episode);
        assert!(text.contains("\"state\":\"half-open\""), "{text}");
    }
}
