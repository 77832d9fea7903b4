//! Admin API security on the real binary: the token only in the
//! Authorization header, never logged, and a token file rotated without a
//! restart.

mod common;

use common::{Daemon, SEED_POLICY};
use reqwest::StatusCode;

async fn status(daemon: &Daemon, token: Option<&str>, query: &str) -> StatusCode {
    let mut request = reqwest::Client::new().get(daemon.url(&format!("/admin/status{query}")));
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    request.send().await.unwrap().status()
}

/// Replaces the file's content the way a Secret update lands: a new file renamed over the old.
fn rotate(path: &std::path::Path, token: &str) {
    let staged = path.with_extension("new");
    std::fs::write(&staged, format!("{token}\n")).unwrap();
    std::fs::rename(staged, path).unwrap();
}

#[tokio::test]
async fn a_rotated_token_file_takes_effect_without_a_restart_and_tokens_are_never_logged() {
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("policy.yaml");
    std::fs::write(&policy, SEED_POLICY).unwrap();
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, "first-secret-4711\n").unwrap();
    let daemon = Daemon::start_with_env(
        &policy,
        &["--admin-token-file", token_file.to_str().unwrap()],
        &[],
    );

    assert_eq!(
        status(&daemon, Some("first-secret-4711"), "").await,
        StatusCode::OK
    );
    assert_eq!(
        status(&daemon, Some("wrong-guess-0815"), "").await,
        StatusCode::UNAUTHORIZED
    );
    for query in [
        "?token=first-secret-4711",
        "?access_token=first-secret-4711",
        "?authorization=Bearer%20first-secret-4711",
    ] {
        assert_eq!(
            status(&daemon, None, query).await,
            StatusCode::UNAUTHORIZED,
            "{query}: only the header counts"
        );
    }

    rotate(&token_file, "second-secret-1234");
    assert_eq!(
        status(&daemon, Some("first-secret-4711"), "").await,
        StatusCode::UNAUTHORIZED,
        "the old token is gone"
    );
    assert_eq!(
        status(&daemon, Some("second-secret-1234"), "").await,
        StatusCode::OK,
        "the new one works at once"
    );

    std::fs::remove_file(&token_file).unwrap();
    let missing = reqwest::Client::new()
        .get(daemon.url("/admin/status"))
        .bearer_auth("second-secret-1234")
        .send()
        .await
        .unwrap();
    assert_eq!(
        missing.status(),
        StatusCode::SERVICE_UNAVAILABLE,
        "no file: closed, not open"
    );
    assert!(missing
        .text()
        .await
        .unwrap()
        .contains("cannot read the admin token file"));
    rotate(&token_file, "third-secret-5678");
    assert_eq!(
        status(&daemon, Some("third-secret-5678"), "").await,
        StatusCode::OK
    );

    let log = daemon.log();
    for secret in [
        "first-secret-4711",
        "second-secret-1234",
        "third-secret-5678",
        "wrong-guess-0815",
    ] {
        assert!(!log.contains(secret), "the log shows {secret}:\n{log}");
    }
}

