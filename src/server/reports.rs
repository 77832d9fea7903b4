//! `POST /v1/reports`: a client's counters and states since its last report.

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use serde_json::json;
use tokio::time::Instant;

use super::body::LimitedBody;
use super::error::ApiError;
use super::AppState;
use crate::reports::decode;

/// 202 with what the cardinality guard folded, or 400 naming the bad field;
/// a bad report changes nothing.
pub async fn receive(
    State(state): State<AppState>,
    LimitedBody(body): LimitedBody,
) -> Result<(StatusCode, Json<serde_json::Value>), ApiError> {
    let report = decode(&body).map_err(|error| {
        state.reports.rejected();
        ApiError::new(StatusCode::BAD_REQUEST, format!("malformed report: {error}")).with("path", error.path)
    })?;
    let snapshot = state.store.current();
    let listed = |service: &str| snapshot.document.services.contains_key(service);
    let folded = state.reports.ingest(&report, listed, Instant::now());
    Ok((
        StatusCode::ACCEPTED,
        Json(json!({"accepted": true, "folded": folded})),
    ))
}
