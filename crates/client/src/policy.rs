//! Fetching and watching one dependency's policy.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use rand::rngs::SmallRng;
use rand::SeedableRng;
use reqwest::header::{ETAG, IF_NONE_MATCH};
use reqwest::StatusCode;
use serde::{Deserialize, Serialize};
use stormguard_core::backoff::Backoff;
use stormguard_core::guard::Guard;
use stormguard_core::policy::{Jitter, PolicySource as Resolution, ResolvedPolicy, RetryPolicy};
use tokio::sync::watch;
use tokio::time::Instant;

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
}

impl ClientConfig {
    /// A configuration with the defaults: a 5 s start-up wait, 60 s watches,
    /// start-up fetch retries from 100 ms, watch retries from 2 s, both up to
    /// 30 s with full jitter, no cache file.
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
        }
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
}

/// What a fetch found.
enum Fetched {
    New(Box<ResolvedPolicy>, Option<String>),
    Unchanged,
}

impl PolicyClient {
    /// Fetches the policy (within `startup_wait`, falling back to the cache,
    /// then to the defaults) and starts watching for new versions. Never fails:
    /// a service must start even when the daemon is down.
    pub async fn start(config: ClientConfig) -> Self {
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
        Self { shared }
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
        match tokio::time::timeout(left, fetch(config, http, None, None)).await {
            Ok(Ok(Fetched::New(resolved, etag))) => {
                save_cache(config, &resolved, etag.as_deref()).await;
                return current(*resolved, etag, PolicySource::Daemon);
            }
            Ok(Ok(Fetched::Unchanged)) => {}
            Ok(Err(error)) => {
                tracing::warn!(service = %config.service, %error, "cannot fetch the stormguard policy yet")
            }
            Err(_) => break,
        }
        let delay = backoff.delay(attempt, previous, &mut rng);
        (attempt, previous) = (attempt.saturating_add(1), delay);
        if Instant::now() + delay >= deadline {
            break;
        }
        tokio::time::sleep(delay).await;
    }
    match load_cache(config).await {
        Some(cached) => {
            tracing::warn!(service = %config.service, "the stormguard daemon is unreachable; using the cached policy");
            current(cached.policy, cached.etag, PolicySource::Cache)
        }
        None => {
            tracing::warn!(service = %config.service, "the stormguard daemon is unreachable and nothing is cached; using the built-in defaults");
            let defaults = ResolvedPolicy {
                source: Resolution::Defaults,
                overridden: Vec::new(),
                policy: RetryPolicy::default(),
            };
            current(defaults, None, PolicySource::Defaults)
        }
    }
}

fn current(resolved: ResolvedPolicy, etag: Option<String>, source: PolicySource) -> Current {
    Current {
        guard: Guard::from_policy(&resolved.policy),
        resolved,
        etag,
        source,
    }
}

/// One GET: a new version, or none newer than `etag` (after waiting up to `wait`).
async fn fetch(
    config: &ClientConfig,
    http: &reqwest::Client,
    etag: Option<&str>,
    wait: Option<Duration>,
) -> Result<Fetched, FetchError> {
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
    let response = request.send().await?;
    match response.status() {
        StatusCode::OK => {
            let etag = response
                .headers()
                .get(ETAG)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string);
            Ok(Fetched::New(Box::new(response.json().await?), etag))
        }
        StatusCode::NOT_MODIFIED => Ok(Fetched::Unchanged),
        status => Err(FetchError::Status(status)),
    }
}

/// Long-polls for new versions until the client is dropped (which aborts
/// this task; it holds no strong reference while it waits).
async fn watch_loop(shared: std::sync::Weak<Shared>) {
    let mut rng = SmallRng::from_rng(&mut rand::rng());
    let (mut failures, mut previous) = (0u32, Duration::ZERO);
    loop {
        let Some((config, http, etag)) = shared
            .upgrade()
            .map(|s| (s.config.clone(), s.http.clone(), s.current.load().etag.clone()))
        else {
            return;
        };
        let fetched = fetch(&config, &http, etag.as_deref(), Some(config.watch_wait)).await;
        match fetched {
            Ok(Fetched::New(resolved, etag)) => {
                (failures, previous) = (0, Duration::ZERO);
                let Some(s) = shared.upgrade() else { return };
                apply(&s, *resolved, etag).await;
            }
            Ok(Fetched::Unchanged) => (failures, previous) = (0, Duration::ZERO),
            Err(error) => {
                tracing::warn!(service = %config.service, %error, "stormguard policy watch failed; keeping the current policy");
                let delay = config
                    .backoff(config.reconnect_initial)
                    .delay(failures, previous, &mut rng);
                (failures, previous) = (failures.saturating_add(1), delay);
                tokio::time::sleep(delay).await;
            }
        }
    }
}

/// Applies a new version: a new guard that keeps the state of unchanged blocks.
async fn apply(shared: &Shared, resolved: ResolvedPolicy, etag: Option<String>) {
    let guard = shared.current.load().guard.updated(&resolved.policy);
    save_cache(&shared.config, &resolved, etag.as_deref()).await;
    tracing::info!(service = %shared.config.service, etag = ?etag, "stormguard policy updated");
    shared.current.store(Arc::new(Current {
        resolved,
        guard,
        etag,
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

async fn load_cache(config: &ClientConfig) -> Option<Cached> {
    let path = config.cache.clone()?;
    let bytes = tokio::task::spawn_blocking(move || std::fs::read(path))
        .await
        .ok()?
        .ok()?;
    match serde_json::from_slice::<Cached>(&bytes) {
        Ok(cached) => Some(cached),
        Err(error) => {
            tracing::warn!(service = %config.service, %error, "the stormguard policy cache is unreadable; ignoring it");
            None
        }
    }
}
