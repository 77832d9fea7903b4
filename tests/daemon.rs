//! End-to-end: the real `stormguard serve` binary over real HTTP on loopback.

mod common;

use std::time::{Duration, Instant};

use common::{
    admin, admin_status, etag_of, eventually, metrics, sample, ConfigMapDir, Daemon, SEED_POLICY, TOKEN,
};
use reqwest::StatusCode;
use serde_json::Value;

/// The watch alone must deliver updates: the periodic re-check is pushed out of the way.
const WATCH_ONLY: &[&str] = &["--recheck-interval", "1h"];

async fn get_json(url: &str) -> Value {
    let response = reqwest::get(url).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK, "GET {url}");
    response.json().await.unwrap()
}

async fn max_retries(daemon: &Daemon, service: &str) -> u64 {
    let body = get_json(&daemon.url(&format!("/v1/policies/{service}"))).await;
    body["policy"]["maxRetries"].as_u64().unwrap()
}

/// Waits until `service`'s served `maxRetries` is `value`; fails with the daemon's log.
async fn expect_served(daemon: &Daemon, service: &str, value: u64, within: Duration, what: &str) {
    let seen = eventually(within, || async {
        (max_retries(daemon, service).await == value).then_some(())
    })
    .await;
    assert!(
        seen.is_some(),
        "{what}: {service} never got maxRetries {value} within {within:?}; log:\n{}",
        daemon.log()
    );
}

#[tokio::test]
async fn serves_the_seed_configmap_policies() {
    let dir = ConfigMapDir::new(SEED_POLICY);
    let daemon = Daemon::start(&dir.policy(), &[]);

    let payment = get_json(&daemon.url("/v1/policies/payment-service")).await;
    assert_eq!(payment["source"], "override");
    assert_eq!(
        payment["overridden"],
        serde_json::json!(["initialDelay", "maxRetries"])
    );
    assert_eq!(payment["policy"]["maxRetries"], 2);
    assert_eq!(payment["policy"]["initialDelayMs"], 200);
    assert_eq!(payment["policy"]["maxDelayMs"], 10_000);
    assert_eq!(payment["policy"]["jitterFactor"], 0.5);
    assert_eq!(max_retries(&daemon, "inventory-service").await, 5);
    assert_eq!(max_retries(&daemon, "notification-service").await, 1);

    let unknown = get_json(&daemon.url("/v1/policies/search-service")).await;
    assert_eq!(unknown["source"], "defaults");
    assert_eq!(unknown["policy"]["maxRetries"], 3);

    let all = get_json(&daemon.url("/v1/policies")).await;
    assert_eq!(all["gatewayRetries"], false);
    assert_eq!(all["defaults"]["maxRetries"], 3);
    assert_eq!(all["services"].as_object().unwrap().len(), 3);
    assert!(all["version"].as_str().unwrap().starts_with("sha256:"));

    let ready = get_json(&daemon.url("/readyz")).await;
    assert_eq!(ready["version"], all["version"]);
    assert_eq!(get_json(&daemon.url("/healthz")).await["status"], "ok");
}

