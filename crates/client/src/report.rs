//! Aggregating what calls did and sending it to the daemon.
//!
//! Counts are taken into a numbered batch, and that batch is sent until the
//! daemon answers it: sent again, unchanged and under the same number, after
//! a failure or a lost answer, so the daemon counts it once. New counts
//! aggregate meanwhile and go in the next batch. A batch the daemon refuses
//! (a 4xx other than 401 and 429) is dropped, logged and counted, never
//! resent; one refused for its token (401) is kept, since the next send
//! reads the token file again.
//!
//! While a dependency's send gate is on, the reporter also asks the daemon
//! for this process's share of the rate the fleet may send it ([`pace`]).
//! A dependency whose retry budget is fleet-scoped takes its part of the
//! fleet's floor from the answers to reports ([`floor`]), and its reports
//! say the time their counts cover, from which the daemon takes the
//! process's request rate. While such a budget waits for its first part,
//! the first report goes a second after the reporter starts
//! (`first_report`) rather than an interval later.

mod floor;
mod pace;

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use stormguard_core::guard::Guard;
use stormguard_core::policy::check_service_name;
use stormguard_core::wire::{
    check_endpoint, BudgetReport, EndpointCounts, FloorPart, Report, ReportAnswer, ReportBatch, StatusCounts,
};

use self::floor::FleetFloor;

use crate::config::{check_daemon, check_instance_name, check_positive, check_service, ConfigError};
use crate::connect::{Connection, DaemonTls, TokenFile};

/// How an attempt ended, as reports count it.
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
    /// How long one send may take before it is given up (and sent again later).
    pub timeout: Duration,
    /// Endpoints kept per dependency between sends; more are counted as `other`.
    pub max_endpoints: usize,
    /// Dependencies kept between sends; more are not counted (and logged).
    pub max_services: usize,
    /// Whether a dependency whose send gate is on asks the daemon for this
    /// process's share of the rate the whole fleet may send it (on by
    /// default). Off, each gate paces by what this process alone learns.
    pub fleet_pacing: bool,
    /// The service-account token file sent with reports and pace asks, for
    /// a daemon that checks who reports (in Kubernetes, a projected token
    /// volume with audience `stormguard`). Read at each send, so the
    /// kubelet's rotations are followed; none, nothing is sent.
    pub token_file: Option<PathBuf>,
    /// TLS towards an `https://` daemon: the CA to trust, a client certificate.
    pub tls: DaemonTls,
    /// How soon the first report goes while a fleet-scoped budget waits for
    /// its part of the fleet's floor (at most `interval`): until it comes, the
    /// budget has the whole floor.
    pub first_report: Duration,
}

impl ReporterConfig {
    /// Reports every 10 s as `instance` (for a pod: `$HOSTNAME`), giving a
    /// send 10 s, keeping at most 100 endpoints per dependency and 100
    /// dependencies between sends, with fleet pacing on, and the first
    /// report a second after start while a fleet-scoped budget waits for
    /// its part.
    pub fn new(daemon: impl Into<String>, instance: impl Into<String>) -> Self {
        Self {
            daemon: daemon.into().trim_end_matches('/').to_string(),
            instance: instance.into(),
            caller: None,
            interval: Duration::from_secs(10),
            timeout: Duration::from_secs(10),
            max_endpoints: 100,
            max_services: 100,
            fleet_pacing: true,
            token_file: None,
            tls: DaemonTls::default(),
            first_report: Duration::from_secs(1),
        }
    }

    /// Whether the settings can work; [`Reporter::start`] checks them.
    pub fn check(&self) -> Result<(), ConfigError> {
        check_daemon(&self.daemon)?;
        check_instance_name(&self.instance)?;
        if let Some(caller) = &self.caller {
            check_service("caller", caller)?;
        }
        check_positive("interval", self.interval)?;
        check_positive("timeout", self.timeout)
    }
}

/// What the reporter has sent, for a service's own metrics or logs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReporterStats {
    /// Batches the daemon counted (or had counted already).
    pub batches_sent: u64,
    /// Batches the daemon refused whole (a 4xx other than 401 and 429): dropped, not resent.
    pub batches_dropped: u64,
    /// Reports within counted batches that the daemon refused.
    pub reports_rejected: u64,
    /// Sends that failed and will be tried again (daemon unreachable, 5xx,
    /// 429, token refused, timeout).
    pub send_failures: u64,
    /// Asks for a paced dependency's share (made while its send gate is on).
    pub pace_asks: u64,
    /// Of those, the ones that got no grant (the gate paced alone meanwhile).
    pub pace_failures: u64,
}

