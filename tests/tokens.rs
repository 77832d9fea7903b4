//! Service-account tokens on reports and pace asks, end to end: the real
//! daemon, real tokens signed by keys the test makes, and a process
//! without a valid token trying to throttle a dependency or fake a storm.

mod common;

use common::issuer::{claims, now, Issuer};
use common::{metrics, Daemon, GATED_POLICY};
use reqwest::StatusCode;
use serde_json::{json, Value};

/// Only shop/checkout may report about inventory or ask for its pace.
const LISTED: &str = "reporters:\n  inventory: [shop/checkout]\n";

struct Setup {
    _dir: tempfile::TempDir,
    daemon: Daemon,
    issuer: Issuer,
}

fn start(mode: &str) -> Setup {
    start_with(mode, GATED_POLICY)
}

fn start_with(mode: &str, policy_text: &str) -> Setup {
    let issuer = Issuer::new();
    let dir = tempfile::tempdir().unwrap();
    let (policy, keys) = (dir.path().join("policy.yaml"), dir.path().join("jwks.json"));
    std::fs::write(&policy, policy_text).unwrap();
    std::fs::write(&keys, issuer.jwks.to_string()).unwrap();
    let daemon = Daemon::start(
        &policy,
        &[
            "--tokens",
            mode,
            "--token-keys",
            keys.to_str().unwrap(),
            "--token-issuer",
            "https://kubernetes.default.svc",
        ],
    );
    Setup {
        _dir: dir,
        daemon,
        issuer,
    }
}

async fn post(daemon: &Daemon, path: &str, token: Option<&str>, body: &Value) -> (StatusCode, Value) {
    let mut request = reqwest::Client::new().post(daemon.url(path)).json(body);
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let response = request.send().await.unwrap();
    let status = response.status();
    (status, response.json().await.unwrap_or(Value::Null))
}

fn ask(instance: &str, sent: u64, accepted: u64, overloaded: u64) -> Value {
    json!({"service": "inventory", "instance": instance, "sent": sent, "accepted": accepted,
           "overloaded": overloaded, "waiting": 5})
}

fn storm(instance: &str) -> Value {
    json!({"service": "inventory", "instance": instance,
           "endpoints": [{"endpoint": "/stock", "requests": {"server_error": 100000}}],
           "circuitState": "open"})
}

/// The samples an attacker would want to move: the fleet's pacing and the
/// clients' counts.
fn paced_and_counted(exposition: &str) -> Vec<String> {
    exposition
        .lines()
        .filter(|l| {
            [
                "stormguard_fleet_rate",
                "stormguard_fleet_attempts_total",
                "http_client_requests_total",
                "circuit_breaker_state",
            ]
            .iter()
            .any(|family| l.starts_with(family))
        })
        .map(str::to_string)
        .collect()
}

fn refusals(exposition: &str, reason: &str) -> Option<f64> {
    common::sample(
        exposition,
        &format!(r#"stormguard_token_refusals_total{{reason="{reason}"}}"#),
    )
}

#[tokio::test]
async fn without_a_valid_token_nobody_moves_the_fleets_pacing_or_its_counts() {
    let Setup { daemon, issuer, .. } = start("required");
    let checkout = issuer.sign(&claims("shop", "checkout"), false);
    let (status, grant) = post(&daemon, "/v1/pace", Some(&checkout), &ask("pod-a", 50, 50, 0)).await;
    assert_eq!(status, StatusCode::OK, "{grant}");
    let (status, _) = post(
        &daemon,
        "/v1/reports",
        Some(&checkout),
        &json!({"service": "inventory", "instance": "pod-a",
        "endpoints": [{"endpoint": "/stock", "requests": {"success": 50}}]}),
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED);
    let before = paced_and_counted(&metrics(&daemon).await);
    assert!(!before.is_empty());

    let mut expired = claims("shop", "checkout");
    expired["exp"] = json!(now() - 3600);
    let mut elsewhere = claims("shop", "checkout");
    elsewhere["aud"] = json!(["https://kubernetes.default.svc"]);
    let forged = Issuer::new().sign(&claims("shop", "checkout"), true);
    let intruder = issuer.sign(&claims("shop", "intruder"), true);
    let attempts = [
        (None, StatusCode::UNAUTHORIZED, "pod-evil"),
        (
            Some(issuer.sign(&expired, false)),
            StatusCode::UNAUTHORIZED,
            "pod-a",
        ),
        (
            Some(issuer.sign(&elsewhere, true)),
            StatusCode::UNAUTHORIZED,
            "pod-a",
        ),
        (Some(forged), StatusCode::UNAUTHORIZED, "pod-a"),
        (Some(intruder), StatusCode::FORBIDDEN, "pod-a"),
    ];
    for (token, refused, instance) in &attempts {
        for _ in 0..20 {
            let (status, body) = post(
                &daemon,
                "/v1/pace",
                token.as_deref(),
                &ask(instance, 1000, 0, 1000),
            )
            .await;
            assert_eq!(status, *refused, "{body}");
            let (status, body) = post(&daemon, "/v1/reports", token.as_deref(), &storm(instance)).await;
            assert_eq!(status, *refused, "{body}");
        }
    }
    let after = metrics(&daemon).await;
    assert_eq!(paced_and_counted(&after), before, "the attack moved nothing");
    assert_eq!(refusals(&after, "missing"), Some(40.0));
    assert_eq!(refusals(&after, "expired"), Some(40.0));
    assert_eq!(refusals(&after, "audience"), Some(40.0));
    assert_eq!(refusals(&after, "signature"), Some(40.0));
    let log = daemon.log();
    let logged: Vec<&str> = log.lines().filter(|l| l.contains("was refused")).collect();
    assert_eq!(logged.len(), 1, "160 refusals counted, one logged:\n{log}");
    assert!(
        logged[0].contains("from 127.0.0.1:"),
        "it names who sent it: {}",
        logged[0]
    );

    let (status, again) = post(&daemon, "/v1/pace", Some(&checkout), &ask("pod-a", 50, 50, 0)).await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        again["rate"].as_f64() >= grant["rate"].as_f64(),
        "{grant} then {again}"
    );
}

