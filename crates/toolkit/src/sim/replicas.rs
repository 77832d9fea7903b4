//! The daemon replicas of a fleet-paced strategy, alone or sharing their
//! pace through a store, as the daemon's replicas do through Redis.
//!
//! The replicas run the daemon's controller (`FleetController`), its
//! fleet breaker (`FleetBreaker`), and its exchanges with the store
//! ([`contribute_at`](FleetController::contribute_at),
//! [`shared_at`](FleetController::shared_at) for the pace;
//! [`share_at`](FleetBreaker::share_at), [`Episode::merge`],
//! [`adopt_at`](FleetBreaker::adopt_at) for the breaker); [`StoreModel`] answers
//! as the daemon's Redis scripts do, after half the store's round trip each
//! way. Without a store each replica keeps its own fleet breaker.

use std::collections::VecDeque;

use stormguard_core::fleet::breaker::episode::{EpisodeAnswer, OtherRules, Share};
use stormguard_core::fleet::breaker::{BreakerVerdict, FleetBreaker};
use stormguard_core::fleet::replicas::{Contribution, Published, Shared};
use stormguard_core::fleet::{self, Ask, FleetController, Grant, IDLE, SHARE_EVERY};
use stormguard_core::policy::ValidPolicy;
use tokio::time::Instant;

use super::scenario::{Scenario, RESTART_APART};
use super::store::StoreModel;
use super::time::nanos;

/// The replicas, and the store if they share one.
pub(super) struct Replicas<'a> {
    replicas: Vec<Replica<'a>>,
    store: Option<StoreModel>,
    /// Whether the replicas pace the processes' gates.
    paces: bool,
}

/// A daemon replica: as the daemon does, it starts a controller at the
/// first ask and drops it once the controller is idle.
struct Replica<'a> {
    policy: &'a ValidPolicy,
    controller: Option<FleetController<u32>>,
    /// Its fleet breaker, from the first open breaker reported.
    breaker: Option<FleetBreaker<u32>>,
    exchange: Exchange,
    /// Rates it published, on their way to the store: (arrival, rate).
    publishing: VecDeque<(u64, Published)>,
    /// Rates the store pushed to it, on their way: (arrival, rate).
    pushed: VecDeque<(u64, Published)>,
    /// When it restarts, if it is to: what it holds in memory is lost.
    restarts_at: Option<u64>,
    /// How many times it restarted.
    life: u32,
}

/// A replica's exchange with the store: one at a time, every
/// [`SHARE_EVERY`] at most.
enum Exchange {
    /// Neither paced nor breaking, or no store: nothing to exchange.
    Idle,
    /// Contributes at its next event.
    Due,
    /// Its contribution reaches the store at its next event.
    Travelling(Mine, u64),
    /// The store's answers reach it at its next event (boxed: a published
    /// rate carries its law's handover).
    Returning(Mine, Box<Answers>, u64),
}

/// What a replica tells the store in one exchange: its pace's contribution
/// and its fleet breaker's share, whichever it has.
struct Mine {
    pace: Option<Contribution>,
    breaker: Option<Share>,
}

/// The store's answers to them.
struct Answers {
    pace: Option<Shared>,
    breaker: Option<Result<EpisodeAnswer, OtherRules>>,
}

/// What the engine is to schedule after a replica's step.
pub(super) enum Next {
    /// The replica's next exchange event, at this time.
    Exchange(u64),
    /// A published rate reaches the store at this time.
    Publish(u64),
}

