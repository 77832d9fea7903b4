//! The store daemon replicas share their fleet state through: Redis. This
//! file is the client (one connection, made at the first call and again
//! after it breaks; every call bounded by [`STORE_TIMEOUT`], timed and its
//! failures counted); each kind of state has its room:
//!
//! - `pace.rs`: a paced dependency's exchange, one atomic script
//!   (`exchange.lua`) that adds the replica's contribution, keeps its
//!   demand for a lease, renews or takes the dependency's ownership
//!   (set-if-absent with a lease, as envoyproxy/ratelimit and Redis's own
//!   lock pattern do), hands the owner every replica's outcomes and answers
//!   with the other replicas' demand and the published rate; the owner
//!   publishes with `publish.lua`, which writes only while it still owns
//!   the pace and pushes the rate on a channel.
//! - `breaker.rs`: one fleet breaker episode per dependency, merged in by
//!   each replica and written back under compare-and-set (`breaker.lua`).
//! - `claims.rs`: what each replica's processes claim of a fleet-scoped
//!   retry budget's floor.
//! - `instances.rs`: who owns each reporting instance, and which of its
//!   report batches were counted.
//!
//! What goes in and comes out are `stormguard_core`'s types: the
//! simulator's model of the store answers in the same terms. Every key of
//! a dependency or instance carries its name as a hash tag, so that on a
//! Redis Cluster one script's keys would live on one node; the client is
//! not a cluster client yet, so the store is one Redis server. A store that
//! cannot be reached is not an error the daemon stops for: each call fails
//! with a [`StoreError`], and the replica decides alone.

mod breaker;
mod claims;
mod instances;
mod pace;

use std::time::Duration;

use prometheus::{Histogram, HistogramOpts, IntCounterVec, Opts};
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{Client, IntoConnectionInfo, Script};
use stormguard_core::fleet::breaker::episode::OtherRules;
use tokio::sync::Mutex;

use crate::metrics::Registry;

/// How long one call to the store may take before it counts as failed: a
/// quarter of a lease, so that a slow store is noticed well before the
/// replicas' parts run out.
pub const STORE_TIMEOUT: Duration = Duration::from_millis(250);

/// Why a call to the store failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The address is not one of Redis's.
    #[error("--pace-store {0}: {1}")]
    Address(String, String),
    /// No answer within [`STORE_TIMEOUT`].
    #[error("the pace store at {0} did not answer within {STORE_TIMEOUT:?}")]
    Timeout(String),
    /// Redis refused the call or the connection failed.
    #[error("the pace store at {at}: {source}")]
    Redis {
        /// The store's address, without its password.
        at: String,
        /// What Redis or the connection said.
        source: redis::RedisError,
    },
    /// Other replicas wrote a fleet breaker's episode between each of this
    /// replica's reads and writes, every time it tried.
    #[error("the pace store at {at}: other replicas wrote the fleet breaker's state first, {tries} times in a row")]
    Contended {
        /// The store's address, without its password.
        at: String,
        /// How many times this replica tried.
        tries: usize,
    },
    /// A fleet breaker's episode runs under other rules, which another
    /// replica still applies: this replica decides alone until they agree.
    #[error("the pace store at {at}: {service}: {refused}")]
    OtherRules {
        /// The store's address, without its password.
        at: String,
        /// The dependency.
        service: String,
        /// The rules, the episode's and this replica's.
        refused: OtherRules,
    },
    /// The answer was not what the scripts return.
    #[error("the pace store at {at} answered what this daemon cannot read: {what}")]
    Malformed {
        /// The store's address, without its password.
        at: String,
        /// What was wrong with it.
        what: String,
    },
}

impl StoreError {
    /// The error's kind, as the `kind` label of the store's error counter.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Address(..) => "address",
            Self::Timeout(_) => "timeout",
            Self::Redis { source, .. } if is_tls(source) => "tls",
            Self::Redis { source, .. } if source.is_connection_refusal() => "refused",
            Self::Redis { source, .. } if source.is_io_error() || source.is_connection_dropped() => {
                "connection"
            }
            Self::Redis { source, .. } if source.kind() == redis::ErrorKind::AuthenticationFailed => "auth",
            Self::Redis { .. } => "redis",
            Self::Contended { .. } => "contended",
            Self::OtherRules { .. } => "other_rules",
            Self::Malformed { .. } => "malformed",
        }
    }
}

