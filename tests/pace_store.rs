//! The daemon's pace store against a real Redis (Debian's redis-server, on
//! a free loopback port): what replicas exchange through it, ownership and
//! its lapse, a replica that falls silent, and a store that goes away.

mod common;

use std::time::{Duration, Instant};

use common::redis::Redis;

use stormguard::metrics::Registry;
use stormguard::pace_store::{Access, PaceStore, STORE_TIMEOUT};
use stormguard::reports::REMEMBERED;
use stormguard_core::fleet::replicas::{Contribution, Demand, Outcomes, Published, Tallies};
use stormguard_core::fleet::LEASE;

fn contribution(sent: u64, accepted: u64, want: f64, members: u32) -> Contribution {
    Contribution {
        tallies: Tallies {
            outcomes: Outcomes {
                sent,
                accepted,
                overloaded: sent - accepted,
                timed_out: 0,
            },
            overloaded_since: (sent > accepted).then_some(Duration::from_millis(30)),
        },
        demand: Demand {
            want,
            members,
            classes: Some([0.0, want, 0.0]),
        },
    }
}

/// A replica's demand as the store answers it: all of the default class.
fn default_class(want: f64, members: u32) -> Demand {
    Demand {
        want,
        members,
        classes: Some([0.0, want, 0.0]),
    }
}

/// A connection to `redis` of its own, and its clock's seconds now: the
/// tests write what a replica from elsewhere, or another time, would.
async fn store_clock(redis: &Redis) -> (redis::aio::MultiplexedConnection, u64) {
    let client = redis::Client::open(redis.url()).unwrap();
    let mut connection = client.get_multiplexed_async_connection().await.unwrap();
    let (seconds, _): (u64, u64) = redis::cmd("TIME").query_async(&mut connection).await.unwrap();
    (connection, seconds)
}

/// A fleet's rate, past probing.
fn rate(rate: f64) -> Published {
    Published {
        rate,
        probing: false,
        handover: None,
    }
}

fn replica(redis: &Redis, name: &str) -> PaceStore {
    replica_counted(redis, name, &Registry::new())
}

fn replica_counted(redis: &Redis, name: &str, registry: &Registry) -> PaceStore {
    let access = Access {
        password: redis.password.clone(),
        ..Access::default()
    };
    PaceStore::new(&redis.url(), access, name.to_string(), registry).expect("a valid address")
}

/// What an owner publishes after its law heard a recovery begin: a rate
/// with the handover of what the law learned.
fn published_by_a_law() -> Published {
    let mut policy = stormguard_core::policy::RetryPolicy::default();
    policy.gate.enabled = true;
    let policy = stormguard_core::policy::ValidPolicy::try_from(policy).unwrap();
    let now = tokio::time::Instant::now();
    let mut owner = stormguard_core::fleet::FleetController::<String>::new_at(&policy, now);
    let shared = stormguard_core::fleet::replicas::Shared {
        taken: Some(contribution(10, 6, 50.0, 5).tallies),
        ..Default::default()
    };
    owner
        .shared_at(&contribution(10, 6, 50.0, 5), &shared, now)
        .expect("the owner publishes")
}

#[tokio::test]
async fn what_an_owner_learned_reaches_the_next_whole_and_a_torn_record_is_refused_and_counted() {
    let Some(redis) = Redis::start(None) else { return };
    let registry = Registry::new();
    let (a, b) = (replica(&redis, "a"), replica_counted(&redis, "b", &registry));
    a.exchange("inventory", &contribution(1, 1, 5.0, 1))
        .await
        .unwrap();
    let published = published_by_a_law();
    assert!(published.handover.is_some());
    assert!(a.publish("inventory", published).await.unwrap());
    let seen = b
        .exchange("inventory", &contribution(0, 0, 5.0, 1))
        .await
        .unwrap();
    let (carried, _) = seen.published.expect("the rate a published");
    assert_eq!(carried, published, "the rate and the handover, to the last bit");

    let (mut connection, seconds) = store_clock(&redis).await;
    let mut another_version = serde_json::to_value(published.handover.unwrap()).unwrap();
    another_version["version"] = 9.into();
    for (handover, reason) in [
        ("{\"version\":1,\"law\":".to_string(), "unreadable"),
        ("{\"version\":9,\"law\":null}".to_string(), "unreadable"),
        (another_version.to_string(), "version"),
    ] {
        let () = redis::cmd("SET")
            .arg("stormguard:pace:{inventory}:rate")
            .arg(format!("42 0 {} {handover}", seconds * 1000))
            .query_async(&mut connection)
            .await
            .unwrap();
        let seen = b
            .exchange("inventory", &contribution(0, 0, 5.0, 1))
            .await
            .expect("a handover that cannot be taken up does not fail the exchange");
        let (rate, _) = seen.published.expect("the rate is still read");
        assert_eq!((rate.rate, rate.handover), (42.0, None), "{handover}");
        let text = String::from_utf8(registry.encode(tokio::time::Instant::now())).unwrap();
        let counted = format!("stormguard_pace_store_handovers_refused_total{{reason=\"{reason}\"}}");
        assert!(text.contains(&counted), "{handover}: {text}");
    }
}

