//! The conformance scenarios every stormguard client runs against the real
//! daemon (clients/conformance.json), run by the Rust client. The Go and
//! Python clients run the same list in their own tests.

mod common;

use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::time::{Duration, Instant};

use common::budgeted::Budgeted;
use common::proxy::{Proxy, Trick};
use common::{eventually, metrics, sample, Daemon};
use libtest_mimic::{Arguments, Failed, Trial};
use stormguard_client::stormguard_core::gate::{Signal, Turn};
use stormguard_client::stormguard_core::guard::Guard;
use stormguard_client::stormguard_core::policy::ValidPolicy;
use stormguard_client::{
    ClientConfig, DaemonTls, Outcome, PolicySource, PolicyWatch, Reporter, ReporterConfig,
};

const SCENARIOS: &str = include_str!("../clients/conformance.json");

type Scenario = fn() -> Pin<Box<dyn Future<Output = ()>>>;

/// Each scenario of the shared list, by its id.
const RUNS: &[(&str, Scenario)] = &[
    ("start-with-the-daemon-down", || {
        Box::pin(start_with_the_daemon_down())
    }),
    ("start-from-the-cache", || Box::pin(start_from_the_cache())),
    ("watch-a-change", || Box::pin(watch_a_change())),
    ("a-bad-answer", || Box::pin(a_bad_answer())),
    ("a-lost-answer", || Box::pin(a_lost_answer())),
    ("a-draining-daemon", || Box::pin(a_draining_daemon())),
    ("a-report-answer-lost", || Box::pin(a_report_answer_lost())),
    ("a-refused-report", || Box::pin(a_refused_report())),
    ("reports-while-the-daemon-is-down", || {
        Box::pin(reports_while_the_daemon_is_down())
    }),
    ("shutdown-sends-the-last-counts", || {
        Box::pin(shutdown_sends_the_last_counts())
    }),
    ("a-rotated-token", || Box::pin(a_rotated_token())),
    ("https-with-a-ca", || Box::pin(https_with_a_ca())),
    ("paced-by-the-daemon", || Box::pin(paced_by_the_daemon())),
    ("a-lease-expires", || Box::pin(a_lease_expires())),
    ("the-daemon-goes-while-pacing", || {
        Box::pin(the_daemon_goes_while_pacing())
    }),
    ("the-daemon-hangs-while-pacing", || {
        Box::pin(the_daemon_hangs_while_pacing())
    }),
    ("a-refused-pace-ask", || Box::pin(a_refused_pace_ask())),
    ("failing-at-random-is-not-paced", || {
        Box::pin(failing_at_random_is_not_paced())
    }),
    ("a-fleet-budget-divided", || Box::pin(a_fleet_budget_divided())),
    ("a-fleet-budget-falls-back", || {
        Box::pin(a_fleet_budget_falls_back())
    }),
    ("a-fleet-half-open", || Box::pin(a_fleet_half_open())),
    ("a-fleet-half-open-without-the-daemon", || {
        Box::pin(a_fleet_half_open_without_the_daemon())
    }),
];

fn main() {
    let listed: serde_json::Value = serde_json::from_str(SCENARIOS).expect("the scenario list is JSON");
    let ids: Vec<String> = listed["scenarios"]
        .as_array()
        .expect("a list of scenarios")
        .iter()
        .map(|s| s["id"].as_str().expect("each scenario has an id").to_string())
        .collect();
    let mut trials: Vec<Trial> = ids.iter().map(|id| trial(id)).collect();
    for (id, _) in RUNS
        .iter()
        .filter(|(id, _)| !ids.iter().any(|listed| listed == id))
    {
        trials.push(Trial::test(format!("unlisted/{id}"), move || {
            Err(format!("{id} is run here but not in clients/conformance.json").into())
        }));
    }
    libtest_mimic::run(&Arguments::from_args(), trials).exit();
}

fn trial(id: &str) -> Trial {
    let run = RUNS.iter().find(|(known, _)| *known == id).map(|(_, run)| *run);
    let name = id.to_string();
    Trial::test(id, move || {
        let Some(run) = run else {
            return Err(Failed::from(format!("the Rust client does not run {name}")));
        };
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(run());
        Ok(())
    })
}

fn policy_text(retries: u32) -> String {
    format!("defaults:\n  maxRetries: 3\nservices:\n  payments:\n    maxRetries: {retries}\n")
}

/// A policy file for payments at `retries`, in a directory kept with it.
fn policy_file(retries: u32) -> (tempfile::TempDir, PathBuf) {
    policy_file_of(&policy_text(retries))
}