#[tokio::test]
async fn conditional_get_answers_304_and_bad_requests_are_json_errors() {
    let dir = ConfigMapDir::new(SEED_POLICY);
    let daemon = Daemon::start(&dir.policy(), &[]);
    let client = reqwest::Client::new();
    let url = daemon.url("/v1/policies/payment-service");

    let first = client.get(&url).send().await.unwrap();
    let etag = first.headers()["etag"].to_str().unwrap().to_owned();
    let again = client
        .get(&url)
        .header("if-none-match", &etag)
        .send()
        .await
        .unwrap();
    assert_eq!(again.status(), StatusCode::NOT_MODIFIED);
    assert_eq!(again.headers()["etag"].to_str().unwrap(), etag);
    let stale = client
        .get(&url)
        .header("if-none-match", "\"old\"")
        .send()
        .await
        .unwrap();
    assert_eq!(stale.status(), StatusCode::OK);

    let timed_out = client
        .get(format!("{url}?wait=200ms"))
        .header("if-none-match", &etag)
        .send()
        .await
        .unwrap();
    assert_eq!(
        timed_out.status(),
        StatusCode::NOT_MODIFIED,
        "a long-poll with no change ends in 304"
    );

    let cases = [
        ("/v1/policies/Not_A_Service", StatusCode::BAD_REQUEST, "DNS-1123"),
        ("/v1/policies/a?wait=10", StatusCode::BAD_REQUEST, "missing unit"),
        ("/v1/policies/a?colour=red", StatusCode::BAD_REQUEST, "colour"),
        (
            "/v2/nothing",
            StatusCode::NOT_FOUND,
            "no route for GET /v2/nothing",
        ),
        ("/v1/policies/%FF", StatusCode::BAD_REQUEST, "UTF-8"),
    ];
    for (path, status, needle) in cases {
        let response = client.get(daemon.url(path)).send().await.unwrap();
        assert_eq!(response.status(), status, "{path}");
        let body: Value = response.json().await.unwrap();
        assert!(body["error"].as_str().unwrap().contains(needle), "{path}: {body}");
    }
    let star = client
        .get(format!("{url}?wait=1s"))
        .header("if-none-match", "*")
        .send()
        .await
        .unwrap();
    assert_eq!(
        star.status(),
        StatusCode::BAD_REQUEST,
        "a long-poll on * could never end"
    );
    let unauthorized = client.get(daemon.url("/admin/status")).send().await.unwrap();
    assert_eq!(unauthorized.status(), StatusCode::UNAUTHORIZED);

    let text = metrics(&daemon).await;
    for (series, value) in [
        (
            r#"stormguard_http_requests_total{route="/v1/policies/{service}",status="200"}"#,
            2.0,
        ),
        (
            r#"stormguard_http_requests_total{route="/v1/policies/{service}",status="304"}"#,
            1.0,
        ),
        (
            r#"stormguard_http_requests_total{route="/v1/policies/{service}",status="400"}"#,
            3.0,
        ),
        (
            r#"stormguard_http_requests_total{route="/v1/policies/{service}?wait",status="304"}"#,
            1.0,
        ),
        (
            r#"stormguard_http_requests_total{route="/v1/policies/{service}?wait",status="400"}"#,
            2.0,
        ),
        (
            r#"stormguard_http_requests_total{route="unmatched",status="404"}"#,
            1.0,
        ),
        (
            r#"stormguard_http_requests_total{route="/admin/status",status="401"}"#,
            1.0,
        ),
        (
            r#"stormguard_http_request_duration_seconds_count{route="/v1/policies/{service}?wait"}"#,
            3.0,
        ),
    ] {
        assert_eq!(sample(&text, series), Some(value), "{series}\n{text}");
    }
}

#[tokio::test]
async fn kubelet_configmap_update_is_served_within_two_seconds() {
    let mut dir = ConfigMapDir::new(SEED_POLICY);
    let daemon = Daemon::start(&dir.policy(), WATCH_ONLY);
    assert_eq!(max_retries(&daemon, "payment-service").await, 2);

    dir.update(&SEED_POLICY.replace("maxRetries: 2", "maxRetries: 4"));
    let start = Instant::now();
    expect_served(
        &daemon,
        "payment-service",
        4,
        Duration::from_secs(2),
        "update not served within 2 s",
    )
    .await;
    assert!(start.elapsed() < Duration::from_secs(2));
}

#[tokio::test]
async fn broken_edit_keeps_the_last_good_policy_and_says_why() {
    let mut dir = ConfigMapDir::new(SEED_POLICY);
    let daemon = Daemon::start(&dir.policy(), WATCH_ONLY);
    assert_eq!(
        sample(&metrics(&daemon).await, "stormguard_policy_last_reload_success"),
        Some(1.0)
    );

    dir.update(&SEED_POLICY.replace("maxRetries: 2", "maxRetries: two"));
    let failed = eventually(Duration::from_secs(3), || async {
        let text = metrics(&daemon).await;
        (sample(&text, "stormguard_policy_last_reload_success") == Some(0.0)).then_some(text)
    })
    .await
    .expect("the failed reload shows in the metrics");
    assert!(failed.contains("stormguard_policy_reloads_total{result=\"failure\"} 1"));

    assert_eq!(
        max_retries(&daemon, "payment-service").await,
        2,
        "old policy still served"
    );
    assert_eq!(
        reqwest::get(daemon.url("/readyz")).await.unwrap().status(),
        StatusCode::OK
    );
    let status = admin_status(&daemon).await;
    let last = &status["lastReload"];
    assert_eq!(last["result"], "failure");
    assert_eq!(last["trigger"], "watch");
    let error = &last["errors"][0];
    assert_eq!(error["path"], "services.payment-service.maxRetries");
    assert_eq!(error["line"], 17);
    assert!(error["message"]
        .as_str()
        .unwrap()
        .contains("expected a whole number"));
    assert!(daemon.log().contains("still serving the last good policy"));

    dir.update(&SEED_POLICY.replace("maxRetries: 2", "maxRetries: 3"));
    let recovered = eventually(Duration::from_secs(3), || async {
        let text = metrics(&daemon).await;
        (sample(&text, "stormguard_policy_last_reload_success") == Some(1.0)).then_some(())
    })
    .await;
    assert!(recovered.is_some(), "a good edit after a bad one is applied");
    assert_eq!(max_retries(&daemon, "payment-service").await, 3);
}