#[tokio::test]
async fn the_first_replica_owns_the_pace_and_takes_every_replicas_outcomes() {
    let Some(redis) = Redis::start(None) else { return };
    let (a, b) = (replica(&redis, "a"), replica(&redis, "b"));

    let first = a
        .exchange("inventory", &contribution(10, 8, 40.0, 4))
        .await
        .unwrap();
    let taken = first.taken.expect("a owns the pace");
    assert_eq!(
        (
            taken.outcomes.sent,
            taken.outcomes.accepted,
            taken.outcomes.overloaded
        ),
        (10, 8, 2)
    );
    let age = taken.overloaded_since.expect("an overload's window");
    assert!(
        age >= Duration::from_millis(30) && age < Duration::from_millis(500),
        "{age:?}"
    );
    assert!(first.others.is_empty() && first.published.is_none());

    let second = b
        .exchange("inventory", &contribution(6, 6, 12.5, 2))
        .await
        .unwrap();
    assert!(second.taken.is_none(), "b does not own it");
    assert_eq!(second.others, vec![default_class(40.0, 4)]);

    let third = a
        .exchange("inventory", &contribution(1, 1, 40.0, 4))
        .await
        .unwrap();
    let taken = third.taken.expect("a still owns it");
    assert_eq!(
        (taken.outcomes.sent, taken.outcomes.accepted),
        (7, 7),
        "b's outcomes and a's new ones"
    );
    assert_eq!(
        taken.overloaded_since, None,
        "nothing refused since a last took them"
    );
    assert_eq!(third.others, vec![default_class(12.5, 2)]);

    assert!(a.publish("inventory", rate(180.5)).await.unwrap());
    let fourth = b
        .exchange("inventory", &contribution(0, 0, 12.5, 2))
        .await
        .unwrap();
    let (published, age) = fourth.published.expect("the published rate");
    assert_eq!(published, rate(180.5));
    assert!(age < LEASE, "{age:?}");

    let other = b.exchange("payments", &contribution(0, 0, 1.0, 1)).await.unwrap();
    assert!(
        other.taken.is_some() && other.others.is_empty(),
        "each dependency has its own pace"
    );
}

/// A failover to a Redis whose clock is behind finds the newest overload
/// in its future: the owner still takes the tallies, the overload as just
/// begun, instead of an age it cannot read and a round's outcomes lost.
#[tokio::test]
async fn a_store_whose_clock_stepped_back_hands_over_the_tallies_with_the_overload_as_new() {
    let Some(redis) = Redis::start(None) else { return };
    let a = replica(&redis, "a");
    a.exchange("inventory", &contribution(0, 0, 1.0, 1))
        .await
        .unwrap();
    let (mut connection, seconds) = store_clock(&redis).await;
    let a_minute_ahead = seconds * 1000 + 60_000;
    let () = redis::cmd("HSET")
        .arg("stormguard:pace:{inventory}:tallies")
        .arg("overloaded")
        .arg(3)
        .arg("overloaded_at")
        .arg(a_minute_ahead)
        .query_async(&mut connection)
        .await
        .unwrap();

    let shared = a
        .exchange("inventory", &contribution(5, 4, 1.0, 1))
        .await
        .expect("the tallies are read, not refused as malformed");
    let taken = shared.taken.expect("a owns the pace");
    assert_eq!((taken.outcomes.sent, taken.outcomes.overloaded), (5, 4));
    assert_eq!(taken.overloaded_since, Some(Duration::ZERO));
}

