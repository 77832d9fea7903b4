//! Reading a request body whole, within a size limit and a deadline.
//!
//! hyper bounds the time to send headers but not a body: without a deadline,
//! a client that trickles its body holds a connection and a task for as long
//! as it likes.

use axum::extract::{FromRequest, Request};
use axum::http::StatusCode;
use bytes::Bytes;
use stormguard_core::policy::GoDuration;

use super::error::ApiError;
use super::AppState;

/// A whole request body, read within `--max-body-bytes` and `--body-read-timeout`.
pub struct LimitedBody(pub Bytes);

impl FromRequest<AppState> for LimitedBody {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &AppState) -> Result<Self, ApiError> {
        let deadline = state.limits.body_read_timeout;
        match tokio::time::timeout(deadline, Bytes::from_request(request, state)).await {
            Ok(Ok(body)) => Ok(Self(body)),
            Ok(Err(rejection)) => Err(rejection.into()),
            Err(_) => Err(ApiError::new(
                StatusCode::REQUEST_TIMEOUT,
                format!(
                    "the request body did not arrive within {}; raise the limit with --body-read-timeout",
                    GoDuration(deadline)
                ),
            )),
        }
    }
}
