//! Reading a request body whole, within a size limit and a deadline.
//!
//! hyper bounds the time to send headers but not a body: without a deadline,
//! a client that trickles its body holds a connection and a task for as long
//! as it likes.
//!
//! A body over the limit is answered 413 only once the client has finished
//! sending it (up to [`LINGER_BYTES`], read and thrown away), then the
//! connection closes: a client that writes its whole body before reading
//! (Python's urllib, for one) would otherwise get a broken pipe instead of
//! the answer. nginx's `lingering_close` does the same.

use axum::extract::{FromRequest, Request};
use axum::http::{header, StatusCode};
use bytes::{Bytes, BytesMut};
use http_body_util::BodyExt;

use super::error::ApiError;
use super::AppState;

/// The most of an oversized body read (and dropped) before answering 413.
pub const LINGER_BYTES: u64 = 64 << 20;

/// A whole request body, read within `--max-body-bytes` and `--body-read-timeout`.
pub struct LimitedBody(pub Bytes);

impl FromRequest<AppState> for LimitedBody {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &AppState) -> Result<Self, ApiError> {
        let deadline = state.limits.body_read_timeout;
        let max = state.limits.max_body_bytes;
        match tokio::time::timeout(deadline, read(request, max)).await {
            Ok(result) => result.map(Self),
            Err(_) => Err(ApiError::body_timeout(deadline)),
        }
    }
}

/// The body, or 413 once the client has sent it all (or more than [`LINGER_BYTES`]).
async fn read(request: Request, max: usize) -> Result<Bytes, ApiError> {
    let declared = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    let too_large = || {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("request body is larger than the limit of {max} bytes; raise it with --max-body-bytes"),
        )
        .closing()
    };
    if declared.is_some_and(|n| n > LINGER_BYTES) {
        return Err(too_large());
    }
    let mut body = request.into_body();
    let mut kept = BytesMut::new();
    let mut seen = 0u64;
    while let Some(frame) = body.frame().await {
        let frame = frame
            .map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, format!("cannot read the body: {e}")))?;
        let Ok(data) = frame.into_data() else { continue };
        seen += data.len() as u64;
        if seen > LINGER_BYTES {
            break;
        }
        if seen <= max as u64 {
            kept.extend_from_slice(&data);
        }
    }
    if seen > max as u64 {
        return Err(too_large());
    }
    Ok(kept.freeze())
}
