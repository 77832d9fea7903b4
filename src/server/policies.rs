//! `GET /v1/policies` (all, or `?services=a,b`) and `GET /v1/policies/{service}`: conditional GETs on
//! content-derived ETags, and long-polls that return the moment the answer changes.

use std::time::Duration;

use axum::body::Body;
use axum::extract::rejection::PathRejection;
use axum::extract::FromRequestParts;
use axum::extract::{Path, Query, State};
use axum::http::request::Parts;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use stormguard_core::policy::{check_service_name, parse_duration, DurationError};
use stormguard_core::wire::{parse_selection, MAX_WAIT_HEADER};

use super::error::{admit, ApiError};
use super::AppState;
use crate::snapshot::{PolicySnapshot, Served};

/// The query of a policy request.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicyQuery {
    /// With `If-None-Match`: hold the request until the answer changes, for this long.
    wait: Option<String>,
}

/// The query of `GET /v1/policies`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AllQuery {
    /// As in [`PolicyQuery`].
    wait: Option<String>,
    /// Only these services, comma-separated: one watch for several dependencies.
    services: Option<String>,
}

/// Every service's resolved policy, the defaults and the version; or, with
/// `?services=a,b`, those services' policies alone.
pub async fn all(
    State(state): State<AppState>,
    query: Result<Query<AllQuery>, axum::extract::rejection::QueryRejection>,
    IfNoneMatch(known): IfNoneMatch,
) -> Result<Response, ApiError> {
    let Query(AllQuery { wait, services }) = query?;
    let query = PolicyQuery { wait };
    let Some(services) = services else {
        return respond(&state, &query, known, |snapshot| snapshot.all.clone()).await;
    };
    let names =
        parse_selection(&services).map_err(|problem| ApiError::new(StatusCode::BAD_REQUEST, problem))?;
    respond(&state, &query, known, |snapshot| snapshot.selection(&names)).await
}

/// One service's resolved policy; the defaults, marked as such, for a service not in the file.
pub async fn one(
    State(state): State<AppState>,
    service: Result<Path<String>, PathRejection>,
    query: Result<PolicyQuery, axum::extract::rejection::QueryRejection>,
    IfNoneMatch(known): IfNoneMatch,
) -> Result<Response, ApiError> {
    let query = query?;
    let Path(service) = service.map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, e.body_text()))?;
    check_service_name(&service).map_err(|problem| ApiError::new(StatusCode::BAD_REQUEST, problem))?;
    respond(&state, &query, known, |snapshot| {
        snapshot.service(&service).clone()
    })
    .await
}

async fn respond(
    state: &AppState,
    query: &PolicyQuery,
    known: Option<HeaderValue>,
    pick: impl Fn(&PolicySnapshot) -> Served,
) -> Result<Response, ApiError> {
    let wait = parse_wait(query.wait.as_deref(), state.limits.max_wait)?;
    let clamped = wait.is_some_and(|w| w.clamped);
    let mut response = answer(state, wait.map(|w| w.wait), known, pick).await?;
    if clamped {
        let max = state.limits.max_wait.as_millis().to_string();
        response
            .headers_mut()
            .insert(MAX_WAIT_HEADER, HeaderValue::from_str(&max).expect("digits"));
    }
    Ok(response)
}

/// The answer: at once, or once the answer changes or `wait` ends.
async fn answer(
    state: &AppState,
    wait: Option<Duration>,
    known: Option<HeaderValue>,
    pick: impl Fn(&PolicySnapshot) -> Served,
) -> Result<Response, ApiError> {
    let served = pick(&state.store.current());
    let Some(known) = known.filter(|k| etag_matches(k, &served.etag)) else {
        return Ok(fresh(served));
    };
    let Some(wait) = wait else {
        return Ok(not_modified(served));
    };
    if known.as_bytes() == b"*" {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "If-None-Match: * matches every version, so a long-poll on it could never end; send the ETag you have",
        ));
    }
    if *state.shutdown.borrow() {
        return Err(draining(state));
    }
    let _slot = admit(
        &state.long_polls,
        "too many long-polls are waiting; raise the limit with --max-long-polls",
    )?;
    // Subscribe, then look again: a swap just before subscribing is not missed.
    let mut changes = state.store.subscribe();
    let now = pick(&state.store.current());
    if !etag_matches(&known, &now.etag) {
        return Ok(fresh(now));
    }
    let deadline = tokio::time::sleep(wait);
    tokio::pin!(deadline);
    let mut shutdown = state.shutdown.clone();
    loop {
        tokio::select! {
            changed = changes.changed() => {
                let now = pick(&state.store.current());
                if changed.is_err() || !etag_matches(&known, &now.etag) {
                    return Ok(fresh(now));
                }
            }
            _ = &mut deadline => break,
            () = crate::shutdown::shutting_down(&mut shutdown) => return Err(draining(state)),
        }
    }
    Ok(not_modified(pick(&state.store.current())))
}

