//! Reloading the policy file: read → parse → validate → swap. The served
//! snapshot changes only when a new file is proven good; a bad file leaves
//! the last good policy serving and its errors in the status and metrics.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::Serialize;

use crate::metrics::{DaemonMetrics, RELOAD_FAILURE, RELOAD_SUCCESS};
use crate::snapshot::{PolicySnapshot, PolicyStore};
use stormguard_toolkit::diff::{changes, ServiceChange};
use stormguard_toolkit::policy::{load_bytes, read_capped, ContentHash, Diagnostic, LoadLimits};

/// What asked for a reload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Trigger {
    /// The first load, before serving.
    Startup,
    /// A file-system event in the policy's directory.
    Watch,
    /// The periodic re-check, for file systems whose events do not arrive.
    Recheck,
    /// SIGHUP.
    Signal,
    /// `POST /admin/reload`.
    Admin,
}

impl Trigger {
    /// Automatic triggers do not retry bytes that already failed to load.
    fn is_automatic(self) -> bool {
        matches!(self, Trigger::Watch | Trigger::Recheck)
    }
}

/// The result of one reload request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReloadOutcome {
    /// A new policy is served.
    Applied(ContentHash),
    /// Nothing to do: the file is what is served, or bytes already found bad.
    Unchanged,
    /// The file is bad; the previous policy is still served.
    Failed(Vec<Diagnostic>),
}

/// The last reload attempt, for `/admin/status`.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LastReload {
    /// `success` or `failure`.
    pub result: &'static str,
    /// When it ran (RFC 3339).
    pub at: String,
    /// What asked for it.
    pub trigger: Trigger,
    /// Why it failed; empty on success.
    pub errors: Vec<Diagnostic>,
}

/// Reloads applied that `/admin/history` keeps, newest first.
pub const HISTORY: usize = 20;

/// A policy the daemon started serving, for `/admin/history`.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AppliedReload {
    /// When (RFC 3339).
    pub at: String,
    /// The served file's version (its hash).
    pub version: String,
    /// The file it came from.
    pub source: String,
    /// What asked for it.
    pub trigger: Trigger,
    /// What changed from the policy served before, service by service
    /// (`stormguard diff`'s, without forecasts); empty at start-up.
    pub services: Vec<ServiceChange>,
}

/// Reloads, one at a time, and keeps the status of the last one.
pub struct Reloader {
    store: Arc<PolicyStore>,
    metrics: Arc<DaemonMetrics>,
    path: PathBuf,
    limits: LoadLimits,
    /// Held for a whole reload so reloads never interleave.
    attempt: tokio::sync::Mutex<Attempt>,
    last: Mutex<LastReload>,
    /// The last [`HISTORY`] policies served, newest first.
    history: Mutex<VecDeque<AppliedReload>>,
}

/// The last input a reload finished with, and whether it loaded.
#[derive(Debug)]
struct Attempt {
    read: Read,
    ok: bool,
}

/// What a reload read: bytes (by hash), or why it could not.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Read {
    Bytes(ContentHash),
    Unreadable(String),
}

impl Reloader {
    /// A reloader for `path`, whose current content `store` already serves.
    pub fn new(
        store: Arc<PolicyStore>,
        metrics: Arc<DaemonMetrics>,
        path: PathBuf,
        limits: LoadLimits,
    ) -> Self {
        let current = store.current();
        let hash = current.hash;
        metrics.policy_served(&hash);
        metrics.reload_attempted(true, unix_now());
        let started = AppliedReload {
            at: rfc3339(current.loaded_at),
            version: hash.to_string(),
            source: current.source.display().to_string(),
            trigger: Trigger::Startup,
            services: Vec::new(),
        };
        Self {
            store,
            metrics,
            path,
            limits,
            attempt: tokio::sync::Mutex::new(Attempt {
                read: Read::Bytes(hash),
                ok: true,
            }),
            last: Mutex::new(LastReload {
                result: RELOAD_SUCCESS,
                at: rfc3339(SystemTime::now()),
                trigger: Trigger::Startup,
                errors: Vec::new(),
            }),
            history: Mutex::new(VecDeque::from([started])),
        }
    }