#[tokio::test]
async fn long_poll_wakes_the_moment_the_policy_changes() {
    let mut dir = ConfigMapDir::new(SEED_POLICY);
    let daemon = Daemon::start(&dir.policy(), WATCH_ONLY);
    let url = daemon.url("/v1/policies/payment-service");
    let etag = etag_of(&url).await;

    let poll = tokio::spawn({
        let (url, etag) = (url.clone(), etag.clone());
        async move {
            let response = reqwest::Client::new()
                .get(format!("{url}?wait=30s"))
                .header("if-none-match", etag)
                .send()
                .await
                .unwrap();
            (Instant::now(), response)
        }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!poll.is_finished(), "the long-poll waits while nothing changes");

    // A change to another service does not wake this service's waiters.
    dir.update(&SEED_POLICY.replace("maxRetries: 5", "maxRetries: 6"));
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(max_retries(&daemon, "inventory-service").await, 6);
    assert!(!poll.is_finished(), "unrelated change woke the long-poll");

    let changed_at = Instant::now();
    dir.update(
        &SEED_POLICY
            .replace("maxRetries: 5", "maxRetries: 6")
            .replace("maxRetries: 2", "maxRetries: 1"),
    );
    let (answered_at, response) = tokio::time::timeout(Duration::from_secs(5), poll)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_ne!(response.headers()["etag"].to_str().unwrap(), etag);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["policy"]["maxRetries"], 1);
    assert!(answered_at - changed_at < Duration::from_secs(2));
}

#[tokio::test]
async fn one_long_poll_watches_several_services_and_wakes_only_for_them() {
    let mut dir = ConfigMapDir::new(SEED_POLICY);
    let daemon = Daemon::start(&dir.policy(), WATCH_ONLY);
    let url = daemon.url("/v1/policies?services=payment-service,search,payment-service");
    let first = reqwest::get(&url).await.unwrap();
    assert_eq!(first.status(), StatusCode::OK);
    let etag = first.headers()["etag"].to_str().unwrap().to_string();
    let body: Value = first.json().await.unwrap();
    let names: Vec<&String> = body["services"].as_object().unwrap().keys().collect();
    assert_eq!(names, ["payment-service", "search"], "sorted, each once");
    for name in ["payment-service", "search"] {
        let alone = reqwest::get(daemon.url(&format!("/v1/policies/{name}")))
            .await
            .unwrap();
        let alone_etag = alone.headers()["etag"].to_str().unwrap().to_string();
        let mut entry = body["services"][name].clone();
        assert_eq!(entry["etag"], alone_etag.as_str(), "{name}'s own ETag");
        entry.as_object_mut().unwrap().remove("etag");
        assert_eq!(
            entry,
            alone.json::<Value>().await.unwrap(),
            "{name} as served alone"
        );
    }
    let same_set = daemon.url("/v1/policies?services=search,payment-service");
    assert_eq!(
        etag_of(&same_set).await,
        etag,
        "the ETag depends on the set, not its order"
    );

    let poll = tokio::spawn({
        let (url, etag) = (url.clone(), etag.clone());
        async move {
            let response = reqwest::Client::new()
                .get(format!("{url}&wait=30s"))
                .header("if-none-match", etag)
                .send()
                .await
                .unwrap();
            (Instant::now(), response)
        }
    });
    dir.update(&SEED_POLICY.replace("maxRetries: 5", "maxRetries: 6"));
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(max_retries(&daemon, "inventory-service").await, 6);
    assert!(
        !poll.is_finished(),
        "a change to a service not watched woke the long-poll"
    );

    let changed_at = Instant::now();
    dir.update(&SEED_POLICY.replace("maxRetries: 2", "maxRetries: 1"));
    let (answered_at, response) = tokio::time::timeout(Duration::from_secs(5), poll)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert!(answered_at - changed_at < Duration::from_secs(2));
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["services"]["payment-service"]["policy"]["maxRetries"], 1);

    for (query, names) in [
        ("services=a,Bad_Name", "services: service name \"Bad_Name\""),
        ("services=", "services: "),
        ("services=a&extra=1", "extra"),
    ] {
        let refused = reqwest::get(daemon.url(&format!("/v1/policies?{query}")))
            .await
            .unwrap();
        assert_eq!(refused.status(), StatusCode::BAD_REQUEST, "{query}");
        let error = refused.json::<Value>().await.unwrap()["error"]
            .as_str()
            .unwrap()
            .to_string();
        assert!(error.contains(names), "{query}: {error}");
    }
}

