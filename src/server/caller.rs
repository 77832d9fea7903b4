//! Who may speak for an instance: the token check and the instance
//! bindings in front of reports and pace asks.

use axum::http::{HeaderMap, HeaderValue, StatusCode};
use tokio::time::Instant;

use super::error::ApiError;
use super::Shared;
use crate::identity::Mode;

/// Whether this request's caller may speak for each of `instances`: 401
/// naming the reason for a token that is missing (when required) or not
/// valid, 403 for an instance another service account owns. Nothing is
/// counted before this passes.
pub fn admit<'a>(
    state: &Shared,
    headers: &HeaderMap,
    instances: impl IntoIterator<Item = &'a str>,
) -> Result<(), ApiError> {
    if state.callers.mode() == Mode::Off {
        return Ok(());
    }
    let caller = state.callers.caller(headers).map_err(|refusal| {
        ApiError::new(StatusCode::UNAUTHORIZED, refusal.to_string())
            .with("reason", refusal.reason())
            .challenge(HeaderValue::from_static(
                r#"Bearer realm="stormguard", error="invalid_token""#,
            ))
    })?;
    let now = Instant::now();
    for instance in instances {
        state
            .bindings
            .speak(instance, caller.as_ref(), now)
            .map_err(|not_yours| ApiError::new(StatusCode::FORBIDDEN, not_yours.to_string()))?;
    }
    Ok(())
}