/// Each replica's demand by class reaches the others, so the fleet's rate
/// goes to every replica's critical calls first; a replica that writes no
/// classes (one from before they were known) is read as all default.
#[tokio::test]
async fn the_others_demand_comes_by_class_and_a_replica_that_says_none_is_the_defaults() {
    let Some(redis) = Redis::start(None) else { return };
    let (a, b) = (replica(&redis, "a"), replica(&redis, "b"));
    let critical = Contribution {
        demand: Demand {
            classes: Some([30.0, 10.0, 0.0]),
            ..default_class(40.0, 4)
        },
        ..contribution(0, 0, 40.0, 4)
    };
    a.exchange("inventory", &critical).await.unwrap();
    let seen = b
        .exchange("inventory", &contribution(0, 0, 5.0, 1))
        .await
        .unwrap();
    assert_eq!(seen.others, vec![critical.demand]);

    let (mut connection, seconds) = store_clock(&redis).await;
    let () = redis::cmd("HSET")
        .arg("stormguard:pace:{inventory}:wants")
        .arg("older")
        .arg(format!("12 3 {}", seconds * 1000))
        .query_async(&mut connection)
        .await
        .unwrap();
    // Its classes unreadable (torn, or from a version that wrote them
    // otherwise): its demand is still read, as the default class's.
    let () = redis::cmd("HSET")
        .arg("stormguard:pace:{inventory}:classes")
        .arg("older")
        .arg("not numbers but four")
        .query_async(&mut connection)
        .await
        .unwrap();
    let mut seen = b
        .exchange("inventory", &contribution(0, 0, 5.0, 1))
        .await
        .unwrap()
        .others;
    seen.sort_by(|x, y| x.want.total_cmp(&y.want));
    let older = Demand {
        want: 12.0,
        members: 3,
        classes: None,
    };
    assert_eq!(seen, vec![older, critical.demand]);
}

/// Whether `replica` owns inventory's pace after an exchange.
async fn owns_after_exchange(replica: &PaceStore) -> bool {
    let shared = replica
        .exchange("inventory", &contribution(1, 1, 1.0, 1))
        .await
        .unwrap();
    shared.taken.is_some()
}

/// A failover to a Redis whose clock is a minute behind keeps the owner's
/// key for a minute more than its lease (its expiry is a time on the old
/// clock): the lease is read as over, and the pace goes to the first
/// replica that asks, rather than to nobody for a minute if the owner died
/// with the primary.
#[tokio::test]
async fn a_lease_granted_in_the_stores_future_is_over() {
    let Some(redis) = Redis::start(None) else { return };
    let (a, b) = (replica(&redis, "a"), replica(&redis, "b"));
    assert!(owns_after_exchange(&a).await);
    let (mut connection, seconds) = store_clock(&redis).await;
    let granted_a_minute_ahead = format!("a {}", seconds * 1000 + 60_000);
    let () = redis::cmd("SET")
        .arg("stormguard:pace:{inventory}:owner")
        .arg(granted_a_minute_ahead)
        .arg("PX")
        .arg(61_000)
        .query_async(&mut connection)
        .await
        .unwrap();
    assert!(owns_after_exchange(&b).await, "b owns the pace at once");
    assert!(!a.publish("inventory", rate(10.0)).await.unwrap());
    assert!(b.publish("inventory", rate(20.0)).await.unwrap());
}

/// A replica shutting down gives its paces up: another takes them at its
/// next exchange, not a lease later; one that does not own a pace gives
/// nothing up.
#[tokio::test]
async fn an_owner_shutting_down_gives_the_pace_to_the_next_replica_that_asks() {
    let Some(redis) = Redis::start(None) else { return };
    let (a, b) = (replica(&redis, "a"), replica(&redis, "b"));
    assert!(owns_after_exchange(&a).await);
    assert!(!owns_after_exchange(&b).await);
    assert!(!b.release("inventory").await.unwrap(), "b owns nothing");
    assert!(a.release("inventory").await.unwrap());
    assert!(
        owns_after_exchange(&b).await,
        "b owns the pace within the lease a held"
    );
    assert!(!a.publish("inventory", rate(10.0)).await.unwrap());
}

#[tokio::test]
async fn an_owner_that_stops_renewing_loses_the_pace_and_cannot_publish_over_its_successor() {
    let Some(redis) = Redis::start(None) else { return };
    let (a, b) = (replica(&redis, "a"), replica(&redis, "b"));
    a.exchange("inventory", &contribution(1, 1, 5.0, 1))
        .await
        .unwrap();
    assert!(b
        .exchange("inventory", &contribution(1, 1, 5.0, 1))
        .await
        .unwrap()
        .taken
        .is_none());
    tokio::time::sleep(LEASE + Duration::from_millis(100)).await;
    let shared = b
        .exchange("inventory", &contribution(1, 1, 5.0, 1))
        .await
        .unwrap();
    assert!(shared.taken.is_some(), "b took the lapsed pace");
    assert!(
        shared.others.is_empty(),
        "a, silent for a lease, wants nothing any more"
    );
    assert!(!a.publish("inventory", rate(999.0)).await.unwrap());
    assert!(b.publish("inventory", rate(50.0)).await.unwrap());
    let seen = a
        .exchange("inventory", &contribution(0, 0, 5.0, 1))
        .await
        .unwrap();
    assert_eq!(seen.published.map(|(rate, _)| rate.rate), Some(50.0));
    assert!(seen.taken.is_none());
}