impl<'a> Replicas<'a> {
    /// The scenario's replicas under `policy`, pacing the gates if `paces`,
    /// and its store if they share one.
    pub(super) fn new(scenario: &Scenario, policy: &'a ValidPolicy, paces: bool) -> Self {
        let count = scenario.replicas.max(1);
        Self {
            paces,
            replicas: (0..count)
                .map(|r| Replica {
                    policy,
                    controller: None,
                    breaker: None,
                    exchange: Exchange::Idle,
                    publishing: VecDeque::new(),
                    pushed: VecDeque::new(),
                    restarts_at: scenario
                        .replicas_restart_at
                        .map(|first| nanos(first + RESTART_APART * r)),
                    life: 0,
                })
                .collect(),
            store: scenario.pace_store.map(|round_trip| {
                StoreModel::new(count as usize, round_trip, scenario.store_lost_at)
                    .restarted_at(scenario.store_restarted_at)
                    .failed_over(scenario.store_failover)
            }),
        }
    }

    /// Restarts replica `r` if its time has come: as a Deployment's
    /// rollout stops a pod, it gives up the paces it owned on its way out.
    fn restart_if_due(&mut self, r: usize, t: u64) {
        let Some(ended) = self.replicas[r].restart_if_due(t) else {
            return;
        };
        if let Some(store) = self.store.as_mut().filter(|store| !store.is_lost_at(t)) {
            store.release((r, ended), t);
        }
    }

    pub(super) fn len(&self) -> usize {
        self.replicas.len()
    }

    /// Process `process` asks replica `r` at `t`, as the daemon answers a
    /// pace ask: the fleet breaker's word if it reports a fleet-scoped
    /// breaker, and its share of the rate if its gate asks or the fleet's
    /// breaker closes it. With a store, the replica's first exchange if it
    /// was not exchanging yet.
    pub(super) fn ask_at(
        &mut self,
        r: usize,
        process: u32,
        ask: Ask,
        t: u64,
        now: Instant,
    ) -> (Grant, Option<BreakerVerdict>, Option<Next>) {
        self.restart_if_due(r, t);
        let replica = &mut self.replicas[r];
        let verdict = ask.breaker.map(|report| {
            if replica.breaker.as_ref().is_some_and(|b| b.is_idle_at(now, IDLE)) {
                replica.breaker = None;
            }
            replica
                .breaker
                .get_or_insert_with(|| FleetBreaker::new_at(&replica.policy.circuit_breaker, self.paces, now))
                .ask_at(process, report, now)
        });
        let grant = fleet::answer(self.paces, ask.tally.is_some(), verdict, || {
            if replica.controller.as_ref().is_some_and(|c| c.is_idle_at(now)) {
                replica.controller = None;
            }
            let grant = replica
                .controller
                .get_or_insert_with(|| FleetController::new_at(replica.policy, now))
                .ask_at(process, ask.tally.unwrap_or_default(), now);
            Ok::<_, std::convert::Infallible>(grant)
        });
        let Ok(grant) = grant;
        let start = self.store.is_some() && matches!(replica.exchange, Exchange::Idle);
        if start {
            replica.exchange = Exchange::Due;
        }
        (grant, verdict, start.then_some(Next::Exchange(t)))
    }

