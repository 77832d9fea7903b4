//! Who is speaking: the Kubernetes service account behind a report or a
//! pace ask, from the projected service-account token it carries.
//!
//! A token is a JWT the kubelet mounts into the pod, bound to an audience
//! (`stormguard` by default) and short-lived. The daemon verifies it offline
//! against the issuer's public keys (a JWKS file, see [`keys`]): the header's
//! algorithm must be RS256 or ES256 and match the key its `kid` names (so
//! neither `none` nor an HMAC keyed with a public key gets through), the
//! signature must hold, and `exp`, `nbf`, `aud` and, when set, `iss` must
//! too. The subject must be `system:serviceaccount:<namespace>:<name>`.

pub mod bindings;
pub mod keys;

use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use axum::http::{header, HeaderMap};
use base64::Engine;
use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::Validation;
use prometheus::{IntCounter, IntCounterVec, Opts, Registry};
use serde::Deserialize;

pub use bindings::{Bindings, NotYours};
pub use keys::{KeyProblem, KeySet, KeySetProblem, KeysError};

use crate::metrics::ReloadOutcomes;
use crate::stamp::FileStamp;

/// The shortest time between two logged token refusals.
const REFUSAL_LOG_EVERY: Duration = Duration::from_secs(10);

/// How often the key file is looked at for a change.
const KEYS_RECHECK: Duration = Duration::from_secs(1);

/// How far the daemon's clock may be from the issuer's: a token is still
/// accepted this many seconds after its `exp`, and this many before its `nbf`.
pub const CLOCK_SKEW_SECS: u64 = 60;

/// Whether reports and pace asks must say who sends them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Mode {
    /// Tokens are not looked at: anyone who reaches the port may report.
    Off,
    /// A token, when sent, must be valid; requests without one are served
    /// and counted in `stormguard_reports_unauthenticated_total`.
    Optional,
    /// Every report and pace ask needs a valid token (401 without).
    Required,
}

/// A verified caller: a Kubernetes service account.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Identity {
    /// Its namespace.
    pub namespace: String,
    /// Its name.
    pub service_account: String,
}

impl fmt::Display for Identity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.service_account)
    }
}

/// Why a token was refused; `reason` is the metric label.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// No `Authorization: Bearer` header, and one is required.
    #[error("a service-account token is required: send it as Authorization: Bearer <token>")]
    Missing,
    /// Not a JWT, or a claim of the wrong type.
    #[error("the token is malformed: {0}")]
    Malformed(String),
    /// `none`, an HMAC, or an algorithm its key does not verify.
    #[error(
        "the token's algorithm {0:?} is not accepted: tokens are signed RS256 or ES256 by the issuer's keys"
    )]
    Algorithm(String),
    /// Its `kid` names no key in the issuer's key set.
    #[error("the token's key {0:?} is not one of the issuer's keys")]
    UnknownKey(String),
    /// The signature does not hold.
    #[error("the token's signature is not the issuer's")]
    Signature,
    /// Past its `exp`.
    #[error("the token has expired")]
    Expired,
    /// Before its `nbf`.
    #[error("the token is not valid yet")]
    NotYetValid,
    /// Not meant for this daemon.
    #[error("the token's audience is not {0:?}")]
    Audience(String),
    /// Issued by someone else.
    #[error("the token's issuer is not {0:?}")]
    Issuer(String),
    /// Its subject is not a service account.
    #[error("the token's subject {0:?} is not a Kubernetes service account")]
    NotAServiceAccount(String),
}

impl Refusal {
    /// The `reason` label of `stormguard_token_refusals_total`.
    pub fn reason(&self) -> &'static str {
        match self {
            Refusal::Missing => "missing",
            Refusal::Malformed(_) => "malformed",
            Refusal::Algorithm(_) => "algorithm",
            Refusal::UnknownKey(_) => "unknown_key",
            Refusal::Signature => "signature",
            Refusal::Expired => "expired",
            Refusal::NotYetValid => "not_yet_valid",
            Refusal::Audience(_) => "audience",
            Refusal::Issuer(_) => "issuer",
            Refusal::NotAServiceAccount(_) => "subject",
        }
    }

    const REASONS: [&'static str; 10] = [
        "missing",
        "malformed",
        "algorithm",
        "unknown_key",
        "signature",
        "expired",
        "not_yet_valid",
        "audience",
        "issuer",
        "subject",
    ];
}