#[tokio::test]
async fn admin_api_needs_the_token() {
    let dir = ConfigMapDir::new(SEED_POLICY);
    let daemon = Daemon::start(&dir.policy(), &[]);
    let client = reqwest::Client::new();

    let none = client.get(daemon.url("/admin/status")).send().await.unwrap();
    assert_eq!(none.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(
        none.headers()["www-authenticate"],
        "Bearer realm=\"stormguard-admin\""
    );
    let wrong = client
        .get(daemon.url("/admin/status"))
        .bearer_auth("nope")
        .send()
        .await
        .unwrap();
    assert_eq!(wrong.status(), StatusCode::UNAUTHORIZED);
    let reload = client.post(daemon.url("/admin/reload")).send().await.unwrap();
    assert_eq!(reload.status(), StatusCode::UNAUTHORIZED);

    let status = admin(&daemon, reqwest::Method::GET, "/admin/status")
        .send()
        .await
        .unwrap();
    assert_eq!(status.status(), StatusCode::OK);
    let status: Value = status.json().await.unwrap();
    assert_eq!(status["source"], dir.policy().display().to_string());
    assert_eq!(status["lastReload"]["result"], "success");
    assert_eq!(status["services"].as_array().unwrap().len(), 3);

    let disabled = Daemon::start_with_env(&dir.policy(), &[], &[]);
    let response = client
        .get(disabled.url("/admin/status"))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::FORBIDDEN);
    let body: Value = response.json().await.unwrap();
    assert!(body["error"].as_str().unwrap().contains("STORMGUARD_ADMIN_TOKEN"));
}