impl StoreError {
    /// Whether the call surely changed nothing in the store: it never
    /// reached it, or (contended) every write lost. A call that timed out
    /// may have written before its answer was lost.
    pub fn wrote_nothing(&self) -> bool {
        match self {
            Self::Address(..) | Self::Contended { .. } | Self::OtherRules { .. } => true,
            Self::Redis { source, .. } => source.is_connection_refusal(),
            Self::Timeout(_) | Self::Malformed { .. } => false,
        }
    }
}

/// Whether `error` is TLS's: a certificate not trusted, a handshake refused.
/// redis-rs keeps an I/O error behind an `Arc` as its source, and rustls's
/// error inside that I/O error.
fn is_tls(error: &redis::RedisError) -> bool {
    type Shared = std::sync::Arc<dyn std::error::Error + Send + Sync>;
    let Some(source) = std::error::Error::source(error) else {
        return false;
    };
    let source: &(dyn std::error::Error + 'static) = match source.downcast_ref::<Shared>() {
        Some(shared) => shared.as_ref(),
        None => source,
    };
    source
        .downcast_ref::<std::io::Error>()
        .and_then(std::io::Error::get_ref)
        .is_some_and(|inner| inner.is::<rustls::Error>())
}

/// A connection to the shared store, made at the first call and made again
/// after it breaks.
pub struct PaceStore {
    client: Client,
    /// The store's address without its password, for messages.
    at: String,
    /// This replica's name in the store: unique among the replicas.
    replica: String,
    connection: Mutex<Option<ConnectionManager>>,
    exchange: Script,
    publish: Script,
    release: Script,
    bind: Script,
    batch: Script,
    claims: Script,
    breaker: Script,
    metrics: StoreMetrics,
    /// Services whose last handover this replica could not take up: the
    /// log says so once, when the refusals begin, not at every exchange.
    refusing_handovers: std::sync::Mutex<std::collections::HashSet<String>>,
}

/// How this replica's calls to the store go.
struct StoreMetrics {
    seconds: Histogram,
    errors: IntCounterVec,
    handovers_refused: IntCounterVec,
}

impl StoreMetrics {
    fn new(registry: &prometheus::Registry) -> Self {
        let seconds = Histogram::with_opts(
            HistogramOpts::new(
                "stormguard_pace_store_seconds",
                "Round trip of this replica's calls to the pace store that it answered.",
            )
            .buckets(vec![0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25]),
        )
        .expect("valid metric");
        let errors = IntCounterVec::new(
            Opts::new(
                "stormguard_pace_store_errors_total",
                "Calls to the pace store that failed, by kind: timeout, refused, connection, tls, auth, redis, malformed, contended, other_rules (a fleet breaker's share refused: another replica applies other circuitBreaker rules to the dependency).",
            ),
            &["kind"],
        )
        .expect("valid metric");
        let handovers_refused = IntCounterVec::new(
            Opts::new(
                "stormguard_pace_store_handovers_refused_total",
                "Handovers of what a paced dependency's last owner learned that this replica found in the store and could not take up, by reason: version (another daemon's format), unreadable, out_of_range (torn). It then carries on from the published rate alone.",
            ),
            &["reason"],
        )
        .expect("valid metric");
        for family in [
            Box::new(seconds.clone()) as Box<dyn prometheus::core::Collector>,
            Box::new(errors.clone()),
            Box::new(handovers_refused.clone()),
        ] {
            registry.register(family).expect("each family is registered once");
        }
        Self {
            seconds,
            errors,
            handovers_refused,
        }
    }
}

/// What the daemon needs besides the address to reach the store.
#[derive(Debug, Default)]
pub struct Access {
    /// The password, replacing one in the address.
    pub password: Option<String>,
    /// With `rediss://`: the PEM certificates of the CA to trust instead of
    /// the system's.
    pub ca: Option<Vec<u8>>,
}

