//! Fetching and watching the policies of a process's dependencies: one
//! long-poll watches them all, so a process with ten dependencies holds one
//! connection to the daemon.

mod cache;
mod fetch;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Weak};
use std::time::Duration;

use arc_swap::ArcSwap;
use rand::rngs::SmallRng;
use rand::SeedableRng;
use stormguard_core::backoff::Backoff;
use stormguard_core::guard::Guard;
use stormguard_core::policy::{
    InvalidPolicy, Jitter, PolicySource as Resolution, ResolvedPolicy, RetryPolicy, ValidPolicy,
};
use stormguard_core::wire::MAX_SELECTED;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::config::{check_daemon, check_positive, check_service, ConfigError};
use crate::connect::{Connection, DaemonTls};
use cache::Cached;
use fetch::{fetch, FetchError, Fetched, Unusable};

/// Where the client found the policy it applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PolicySource {
    /// Fetched from the daemon.
    Daemon,
    /// The last good policy, read from the cache file: the daemon could not be reached.
    Cache,
    /// The built-in defaults: neither the daemon nor a cache was available.
    Defaults,
}

/// How to reach the daemon, which dependencies to watch and how patient to be.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// The daemon's base URL, e.g. `http://stormguard.infra:8080`.
    pub daemon: String,
    /// The dependencies whose policies to apply (the services being called),
    /// watched together by one long-poll.
    pub services: Vec<String>,
    /// Where to keep the last good policies, for starts while the daemon is down.
    pub cache: Option<PathBuf>,
    /// Longest time [`PolicyWatch::start`] waits for the daemon.
    pub startup_wait: Duration,
    /// How long each watch request waits for a new version (`?wait=`).
    pub watch_wait: Duration,
    /// First and longest wait between failed fetches (full jitter between).
    pub retry_initial: Duration,
    /// See [`retry_initial`](Self::retry_initial).
    pub retry_max: Duration,
    /// Longest first wait before watching again after a watch fails. A
    /// fleet loses the daemon all at once, so its first retries are spread
    /// over this much (full jitter) rather than arriving together.
    pub reconnect_initial: Duration,
    /// The shortest time between the starts of two watch requests, whatever
    /// the daemon answers: a daemon answering at once (draining, misbehaving)
    /// never makes the client spin.
    pub min_poll_interval: Duration,
    /// TLS towards an `https://` daemon: the CA to trust, a client certificate.
    pub tls: DaemonTls,
}

impl ClientConfig {
    /// A configuration for one dependency with the defaults: a 5 s start-up
    /// wait, 60 s watches at most once a second, start-up fetch retries from
    /// 100 ms, watch retries from 2 s, both up to 30 s with full jitter, no
    /// cache file.
    pub fn new(daemon: impl Into<String>, service: impl Into<String>) -> Self {
        Self::for_services(daemon, [service])
    }

    /// As [`new`](Self::new), for several dependencies watched together.
    pub fn for_services(
        daemon: impl Into<String>,
        services: impl IntoIterator<Item = impl Into<String>>,
    ) -> Self {
        Self {
            daemon: daemon.into().trim_end_matches('/').to_string(),
            services: services.into_iter().map(Into::into).collect(),
            cache: None,
            startup_wait: Duration::from_secs(5),
            watch_wait: Duration::from_secs(60),
            retry_initial: Duration::from_millis(100),
            retry_max: Duration::from_secs(30),
            reconnect_initial: Duration::from_secs(2),
            min_poll_interval: Duration::from_secs(1),
            tls: DaemonTls::default(),
        }
    }

    /// Whether the settings can work; [`PolicyWatch::start`] checks them.
    pub fn check(&self) -> Result<(), ConfigError> {
        check_daemon(&self.daemon)?;
        if self.services.is_empty() || self.services.len() > MAX_SELECTED {
            return Err(ConfigError::Services(format!(
                "{} services named; name 1 to {MAX_SELECTED}",
                self.services.len()
            )));
        }
        for service in &self.services {
            check_service("services", service)?;
        }
        check_positive("watch_wait", self.watch_wait)?;
        check_positive("retry_max", self.retry_max)?;
        check_positive("min_poll_interval", self.min_poll_interval)
    }

