//! `stormguard serve`: load, then serve and watch until SIGTERM.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::{watch, Semaphore};

use crate::metrics::DaemonMetrics;
use crate::policy::Diagnostic;
use crate::reload::{load_file, Reloader, Trigger};
use crate::server::{self, AdminToken, Limits, Shared};
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
    /// Serving threads, one runtime each.
    pub workers: usize,
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
///
/// Serving runs thread-per-core, as nginx's workers do: each of `workers`
/// threads runs its own single-threaded runtime and accepts from the shared
/// listening socket, so a connection's requests never hop between cores. The
/// watcher and signal handling run on a small runtime of their own.
pub fn run(config: ServeConfig) -> Result<(), ServeError> {
    let admin_token = match &config.admin_token {
        Some(secret) => Some(AdminToken::new(secret).ok_or(ServeError::EmptyToken)?),
        None => None,
    };
    let file_watch = FileWatch::arm(&config.policy);
    let (document, hash) = load_file(&config.policy, config.limits.policy).map_err(ServeError::Policy)?;
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
        config.limits.policy,
    ));
    let bind_error = |e| ServeError::Bind(config.listen.clone(), e);
    let listener = std::net::TcpListener::bind(&config.listen).map_err(bind_error)?;
    listener.set_nonblocking(true).map_err(bind_error)?;
    let address = listener.local_addr().map_err(bind_error)?;
    let (shutdown_tx, shutdown) = watch::channel(false);
    let state = Arc::new(Shared {
        store,
        reloader: reloader.clone(),
        metrics,
        admin_token,
        limits: config.limits,
        long_polls: Arc::new(Semaphore::new(config.limits.max_long_polls)),
        shutdown: shutdown.clone(),
    });
    let app = server::router(state);
    let workers = (0..config.workers.max(1))
        .map(|i| {
            let listener = listener.try_clone().map_err(bind_error)?;
            let (app, shutdown, config) = (app.clone(), shutdown.clone(), config.clone());
            std::thread::Builder::new()
                .name(format!("stormguard-http-{i}"))
                .spawn(move || serve_worker(listener, app, shutdown, &config))
                .map_err(bind_error)
        })
        .collect::<Result<Vec<_>, _>>()?;
    drop(listener);

    let control = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("the control runtime starts");
    control.block_on(async {
        tokio::spawn(file_watch.run(reloader.clone(), config.watch, shutdown.clone()));
        tokio::spawn(reload_on_sighup(reloader));
        tracing::info!(
            policy = %config.policy.display(),
            version = %hash,
            workers = workers.len(),
            "serving on http://{address}"
        );
        termination().await;
        tracing::info!("shutting down: finishing requests in flight");
        shutdown_tx.send_replace(true);
    });
    for worker in workers {
        let _ = worker.join();
    }
    Ok(())
}

/// One serving thread: its own runtime, accepting from the shared socket.
fn serve_worker(
    listener: std::net::TcpListener,
    app: axum::Router,
    mut shutdown: watch::Receiver<bool>,
    config: &ServeConfig,
) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a worker runtime starts");
    runtime.block_on(async {
        let listener = TcpListener::from_std(listener).expect("the listener registers with the runtime");
        let stop = async move { shutting_down(&mut shutdown).await };
        server::serve(
            listener,
            app,
            config.limits.header_read_timeout,
            config.shutdown_grace,
            stop,
        )
        .await;
    });
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
