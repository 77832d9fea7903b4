//! Two real daemons sharing their pace through a real Redis (Debian's
//! redis-server on loopback): a process asking each paces by one fleet's
//! rate, one replica owns it, and when Redis goes each replica paces alone
//! within a lease, and shares again when it is back.

mod common;

use std::time::Duration;

use common::redis::Redis;
use common::{eventually, metrics, sample, Daemon};
use serde_json::{json, Value};

fn policy_file() -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("policy.yaml");
    std::fs::write(&path, common::GATED_POLICY).unwrap();
    (dir, path)
}

/// `instance` asks `daemon` for its share of inventory's rate, reporting
/// `accepted` attempts sent and accepted since its last ask and a line of 50.
async fn ask(daemon: &Daemon, instance: &str, accepted: u64) -> f64 {
    let body = json!({"service": "inventory", "instance": instance, "sent": accepted,
                      "accepted": accepted, "overloaded": 0, "waiting": 50});
    granted(daemon, &body).await
}

/// The rate `daemon` grants the pace ask `body`.
async fn granted(daemon: &Daemon, body: &Value) -> f64 {
    let response = reqwest::Client::new()
        .post(daemon.url("/v1/pace"))
        .json(body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let grant: Value = response.json().await.unwrap();
    grant["rate"].as_f64().unwrap()
}

/// Both processes ask again, nothing accepted since: how many of the two
/// replicas pace inventory by the shared rate then.
async fn sharing(a: &Daemon, b: &Daemon) -> Option<f64> {
    ask(a, "pod-a", 0).await;
    ask(b, "pod-b", 0).await;
    Some(inventory(a, "stormguard_fleet_shared").await? + inventory(b, "stormguard_fleet_shared").await?)
}

/// A family's inventory sample on `daemon`.
async fn inventory(daemon: &Daemon, family: &str) -> Option<f64> {
    sample(
        &metrics(daemon).await,
        &format!("{family}{{service=\"inventory\"}}"),
    )
}

#[tokio::test]
async fn replicas_pace_as_one_through_redis_and_alone_without_it() {
    let Some(mut redis) = Redis::start(None) else {
        return;
    };
    let (_dir, policy) = policy_file();
    let url = redis.url();
    let a = Daemon::start(&policy, &["--pace-store", &url]);
    let b = Daemon::start(&policy, &["--pace-store", &url]);
    reqwest::get(a.url("/v1/policies/inventory")).await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(redis.other_clients(), 0, "nothing paced: nobody talks to Redis");

    // Probing, then a recovery: each process's attempts accepted, for a second.
    ask(&a, "pod-a", 0).await;
    ask(&b, "pod-b", 0).await;
    for _ in 0..10 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        ask(&a, "pod-a", 2).await;
        ask(&b, "pod-b", 2).await;
    }
    // Then nothing more accepted: the rate holds, and both replicas pace by it.
    let shared = eventually(Duration::from_secs(5), || async {
        let both = sharing(&a, &b).await?;
        let (rate_a, rate_b) = (
            inventory(&a, "stormguard_fleet_rate").await?,
            inventory(&b, "stormguard_fleet_rate").await?,
        );
        (both == 2.0 && rate_a == rate_b && rate_a > 4.0).then_some(rate_a)
    })
    .await;
    assert!(
        shared.is_some(),
        "both replicas pace by one rate\n{}\n{}",
        metrics(&a).await,
        metrics(&b).await
    );
    let owners = inventory(&a, "stormguard_fleet_owner").await.unwrap()
        + inventory(&b, "stormguard_fleet_owner").await.unwrap();
    assert_eq!(owners, 1.0, "one replica owns the pace");
    assert!(sample(&metrics(&a).await, "stormguard_pace_store_seconds_count").unwrap() > 0.0);

    // Redis goes: each replica paces alone within a lease, and still answers.
    redis.kill();
    let alone = eventually(Duration::from_secs(3), || async {
        (sharing(&a, &b).await? == 0.0).then_some(())
    })
    .await;
    assert!(alone.is_some(), "both pace alone\n{}", metrics(&a).await);
    let errors = metrics(&a).await;
    assert!(
        errors.contains("stormguard_pace_store_errors_total{kind="),
        "{errors}"
    );
    assert!(a.log().contains("pacing alone until it answers"), "{}", a.log());

    // Back (empty): they share again.
    redis.restart();
    let again = eventually(Duration::from_secs(5), || async {
        (sharing(&a, &b).await? == 2.0).then_some(())
    })
    .await;
    assert!(again.is_some(), "sharing again once Redis is back");
}

