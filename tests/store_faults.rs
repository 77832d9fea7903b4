//! Replicas sharing their pace through a real Redis over a bad network (a
//! fault proxy on loopback): slow and lossy, partitioned from one replica,
//! and a replica killed mid-recovery behind a Service. Each replica keeps
//! pacing its processes through all of it, alone within a lease when it
//! cannot reach the store, and shares again when it can.

mod common;

use std::time::Duration;

use common::faults::{FaultProxy, Network};
use common::redis::Redis;
use common::{eventually, metrics, sample, Daemon};
use serde_json::{json, Value};

fn policy_file() -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("policy.yaml");
    std::fs::write(&path, common::GATED_POLICY).unwrap();
    (dir, path)
}

/// `instance` asks `base` for its share of inventory's rate, reporting
/// `accepted` attempts sent and accepted since its last ask: the rate
/// granted. Every ask must be answered, whatever the store does.
async fn ask(http: &reqwest::Client, base: &str, instance: &str, accepted: u64) -> f64 {
    let body = json!({"service": "inventory", "instance": instance, "sent": accepted,
                      "accepted": accepted, "overloaded": 0, "waiting": 50});
    let response = http
        .post(format!("{base}/v1/pace"))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200, "an ask is always answered");
    let grant: Value = response.json().await.unwrap();
    let rate = grant["rate"].as_f64().unwrap();
    assert!(rate > 0.0, "always some pace: {grant}");
    rate
}

/// A family's inventory sample on `daemon`.
async fn inventory(daemon: &Daemon, family: &str) -> Option<f64> {
    sample(
        &metrics(daemon).await,
        &format!("{family}{{service=\"inventory\"}}"),
    )
}

