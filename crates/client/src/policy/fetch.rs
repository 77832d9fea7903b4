//! One request for the watched services' policies, and what its answer says.

use std::time::Duration;

use reqwest::header::{HeaderMap, ETAG, IF_NONE_MATCH, RETRY_AFTER};
use reqwest::StatusCode;
use stormguard_core::policy::InvalidPolicy;
use stormguard_core::retry::parse_retry_after;
use stormguard_core::wire::{SelectedPolicies, MAX_WAIT_HEADER, SERVICES_PARAM};

use super::{ClientConfig, Version};

/// A failed fetch, for logs.
#[derive(Debug, thiserror::Error)]
pub(super) enum FetchError {
    #[error("{0}")]
    Http(#[from] reqwest::Error),
    #[error("the daemon answered {0}")]
    Status(StatusCode),
    #[error("the daemon is busy or draining (503); asked to come back in {0:?}")]
    Unavailable(Option<Duration>),
}

/// Why one service's entry in an answer cannot be applied.
#[derive(Debug, thiserror::Error)]
pub(super) enum Unusable {
    #[error("{0}")]
    Invalid(#[from] InvalidPolicy),
    #[error("the daemon's answer leaves it out")]
    Missing,
}

/// What a fetch found.
pub(super) enum Fetched {
    /// The selection's ETag, and each service's version or why it is unusable.
    New {
        etag: Option<String>,
        services: Vec<(String, Result<Version, Unusable>)>,
    },
    Unchanged,
}

/// A fetch's outcome, and the longest wait the daemon allows if it said so.
pub(super) struct Answer {
    pub(super) fetched: Result<Fetched, FetchError>,
    pub(super) max_wait: Option<Duration>,
}

/// One GET of every watched service: new versions, or none newer than
/// `etag` (after waiting up to `wait`).
pub(super) async fn fetch(
    config: &ClientConfig,
    http: &reqwest::Client,
    etag: Option<&str>,
    wait: Option<Duration>,
) -> Answer {
    let url = format!("{}/v1/policies", config.daemon);
    let mut request = http
        .get(url)
        .query(&[(SERVICES_PARAM, config.services.join(","))]);
    if let Some(etag) = etag {
        request = request.header(IF_NONE_MATCH, etag);
    }
    if let Some(wait) = wait {
        request = request
            .query(&[("wait", format!("{}ms", wait.as_millis()))])
            // The daemon answers at `wait` at the latest; past a margin, the
            // connection is stalled and the watch starts over.
            .timeout(wait + (wait / 2 + Duration::from_secs(1)).min(Duration::from_secs(10)));
    } else {
        request = request.timeout(Duration::from_secs(10));
    }
    let response = match request.send().await {
        Ok(response) => response,
        Err(error) => {
            return Answer {
                fetched: Err(error.into()),
                max_wait: None,
            }
        }
    };
    let max_wait = max_wait(response.headers());
    let fetched = read(config, response).await;
    Answer { fetched, max_wait }
}

/// What a response says.
async fn read(config: &ClientConfig, response: reqwest::Response) -> Result<Fetched, FetchError> {
    match response.status() {
        StatusCode::OK => {
            let etag = header_text(response.headers(), ETAG);
            let mut selected: SelectedPolicies = response.json().await?;
            let services = config
                .services
                .iter()
                .map(|name| {
                    let version = match selected.services.remove(name) {
                        Some(entry) => Version::new(entry.resolved, Some(entry.etag)).map_err(Unusable::from),
                        None => Err(Unusable::Missing),
                    };
                    (name.clone(), version)
                })
                .collect();
            Ok(Fetched::New { etag, services })
        }
        StatusCode::NOT_MODIFIED => Ok(Fetched::Unchanged),
        StatusCode::SERVICE_UNAVAILABLE | StatusCode::TOO_MANY_REQUESTS => {
            let retry_after = header_text(response.headers(), RETRY_AFTER)
                .and_then(|v| parse_retry_after(&v, std::time::SystemTime::now()));
            Err(FetchError::Unavailable(retry_after))
        }
        status => Err(FetchError::Status(status)),
    }
}

fn header_text(headers: &HeaderMap, name: reqwest::header::HeaderName) -> Option<String> {
    headers.get(name)?.to_str().ok().map(str::to_string)
}

/// The daemon's longest wait, when it said it shortened ours.
fn max_wait(headers: &HeaderMap) -> Option<Duration> {
    let millis: u64 = headers.get(MAX_WAIT_HEADER)?.to_str().ok()?.parse().ok()?;
    Some(Duration::from_millis(millis))
}
