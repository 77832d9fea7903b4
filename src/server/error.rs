//! Errors as JSON: `{"error": "...", ...}` with the right status code.

use axum::extract::rejection::QueryRejection;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Map, Value};
use stormguard_core::shed::{InFlight, LoadShedLayer};

/// An error answer: a status and a JSON object with at least `error`.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    body: Map<String, Value>,
    retry_after: Option<u64>,
    close: bool,
    challenge: Option<HeaderValue>,
}

impl ApiError {
    /// An error with `status` and a message for the caller.
    pub fn new(status: StatusCode, message: impl std::fmt::Display) -> Self {
        let mut body = Map::new();
        body.insert("error".into(), Value::String(message.to_string()));
        Self {
            status,
            body,
            retry_after: None,
            close: false,
            challenge: None,
        }
    }

    /// Adds a field to the JSON body.
    pub fn with(mut self, key: &str, value: impl serde::Serialize) -> Self {
        self.body.insert(key.into(), json!(value));
        self
    }

    /// Asks the caller to come back after `seconds`.
    pub fn retry_after(mut self, seconds: u64) -> Self {
        self.retry_after = Some(seconds);
        self
    }

    /// Says how to authenticate (`WWW-Authenticate`), for a 401.
    pub fn challenge(mut self, value: HeaderValue) -> Self {
        self.challenge = Some(value);
        self
    }

    /// 408: a request's body did not arrive within `limit`; the connection closes.
    pub fn body_timeout(limit: std::time::Duration) -> Self {
        ApiError::new(
            StatusCode::REQUEST_TIMEOUT,
            format!(
                "the request body did not arrive within {}; raise the limit with --body-read-timeout",
                stormguard_core::policy::GoDuration(limit)
            ),
        )
        .closing()
    }

    /// Closes the connection after the answer (`Connection: close`), so the
    /// caller's next request finds another replica.
    pub fn closing(mut self) -> Self {
        self.close = true;
        self
    }
}

/// A place from `shed`, or 503 with its jittered `Retry-After` and `message`.
pub fn admit(shed: &LoadShedLayer, message: &str) -> Result<InFlight, ApiError> {
    shed.admit().ok_or_else(|| {
        ApiError::new(StatusCode::SERVICE_UNAVAILABLE, message).retry_after(shed.retry_after_seconds())
    })
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response = (self.status, axum::Json(Value::Object(self.body))).into_response();
        if let Some(seconds) = self.retry_after {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        }
        if let Some(challenge) = self.challenge {
            response.headers_mut().insert(header::WWW_AUTHENTICATE, challenge);
        }
        if self.close {
            response
                .headers_mut()
                .insert(header::CONNECTION, HeaderValue::from_static("close"));
        }
        response
    }
}

impl From<QueryRejection> for ApiError {
    fn from(rejection: QueryRejection) -> Self {
        ApiError::new(StatusCode::BAD_REQUEST, rejection.body_text())
    }
}