/// Probing, then a second of recovery: each replica's process has its
/// attempts accepted.
async fn recover(http: &reqwest::Client, a: &Daemon, b: &Daemon) {
    for round in 0..11 {
        let accepted = if round == 0 { 0 } else { 2 };
        ask(http, &a.base, "pod-a", accepted).await;
        ask(http, &b.base, "pod-b", accepted).await;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Both processes ask again; whether each replica paces by the shared rate.
async fn shared(http: &reqwest::Client, a: &Daemon, b: &Daemon) -> Option<(bool, bool)> {
    ask(http, &a.base, "pod-a", 0).await;
    ask(http, &b.base, "pod-b", 0).await;
    Some((
        inventory(a, "stormguard_fleet_shared").await? == 1.0,
        inventory(b, "stormguard_fleet_shared").await? == 1.0,
    ))
}

/// The store errors `daemon` counted, of every kind.
async fn store_errors(daemon: &Daemon) -> f64 {
    metrics(daemon)
        .await
        .lines()
        .filter(|line| line.starts_with("stormguard_pace_store_errors_total{"))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[tokio::test]
async fn over_a_slow_lossy_network_replicas_keep_pacing_and_share_between_losses() {
    let Some(redis) = Redis::start(None) else { return };
    let lossy = Network::Lossy {
        delay: Duration::from_millis(50),
        loss: 0.1,
    };
    let proxy_a = FaultProxy::start(&[&redis.address], lossy, 1).await;
    let proxy_b = FaultProxy::start(&[&redis.address], lossy, 2).await;
    let (_dir, policy) = policy_file();
    let a = Daemon::start(&policy, &["--pace-store", &proxy_a.redis_url()]);
    let b = Daemon::start(&policy, &["--pace-store", &proxy_b.redis_url()]);
    let http = reqwest::Client::new();
    recover(&http, &a, &b).await;

    let both = eventually(Duration::from_secs(10), || async {
        (shared(&http, &a, &b).await? == (true, true)).then_some(())
    })
    .await;
    assert!(
        both.is_some(),
        "both replicas share through a slow, lossy store\n{}",
        metrics(&a).await
    );
    let lost = eventually(Duration::from_secs(20), || async {
        shared(&http, &a, &b).await?;
        (store_errors(&a).await + store_errors(&b).await > 0.0).then_some(())
    })
    .await;
    assert!(lost.is_some(), "the losses are counted");
    let round_trip = sample(&metrics(&a).await, "stormguard_pace_store_seconds_sum").unwrap()
        / sample(&metrics(&a).await, "stormguard_pace_store_seconds_count").unwrap();
    assert!(
        round_trip >= 0.1,
        "the delay is real: {round_trip} s per exchange"
    );
}

#[tokio::test]
async fn a_replica_cut_off_from_the_store_paces_alone_within_a_lease_and_shares_again() {
    let Some(redis) = Redis::start(None) else { return };
    let proxy_a = FaultProxy::start(&[&redis.address], Network::GOOD, 1).await;
    let proxy_b = FaultProxy::start(&[&redis.address], Network::GOOD, 2).await;
    let (_dir, policy) = policy_file();
    let a = Daemon::start(&policy, &["--pace-store", &proxy_a.redis_url()]);
    let b = Daemon::start(&policy, &["--pace-store", &proxy_b.redis_url()]);
    let http = reqwest::Client::new();
    recover(&http, &a, &b).await;
    let both = eventually(Duration::from_secs(5), || async {
        (shared(&http, &a, &b).await? == (true, true)).then_some(())
    })
    .await;
    assert!(both.is_some(), "sharing before the partition");

    proxy_b.set(Network::Partitioned);
    let split = eventually(Duration::from_secs(3), || async {
        (shared(&http, &a, &b).await? == (true, false)).then_some(())
    })
    .await;
    assert!(
        split.is_some(),
        "b alone within a lease, a still shares\n{}",
        metrics(&b).await
    );
    let owner = eventually(Duration::from_secs(3), || async {
        shared(&http, &a, &b).await?;
        (inventory(&a, "stormguard_fleet_owner").await? == 1.0).then_some(())
    })
    .await;
    assert!(owner.is_some(), "a owns the pace once b's ownership lapses");
    assert!(
        inventory(&b, "stormguard_fleet_alone_seconds_total")
            .await
            .unwrap()
            > 0.0
    );
    assert!(store_errors(&b).await > 0.0);
    assert_eq!(store_errors(&a).await, 0.0, "a never lost the store");

    proxy_b.set(Network::GOOD);
    let healed = eventually(Duration::from_secs(5), || async {
        (shared(&http, &a, &b).await? == (true, true)).then_some(())
    })
    .await;
    assert!(healed.is_some(), "b shares again once the partition heals");
}

#[tokio::test]
async fn a_replica_killed_mid_recovery_leaves_its_processes_to_the_other() {
    let Some(redis) = Redis::start(None) else { return };
    let (_dir, policy) = policy_file();
    let url = redis.url();
    let mut a = Daemon::start(&policy, &["--pace-store", &url]);
    let b = Daemon::start(&policy, &["--pace-store", &url]);
    let address = |daemon: &Daemon| daemon.base.trim_start_matches("http://").to_string();
    let service = FaultProxy::start(&[&address(&a), &address(&b)], Network::GOOD, 1).await;
    let base = format!("http://{}", service.address);
    // A new connection per ask, so the Service deals each to a replica.
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .build()
        .unwrap();
    for round in 0..10 {
        for pod in ["pod-a", "pod-b", "pod-c", "pod-d"] {
            ask(&http, &base, pod, if round == 0 { 0 } else { 2 }).await;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (processes_a, processes_b) = (
        inventory(&a, "stormguard_fleet_processes").await.unwrap(),
        inventory(&b, "stormguard_fleet_processes").await.unwrap(),
    );
    assert!(
        processes_a > 0.0 && processes_b > 0.0,
        "both replicas pace some: {processes_a} and {processes_b}"
    );

    a.kill();
    service.forget(&address(&a));
    let mut granted = 0.0;
    for _ in 0..20 {
        for pod in ["pod-a", "pod-b", "pod-c", "pod-d"] {
            granted += ask(&http, &base, pod, 1).await;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(granted > 0.0);
    assert_eq!(
        inventory(&b, "stormguard_fleet_processes").await,
        Some(4.0),
        "every process paced by the replica left"
    );
    assert_eq!(inventory(&b, "stormguard_fleet_owner").await, Some(1.0));
    assert_eq!(inventory(&b, "stormguard_fleet_shared").await, Some(1.0));
}
