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
//! Beside the episode the store keeps what each replica [`Heard`] of
//! itself at its last share: its rules and its demand. They change at
//! every share, so they are written apart from the episode, whose
//! compare-and-set they would otherwise make every other replica lose.
//!
//! An episode runs under one set of [`Rules`]. A replica whose policy says
//! otherwise is refused ([`OtherRules`]) while a replica under the
//! episode's rules still shares, and decides alone: two sets of rules for
//! one half-open would let whoever wrote last decide it. Once none has
//! shared under them for [`RULES_HELD_FOR`] (a reload reached them all),
//! the episode goes on under the new ones, keeping its phase. The slots of
//! a half-open go to the replicas by their demand: each gets its part of
//! `halfOpenMaxCalls` in proportion to the asks it could not grant.
//!
//! [`FleetBreaker`]: super::FleetBreaker
//! [`FleetBreaker::adopt_at`]: super::FleetBreaker::adopt_at
//! [`SHARE_EVERY`]: crate::fleet::SHARE_EVERY
//! [`LEASE`]: crate::fleet::LEASE

use std::fmt;

use serde::{Deserialize, Serialize};

use super::SLOT_LIFE;
use crate::fleet::LEASE;

/// How long an episode keeps its rules after the last share under them:
/// a replica under other rules is refused meanwhile. A replica whose
/// processes' breakers are open shares every
/// [`SHARE_EVERY`](crate::fleet::SHARE_EVERY), so rules unheard for a
/// [`LEASE`] have no replica left that holds them.
pub const RULES_HELD_FOR: std::time::Duration = LEASE;

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
    /// Slots granted by a daemon that kept no holders (an earlier version),
    /// when each was: they count until their [`SLOT_LIFE`] ends. Always
    /// written, as that version cannot read an episode without it.
    #[serde(default)]
    pub out: Vec<u64>,
    /// The replicas holding slots of this half-open, and which.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub replicas: Vec<Holder>,
    /// Trials of this half-open whose outcome was reported.
    pub settled: u32,
    /// Of those, the ones that succeeded.
    pub successes: u32,
    /// The rules it runs under (none before its first share).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rules: Option<Rules>,
}

/// One replica's slots out.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Holder {
    /// The replica's name in the store.
    pub name: String,
    /// Slots of this half-open it was granted and has not settled: when
    /// each was. One not settled within [`SLOT_LIFE`] is free again.
    pub out: Vec<u64>,
}

/// What a replica told the store of itself at its last share.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Heard {
    /// The rules its policy gives the breaker.
    pub rules: Rules,
    /// Asks for a slot it could not grant: its demand.
    pub wanted: u32,
    /// When (the store's ms).
    pub at: u64,
}

impl Heard {
    /// What `share`, merged at `now`, says of its replica.
    pub fn of(share: &Share, now: u64) -> Self {
        Self {
            rules: share.rules,
            wanted: share.wanted,
            at: now,
        }
    }

    /// Whether it is old enough at `now` for the store to forget. A word
    /// from the store's future (its clock stepped back since) is of no
    /// age anyone can tell: forgotten too, its replica's next share says
    /// it anew.
    pub fn is_stale_at(&self, now: u64) -> bool {
        self.at > now || now - self.at >= SLOT_LIFE.as_millis() as u64
    }

    fn is_fresh_at(&self, now: u64, within: std::time::Duration) -> bool {
        self.at <= now && now - self.at < within.as_millis() as u64
    }
}

/// Each replica's [`Heard`], by its name.
pub type HeardFrom = std::collections::BTreeMap<String, Heard>;

/// A share refused: the episode runs under rules a replica still shares
/// under, and the sharing replica's are others.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the fleet breaker's shared state runs under {held}, which another daemon replica still applies, and this replica's policy says {mine}: it decides alone until they agree")]
pub struct OtherRules {
    /// The episode's rules.
    pub held: Rules,
    /// The refused share's.
    pub mine: Rules,
}

