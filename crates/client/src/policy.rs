//! Fetching and watching one dependency's policy.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use rand::rngs::SmallRng;
use rand::SeedableRng;
use reqwest::header::{HeaderMap, ETAG, IF_NONE_MATCH, RETRY_AFTER};
use reqwest::StatusCode;
use serde::{Deserialize, Serialize};
use stormguard_core::backoff::Backoff;
use stormguard_core::guard::Guard;
use stormguard_core::policy::{
    InvalidPolicy, Jitter, PolicySource as Resolution, ResolvedPolicy, RetryPolicy, ValidPolicy,
};
use stormguard_core::retry::parse_retry_after;
use stormguard_core::wire::MAX_WAIT_HEADER;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::config::{check_daemon, check_positive, check_service, ConfigError};

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

/// How to reach the daemon and how patient to be.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// The daemon's base URL, e.g. `http://stormguard.infra:8080`.
    pub daemon: String,
    /// The dependency whose policy to apply (the service being called).
    pub service: String,
    /// Where to keep the last good policy, for starts while the daemon is down.
    pub cache: Option<PathBuf>,
    /// Longest time [`PolicyClient::start`] waits for the daemon.
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
}

impl ClientConfig {
    /// A configuration with the defaults: a 5 s start-up wait, 60 s watches
    /// at most once a second, start-up fetch retries from 100 ms, watch
    /// retries from 2 s, both up to 30 s with full jitter, no cache file.
    pub fn new(daemon: impl Into<String>, service: impl Into<String>) -> Self {
        Self {
            daemon: daemon.into().trim_end_matches('/').to_string(),
            service: service.into(),
            cache: None,
            startup_wait: Duration::from_secs(5),
            watch_wait: Duration::from_secs(60),
            retry_initial: Duration::from_millis(100),
            retry_max: Duration::from_secs(30),
            reconnect_initial: Duration::from_secs(2),
            min_poll_interval: Duration::from_secs(1),
        }
    }

    /// Whether the settings can work; [`PolicyClient::start`] checks them.
    pub fn check(&self) -> Result<(), ConfigError> {
        check_daemon(&self.daemon)?;
        check_service("service", &self.service)?;
        check_positive("watch_wait", self.watch_wait)?;
        check_positive("retry_max", self.retry_max)?;
        check_positive("min_poll_interval", self.min_poll_interval)
    }