/// `serve` with `args` after `--policy`, and `env`: its exit code and stderr.
fn serve_refused(args: &[&str], env: &[(&str, &str)]) -> (Option<i32>, String) {
    let (_dir, policy) = policy_file();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_stormguard"))
        .args(["serve", "--listen", "127.0.0.1:0", "--policy"])
        .arg(&policy)
        .args(args)
        .envs(env.iter().copied())
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_pace_store_or_password_that_cannot_be_used_stops_the_daemon_at_start() {
    let (code, stderr) = serve_refused(&["--pace-store", "http://redis:6379"], &[]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("--pace-store http://redis:6379"), "{stderr}");

    let missing = "/nonexistent/pace-store-password";
    let (code, stderr) = serve_refused(
        &[
            "--pace-store",
            "redis://127.0.0.1:6379",
            "--pace-store-password-file",
            missing,
        ],
        &[],
    );
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!("--pace-store-password-file {missing}")),
        "{stderr}"
    );

    let (code, stderr) = serve_refused(
        &["--pace-store", "redis://127.0.0.1:6379"],
        &[("STORMGUARD_PACE_STORE_PASSWORD", "")],
    );
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("password is empty"), "{stderr}");

    let dir = tempfile::tempdir().unwrap();
    let not_pem = dir.path().join("ca.pem");
    std::fs::write(&not_pem, "not a certificate").unwrap();
    let ca = not_pem.to_str().unwrap();
    let (code, stderr) = serve_refused(
        &["--pace-store", "redis://127.0.0.1:6379", "--pace-store-ca", ca],
        &[],
    );
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("is not rediss://"), "{stderr}");
    let (code, stderr) = serve_refused(
        &["--pace-store", "rediss://127.0.0.1:6379", "--pace-store-ca", ca],
        &[],
    );
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!("--pace-store-ca {ca}")) && stderr.contains("CERTIFICATE"),
        "{stderr}"
    );
}

#[tokio::test]
async fn replicas_share_through_a_redis_behind_tls() {
    let Some(redis) = Redis::start_tls() else {
        return;
    };
    let (_dir, policy) = policy_file();
    let url = redis.url();
    let ca = redis.tls.as_ref().unwrap().path().join("ca.pem");
    let flags = ["--pace-store", &url, "--pace-store-ca", ca.to_str().unwrap()];
    let (a, b) = (Daemon::start(&policy, &flags), Daemon::start(&policy, &flags));
    let both = eventually(Duration::from_secs(5), || async {
        (sharing(&a, &b).await? == 2.0).then_some(())
    })
    .await;
    assert!(both.is_some(), "sharing over TLS\n{}", a.log());
}

/// A replica stopped as a rollout stops a pod (SIGTERM) gives up the pace
/// it owns on its way out, says so, and the other replica owns it.
#[tokio::test]
async fn a_replica_shutting_down_hands_its_pace_to_the_other() {
    let Some(redis) = Redis::start(None) else {
        return;
    };
    let (_dir, policy) = policy_file();
    let url = redis.url();
    let mut replicas = [
        Daemon::start(&policy, &["--pace-store", &url]),
        Daemon::start(&policy, &["--pace-store", &url]),
    ];
    let owner = eventually(Duration::from_secs(5), || async {
        sharing(&replicas[0], &replicas[1]).await?;
        let owns = [
            inventory(&replicas[0], "stormguard_fleet_owner").await?,
            inventory(&replicas[1], "stormguard_fleet_owner").await?,
        ];
        owns.iter().position(|&owns| owns == 1.0)
    })
    .await
    .expect("one replica owns the pace");
    let other = 1 - owner;

    replicas[owner].signal("TERM");
    assert_eq!(replicas[owner].wait_exit(Duration::from_secs(15)), Some(0));
    let log = replicas[owner].log();
    assert!(
        log.contains("gave up the pace for another replica to take"),
        "{log}"
    );
    let taken = eventually(Duration::from_secs(5), || async {
        ask(&replicas[other], "pod-b", 0).await;
        (inventory(&replicas[other], "stormguard_fleet_owner").await? == 1.0).then_some(())
    })
    .await;
    assert!(taken.is_some(), "{}", metrics(&replicas[other]).await);
}

/// `instance` asks `daemon` for its share of inventory's rate, its calls
/// all of `class`: 40 sent since its last ask, 10 accepted and 30 refused,
/// and 200 waiting.
async fn ask_overloaded(daemon: &Daemon, instance: &str, class: &str) -> f64 {
    let body = json!({"service": "inventory", "instance": instance, "sent": 40, "accepted": 10,
                      "overloaded": 30, "waiting": 200, "demand": {class: 240.0}});
    granted(daemon, &body).await
}

/// Critical calls that all reach one replica and sheddable ones that reach
/// the other: the replicas divide the fleet's rate by class, so the
/// critical calls are given theirs first, as one daemon would give them.
#[tokio::test]
async fn replicas_sharing_a_store_give_every_replicas_critical_calls_the_rate_first() {
    let Some(redis) = Redis::start(None) else {
        return;
    };
    let (_dir, policy) = policy_file();
    let url = redis.url();
    let (a, b) = (
        Daemon::start(&policy, &["--pace-store", &url]),
        Daemon::start(&policy, &["--pace-store", &url]),
    );
    // Over three seconds of asks once the replicas share, a tenth of a
    // second apart (alone, each replica gives its one process its part:
    // as much to the sheddable calls as to the critical ones).
    let (mut critical, mut sheddable, mut shared) = (0.0, 0.0, 0);
    for _ in 0..60 {
        let grants = (
            ask_overloaded(&a, "pod-a", "critical").await,
            ask_overloaded(&b, "pod-b", "sheddable").await,
        );
        let both = inventory(&a, "stormguard_fleet_shared").await.unwrap_or(0.0)
            + inventory(&b, "stormguard_fleet_shared").await.unwrap_or(0.0);
        if both == 2.0 {
            shared += 1;
            critical += grants.0;
            sheddable += grants.1;
        }
        if shared == 30 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(shared, 30, "the replicas shared for three seconds");
    assert!(
        critical > 2.0 * sheddable,
        "critical calls were given {critical:.1} in all, sheddable ones {sheddable:.1}"
    );
}