#[tokio::test]
async fn admin_token_file_and_reload_and_validate() {
    let dir = ConfigMapDir::new(SEED_POLICY);
    let token_file = dir.root().join("token");
    std::fs::write(&token_file, "from-a-file\n").unwrap();
    let daemon = Daemon::start_with_env(
        &dir.policy(),
        &["--admin-token-file", token_file.to_str().unwrap()],
        &[],
    );
    let client = reqwest::Client::new();
    let reload = client
        .post(daemon.url("/admin/reload"))
        .bearer_auth("from-a-file")
        .send()
        .await
        .unwrap();
    assert_eq!(reload.status(), StatusCode::OK);
    assert_eq!(reload.json::<Value>().await.unwrap()["result"], "unchanged");

    let validate = |body: &'static str| {
        client
            .post(daemon.url("/admin/validate"))
            .bearer_auth("from-a-file")
            .body(body)
            .send()
    };
    let good = validate("defaults: {maxRetries: 1, initialDelay: 20s, maxDelay: 30s}\nservices: {a: {}}\n")
        .await
        .unwrap();
    assert_eq!(good.status(), StatusCode::OK);
    let good: Value = good.json().await.unwrap();
    assert_eq!(good["services"], serde_json::json!(["a"]));
    assert_eq!(good["warnings"], serde_json::json!([]));
    assert_eq!(good["forecasts"][1]["service"], "a", "{good}");
    assert_eq!(good["forecasts"][1]["outage_seconds"], 10.0, "{good}");
    assert!(
        good["forecasts"][1]["explanation"]
            .as_str()
            .unwrap()
            .starts_with("serves every call"),
        "one retry 20s on outlasts a 10s outage: {good}"
    );

    let risky = validate("defaults: {jitter: none, maxRetries: 3, initialDelay: 5s}\ncallGraph: {api: [orders]}\ngatewayRetries: true\n")
        .await
        .unwrap();
    assert_eq!(
        risky.status(),
        StatusCode::OK,
        "warnings do not make a policy invalid"
    );
    let risky: Value = risky.json().await.unwrap();
    let rules: Vec<&str> = risky["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["rule"].as_str().unwrap())
        .collect();
    assert_eq!(rules, ["no-jitter", "retry-amplification"], "{risky}");
    assert!(risky["warnings"][1]["message"]
        .as_str()
        .unwrap()
        .contains("16 attempts"));
    assert_eq!(risky["forecasts"][0]["service"], "(defaults)");
    assert!(risky["forecasts"][0]["wasted"].as_u64().unwrap() > 0);
    let bad = validate("defaults:\n  maxDelays: 1s\n  multiplier: 0\n")
        .await
        .unwrap();
    assert_eq!(bad.status(), StatusCode::UNPROCESSABLE_ENTITY);
    let bad: Value = bad.json().await.unwrap();
    assert_eq!(bad["valid"], false);
    let errors = bad["errors"].as_array().unwrap();
    assert_eq!(errors.len(), 2, "{bad}");
    assert_eq!(errors[0]["line"], 2);
    assert_eq!(errors[0]["column"], 3);
    assert_eq!(errors[0]["file"], "request body");
    assert!(errors[0]["message"]
        .as_str()
        .unwrap()
        .contains("did you mean \"maxDelay\"?"));
    assert_eq!(errors[1]["path"], "defaults.multiplier");

    let huge = client
        .post(daemon.url("/admin/validate"))
        .bearer_auth("from-a-file")
        .body(vec![b'#'; 2 << 20])
        .send()
        .await
        .unwrap();
    assert_eq!(huge.status(), StatusCode::PAYLOAD_TOO_LARGE);
    assert!(huge.json::<Value>().await.unwrap()["error"]
        .as_str()
        .unwrap()
        .contains("--max-body-bytes"));
    assert_eq!(
        max_retries(&daemon, "payment-service").await,
        2,
        "nothing served changed"
    );
}

#[tokio::test]
async fn editor_rename_and_truncate_then_write_are_both_picked_up() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("policy.yaml");
    std::fs::write(&path, "defaults: {maxRetries: 1}\n").unwrap();
    let daemon = Daemon::start(&path, WATCH_ONLY);

    let staged = dir.path().join(".policy.yaml.swp");
    std::fs::write(&staged, "defaults: {maxRetries: 2}\n").unwrap();
    std::fs::rename(&staged, &path).unwrap();
    expect_served(
        &daemon,
        "any",
        2,
        Duration::from_secs(2),
        "rename-over not picked up",
    )
    .await;

    std::fs::write(&path, "defaults: {maxRetries: 7}\n").unwrap();
    expect_served(
        &daemon,
        "any",
        7,
        Duration::from_secs(2),
        "truncate-then-write not picked up",
    )
    .await;
}

#[tokio::test]
async fn a_slow_in_place_write_is_served_only_once_complete() {
    use std::io::Write;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("policy.yaml");
    std::fs::write(
        &path,
        "defaults: {maxRetries: 1}\nservices:\n  a: {maxRetries: 5}\n",
    )
    .unwrap();
    let daemon = Daemon::start(&path, WATCH_ONLY);

    let mut file = std::fs::File::create(&path).unwrap(); // truncates
                                                          // This prefix is valid YAML on its own: served, it would drop service `a`.
    file.write_all(b"defaults: {maxRetries: 1}\n").unwrap();
    file.flush().unwrap();
    for _ in 0..40 {
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert_eq!(
            max_retries(&daemon, "a").await,
            5,
            "a half-written file was served"
        );
    }
    file.write_all(b"services:\n  a: {maxRetries: 7}\n").unwrap();
    drop(file);
    expect_served(&daemon, "a", 7, Duration::from_secs(2), "the completed write").await;
    let text = metrics(&daemon).await;
    assert_eq!(
        sample(&text, "stormguard_policy_reloads_total{result=\"failure\"}"),
        Some(0.0)
    );
}