/// Counts for one endpoint since they were last taken.
#[derive(Debug, Default, Clone)]
struct Tally {
    outcomes: [u64; 3],
    retries: BTreeMap<u32, u64>,
}

/// One dependency: its counts, its guard (for breaker and budget state), calls in flight.
#[derive(Default)]
struct ServiceCounts {
    endpoints: HashMap<String, Tally>,
    guard: Option<Guard>,
    in_flight: Arc<AtomicI64>,
    /// The budget's denial count when last taken, to report the difference.
    denied_taken: u64,
    /// Denials of a budget since replaced, not yet taken.
    denied_pending: u64,
    /// The floor of a fleet-scoped budget.
    floor: Option<FleetFloor>,
}

impl ServiceCounts {
    /// Tracks `guard`. When its budget is not the one tracked (a new policy
    /// built a new one), the old budget's denials not yet taken are kept for
    /// the next report, and the new budget's are counted from zero.
    fn track(&mut self, guard: &Guard) {
        let old = self.guard.as_ref().and_then(Guard::budget);
        let same = match (old, guard.budget()) {
            (Some(old), Some(new)) => std::ptr::eq(old, new),
            (old, new) => old.is_none() && new.is_none(),
        };
        if !same {
            if let Some(old) = old {
                let untaken = old.snapshot().denied.saturating_sub(self.denied_taken);
                self.denied_pending = self.denied_pending.saturating_add(untaken);
            }
            self.denied_taken = 0;
            self.floor = FleetFloor::follow(self.floor.take(), guard);
        }
        self.guard = Some(guard.clone());
    }

    /// The daemon's answer gave this dependency `part` of its floor.
    fn answered(&mut self, part: FloorPart) {
        if let (Some(floor), Some(guard)) = (&mut self.floor, &self.guard) {
            floor.answered(part.into(), guard);
        }
    }

    /// A report could not be delivered.
    fn unreachable(&mut self) {
        if let (Some(floor), Some(guard)) = (&mut self.floor, &self.guard) {
            floor.unreachable(guard);
        }
    }

    /// The denials since they were last taken, and the budget left now.
    fn take_budget(&mut self) -> Option<BudgetReport> {
        let snapshot = self.guard.as_ref().and_then(Guard::budget).map(|b| b.snapshot());
        let pending = std::mem::take(&mut self.denied_pending);
        let fresh = snapshot
            .as_ref()
            .map_or(0, |s| s.denied.saturating_sub(self.denied_taken));
        if let Some(snapshot) = &snapshot {
            self.denied_taken = snapshot.denied;
        }
        (snapshot.is_some() || pending > 0).then(|| BudgetReport {
            retries_denied: pending.saturating_add(fresh),
            remaining_ratio: snapshot.map(|s| s.remaining_ratio),
        })
    }
}

/// A batch taken and not yet answered: its number and its body.
struct Pending {
    sequence: u64,
    body: Bytes,
}

