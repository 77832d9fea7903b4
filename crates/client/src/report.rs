//! Aggregating what calls did and sending it to the daemon.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicI64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};
use stormguard_core::breaker::CircuitState;
use stormguard_core::guard::Guard;

/// How an attempt ended, as reports count it (seed 003's statuses).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// An answer that is not a 5xx.
    Success,
    /// No answer: a connect error, a timeout, a reset.
    Error,
    /// A 5xx answer.
    ServerError,
}

/// Where to report and how often.
#[derive(Debug, Clone)]
pub struct ReporterConfig {
    /// The daemon's base URL.
    pub daemon: String,
    /// This process, as reports name it (in Kubernetes, the pod name).
    pub instance: String,
    /// The service this process is, if it wants it named as the caller.
    pub caller: Option<String>,
    /// Time between reports.
    pub interval: Duration,
    /// Endpoints kept per dependency between sends; more are counted as `other`.
    pub max_endpoints: usize,
    /// Dependencies kept between sends; more are not counted (and logged).
    pub max_services: usize,
}

impl ReporterConfig {
    /// Reports every 10 s as `instance` (for a pod: `$HOSTNAME`), keeping at
    /// most 100 endpoints per dependency and 100 dependencies between sends.
    pub fn new(daemon: impl Into<String>, instance: impl Into<String>) -> Self {
        Self {
            daemon: daemon.into().trim_end_matches('/').to_string(),
            instance: instance.into(),
            caller: None,
            interval: Duration::from_secs(10),
            max_endpoints: 100,
            max_services: 100,
        }
    }
}

/// Counts for one endpoint since the last successful send.
#[derive(Debug, Default, Clone)]
struct EndpointCounts {
    outcomes: [u64; 3],
    retries: BTreeMap<u32, u64>,
}

impl EndpointCounts {
    fn merge(&mut self, other: &EndpointCounts) {
        for (mine, theirs) in self.outcomes.iter_mut().zip(other.outcomes) {
            *mine = mine.saturating_add(theirs);
        }
        for (attempt, n) in &other.retries {
            let count = self.retries.entry(*attempt).or_default();
            *count = count.saturating_add(*n);
        }
    }
}

/// One dependency: its counts, its guard (for breaker and budget state), calls in flight.
#[derive(Default)]
struct ServiceCounts {
    endpoints: HashMap<String, EndpointCounts>,
    guard: Option<Guard>,
    in_flight: Arc<AtomicI64>,
    /// The budget's denial count at the last send, to report the difference.
    denied_sent: u64,
}

struct Inner {
    config: ReporterConfig,
    http: reqwest::Client,
    services: Mutex<HashMap<String, ServiceCounts>>,
}

/// Aggregates attempts and sends them to the daemon; clones share it.
#[derive(Clone)]
pub struct Reporter {
    inner: Arc<Inner>,
    task: Arc<Mutex<Option<tokio::task::JoinHandle<()>>>>,
}

/// Counts a call in flight until dropped.
pub struct InFlight(Arc<AtomicI64>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Relaxed);
    }
}