    /// The next step of replica `r`'s exchange with the store at `t`.
    pub(super) fn exchange(&mut self, r: usize, t: u64, now: Instant) -> Vec<Next> {
        self.restart_if_due(r, t);
        let Some(store) = self.store.as_mut() else {
            return Vec::new();
        };
        let half = store.round_trip / 2;
        let replica = &mut self.replicas[r];
        match std::mem::replace(&mut replica.exchange, Exchange::Idle) {
            Exchange::Idle => Vec::new(),
            Exchange::Due => {
                if replica.controller.as_ref().is_some_and(|c| c.is_idle_at(now)) {
                    replica.controller = None;
                }
                let mine = Mine {
                    pace: replica.controller.as_mut().map(|c| c.contribute_at(now)),
                    breaker: replica.breaker.as_mut().and_then(|b| b.share_at(now)),
                };
                if mine.pace.is_none() && mine.breaker.is_none() {
                    return Vec::new();
                }
                replica.exchange = Exchange::Travelling(mine, t);
                vec![Next::Exchange(t + half)]
            }
            Exchange::Travelling(mine, began) if store.is_lost_at(t) => {
                // The calls fail; the daemon tries again at its next turn,
                // its breaker's news with it.
                if let (Some(share), Some(breaker)) = (mine.breaker, replica.breaker.as_mut()) {
                    breaker.unshare(&share, now);
                }
                replica.exchange = Exchange::Due;
                vec![Next::Exchange((began + nanos(SHARE_EVERY)).max(t))]
            }
            Exchange::Travelling(mine, began) => {
                let answers = Box::new(Answers {
                    pace: mine
                        .pace
                        .as_ref()
                        .map(|pace| store.answer((r, replica.life), pace, t)),
                    breaker: mine
                        .breaker
                        .as_ref()
                        .map(|share| store.merge((r, replica.life), share, t)),
                });
                replica.exchange = Exchange::Returning(mine, answers, began);
                vec![Next::Exchange(t + (store.round_trip - half))]
            }
            Exchange::Returning(mine, answers, began) => {
                replica.exchange = Exchange::Due;
                let next = Next::Exchange((began + nanos(SHARE_EVERY)).max(t));
                match (&answers.breaker, &mine.breaker, replica.breaker.as_mut()) {
                    (Some(Ok(answer)), _, Some(breaker)) => breaker.adopt_at(answer, now),
                    (Some(Err(_)), Some(share), Some(breaker)) => breaker.unshare(share, now),
                    _ => {}
                }
                let published = match (&mine.pace, &answers.pace, replica.controller.as_mut()) {
                    (Some(mine), Some(shared), Some(controller)) => controller.shared_at(mine, shared, now),
                    _ => None,
                };
                match published {
                    Some(rate) => {
                        let arrives = t + half;
                        replica.publishing.push_back((arrives, rate));
                        vec![next, Next::Publish(arrives)]
                    }
                    None => vec![next],
                }
            }
        }
    }

    /// Replica `r`'s published rate reaches the store at `t`, which pushes
    /// it to every replica (they receive it half a round trip later).
    pub(super) fn publish(&mut self, r: usize, t: u64) -> Vec<(usize, u64)> {
        self.restart_if_due(r, t);
        let replica = &mut self.replicas[r];
        let (Some((_, rate)), Some(store)) = (replica.publishing.pop_front(), self.store.as_mut()) else {
            return Vec::new();
        };
        if store.is_lost_at(t) {
            return Vec::new();
        }
        if !store.publish((r, replica.life), rate, t) {
            return Vec::new();
        }
        let arrives = t + store.round_trip / 2;
        let mut pushed = Vec::new();
        for (other, replica) in self.replicas.iter_mut().enumerate() {
            if other != r && replica.controller.is_some() {
                replica.pushed.push_back((arrives, rate));
                pushed.push((other, arrives));
            }
        }
        pushed
    }

    /// A rate the store pushed reaches replica `r` at `t`.
    pub(super) fn pushed(&mut self, r: usize, t: u64, now: Instant) {
        self.restart_if_due(r, t);
        let replica = &mut self.replicas[r];
        if let (Some((_, rate)), Some(controller)) = (replica.pushed.pop_front(), replica.controller.as_mut())
        {
            controller.published_at(rate, now);
        }
    }
}

impl Replica<'_> {
    /// At its first event from its restart on, the replica has lost what
    /// it held in memory: its controller, its fleet breaker, its exchange
    /// under way and the rates on their way to or from it. What the store
    /// holds (the published rate and its handover, the breaker's episode)
    /// outlives it. Whether it restarted, and the incarnation that ended.
    fn restart_if_due(&mut self, t: u64) -> Option<u32> {
        if self.restarts_at.is_none_or(|at| t < at) {
            return None;
        }
        let ended = self.life;
        self.restarts_at = None;
        self.life += 1;
        {
            self.controller = None;
            self.breaker = None;
            self.exchange = Exchange::Idle;
            self.publishing.clear();
            self.pushed.clear();
        }
        Some(ended)
    }
}
