//! `POST /v1/reports`: a client's counters and states since its last report:
//! one report, an array of them, or a numbered batch (counted once however
//! often it is sent).

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::{Extension, Json};
use stormguard_core::wire::{Folded, ReportAnswer};
use tokio::time::Instant;

use super::body::LimitedBody;
use super::caller;
use super::error::ApiError;
use super::{AppState, Peer};
use crate::reports::decode_body;

/// 202 with what was counted, what was refused and what the cardinality
/// guard folded; 400 naming the bad field when nothing in the body can be
/// counted; 401 for a token refused, 403 for an instance another service
/// account speaks for or a dependency the caller may not report about. A
/// refused report changes nothing.
pub async fn receive(
    State(state): State<AppState>,
    peer: Option<Extension<Peer>>,
    headers: HeaderMap,
    LimitedBody(body): LimitedBody,
) -> Result<(StatusCode, Json<ReportAnswer>), ApiError> {
    let decoded = decode_body(&body).map_err(|error| {
        state.reports.rejected(1);
        ApiError::new(StatusCode::BAD_REQUEST, format!("malformed report: {error}")).with("path", error.path)
    })?;
    let batch_instance = decoded.batch.as_ref().map(|(instance, _)| &**instance);
    let instances: Vec<&str> = batch_instance
        .into_iter()
        .chain(decoded.reports.iter().map(|report| &*report.instance))
        .collect();
    let dependencies: Vec<&str> = decoded.reports.iter().map(|report| &*report.service).collect();
    caller::admit(
        &state,
        &headers,
        peer.map(|Extension(peer)| peer),
        &instances,
        &dependencies,
    )
    .await?;
    let now = Instant::now();
    let store = state.pace_store.as_deref();
    if let Some((instance, sequence)) = &decoded.batch {
        if state
            .batches
            .counted_before(instance, *sequence, store, now)
            .await
        {
            state.reports.repeated(decoded.reports.len());
            let answer = ReportAnswer {
                duplicate: true,
                ..ReportAnswer::default()
            };
            return Ok((StatusCode::ACCEPTED, Json(answer)));
        }
    }
    state.reports.rejected(decoded.rejected.len());
    let snapshot = state.store.current();
    let listed = |service: &str| snapshot.document.services.contains_key(service);
    let folded: Vec<Folded> = decoded
        .reports
        .iter()
        .map(|report| state.reports.ingest(report, listed, now))
        .collect();
    let fleet_budgets = state
        .budgets
        .divide(&decoded.reports, &folded, &snapshot, store, now)
        .await;
    let answer = ReportAnswer {
        accepted: decoded.reports.len(),
        duplicate: false,
        rejected: decoded.rejected,
        folded,
        fleet_budgets,
    };
    Ok((StatusCode::ACCEPTED, Json(answer)))
}