#[tokio::test]
async fn a_store_that_goes_away_fails_each_call_within_its_timeout_and_is_used_again_when_back() {
    let Some(mut redis) = Redis::start(None) else {
        return;
    };
    let a = replica(&redis, "a");
    assert!(a.exchange("inventory", &contribution(1, 1, 5.0, 1)).await.is_ok());
    redis.kill();
    let began = Instant::now();
    let error = a
        .exchange("inventory", &contribution(1, 1, 5.0, 1))
        .await
        .expect_err("no store");
    assert!(
        began.elapsed() < STORE_TIMEOUT + Duration::from_millis(200),
        "{:?}",
        began.elapsed()
    );
    assert!(
        ["refused", "connection", "timeout"].contains(&error.kind()),
        "{error} ({})",
        error.kind()
    );
    assert!(error.to_string().contains(&redis.address), "{error}");

    // Back, and empty: the first replica to ask owns the pace afresh.
    redis.restart();
    let shared = common::eventually(Duration::from_secs(5), || async {
        a.exchange("inventory", &contribution(2, 2, 5.0, 1)).await.ok()
    })
    .await
    .expect("used again once it is back");
    assert!(shared.taken.is_some() && shared.published.is_none());
}

#[tokio::test]
async fn the_password_is_sent_and_never_shown() {
    let Some(redis) = Redis::start(Some("s3cret-pace")) else {
        return;
    };
    let a = replica(&redis, "a");
    assert!(a.exchange("inventory", &contribution(1, 1, 5.0, 1)).await.is_ok());
    let without = PaceStore::new(&redis.url(), Access::default(), "b".into(), &Registry::new()).unwrap();
    let error = without
        .exchange("inventory", &contribution(1, 1, 5.0, 1))
        .await
        .expect_err("no password");
    assert!(!error.to_string().contains("s3cret"), "{error}");
    let in_url = format!("redis://:s3cret-pace@{}", redis.address);
    let c = PaceStore::new(&in_url, Access::default(), "c".into(), &Registry::new()).unwrap();
    assert!(c.exchange("inventory", &contribution(1, 1, 5.0, 1)).await.is_ok());
    assert!(!c.address().contains("s3cret"), "{}", c.address());
}

#[tokio::test]
async fn a_batch_number_counts_once_across_replicas_until_its_instance_goes_quiet() {
    let Some(redis) = Redis::start(None) else { return };
    let (a, b) = (replica(&redis, "a"), replica(&redis, "b"));
    let window = Duration::from_millis(300);
    assert!(a.first_count("pod-1", 41, window, REMEMBERED).await.unwrap());
    assert!(
        !b.first_count("pod-1", 41, window, REMEMBERED).await.unwrap(),
        "the other replica"
    );
    assert!(
        b.first_count("pod-2", 41, window, REMEMBERED).await.unwrap(),
        "numbers are per instance"
    );
    for n in 42..50 {
        assert!(a.first_count("pod-1", n, window, REMEMBERED).await.unwrap());
    }
    assert!(
        !b.first_count("pod-1", 42, window, REMEMBERED).await.unwrap(),
        "the last 8 are kept"
    );
    assert!(
        b.first_count("pod-1", 41, window, REMEMBERED).await.unwrap(),
        "older ones are not"
    );
    tokio::time::sleep(window + Duration::from_millis(100)).await;
    assert!(
        a.first_count("pod-1", 49, window, REMEMBERED).await.unwrap(),
        "quiet: forgotten"
    );
}