/// What a token must be to be accepted.
#[derive(Debug, Clone)]
pub struct TokenRules {
    /// The audience tokens must be bound to.
    pub audience: String,
    /// The issuer tokens must come from; any, if none.
    pub issuer: Option<String>,
    /// The issuer's public keys.
    pub keys_file: PathBuf,
}

/// Checks callers' tokens; shared by every request.
pub struct Callers {
    mode: Mode,
    rules: Option<TokenRules>,
    keys: ArcSwap<Option<KeySet>>,
    /// When the key file was last looked at, and its stamp then.
    keys_seen: Mutex<(Instant, Option<FileStamp>)>,
    refusals: IntCounterVec,
    /// When a refusal was last logged: an attacker's stream of forged
    /// tokens is counted in full but logged at most every [`REFUSAL_LOG_EVERY`].
    refusal_logged: Mutex<Option<Instant>>,
    unauthenticated: IntCounter,
    key_reloads: ReloadOutcomes,
}

#[derive(Deserialize)]
struct Claims {
    sub: String,
}

#[derive(Deserialize)]
struct RawHeader {
    alg: String,
    kid: Option<String>,
}

impl Callers {
    /// Checks nothing: every request is served as today.
    pub fn off() -> Self {
        Self::build(Mode::Off, None, None)
    }

    /// Checks tokens under `mode` by `rules`, loading the keys now; a key
    /// set that cannot be used is an error naming the key.
    pub fn new(mode: Mode, rules: TokenRules) -> Result<Self, KeysError> {
        let stamp = FileStamp::of(&rules.keys_file).ok();
        let keys = KeySet::load(&rules.keys_file)?;
        let callers = Self::build(mode, Some(rules), Some(keys));
        *callers.keys_seen.lock().unwrap_or_else(|e| e.into_inner()) = (Instant::now(), stamp);
        Ok(callers)
    }

    fn build(mode: Mode, rules: Option<TokenRules>, keys: Option<KeySet>) -> Self {
        let refusals = IntCounterVec::new(
            Opts::new(
                "stormguard_token_refusals_total",
                "Reports and pace asks refused for their service-account token (401), by reason; nothing they said was counted.",
            ),
            &["reason"],
        )
        .expect("valid metric");
        for reason in Refusal::REASONS {
            refusals.with_label_values(&[reason]);
        }
        let unauthenticated = IntCounter::new(
            "stormguard_reports_unauthenticated_total",
            "Reports and pace asks served without a token (in optional mode).",
        )
        .expect("valid metric");
        let key_reloads = ReloadOutcomes::new("stormguard_token_keys", "the token issuer's key file");
        Self {
            mode,
            rules,
            keys: ArcSwap::from_pointee(keys),
            keys_seen: Mutex::new((Instant::now(), None)),
            refusals,
            refusal_logged: Mutex::default(),
            unauthenticated,
            key_reloads,
        }
    }

    /// Registers the families on `registry`.
    pub fn register(&self, registry: &Registry) -> prometheus::Result<()> {
        registry.register(Box::new(self.refusals.clone()))?;
        registry.register(Box::new(self.unauthenticated.clone()))?;
        self.key_reloads.register(registry)
    }

    /// The mode.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// Loads the key set again; on an error the keys in use stay.
    pub fn reload_keys(&self) -> Result<usize, KeysError> {
        let Some(rules) = &self.rules else { return Ok(0) };
        let loaded = KeySet::load(&rules.keys_file);
        self.key_reloads.record(loaded.is_ok());
        let keys = loaded?;
        let count = keys.len();
        self.keys.store(Arc::new(Some(keys)));
        Ok(count)
    }

    /// Reloads the keys if their file changed since it was last looked at
    /// (at most once a second), as the kubelet replaces a mounted ConfigMap.
    fn follow_key_file(&self) {
        let Some(rules) = &self.rules else { return };
        let stamp = {
            let mut seen = self.keys_seen.lock().unwrap_or_else(|e| e.into_inner());
            if seen.0.elapsed() < KEYS_RECHECK {
                return;
            }
            let stamp = FileStamp::of(&rules.keys_file).ok();
            let changed = stamp != seen.1;
            *seen = (Instant::now(), stamp);
            if !changed {
                return;
            }
            stamp
        };
        match self.reload_keys() {
            Ok(count) => tracing::info!(keys = count, ?stamp, "token issuer keys reloaded"),
            Err(error) => tracing::error!(%error, "token issuer keys not reloaded; the keys in use stay"),
        }
    }

