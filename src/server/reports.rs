//! `POST /v1/reports`: a client's counters and states since its last report,
//! one report or a JSON array of them (one per service the process calls).

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use serde::Serialize;
use tokio::time::Instant;

use super::body::LimitedBody;
use super::error::ApiError;
use super::AppState;
use crate::reports::{decode_batch, Folded};

/// The answer to good reports: how many, and what the guard folded in each.
#[derive(Serialize)]
pub struct Accepted {
    accepted: usize,
    folded: Vec<Folded>,
}

/// 202 with what the cardinality guard folded, or 400 naming the bad field;
/// a bad report changes nothing, and refuses the whole batch it came in.
pub async fn receive(
    State(state): State<AppState>,
    LimitedBody(body): LimitedBody,
) -> Result<(StatusCode, Json<Accepted>), ApiError> {
    let reports = decode_batch(&body).map_err(|error| {
        state.reports.rejected();
        ApiError::new(StatusCode::BAD_REQUEST, format!("malformed report: {error}")).with("path", error.path)
    })?;
    let snapshot = state.store.current();
    let listed = |service: &str| snapshot.document.services.contains_key(service);
    let now = Instant::now();
    let folded: Vec<Folded> = reports
        .iter()
        .map(|report| state.reports.ingest(report, listed, now))
        .collect();
    Ok((
        StatusCode::ACCEPTED,
        Json(Accepted {
            accepted: reports.len(),
            folded,
        }),
    ))
}