    /// The client's own fetch backoff from `initial`: capped exponential with full jitter.
    fn backoff(&self, initial: Duration) -> Backoff {
        Backoff::from_policy(&RetryPolicy {
            initial_delay: initial.min(self.retry_max),
            max_delay: self.retry_max,
            multiplier: 2.0,
            jitter: Jitter::Full,
            ..RetryPolicy::default()
        })
    }
}

/// What the client applies now to one dependency.
#[derive(Debug, Clone)]
struct Current {
    resolved: ResolvedPolicy,
    guard: Guard,
    etag: Option<String>,
    source: PolicySource,
}

/// A policy version: the daemon's (or the cache's) answer, validated.
struct Version {
    resolved: ResolvedPolicy,
    policy: ValidPolicy,
    etag: Option<String>,
}

impl Version {
    /// `resolved` at `etag`, if its policy is valid.
    fn new(resolved: ResolvedPolicy, etag: Option<String>) -> Result<Self, InvalidPolicy> {
        let policy = ValidPolicy::try_from(resolved.policy.clone())?;
        Ok(Self {
            resolved,
            policy,
            etag,
        })
    }

    fn defaults() -> Self {
        Self {
            resolved: ResolvedPolicy {
                source: Resolution::Defaults,
                overridden: Vec::new(),
                policy: RetryPolicy::default(),
            },
            policy: ValidPolicy::default(),
            etag: None,
        }
    }

    fn into_current(self, source: PolicySource) -> Current {
        Current {
            guard: Guard::from_policy(&self.policy),
            resolved: self.resolved,
            etag: self.etag,
            source,
        }
    }
}

/// One dependency's state in the watch.
struct ServiceState {
    current: ArcSwap<Current>,
    versions: watch::Sender<u64>,
}

/// The watch of a process's dependencies: one long-poll for all of them.
/// Dropping every handle (this and its [`PolicyClient`]s) stops it.
#[derive(Clone)]
pub struct PolicyWatch {
    shared: Arc<Shared>,
}

struct Shared {
    config: ClientConfig,
    connection: Connection,
    services: BTreeMap<String, Arc<ServiceState>>,
    watcher: std::sync::Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl Drop for Shared {
    fn drop(&mut self) {
        if let Some(task) = self.watcher.lock().ok().and_then(|mut t| t.take()) {
            task.abort();
        }
    }
}

impl PolicyWatch {
    /// Fetches every policy (within `startup_wait`, falling back to the
    /// cache, then to the defaults, service by service) and starts watching
    /// for new versions. Fails only on settings that cannot work: a service
    /// must start even when the daemon is down.
    pub async fn start(mut config: ClientConfig) -> Result<Self, ConfigError> {
        config.check()?;
        config.services.sort_unstable();
        config.services.dedup();
        let connection = Connection::new(config.tls.clone(), |http| {
            http.connect_timeout(Duration::from_secs(2))
        })?;
        let (known, currents) = initial(&config, &connection.http()).await;
        let services = currents
            .into_iter()
            .map(|(name, current)| {
                tracing::info!(service = %name, source = ?current.source, "stormguard policy in use");
                let state = ServiceState {
                    current: ArcSwap::from_pointee(current),
                    versions: watch::Sender::new(0),
                };
                (name, Arc::new(state))
            })
            .collect();
        let shared = Arc::new(Shared {
            config,
            connection,
            services,
            watcher: std::sync::Mutex::new(None),
        });
        let task = tokio::spawn(watch_loop(Arc::downgrade(&shared), known));
        *shared.watcher.lock().expect("watcher lock") = Some(task);
        Ok(Self { shared })
    }

    /// The client for `service`; `None` if it is not one of the watched services.
    pub fn client(&self, service: &str) -> Option<PolicyClient> {
        let (name, state) = self.shared.services.get_key_value(service)?;
        Some(PolicyClient {
            shared: self.shared.clone(),
            service: name.as_str().into(),
            state: state.clone(),
        })
    }