impl Reporter {
    /// Starts sending every `config.interval`.
    pub fn start(config: ReporterConfig) -> Self {
        let inner = Arc::new(Inner {
            http: reqwest::Client::builder()
                .connect_timeout(Duration::from_secs(2))
                .timeout(Duration::from_secs(10))
                .build()
                .expect("a plain HTTP client builds"),
            config,
            services: Mutex::default(),
        });
        let task = tokio::spawn(send_loop(Arc::downgrade(&inner)));
        Self {
            inner,
            task: Arc::new(Mutex::new(Some(task))),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, ServiceCounts>> {
        self.inner.services.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Reports `service`'s breaker state and budget from `guard` (the latest wins).
    pub fn track(&self, service: &str, guard: &Guard) {
        if let Some(counts) = self.entry(&mut self.lock(), service) {
            counts.guard = Some(guard.clone());
        }
    }

    /// Counts one attempt at `service`'s `endpoint`; `retry` is 0 for a first try.
    pub fn record(&self, service: &str, endpoint: &str, retry: u32, outcome: Outcome) {
        let mut services = self.lock();
        let max_endpoints = self.inner.config.max_endpoints;
        let Some(counts) = self.entry(&mut services, service) else {
            return;
        };
        let key = if counts.endpoints.contains_key(endpoint) || counts.endpoints.len() < max_endpoints {
            endpoint
        } else {
            "other"
        };
        let endpoint = counts.endpoints.entry(key.to_string()).or_default();
        endpoint.outcomes[outcome as usize] = endpoint.outcomes[outcome as usize].saturating_add(1);
        if retry > 0 {
            *endpoint.retries.entry(retry).or_default() += 1;
        }
    }

    /// Counts a call to `service` in flight until the returned value is dropped.
    pub fn in_flight(&self, service: &str) -> Option<InFlight> {
        let counter = self.entry(&mut self.lock(), service)?.in_flight.clone();
        counter.fetch_add(1, Relaxed);
        Some(InFlight(counter))
    }

    fn entry<'a>(
        &self,
        services: &'a mut HashMap<String, ServiceCounts>,
        service: &str,
    ) -> Option<&'a mut ServiceCounts> {
        if !services.contains_key(service) && services.len() >= self.inner.config.max_services {
            tracing::warn!(
                service,
                "stormguard reporter: too many dependencies; not counting this one"
            );
            return None;
        }
        Some(services.entry(service.to_string()).or_default())
    }

    /// Sends what is aggregated now, and stops; what cannot be sent is lost.
    pub async fn shutdown(self) {
        if let Some(task) = self.task.lock().unwrap_or_else(|e| e.into_inner()).take() {
            task.abort();
        }
        if let Err(error) = send(&self.inner).await {
            tracing::warn!(%error, "stormguard reporter: the last report could not be sent");
        }
    }

    /// Sends what is aggregated now, and waits for the answer.
    pub async fn flush(&self) -> Result<(), reqwest::Error> {
        send(&self.inner).await
    }
}

async fn send_loop(inner: std::sync::Weak<Inner>) {
    loop {
        let Some(interval) = inner.upgrade().map(|i| i.config.interval) else {
            return;
        };
        tokio::time::sleep(interval).await;
        let Some(inner) = inner.upgrade() else { return };
        if let Err(error) = send(&inner).await {
            tracing::warn!(%error, "stormguard reporter: the daemon is unreachable; counts are kept for the next report");
        }
    }
}

/// Takes the counts, sends them as one batch, and puts them back if that fails.
async fn send(inner: &Inner) -> Result<(), reqwest::Error> {
    let (batch, taken) = take(inner);
    if batch.is_empty() {
        return Ok(());
    }
    let result = inner
        .http
        .post(format!("{}/v1/reports", inner.config.daemon))
        .json(&batch)
        .send()
        .await
        .and_then(|r| r.error_for_status());
    if let Err(error) = result {
        put_back(inner, taken);
        return Err(error);
    }
    Ok(())
}

/// The counts taken for one send, by dependency, to restore if it fails.
type Taken = Vec<(String, HashMap<String, EndpointCounts>, u64)>;

fn take(inner: &Inner) -> (Vec<Value>, Taken) {
    let mut services = inner.services.lock().unwrap_or_else(|e| e.into_inner());
    let mut batch = Vec::new();
    let mut taken = Vec::new();
    for (name, counts) in services.iter_mut() {
        let endpoints = std::mem::take(&mut counts.endpoints);
        let mut report = json!({
            "service": name,
            "instance": inner.config.instance,
            "inFlight": counts.in_flight.load(Relaxed).max(0),
            "endpoints": endpoints.iter().map(|(endpoint, c)| json!({
                "endpoint": endpoint,
                "requests": {"success": c.outcomes[0], "error": c.outcomes[1], "server_error": c.outcomes[2]},
                "retries": c.retries.iter().map(|(a, n)| (a.to_string(), json!(n))).collect::<serde_json::Map<_, _>>(),
            })).collect::<Vec<_>>(),
        });
        if let Some(caller) = &inner.config.caller {
            report["caller"] = json!(caller);
        }
        let mut denied_delta = 0;
        if let Some(guard) = &counts.guard {
            if let Some(breaker) = guard.breaker() {
                report["circuitState"] = json!(match breaker.state() {
                    CircuitState::Closed => "closed",
                    CircuitState::HalfOpen => "half-open",
                    CircuitState::Open => "open",
                });
            }
            if let Some(budget) = guard.budget() {
                let snapshot = budget.snapshot();
                denied_delta = snapshot.denied.saturating_sub(counts.denied_sent);
                counts.denied_sent = snapshot.denied;
                report["budget"] =
                    json!({"retriesDenied": denied_delta, "remainingRatio": snapshot.remaining_ratio});
            }
        }
        batch.push(report);
        taken.push((name.clone(), endpoints, denied_delta));
    }
    (batch, taken)
}

fn put_back(inner: &Inner, taken: Taken) {
    let mut services = inner.services.lock().unwrap_or_else(|e| e.into_inner());
    for (name, endpoints, denied) in taken {
        let Some(counts) = services.get_mut(&name) else {
            continue;
        };
        counts.denied_sent = counts.denied_sent.saturating_sub(denied);
        for (endpoint, c) in endpoints {
            let max = inner.config.max_endpoints;
            let key = if counts.endpoints.contains_key(&endpoint) || counts.endpoints.len() < max {
                endpoint
            } else {
                "other".to_string()
            };
            counts.endpoints.entry(key).or_default().merge(&c);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reporter(max_endpoints: usize, max_services: usize) -> Reporter {
        Reporter::start(ReporterConfig {
            interval: Duration::from_secs(3600),
            max_endpoints,
            max_services,
            ..ReporterConfig::new("http://127.0.0.1:9", "pod")
        })
    }

    #[tokio::test]
    async fn endpoints_past_the_cap_count_as_other_and_services_past_theirs_are_not_kept() {
        let r = reporter(2, 1);
        for endpoint in ["/a", "/b", "/c", "/d"] {
            r.record("svc", endpoint, 0, Outcome::Success);
        }
        r.record("svc", "/a", 2, Outcome::Error);
        r.record("another", "/a", 0, Outcome::Success);
        let (batch, _) = take(&r.inner);
        assert_eq!(batch.len(), 1, "the second dependency is over the cap");
        let endpoints = batch[0]["endpoints"].as_array().unwrap();
        let other = endpoints.iter().find(|e| e["endpoint"] == "other").unwrap();
        assert_eq!(other["requests"]["success"], 2);
        let a = endpoints.iter().find(|e| e["endpoint"] == "/a").unwrap();
        assert_eq!(a["requests"]["error"], 1);
        assert_eq!(a["retries"]["2"], 1);
    }

    #[tokio::test]
    async fn counts_taken_for_a_failed_send_are_put_back_and_merged() {
        let r = reporter(10, 10);
        r.record("svc", "/a", 1, Outcome::ServerError);
        let (_, taken) = take(&r.inner);
        r.record("svc", "/a", 1, Outcome::ServerError);
        put_back(&r.inner, taken);
        let (batch, _) = take(&r.inner);
        let a = &batch[0]["endpoints"][0];
        assert_eq!(a["requests"]["server_error"], 2);
        assert_eq!(a["retries"]["1"], 2);
        let (empty, _) = take(&r.inner);
        assert_eq!(
            empty[0]["endpoints"].as_array().unwrap().len(),
            0,
            "taken means gone"
        );
    }

    #[tokio::test]
    async fn in_flight_counts_until_dropped() {
        let r = reporter(10, 10);
        let first = r.in_flight("svc").unwrap();
        let _second = r.in_flight("svc").unwrap();
        drop(first);
        let (batch, _) = take(&r.inner);
        assert_eq!(batch[0]["inFlight"], 1);
    }
}