impl PaceStore {
    /// The store at `url` (`redis://[user:password@]host:port[/db]`, or
    /// `rediss://` for TLS), with `access`'s password and CA if given, for
    /// the replica named `replica`; how its calls go counted in
    /// `registry`. Nothing is sent until the first call.
    pub fn new(url: &str, access: Access, replica: String, registry: &Registry) -> Result<Self, StoreError> {
        let refused = |error: redis::RedisError| StoreError::Address(redacted(url), error.to_string());
        let mut info = url.into_connection_info().map_err(refused)?;
        if let Some(password) = access.password {
            let settings = info.redis_settings().clone().set_password(password);
            info = info.set_redis_settings(settings);
        }
        let client = match access.ca {
            Some(ca) => {
                let certificates = redis::TlsCertificates {
                    client_tls: None,
                    root_cert: Some(ca),
                };
                Client::build_with_tls(info, certificates)
            }
            None => Client::open(info),
        }
        .map_err(refused)?;
        Ok(Self {
            client,
            at: redacted(url),
            replica,
            connection: Mutex::new(None),
            exchange: Script::new(include_str!("exchange.lua")),
            publish: Script::new(include_str!("publish.lua")),
            release: Script::new(include_str!("release.lua")),
            bind: Script::new(include_str!("bind.lua")),
            batch: Script::new(include_str!("batch.lua")),
            claims: Script::new(include_str!("claims.lua")),
            breaker: Script::new(include_str!("breaker.lua")),
            metrics: StoreMetrics::new(registry.families()),
            refusing_handovers: std::sync::Mutex::default(),
        })
    }

    /// The store's address, without its password.
    pub fn address(&self) -> &str {
        &self.at
    }

    /// This replica's name in the store.
    pub fn replica(&self) -> &str {
        &self.replica
    }

    async fn connection(&self) -> Result<ConnectionManager, StoreError> {
        let mut slot = self.connection.lock().await;
        if let Some(connection) = slot.as_ref() {
            return Ok(connection.clone());
        }
        // No retries of its own: a failed call fails now, with its reason
        // (a refused connection, a certificate not trusted), and the next
        // turn tries again.
        let config = ConnectionManagerConfig::new()
            .set_number_of_retries(0)
            .set_connection_timeout(Some(STORE_TIMEOUT))
            .set_response_timeout(Some(STORE_TIMEOUT));
        let connection = self
            .bounded(ConnectionManager::new_with_config(self.client.clone(), config))
            .await?;
        *slot = Some(connection.clone());
        Ok(connection)
    }

    /// `call`, failed after [`STORE_TIMEOUT`].
    async fn bounded<T>(
        &self,
        call: impl std::future::Future<Output = redis::RedisResult<T>>,
    ) -> Result<T, StoreError> {
        match tokio::time::timeout(STORE_TIMEOUT, call).await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(source)) => Err(StoreError::Redis {
                at: self.at.clone(),
                source,
            }),
            Err(_) => Err(StoreError::Timeout(self.at.clone())),
        }
    }

    /// `call`: its round trip timed if it was answered, its failure
    /// counted by kind if not. Every public call goes through here.
    async fn counted<T>(
        &self,
        call: impl std::future::Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        let began = std::time::Instant::now();
        let result = call.await;
        match &result {
            Ok(_) => self.metrics.seconds.observe(began.elapsed().as_secs_f64()),
            Err(error) => self.metrics.errors.with_label_values(&[error.kind()]).inc(),
        }
        result
    }

    fn malformed(&self, what: String) -> StoreError {
        StoreError::Malformed {
            at: self.at.clone(),
            what,
        }
    }
}

/// `url` with its password, if any, replaced by `***`.
fn redacted(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => match url[scheme + 3..at].split_once(':') {
            Some((user, _)) => format!("{}{user}:***{}", &url[..scheme + 3], &url[at..]),
            None => url.to_string(),
        },
        _ => url.to_string(),
    }
}

#[cfg(test)]
mod tests;