#[tokio::test]
async fn an_instance_is_bound_across_replicas_until_its_owner_goes_quiet() {
    use stormguard::identity::Identity;
    let Some(redis) = Redis::start(None) else { return };
    let (a, b) = (replica(&redis, "a"), replica(&redis, "b"));
    let who = |name: &str| Identity {
        namespace: "shop".into(),
        service_account: name.into(),
    };
    let ttl = Duration::from_millis(300);
    assert_eq!(a.bind("pod-1", None, ttl).await.unwrap(), None, "nobody's yet");
    let checkout = Some(who("checkout"));
    assert_eq!(a.bind("pod-1", checkout.as_ref(), ttl).await.unwrap(), checkout);
    assert_eq!(
        b.bind("pod-1", Some(&who("intruder")), ttl).await.unwrap(),
        checkout
    );
    assert_eq!(b.bind("pod-1", None, ttl).await.unwrap(), checkout);
    tokio::time::sleep(ttl / 2).await;
    b.bind("pod-1", checkout.as_ref(), ttl).await.unwrap();
    tokio::time::sleep(ttl / 2 + Duration::from_millis(50)).await;
    assert_eq!(
        a.bind("pod-1", Some(&who("intruder")), ttl).await.unwrap(),
        checkout,
        "speaking renewed it"
    );
    tokio::time::sleep(ttl + Duration::from_millis(50)).await;
    let intruder = Some(who("intruder"));
    assert_eq!(
        a.bind("pod-1", intruder.as_ref(), ttl).await.unwrap(),
        intruder,
        "quiet: free again"
    );
}

#[tokio::test]
async fn a_store_behind_tls_is_reached_with_its_ca_and_refused_without() {
    let Some(redis) = Redis::start_tls() else { return };
    let ca = std::fs::read(redis.tls.as_ref().unwrap().path().join("ca.pem")).unwrap();
    let access = Access {
        ca: Some(ca),
        ..Access::default()
    };
    let a = PaceStore::new(&redis.url(), access, "a".into(), &Registry::new()).expect("a valid address");
    let shared = a
        .exchange("inventory", &contribution(10, 8, 40.0, 4))
        .await
        .expect("over TLS");
    assert!(shared.taken.is_some(), "a owns the pace");

    let untrusting = PaceStore::new(&redis.url(), Access::default(), "b".into(), &Registry::new()).unwrap();
    let refused = untrusting
        .exchange("inventory", &contribution(1, 1, 4.0, 1))
        .await
        .expect_err("its certificate is not from a CA the system trusts");
    assert!(
        refused.to_string().contains(&redis.url()) && refused.to_string().contains("certificate"),
        "names the store and the reason: {refused}"
    );
    assert_eq!(refused.kind(), "tls");
}

#[tokio::test]
async fn each_replica_hears_what_the_others_processes_claim_until_one_goes_quiet() {
    use stormguard_core::fleet::floor::Claims;
    let Some(redis) = Redis::start(None) else { return };
    let (a, b, c) = (replica(&redis, "a"), replica(&redis, "b"), replica(&redis, "c"));
    let window = Duration::from_millis(300);
    let claims = |requests_per_second, processes| Claims {
        requests_per_second,
        processes,
    };
    assert_eq!(
        a.share_claims("payments", claims(120.5, 3), window)
            .await
            .unwrap(),
        claims(0.0, 0),
        "nobody else yet"
    );
    b.share_claims("payments", claims(80.0, 2), window).await.unwrap();
    assert_eq!(
        c.share_claims("payments", claims(1.0, 1), window).await.unwrap(),
        claims(200.5, 5)
    );
    assert_eq!(
        a.share_claims("payments", claims(100.0, 3), window)
            .await
            .unwrap(),
        claims(81.0, 3),
        "its own word is replaced, not added"
    );
    assert_eq!(
        a.share_claims("orders", claims(5.0, 1), window).await.unwrap(),
        claims(0.0, 0),
        "claims are per dependency"
    );
    tokio::time::sleep(window + Duration::from_millis(100)).await;
    assert_eq!(
        b.share_claims("payments", claims(80.0, 2), window).await.unwrap(),
        claims(0.0, 0),
        "quiet replicas no longer count"
    );
}