#[tokio::test]
async fn a_refusal_says_why_and_how_to_authenticate() {
    let Setup { daemon, issuer, .. } = start("required");
    let response = reqwest::Client::new()
        .post(daemon.url("/v1/reports"))
        .bearer_auth(issuer.sign(&claims("shop", "checkout"), false).replace('.', "!"))
        .json(&storm("pod-a"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
    assert!(response.headers()["www-authenticate"]
        .to_str()
        .unwrap()
        .starts_with("Bearer"));
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["reason"], "malformed", "{body}");
}

#[tokio::test]
async fn optional_mode_serves_callers_without_a_token_and_counts_them_apart() {
    let Setup { daemon, issuer, .. } = start("optional");
    let (status, _) = post(&daemon, "/v1/reports", None, &storm("pod-b")).await;
    assert_eq!(status, StatusCode::ACCEPTED);
    let checkout = issuer.sign(&claims("shop", "checkout"), false);
    let (status, _) = post(&daemon, "/v1/reports", Some(&checkout), &storm("pod-a")).await;
    assert_eq!(status, StatusCode::ACCEPTED);
    let (status, body) = post(&daemon, "/v1/reports", None, &storm("pod-a")).await;
    assert_eq!(
        status,
        StatusCode::FORBIDDEN,
        "pod-a speaks as shop/checkout now: {body}"
    );
    let text = metrics(&daemon).await;
    assert_eq!(
        common::sample(&text, "stormguard_reports_unauthenticated_total"),
        Some(2.0)
    );
}

#[test]
fn checking_tokens_without_keys_or_with_bad_keys_does_not_start() {
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("policy.yaml");
    std::fs::write(&policy, GATED_POLICY).unwrap();
    let keys = dir.path().join("jwks.json");
    std::fs::write(&keys, r#"{"keys": [{"kty": "oct", "k": "c2VjcmV0"}]}"#).unwrap();
    let run = |extra: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_stormguard"))
            .args([
                "serve",
                "--policy",
                policy.to_str().unwrap(),
                "--listen",
                "127.0.0.1:0",
            ])
            .args(extra)
            .output()
            .unwrap()
    };
    let no_keys = run(&["--tokens", "required"]);
    assert!(!no_keys.status.success());
    assert!(String::from_utf8_lossy(&no_keys.stderr).contains("give --token-keys"));
    let bad_keys = run(&["--tokens", "optional", "--token-keys", keys.to_str().unwrap()]);
    assert!(!bad_keys.status.success());
    let stderr = String::from_utf8_lossy(&bad_keys.stderr);
    assert!(stderr.contains("jwks.json: keys[0]: kty \"oct\""), "{stderr}");
}

#[tokio::test]
async fn a_dependencys_reporters_alone_may_speak_for_it() {
    let Setup { daemon, issuer, .. } = start_with("optional", &format!("{GATED_POLICY}{LISTED}"));
    let checkout = issuer.sign(&claims("shop", "checkout"), false);
    let intruder = issuer.sign(&claims("shop", "intruder"), true);
    let (status, _) = post(&daemon, "/v1/pace", Some(&checkout), &ask("pod-a", 50, 50, 0)).await;
    assert_eq!(status, StatusCode::OK);
    let before = paced_and_counted(&metrics(&daemon).await);

    for (token, instance) in [(Some(&intruder), "pod-x"), (None, "pod-y")] {
        let token = token.map(String::as_str);
        let (status, body) = post(&daemon, "/v1/pace", token, &ask(instance, 1000, 0, 1000)).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
        assert!(
            body["error"].as_str().unwrap().contains("reporters.inventory"),
            "{body}"
        );
        let (status, body) = post(&daemon, "/v1/reports", token, &storm(instance)).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    }
    assert_eq!(
        paced_and_counted(&metrics(&daemon).await),
        before,
        "nothing moved"
    );

    let payments = json!({"service": "payments", "instance": "pod-x",
        "endpoints": [{"endpoint": "/charge", "requests": {"success": 1}}]});
    let (status, body) = post(&daemon, "/v1/reports", Some(&intruder), &payments).await;
    assert_eq!(
        status,
        StatusCode::ACCEPTED,
        "a dependency not listed is open: {body}"
    );
}

#[test]
fn a_bad_reporters_entry_is_named_and_the_file_refused() {
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("policy.yaml");
    std::fs::write(&policy, "reporters:\n  inventory: [checkout, shop/*]\n").unwrap();
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_stormguard"))
        .arg("check")
        .arg(&policy)
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stdout = String::from_utf8_lossy(&output.stdout) + String::from_utf8_lossy(&output.stderr);
    assert!(
        stdout.contains("reporters.inventory[0]") && stdout.contains("NAMESPACE/SERVICE-ACCOUNT"),
        "{stdout}"
    );
}
