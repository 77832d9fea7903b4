//! The admin API: status, history, reload and validate, behind a bearer token.

use axum::extract::{Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use super::body::LimitedBody;
use super::error::{admit, ApiError};
use super::AppState;
use crate::reload::{rfc3339, ReloadOutcome, Trigger};
use crate::stamp::FileStamp;
use stormguard_toolkit::lint::{lint, live_risks};
use stormguard_toolkit::policy::{load_bytes, ContentHash};

/// The admin bearer token, kept only as its hash so that comparing it takes
/// the same time whatever the presented token's length or content.
#[derive(Clone)]
pub struct AdminToken([u8; 32]);

impl AdminToken {
    /// A token from its secret text; surrounding whitespace (a file's newline) is dropped.
    pub fn new(secret: &str) -> Option<Self> {
        let secret = secret.trim();
        (!secret.is_empty()).then(|| Self(Sha256::digest(secret.as_bytes()).into()))
    }

    fn matches(&self, presented: &str) -> bool {
        let presented: [u8; 32] = Sha256::digest(presented.as_bytes()).into();
        self.0.ct_eq(&presented).into()
    }
}

/// Where the admin token comes from.
pub enum AdminAuth {
    /// No token: the admin API answers 403.
    Disabled,
    /// A token given once (`STORMGUARD_ADMIN_TOKEN`).
    Fixed(AdminToken),
    /// A token file, read again whenever it changes, so that a rotated
    /// Kubernetes Secret takes effect without a restart.
    File(TokenFile),
}

/// A token file and the token last read from it.
pub struct TokenFile {
    path: std::path::PathBuf,
    cached: std::sync::Mutex<Option<(FileStamp, AdminToken)>>,
}

/// Why the admin token file gives no token.
#[derive(Debug, thiserror::Error)]
pub enum TokenFileError {
    /// It cannot be read.
    #[error("cannot read the admin token file {}: {source}", path.display())]
    Unreadable {
        /// The file.
        path: std::path::PathBuf,
        /// What reading it said.
        source: std::io::Error,
    },
    /// It holds no token.
    #[error("the admin token file {} is empty", .0.display())]
    Empty(std::path::PathBuf),
}

impl TokenFile {
    /// The file at `path`; it must hold a token now.
    pub fn open(path: std::path::PathBuf) -> Result<Self, TokenFileError> {
        let file = Self {
            path,
            cached: std::sync::Mutex::new(None),
        };
        file.current()?;
        Ok(file)
    }

    /// The token the file holds now (read again only if the file changed).
    fn current(&self) -> Result<AdminToken, TokenFileError> {
        let unreadable = |source| TokenFileError::Unreadable {
            path: self.path.clone(),
            source,
        };
        let stamp = FileStamp::of(&self.path).map_err(unreadable)?;
        let mut cached = self.cached.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((seen, token)) = cached.as_ref() {
            if *seen == stamp {
                return Ok(token.clone());
            }
        }
        let secret = std::fs::read_to_string(&self.path).map_err(unreadable)?;
        let token = AdminToken::new(&secret).ok_or_else(|| TokenFileError::Empty(self.path.clone()))?;
        *cached = Some((stamp, token.clone()));
        Ok(token)
    }
}

/// Lets a request through only with the configured bearer token.
/// The token is read only from the `Authorization` header (never from the
/// URL, which proxies and access logs keep) and is never logged.
pub async fn require_token(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let token =
        match &state.admin {
            AdminAuth::Disabled => return ApiError::new(
                StatusCode::FORBIDDEN,
                "the admin API is disabled: set STORMGUARD_ADMIN_TOKEN or --admin-token-file to enable it",
            )
            .into_response(),
            AdminAuth::Fixed(token) => token.clone(),
            AdminAuth::File(file) => match file.current() {
                Ok(token) => token,
                Err(problem) => {
                    tracing::error!("{problem}; the admin API refuses every request until it is fixed");
                    return ApiError::new(StatusCode::SERVICE_UNAVAILABLE, problem).into_response();
                }
            },
        };
    let presented = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.strip_prefix("Bearer "));
    match presented {
        Some(presented) if token.matches(presented) => next.run(request).await,
        _ => {
            let mut response = ApiError::new(
                StatusCode::UNAUTHORIZED,
                "missing or wrong admin token; send `Authorization: Bearer <token>`",
            )
            .into_response();
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                header::HeaderValue::from_static("Bearer realm=\"stormguard-admin\""),
            );
            response
        }
    }
}