#[tokio::test]
async fn replicas_merging_a_fleet_breaker_at_once_never_grant_more_than_its_slots() {
    use stormguard_core::fleet::breaker::episode::{EpisodePhase, Rules, Share};
    let Some(redis) = Redis::start(None) else { return };
    let replicas: Vec<PaceStore> = (0..4).map(|r| replica(&redis, &format!("r{r}"))).collect();
    let share = |opened_ago_ms, wanted| Share {
        rules: Rules {
            open_timeout_ms: 0,
            max_trials: 3,
            success_threshold: 2,
        },
        epoch: 0,
        opened_ago_ms,
        wanted,
        succeeded: 0,
        failed: 0,
        settled: 0,
        unused: 0,
    };
    let opened = replicas[0]
        .share_breaker("ledger", &share(Some(5), 0))
        .await
        .unwrap();
    assert_eq!(
        opened.episode.phase,
        EpisodePhase::HalfOpen,
        "no openTimeout to wait"
    );

    // Every replica wants every slot, forty times over, all at once: the
    // compare-and-set lets each merge count once.
    let mut granted = 0;
    let mut contended = 0;
    let wanting = share(None, 5);
    for _ in 0..10 {
        let rounds = replicas.iter().map(|r| r.share_breaker("ledger", &wanting));
        for answer in futures_util::future::join_all(rounds).await {
            match answer {
                Ok(answer) => granted += answer.granted,
                Err(error) => {
                    assert_eq!(error.kind(), "contended", "{error}");
                    contended += 1;
                }
            }
        }
    }
    assert_eq!(granted, 3, "halfOpenMaxCalls in all ({contended} gave up)");
    let answer = replicas[1]
        .share_breaker("ledger", &share(None, 0))
        .await
        .unwrap();
    assert_eq!((answer.episode.slots_out(), answer.granted), (3, 0));

    // Two successes on two replicas close it, for all of them.
    let epoch = answer.episode.epoch;
    for r in &replicas[2..] {
        let trial = Share {
            epoch,
            succeeded: 1,
            settled: 1,
            ..share(None, 0)
        };
        r.share_breaker("ledger", &trial).await.unwrap();
    }
    let closed = replicas[0]
        .share_breaker("ledger", &share(None, 0))
        .await
        .unwrap();
    assert_eq!(closed.episode.phase, EpisodePhase::Closed);
    assert!(closed.episode.closed_at.is_some());
}

/// The version the store holds `ledger`'s fleet breaker episode at.
async fn episode_version(url: &str) -> String {
    let client = redis::Client::open(url).unwrap();
    let mut connection = client.get_multiplexed_async_connection().await.unwrap();
    redis::cmd("HGET")
        .arg("stormguard:breaker:{ledger}:episode")
        .arg("version")
        .query_async(&mut connection)
        .await
        .unwrap()
}

#[tokio::test]
async fn a_share_that_changes_nothing_does_not_make_the_other_replicas_read_again() {
    use stormguard_core::fleet::breaker::episode::{EpisodePhase, Rules, Share};
    let Some(redis) = Redis::start(None) else { return };
    let replicas: Vec<PaceStore> = (0..4).map(|r| replica(&redis, &format!("r{r}"))).collect();
    let share = |opened_ago_ms| Share {
        rules: Rules {
            open_timeout_ms: 60_000,
            max_trials: 3,
            success_threshold: 2,
        },
        epoch: 1,
        opened_ago_ms,
        wanted: 0,
        succeeded: 0,
        failed: 0,
        settled: 0,
        unused: 0,
    };
    let opened = replicas[0]
        .share_breaker("ledger", &share(Some(5)))
        .await
        .unwrap();
    assert!(matches!(opened.episode.phase, EpisodePhase::Open { .. }));
    let before = episode_version(&redis.url()).await;
    // While it stays open, every replica's share changes nothing: all at
    // once, ten times over, none loses its compare-and-set.
    let again = share(Some(5));
    for _ in 0..10 {
        let rounds = replicas.iter().map(|r| r.share_breaker("ledger", &again));
        for answer in futures_util::future::join_all(rounds).await {
            assert_eq!(answer.unwrap().episode, opened.episode);
        }
    }
    assert_eq!(
        episode_version(&redis.url()).await,
        before,
        "no write while nothing changed"
    );
}

