//! The HTTP server: routes, shared state, and the connection loop.

mod admin;
mod body;
mod caller;
mod error;
mod front;
mod host;
mod pace;
mod policies;
mod render;
mod reports;
mod track;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Request, State};
use axum::handler::Handler;
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware;
use axum::response::IntoResponse;
use axum::routing::{get, post, MethodRouter};
use axum::{Json, Router};
use hyper_util::server::graceful::GracefulShutdown;
use serde_json::json;
use stormguard_core::shed::LoadShedLayer;
use tokio::net::TcpListener;
use tokio::sync::watch;

pub use admin::{AdminAuth, AdminToken, TokenFile, TokenFileError};
pub use error::ApiError;

use crate::fleet::Fleet;
use crate::fleet::FleetBudgets;
use crate::identity::{Bindings, Callers};
use crate::metrics::{DaemonMetrics, Registry};
use crate::pace_store::PaceStore;
use crate::reload::Reloader;
use crate::reports::{BatchLog, ClientMetrics, ReportLimits};
use crate::snapshot::PolicyStore;
use crate::supervise::WatcherHealth;
use crate::tls::Tls;
use stormguard_toolkit::policy::LoadLimits;
use track::TrackLayer;

/// Bounds on what a client can make the server do.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Largest request body.
    pub max_body_bytes: usize,
    /// Bounds on a policy file (and on the body of `/admin/validate`).
    pub policy: LoadLimits,
    /// Longest `?wait=` of a long-poll.
    pub max_wait: Duration,
    /// Long-polls waiting at once.
    pub max_long_polls: usize,
    /// `/admin/validate` runs at once.
    pub max_validations: usize,
    /// The cardinality guard's caps for client reports, and the instance TTL.
    pub reports: ReportLimits,
    /// Time a client has to send a request's headers.
    pub header_read_timeout: Duration,
    /// Largest request head (request line and headers) in bytes; past it, 431.
    pub max_header_bytes: usize,
    /// Time a client has to send a request's body, once its headers are in.
    pub body_read_timeout: Duration,
    /// Time a client may take none of an answer being written before its
    /// connection is closed.
    pub write_timeout: Duration,
}

/// What every handler shares; cloned per request, so one `Arc`.
pub type AppState = Arc<Shared>;

/// The fields of [`AppState`].
pub struct Shared {
    /// The served policy.
    pub store: Arc<PolicyStore>,
    /// Reloads on request.
    pub reloader: Arc<Reloader>,
    /// Every family `/metrics` exports.
    pub registry: Arc<Registry>,
    /// The daemon's own families.
    pub metrics: Arc<DaemonMetrics>,
    /// The families fed by client reports.
    pub reports: Arc<ClientMetrics>,
    /// Report batches counted lately, so that one sent again counts once.
    pub batches: BatchLog,
    /// The paced dependencies.
    pub fleet: Arc<Fleet>,
    /// The fleet-scoped retry budgets' floors, divided.
    pub budgets: Arc<FleetBudgets>,
    /// The admin bearer token, or none (the admin API answers 403).
    pub admin: AdminAuth,
    /// Request bounds.
    pub limits: Limits,
    /// Places for waiting long-polls: the project's own load shedder, so a
    /// refusal carries a jittered `Retry-After` and refusals are counted.
    pub long_polls: LoadShedLayer,
    /// Places for `/admin/validate` runs, which are CPU-heavy (forecasts).
    pub validations: LoadShedLayer,
    /// Turns true when the daemon starts shutting down.
    pub shutdown: watch::Receiver<bool>,
    /// Whether the policy file watcher runs.
    pub watcher: Arc<WatcherHealth>,
    /// Checks the service-account tokens of reports and pace asks.
    pub callers: Callers,
    /// Which service account owns which instance.
    pub bindings: Bindings,
    /// The store replicas share paces, instance bindings and counted
    /// batches through, if there is one.
    pub pace_store: Option<Arc<PaceStore>>,
}

/// The address a request's connection came from (a request extension), for
/// the logs of refused reports and pace asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Peer(pub std::net::SocketAddr);

/// The smallest `--max-header-bytes`: hyper's buffer cannot be smaller.
pub const MIN_HEADER_BYTES: usize = 8192;

/// Which routes a listener serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Routes {
    /// Everything, on one listener.
    All,
    /// Everything but the admin API (which has a listener of its own).
    Public,
    /// The admin API and `/healthz`, for `--admin-listen`.
    Admin,
}

/// The public routes' paths, in the order [`router`] gives them handlers.
/// `docs/openapi.yaml` documents each; a test keeps the two in step.
pub const PUBLIC_PATHS: [&str; 9] = [
    "/v1/policies",
    "/v1/policies/{service}",
    "/v1/reports",
    "/v1/pace",
    "/v1/render/{format}/{service}",
    "/healthz",
    "/readyz",
    "/metrics",
    "/openapi.yaml",
];

/// The admin API's paths, in the order [`router`] gives them handlers.
pub const ADMIN_PATHS: [&str; 4] = [
    "/admin/status",
    "/admin/history",
    "/admin/reload",
    "/admin/validate",
];

/// The API's contract, as `GET /openapi.yaml` serves it.
pub const OPENAPI: &str = include_str!("../../docs/openapi.yaml");

