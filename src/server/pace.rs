//! `POST /v1/pace`: a process whose send gate is on asks for its share of
//! a dependency's rate (see `crate::fleet`).

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::{Extension, Json};
use stormguard_core::wire::{PaceAsk, PaceGrant};
use tokio::time::Instant;

use super::body::LimitedBody;
use super::caller;
use super::error::ApiError;
use super::{AppState, Peer};
use crate::fleet::Refused;

/// 200 with the grant; 400 naming the bad field; 401 for a token refused,
/// 403 for an instance another service account speaks for or a dependency
/// the caller may not be paced for; 409 if the dependency's
/// policy has no gate; 503 with `Retry-After` past the caps. The process
/// paces by its own gate meanwhile, so a refusal costs it nothing.
pub async fn ask(
    State(state): State<AppState>,
    peer: Option<Extension<Peer>>,
    headers: HeaderMap,
    LimitedBody(body): LimitedBody,
) -> Result<Json<PaceGrant>, ApiError> {
    let ask: PaceAsk = serde_json::from_slice(&body)
        .map_err(|error| ApiError::new(StatusCode::BAD_REQUEST, format!("malformed ask: {error}")))?;
    ask.check().map_err(|error| {
        ApiError::new(StatusCode::BAD_REQUEST, format!("malformed ask: {error}")).with("path", &error.path)
    })?;
    caller::admit(
        &state,
        &headers,
        peer.map(|Extension(peer)| peer),
        &[&ask.instance],
        &[&ask.service],
    )
    .await?;
    let snapshot = state.store.current();
    match state
        .fleet
        .ask(&ask, snapshot.policy(&ask.service), Instant::now())
    {
        Ok(grant) => Ok(Json(grant)),
        Err(refused @ Refused::GateOff(_)) => Err(ApiError::new(StatusCode::CONFLICT, refused.to_string())),
        Err(refused @ Refused::Full(_)) => {
            Err(ApiError::new(StatusCode::SERVICE_UNAVAILABLE, refused.to_string()).retry_after(1))
        }
    }
}