/// A long-poll's answer while the daemon drains: come back later, elsewhere.
/// A 304 here would send the client straight back to a daemon that answers
/// at once, over and over until it stops.
fn draining(state: &AppState) -> ApiError {
    ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "this daemon is shutting down; watch again after Retry-After (another replica will answer)",
    )
    .retry_after(state.long_polls.retry_after_seconds())
    .closing()
}

/// As `Query<PolicyQuery>`, without running the deserializer when there is
/// no query at all: most requests for a policy are plain GETs.
impl<S: Sync> FromRequestParts<S> for PolicyQuery {
    type Rejection = axum::extract::rejection::QueryRejection;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        match parts.uri.query() {
            None => Ok(Self { wait: None }),
            Some(_) => Query::try_from_uri(&parts.uri).map(|Query(query)| query),
        }
    }
}

/// The `If-None-Match` header alone: extracting every header would copy them all.
pub struct IfNoneMatch(Option<HeaderValue>);

impl<S: Sync> FromRequestParts<S> for IfNoneMatch {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        Ok(Self(parts.headers.get(header::IF_NONE_MATCH).cloned()))
    }
}

/// A long-poll's wait, and whether it was shortened to the maximum.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Wait {
    wait: Duration,
    clamped: bool,
}

/// `?wait=`: a Go duration; one longer than `max` is shortened to `max`
/// (and the answer says so), so a client configured for longer still works.
/// One too long to hold (past 584 years) is longer than `max` too.
fn parse_wait(wait: Option<&str>, max: Duration) -> Result<Option<Wait>, ApiError> {
    let Some(text) = wait else { return Ok(None) };
    let wait = match parse_duration(text) {
        Ok(wait) => wait,
        Err(DurationError::Overflow(_)) => Duration::MAX,
        Err(e) => return Err(ApiError::new(StatusCode::BAD_REQUEST, format!("wait: {e}"))),
    };
    Ok(Some(Wait {
        wait: wait.min(max),
        clamped: wait > max,
    }))
}

/// Whether an `If-None-Match` value names `etag` (weak comparison, lists, `*`).
fn etag_matches(if_none_match: &HeaderValue, etag: &HeaderValue) -> bool {
    let Ok(list) = if_none_match.to_str() else {
        return false;
    };
    let etag = etag.to_str().unwrap_or_default();
    list.split(',')
        .map(|tag| tag.trim())
        .any(|tag| tag == "*" || tag.trim_start_matches("W/") == etag)
}

fn fresh(served: Served) -> Response {
    let mut response = Response::new(Body::from(served.body));
    let headers = response.headers_mut();
    headers.reserve(4);
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    headers.insert(header::ETAG, served.etag);
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    // Stated here, from the snapshot, so the router need not format it per answer.
    headers.insert(header::CONTENT_LENGTH, served.length);
    response
}

fn not_modified(served: Served) -> Response {
    (StatusCode::NOT_MODIFIED, [(header::ETAG, served.etag)]).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn if_none_match_handles_lists_weak_tags_and_star() {
        let etag = HeaderValue::from_static("\"abc\"");
        let matches = |value: &'static str| etag_matches(&HeaderValue::from_static(value), &etag);
        assert!(matches("\"abc\""));
        assert!(matches("W/\"abc\""));
        assert!(matches("\"x\", \"abc\""));
        assert!(matches("*"));
        assert!(!matches("\"abcd\""));
        assert!(!matches("abc"));
    }

    #[test]
    fn wait_is_a_go_duration_shortened_to_the_maximum() {
        let max = Duration::from_secs(300);
        assert_eq!(parse_wait(None, max).unwrap(), None);
        let wait = |text| parse_wait(Some(text), max).unwrap().unwrap();
        assert_eq!(
            wait("30s"),
            Wait {
                wait: Duration::from_secs(30),
                clamped: false
            }
        );
        assert_eq!(
            wait("10m"),
            Wait {
                wait: max,
                clamped: true
            }
        );
        assert_eq!(
            wait("5m"),
            Wait {
                wait: max,
                clamped: false
            }
        );
        assert_eq!(
            wait("9999999999999999999h"),
            Wait {
                wait: max,
                clamped: true
            },
            "too long to hold is longer than the maximum, not a bad request"
        );
        let bad = parse_wait(Some("30"), max).unwrap_err().into_response();
        assert_eq!(bad.status(), StatusCode::BAD_REQUEST);
    }
}