/// A policy file of `text`, in a directory kept with it.
fn policy_file_of(text: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("policy.yaml");
    std::fs::write(&file, text).unwrap();
    (dir, file)
}

fn serve(policy: &Path, extra: &[&str]) -> Daemon {
    Daemon::start(policy, &[&["--debounce", "20ms"], extra].concat())
}

/// [`serve`] on the socket `reserved` holds.
fn serve_on(reserved: &common::Reserved, policy: &Path) -> Daemon {
    Daemon::start_on(reserved, policy, &["--debounce", "20ms"])
}

/// A client quick to give up and to try again, as the scenarios want.
fn quick(daemon: &str, services: &[&str]) -> ClientConfig {
    ClientConfig {
        startup_wait: Duration::from_secs(5),
        watch_wait: Duration::from_secs(2),
        retry_max: Duration::from_millis(300),
        reconnect_initial: Duration::from_millis(100),
        min_poll_interval: Duration::from_millis(50),
        ..ClientConfig::for_services(daemon, services.iter().copied())
    }
}

async fn start(config: ClientConfig) -> PolicyWatch {
    PolicyWatch::start(config)
        .await
        .expect("a valid client configuration")
}

fn retries(watch: &PolicyWatch, service: &str) -> u32 {
    watch
        .client(service)
        .expect("watched")
        .policy()
        .policy
        .max_retries
}

fn source(watch: &PolicyWatch) -> PolicySource {
    watch.client("payments").expect("watched").source()
}

async fn within_10s(what: &str, mut check: impl FnMut() -> bool) {
    let done = eventually(Duration::from_secs(10), || {
        let ok = check();
        async move { ok.then_some(()) }
    })
    .await;
    assert!(done.is_some(), "{what} did not happen within 10 s");
}

async fn start_with_the_daemon_down() {
    let reserved = common::Reserved::new();
    let started = Instant::now();
    let watch = start(ClientConfig {
        startup_wait: Duration::from_millis(300),
        ..quick(&reserved.url(), &["payments"])
    })
    .await;
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "the start-up wait is bounded"
    );
    assert_eq!(
        (source(&watch), retries(&watch, "payments")),
        (PolicySource::Defaults, 3)
    );
    let (_dir, file) = policy_file(5);
    let _daemon = serve_on(&reserved, &file);
    within_10s("catching up with the daemon", || retries(&watch, "payments") == 5).await;
    assert_eq!(source(&watch), PolicySource::Daemon);
}

async fn start_from_the_cache() {
    let (dir, file) = policy_file(5);
    let cache = dir.path().join("cache.json");
    let reserved = common::Reserved::new();
    let daemon = serve_on(&reserved, &file);
    let base = daemon.base.clone();
    let config = ClientConfig {
        cache: Some(cache),
        ..quick(&base, &["payments"])
    };
    assert_eq!(source(&start(config.clone()).await), PolicySource::Daemon);
    drop(daemon);

    let watch = start(ClientConfig {
        startup_wait: Duration::from_millis(300),
        ..config
    })
    .await;
    assert_eq!(
        (source(&watch), retries(&watch, "payments")),
        (PolicySource::Cache, 5)
    );
    let _daemon = serve_on(&reserved, &file);
    within_10s("confirming the cache with the daemon", || {
        source(&watch) == PolicySource::Daemon
    })
    .await;
}

async fn watch_a_change() {
    let (_dir, file) = policy_file(2);
    let daemon = serve(&file, &[]);
    let watch = start(quick(&daemon.base, &["payments", "search"])).await;
    assert_eq!(source(&watch), PolicySource::Daemon);
    assert_eq!((retries(&watch, "payments"), retries(&watch, "search")), (2, 3));
    std::fs::write(&file, policy_text(7)).unwrap();
    within_10s("the edit arriving", || retries(&watch, "payments") == 7).await;
    let guard = watch.client("payments").expect("watched").guard();
    assert_eq!(guard.retry().max_retries, 7, "new calls use the new policy");
}

/// The client watching payments at 2 through a proxy, and the proxy.
async fn watched_through_a_proxy(file: &Path) -> (Daemon, Proxy, PolicyWatch) {
    let daemon = serve(file, &[]);
    let proxy = Proxy::start(&daemon.base, Trick::None).await;
    let watch = start(quick(&proxy.base, &["payments"])).await;
    assert_eq!(retries(&watch, "payments"), 2);
    (daemon, proxy, watch)
}