    /// The last [`HISTORY`] policies served, newest first.
    pub fn history(&self) -> Vec<AppliedReload> {
        self.history
            .lock()
            .expect("history lock")
            .iter()
            .cloned()
            .collect()
    }

    /// The policy file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The last reload attempt.
    pub fn last(&self) -> LastReload {
        self.last.lock().expect("status lock").clone()
    }

    /// Reloads the file if it changed; see [`ReloadOutcome`].
    ///
    /// The attempt is recorded only once it has an outcome, so a reload
    /// abandoned half-way (its caller went away) is simply tried again.
    pub async fn reload(&self, trigger: Trigger) -> ReloadOutcome {
        let mut attempt = self.attempt.lock().await;
        let (path, limits) = (self.path.clone(), self.limits);
        let file = self.path.display().to_string();
        // Bytes already served (or, for automatic triggers, already refused)
        // are recognised by their hash, before any parsing or building.
        let known = match attempt.read {
            Read::Bytes(hash) if attempt.ok || trigger.is_automatic() => Some(hash),
            _ => None,
        };
        // A panic while loading is a bug, but it must cost one failed reload,
        // not the watcher: the last good policy keeps serving.
        let loaded = tokio::task::spawn_blocking(move || prepare(&path, limits, known))
            .await
            .unwrap_or_else(|e| {
                Prepared::Unreadable(Diagnostic::file(
                    &file,
                    format!("internal error while loading the policy file ({e}); please report it"),
                ))
            });
        let (read, result) = match loaded {
            Prepared::Known => return ReloadOutcome::Unchanged,
            Prepared::Unreadable(diagnostic) => (
                Read::Unreadable(diagnostic.message.clone()),
                Err(vec![diagnostic]),
            ),
            Prepared::Loaded(hash, result) => (Read::Bytes(hash), result),
        };
        let nothing_new = read == attempt.read && (attempt.ok || trigger.is_automatic());
        if nothing_new {
            return ReloadOutcome::Unchanged;
        }
        let outcome = match result {
            Ok(snapshot) => self.apply(trigger, *snapshot),
            Err(diagnostics) => self.failed(trigger, diagnostics),
        };
        *attempt = Attempt {
            ok: matches!(outcome, ReloadOutcome::Applied(_)),
            read,
        };
        outcome
    }

    fn apply(&self, trigger: Trigger, snapshot: PolicySnapshot) -> ReloadOutcome {
        let hash = snapshot.hash;
        let served = self.store.current();
        if hash != served.hash {
            let applied = AppliedReload {
                at: rfc3339(snapshot.loaded_at),
                version: hash.to_string(),
                source: snapshot.source.display().to_string(),
                trigger,
                services: changes(&served.document, &snapshot.document),
            };
            self.store.swap(snapshot);
            let mut history = self.history.lock().expect("history lock");
            history.push_front(applied);
            history.truncate(HISTORY);
        }
        self.metrics.policy_served(&hash);
        self.record(trigger, Vec::new());
        tracing::info!(?trigger, version = %hash, "policy reloaded");
        ReloadOutcome::Applied(hash)
    }

    fn failed(&self, trigger: Trigger, errors: Vec<Diagnostic>) -> ReloadOutcome {
        for error in &errors {
            tracing::warn!(
                ?trigger,
                "policy reload failed, still serving the last good policy: {error}"
            );
        }
        self.record(trigger, errors.clone());
        ReloadOutcome::Failed(errors)
    }

    fn record(&self, trigger: Trigger, errors: Vec<Diagnostic>) {
        let success = errors.is_empty();
        self.metrics.reload_attempted(success, unix_now());
        *self.last.lock().expect("status lock") = LastReload {
            result: if success { RELOAD_SUCCESS } else { RELOAD_FAILURE },
            at: rfc3339(SystemTime::now()),
            trigger,
            errors,
        };
    }
}

