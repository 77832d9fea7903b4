//! Keeping this replica's paced dependencies in step with the store: every
//! [`SHARE_EVERY`] each paced dependency's contribution goes to the store
//! and its answer to the controller (and the owner's rate back to the
//! store), and each fleet-scoped breaker's share to its episode; the rates
//! owners publish arrive between turns on a channel.

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use stormguard_core::fleet::breaker::episode::Share;
use stormguard_core::fleet::SHARE_EVERY;
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio::time::{Instant, MissedTickBehavior};

use super::Fleet;
use crate::pace_store::{PaceStore, StoreError};

/// Failures logged at most once in this long: the metric counts them all.
const COMPLAIN_EVERY: Duration = Duration::from_secs(10);

/// Exchanges with the store for every paced dependency, every
/// [`SHARE_EVERY`], until the daemon shuts down.
pub async fn share(fleet: Arc<Fleet>, store: Arc<PaceStore>, shutdown: watch::Receiver<bool>) {
    let mut ticks = tokio::time::interval(SHARE_EVERY);
    ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut complained: Option<Instant> = None;
    loop {
        ticks.tick().await;
        if *shutdown.borrow() {
            return;
        }
        let mut turns = JoinSet::new();
        for service in fleet.paced_services() {
            turns.spawn(turn(fleet.clone(), store.clone(), service));
        }
        for (service, share) in fleet.breakers().shares_at(Instant::now()) {
            turns.spawn(breaker_turn(fleet.clone(), store.clone(), service, share));
        }
        while let Some(outcome) = turns.join_next().await {
            if let Ok(Err(error)) = outcome {
                if complained.is_none_or(|at| at.elapsed() >= COMPLAIN_EVERY) {
                    match error {
                        StoreError::OtherRules { .. } => tracing::warn!("{error}"),
                        _ => tracing::warn!("{error}; pacing alone until it answers"),
                    }
                    complained = Some(Instant::now());
                }
            }
        }
    }
}

/// At shutdown: gives up every pace this replica owns, so that another
/// replica takes it at its next exchange, with what this one's law
/// learned, rather than when this one's lease ends.
/// Every service at once, so that a store that does not answer costs one
/// timeout, not one a service.
pub async fn release(fleet: &Fleet, store: &PaceStore) {
    let services = fleet.paced_services();
    let released =
        futures_util::future::join_all(services.iter().map(|service| store.release(service))).await;
    for (service, released) in services.iter().zip(released) {
        match released {
            Ok(true) => tracing::info!(
                service,
                "shutting down: gave up the pace for another replica to take"
            ),
            Ok(false) => {}
            Err(error) => tracing::warn!(
                service,
                "{error}; another replica takes the pace when this one's lease ends"
            ),
        }
    }
}

/// One dependency's exchange, and the owner's publishing.
async fn turn(fleet: Arc<Fleet>, store: Arc<PaceStore>, service: String) -> Result<(), StoreError> {
    let contributed = Instant::now();
    let Some(mine) = fleet.contribute(&service, contributed) else {
        return Ok(());
    };
    let shared = match store.exchange(&service, &mine).await {
        Ok(shared) => shared,
        Err(error) => {
            // A call that may have written (its answer timed out) is not
            // sent again: its outcomes would count twice.
            if error.wrote_nothing() {
                fleet.unsent(&service, &mine, contributed);
            }
            return Err(error);
        }
    };
    if let Some(rate) = fleet.shared(&service, &mine, &shared, Instant::now()) {
        store.publish(&service, rate).await?;
    }
    Ok(())
}

/// One fleet-scoped breaker's exchange: its share merged into the
/// dependency's episode, and the episode back. A share that surely did not
/// reach the store goes with the next turn; one that may have (its answer
/// timed out) is dropped rather than counted twice: trials it settled then
/// free their slots after their life in the store.
async fn breaker_turn(
    fleet: Arc<Fleet>,
    store: Arc<PaceStore>,
    service: String,
    share: Share,
) -> Result<(), StoreError> {
    match store.share_breaker(&service, &share).await {
        Ok(answer) => {
            fleet.breakers().adopt_at(&service, &answer, Instant::now());
            Ok(())
        }
        Err(error) => {
            if error.wrote_nothing() {
                fleet.breakers().unshare(&service, &share, Instant::now());
            }
            Err(error)
        }
    }
}

/// Hands every rate an owner publishes to this replica's controller as it
/// arrives, while this replica paces anything: the subscription is made
/// when a dependency comes to be paced and dropped when none is, so that an
/// idle fleet holds no connection to the store. Subscribes again a second
/// after the channel breaks.
pub async fn listen(fleet: Arc<Fleet>, store: Arc<PaceStore>) {
    let mut looks = tokio::time::interval(SHARE_EVERY);
    looks.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        while fleet.paced() == 0 {
            looks.tick().await;
        }
        match store.subscribe().await {
            Ok(pushes) => {
                let mut pushes = std::pin::pin!(pushes);
                loop {
                    tokio::select! {
                        push = pushes.next() => match push {
                            Some((service, rate)) => fleet.published(&service, rate, Instant::now()),
                            None => break,
                        },
                        _ = looks.tick() => if fleet.paced() == 0 {
                            break;
                        },
                    }
                }
            }
            Err(_) => {
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::Registry;
    use crate::pace_store::Access;
    use stormguard_core::policy::{OverloadWhen, RetryPolicy, ValidPolicy};
    use stormguard_core::wire::PaceAsk;

    /// Outcomes whose exchange the store surely never took go with the
    /// next one; before, they were lost with the failed call.
    #[tokio::test]
    async fn outcomes_the_store_never_took_go_with_the_next_exchange() {
        let registry = Registry::new();
        let fleet = Fleet::sharing(&registry);
        let mut policy = RetryPolicy::default();
        policy.gate.enabled = true;
        policy.gate.overload_when = OverloadWhen::AnyRefusal;
        let policy = ValidPolicy::try_from(policy).unwrap();
        let ask = PaceAsk {
            service: "payments".into(),
            instance: "pod-a".into(),
            sent: 5,
            accepted: 3,
            overloaded: 2,
            timed_out: 0,
            waiting: 1,
            shed: Default::default(),
            demand: Default::default(),
            watching: false,
            gate_off: false,
            breaker: None,
        };
        let now = Instant::now();
        fleet.ask(&ask, &policy, now).unwrap();
        let untried = Fleet::sharing(&Registry::new());
        untried.ask(&ask, &policy, now).unwrap();
        let expected = untried.contribute("payments", now).unwrap().tallies;
        assert!(expected.outcomes.sent > 0 && expected.overloaded_since.is_some());
        // Bound but never listening: the store refuses every connection.
        let closed = tokio::net::TcpSocket::new_v4().unwrap();
        closed.bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let url = format!("redis://{}", closed.local_addr().unwrap());
        let store = Arc::new(PaceStore::new(&url, Access::default(), "a".into(), &registry).unwrap());
        let error = turn(fleet.clone(), store, "payments".into()).await.unwrap_err();
        assert!(error.wrote_nothing(), "{error}");
        let next = fleet.contribute("payments", now).expect("still paced");
        assert_eq!(
            next.tallies, expected,
            "the failed exchange's outcomes, and its overload's window"
        );
    }
}