async fn a_bad_answer() {
    let (_dir, file) = policy_file(2);
    let (_daemon, proxy, watch) = watched_through_a_proxy(&file).await;
    proxy.set(Trick::GarblePolicies);
    std::fs::write(&file, policy_text(7)).unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        (retries(&watch, "payments"), source(&watch)),
        (2, PolicySource::Daemon)
    );
    proxy.set(Trick::None);
    within_10s("the edit arriving once answers are good", || {
        retries(&watch, "payments") == 7
    })
    .await;
}

async fn a_lost_answer() {
    let (_dir, file) = policy_file(2);
    let (_daemon, proxy, watch) = watched_through_a_proxy(&file).await;
    proxy.set(Trick::LosePolicyAnswers { count: 2 });
    let since = tokio::time::Instant::now();
    std::fs::write(&file, policy_text(7)).unwrap();
    within_10s("the edit arriving after the lost answers", || {
        retries(&watch, "payments") == 7
    })
    .await;
    assert!(
        proxy.requests_since("/v1/policies", since) >= 3,
        "two answers lost, then asked again"
    );
}

async fn a_draining_daemon() {
    let (_dir, file) = policy_file(4);
    let daemon = serve(&file, &["--shutdown-delay", "2s"]);
    let watch = start(quick(&daemon.base, &["payments"])).await;
    assert_eq!(retries(&watch, "payments"), 4);
    daemon.signal("TERM");
    let until = Instant::now() + Duration::from_secs(1);
    while Instant::now() < until {
        assert_eq!(
            (retries(&watch, "payments"), source(&watch)),
            (4, PolicySource::Daemon)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn reporter(daemon: &str) -> Reporter {
    Reporter::start(ReporterConfig {
        interval: Duration::from_secs(3600),
        timeout: Duration::from_millis(500),
        ..ReporterConfig::new(daemon, "pod-1")
    })
    .expect("a valid reporter configuration")
}

fn record(reporter: &Reporter, endpoint: &str, times: usize) {
    for _ in 0..times {
        reporter.record("payments", endpoint, 0, Outcome::Success);
    }
}

/// What the daemon counted as successful attempts at payments' `endpoint`.
async fn successes(daemon: &Daemon, endpoint: &str) -> Option<f64> {
    let name =
        format!(r#"http_client_requests_total{{endpoint="{endpoint}",service="payments",status="success"}}"#);
    sample(&metrics(daemon).await, &name)
}

async fn a_report_answer_lost() {
    let (_dir, file) = policy_file(2);
    let daemon = serve(&file, &[]);
    let proxy = Proxy::start(&daemon.base, Trick::LoseAnswer { nth: 1 }).await;
    let reporter = reporter(&proxy.base);
    record(&reporter, "/charge", 5);
    assert!(reporter.flush().await.is_err(), "the answer was lost");
    record(&reporter, "/charge", 1);
    reporter
        .flush()
        .await
        .expect("the batch again, then the new counts");
    assert_eq!(proxy.reports(), 3);
    assert_eq!(
        successes(&daemon, "/charge").await,
        Some(6.0),
        "every attempt once"
    );
    let duplicates = sample(
        &metrics(&daemon).await,
        r#"stormguard_reports_total{result="duplicate"}"#,
    );
    assert_eq!(duplicates, Some(1.0));
}

async fn a_refused_report() {
    let (_dir, file) = policy_file(2);
    let daemon = serve(&file, &["--max-body-bytes", "1024"]);
    let reporter = reporter(&daemon.base);
    for i in 0..40 {
        record(&reporter, &format!("/endpoint-{i}"), 1);
    }
    let refused = reporter.flush().await.unwrap_err();
    assert!(refused.to_string().contains("413"), "{refused}");
    record(&reporter, "/charge", 1);
    reporter
        .flush()
        .await
        .expect("the refused batch is not in the way");
    assert_eq!(successes(&daemon, "/charge").await, Some(1.0));
    assert_eq!(
        successes(&daemon, "/endpoint-0").await,
        None,
        "dropped, not resent"
    );
}

async fn reports_while_the_daemon_is_down() {
    let reserved = common::Reserved::new();
    let reporter = reporter(&reserved.url());
    record(&reporter, "/charge", 3);
    assert!(reporter.flush().await.is_err(), "nobody listens yet");
    let (_dir, file) = policy_file(2);
    let daemon = serve_on(&reserved, &file);
    reporter.flush().await.expect("the daemon is up");
    reporter.flush().await.expect("nothing more to send");
    assert_eq!(successes(&daemon, "/charge").await, Some(3.0), "once");
}

async fn shutdown_sends_the_last_counts() {
    let (_dir, file) = policy_file(2);
    let daemon = serve(&file, &[]);
    let proxy = Proxy::start(&daemon.base, Trick::None).await;
    let reporter = reporter(&proxy.base);
    record(&reporter, "/charge", 4);
    reporter.shutdown().await;
    assert_eq!(successes(&daemon, "/charge").await, Some(4.0));
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(proxy.reports(), 1, "nothing is sent after");
}

/// A file of clients/credentials.
fn credential(name: &str) -> PathBuf {
    Path::new("clients/credentials").join(name)
}

fn tokens() -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(credential("tokens.json")).unwrap()).unwrap()
}

/// The daemon on `file`, requiring tokens signed by the issuer of clients/credentials.
fn serve_checking_tokens(file: &Path, tokens: &serde_json::Value) -> Daemon {
    let keys = credential("jwks.json");
    serve(
        file,
        &[
            "--tokens",
            "required",
            "--token-keys",
            keys.to_str().unwrap(),
            "--token-issuer",
            tokens["issuer"].as_str().unwrap(),
        ],
    )
}

async fn a_rotated_token() {
    let (dir, file) = policy_file(2);
    let tokens = tokens();
    let daemon = serve_checking_tokens(&file, &tokens);
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, tokens["expired"].as_str().unwrap()).unwrap();
    let reporter = Reporter::start(ReporterConfig {
        interval: Duration::from_secs(3600),
        timeout: Duration::from_millis(500),
        token_file: Some(token_file.clone()),
        ..ReporterConfig::new(&daemon.base, "pod-1")
    })
    .unwrap();
    record(&reporter, "/charge", 2);
    let refused = reporter.flush().await.unwrap_err();
    assert!(refused.to_string().contains("401"), "{refused}");
    std::fs::write(&token_file, tokens["valid"].as_str().unwrap()).unwrap();
    reporter
        .flush()
        .await
        .expect("the kept batch, with the valid token");
    assert_eq!(successes(&daemon, "/charge").await, Some(2.0), "once");
    let refusals = sample(
        &metrics(&daemon).await,
        r#"stormguard_token_refusals_total{reason="expired"}"#,
    );
    assert_eq!(refusals, Some(1.0));
}

async fn https_with_a_ca() {
    let (_dir, file) = policy_file(5);
    let flags = [
        ("--tls-cert", "daemon.crt"),
        ("--tls-key", "daemon.key"),
        ("--tls-client-ca", "ca.crt"),
    ]
    .map(|(flag, name)| [flag.to_string(), credential(name).display().to_string()]);
    let flags: Vec<&str> = flags.iter().flatten().map(String::as_str).collect();
    let daemon = serve(&file, &flags);
    let port = daemon.base.rsplit(':').next().unwrap();
    let base = format!("https://localhost:{port}");
    let tls = DaemonTls {
        ca_file: Some(credential("ca.crt")),
        cert_file: Some(credential("client.crt")),
        key_file: Some(credential("client.key")),
    };
    let trusting = start(ClientConfig {
        tls: tls.clone(),
        ..quick(&base, &["payments"])
    })
    .await;
    assert_eq!(retries(&trusting, "payments"), 5);
    assert_eq!(source(&trusting), PolicySource::Daemon);
    let reporter = Reporter::start(ReporterConfig {
        interval: Duration::from_secs(3600),
        tls: tls.clone(),
        ..ReporterConfig::new(&base, "pod-1")
    })
    .unwrap();
    record(&reporter, "/charge", 1);
    reporter.flush().await.expect("sent over HTTPS");

    let distrusting = ClientConfig {
        startup_wait: Duration::from_millis(300),
        tls: DaemonTls {
            ca_file: None,
            ..tls.clone()
        },
        ..quick(&base, &["payments"])
    };
    let started = Instant::now();
    let distrusting = start(distrusting).await;
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(retries(&distrusting, "payments"), 3);
    assert_eq!(source(&distrusting), PolicySource::Defaults);

    let counted = trusting_metrics(&base, &tls).await;
    let name = r#"http_client_requests_total{endpoint="/charge",service="payments",status="success"}"#;
    assert_eq!(sample(&counted, name), Some(1.0));
}

/// The daemon's metrics, read over HTTPS with the client's certificate.
async fn trusting_metrics(base: &str, tls: &DaemonTls) -> String {
    let read = |name: &Option<PathBuf>| std::fs::read(name.as_ref().unwrap()).unwrap();
    let identity = [read(&tls.cert_file), read(&tls.key_file)].concat();
    let http = reqwest::Client::builder()
        .tls_built_in_root_certs(false)
        .add_root_certificate(reqwest::Certificate::from_pem(&read(&tls.ca_file)).unwrap())
        .identity(reqwest::Identity::from_pem(&identity).unwrap())
        .build()
        .unwrap();
    let answer = http.get(format!("{base}/metrics")).send().await.unwrap();
    answer.text().await.unwrap()
}

/// The policy of the pacing scenarios: payments with its send gate on,
/// and `extra` lines after it.
fn gated_policy_file(extra: &str) -> (tempfile::TempDir, PathBuf) {
    policy_file_of(&format!(
        "defaults:\n  maxRetries: 3\nservices:\n  payments:\n    maxRetries: 2\n    gate:\n      enabled: true\n      overloadWhen: any-refusal\n{extra}"
    ))
}

/// A process pacing payments: its guard under the policy `served` serves,
/// tracked by a reporter (instance `instance`) with fleet pacing on that
/// asks `daemon`, and its gate turned on by one refused attempt.
async fn pacing_process(
    served: &Daemon,
    daemon: &str,
    token: Option<PathBuf>,
    instance: &str,
) -> (Guard, Reporter) {
    let (guard, reporter) = gated_process(served, daemon, token, instance).await;
    let now = tokio::time::Instant::now();
    let gate = guard.gate().expect("the policy has a gate");
    gate.record_at(Signal::Overloaded, now, now);
    assert!(gate.is_on());
    (guard, reporter)
}

/// A process with payments's gate: its guard under the policy `served`
/// serves, tracked by a reporter (instance `instance`) with fleet pacing on
/// that asks `daemon`.
async fn gated_process(
    served: &Daemon,
    daemon: &str,
    token: Option<PathBuf>,
    instance: &str,
) -> (Guard, Reporter) {
    let watch = start(quick(&served.base, &["payments"])).await;
    let resolved = watch.client("payments").expect("watched").policy().policy;
    let guard = Guard::from_policy(&ValidPolicy::try_from(resolved).unwrap());
    let reporter = Reporter::start(ReporterConfig {
        interval: Duration::from_secs(3600),
        timeout: Duration::from_millis(500),
        token_file: token,
        ..ReporterConfig::new(daemon, instance)
    })
    .expect("a valid reporter configuration");
    reporter.track("payments", &guard);
    (guard, reporter)
}

/// The rate `guard`'s gate paces at now, and its own.
fn paces(guard: &Guard) -> (f64, f64) {
    let gate = guard.gate().unwrap();
    let now = tokio::time::Instant::now();
    (gate.rate_at(now).unwrap_or(0.0), gate.own_rate().unwrap_or(0.0))
}

async fn fleet_sample(daemon: &Daemon, name: &str) -> Option<f64> {
    sample(&metrics(daemon).await, name)
}

/// Over a second, at each moment the daemon paces every gate of `guards`
/// (each at a grant, not its own rate): the sum of their paces and the rate
/// the daemon shares, `stormguard_fleet_rate` (the higher of a reading
/// before and after, as it may move meanwhile).
async fn paced_together(daemon: &Daemon, guards: [&Guard; 2]) -> Vec<(f64, f64)> {
    let rate = r#"stormguard_fleet_rate{service="payments"}"#;
    let mut together = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(1);
    while Instant::now() < deadline {
        let before = fleet_sample(daemon, rate).await;
        let now = guards.map(paces);
        let after = fleet_sample(daemon, rate).await;
        let granted = now.iter().all(|&(pace, own)| pace > 0.0 && pace != own);
        if let (true, Some(before), Some(after)) = (granted, before, after) {
            together.push((now.iter().map(|&(pace, _)| pace).sum(), before.max(after)));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    together
}

/// Two processes paced by the daemon, after pod-1's gate saw one attempt
/// accepted and pod-2's three: alone each would pace at what its own
/// outcomes say, and the daemon, which learns from both, grants each its
/// part of the fleet's rate, which is neither: a gate that kept its own
/// rate is told apart from one paced by the daemon.
async fn two_paced_processes(daemon: &Daemon) -> [(Guard, Reporter); 2] {
    let first = pacing_process(daemon, &daemon.base, None, "pod-1").await;
    let second = pacing_process(daemon, &daemon.base, None, "pod-2").await;
    for ((guard, _), accepted) in [(&first, 1), (&second, 3)] {
        let gate = guard.gate().unwrap();
        for _ in 0..accepted {
            let now = tokio::time::Instant::now();
            gate.record_at(Signal::Accepted, now, now);
        }
    }
    let counted = eventually(Duration::from_secs(5), || async {
        let processes = fleet_sample(daemon, r#"stormguard_fleet_processes{service="payments"}"#).await?;
        let accepted = r#"stormguard_fleet_attempts_total{outcome="accepted",service="payments"}"#;
        (processes == 2.0 && fleet_sample(daemon, accepted).await? == 4.0).then_some(())
    })
    .await;
    assert!(
        counted.is_some(),
        "the daemon paces both processes\n{}",
        metrics(daemon).await
    );
    [first, second]
}

async fn paced_by_the_daemon() {
    let (_dir, file) = gated_policy_file("");
    let daemon = serve(&file, &[]);
    let processes = two_paced_processes(&daemon).await;
    for ((guard, _), alone) in processes.iter().zip([16.5, 48.5]) {
        let granted = eventually(Duration::from_secs(5), || {
            let (pace, own) = paces(guard);
            async move { (own == alone && pace > 0.0 && pace != own).then_some(()) }
        })
        .await;
        assert!(
            granted.is_some(),
            "paced at its part of the grant, not {alone}: {:?}",
            paces(guard)
        );
    }
    let guards = [&processes[0].0, &processes[1].0];
    let together = paced_together(&daemon, guards).await;
    assert!(!together.is_empty(), "both paced by the daemon for a while");
    assert!(
        together.iter().all(|&(paced, rate)| paced <= 1.2 * rate),
        "together above the rate the daemon shares (paced, rate): {together:?}"
    );
}

async fn a_lease_expires() {
    let (_dir, file) = gated_policy_file("");
    let daemon = serve(&file, &[]);
    let proxy = Proxy::start(
        &daemon.base,
        Trick::GrantOnce {
            rate: 7.25,
            lease_ms: 2000,
        },
    )
    .await;
    let (guard, reporter) = pacing_process(&daemon, &proxy.base, None, "pod-1").await;
    let granted = eventually(Duration::from_secs(5), || {
        let paced = paces(&guard) == (7.25, 0.5);
        async move { paced.then_some(()) }
    })
    .await;
    assert!(granted.is_some(), "paced at the grant: {:?}", paces(&guard));
    let over = eventually(Duration::from_secs(5), || {
        let (pace, own) = paces(&guard);
        async move { (pace == own).then_some(()) }
    })
    .await;
    assert!(over.is_some(), "its own rate once the lease is over");
    assert!(reporter.stats().pace_failures > 0, "the 503s are counted");
    let gate = guard.gate().unwrap();
    let later = tokio::time::Instant::now() + Duration::from_secs(3);
    assert_eq!(gate.turn_at(later), Turn::Now, "turns at its own rate");
}

async fn the_daemon_goes_while_pacing() {
    let (_dir, file) = gated_policy_file("");
    paced_until_the_daemon_is_killed(serve(&file, &[])).await;
}

async fn the_daemon_hangs_while_pacing() {
    let (_dir, file) = gated_policy_file("");
    let held = common::Reserved::new();
    paced_until_the_daemon_is_killed(serve_on(&held, &file)).await;
}

/// The pacing scenarios' end: pod-1 is paced at its part of the grant,
/// then `daemon` is killed; what its address does then is the caller's.
async fn paced_until_the_daemon_is_killed(mut daemon: Daemon) {
    let [(guard, reporter), _other] = two_paced_processes(&daemon).await;
    let granted = eventually(Duration::from_secs(5), || {
        let (pace, own) = paces(&guard);
        async move { (pace > 0.0 && pace != own).then_some(()) }
    })
    .await;
    assert!(
        granted.is_some(),
        "paced at its part of the grant first: {:?}",
        paces(&guard)
    );
    let failures = reporter.stats().pace_failures;
    daemon.kill();
    let alone = eventually(Duration::from_secs(5), || {
        let (pace, own) = paces(&guard);
        let failed = reporter.stats().pace_failures > failures;
        async move { (failed && pace == own).then_some(()) }
    })
    .await;
    assert!(alone.is_some(), "alone within 5 s: {:?}", paces(&guard));
    let later = tokio::time::Instant::now() + Duration::from_secs(3);
    assert_eq!(guard.gate().unwrap().turn_at(later), Turn::Now);
}

async fn failing_at_random_is_not_paced() {
    let (_dir, file) = policy_file_of(
        "defaults:\n  maxRetries: 3\nservices:\n  payments:\n    maxRetries: 2\n    gate:\n      enabled: true\n",
    );
    let daemon = serve(&file, &[]);
    let first = gated_process(&daemon, &daemon.base, None, "pod-1").await;
    let second = gated_process(&daemon, &daemon.base, None, "pod-2").await;
    let gates = [first.0.gate().unwrap(), second.0.gate().unwrap()];
    let watching = r#"stormguard_fleet_process_gates{gate="watching",service="payments"}"#;
    let overloaded = r#"stormguard_fleet_judgement{judgement="overloaded",service="payments"}"#;
    let mut heard = false;
    let deadline = Instant::now() + Duration::from_secs(10);
    // Every 50 ms an attempt each, at least 50, until the daemon has been
    // heard judging no overload of two watching gates (it counts only the
    // gates that asked within its last three asks, so it is read meanwhile).
    for i in 0.. {
        if (i >= 50 && heard) || Instant::now() > deadline {
            break;
        }
        let signal = if i % 3 == 2 {
            Signal::Overloaded
        } else {
            Signal::Accepted
        };
        for gate in gates {
            let now = tokio::time::Instant::now();
            assert_eq!(gate.turn_at(now), Turn::Now, "attempt {i}: a turn at once");
            gate.record_at(signal, now, now);
            assert!(
                !gate.is_on(),
                "attempt {i}: a third refused at random turned the gate on"
            );
        }
        if i >= 10 && !heard {
            let shown = metrics(&daemon).await;
            heard = sample(&shown, watching) == Some(2.0) && sample(&shown, overloaded) == Some(0.0);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        heard,
        "the daemon hears two watching gates and judges no overload\n{}",
        metrics(&daemon).await
    );

    let (third, _reporter) = gated_process(&daemon, &daemon.base, None, "pod-3").await;
    let gate = third.gate().unwrap();
    let t0 = tokio::time::Instant::now();
    for refusal in 1..=5 {
        let at = t0 + Duration::from_millis(refusal);
        gate.record_at(Signal::Overloaded, at, at);
        assert_eq!(
            gate.is_on(),
            refusal == 5,
            "after {refusal} refusals with nothing accepted"
        );
    }
}

async fn a_refused_pace_ask() {
    let (dir, file) = gated_policy_file("reporters:\n  payments: [shop/cart]\n");
    let tokens = tokens();
    let daemon = serve_checking_tokens(&file, &tokens);
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, tokens["valid"].as_str().unwrap()).unwrap();
    let (guard, reporter) = pacing_process(&daemon, &daemon.base, Some(token_file), "pod-1").await;
    within_10s("a refused ask", || reporter.stats().pace_failures >= 2).await;
    let (pace, own) = paces(&guard);
    assert_eq!(pace, own, "alone");
    assert_eq!(
        fleet_sample(&daemon, r#"stormguard_fleet_processes{service="payments"}"#).await,
        None,
        "the daemon paces nobody for payments"
    );
}

/// The fleet-budget scenarios' policy file: payments's budget is the
/// fleet's, 12 retries a second, with no ratio.
fn fleet_budget_file() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("policy.yaml");
    let text = "defaults:\n  maxRetries: 3\nservices:\n  payments:\n    maxRetries: 2\n    budget:\n      scope: fleet\n      retryRatio: 0\n      minRetriesPerSecond: 12\n";
    std::fs::write(&file, text).unwrap();
    (dir, file)
}

/// A process calling payments under the policy `served` serves, reporting
/// to `daemon` as `instance` (an hour's interval), after one successful call.
async fn budgeted_process(served: &Daemon, daemon: &str, instance: &str) -> Budgeted {
    let process = Budgeted::start(&served.base, daemon, "payments", instance).await;
    process.calls(1).await;
    process
}

fn near(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-9
}

async fn a_fleet_budget_divided() {
    let (_dir, file) = fleet_budget_file();
    let mut daemon = serve(&file, &[]);
    let first = budgeted_process(&daemon, &daemon.base, "pod-1").await;
    let second = budgeted_process(&daemon, &daemon.base, "pod-2").await;
    first.reporter.flush().await.expect("the daemon is up");
    second.reporter.flush().await.expect("the daemon is up");
    assert!(
        near(first.floor(), 12.0),
        "alone when it reported: {}",
        first.floor()
    );
    let part = second.floor();
    assert!(
        part > 0.0 && part < 12.0,
        "its part of 12 between the two: {part}"
    );
    let processes = r#"stormguard_budget_processes{service="payments"}"#;
    assert_eq!(fleet_sample(&daemon, processes).await, Some(2.0));
    daemon.kill();
    assert!(second.reporter.flush().await.is_err(), "the daemon is gone");
    assert!(
        near(second.floor(), 6.0),
        "12 over the 2 processes last heard of: {}",
        second.floor()
    );
}

async fn a_fleet_budget_falls_back() {
    let (_dir, file) = fleet_budget_file();
    let daemon = serve(&file, &[]);
    let trick = Trick::FloorOnce {
        service: "payments",
        per_second: 2.5,
        processes: 4,
    };
    let proxy = Proxy::start(&daemon.base, trick).await;
    let payments = budgeted_process(&daemon, &proxy.base, "pod-1").await;
    assert!(near(payments.floor(), 12.0), "the whole floor before any answer");
    payments.reporter.flush().await.expect("the proxy's answer");
    assert!(
        near(payments.floor(), 2.5),
        "the daemon's part: {}",
        payments.floor()
    );
    assert!(payments.reporter.flush().await.is_err(), "503");
    assert!(
        near(payments.floor(), 3.0),
        "12 over the 4 processes last heard of: {}",
        payments.floor()
    );
}

/// The fleet half-open scenarios' policy file: payments's breaker opens at
/// two failures, for a second, and its half-open is the fleet's.
fn fleet_breaker_file() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("policy.yaml");
    let text = "defaults:\n  maxRetries: 3\nservices:\n  payments:\n    maxRetries: 2\n    circuitBreaker: {enabled: true, consecutiveFailures: 2, openTimeout: 1s, halfOpenMaxCalls: 1, successThreshold: 1, scope: fleet}\n";
    std::fs::write(&file, text).unwrap();
    (dir, file)
}

/// A process calling payments: its guard under the policy the daemon
/// serves, tracked by a reporter that asks the daemon, and its breaker
/// opened by two failed calls.
async fn broken_process(daemon: &Daemon) -> (Guard, Reporter) {
    use stormguard_client::stormguard_core::breaker::CallOutcome;
    let watch = start(quick(&daemon.base, &["payments"])).await;
    let resolved = watch.client("payments").expect("watched").policy().policy;
    let guard = Guard::from_policy(&ValidPolicy::try_from(resolved).unwrap());
    let reporter = Reporter::start(ReporterConfig {
        interval: Duration::from_secs(3600),
        timeout: Duration::from_millis(500),
        ..ReporterConfig::new(&daemon.base, "pod-1")
    })
    .expect("a valid reporter configuration");
    reporter.track("payments", &guard);
    let breaker = guard.breaker().expect("the policy has a breaker");
    for _ in 0..2 {
        breaker
            .try_acquire()
            .expect("closed")
            .record(CallOutcome::Failure);
    }
    (guard, reporter)
}

async fn fleet_breaker_state(daemon: &Daemon) -> Option<f64> {
    fleet_sample(daemon, r#"stormguard_fleet_breaker_state{service="payments"}"#).await
}

/// Waits up to 10 s for the daemon's fleet breaker for payments to be in
/// `state` (its metric's number).
async fn fleet_breaker_becomes(daemon: &Daemon, state: f64) {
    let seen = eventually(Duration::from_secs(10), || async {
        (fleet_breaker_state(daemon).await? == state).then_some(())
    })
    .await;
    assert!(
        seen.is_some(),
        "the daemon's breaker is not {state}\n{}",
        metrics(daemon).await
    );
}

/// The first permit `guard`'s breaker grants, asked every 10 ms for up to 10 s.
async fn first_permit(guard: &Guard) -> stormguard_client::stormguard_core::breaker::Permit {
    let breaker = guard.breaker().unwrap();
    eventually(Duration::from_secs(10), || {
        let asked = breaker.try_acquire();
        async move { asked.ok() }
    })
    .await
    .expect("a permit within 10 s")
}

async fn a_fleet_half_open() {
    use stormguard_client::stormguard_core::breaker::{CallOutcome, CircuitState};
    let (_dir, file) = fleet_breaker_file();
    let daemon = serve(&file, &[]);
    let (guard, _reporter) = broken_process(&daemon).await;
    fleet_breaker_becomes(&daemon, 2.0).await;
    // Refused until the daemon's slot comes.
    let trial = first_permit(&guard).await;
    assert!(trial.is_fleet_trial(), "the fleet's trial, not its own");
    trial.record(CallOutcome::Success);
    let breaker = guard.breaker().unwrap();
    within_10s("the fleet closes its breaker", || {
        breaker.state() == CircuitState::Closed
    })
    .await;
    fleet_breaker_becomes(&daemon, 0.0).await;
}

async fn a_fleet_half_open_without_the_daemon() {
    let (_dir, file) = fleet_breaker_file();
    let mut daemon = serve(&file, &[]);
    let (guard, reporter) = broken_process(&daemon).await;
    fleet_breaker_becomes(&daemon, 2.0).await;
    let failures = reporter.stats().pace_failures;
    daemon.kill();
    let trial = first_permit(&guard).await;
    assert!(
        trial.is_trial() && !trial.is_fleet_trial(),
        "its own half-open's trial"
    );
    assert!(
        reporter.stats().pace_failures > failures,
        "the failed asks are counted"
    );
}