/// The breaker's settings the store applies, from the policy's
/// `circuitBreaker` block (every replica sends its own, so a policy
/// change reaches the store with the first replica that has it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Rules {
    /// `openTimeout`, in ms.
    pub open_timeout_ms: u64,
    /// `halfOpenMaxCalls`: trials out at once, fleet-wide (at least 1).
    pub max_trials: u32,
    /// `successThreshold`: successes that close it (at least 1).
    pub success_threshold: u32,
}

impl fmt::Display for Rules {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "circuitBreaker openTimeoutMs {}, halfOpenMaxCalls {}, successThreshold {}",
            self.open_timeout_ms, self.max_trials, self.success_threshold
        )
    }
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
    /// Merges `share` from the replica named `replica` at the store's time
    /// `now` (ms), with what the store `heard` from every replica: what its
    /// processes' trials and breakers change, then the slots granted to it
    /// (its part of `halfOpenMaxCalls` out at once fleet-wide, by demand,
    /// and no more in one half-open than that or `successThreshold`, if
    /// more). A share under other rules than another replica still shares
    /// under is refused, and changes nothing. The caller keeps
    /// [`Heard::of`] the share for the next merge.
    pub fn merge(
        &mut self,
        replica: &str,
        share: &Share,
        heard: &HeardFrom,
        now: u64,
    ) -> Result<u32, OtherRules> {
        self.take_rules(replica, share.rules, heard, now)?;
        self.no_later_than(now);
        self.free_lost_slots(now);
        if share.epoch == self.epoch && self.phase == EpisodePhase::HalfOpen {
            self.settle(replica, share, now);
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
        Ok(self.grant(replica, share, heard, now))
    }

    /// Takes `rules` as the episode's, unless it holds others that another
    /// replica shared under within [`RULES_HELD_FOR`].
    fn take_rules(
        &mut self,
        replica: &str,
        rules: Rules,
        heard: &HeardFrom,
        now: u64,
    ) -> Result<(), OtherRules> {
        if let Some(held) = self.rules.filter(|&held| held != rules) {
            let still_held = heard.iter().any(|(name, them)| {
                name != replica && them.rules == held && them.is_fresh_at(now, RULES_HELD_FOR)
            });
            if still_held {
                return Err(OtherRules { held, mine: rules });
            }
        }
        self.rules = Some(rules);
        Ok(())
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
        let slots = self.replicas.iter_mut().flat_map(|holder| holder.out.iter_mut());
        for at in self.out.iter_mut().chain(slots) {
            *at = (*at).min(now);
        }
    }

    /// Frees the slots not settled within their [`SLOT_LIFE`] (lost with
    /// their holders).
    fn free_lost_slots(&mut self, now: u64) {
        let life = SLOT_LIFE.as_millis() as u64;
        let alive = |at: &u64| now.saturating_sub(*at) < life;
        self.out.retain(alive);
        for holder in &mut self.replicas {
            holder.out.retain(alive);
        }
        self.replicas.retain(|holder| !holder.out.is_empty());
    }

    /// Trial slots out, fleet-wide.
    pub fn slots_out(&self) -> u32 {
        let held: usize = self.replicas.iter().map(|holder| holder.out.len()).sum();
        (held + self.out.len()) as u32
    }

    /// The replica's trial outcomes of this half-open: a failure opens it
    /// again, the `successThreshold`-th success closes it. Its settled and
    /// unused slots are freed, its oldest first.
    fn settle(&mut self, replica: &str, share: &Share, now: u64) {
        let mut freed = share.settled.saturating_add(share.unused) as usize;
        if let Some(holder) = self.replicas.iter_mut().find(|holder| holder.name == replica) {
            let own = freed.min(holder.out.len());
            holder.out.drain(..own);
            freed -= own;
        }
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

    /// The slots granted to `replica` for its share: what is free, up to
    /// its part of `halfOpenMaxCalls` by demand (at least one while it
    /// wants any), less what it holds.
    fn grant(&mut self, replica: &str, share: &Share, heard: &HeardFrom, now: u64) -> u32 {
        if self.phase != EpisodePhase::HalfOpen || share.wanted == 0 {
            return 0;
        }
        let rules = share.rules;
        let max_trials = rules.max_trials.max(1);
        let trials = max_trials.max(rules.success_threshold);
        let out = self.slots_out();
        let free =
            (max_trials.saturating_sub(out)).min(trials.saturating_sub(out.saturating_add(self.settled)));
        let others: u64 = heard
            .iter()
            .filter(|&(name, them)| name != replica && them.is_fresh_at(now, LEASE))
            .map(|(_, them)| u64::from(them.wanted))
            .sum();
        let wanted = u64::from(share.wanted);
        let part = (u64::from(max_trials) * wanted / (wanted + others)).max(1);
        let at = match self.replicas.iter().position(|holder| holder.name == replica) {
            Some(at) => at,
            None => {
                self.replicas.push(Holder {
                    name: replica.to_owned(),
                    out: Vec::new(),
                });
                self.replicas.len() - 1
            }
        };
        let holder = &mut self.replicas[at];
        let room = part
            .saturating_sub(holder.out.len() as u64)
            .min(u64::from(u32::MAX)) as u32;
        let granted = share.wanted.min(free).min(room);
        holder.out.extend(std::iter::repeat_n(now, granted as usize));
        if holder.out.is_empty() {
            self.replicas.swap_remove(at);
        }
        granted
    }

    fn enter(&mut self, phase: EpisodePhase) {
        self.phase = phase;
        self.epoch = self.epoch.wrapping_add(1);
        self.out.clear();
        self.replicas.clear();
        self.settled = 0;
        self.successes = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An episode and what the store heard beside it, merged into as the
    /// store merges.
    #[derive(Debug, Clone, Default, PartialEq)]
    struct Stored {
        episode: Episode,
        heard: HeardFrom,
    }

    impl Stored {
        fn merge(&mut self, replica: &str, share: &Share, now: u64) -> Result<u32, OtherRules> {
            let granted = self.episode.merge(replica, share, &self.heard, now)?;
            self.heard.insert(replica.to_owned(), Heard::of(share, now));
            Ok(granted)
        }
    }

    impl std::ops::Deref for Stored {
        type Target = Episode;
        fn deref(&self) -> &Episode {
            &self.episode
        }
    }

    impl std::ops::DerefMut for Stored {
        fn deref_mut(&mut self) -> &mut Episode {
            &mut self.episode
        }
    }

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

    /// A share of `epoch` wanting `n` slots from a replica whose policy
    /// gives the breaker a shorter `openTimeout` than [`RULES`].
    fn under_shorter_rules(epoch: u64, n: u32) -> Share {
        Share {
            rules: Rules {
                open_timeout_ms: 10_000,
                ..RULES
            },
            ..wanting(epoch, n)
        }
    }

    /// A share of `epoch` that wants `n` slots.
    fn wanting(epoch: u64, n: u32) -> Share {
        Share {
            wanted: n,
            ..share(epoch)
        }
    }

    /// An episode half-open since `at`, as two replicas find it.
    fn half_open(at: u64) -> Stored {
        let mut episode = Stored::default();
        let opened = Share {
            opened_ago_ms: Some(0),
            ..share(0)
        };
        assert_eq!(
            episode.merge("a", &opened, at - RULES.open_timeout_ms).unwrap(),
            0
        );
        assert_eq!(episode.phase, EpisodePhase::Open { since: at - 30_000 });
        episode.merge("a", &share(episode.epoch), at).unwrap();
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
        assert_eq!(episode.merge("a", &want(6), 40_010).unwrap(), 6);
        assert_eq!(
            episode.merge("b", &want(100), 40_020).unwrap(),
            4,
            "ten out at once, fleet-wide"
        );
        assert_eq!(episode.merge("b", &want(100), 40_030).unwrap(), 0);
        // Two settle: two more may go, until this half-open has had its ten.
        let settled = Share {
            settled: 2,
            succeeded: 2,
            wanted: 5,
            ..share(epoch)
        };
        assert_eq!(
            episode.merge("b", &settled, 40_040).unwrap(),
            0,
            "ten this half-open already"
        );
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
        assert_eq!(episode.merge("a", &want(10), 40_000).unwrap(), 10);
        let returned = Share {
            unused: 4,
            wanted: 2,
            ..share(epoch)
        };
        assert_eq!(
            episode.merge("a", &returned, 40_100).unwrap(),
            2,
            "four unused come back"
        );
        let life = SLOT_LIFE.as_millis() as u64;
        assert_eq!(episode.merge("a", &want(10), 40_000 + life - 1).unwrap(), 2);
        // The first eight are lost with their holders; the last two are still out.
        assert_eq!(episode.merge("a", &want(10), 40_100 + life).unwrap(), 8);
    }

    #[test]
    fn a_failed_trial_anywhere_opens_it_again_and_stale_outcomes_do_not_count() {
        let mut episode = half_open(40_000);
        let epoch = episode.epoch;
        episode.merge("a", &wanting(epoch, 3), 40_000).unwrap();
        let failed = Share {
            failed: 1,
            settled: 1,
            ..share(epoch)
        };
        episode.merge("a", &failed, 40_050).unwrap();
        assert_eq!(episode.phase, EpisodePhase::Open { since: 40_050 });
        // The other replica's successes, from the half-open that failed.
        let late = Share {
            succeeded: 2,
            settled: 2,
            ..share(epoch)
        };
        episode.merge("a", &late, 40_060).unwrap();
        assert_eq!(
            (episode.phase, episode.successes),
            (EpisodePhase::Open { since: 40_050 }, 0)
        );
        episode.merge("a", &share(episode.epoch), 70_050).unwrap();
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
        episode.merge("a", &wanting(epoch, 3), 40_000).unwrap();
        episode.merge("a", &trial(2), 40_100).unwrap();
        assert_eq!(episode.phase, EpisodePhase::HalfOpen);
        episode.merge("a", &trial(1), 40_150).unwrap();
        assert_eq!(
            (episode.phase, episode.closed_at),
            (EpisodePhase::Closed, Some(40_150))
        );

        // A breaker that opened before the close does not open it again.
        let before = Share {
            opened_ago_ms: Some(100),
            ..share(episode.epoch)
        };
        episode.merge("a", &before, 40_200).unwrap();
        assert_eq!(episode.phase, EpisodePhase::Closed);
        let after = Share {
            opened_ago_ms: Some(10),
            ..share(episode.epoch)
        };
        episode.merge("a", &after, 40_200).unwrap();
        assert_eq!(episode.phase, EpisodePhase::Open { since: 40_190 });
    }

    #[test]
    fn a_store_clock_that_steps_back_an_hour_delays_nothing_by_an_hour() {
        let hour = 3_600_000;
        let mut episode = Stored::default();
        let opened = Share {
            opened_ago_ms: Some(0),
            ..share(0)
        };
        episode.merge("a", &opened, 10 * hour).unwrap();
        // The store's clock is set back an hour: the open counts from the
        // first share after, and half-opens one openTimeout later.
        let back = 9 * hour;
        episode.merge("a", &share(episode.epoch), back).unwrap();
        assert_eq!(episode.phase, EpisodePhase::Open { since: back });
        episode
            .merge("a", &share(episode.epoch), back + RULES.open_timeout_ms)
            .unwrap();
        assert_eq!(episode.phase, EpisodePhase::HalfOpen);
        // Slots granted before a step back are free one slot life after it.
        let epoch = episode.epoch;
        let want = |n| Share {
            wanted: n,
            ..share(epoch)
        };
        assert_eq!(episode.merge("a", &want(10), back + hour).unwrap(), 10);
        let life = SLOT_LIFE.as_millis() as u64;
        assert_eq!(episode.merge("a", &want(10), back).unwrap(), 0);
        assert_eq!(episode.merge("a", &want(10), back + life).unwrap(), 10);
    }

    #[test]
    fn slots_go_to_replicas_by_demand_not_to_whoever_asks_first() {
        for (first, second) in [("a", "b"), ("b", "a")] {
            let mut episode = Stored::default();
            let opened = Share {
                opened_ago_ms: Some(0),
                ..share(0)
            };
            episode.merge("a", &opened, 10_000).unwrap();
            let epoch = episode.epoch;
            let want = |n| Share {
                wanted: n,
                ..share(epoch)
            };
            let demand = |replica| if replica == "a" { 90 } else { 10 };
            // While open, each tells how many of its processes wait.
            assert_eq!(episode.merge("a", &want(90), 39_900).unwrap(), 0);
            assert_eq!(episode.merge("b", &want(10), 39_950).unwrap(), 0);
            let granted = [first, second].map(|replica| {
                let epoch = episode.epoch;
                let share = Share {
                    wanted: demand(replica),
                    ..share(epoch)
                };
                episode.merge(replica, &share, 40_000).unwrap()
            });
            let expected = [first, second].map(|replica| if replica == "a" { 9 } else { 1 });
            assert_eq!(granted, expected, "{first} shared first");
        }
    }

    #[test]
    fn a_replica_under_other_rules_is_refused_until_none_shares_under_the_episodes() {
        let mut episode = half_open(40_000);
        let before = episode.clone();
        let mine = under_shorter_rules(episode.epoch, 5);
        let shorter = mine.rules;
        let refused = episode.merge("b", &mine, 40_500).unwrap_err();
        assert_eq!(
            refused,
            OtherRules {
                held: RULES,
                mine: shorter
            }
        );
        assert_eq!(episode, before, "a refused share changes nothing");
        assert!(refused.to_string().contains("openTimeoutMs 30000"), "{refused}");

        // A replica under the episode's rules keeps it theirs...
        episode.merge("a", &share(episode.epoch), 40_900).unwrap();
        assert!(episode.merge("b", &mine, 41_800).is_err());
        // ...until none has shared under them for a lease: the reload has
        // reached them all, and the episode goes on under the new rules.
        let held_for = RULES_HELD_FOR.as_millis() as u64;
        let granted = episode.merge("b", &mine, 40_900 + held_for).unwrap();
        assert_eq!(
            (episode.rules, episode.phase, granted),
            (Some(shorter), EpisodePhase::HalfOpen, 5)
        );
        assert!(episode
            .merge("a", &share(episode.epoch), 40_900 + held_for + 10)
            .is_err());
    }

    #[test]
    fn an_episode_an_earlier_daemon_wrote_is_read_with_its_slots_still_counted() {
        let text = r#"{"phase":{"state":"half-open"},"epoch":3,"closedAt":null,"out":[40000,40000,40000,40000,40000,40000,40000,40000],"settled":0,"successes":0}"#;
        let mut episode = Stored {
            episode: serde_json::from_str(text).unwrap(),
            ..Stored::default()
        };
        let want = Share {
            wanted: 5,
            ..share(3)
        };
        assert_eq!(episode.merge("a", &want, 40_100).unwrap(), 2, "eight of ten out");
        let life = SLOT_LIFE.as_millis() as u64;
        assert_eq!(
            episode.merge("a", &want, 40_000 + life).unwrap(),
            5,
            "theirs lapse; its own two are still out"
        );
    }

    #[test]
    fn a_word_from_the_stores_future_is_neither_demand_nor_rules_held() {
        // Written before a failover to a store a minute behind, by a
        // replica under the old rules that has gone since.
        let mut episode = half_open(40_000);
        let gone = Heard {
            rules: RULES,
            wanted: 90,
            at: 100_000,
        };
        assert!(gone.is_stale_at(41_000));
        episode.heard.insert("gone".into(), gone);
        let mine = under_shorter_rules(episode.epoch, 10);
        assert_eq!(
            episode.merge("b", &mine, 41_000),
            Ok(10),
            "all its asks, and its rules"
        );
    }

    #[test]
    fn the_store_keeps_it_as_json() {
        let episode = half_open(40_000);
        let text = serde_json::to_string(&episode.episode).unwrap();
        assert_eq!(serde_json::from_str::<Episode>(&text).unwrap(), episode.episode);
        assert!(text.contains("\"state\":\"half-open\""), "{text}");
        assert!(
            text.contains("\"out\":[]"),
            "the previous version reads no episode without it: {text}"
        );
    }
}