struct Inner {
    config: ReporterConfig,
    connection: Connection,
    token: TokenFile,
    services: Mutex<HashMap<String, ServiceCounts>>,
    /// The batch being sent; holding the lock is what makes sends one at a time.
    outbox: tokio::sync::Mutex<Option<Pending>>,
    /// When the counts were last taken: the start of what the next batch covers.
    taken_at: Mutex<std::time::Instant>,
    next_sequence: AtomicU64,
    stats: Mutex<ReporterStats>,
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

/// Why a send did not get its batch counted.
#[derive(Debug, thiserror::Error)]
pub enum SendError {
    /// The daemon could not be reached, answered 5xx or 429, refused the
    /// token (401), or took too long: the batch is kept and sent again.
    #[error("the stormguard daemon did not take the report: {0}")]
    Unavailable(String),
    /// The daemon refused the batch (4xx): it was dropped.
    #[error("the stormguard daemon refused the report ({status}): {body}")]
    Refused {
        /// The status.
        status: u16,
        /// The daemon's explanation.
        body: String,
    },
}

impl Reporter {
    /// Starts sending every `config.interval`; fails only on settings that
    /// cannot work (a name the daemon would refuse, a zero interval).
    pub fn start(config: ReporterConfig) -> Result<Self, ConfigError> {
        config.check()?;
        let timeout = config.timeout;
        let connection = Connection::new(config.tls.clone(), move |http| {
            http.connect_timeout(Duration::from_secs(2).min(timeout))
                .timeout(timeout)
        })?;
        let inner = Arc::new(Inner {
            connection,
            token: TokenFile::new(config.token_file.clone()),
            config,
            services: Mutex::default(),
            outbox: tokio::sync::Mutex::new(None),
            taken_at: Mutex::new(std::time::Instant::now()),
            // A random start: a restarted process under the same name does
            // not repeat the numbers of its previous run.
            next_sequence: AtomicU64::new(rand::random::<u64>() >> 1),
            stats: Mutex::default(),
        });
        let task = tokio::spawn(send_loop(Arc::downgrade(&inner)));
        if inner.config.fleet_pacing {
            tokio::spawn(pace::pace_loop(Arc::downgrade(&inner)));
        }
        Ok(Self {
            inner,
            task: Arc::new(Mutex::new(Some(task))),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, ServiceCounts>> {
        self.inner.services()
    }

    /// Reports `service`'s breaker state and budget from `guard` (the latest wins).
    pub fn track(&self, service: &str, guard: &Guard) {
        if let Some(counts) = self.entry(&mut self.lock(), service) {
            counts.track(guard);
        }
    }

    /// Counts one attempt at `service`'s `endpoint`; `retry` is 0 for a first
    /// try. An endpoint name the daemon would refuse is counted as `other`.
    pub fn record(&self, service: &str, endpoint: &str, retry: u32, outcome: Outcome) {
        let mut services = self.lock();
        let max_endpoints = self.inner.config.max_endpoints;
        let Some(counts) = self.entry(&mut services, service) else {
            return;
        };
        let fits = counts.endpoints.contains_key(endpoint) || counts.endpoints.len() < max_endpoints;
        let key = if fits && check_endpoint(endpoint).is_ok() {
            endpoint
        } else {
            "other"
        };
        let tally = counts.endpoints.entry(key.to_string()).or_default();
        tally.outcomes[outcome as usize] = tally.outcomes[outcome as usize].saturating_add(1);
        if retry > 0 {
            let count = tally.retries.entry(retry).or_default();
            *count = count.saturating_add(1);
        }
    }

    /// Counts a call to `service` in flight until the returned value is dropped.
    pub fn in_flight(&self, service: &str) -> Option<InFlight> {
        let counter = self.entry(&mut self.lock(), service)?.in_flight.clone();
        counter.fetch_add(1, Relaxed);
        Some(InFlight(counter))
    }

    /// What has been sent so far.
    pub fn stats(&self) -> ReporterStats {
        *self.inner.stats.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn entry<'a>(
        &self,
        services: &'a mut HashMap<String, ServiceCounts>,
        service: &str,
    ) -> Option<&'a mut ServiceCounts> {
        if !services.contains_key(service) {
            if let Err(problem) = check_service_name(service) {
                tracing::warn!(
                    service,
                    "stormguard reporter: not counting calls to {service:?}: {problem}"
                );
                return None;
            }
            if services.len() >= self.inner.config.max_services {
                tracing::warn!(
                    service,
                    "stormguard reporter: too many dependencies; not counting this one"
                );
                return None;
            }
        }
        Some(services.entry(service.to_string()).or_default())
    }

    /// Stops the periodic sends, then sends what is pending and what is
    /// aggregated now. A send that was under way is not lost: its batch
    /// is still pending and goes first.
    pub async fn shutdown(self) {
        let task = self.task.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(task) = task {
            task.abort();
            let _ = task.await;
        }
        if let Err(error) = send(&self.inner).await {
            tracing::warn!(%error, "stormguard reporter: the last report could not be sent");
        }
    }

    /// Sends what is pending and what is aggregated now, and waits for the answers.
    pub async fn flush(&self) -> Result<(), SendError> {
        send(&self.inner).await
    }
}

async fn send_loop(inner: std::sync::Weak<Inner>) {
    let Some((interval, first)) = inner
        .upgrade()
        .map(|i| (i.config.interval, i.config.first_report))
    else {
        return;
    };
    let early = interval.min(first);
    tokio::time::sleep(early).await;
    let Some(awaits) = inner.upgrade().map(|i| i.awaits_part()) else {
        return;
    };
    if !awaits {
        tokio::time::sleep(interval - early).await;
    }
    loop {
        let Some(strong) = inner.upgrade() else { return };
        if let Err(error) = send(&strong).await {
            tracing::warn!(%error, "stormguard reporter: counts are kept for the next report");
        }
        drop(strong);
        tokio::time::sleep(interval).await;
    }
}

/// Sends the pending batch, if any, then a batch of the counts aggregated
/// now. Stops at the first batch that could not be delivered (kept pending).
async fn send(inner: &Inner) -> Result<(), SendError> {
    let mut outbox = inner.outbox.lock().await;
    let batches = if outbox.is_some() { 2 } else { 1 };
    for _ in 0..batches {
        if outbox.is_none() {
            // Taken and stored before any await: whatever happens to this
            // future from here on, the counts are in the outbox.
            *outbox = take(inner);
        }
        let Some(pending) = outbox.as_ref() else {
            return Ok(());
        };
        let delivered = deliver(inner, pending).await;
        match delivered {
            Err(SendError::Unavailable(_)) => {
                inner.stats().send_failures += 1;
                inner.each_service(ServiceCounts::unreachable);
                return delivered;
            }
            Err(_) => {
                *outbox = None;
                inner.stats().batches_dropped += 1;
                return delivered;
            }
            Ok(()) => *outbox = None,
        }
    }
    Ok(())
}

impl Inner {
    fn stats(&self) -> std::sync::MutexGuard<'_, ReporterStats> {
        self.stats.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn services(&self) -> std::sync::MutexGuard<'_, HashMap<String, ServiceCounts>> {
        self.services.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn each_service(&self, mut act: impl FnMut(&mut ServiceCounts)) {
        self.services().values_mut().for_each(&mut act);
    }

    /// Whether a fleet-scoped budget has not yet had its part.
    fn awaits_part(&self) -> bool {
        self.services()
            .values()
            .any(|counts| counts.floor.is_some_and(|floor| !floor.answered_once()))
    }

    /// Hands each fleet-scoped budget the part of its floor the daemon gave.
    fn answered(&self, parts: &BTreeMap<String, FloorPart>) {
        let mut services = self.services();
        for (service, part) in parts {
            if let Some(counts) = services.get_mut(service) {
                counts.answered(*part);
            }
        }
    }
}

/// One POST of `pending`: `Ok` once the daemon counted it (now or before).
async fn deliver(inner: &Inner, pending: &Pending) -> Result<(), SendError> {
    let request = inner
        .connection
        .http()
        .post(format!("{}/v1/reports", inner.config.daemon))
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .body(pending.body.clone());
    let response = inner
        .token
        .authorize(request)
        .send()
        .await
        .map_err(|e| SendError::Unavailable(e.to_string()))?;
    let status = response.status();
    if status.is_server_error() || status == reqwest::StatusCode::TOO_MANY_REQUESTS {
        return Err(SendError::Unavailable(format!("the daemon answered {status}")));
    }
    if status == reqwest::StatusCode::UNAUTHORIZED {
        // Nothing was counted, and the next send reads the token file again.
        let body = response.text().await.unwrap_or_default();
        tracing::error!(%body, "stormguard reporter: the daemon refused the service-account token; the batch is kept");
        return Err(SendError::Unavailable(format!(
            "the daemon refused the token ({status}): {body}"
        )));
    }
    if !status.is_success() {
        let body = response.text().await.unwrap_or_default();
        tracing::error!(status = status.as_u16(), %body, sequence = pending.sequence, "stormguard reporter: the daemon refused a report batch; it is dropped");
        return Err(SendError::Refused {
            status: status.as_u16(),
            body,
        });
    }
    let answer: ReportAnswer = response.json().await.unwrap_or_default();
    inner.answered(&answer.fleet_budgets);
    for rejected in &answer.rejected {
        tracing::error!(path = %rejected.path, error = %rejected.error, "stormguard reporter: the daemon refused a report");
    }
    let mut stats = inner.stats();
    stats.batches_sent += 1;
    stats.reports_rejected += answer.rejected.len() as u64;
    Ok(())
}

/// Takes the counts aggregated now into a numbered batch; `None` if there is nothing to report.
fn take(inner: &Inner) -> Option<Pending> {
    let mut services = inner.services();
    if services.is_empty() {
        return None;
    }
    let caller = inner.config.caller.as_deref().map(Cow::Borrowed);
    let span_ms = {
        let mut taken_at = inner.taken_at.lock().unwrap_or_else(|e| e.into_inner());
        let now = std::time::Instant::now();
        let span = now.saturating_duration_since(*taken_at);
        *taken_at = now;
        u64::try_from(span.as_millis()).unwrap_or(u64::MAX)
    };
    let mut reports = Vec::with_capacity(services.len());
    for (name, counts) in services.iter_mut() {
        let endpoints = std::mem::take(&mut counts.endpoints);
        let mut report = Report {
            service: Cow::Borrowed(name),
            instance: Cow::Borrowed(&inner.config.instance),
            caller: caller.clone(),
            endpoints: endpoints.into_iter().map(endpoint_counts).collect(),
            in_flight: Some(counts.in_flight.load(Relaxed).max(0) as u64),
            circuit_state: None,
            budget: None,
            gate_on: None,
            span_ms: counts.floor.is_some().then_some(span_ms),
        };
        if let Some(guard) = &counts.guard {
            report.circuit_state = guard.breaker().map(|b| b.state());
            report.gate_on = guard.gate().map(|g| g.is_on_at(tokio::time::Instant::now()));
        }
        report.budget = counts.take_budget();
        reports.push(report);
    }
    let sequence = inner.next_sequence.fetch_add(1, Relaxed);
    let batch = ReportBatch {
        instance: Cow::Borrowed(inner.config.instance.as_str()),
        sequence,
        reports,
    };
    let body = serde_json::to_vec(&batch).expect("reports are plain data");
    Some(Pending {
        sequence,
        body: Bytes::from(body),
    })
}

fn endpoint_counts((endpoint, tally): (String, Tally)) -> EndpointCounts<'static> {
    EndpointCounts {
        endpoint: Cow::Owned(endpoint),
        requests: StatusCounts {
            success: tally.outcomes[Outcome::Success as usize],
            error: tally.outcomes[Outcome::Error as usize],
            server_error: tally.outcomes[Outcome::ServerError as usize],
        },
        retries: tally
            .retries
            .into_iter()
            .map(|(attempt, n)| (Cow::Owned(attempt.to_string()), n))
            .collect(),
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
        .unwrap()
    }

    /// The batch `take` builds, as the daemon would read it.
    fn taken(r: &Reporter) -> serde_json::Value {
        let pending = take(&r.inner).expect("something to report");
        serde_json::from_slice(&pending.body).unwrap()
    }

    /// Retries `guard`'s budget refuses out of `tries` (none deposited).
    fn denials(guard: &Guard, tries: usize) -> u64 {
        let budget = guard.budget().expect("the default policy has a budget");
        (0..tries).filter(|_| !budget.try_retry()).count() as u64
    }

    fn retries_denied(batch: &serde_json::Value) -> u64 {
        batch["reports"][0]["budget"]["retriesDenied"].as_u64().unwrap()
    }

    #[tokio::test]
    async fn denials_are_reported_once_each_across_a_budget_replaced_by_a_new_policy() {
        let r = reporter(10, 10);
        let old = Guard::from_policy(&stormguard_core::policy::ValidPolicy::default());
        r.track("svc", &old);
        let first = denials(&old, 300);
        assert!(first > 0, "the reserve runs out");
        assert_eq!(retries_denied(&taken(&r)), first);

        let untaken = denials(&old, 5);
        let new = Guard::from_policy(&stormguard_core::policy::ValidPolicy::default());
        r.track("svc", &new);
        let since = denials(&new, 300);
        assert_eq!(
            retries_denied(&taken(&r)),
            untaken + since,
            "the old budget's last denials and all of the new one's"
        );
        r.track("svc", &new);
        assert_eq!(
            retries_denied(&taken(&r)),
            0,
            "the same budget tracked again: nothing new"
        );
    }

    #[tokio::test]
    async fn endpoints_past_the_cap_count_as_other_and_services_past_theirs_are_not_kept() {
        let r = reporter(2, 1);
        for endpoint in ["/a", "/b", "/c", "/d", ""] {
            r.record("svc", endpoint, 0, Outcome::Success);
        }
        r.record("svc", "/a", 2, Outcome::Error);
        r.record("another", "/a", 0, Outcome::Success);
        let batch = taken(&r);
        let reports = batch["reports"].as_array().unwrap();
        assert_eq!(reports.len(), 1, "the second dependency is over the cap");
        let endpoints = reports[0]["endpoints"].as_array().unwrap();
        let other = endpoints.iter().find(|e| e["endpoint"] == "other").unwrap();
        assert_eq!(
            other["requests"]["success"], 3,
            "two past the cap and one empty name"
        );
        let a = endpoints.iter().find(|e| e["endpoint"] == "/a").unwrap();
        assert_eq!(a["requests"]["error"], 1);
        assert_eq!(a["retries"]["2"], 1);
    }

    #[tokio::test]
    async fn a_name_the_daemon_would_refuse_is_refused_where_it_enters() {
        let bad = |config: ReporterConfig| Reporter::start(config).err().expect("refused");
        let config = || ReporterConfig::new("http://127.0.0.1:9", "pod");
        assert!(matches!(
            bad(ReporterConfig {
                instance: String::new(),
                ..config()
            }),
            ConfigError::Instance { .. }
        ));
        assert!(matches!(
            bad(ReporterConfig {
                instance: "x".repeat(300),
                ..config()
            }),
            ConfigError::Instance { .. }
        ));
        assert!(matches!(
            bad(ReporterConfig {
                caller: Some("Checkout".into()),
                ..config()
            }),
            ConfigError::ServiceName { field: "caller", .. }
        ));
        assert!(matches!(
            bad(ReporterConfig {
                daemon: "stormguard:8080".into(),
                ..config()
            }),
            ConfigError::Daemon(_)
        ));
        assert_eq!(
            bad(ReporterConfig {
                interval: Duration::ZERO,
                ..config()
            }),
            ConfigError::Zero("interval")
        );

        let r = reporter(10, 10);
        r.record("Payment_Service", "/a", 0, Outcome::Success);
        r.record("payment-service", "/a", 0, Outcome::Success);
        let batch = taken(&r);
        let services: Vec<_> = batch["reports"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["service"].clone())
            .collect();
        assert_eq!(
            services,
            ["payment-service"],
            "a bad dependency name does not poison the batch"
        );
    }

    #[tokio::test]
    async fn each_batch_has_the_next_number_and_taken_means_gone() {
        let r = reporter(10, 10);
        r.record("svc", "/a", 1, Outcome::ServerError);
        let first = taken(&r);
        let second = taken(&r);
        assert_eq!(
            second["sequence"].as_u64(),
            Some(first["sequence"].as_u64().unwrap() + 1)
        );
        assert_eq!(first["instance"], "pod");
        assert_eq!(first["reports"][0]["endpoints"][0]["requests"]["server_error"], 1);
        assert_eq!(second["reports"][0]["endpoints"].as_array().unwrap().len(), 0);
    }

    #[tokio::test]
    async fn a_fleet_scoped_budgets_report_says_the_time_its_counts_cover() {
        use stormguard_core::policy::{BudgetScope, RetryPolicy, ValidPolicy};
        let r = reporter(10, 10);
        let mut fleet = RetryPolicy::default();
        fleet.budget.scope = BudgetScope::Fleet;
        r.track(
            "ledger",
            &Guard::from_policy(&ValidPolicy::try_from(fleet).unwrap()),
        );
        r.track("orders", &Guard::from_policy(&ValidPolicy::default()));
        std::thread::sleep(Duration::from_millis(20));
        let batch = taken(&r);
        for report in batch["reports"].as_array().unwrap() {
            match report["service"].as_str().unwrap() {
                "ledger" => assert!(report["spanMs"].as_u64().unwrap() >= 20, "{report}"),
                _ => assert!(report.get("spanMs").is_none(), "{report}"),
            }
        }
        let next = taken(&r);
        let ledger = next["reports"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["service"] == "ledger");
        assert!(
            ledger.unwrap()["spanMs"].as_u64().unwrap() < 20,
            "from the last take on"
        );
    }

    #[tokio::test]
    async fn in_flight_counts_until_dropped() {
        let r = reporter(10, 10);
        let first = r.in_flight("svc").unwrap();
        let _second = r.in_flight("svc").unwrap();
        drop(first);
        assert_eq!(taken(&r)["reports"][0]["inFlight"], 1);
    }
}
