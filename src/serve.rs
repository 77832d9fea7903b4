//! `stormguard serve`: load, then serve and watch until SIGTERM.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use stormguard_core::policy::GoDuration;
use stormguard_core::shed::{LoadShedLayer, ShedConfigError};
use tokio::net::TcpListener;
use tokio::signal::unix::{signal, Signal, SignalKind};
use tokio::sync::watch;

use crate::identity::{Bindings, Callers, KeysError, Mode, TokenRules};
use crate::metrics::{DaemonMetrics, Registry};
use crate::pace_store::{Access, PaceStore, StoreError};
use crate::reload::{Reloader, Trigger};
use crate::reports::{BatchLog, ClientMetrics};
use crate::server::{self, AdminAuth, AdminToken, Limits, Routes, Shared, TokenFile, TokenFileError};
use crate::snapshot::{PolicySnapshot, PolicyStore};
use crate::supervise::{supervise, WatcherHealth};
use crate::tls::{Tls, TlsError, TlsFiles};
use crate::watch::{FileWatch, WatchConfig};
use stormguard_toolkit::policy::load_file;
use stormguard_toolkit::policy::Diagnostic;

/// Where the admin token comes from.
#[derive(Debug, Clone)]
pub enum AdminSecret {
    /// None: the admin API answers 403.
    None,
    /// The token itself.
    Token(String),
    /// A file holding it, read again when it changes.
    File(PathBuf),
}

/// Everything `serve` needs, from flags and environment.
#[derive(Debug, Clone)]
pub struct ServeConfig {
    /// The policy file.
    pub policy: PathBuf,
    /// Address to listen on.
    pub listen: String,
    /// The admin token, if any.
    pub admin_token: AdminSecret,
    /// A listener of its own for the admin API (then not served on `listen`).
    pub admin_listen: Option<String>,
    /// Request bounds.
    pub limits: Limits,
    /// Reload pacing.
    pub watch: WatchConfig,
    /// How long to keep serving after SIGTERM, with /readyz failing, so that
    /// load balancers stop sending before the listener closes.
    pub shutdown_delay: Duration,
    /// How long requests in flight may take to finish at shutdown.
    pub shutdown_grace: Duration,
    /// Serving threads, one runtime each.
    pub workers: usize,
    /// Whether reports and pace asks must carry a service-account token.
    pub tokens: Mode,
    /// What a token must be, and the issuer's keys; needed unless tokens are off.
    pub token_rules: Option<TokenRules>,
    /// HTTPS on both listeners, from these files; plain HTTP if none.
    pub tls: Option<TlsFiles>,
    /// The store the replicas share their pace through, if any.
    pub pace_store: Option<PaceStoreConfig>,
}

/// Where the pace store is, and its password.
#[derive(Debug, Clone)]
pub struct PaceStoreConfig {
    /// `redis://[user:password@]host:port[/db]`.
    pub url: String,
    /// A file holding the password; else `STORMGUARD_PACE_STORE_PASSWORD`,
    /// else the URL's.
    pub password_file: Option<PathBuf>,
    /// With `rediss://`: the PEM file of the CA to trust instead of the system's.
    pub ca: Option<PathBuf>,
}