    /// The watched services, sorted.
    pub fn services(&self) -> impl Iterator<Item = &str> {
        self.shared.services.keys().map(String::as_str)
    }
}

/// One dependency's policy, kept current by its [`PolicyWatch`]; clones share it.
#[derive(Clone)]
pub struct PolicyClient {
    shared: Arc<Shared>,
    service: Arc<str>,
    state: Arc<ServiceState>,
}

impl PolicyClient {
    /// Starts a watch of the one dependency `config` names and returns its
    /// client. For several dependencies, start one [`PolicyWatch`] instead:
    /// it holds one connection for all of them.
    pub async fn start(config: ClientConfig) -> Result<Self, ConfigError> {
        if config.services.len() != 1 {
            return Err(ConfigError::Services(format!(
                "{} services named; PolicyClient::start watches one, PolicyWatch::start several",
                config.services.len()
            )));
        }
        let service = config.services[0].clone();
        let watch = PolicyWatch::start(config).await?;
        Ok(watch.client(&service).expect("the watch holds its one service"))
    }

    /// The guard to run calls through: the current policy's retry loop,
    /// budget, breaker and hedging. Cheap; take it per call.
    pub fn guard(&self) -> Guard {
        self.state.current.load().guard.clone()
    }

    /// The resolved policy applied now.
    pub fn policy(&self) -> ResolvedPolicy {
        self.state.current.load().resolved.clone()
    }

    /// Where the policy applied now came from.
    pub fn source(&self) -> PolicySource {
        self.state.current.load().source
    }

    /// The dependency this client is for.
    pub fn service(&self) -> &str {
        &self.service
    }

    /// A receiver that changes each time a new version of this dependency's policy is applied.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.state.versions.subscribe()
    }

    /// The watch this client belongs to.
    pub fn watch(&self) -> PolicyWatch {
        PolicyWatch {
            shared: self.shared.clone(),
        }
    }
}

/// The policies to start with, each the daemon's, else the cache's, else
/// the defaults; and the version of the daemon's answer, if there was one.
async fn initial(
    config: &ClientConfig,
    http: &reqwest::Client,
) -> (Option<String>, BTreeMap<String, Current>) {
    let (known, mut fetched) = match fetch_at_start(config, http).await {
        Some((etag, services)) => (etag, services.into_iter().collect()),
        None => (None, BTreeMap::new()),
    };
    let cached = match (
        &config.cache,
        fetched.values().all(|v| v.is_ok()) && !fetched.is_empty(),
    ) {
        (Some(path), false) => cache::load(path).await,
        _ => Cached::default(),
    };
    let mut currents = BTreeMap::new();
    for service in &config.services {
        let current = match fetched.remove(service) {
            Some(Ok(version)) => version.into_current(PolicySource::Daemon),
            Some(Err(error)) => {
                tracing::error!(service, %error, "stormguard served a policy this client cannot use");
                fall_back(service, &cached)
            }
            None => fall_back(service, &cached),
        };
        currents.insert(service.clone(), current);
    }
    if currents.values().any(|c| c.source == PolicySource::Daemon) {
        save_cache(config, &currents).await;
    }
    (known, currents)
}

/// The cached policy of `service`, else the defaults, said in the log.
fn fall_back(service: &str, cached: &Cached) -> Current {
    match cached.version(service) {
        Some(version) => {
            tracing::warn!(
                service,
                "no usable stormguard policy from the daemon; using the cached one"
            );
            version.into_current(PolicySource::Cache)
        }
        None => {
            tracing::warn!(
                service,
                "no usable stormguard policy from the daemon and none cached; using the built-in defaults"
            );
            Version::defaults().into_current(PolicySource::Defaults)
        }
    }
}

/// The daemon's answer within `startup_wait`, retried with backoff; `None` if none came.
async fn fetch_at_start(
    config: &ClientConfig,
    http: &reqwest::Client,
) -> Option<(Option<String>, Vec<(String, Result<Version, Unusable>)>)> {
    let deadline = Instant::now() + config.startup_wait;
    let backoff = config.backoff(config.retry_initial);
    let mut rng = SmallRng::from_rng(&mut rand::rng());
    let (mut attempt, mut previous) = (0, Duration::ZERO);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let answer = tokio::time::timeout(left, fetch(config, http, None, None))
            .await
            .ok()?;
        let come_back = match answer.fetched {
            Ok(Fetched::New { etag, services }) => return Some((etag, services)),
            Ok(Fetched::Unchanged) => None,
            Err(error) => {
                tracing::warn!(%error, "cannot fetch the stormguard policies yet");
                match error {
                    FetchError::Unavailable(retry_after) => retry_after,
                    _ => None,
                }
            }
        };
        let delay = backoff
            .delay(attempt, previous, &mut rng)
            .max(come_back.unwrap_or_default());
        (attempt, previous) = (attempt.saturating_add(1), delay);
        if Instant::now() + delay >= deadline {
            return None;
        }
        tokio::time::sleep(delay).await;
    }
}