/// A reload's blocking part: read, parse, validate, and prepare every body.
enum Prepared {
    /// The bytes hash to the known version: nothing was parsed.
    Known,
    Unreadable(Diagnostic),
    Loaded(ContentHash, Result<Box<PolicySnapshot>, Vec<Diagnostic>>),
}

fn prepare(path: &Path, limits: LoadLimits, known: Option<ContentHash>) -> Prepared {
    let bytes = match read_capped(path, limits.max_bytes) {
        Ok(bytes) => bytes,
        Err(diagnostic) => return Prepared::Unreadable(diagnostic),
    };
    let hash = ContentHash::of(&bytes);
    if known == Some(hash) {
        return Prepared::Known;
    }
    let snapshot = load_bytes(&path.display().to_string(), &bytes, limits).and_then(|document| {
        PolicySnapshot::new(document, hash, path.to_path_buf())
            .map(Box::new)
            .map_err(|invalid| vec![invalid])
    });
    Prepared::Loaded(hash, snapshot)
}

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs_f64()
}

/// A time as RFC 3339 with milliseconds, for JSON.
pub fn rfc3339(time: SystemTime) -> String {
    humantime::format_rfc3339_millis(time).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::future::Future;
    use stormguard_toolkit::policy::load_file;

    struct Fixture {
        dir: tempfile::TempDir,
        reloader: Reloader,
        store: Arc<PolicyStore>,
        registry: crate::metrics::Registry,
    }

    fn fixture(text: &str) -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("policy.yaml");
        std::fs::write(&path, text).unwrap();
        let (document, hash) = load_file(&path, LoadLimits::default()).unwrap();
        let store = Arc::new(PolicyStore::new(
            PolicySnapshot::new(document, hash, path.clone()).unwrap(),
        ));
        let registry = crate::metrics::Registry::new();
        let metrics = Arc::new(DaemonMetrics::new(registry.families()));
        let reloader = Reloader::new(store.clone(), metrics.clone(), path, LoadLimits::default());
        Fixture {
            dir,
            reloader,
            store,
            registry,
        }
    }

    impl Fixture {
        fn write(&self, text: &str) {
            std::fs::write(self.dir.path().join("policy.yaml"), text).unwrap();
        }
        fn max_retries(&self) -> u32 {
            self.store.current().document.defaults_policy().max_retries
        }
        fn exposition(&self) -> String {
            self.registry.text(tokio::time::Instant::now())
        }
    }

    #[tokio::test]
    async fn the_history_keeps_the_last_twenty_policies_served_newest_first() {
        let f = fixture("defaults: {maxRetries: 0}\n");
        for retries in 1..=(HISTORY as u32 + 4) {
            f.write(&format!("defaults: {{maxRetries: {retries}}}\n"));
            f.reloader.reload(Trigger::Admin).await;
        }
        let history = f.reloader.history();
        assert_eq!(history.len(), HISTORY);
        let changed = |i: usize| history[i].services[0].keys[0].new.clone();
        assert_eq!(changed(0), "24", "newest first");
        assert_eq!(
            changed(HISTORY - 1),
            "5",
            "the oldest kept; the start-up entry is gone"
        );
        assert!(history.iter().all(|h| h.services.len() == 1));
    }

    #[tokio::test]
    async fn good_edit_is_applied_and_bad_edit_keeps_the_last_good() {
        let f = fixture("defaults: {maxRetries: 1}\n");
        f.write("defaults: {maxRetries: 2}\n");
        assert!(matches!(
            f.reloader.reload(Trigger::Watch).await,
            ReloadOutcome::Applied(_)
        ));
        assert_eq!(f.max_retries(), 2);

        f.write("defaults: {maxRetries: many}\n");
        let ReloadOutcome::Failed(errors) = f.reloader.reload(Trigger::Watch).await else {
            panic!("a bad file must fail")
        };
        assert_eq!(errors[0].path.as_deref(), Some("defaults.maxRetries"));
        assert_eq!(f.max_retries(), 2, "the last good policy is still served");
        assert_eq!(f.reloader.last().result, "failure");
        assert!(f.exposition().contains("stormguard_policy_last_reload_success 0"));

        f.write("defaults: {maxRetries: 2}\n");
        assert!(matches!(
            f.reloader.reload(Trigger::Watch).await,
            ReloadOutcome::Applied(_)
        ));
        assert!(
            f.exposition().contains("stormguard_policy_last_reload_success 1"),
            "back to the served file"
        );
    }

    #[tokio::test]
    async fn a_new_good_file_after_a_bad_one_is_served() {
        let f = fixture("defaults: {maxRetries: 1}\n");
        f.write("defaults: {maxRetries: [}\n");
        assert!(matches!(
            f.reloader.reload(Trigger::Watch).await,
            ReloadOutcome::Failed(_)
        ));
        f.write("defaults: {maxRetries: 4}\n");
        assert!(matches!(
            f.reloader.reload(Trigger::Recheck).await,
            ReloadOutcome::Applied(_)
        ));
        assert_eq!(f.max_retries(), 4);
        assert_eq!(f.reloader.last().result, "success");
        assert_eq!(f.reloader.reload(Trigger::Admin).await, ReloadOutcome::Unchanged);
    }

    #[test]
    fn an_abandoned_reload_is_tried_again() {
        // One blocking thread, held busy, so the load is certainly still
        // queued when its caller goes away (e.g. an admin client disconnects).
        let runtime = tokio::runtime::Builder::new_current_thread()
            .max_blocking_threads(1)
            .build()
            .unwrap();
        runtime.block_on(async {
            let f = fixture("defaults: {maxRetries: 1}\n");
            f.write("defaults: {maxRetries: 2}\n");
            let (release, held) = std::sync::mpsc::channel::<()>();
            let blocker = tokio::task::spawn_blocking(move || held.recv());
            let mut abandoned = Box::pin(f.reloader.reload(Trigger::Admin));
            let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
            assert!(abandoned.as_mut().poll(&mut cx).is_pending());
            drop(abandoned);
            release.send(()).unwrap();
            blocker.await.unwrap().unwrap();
            assert!(matches!(
                f.reloader.reload(Trigger::Watch).await,
                ReloadOutcome::Applied(_)
            ));
            assert_eq!(f.max_retries(), 2);
        });
    }

    #[tokio::test]
    async fn same_bytes_are_not_reloaded_twice_by_automatic_triggers() {
        let f = fixture("defaults: {}\n");
        assert_eq!(
            f.reloader.reload(Trigger::Recheck).await,
            ReloadOutcome::Unchanged
        );
        f.write("defaults: [\n");
        assert!(matches!(
            f.reloader.reload(Trigger::Watch).await,
            ReloadOutcome::Failed(_)
        ));
        assert_eq!(
            f.reloader.reload(Trigger::Recheck).await,
            ReloadOutcome::Unchanged
        );
        assert!(f
            .exposition()
            .contains("stormguard_policy_reloads_total{result=\"failure\"} 1"));
        assert!(
            matches!(f.reloader.reload(Trigger::Admin).await, ReloadOutcome::Failed(_)),
            "an operator's explicit reload shows the errors again"
        );
    }

    #[tokio::test]
    async fn a_missing_file_fails_once_and_keeps_serving() {
        let f = fixture("defaults: {maxRetries: 5}\n");
        std::fs::remove_file(f.dir.path().join("policy.yaml")).unwrap();
        let ReloadOutcome::Failed(errors) = f.reloader.reload(Trigger::Watch).await else {
            panic!("a missing file must fail")
        };
        assert!(errors[0].message.starts_with("cannot open"), "{errors:?}");
        assert_eq!(
            f.reloader.reload(Trigger::Recheck).await,
            ReloadOutcome::Unchanged
        );
        assert_eq!(f.max_retries(), 5);
    }
}