/// `GET /admin/status`: what is served, since when, how the last reload
/// went, and the risks only the fleet's reports show.
pub async fn status(State(state): State<AppState>) -> Json<serde_json::Value> {
    let snapshot = state.store.current();
    let now = tokio::time::Instant::now();
    let seen = state.budgets.seen(now);
    Json(json!({
        "version": snapshot.hash.to_string(),
        "versionNumber": snapshot.hash.version_number(),
        "loadedAt": rfc3339(snapshot.loaded_at),
        "source": snapshot.source.display().to_string(),
        "services": snapshot.document.services.keys().collect::<Vec<_>>(),
        "lastReload": state.reloader.last(),
        "warnings": live_risks(&snapshot.document, &seen),
        "paced": state.fleet.status(now),
    }))
}

/// `GET /admin/history`: the last policies served, newest first, each with
/// what changed from the one before, service by service.
pub async fn history(State(state): State<AppState>) -> Json<serde_json::Value> {
    Json(json!({ "reloads": state.reloader.history() }))
}

/// `POST /admin/reload`: reload now; 422 with the errors if the file is bad.
pub async fn reload(State(state): State<AppState>) -> Result<Json<serde_json::Value>, ApiError> {
    match state.reloader.reload(Trigger::Admin).await {
        ReloadOutcome::Applied(hash) => Ok(Json(json!({
            "result": "applied",
            "version": hash.to_string(),
        }))),
        ReloadOutcome::Unchanged => Ok(Json(json!({
            "result": "unchanged",
            "version": state.store.current().hash.to_string(),
        }))),
        ReloadOutcome::Failed(errors) => Err(ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "the policy file is invalid; the last good policy is still served",
        )
        .with("errors", errors)),
    }
}

/// `POST /admin/validate`: a dry run of the posted YAML, with the same errors
/// as `check`, and for a valid policy the storm-risk lint and forecasts,
/// and the risks it would have for the fleet this daemon hears from.
pub async fn validate(
    State(state): State<AppState>,
    LimitedBody(body): LimitedBody,
) -> Result<Json<serde_json::Value>, ApiError> {
    // Each validation runs the simulator for its forecasts: a few at once,
    // so that validations cannot take the daemon's CPU from serving.
    let _slot = admit(
        &state.validations,
        "too many validations are running; try again after Retry-After, or raise --max-validations",
    )?;
    let limits = state.limits.policy;
    let now = tokio::time::Instant::now();
    let seen = state.budgets.seen(now);
    let checked = tokio::task::spawn_blocking(move || {
        let loaded = load_bytes("request body", &body, limits).map(|document| {
            let mut lint = lint(&document, &|herd| herd);
            lint.warnings.extend(live_risks(&document, &seen));
            lint.warnings
                .sort_by(|a, b| (&a.service, a.rule).cmp(&(&b.service, b.rule)));
            (document, lint)
        });
        (loaded, body)
    })
    .await
    .map_err(|e| {
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("internal error while validating ({e}); please report it"),
        )
    })?;
    match checked {
        (Ok((document, lint)), body) => Ok(Json(json!({
            "valid": true,
            "version": ContentHash::of(&body).to_string(),
            "services": document.services.keys().collect::<Vec<_>>(),
            "warnings": lint.warnings,
            "forecasts": lint.forecasts,
        }))),
        (Err(errors), _) => Err(
            ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "the policy is invalid")
                .with("valid", false)
                .with("errors", errors),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_compares_by_value_and_trims_file_newlines() {
        let token = AdminToken::new("s3cret\n").unwrap();
        assert!(token.matches("s3cret"));
        assert!(!token.matches("s3cre"));
        assert!(!token.matches("s3cret "));
        assert!(AdminToken::new(" \n").is_none());
    }
}
