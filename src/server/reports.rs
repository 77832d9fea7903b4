//! `POST /v1/reports`: a client's counters and states since its last report:
//! one report, an array of them, or a numbered batch (counted once however
//! often it is sent).

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::{Extension, Json};
use std::collections::BTreeMap;
use std::time::Duration;

use stormguard_core::fleet::floor::KEPT_AT_LEAST;

use stormguard_core::wire::{FloorPart, Folded, Report, ReportAnswer};
use tokio::time::Instant;

use super::body::LimitedBody;
use super::caller;
use super::error::ApiError;
use super::{AppState, Peer, Shared};
use crate::fleet::budgets::first_tries;
use crate::reports::{decode_body, Batch};
use crate::snapshot::PolicySnapshot;

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
    if let Some((instance, sequence)) = &decoded.batch {
        if repeated(&state, instance, *sequence, decoded.reports.len(), now).await {
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
    let fleet_budgets = divide_floors(&state, &decoded.reports, &folded, &snapshot, now).await;
    let answer = ReportAnswer {
        accepted: decoded.reports.len(),
        duplicate: false,
        rejected: decoded.rejected,
        folded,
        fleet_budgets,
    };
    Ok((StatusCode::ACCEPTED, Json(answer)))
}

/// Each reporting process's part of the floor of every fleet-scoped budget
/// it reported about, after sharing what this replica's processes claim
/// with the other replicas where it is time to. Every budgeted report's
/// claim is kept, for the families and the lint.
async fn divide_floors(
    state: &Shared,
    reports: &[Report<'_>],
    folded: &[Folded],
    snapshot: &PolicySnapshot,
    now: Instant,
) -> BTreeMap<String, FloorPart> {
    let mut due = Vec::new();
    for (report, folded) in reports.iter().zip(folded) {
        let budget = snapshot.budget(&report.service);
        let tries = (first_tries(report), report.span_ms.map(Duration::from_millis));
        let labelled = !folded.service;
        if let Some(mine) =
            state
                .budgets
                .report(&report.service, &report.instance, tries, budget, labelled, now)
        {
            due.push((&*report.service, mine));
        }
    }
    if let Some(store) = &state.pace_store {
        let shared = due.iter().map(|(service, mine)| async move {
            let others = store.share_claims(service, *mine, KEPT_AT_LEAST).await;
            if let Err(error) = &others {
                tracing::debug!("{error}; {service}'s retry budget floor divided by this replica's word");
            }
            state.budgets.heard(service, others.ok(), now);
        });
        futures_util::future::join_all(shared).await;
    }
    reports
        .iter()
        .filter_map(|report| {
            let part = state.budgets.part(&report.service, &report.instance, now)?;
            Some((report.service.to_string(), FloorPart::from(part)))
        })
        .collect()
}

/// Whether batch `sequence` of `instance` was counted before: by this
/// replica, or, with a shared store, by any replica. A store that does not
/// answer leaves this replica's word standing.
async fn repeated(state: &Shared, instance: &str, sequence: u64, reports: usize, now: Instant) -> bool {
    match state.reports.batch(instance, sequence, reports, now) {
        Batch::Repeat => return true,
        Batch::New | Batch::Unremembered => {}
    }
    let Some(store) = &state.pace_store else {
        return false;
    };
    match store
        .first_count(instance, sequence, state.limits.reports.batch_window)
        .await
    {
        Ok(true) => false,
        Ok(false) => {
            state.reports.repeated(reports);
            true
        }
        Err(error) => {
            tracing::debug!("{error}; batch {sequence} of {instance:?} checked by this replica alone");
            false
        }
    }
}