#[tokio::test]
async fn watch_recovers_when_the_directory_is_removed_and_comes_back() {
    let parent = tempfile::tempdir().unwrap();
    let dir = parent.path().join("config");
    std::fs::create_dir(&dir).unwrap();
    let path = dir.join("policy.yaml");
    std::fs::write(&path, "defaults: {maxRetries: 1}\n").unwrap();
    let daemon = Daemon::start(&path, &["--recheck-interval", "300ms"]);

    std::fs::remove_dir_all(&dir).unwrap();
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert_eq!(
        max_retries(&daemon, "any").await,
        1,
        "a missing file keeps the last good policy"
    );
    std::fs::create_dir(&dir).unwrap();
    std::fs::write(&path, "defaults: {maxRetries: 5}\n").unwrap();
    expect_served(
        &daemon,
        "any",
        5,
        Duration::from_secs(3),
        "the directory came back",
    )
    .await;

    // Changes keep arriving after the recovery.
    std::fs::write(&path, "defaults: {maxRetries: 6}\n").unwrap();
    expect_served(
        &daemon,
        "any",
        6,
        Duration::from_secs(3),
        "a change after the recovery",
    )
    .await;
}

#[tokio::test]
async fn sighup_reloads_and_shows_the_errors_again() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("policy.yaml");
    std::fs::write(&path, "defaults: {maxRetries: 1}\n").unwrap();
    let daemon = Daemon::start(&path, WATCH_ONLY);
    std::fs::write(&path, "defaults: {maxRetries: -1}\n").unwrap();
    let last_trigger = || async {
        let status = admin_status(&daemon).await;
        status["lastReload"]["trigger"].as_str().unwrap().to_owned()
    };
    assert!(eventually(Duration::from_secs(3), || async {
        (last_trigger().await == "watch").then_some(())
    })
    .await
    .is_some());
    daemon.signal("HUP");
    let by_signal = eventually(Duration::from_secs(3), || async {
        (last_trigger().await == "signal").then_some(())
    })
    .await;
    assert!(
        by_signal.is_some(),
        "SIGHUP did not reload; log:\n{}",
        daemon.log()
    );
}

#[tokio::test]
async fn sigterm_ends_long_polls_and_exits_cleanly() {
    let dir = ConfigMapDir::new(SEED_POLICY);
    let mut daemon = Daemon::start(&dir.policy(), &[]);
    let url = daemon.url("/v1/policies/payment-service");
    let etag = etag_of(&url).await;
    let poll = tokio::spawn(async move {
        reqwest::Client::new()
            .get(format!("{url}?wait=60s"))
            .header("if-none-match", etag)
            .send()
            .await
            .map(|r| r.status())
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    daemon.signal("TERM");
    let status = tokio::time::timeout(Duration::from_secs(5), poll)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        status.unwrap(),
        StatusCode::SERVICE_UNAVAILABLE,
        "the long-poll returns at shutdown, asking to come back later"
    );
    assert_eq!(daemon.wait_exit(Duration::from_secs(5)), Some(0));
}

#[test]
fn startup_with_an_invalid_policy_prints_the_errors_and_fails() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("policy.yaml");
    std::fs::write(&path, "defaults:\n  maxRetries: 3\n  initialDelay: 100\n").unwrap();
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_stormguard"))
        .args(["serve", "--listen", "127.0.0.1:0", "--policy"])
        .arg(&path)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("policy.yaml:3:17: defaults.initialDelay: a bare number is not a duration"),
        "{stderr}"
    );
}

#[test]
fn check_exits_0_for_valid_and_1_for_invalid() {
    let valid = std::process::Command::new(env!("CARGO_BIN_EXE_stormguard"))
        .args(["check", "policies/retry-policy.yaml"])
        .output()
        .unwrap();
    assert_eq!(valid.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&valid.stdout).contains("payment-service"));
    let full = std::process::Command::new(env!("CARGO_BIN_EXE_stormguard"))
        .args(["check", "policies/full-example.yaml"])
        .output()
        .unwrap();
    assert_eq!(
        full.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&full.stderr)
    );

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.yaml");
    std::fs::write(&path, "defaults: {maxRetries: 1, maxRetries: 2}\n").unwrap();
    let invalid = std::process::Command::new(env!("CARGO_BIN_EXE_stormguard"))
        .arg("check")
        .arg(&path)
        .output()
        .unwrap();
    assert_eq!(invalid.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&invalid.stderr).contains("duplicate entry with key \"maxRetries\""));
}