/// Two replicas whose policies give one dependency's breaker different
/// rules (a ConfigMap change that has reached one of them): the second is
/// refused, counted and told why, and writes nothing, not even the
/// episode's expiry; once the first has not shared for a lease (the change
/// reached it too), the episode goes on under the new rules.
#[tokio::test]
async fn a_replica_under_other_breaker_rules_is_refused_the_shared_episode_until_they_agree() {
    use stormguard_core::fleet::breaker::episode::{EpisodePhase, Rules, Share, RULES_HELD_FOR};
    let Some(redis) = Redis::start(None) else { return };
    let registry = Registry::new();
    let old = replica(&redis, "old");
    let new = replica_counted(&redis, "new", &registry);
    let rules = |open_timeout_ms| Rules {
        open_timeout_ms,
        max_trials: 3,
        success_threshold: 2,
    };
    let share = |rules, opened_ago_ms| Share {
        rules,
        epoch: 1,
        opened_ago_ms,
        wanted: 1,
        succeeded: 0,
        failed: 0,
        settled: 0,
        unused: 0,
    };
    let opened = old
        .share_breaker("ledger", &share(rules(60_000), Some(5)))
        .await
        .unwrap();
    assert!(matches!(opened.episode.phase, EpisodePhase::Open { .. }));
    let version = episode_version(&redis.url()).await;
    let ttl = |url: String| async move {
        let client = redis::Client::open(url).unwrap();
        let mut connection = client.get_multiplexed_async_connection().await.unwrap();
        let ttl: i64 = redis::cmd("PTTL")
            .arg("stormguard:breaker:{ledger}:episode")
            .query_async(&mut connection)
            .await
            .unwrap();
        ttl
    };
    let kept_until = ttl(redis.url()).await;
    tokio::time::sleep(Duration::from_millis(50)).await;

    let refused = new
        .share_breaker("ledger", &share(rules(10_000), Some(5)))
        .await
        .unwrap_err();
    assert_eq!(refused.kind(), "other_rules");
    let said = refused.to_string();
    assert!(
        said.contains("ledger")
            && said.contains("openTimeoutMs 60000")
            && said.contains("openTimeoutMs 10000"),
        "{said}"
    );
    assert!(refused.wrote_nothing());
    assert_eq!(episode_version(&redis.url()).await, version);
    assert!(
        ttl(redis.url()).await < kept_until,
        "the refused share kept nothing alive"
    );
    let text = String::from_utf8(registry.encode(tokio::time::Instant::now())).unwrap();
    assert!(
        text.contains("stormguard_pace_store_errors_total{kind=\"other_rules\"} 1"),
        "{text}"
    );

    tokio::time::sleep(RULES_HELD_FOR).await;
    let taken = new
        .share_breaker("ledger", &share(rules(10_000), None))
        .await
        .unwrap();
    assert_eq!(taken.episode.rules, Some(rules(10_000)));
    assert_eq!(taken.episode.phase, opened.episode.phase, "the episode goes on");
    assert_eq!(
        old.share_breaker("ledger", &share(rules(60_000), None))
            .await
            .unwrap_err()
            .kind(),
        "other_rules"
    );
}

/// The simulator's model of the store and the scripts themselves, told the
/// same by the same replicas at the same times, answer alike: who owns the
/// pace, whose outcomes the owner takes, the others' demand, the published
/// rate, and who may publish. The simulator's figures about sharing hold
/// only as far as this does.
#[tokio::test]
async fn the_simulators_store_answers_as_the_scripts_do() {
    use stormguard_core::fleet::replicas::Shared;
    use stormguard_toolkit::sim::StoreModel;

    let Some(redis) = Redis::start(None) else { return };
    let stores = [replica(&redis, "a"), replica(&redis, "b")];
    let mut model = StoreModel::new(2, Duration::ZERO, None);
    let began = Instant::now();
    let now = || began.elapsed().as_nanos() as u64;
    let close = |a: Option<Duration>, b: Option<Duration>| match (a, b) {
        (Some(a), Some(b)) => a.abs_diff(b) < Duration::from_millis(100),
        (a, b) => a.is_none() && b.is_none(),
    };
    let alike = |step: &str, real: &Shared, modelled: &Shared| {
        let mut others = [real.others.clone(), modelled.others.clone()];
        for list in &mut others {
            list.sort_by(|x, y| x.want.total_cmp(&y.want));
        }
        assert_eq!(others[0], others[1], "{step}: the others' demand");
        assert_eq!(
            real.published.map(|(rate, _)| rate),
            modelled.published.map(|(rate, _)| rate),
            "{step}: the published rate"
        );
        assert!(
            close(real.published.map(|p| p.1), modelled.published.map(|p| p.1)),
            "{step}: the rate's age, {:?} against {:?}",
            real.published,
            modelled.published
        );
        assert_eq!(
            real.taken.map(|t| t.outcomes),
            modelled.taken.map(|t| t.outcomes),
            "{step}: what the owner takes"
        );
        assert!(
            close(
                real.taken.and_then(|t| t.overloaded_since),
                modelled.taken.and_then(|t| t.overloaded_since)
            ),
            "{step}: the overload's window, {:?} against {:?}",
            real.taken,
            modelled.taken
        );
    };
    let service = "parity";
    let steps: [(&str, usize, Contribution); 4] = [
        ("a first", 0, contribution(3, 1, 10.0, 2)),
        ("b second", 1, contribution(5, 5, 5.0, 1)),
        ("a again", 0, contribution(1, 1, 12.0, 2)),
        ("b once a published", 1, contribution(0, 0, 6.0, 1)),
    ];
    for (step, r, mine) in steps {
        if step == "b once a published" {
            for (who, expected) in [(0, true), (1, false)] {
                let real = stores[who]
                    .publish(service, rate(40.0 + who as f64))
                    .await
                    .unwrap();
                assert_eq!(real, expected, "replica {who} publishing");
                assert_eq!(model.publish((who, 0), rate(40.0 + who as f64), now()), expected);
            }
        }
        let real = stores[r].exchange(service, &mine).await.unwrap();
        let modelled = model.answer((r, 0), &mine, now());
        alike(step, &real, &modelled);
    }
    // a stops renewing: past its lease, b takes the pace over, and a can
    // no longer publish.
    tokio::time::sleep(LEASE + Duration::from_millis(300)).await;
    let mine = contribution(2, 0, 6.0, 1);
    let real = stores[1].exchange(service, &mine).await.unwrap();
    let modelled = model.answer((1, 0), &mine, now());
    assert!(real.taken.is_some(), "b owns the pace now");
    alike("b after a's lease", &real, &modelled);
    assert!(!stores[0].publish(service, rate(45.0)).await.unwrap());
    assert!(!model.publish((0, 0), rate(45.0), now()));
    let mine = contribution(1, 1, 6.0, 1);
    let real = stores[0].exchange(service, &mine).await.unwrap();
    let modelled = model.answer((0, 0), &mine, now());
    assert!(real.taken.is_none(), "a does not take it back");
    alike("a after losing the pace", &real, &modelled);
    // Nobody speaks for ten leases: the outcomes a left pending and the
    // published rate are forgotten, and a takes the pace with its own alone.
    tokio::time::sleep(10 * LEASE + Duration::from_millis(300)).await;
    let mine = contribution(4, 2, 6.0, 1);
    let real = stores[0].exchange(service, &mine).await.unwrap();
    let modelled = model.answer((0, 0), &mine, now());
    assert_eq!(
        (real.published, real.taken.map(|t| t.outcomes)),
        (None, Some(mine.tallies.outcomes)),
        "forgotten after ten leases"
    );
    alike("a after ten silent leases", &real, &modelled);
}