    fn url(&self) -> String {
        format!("{}/v1/policies/{}", self.daemon, self.service)
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

/// What the client applies now.
#[derive(Debug, Clone)]
struct Current {
    resolved: ResolvedPolicy,
    guard: Guard,
    etag: Option<String>,
    source: PolicySource,
}

/// What the cache file holds.
#[derive(Serialize, Deserialize)]
struct Cached {
    etag: Option<String>,
    policy: ResolvedPolicy,
}

/// One dependency's policy, kept current; clones share it.
#[derive(Clone)]
pub struct PolicyClient {
    shared: Arc<Shared>,
}

struct Shared {
    config: ClientConfig,
    http: reqwest::Client,
    current: ArcSwap<Current>,
    versions: watch::Sender<u64>,
    watcher: std::sync::Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl Drop for Shared {
    fn drop(&mut self) {
        if let Some(task) = self.watcher.lock().ok().and_then(|mut t| t.take()) {
            task.abort();
        }
    }
}

/// A failed fetch, for logs.
#[derive(Debug, thiserror::Error)]
enum FetchError {
    #[error("{0}")]
    Http(#[from] reqwest::Error),
    #[error("the daemon answered {0}")]
    Status(StatusCode),
    #[error("the daemon is busy or draining (503); asked to come back in {0:?}")]
    Unavailable(Option<Duration>),
    #[error("the daemon served a policy that is not valid, ignored: {error}")]
    Invalid {
        error: InvalidPolicy,
        /// The version refused, so the watch waits for the next one.
        etag: Option<String>,
    },
}

/// What a fetch found.
enum Fetched {
    New(Box<Version>),
    Unchanged,
}

/// A policy version: the daemon's answer, validated.
struct Version {
    resolved: ResolvedPolicy,
    policy: ValidPolicy,
    etag: Option<String>,
}

/// A fetch's outcome, and the longest wait the daemon allows if it said so.
struct Answer {
    fetched: Result<Fetched, FetchError>,
    max_wait: Option<Duration>,
}

impl PolicyClient {
    /// Fetches the policy (within `startup_wait`, falling back to the cache,
    /// then to the defaults) and starts watching for new versions. Fails only
    /// on settings that cannot work: a service must start even when the
    /// daemon is down, or serves something it cannot use.
    pub async fn start(config: ClientConfig) -> Result<Self, ConfigError> {
        config.check()?;
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(2))
            .build()
            .expect("a plain HTTP client builds");
        let current = initial(&config, &http).await;
        tracing::info!(service = %config.service, source = ?current.source, "stormguard policy in use");
        let shared = Arc::new(Shared {
            config,
            http,
            current: ArcSwap::from_pointee(current),
            versions: watch::Sender::new(0),
            watcher: std::sync::Mutex::new(None),
        });
        let task = tokio::spawn(watch_loop(Arc::downgrade(&shared)));
        *shared.watcher.lock().expect("watcher lock") = Some(task);
        Ok(Self { shared })
    }

    /// The guard to run calls through: the current policy's retry loop,
    /// budget, breaker and hedging. Cheap; take it per call.
    pub fn guard(&self) -> Guard {
        self.shared.current.load().guard.clone()
    }

    /// The resolved policy applied now.
    pub fn policy(&self) -> ResolvedPolicy {
        self.shared.current.load().resolved.clone()
    }

    /// Where the policy applied now came from.
    pub fn source(&self) -> PolicySource {
        self.shared.current.load().source
    }

    /// The dependency this client is for.
    pub fn service(&self) -> &str {
        &self.shared.config.service
    }

    /// A receiver that changes each time a new version is applied.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.shared.versions.subscribe()
    }
}

/// The policy to start with: the daemon's, else the cache's, else the defaults.
async fn initial(config: &ClientConfig, http: &reqwest::Client) -> Current {
    let deadline = Instant::now() + config.startup_wait;
    let backoff = config.backoff(config.retry_initial);
    let mut rng = SmallRng::from_rng(&mut rand::rng());
    let (mut attempt, mut previous) = (0, Duration::ZERO);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let mut come_back = None;
        match tokio::time::timeout(left, fetch(config, http, None, None)).await {
            Ok(answer) => match answer.fetched {
                Ok(Fetched::New(version)) => {
                    save_cache(config, &version.resolved, version.etag.as_deref()).await;
                    return current(*version, PolicySource::Daemon);
                }
                Ok(Fetched::Unchanged) => {}
                Err(error) => {
                    if let FetchError::Unavailable(retry_after) = error {
                        come_back = retry_after;
                    }
                    tracing::warn!(service = %config.service, %error, "cannot fetch the stormguard policy yet")
                }
            },
            Err(_) => break,
        }
        let delay = backoff
            .delay(attempt, previous, &mut rng)
            .max(come_back.unwrap_or_default());
        (attempt, previous) = (attempt.saturating_add(1), delay);
        if Instant::now() + delay >= deadline {
            break;
        }
        tokio::time::sleep(delay).await;
    }
    match load_cache(config).await {
        Some(cached) => {
            tracing::warn!(service = %config.service, "the stormguard daemon is unreachable; using the cached policy");
            current(cached, PolicySource::Cache)
        }
        None => {
            tracing::warn!(service = %config.service, "the stormguard daemon is unreachable and nothing is cached; using the built-in defaults");
            let defaults = Version {
                resolved: ResolvedPolicy {
                    source: Resolution::Defaults,
                    overridden: Vec::new(),
                    policy: RetryPolicy::default(),
                },
                policy: ValidPolicy::default(),
                etag: None,
            };
            current(defaults, PolicySource::Defaults)
        }
    }
}

fn current(version: Version, source: PolicySource) -> Current {
    Current {
        guard: Guard::from_policy(&version.policy),
        resolved: version.resolved,
        etag: version.etag,
        source,
    }
}

/// A resolved policy as read from the daemon or the cache, checked before use.
fn validated(resolved: ResolvedPolicy, etag: Option<String>) -> Result<Version, FetchError> {
    match ValidPolicy::try_from(resolved.policy.clone()) {
        Ok(policy) => Ok(Version {
            resolved,
            policy,
            etag,
        }),
        Err(error) => Err(FetchError::Invalid { error, etag }),
    }
}

/// One GET: a new version, or none newer than `etag` (after waiting up to `wait`).
async fn fetch(
    config: &ClientConfig,
    http: &reqwest::Client,
    etag: Option<&str>,
    wait: Option<Duration>,
) -> Answer {
    let mut request = http.get(config.url());
    if let Some(etag) = etag {
        request = request.header(IF_NONE_MATCH, etag);
    }
    if let Some(wait) = wait {
        request = request
            .query(&[("wait", format!("{}ms", wait.as_millis()))])
            // The daemon answers at `wait` at the latest; past a margin, the
            // connection is stalled and the watch starts over.
            .timeout(wait + (wait / 2 + Duration::from_secs(1)).min(Duration::from_secs(10)));
    } else {
        request = request.timeout(Duration::from_secs(10));
    }
    let response = match request.send().await {
        Ok(response) => response,
        Err(error) => {
            return Answer {
                fetched: Err(error.into()),
                max_wait: None,
            }
        }
    };
    let max_wait = max_wait(response.headers());
    let fetched = read(response).await;
    Answer { fetched, max_wait }
}

/// What a response says.
async fn read(response: reqwest::Response) -> Result<Fetched, FetchError> {
    match response.status() {
        StatusCode::OK => {
            let etag = response
                .headers()
                .get(ETAG)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string);
            let resolved: ResolvedPolicy = response.json().await?;
            Ok(Fetched::New(Box::new(validated(resolved, etag)?)))
        }
        StatusCode::NOT_MODIFIED => Ok(Fetched::Unchanged),
        StatusCode::SERVICE_UNAVAILABLE | StatusCode::TOO_MANY_REQUESTS => {
            let retry_after = response
                .headers()
                .get(RETRY_AFTER)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| parse_retry_after(v, std::time::SystemTime::now()));
            Err(FetchError::Unavailable(retry_after))
        }
        status => Err(FetchError::Status(status)),
    }
}