#[tokio::test]
async fn slow_clients_are_cut_off_and_the_daemon_keeps_serving() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let dir = ConfigMapDir::new(SEED_POLICY);
    let daemon = Daemon::start(
        &dir.policy(),
        &["--header-read-timeout", "300ms", "--body-read-timeout", "300ms"],
    );
    let address = daemon.base.trim_start_matches("http://").to_owned();

    // Headers that never end (slowloris): the connection is closed.
    let mut slow_headers = tokio::net::TcpStream::connect(&address).await.unwrap();
    slow_headers
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        .await
        .unwrap();
    let mut answer = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(3), slow_headers.read_to_end(&mut answer)).await;
    assert!(
        read.is_ok(),
        "the connection was not closed after the header-read timeout"
    );

    // A body that trickles: 408 with a JSON error naming the flag.
    let mut slow_body = tokio::net::TcpStream::connect(&address).await.unwrap();
    let head = format!(
        "POST /admin/validate HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\nContent-Length: 100\r\n\r\ndefaults:"
    );
    slow_body.write_all(head.as_bytes()).await.unwrap();
    let mut answer = vec![0; 4096];
    let n = tokio::time::timeout(Duration::from_secs(3), slow_body.read(&mut answer))
        .await
        .expect("no answer to a trickled body")
        .unwrap();
    let answer = String::from_utf8_lossy(&answer[..n]);
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("--body-read-timeout"), "{answer}");

    assert_eq!(max_retries(&daemon, "payment-service").await, 2);
}

#[tokio::test]
async fn oversized_headers_get_431_and_the_daemon_keeps_serving() {
    let dir = ConfigMapDir::new(SEED_POLICY);
    let daemon = Daemon::start(&dir.policy(), &["--max-header-bytes", "16384"]);
    let client = reqwest::Client::new();
    let big = "x".repeat(20_000);
    let refused = client
        .get(daemon.url("/v1/policies/payment-service"))
        .header("x-padding", &big)
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE);
    let fits = client
        .get(daemon.url("/v1/policies/payment-service"))
        .header("x-padding", "x".repeat(8_000))
        .send()
        .await
        .unwrap();
    assert_eq!(fits.status(), StatusCode::OK);

    let too_small = std::process::Command::new(env!("CARGO_BIN_EXE_stormguard"))
        .args(["serve", "--max-header-bytes", "100"])
        .output()
        .unwrap();
    assert_eq!(too_small.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&too_small.stderr).contains("must be between 8192"));
}

#[tokio::test]
async fn shutdown_delay_keeps_serving_with_readiness_down() {
    let dir = ConfigMapDir::new(SEED_POLICY);
    let mut daemon = Daemon::start(&dir.policy(), &["--shutdown-delay", "1s"]);
    assert_eq!(
        reqwest::get(daemon.url("/readyz")).await.unwrap().status(),
        StatusCode::OK
    );
    daemon.signal("TERM");
    let draining = eventually(Duration::from_millis(500), || async {
        let status = reqwest::get(daemon.url("/readyz")).await.ok()?.status();
        (status == StatusCode::SERVICE_UNAVAILABLE).then_some(())
    })
    .await;
    assert!(draining.is_some(), "/readyz must fail as soon as SIGTERM arrives");
    assert_eq!(
        max_retries(&daemon, "payment-service").await,
        2,
        "still serving while draining"
    );
    assert_eq!(daemon.wait_exit(Duration::from_secs(5)), Some(0));
}