#[test]
fn an_empty_or_missing_token_file_stops_the_start() {
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("policy.yaml");
    std::fs::write(&policy, SEED_POLICY).unwrap();
    let empty = dir.path().join("empty");
    std::fs::write(&empty, "\n").unwrap();
    for (file, words) in [
        (empty.as_path(), "is empty"),
        (dir.path().join("absent").as_path(), "cannot read"),
    ] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_stormguard"))
            .args(["serve", "--listen", "127.0.0.1:0", "--policy"])
            .arg(&policy)
            .arg("--admin-token-file")
            .arg(file)
            .env_remove("STORMGUARD_ADMIN_TOKEN")
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1));
        assert!(
            String::from_utf8_lossy(&out.stderr).contains(words),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[tokio::test]
async fn admin_listen_moves_the_admin_api_to_a_listener_of_its_own() {
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("policy.yaml");
    std::fs::write(&policy, SEED_POLICY).unwrap();
    let daemon = Daemon::start(&policy, &["--admin-listen", "127.0.0.1:0"]);
    let client = reqwest::Client::new();
    let get = |url: String| client.get(url).bearer_auth(common::TOKEN).send();

    assert_eq!(
        get(daemon.url("/admin/status")).await.unwrap().status(),
        StatusCode::NOT_FOUND,
        "not on --listen"
    );
    assert_eq!(
        get(daemon.url("/v1/policies/payment-service"))
            .await
            .unwrap()
            .status(),
        StatusCode::OK
    );
    let admin = |path: &str| daemon.admin_url(path);
    assert_eq!(
        get(admin("/admin/status")).await.unwrap().status(),
        StatusCode::OK
    );
    assert_eq!(
        get(admin("/healthz")).await.unwrap().status(),
        StatusCode::OK,
        "probes may use it too"
    );
    assert_eq!(
        get(admin("/v1/policies")).await.unwrap().status(),
        StatusCode::NOT_FOUND,
        "only the admin API there"
    );
    let unauthorized = client.get(admin("/admin/status")).send().await.unwrap();
    assert_eq!(
        unauthorized.status(),
        StatusCode::UNAUTHORIZED,
        "its own listener still needs the token"
    );
    let admin_base = daemon.admin_base.as_deref().unwrap();
    assert!(!admin_base.ends_with(":0"), "the port it bound: {admin_base}");
    assert!(daemon
        .log()
        .contains(&format!("admin API on {admin_base}, and only there")));
}

/// Validations run the simulator for every distinct policy: past
/// `--max-validations` at once, the rest are told to come back later.
#[tokio::test]
async fn validations_past_the_cap_are_shed_with_a_retry_after() {
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("policy.yaml");
    std::fs::write(&policy, SEED_POLICY).unwrap();
    let daemon = Daemon::start(&policy, &["--max-validations", "1"]);
    // 50 services with distinct policies: 50 forecasts per validation.
    let mut body = String::from("defaults:\n  maxRetries: 3\nservices:\n");
    for i in 0..50 {
        body.push_str(&format!(
            "  s{i}:\n    maxRetries: {}\n    initialDelay: {}ms\n",
            i % 10,
            10 + i
        ));
    }
    let client = reqwest::Client::new();
    let sends: Vec<_> = (0..6)
        .map(|_| {
            client
                .post(daemon.url("/admin/validate"))
                .bearer_auth(common::TOKEN)
                .body(body.clone())
                .send()
        })
        .collect();
    let answers = futures_join(sends).await;
    let ok = answers.iter().filter(|(s, _)| *s == StatusCode::OK).count();
    let shed: Vec<_> = answers
        .iter()
        .filter(|(s, _)| *s == StatusCode::SERVICE_UNAVAILABLE)
        .collect();
    assert!(ok >= 1, "{answers:?}");
    assert!(!shed.is_empty(), "six at once against a cap of one: {answers:?}");
    assert!(shed.iter().all(|(_, retry_after)| retry_after.is_some()));
}

/// Sends all at once, and collects each status and Retry-After.
async fn futures_join(
    sends: Vec<impl std::future::Future<Output = reqwest::Result<reqwest::Response>> + Send + 'static>,
) -> Vec<(StatusCode, Option<String>)> {
    let tasks: Vec<_> = sends.into_iter().map(tokio::spawn).collect();
    let mut out = Vec::new();
    for task in tasks {
        let response = task.await.unwrap().unwrap();
        let retry_after = response
            .headers()
            .get("retry-after")
            .map(|v| v.to_str().unwrap().to_string());
        out.push((response.status(), retry_after));
    }
    out
}

#[tokio::test]
async fn the_history_lists_each_policy_served_with_what_it_changed_newest_first() {
    let mut configmap = common::ConfigMapDir::new(SEED_POLICY);
    let daemon = Daemon::start(&configmap.policy(), &["--debounce", "20ms"]);
    let history = || async {
        let answer: serde_json::Value = common::admin(&daemon, reqwest::Method::GET, "/admin/history")
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        answer["reloads"].as_array().unwrap().clone()
    };
    let started = history().await;
    assert_eq!(started.len(), 1);
    assert_eq!(started[0]["trigger"], "startup");
    assert_eq!(started[0]["services"], serde_json::json!([]));

    let edited = SEED_POLICY.replace("  maxRetries: 3 ", "  maxRetries: 4 ");
    assert_ne!(edited, SEED_POLICY);
    configmap.update(&edited);
    let reloads = common::eventually(std::time::Duration::from_secs(10), || async {
        let reloads = history().await;
        (reloads.len() == 2).then_some(reloads)
    })
    .await
    .expect("the edit is served and listed");
    assert_eq!(reloads[0]["trigger"], "watch", "newest first");
    assert_ne!(reloads[0]["version"], reloads[1]["version"]);
    assert_eq!(
        reloads[0]["services"][0],
        serde_json::json!({
            "service": "(defaults)",
            "entry": "kept",
            "keys": [{"key": "maxRetries", "old": "3", "new": "4", "from": "defaults"}],
            "forecasts": [],
        }),
        "every service of the seed file overrides maxRetries: only the defaults change"
    );
    assert_eq!(reloads[0]["services"].as_array().unwrap().len(), 1);

    configmap.update("defaults:\n  maxRetries: many\n");
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    assert_eq!(history().await.len(), 2, "a refused edit serves nothing new");
}