/// Long-polls for new versions until the watch is dropped (which aborts
/// this task; it holds no strong reference while it waits). Polls start at
/// most once per `min_poll_interval`; after a failure the next one waits for
/// the backoff, and at least as long as a `Retry-After` asks.
async fn watch_loop(shared: Weak<Shared>, mut known: Option<String>) {
    let mut rng = SmallRng::from_rng(&mut rand::rng());
    let (mut failures, mut previous) = (0u32, Duration::ZERO);
    let Some(mut wait) = shared.upgrade().map(|s| s.config.watch_wait) else {
        return;
    };
    loop {
        let Some((config, http)) = shared.upgrade().map(|s| (s.config.clone(), s.connection.http())) else {
            return;
        };
        let started = Instant::now();
        let answer = fetch(&config, &http, known.as_deref(), Some(wait)).await;
        if let Some(max) = answer.max_wait.filter(|max| *max < wait && !max.is_zero()) {
            tracing::info!(
                ?max,
                "the stormguard daemon allows shorter watches; using its maximum"
            );
            wait = max;
        }
        let mut pause = Duration::ZERO;
        match answer.fetched {
            Ok(Fetched::New { etag, services }) => {
                (failures, previous) = (0, Duration::ZERO);
                known = etag;
                let Some(s) = shared.upgrade() else { return };
                apply(&s, services).await;
            }
            Ok(Fetched::Unchanged) => (failures, previous) = (0, Duration::ZERO),
            Err(error) => {
                tracing::warn!(%error, "stormguard policy watch failed; keeping the current policies");
                let come_back = match error {
                    FetchError::Unavailable(retry_after) => retry_after.unwrap_or_default(),
                    _ => Duration::ZERO,
                };
                let delay = config
                    .backoff(config.reconnect_initial)
                    .delay(failures, previous, &mut rng);
                (failures, previous) = (failures.saturating_add(1), delay);
                pause = delay.max(come_back);
            }
        }
        let floor = (started + config.min_poll_interval).saturating_duration_since(Instant::now());
        tokio::time::sleep(pause.max(floor)).await;
    }
}

/// Applies each service's new version: a new guard that keeps the state of
/// unchanged blocks. A service whose version is unchanged or unusable keeps
/// its current policy.
async fn apply(shared: &Shared, services: Vec<(String, Result<Version, Unusable>)>) {
    let mut changed = false;
    for (service, version) in services {
        let Some(state) = shared.services.get(&service) else {
            continue;
        };
        let version = match version {
            Ok(version) => version,
            Err(error) => {
                tracing::error!(%service, %error, "stormguard served a policy this client cannot use; keeping the current one");
                continue;
            }
        };
        let current = state.current.load();
        // The same version from the daemon: nothing to apply, unless it only
        // confirms what the cache gave.
        let same = current.etag.is_some() && current.etag == version.etag;
        if same && current.source == PolicySource::Daemon {
            continue;
        }
        let guard = current.guard.updated(&version.policy);
        tracing::info!(%service, etag = ?version.etag, "stormguard policy updated");
        state.current.store(Arc::new(Current {
            resolved: version.resolved,
            guard,
            etag: version.etag,
            source: PolicySource::Daemon,
        }));
        state.versions.send_modify(|v| *v += 1);
        changed = true;
    }
    if changed {
        let currents = shared
            .services
            .iter()
            .map(|(name, state)| (name.clone(), (**state.current.load()).clone()))
            .collect();
        save_cache(&shared.config, &currents).await;
    }
}

/// Writes the policies that came from the daemon or the cache to the cache file.
async fn save_cache(config: &ClientConfig, currents: &BTreeMap<String, Current>) {
    let Some(path) = &config.cache else { return };
    let mut cached = Cached::default();
    for (service, current) in currents {
        if current.source != PolicySource::Defaults {
            cached.insert(service, &current.resolved, current.etag.as_deref());
        }
    }
    cache::save(path, cached).await;
}