#[tokio::test]
async fn long_polls_past_the_cap_are_shed_with_a_jittered_retry_after() {
    let dir = ConfigMapDir::new(SEED_POLICY);
    let daemon = Daemon::start(&dir.policy(), &["--max-long-polls", "2"]);
    let client = reqwest::Client::new();
    let url = daemon.url("/v1/policies/payment-service");
    let etag = etag_of(&url).await;
    let poll = |wait: &'static str| {
        let (client, url, etag) = (client.clone(), url.clone(), etag.clone());
        async move {
            client
                .get(format!("{url}?wait={wait}"))
                .header("if-none-match", etag)
                .send()
                .await
                .unwrap()
        }
    };
    let parked: Vec<_> = (0..2).map(|_| tokio::spawn(poll("2s"))).collect();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut waits = std::collections::BTreeSet::new();
    for _ in 0..30 {
        let shed = poll("2s").await;
        assert_eq!(shed.status(), StatusCode::SERVICE_UNAVAILABLE);
        let seconds: u64 = shed.headers()["retry-after"].to_str().unwrap().parse().unwrap();
        assert!((1..=5).contains(&seconds));
        waits.insert(seconds);
        assert!(shed.text().await.unwrap().contains("--max-long-polls"));
    }
    assert!(
        waits.len() > 1,
        "shed pollers are told different waits: {waits:?}"
    );
    for parked in parked {
        assert_eq!(parked.await.unwrap().status(), StatusCode::NOT_MODIFIED);
    }
    assert_eq!(
        poll("100ms").await.status(),
        StatusCode::NOT_MODIFIED,
        "places are free again"
    );

    let zero = std::process::Command::new(env!("CARGO_BIN_EXE_stormguard"))
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--max-long-polls",
            "0",
            "--policy",
        ])
        .arg(dir.policy())
        .output()
        .unwrap();
    assert_eq!(zero.status.code(), Some(2), "refused as a usage error");
    assert!(String::from_utf8_lossy(&zero.stderr).contains("--max-long-polls"));
}

/// Every duration and count flag is checked at start-up: a zero or a huge
/// value is refused with the flag's name and range, never accepted to panic
/// or run without its watcher later.
#[test]
fn flags_out_of_range_are_refused_with_their_name_and_range() {
    let cases: &[&[&str]] = &[
        &["--recheck-interval", "0s"],
        &["--debounce", "1h"],
        &["--max-wait", "100000h"],
        &["--max-long-polls", "0"],
        &["--max-body-bytes", "0"],
        &["--max-instances", "0"],
        &["--instance-ttl", "0s"],
        &["--batch-window", "0s"],
        &["--header-read-timeout", "0s"],
        &["--body-read-timeout", "9999h"],
        &["--shutdown-delay", "1000h"],
        &["--workers", "0"],
        &["--max-policy-bytes", "0"],
        &["--max-header-bytes", "100"],
        &["--max-attempt-label", "99999999999"],
    ];
    for args in cases {
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_stormguard"))
            .args(["serve", "--listen", "127.0.0.1:0"])
            .args(*args)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let started = std::time::Instant::now();
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break status;
            }
            if started.elapsed() > Duration::from_secs(5) {
                child.kill().unwrap();
                panic!("{args:?}: the daemon started anyway");
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let mut stderr = String::new();
        std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut stderr).unwrap();
        assert_eq!(status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(args[0]), "{args:?} names the flag: {stderr}");
        assert!(
            stderr.contains("must be between") || stderr.contains("number too large"),
            "{args:?} gives the range: {stderr}"
        );
        assert!(!stderr.contains("panicked"), "{stderr}");
    }
}

/// A client that writes its whole body before reading (as Python's urllib
/// does) gets the 413, not a broken pipe: the daemon reads and drops the
/// rest of an oversized body before answering and closing.
#[test]
fn an_oversized_body_is_answered_413_after_the_client_has_sent_it() {
    use std::io::{Read, Write};
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("policy.yaml");
    std::fs::write(&policy, SEED_POLICY).unwrap();
    let daemon = Daemon::start(&policy, &[]);
    let address = daemon.base.trim_start_matches("http://");
    let mut stream = std::net::TcpStream::connect(address).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let body = vec![b' '; 8 << 20];
    let head = format!(
        "POST /v1/reports HTTP/1.1\r\nHost: {address}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).unwrap();
    stream
        .write_all(&body)
        .expect("the whole body is taken, not cut off with a reset");
    let mut answer = String::new();
    let _ = stream.read_to_string(&mut answer);
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    assert!(
        answer.to_ascii_lowercase().contains("connection: close"),
        "{answer}"
    );
    assert!(answer.contains("--max-body-bytes"), "{answer}");
}
