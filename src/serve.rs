//! `stormguard serve`: load, then serve and watch until SIGTERM.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::{watch, Semaphore};

use crate::metrics::DaemonMetrics;
use crate::policy::Diagnostic;
use crate::reload::{load_file, Reloader, Trigger};
use crate::server::{self, AdminToken, AppState, Limits};
use crate::snapshot::{PolicySnapshot, PolicyStore};
use crate::watch::{FileWatch, WatchConfig};

/// Everything `serve` needs, from flags and environment.
#[derive(Debug, Clone)]
pub struct ServeConfig {
    /// The policy file.
    pub policy: PathBuf,
    /// Address to listen on.
    pub listen: String,
    /// The admin token, if any.
    pub admin_token: Option<String>,
    /// Request bounds.
    pub limits: Limits,
    /// Reload pacing.
    pub watch: WatchConfig,
    /// How long requests in flight may take to finish at shutdown.
    pub shutdown_grace: Duration,
}

/// Why `serve` could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The policy file is invalid or unreadable.
    #[error("the policy file is invalid:\n{}", .0.iter().map(|d| format!("error: {d}")).collect::<Vec<_>>().join("\n"))]
    Policy(Vec<Diagnostic>),
    /// The listen address cannot be bound.
    #[error("cannot listen on {0}: {1}")]
    Bind(String, std::io::Error),
    /// The admin token is empty.
    #[error("the admin token is empty; put a non-empty secret in STORMGUARD_ADMIN_TOKEN or the token file")]
    EmptyToken,
}

/// Loads the policy, binds, then serves until SIGTERM or Ctrl-C.
pub async fn run(config: ServeConfig) -> Result<(), ServeError> {
    let admin_token = match &config.admin_token {
        Some(secret) => Some(AdminToken::new(secret).ok_or(ServeError::EmptyToken)?),
        None => None,
    };
    let file_watch = FileWatch::arm(&config.policy);
    let (document, hash) =
        load_file(&config.policy, config.limits.max_policy_bytes).map_err(ServeError::Policy)?;
    let store = Arc::new(PolicyStore::new(PolicySnapshot::new(
        document,
        hash,
        config.policy.clone(),
    )));
    let metrics = Arc::new(DaemonMetrics::new());
    let reloader = Arc::new(Reloader::new(
        store.clone(),
        metrics.clone(),
        config.policy.clone(),
        config.limits.max_policy_bytes,
    ));
    let listener = TcpListener::bind(&config.listen)
        .await
        .map_err(|e| ServeError::Bind(config.listen.clone(), e))?;
    let (shutdown_tx, shutdown) = watch::channel(false);
    let state = AppState {
        store,
        reloader: reloader.clone(),
        metrics,
        admin_token,
        limits: config.limits,
        long_polls: Arc::new(Semaphore::new(config.limits.max_long_polls)),
        shutdown: shutdown.clone(),
    };
    tokio::spawn(file_watch.run(reloader.clone(), config.watch, shutdown.clone()));
    tokio::spawn(reload_on_sighup(reloader));
    let address = listener
        .local_addr()
        .map_or(config.listen.clone(), |a| a.to_string());
    tracing::info!(policy = %config.policy.display(), version = %hash.hex(), "serving on http://{address}");
    let stop = async move {
        termination().await;
        tracing::info!("shutting down: finishing requests in flight");
        shutdown_tx.send_replace(true);
    };
    server::serve(
        listener,
        server::router(state),
        config.limits.header_read_timeout,
        config.shutdown_grace,
        stop,
    )
    .await;
    Ok(())
}

async fn reload_on_sighup(reloader: Arc<Reloader>) {
    let Ok(mut hangups) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()) else {
        tracing::warn!("cannot listen for SIGHUP; reload with POST /admin/reload instead");
        return;
    };
    while hangups.recv().await.is_some() {
        reloader.reload(Trigger::Signal).await;
    }
}

/// Resolves on SIGTERM (Kubernetes) or SIGINT (Ctrl-C).
async fn termination() {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("SIGTERM handler can be installed");
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}

/// Resolves once `shutdown` turns true (or its sender is gone).
pub async fn shutting_down(shutdown: &mut watch::Receiver<bool>) {
    // The guard `wait_for` returns is dropped here, so callers stay `Send`.
    let _ = shutdown.wait_for(|down| *down).await;
}