/// Why `serve` could not start, or stopped.
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
    /// `--max-long-polls` is unusable.
    #[error("--max-long-polls: {0}")]
    LongPolls(ShedConfigError),
    /// `--max-validations` is unusable.
    #[error("--max-validations: {0}")]
    Validations(ShedConfigError),
    /// The admin token file cannot be read, or is empty.
    #[error(transparent)]
    TokenFile(#[from] TokenFileError),
    /// The runtime, a signal handler or a serving thread could not be started.
    #[error("cannot start {0}: {1}")]
    Start(&'static str, std::io::Error),
    /// Checking tokens was asked for without the issuer's keys.
    #[error("--tokens: checking tokens needs the issuer's keys: give --token-keys")]
    NoTokenKeys,
    /// The issuer's keys cannot be used.
    #[error("--tokens: {0}")]
    TokenKeys(#[from] KeysError),
    /// The pace store's address, password or CA cannot be used.
    #[error(transparent)]
    PaceStore(#[from] PaceStoreSetupError),
    /// The TLS files cannot be used.
    #[error("--tls-cert, --tls-key, --tls-client-ca: {0}")]
    Tls(#[from] TlsError),
    /// A serving thread ended while the daemon was running.
    #[error("serving thread {0} stopped unexpectedly; the daemon shut down rather than serve with fewer")]
    WorkerDied(usize),
}

/// Why the pace store's settings cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum PaceStoreSetupError {
    /// The password file cannot be read.
    #[error("--pace-store-password-file {}: {source}", path.display())]
    PasswordFile {
        /// The file.
        path: PathBuf,
        /// What reading it said.
        source: std::io::Error,
    },
    /// The password (from its file or the environment) is empty.
    #[error("the pace store's password is empty; put it in the file or STORMGUARD_PACE_STORE_PASSWORD")]
    EmptyPassword,
    /// A CA was given for an address without TLS.
    #[error("--pace-store-ca {}: the pace store's address is not rediss://, so there is no TLS to verify", .0.display())]
    CaWithoutTls(PathBuf),
    /// The CA file holds no usable certificate.
    #[error("--pace-store-ca {0}")]
    Ca(TlsError),
    /// The CA file cannot be read.
    #[error("--pace-store-ca {}: {source}", path.display())]
    CaUnreadable {
        /// The file.
        path: PathBuf,
        /// What reading it said.
        source: std::io::Error,
    },
    /// The address is not one of Redis's.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// The pace store `config` names, under this replica's name: its pod's
/// (`HOSTNAME`) and a random part, unique however replicas are named.
fn pace_store(config: &PaceStoreConfig, registry: &Registry) -> Result<Arc<PaceStore>, PaceStoreSetupError> {
    let password = match &config.password_file {
        Some(path) => Some(
            std::fs::read_to_string(path)
                .map_err(|source| PaceStoreSetupError::PasswordFile {
                    path: path.clone(),
                    source,
                })?
                .trim_end_matches(['\n', '\r'])
                .to_string(),
        ),
        None => std::env::var("STORMGUARD_PACE_STORE_PASSWORD").ok(),
    };
    if password.as_deref() == Some("") {
        return Err(PaceStoreSetupError::EmptyPassword);
    }
    let ca = config
        .ca
        .as_deref()
        .map(|path| pace_store_ca(&config.url, path))
        .transpose()?;
    let host = std::env::var("HOSTNAME").unwrap_or_else(|_| "stormguard".into());
    let replica = format!("{host}-{:08x}", rand::random::<u32>());
    let access = Access { password, ca };
    Ok(Arc::new(PaceStore::new(&config.url, access, replica, registry)?))
}

/// The CA file at `path` for the store at `url`: PEM certificates, for a
/// `rediss://` address only.
fn pace_store_ca(url: &str, path: &std::path::Path) -> Result<Vec<u8>, PaceStoreSetupError> {
    if !url.starts_with("rediss://") {
        return Err(PaceStoreSetupError::CaWithoutTls(path.to_path_buf()));
    }
    crate::tls::certificates(path).map_err(PaceStoreSetupError::Ca)?;
    std::fs::read(path).map_err(|source| PaceStoreSetupError::CaUnreadable {
        path: path.to_path_buf(),
        source,
    })
}

/// The token checks `config` asks for, with the issuer's keys loaded.
fn callers(config: &ServeConfig) -> Result<Callers, ServeError> {
    match (config.tokens, &config.token_rules) {
        (Mode::Off, _) => Ok(Callers::off()),
        (mode, Some(rules)) => Ok(Callers::new(mode, rules.clone())?),
        (_, None) => Err(ServeError::NoTokenKeys),
    }
}

/// Loads the policy, binds, then serves until SIGTERM or Ctrl-C.
///
/// Serving runs thread-per-core, as nginx's workers do: each of `workers`
/// threads runs its own single-threaded runtime and accepts from the shared
/// listening socket, so a connection's requests never hop between cores. The
/// watcher and signal handling run on a small runtime of their own.
pub fn run(config: ServeConfig) -> Result<(), ServeError> {
    // Before any thread starts: reading the handed-over sockets clears
    // LISTEN_FDS from the environment.
    let mut sockets = crate::listen::Sockets::from_env();
    let control = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| ServeError::Start("the control runtime", e))?;
    // First of all: SIGHUP's default action would end a daemon still starting.
    let signals = control
        .block_on(async { Signals::install() })
        .map_err(|e| ServeError::Start("signal handlers", e))?;
    raise_open_file_limit();
    let admin = match &config.admin_token {
        AdminSecret::None => AdminAuth::Disabled,
        AdminSecret::Token(secret) => {
            AdminAuth::Fixed(AdminToken::new(secret).ok_or(ServeError::EmptyToken)?)
        }
        AdminSecret::File(path) => AdminAuth::File(TokenFile::open(path.clone())?),
    };
    let file_watch = FileWatch::arm(&config.policy);
    let (document, hash) = load_file(&config.policy, config.limits.policy).map_err(ServeError::Policy)?;
    if config.tokens == Mode::Off && !document.reporters.is_empty() {
        tracing::warn!("the policy file lists reporters, but --tokens is off: nobody's identity is checked, so the lists are not enforced");
    }
    let snapshot = PolicySnapshot::new(document, hash, config.policy.clone())
        .map_err(|invalid| ServeError::Policy(vec![invalid]))?;
    let store = Arc::new(PolicyStore::new(snapshot));
    let registry = Arc::new(Registry::new());
    let metrics = Arc::new(DaemonMetrics::new(registry.families()));
    let reloader = Arc::new(Reloader::new(
        store.clone(),
        metrics.clone(),
        config.policy.clone(),
        config.limits.policy,
    ));
    let bind_error = |e| ServeError::Bind(config.listen.clone(), e);
    let listener = sockets.listener(0, &config.listen).map_err(bind_error)?;
    let address = listener.local_addr().map_err(bind_error)?;
    let (shutdown_tx, shutdown) = watch::channel(false);
    let reports = ClientMetrics::new(config.limits.reports, &registry);
    let long_polls = LoadShedLayer::new(
        config.limits.max_long_polls,
        Duration::from_secs(1)..=Duration::from_secs(5),
    )
    .map_err(ServeError::LongPolls)?;
    let validations = LoadShedLayer::new(
        config.limits.max_validations,
        Duration::from_secs(1)..=Duration::from_secs(5),
    )
    .map_err(ServeError::Validations)?;
    let watcher_health = Arc::new(WatcherHealth::default());
    let callers = callers(&config)?;
    callers
        .register(registry.families())
        .expect("the token families are registered once");
    let tls = config.tls.clone().map(Tls::load).transpose()?.map(Arc::new);
    if let Some(tls) = &tls {
        tls.register(registry.families())
            .expect("the TLS families are registered once");
    }
    let bindings = Bindings::new(
        config.limits.reports.instance_ttl,
        config.limits.reports.max_instances,
    );
    let pace_store = config
        .pace_store
        .as_ref()
        .map(|store| pace_store(store, &registry))
        .transpose()?;
    let fleet = match &pace_store {
        Some(_) => crate::fleet::Fleet::sharing(&registry),
        None => crate::fleet::Fleet::new(&registry),
    };
    let state_metrics = metrics.clone();
    let state = Arc::new(Shared {
        store,
        reloader: reloader.clone(),
        metrics,
        batches: BatchLog::new(
            config.limits.reports.batch_window,
            config.limits.reports.max_instances,
        ),
        reports,
        fleet: fleet.clone(),
        budgets: crate::fleet::budgets::FleetBudgets::new(pace_store.is_some(), &registry),
        registry,
        admin,
        limits: config.limits,
        long_polls,
        validations,
        shutdown: shutdown.clone(),
        watcher: watcher_health.clone(),
        callers,
        bindings,
        pace_store: pace_store.clone(),
    });
    let (app, admin_app) = match &config.admin_listen {
        None => (server::router(state, Routes::All), None),
        Some(_) => (
            server::router(state.clone(), Routes::Public),
            Some(server::router(state, Routes::Admin)),
        ),
    };
    let admin_listener = match &config.admin_listen {
        None => None,
        Some(address) => {
            let bind_error = |e| ServeError::Bind(address.clone(), e);
            Some(sockets.listener(1, address).map_err(bind_error)?)
        }
    };
    let admin_address = admin_listener.as_ref().and_then(|l| l.local_addr().ok());
    let (exited_tx, mut exited) = tokio::sync::mpsc::unbounded_channel();
    let workers = (0..config.workers.max(1))
        .map(|i| {
            let listener = listener.try_clone().map_err(bind_error)?;
            let (app, shutdown, config) = (app.clone(), shutdown.clone(), config.clone());
            let (tls, notice) = (tls.clone(), ExitNotice(i, exited_tx.clone()));
            std::thread::Builder::new()
                .name(format!("stormguard-http-{i}"))
                .spawn(move || {
                    let _notice = notice;
                    serve_worker(listener, app, tls, shutdown, &config);
                })
                .map_err(|e| ServeError::Start("a serving thread", e))
        })
        .collect::<Result<Vec<_>, _>>()?;
    drop(listener);
    let mut workers = workers;
    if let (Some(listener), Some(app)) = (admin_listener, admin_app) {
        let (shutdown, config) = (shutdown.clone(), config.clone());
        let notice = ExitNotice(workers.len(), exited_tx.clone());
        let tls = tls.clone();
        let thread = std::thread::Builder::new()
            .name("stormguard-admin".into())
            .spawn(move || {
                let _notice = notice;
                serve_worker(listener, app, tls, shutdown, &config);
            })
            .map_err(|e| ServeError::Start("the admin listener's thread", e))?;
        workers.push(thread);
    }

    let ended = control.block_on(async {
        tokio::spawn(supervise(
            watcher(file_watch, reloader.clone(), &config, shutdown.clone()),
            state_metrics,
            watcher_health,
            shutdown.clone(),
        ));
        tokio::spawn(reload_on_sighup(reloader, signals.hangup));
        let sharing = pace_store.as_ref().map(|store| {
            tracing::info!(
                "sharing the pace of paced dependencies through {} as {}",
                store.address(),
                store.replica()
            );
            tokio::spawn(crate::fleet::sharing::listen(fleet.clone(), store.clone()));
            tokio::spawn(crate::fleet::sharing::share(
                fleet.clone(),
                store.clone(),
                shutdown.clone(),
            ))
        });
        let scheme = if tls.is_some() { "https" } else { "http" };
        if let Some(admin) = admin_address {
            tracing::info!("admin API on {scheme}://{admin}, and only there");
        }
        tracing::info!(
            policy = %config.policy.display(),
            version = %hash,
            workers = config.workers.max(1),
            "serving on {scheme}://{address}"
        );
        let ended = tokio::select! {
            () = termination(signals.terminate) => Ok(()),
            Some(worker) = exited.recv() => Err(ServeError::WorkerDied(worker)),
        };
        tracing::info!(
            delay = %GoDuration(config.shutdown_delay),
            "shutting down: /readyz fails from now, requests are served for the shutdown delay, then finished"
        );
        shutdown_tx.send_replace(true);
        if let (Some(sharing), Some(store)) = (sharing, &pace_store) {
            // Its last exchange first: one that reached the store after the
            // release would take the pace again for a lease.
            let _ = sharing.await;
            crate::fleet::sharing::release(&fleet, store).await;
        }
        ended
    });
    for worker in workers {
        let _ = worker.join();
    }
    ended
}

/// What the supervisor starts: the watch armed before the first load, then
/// after a failure a new one, preceded by a reload for what changed meanwhile.
fn watcher(
    armed: FileWatch,
    reloader: Arc<Reloader>,
    config: &ServeConfig,
    shutdown: watch::Receiver<bool>,
) -> impl FnMut(bool) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>> {
    let mut armed = Some(armed);
    let (path, pacing) = (config.policy.clone(), config.watch);
    move |restarted| {
        let watch = armed.take().unwrap_or_else(|| FileWatch::arm(&path));
        let (reloader, shutdown) = (reloader.clone(), shutdown.clone());
        Box::pin(async move {
            if restarted {
                reloader.reload(Trigger::Recheck).await;
            }
            watch.run(reloader, pacing, shutdown).await;
        })
    }
}

/// One serving thread: its own runtime, accepting from the shared socket
/// until the shutdown delay after shutdown began.
fn serve_worker(
    listener: std::net::TcpListener,
    app: axum::Router,
    tls: Option<Arc<Tls>>,
    mut shutdown: watch::Receiver<bool>,
    config: &ServeConfig,
) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a worker runtime starts");
    runtime.block_on(async {
        let listener = TcpListener::from_std(listener).expect("the listener registers with the runtime");
        let delay = config.shutdown_delay;
        let stop = async move {
            crate::shutdown::shutting_down(&mut shutdown).await;
            tokio::time::sleep(delay).await;
        };
        server::serve(listener, app, tls, &config.limits, config.shutdown_grace, stop).await;
    });
}

/// Tells the control thread that serving thread `.0` ended, however it ended.
struct ExitNotice(usize, tokio::sync::mpsc::UnboundedSender<usize>);

impl Drop for ExitNotice {
    fn drop(&mut self) {
        let _ = self.1.send(self.0);
    }
}

/// The signals the daemon acts on, installed before anything else happens.
struct Signals {
    hangup: Signal,
    terminate: Signal,
}

impl Signals {
    fn install() -> std::io::Result<Self> {
        Ok(Self {
            hangup: signal(SignalKind::hangup())?,
            terminate: signal(SignalKind::terminate())?,
        })
    }
}

/// Each long-poll holds a connection: raise the soft open-file limit to the
/// hard one, so that --max-long-polls, not EMFILE, is what bounds them.
fn raise_open_file_limit() {
    match rlimit::increase_nofile_limit(u64::MAX) {
        Ok(limit) => tracing::debug!(limit, "open-file limit"),
        Err(e) => tracing::warn!("cannot raise the open-file limit: {e}"),
    }
}

async fn reload_on_sighup(reloader: Arc<Reloader>, mut hangups: Signal) {
    while hangups.recv().await.is_some() {
        reloader.reload(Trigger::Signal).await;
    }
}

/// Resolves on SIGTERM (Kubernetes) or SIGINT (Ctrl-C).
async fn termination(mut terminate: Signal) {
    tokio::select! {
        _ = terminate.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}
