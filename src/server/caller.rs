//! Who may speak for an instance and a dependency: the token check, the
//! instance bindings and the policy file's `reporters` in front of reports
//! and pace asks. With a shared store, an instance's binding is checked
//! there too, so that it holds across replicas.

use axum::http::{HeaderMap, HeaderValue, StatusCode};
use tokio::time::Instant;

use super::error::ApiError;
use super::{Peer, Shared};
use crate::identity::{Identity, Mode, NotYours};

/// Whether this request's caller may speak for each of `instances` and
/// `dependencies`: 401 naming the reason for a token that is missing (when
/// required) or not valid, 403 for an instance another service account
/// owns or a dependency whose `reporters` do not list the caller. Nothing
/// is counted before this passes.
pub async fn admit(
    state: &Shared,
    headers: &HeaderMap,
    peer: Option<Peer>,
    instances: &[&str],
    dependencies: &[&str],
) -> Result<(), ApiError> {
    if state.callers.mode() == Mode::Off {
        return Ok(());
    }
    let caller = state.callers.caller(headers).map_err(|refusal| {
        state
            .callers
            .log_refusal(&refusal, peer.map(|Peer(address)| address));
        ApiError::new(StatusCode::UNAUTHORIZED, refusal.to_string())
            .with("reason", refusal.reason())
            .challenge(HeaderValue::from_static(
                r#"Bearer realm="stormguard", error="invalid_token""#,
            ))
    })?;
    listed(state, caller.as_ref(), dependencies)?;
    let now = Instant::now();
    for &instance in instances {
        state
            .bindings
            .speak(instance, caller.as_ref(), now)
            .map_err(|not_yours| ApiError::new(StatusCode::FORBIDDEN, not_yours.to_string()))?;
        bound_fleet_wide(state, instance, caller.as_ref(), now).await?;
    }
    Ok(())
}

/// Whether the shared store, when there is one and this replica's word on
/// `instance` is due a check, agrees that `caller` may speak for it. A
/// store that does not answer leaves this replica's word standing.
async fn bound_fleet_wide(
    state: &Shared,
    instance: &str,
    caller: Option<&Identity>,
    now: Instant,
) -> Result<(), ApiError> {
    let Some(store) = &state.pace_store else {
        return Ok(());
    };
    if !state.bindings.unconfirmed(instance, now) {
        return Ok(());
    }
    let owner = match store.bind(instance, caller, state.bindings.ttl()).await {
        Ok(owner) => owner,
        Err(error) => {
            tracing::debug!("{error}; instance {instance:?} checked by this replica alone");
            return Ok(());
        }
    };
    state.bindings.confirmed(instance, owner.clone(), now);
    match owner {
        Some(owner) if Some(&owner) != caller => {
            let not_yours = NotYours {
                instance: instance.to_string(),
                owner,
                caller: caller.cloned(),
            };
            Err(ApiError::new(StatusCode::FORBIDDEN, not_yours.to_string()))
        }
        _ => Ok(()),
    }
}

/// Whether the policy file's `reporters` let `caller` speak for each of `dependencies`.
fn listed(state: &Shared, caller: Option<&Identity>, dependencies: &[&str]) -> Result<(), ApiError> {
    let snapshot = state.store.current();
    let reporters = &snapshot.document.reporters;
    for &dependency in dependencies {
        let admitted = match caller {
            Some(who) => reporters.admits(dependency, &who.namespace, &who.service_account),
            None => reporters.of(dependency).is_none(),
        };
        if !admitted {
            let who = caller.map_or("a caller without a token".to_string(), ToString::to_string);
            return Err(ApiError::new(
                StatusCode::FORBIDDEN,
                format!("{who} may not speak for {dependency}: the policy file's reporters.{dependency} does not list it"),
            ));
        }
    }
    Ok(())
}