    /// The caller of a request: `None` when tokens are off, or optional and
    /// not sent; a refusal (counted) when a token is required and missing,
    /// or sent and not valid.
    pub fn caller(&self, headers: &HeaderMap) -> Result<Option<Identity>, Refusal> {
        if self.mode == Mode::Off {
            return Ok(None);
        }
        self.follow_key_file();
        let token = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::trim);
        let checked = match (token, self.mode) {
            (None, Mode::Optional) => {
                self.unauthenticated.inc();
                return Ok(None);
            }
            (None, _) => Err(Refusal::Missing),
            (Some(token), _) => self.verify(token),
        };
        checked.map(Some).inspect_err(|refusal| {
            self.refusals.with_label_values(&[refusal.reason()]).inc();
        })
    }

    /// Logs `refusal` of a request from `peer`, unless one was logged in the
    /// last [`REFUSAL_LOG_EVERY`].
    pub fn log_refusal(&self, refusal: &Refusal, peer: Option<SocketAddr>) {
        let mut logged = self.refusal_logged.lock().unwrap_or_else(|e| e.into_inner());
        if logged.is_some_and(|at| at.elapsed() < REFUSAL_LOG_EVERY) {
            return;
        }
        *logged = Some(Instant::now());
        let peer = peer.map_or("an unknown address".to_string(), |p| p.to_string());
        tracing::warn!(reason = refusal.reason(), %peer, "a report or pace ask from {peer} was refused: {refusal}; every refusal is counted in stormguard_token_refusals_total, and one is logged at most every 10s");
    }

    /// Verifies one token.
    pub fn verify(&self, token: &str) -> Result<Identity, Refusal> {
        let rules = self.rules.as_ref().ok_or(Refusal::Missing)?;
        let header = raw_header(token)?;
        let keys = self.keys.load();
        let keys = keys.as_ref().as_ref().ok_or(Refusal::Missing)?;
        if header.alg != "RS256" && header.alg != "ES256" {
            return Err(Refusal::Algorithm(header.alg));
        }
        let (algorithm, key) = keys
            .get(header.kid.as_deref())
            .ok_or_else(|| Refusal::UnknownKey(header.kid.clone().unwrap_or_default()))?;
        if format!("{algorithm:?}") != header.alg {
            return Err(Refusal::Algorithm(header.alg));
        }
        let mut validation = Validation::new(*algorithm);
        validation.leeway = CLOCK_SKEW_SECS;
        validation.set_audience(&[&rules.audience]);
        validation.set_required_spec_claims(&["exp", "aud", "sub"]);
        validation.validate_nbf = true;
        if let Some(issuer) = &rules.issuer {
            validation.set_issuer(&[issuer]);
        }
        let claims = jsonwebtoken::decode::<Claims>(token, key, &validation)
            .map_err(|e| refusal(e.into_kind(), rules))?
            .claims;
        service_account(&claims.sub)
    }
}

fn raw_header(token: &str) -> Result<RawHeader, Refusal> {
    let first = token
        .split('.')
        .next()
        .filter(|_| token.split('.').count() == 3)
        .ok_or_else(|| Refusal::Malformed("not three dot-separated parts".into()))?;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(first)
        .map_err(|e| Refusal::Malformed(format!("header: {e}")))?;
    serde_json::from_slice(&bytes).map_err(|e| Refusal::Malformed(format!("header: {e}")))
}

fn refusal(kind: ErrorKind, rules: &TokenRules) -> Refusal {
    match kind {
        ErrorKind::InvalidSignature => Refusal::Signature,
        ErrorKind::ExpiredSignature => Refusal::Expired,
        ErrorKind::ImmatureSignature => Refusal::NotYetValid,
        ErrorKind::InvalidAudience => Refusal::Audience(rules.audience.clone()),
        ErrorKind::InvalidIssuer => Refusal::Issuer(rules.issuer.clone().unwrap_or_default()),
        ErrorKind::InvalidAlgorithm | ErrorKind::InvalidAlgorithmName => Refusal::Algorithm("?".into()),
        ErrorKind::MissingRequiredClaim(claim) if claim == "aud" => Refusal::Audience(rules.audience.clone()),
        other => Refusal::Malformed(format!("{other:?}")),
    }
}

fn service_account(subject: &str) -> Result<Identity, Refusal> {
    let parts: Vec<&str> = subject.split(':').collect();
    match parts.as_slice() {
        ["system", "serviceaccount", namespace, name] if !namespace.is_empty() && !name.is_empty() => {
            Ok(Identity {
                namespace: namespace.to_string(),
                service_account: name.to_string(),
            })
        }
        _ => Err(Refusal::NotAServiceAccount(subject.to_string())),
    }
}

#[cfg(test)]
mod tests;
