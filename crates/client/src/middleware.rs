//! A [`Dependency`] as `reqwest-middleware` middleware, so that a reqwest
//! client is guarded in one line:
//! `ClientBuilder::new(reqwest::Client::new()).with(payments).build()`.
//! A request built `.with_extension(Criticality::Critical)` is a call of
//! that class.

use http::Extensions;
use reqwest_middleware::{Middleware, Next};

use crate::classify::{failure_of, status_failure};
use crate::dependency::{Dependency, Sent};
use crate::layer::GuardError;
use stormguard_core::policy::Criticality;
use stormguard_core::retry::Failure;

/// Each request sent through the client is one call under the dependency's
/// current policy, reported under its URL's path, as [`Guarded`](crate::Guarded)
/// runs one: the answer is the last attempt's response, whatever its status;
/// the error, a [`GuardError`] whose source is the last attempt's error,
/// comes only when no attempt was answered. A request whose body is a
/// stream cannot be sent twice: it is sent once, under the breaker and the
/// gate, and not retried.
#[async_trait::async_trait]
impl Middleware for Dependency {
    async fn handle(
        &self,
        request: reqwest::Request,
        extensions: &mut Extensions,
        next: Next<'_>,
    ) -> reqwest_middleware::Result<reqwest::Response> {
        let endpoint = request.url().path().to_owned();
        let resendable = request.try_clone().is_some();
        let original = std::sync::Mutex::new(Some(request));
        let shared = &*extensions;
        let attempt = |_| {
            let mut original = original.lock().unwrap_or_else(|e| e.into_inner());
            let request = if resendable {
                original.as_ref().and_then(reqwest::Request::try_clone)
            } else {
                original.take()
            };
            let (next, mut extensions) = (next.clone(), shared.clone());
            async move {
                // Only a hedge finds no request: a request that cannot be
                // sent again is not retried. It never answers, so the
                // attempt's own answer is the call's.
                let Some(request) = request else {
                    return std::future::pending().await;
                };
                match next.run(request, &mut extensions).await {
                    Ok(response) => match status_failure(response.status().as_u16(), response.headers()) {
                        None => Ok(response),
                        Some(failure) => Err(Sent::Answered(response, failure)),
                    },
                    Err(error) => {
                        let failure = reqwest_failure(&error);
                        Err(Sent::Failed(error, failure))
                    }
                }
            }
        };
        // A request builder's `.with_extension(Criticality::Critical)`.
        let class = extensions.get::<Criticality>().copied();
        self.send(&endpoint, attempt, resendable, None, class)
            .await
            .map_err(|error| reqwest_middleware::Error::middleware(GuardError::Call(error)))
    }
}

/// The failure a client error stands for: reqwest's own reading first
/// (a connection not made, a timeout), then its causes'.
fn reqwest_failure(error: &reqwest_middleware::Error) -> Failure {
    match error {
        reqwest_middleware::Error::Reqwest(error) if error.is_connect() => Failure::Connect,
        reqwest_middleware::Error::Reqwest(error) if error.is_timeout() => Failure::Timeout,
        error => failure_of(error),
    }
}