/// A replica whose name holds a space (its pod's HOSTNAME is the
/// environment's) still knows its own lease: it renews it and publishes.
#[tokio::test]
async fn a_replica_whose_name_holds_a_space_renews_its_lease_and_publishes() {
    let Some(redis) = Redis::start(None) else { return };
    let (spaced, other) = (replica(&redis, "my host-1a2b"), replica(&redis, "b"));
    assert!(owns_after_exchange(&spaced).await);
    assert!(owns_after_exchange(&spaced).await, "renewed");
    assert!(!owns_after_exchange(&other).await);
    assert!(spaced.publish("inventory", rate(10.0)).await.unwrap());
    assert!(spaced.release("inventory").await.unwrap());
}

/// A replica that shares again after a quiet longer than a slot's life
/// keeps the word of itself it has just written, while a gone replica's
/// stale word is forgotten.
#[tokio::test]
async fn a_replica_back_from_a_quiet_keeps_its_own_word_and_forgets_the_gones() {
    use stormguard_core::fleet::breaker::episode::{Rules, Share};
    use stormguard_core::fleet::breaker::SLOT_LIFE;
    let Some(redis) = Redis::start(None) else { return };
    let (a, gone) = (replica(&redis, "a"), replica(&redis, "gone"));
    let share = Share {
        rules: Rules {
            open_timeout_ms: 60_000,
            max_trials: 3,
            success_threshold: 2,
        },
        epoch: 0,
        opened_ago_ms: Some(5),
        wanted: 1,
        succeeded: 0,
        failed: 0,
        settled: 0,
        unused: 0,
    };
    a.share_breaker("ledger", &share).await.unwrap();
    gone.share_breaker("ledger", &share).await.unwrap();
    tokio::time::sleep(SLOT_LIFE + Duration::from_millis(100)).await;
    a.share_breaker("ledger", &share).await.unwrap();
    let client = redis::Client::open(redis.url()).unwrap();
    let mut connection = client.get_multiplexed_async_connection().await.unwrap();
    let fields: Vec<String> = redis::cmd("HKEYS")
        .arg("stormguard:breaker:{ledger}:episode")
        .query_async(&mut connection)
        .await
        .unwrap();
    assert!(fields.contains(&"heard:a".to_string()), "{fields:?}");
    assert!(!fields.contains(&"heard:gone".to_string()), "{fields:?}");
}