/// The daemon's longest wait, when it said it shortened ours.
fn max_wait(headers: &HeaderMap) -> Option<Duration> {
    let millis: u64 = headers.get(MAX_WAIT_HEADER)?.to_str().ok()?.parse().ok()?;
    Some(Duration::from_millis(millis))
}

/// Long-polls for new versions until the client is dropped (which aborts
/// this task; it holds no strong reference while it waits). Polls start at
/// most once per `min_poll_interval`; after a failure the next one waits for
/// the backoff, and at least as long as a `Retry-After` asks.
async fn watch_loop(shared: std::sync::Weak<Shared>) {
    let mut rng = SmallRng::from_rng(&mut rand::rng());
    let (mut failures, mut previous) = (0u32, Duration::ZERO);
    let Some((mut known, mut wait)) = shared
        .upgrade()
        .map(|s| (s.current.load().etag.clone(), s.config.watch_wait))
    else {
        return;
    };
    loop {
        let Some((config, http)) = shared.upgrade().map(|s| (s.config.clone(), s.http.clone())) else {
            return;
        };
        let started = Instant::now();
        let answer = fetch(&config, &http, known.as_deref(), Some(wait)).await;
        if let Some(max) = answer.max_wait.filter(|max| *max < wait && !max.is_zero()) {
            tracing::info!(service = %config.service, ?max, "the stormguard daemon allows shorter watches; using its maximum");
            wait = max;
        }
        let mut pause = Duration::ZERO;
        match answer.fetched {
            Ok(Fetched::New(version)) => {
                (failures, previous) = (0, Duration::ZERO);
                known.clone_from(&version.etag);
                let Some(s) = shared.upgrade() else { return };
                apply(&s, *version).await;
            }
            Ok(Fetched::Unchanged) => (failures, previous) = (0, Duration::ZERO),
            Err(FetchError::Invalid { error, etag }) => {
                tracing::error!(service = %config.service, %error, "stormguard served a policy this client cannot use; keeping the current policy");
                known = etag;
            }
            Err(error) => {
                tracing::warn!(service = %config.service, %error, "stormguard policy watch failed; keeping the current policy");
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

/// Applies a new version: a new guard that keeps the state of unchanged blocks.
async fn apply(shared: &Shared, version: Version) {
    let guard = shared.current.load().guard.updated(&version.policy);
    save_cache(&shared.config, &version.resolved, version.etag.as_deref()).await;
    tracing::info!(service = %shared.config.service, etag = ?version.etag, "stormguard policy updated");
    shared.current.store(Arc::new(Current {
        resolved: version.resolved,
        guard,
        etag: version.etag,
        source: PolicySource::Daemon,
    }));
    shared.versions.send_modify(|v| *v += 1);
}

async fn save_cache(config: &ClientConfig, policy: &ResolvedPolicy, etag: Option<&str>) {
    let Some(path) = config.cache.clone() else { return };
    let cached = Cached {
        etag: etag.map(str::to_string),
        policy: policy.clone(),
    };
    let write = tokio::task::spawn_blocking(move || -> std::io::Result<()> {
        let bytes = serde_json::to_vec(&cached).map_err(std::io::Error::other)?;
        let staged = path.with_extension("tmp");
        std::fs::write(&staged, bytes)?;
        std::fs::rename(&staged, &path)
    });
    if let Ok(Err(error)) = write.await {
        tracing::warn!(service = %config.service, %error, "cannot write the stormguard policy cache");
    }
}

/// The cached version, if there is one and it is readable and valid.
async fn load_cache(config: &ClientConfig) -> Option<Version> {
    let path = config.cache.clone()?;
    let bytes = tokio::task::spawn_blocking(move || std::fs::read(path))
        .await
        .ok()?
        .ok()?;
    let cached = serde_json::from_slice::<Cached>(&bytes).map_err(|e| e.to_string());
    match cached.and_then(|c| validated(c.policy, c.etag).map_err(|e| e.to_string())) {
        Ok(version) => Some(version),
        Err(error) => {
            tracing::warn!(service = %config.service, %error, "the stormguard policy cache is unusable; ignoring it");
            None
        }
    }
}