/// Every route, composed in one place. Each handler is wrapped in its own
/// metrics layer (on the handler itself, so a request crosses one boxed
/// service, not two); admin handlers check the token inside it, so 401s count too.
pub fn router(state: AppState, which: Routes) -> Router {
    let track = |path: &str| TrackLayer::new(state.metrics.clone(), path);
    let [all, one, reports, pace, render, health, ready, metrics, openapi_yaml] = PUBLIC_PATHS.map(track);
    let public: [MethodRouter<AppState>; 9] = [
        get(policies::all.layer(all)),
        get(policies::one.layer(one)),
        post(reports::receive.layer(reports)),
        post(pace::ask.layer(pace)),
        get(render::one.layer(render)),
        get(healthz.layer(health)),
        get(readyz.layer(ready)),
        get(metrics_text.layer(metrics)),
        get(openapi.layer(openapi_yaml)),
    ];
    let admin = middleware::from_fn_with_state(state.clone(), admin::require_token);
    let [status, history, reload, validate] = ADMIN_PATHS.map(track);
    let admin: [MethodRouter<AppState>; 4] = [
        get(admin::status.layer(admin.clone()).layer(status)),
        get(admin::history.layer(admin.clone()).layer(history)),
        post(admin::reload.layer(admin.clone()).layer(reload)),
        post(admin::validate.layer(admin).layer(validate)),
    ];
    let public = PUBLIC_PATHS.into_iter().zip(public);
    let admin = ADMIN_PATHS.into_iter().zip(admin);
    let routes: Vec<(&str, MethodRouter<AppState>)> = match which {
        Routes::All => public.into_iter().chain(admin).collect(),
        Routes::Public => public.into_iter().collect(),
        Routes::Admin => public
            .into_iter()
            .filter(|(path, _)| *path == "/healthz")
            .chain(admin)
            .collect(),
    };
    let unmatched = track("unmatched");
    routes
        .into_iter()
        .fold(Router::new(), |router, (path, route)| router.route(path, route))
        .fallback(not_found.layer(unmatched.clone()))
        .method_not_allowed_fallback(method_not_allowed.layer(unmatched))
        .with_state(state)
}

async fn not_found(request: Request) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        format!("no route for {} {}", request.method(), request.uri().path()),
    )
}

async fn method_not_allowed(request: Request) -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        format!("{} is not allowed on {}", request.method(), request.uri().path()),
    )
}

/// This API's OpenAPI document.
async fn openapi() -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "application/yaml")], OPENAPI)
}

/// Liveness: the process answers.
async fn healthz() -> Json<serde_json::Value> {
    Json(json!({"status": "ok"}))
}

/// Readiness: a valid policy is served, it follows its file (the watcher
/// runs), and the daemon is not shutting down.
async fn readyz(State(state): State<AppState>) -> Result<Json<serde_json::Value>, ApiError> {
    if *state.shutdown.borrow() {
        return Err(ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "shutting down"));
    }
    if !state.watcher.is_up() {
        return Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "the policy file watcher stopped and is being restarted; policy changes are not picked up meanwhile",
        ));
    }
    let version = state.store.current().hash.to_string();
    Ok(Json(json!({"status": "ready", "version": version})))
}

async fn metrics_text(State(state): State<AppState>) -> impl IntoResponse {
    let body = state.registry.encode(tokio::time::Instant::now());
    let content_type = HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8");
    ([(header::CONTENT_TYPE, content_type)], body)
}

/// Serves `app` on `listener` until `shutdown` resolves, then lets requests
/// in flight finish for up to `grace`.
///
/// Each connection, plain or (with `tls`) once its handshake completes
/// within the header read timeout, starts in the [`front`](front) (simple
/// requests, reports and long-polls among them, in a few KiB) and moves to
/// hyper at its first other request. Every wait on a client is timed:
/// without that, a client that never finishes its headers, or never reads
/// its answer, holds a connection forever (slowloris).
pub async fn serve(
    listener: TcpListener,
    app: Router,
    tls: Option<Arc<Tls>>,
    limits: &Limits,
    grace: Duration,
    shutdown: impl Future<Output = ()>,
) {
    let front = Arc::new(front::Front::new(app, limits));
    let graceful = GracefulShutdown::new();
    let (closing_tx, closing) = watch::channel(false);
    tokio::pin!(shutdown);
    let mut last_accept_warning: Option<std::time::Instant> = None;
    loop {
        let (stream, address) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(connection) => connection,
                Err(e) => {
                    // Out of file descriptors, say: back off instead of spinning,
                    // and say so now and then rather than every time.
                    if last_accept_warning.is_none_or(|at| at.elapsed() > Duration::from_secs(10)) {
                        tracing::warn!("accept failed: {e}");
                        last_accept_warning = Some(std::time::Instant::now());
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let _ = stream.set_nodelay(true);
        match &tls {
            Some(tls) => tokio::spawn(front::tls_connection(
                front.clone(),
                stream,
                Peer(address),
                tls.clone(),
                graceful.watcher(),
                closing.clone(),
            )),
            None => tokio::spawn(front::connection(
                front.clone(),
                stream,
                Peer(address),
                graceful.watcher(),
                closing.clone(),
            )),
        };
    }
    drop(listener);
    closing_tx.send_replace(true);
    if tokio::time::timeout(grace, graceful.shutdown()).await.is_err() {
        tracing::warn!("connections still open after the shutdown grace period; closing them");
    }
}
