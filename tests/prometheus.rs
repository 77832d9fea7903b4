//! The bundled rules and dashboards against a real Prometheus (Debian's
//! package): the daemon is scraped every second, calm traffic fires nothing,
//! a storm driven through `POST /v1/reports` fires HighRetryRate and
//! CircuitBreakerOpen, and every dashboard query returns data.

mod common;

use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::time::Duration;

use common::{eventually, Daemon, SEED_POLICY};
use serde_json::{json, Value};

/// A Prometheus on loopback; killed when dropped.
struct Prometheus {
    child: Child,
    base: String,
    _dir: tempfile::TempDir,
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A port free when asked: for a server that binds it itself.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The bundled rules with every `for:` cut to 3 s and the amplification
/// baseline to 5 s ago, so that a test of seconds can see them act.
fn test_rules() -> String {
    let rules = std::fs::read_to_string("alerts/stormguard.rules.yaml").unwrap();
    let mut out = String::new();
    for line in rules.lines() {
        match line.trim_start().strip_prefix("for: ") {
            Some(_) => out.push_str(&format!(
                "{}for: 3s",
                &line[..line.len() - line.trim_start().len()]
            )),
            None => out.push_str(&line.replace("offset 5m", "offset 5s")),
        }
        out.push('\n');
    }
    out
}

fn start_prometheus(target: &str) -> Option<Prometheus> {
    if Command::new("prometheus").arg("--version").output().is_err() {
        assert!(
            std::env::var_os("CI").is_none(),
            "prometheus is missing under CI: .ci/run installs it"
        );
        eprintln!("SKIPPED: prometheus is not installed (apt-get install -y prometheus); CI runs this test");
        return None;
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("rules.yaml"), test_rules()).unwrap();
    let config = format!(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nrule_files: [rules.yaml]\n\
         scrape_configs:\n  - job_name: stormguard\n    static_configs:\n      - targets: ['{target}']\n"
    );
    std::fs::write(dir.path().join("prometheus.yml"), config).unwrap();
    // Prometheus binds its port itself, so another test may take it first:
    // then it exits, and it is started again on another.
    for _ in 0..5 {
        let port = free_port();
        let mut child = Command::new("prometheus")
            .current_dir(dir.path())
            .arg("--config.file=prometheus.yml")
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .arg("--log.level=warn")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("prometheus starts");
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while child.try_wait().unwrap().is_none() && std::time::Instant::now() < deadline {
            // Another test's server may answer before this one fails to
            // bind: it counts only if this one still runs a moment later.
            if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                std::thread::sleep(Duration::from_millis(300));
                if child.try_wait().unwrap().is_some() {
                    break;
                }
                return Some(Prometheus {
                    child,
                    base: format!("http://127.0.0.1:{port}"),
                    _dir: dir,
                });
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = child.kill();
        let _ = child.wait();
    }
    panic!("prometheus did not start on any of 5 ports");
}

impl Prometheus {
    async fn get(&self, path: &str, query: &[(&str, &str)]) -> Option<Value> {
        let response = reqwest::Client::new()
            .get(format!("{}{path}", self.base))
            .query(query)
            .send()
            .await
            .ok()?;
        response.json().await.ok()
    }

    async fn query(&self, expr: &str) -> Vec<Value> {
        let answer = self
            .get("/api/v1/query", &[("query", expr)])
            .await
            .expect("Prometheus answers");
        assert_eq!(answer["status"], "success", "{expr}: {answer}");
        answer["data"]["result"].as_array().unwrap().clone()
    }

    /// Alerts firing or pending, as (name, state).
    async fn alerts(&self) -> Vec<(String, String)> {
        let answer = self.get("/api/v1/alerts", &[]).await.expect("Prometheus answers");
        answer["data"]["alerts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| {
                (
                    a["labels"]["alertname"].as_str().unwrap().to_string(),
                    a["state"].as_str().unwrap().to_string(),
                )
            })
            .collect()
    }
}

/// A Prometheus scraping `daemon`, once it has scraped it; `None` where
/// prometheus is missing outside CI.
async fn scraping(daemon: &Daemon) -> Option<Prometheus> {
    let prometheus = start_prometheus(daemon.base.trim_start_matches("http://"))?;
    let scraped = eventually(Duration::from_secs(30), || async {
        let up = prometheus
            .get("/api/v1/query", &[("query", "up{job=\"stormguard\"} == 1")])
            .await?;
        (!up["data"]["result"].as_array()?.is_empty()).then_some(())
    })
    .await;
    assert!(scraped.is_some(), "Prometheus never scraped the daemon");
    Some(prometheus)
}

/// A report for `payment-service`: `retries` retries per `requests` attempts, the breaker in `state`.
fn report(instance: &str, requests: u64, retries: u64, state: &str, gate_on: bool) -> Value {
    json!({
        "service": "payment-service",
        "instance": instance,
        "endpoints": [{"endpoint": "/charge",
                       "requests": {"success": requests / 2, "server_error": requests - requests / 2},
                       "retries": {"1": retries, "2": retries / 4}}],
        "inFlight": 3,
        "circuitState": state,
        "budget": {"retriesDenied": retries / 10, "remainingRatio": 0.5},
        "gateOn": gate_on
    })
}

/// Sends `body` every 250 ms for `duration`, or until `stop` is set.
async fn traffic(daemon: &Daemon, duration: Duration, body: Value, stop: &AtomicBool) {
    post_until(
        daemon,
        "/v1/reports",
        202,
        Duration::from_millis(250),
        duration,
        body,
        stop,
    )
    .await;
}

/// A paced process's asks: a tenth of a second's tally, every 100 ms, and
/// its fleet-scoped breaker, open.
async fn pacing(daemon: &Daemon, duration: Duration, stop: &AtomicBool) {
    let ask = json!({"service": "payment-service", "instance": "pod-a",
                     "sent": 10, "accepted": 6, "overloaded": 4, "waiting": 30,
                     "breaker": {"open": true, "openForMs": 1000, "refused": 3}});
    post_until(
        daemon,
        "/v1/pace",
        200,
        Duration::from_millis(100),
        duration,
        ask,
        stop,
    )
    .await;
}

async fn post_until(
    daemon: &Daemon,
    path: &str,
    expected: u16,
    every: Duration,
    duration: Duration,
    body: Value,
    stop: &AtomicBool,
) {
    let client = reqwest::Client::new();
    let until = tokio::time::Instant::now() + duration;
    while tokio::time::Instant::now() < until && !stop.load(Relaxed) {
        let status = client
            .post(daemon.url(path))
            .json(&body)
            .send()
            .await
            .unwrap()
            .status();
        assert_eq!(status, expected, "{path}");
        tokio::time::sleep(every).await;
    }
}

/// Both dashboards, with their paths.
fn dashboards() -> Vec<(&'static str, Value)> {
    [
        "dashboards/stormguard-overview.json",
        "dashboards/stormguard-service.json",
    ]
    .into_iter()
    .map(|path| {
        (
            path,
            serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap(),
        )
    })
    .collect()
}

/// A dashboard query as Prometheus receives it, its variables filled in.
fn instantiate(expr: &Value) -> String {
    expr.as_str()
        .unwrap()
        .replace("$__rate_interval", "1m")
        .replace("$service", "payment-service")
}

fn dashboard_queries() -> Vec<(String, String)> {
    let mut queries = Vec::new();
    for (path, dashboard) in dashboards() {
        for panel in dashboard["panels"].as_array().unwrap() {
            // Rows group panels and query nothing.
            for target in panel["targets"].as_array().into_iter().flatten() {
                queries.push((
                    format!("{path}: {}", panel["title"]),
                    instantiate(&target["expr"]),
                ));
            }
        }
    }
    queries
}

#[tokio::test]
async fn calm_fires_nothing_a_storm_fires_the_seed_alerts_and_every_panel_has_data() {
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("policy.yaml");
    // The shipped policy, with payment-service's callers pacing through the
    // daemon, their breakers' half-open the fleet's.
    let paced = SEED_POLICY.replace(
        "  payment-service:\n    maxRetries: 2\n",
        "  payment-service:\n    maxRetries: 2\n    gate:\n      enabled: true\n    circuitBreaker:\n      enabled: true\n      scope: fleet\n",
    );
    assert_ne!(paced, SEED_POLICY);
    std::fs::write(&policy, paced).unwrap();
    let daemon = Daemon::start(&policy, &[]);
    let Some(prometheus) = scraping(&daemon).await else {
        return;
    };

    // Calm: 5 % retries, breakers closed, for long enough that any alert
    // whose condition held would have fired (every `for:` is 3 s here).
    let stop = AtomicBool::new(false);
    traffic(
        &daemon,
        Duration::from_secs(8),
        report("pod-a", 200, 10, "closed", false),
        &stop,
    )
    .await;
    assert_eq!(
        prometheus.alerts().await,
        Vec::<(String, String)>::new(),
        "calm traffic fires nothing"
    );

    // A storm: retries outnumber first tries, one instance's breaker is
    // open, and pod-a's gate is on: it asks the daemon for its pace.
    let storm = async {
        tokio::join!(
            pacing(&daemon, Duration::from_secs(45), &stop),
            traffic(
                &daemon,
                Duration::from_secs(45),
                report("pod-a", 200, 400, "closed", true),
                &stop
            ),
            traffic(
                &daemon,
                Duration::from_secs(45),
                report("pod-b", 200, 400, "open", false),
                &stop
            ),
        )
    };
    let fired = async {
        let fired = eventually(Duration::from_secs(40), || async {
            let alerts = prometheus.alerts().await;
            let firing = |name: &str| alerts.iter().any(|(n, s)| n == name && s == "firing");
            (firing("HighRetryRate") && firing("CircuitBreakerOpen")).then_some(alerts)
        })
        .await;
        stop.store(true, Relaxed);
        fired
    };
    let (_, fired) = tokio::join!(storm, fired);
    let alerts = fired.expect("HighRetryRate and CircuitBreakerOpen fire during the storm");
    assert!(
        !alerts.iter().any(|(n, _)| n.starts_with("Stormguard")),
        "the daemon is healthy: {alerts:?}"
    );

    for (panel, expr) in dashboard_queries() {
        let result = prometheus.query(&expr).await;
        assert!(!result.is_empty(), "{panel}: no data for {expr}");
    }
}

/// Each annotation of both dashboards, as (dashboard and name, query), its
/// variables filled in.
fn annotation_queries() -> Vec<(String, String)> {
    let mut queries = Vec::new();
    for (path, dashboard) in dashboards() {
        for annotation in dashboard["annotations"]["list"].as_array().unwrap() {
            queries.push((
                format!("{path}: {}", annotation["name"]),
                instantiate(&annotation["expr"]),
            ));
        }
    }
    queries
}

fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

impl Prometheus {
    /// When `expr` first had a value from `start` to now, second by second.
    async fn first_point(&self, expr: &str, start: f64) -> Option<f64> {
        let (start, end) = (start.to_string(), unix_now().to_string());
        let query = [("query", expr), ("start", &start), ("end", &end), ("step", "1")];
        let answer = self.get("/api/v1/query_range", &query).await?;
        assert_eq!(answer["status"], "success", "{expr}: {answer}");
        answer["data"]["result"]
            .as_array()?
            .iter()
            .flat_map(|series| series["values"].as_array().cloned().unwrap_or_default())
            .filter_map(|point| point[0].as_f64())
            .reduce(f64::min)
    }
}

#[tokio::test]
async fn both_dashboards_mark_a_policy_change_and_a_refused_edit_when_they_happen() {
    let mut configmap = common::ConfigMapDir::new(SEED_POLICY);
    let daemon = Daemon::start(&configmap.policy(), &["--debounce", "20ms"]);
    let Some(prometheus) = scraping(&daemon).await else {
        return;
    };
    tokio::time::sleep(Duration::from_secs(3)).await;
    let start = unix_now();
    let reload = |result: &'static str| {
        let daemon = &daemon;
        async move {
            eventually(Duration::from_secs(10), || async move {
                let status = common::admin_status(daemon).await;
                (status["lastReload"]["result"] == result && status["lastReload"]["trigger"] == "watch")
                    .then_some(unix_now())
            })
            .await
            .expect("the daemon reloads the edited file")
        }
    };
    configmap.update(&SEED_POLICY.replace("maxRetries: 5", "maxRetries: 6"));
    let changed_at = reload("success").await;
    tokio::time::sleep(Duration::from_secs(4)).await;
    configmap.update("defaults:\n  maxRetries: many\n");
    let refused_at = reload("failure").await;
    tokio::time::sleep(Duration::from_secs(4)).await;

    for (annotation, expr) in annotation_queries() {
        let at = if annotation.ends_with("\"Policy changed\"") {
            changed_at
        } else {
            refused_at
        };
        let first = prometheus.first_point(&expr, start).await;
        assert!(
            first.is_some_and(|first| first >= at - 2.0 && first <= at + 3.0),
            "{annotation}: {expr} first marks {first:?}, the event was at {at}"
        );
    }
}
