//! A tower [`Layer`] that guards any HTTP client service: hyper's, tonic's
//! channels, or anything else that takes an `http::Request` and answers an
//! `http::Response`.
//!
//! `payments.layer()` guards a service with the dependency `payments`;
//! `.classify(GrpcStatus)` reads a gRPC channel's answers (see the crate's
//! docs for both, with a tonic channel).

use std::future::{poll_fn, Future};
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::BodyExt;
use stormguard_core::policy::Criticality;
use stormguard_core::retry::{Cause, GaveUp, RetryError};
use tokio::time::Instant;
use tower_layer::Layer;
use tower_service::Service;

use crate::classify::{Classify, HttpStatus};
use crate::dependency::{Dependency, Sent};

/// A request body that can be read into memory once and made again from
/// the bytes for each attempt: the bodies of tonic, hyper's `Full`,
/// reqwest, and strings.
pub trait ResendBody: http_body::Body + Sized {
    /// A body of `bytes`.
    fn from_bytes(bytes: Bytes) -> Self;
}

impl ResendBody for http_body_util::Full<Bytes> {
    fn from_bytes(bytes: Bytes) -> Self {
        Self::new(bytes)
    }
}

impl ResendBody for String {
    fn from_bytes(bytes: Bytes) -> Self {
        String::from_utf8_lossy(&bytes).into_owned()
    }
}

impl ResendBody for reqwest::Body {
    fn from_bytes(bytes: Bytes) -> Self {
        bytes.into()
    }
}

#[cfg(feature = "tonic")]
impl ResendBody for tonic::body::Body {
    fn from_bytes(bytes: Bytes) -> Self {
        Self::new(http_body_util::Full::new(bytes))
    }
}

/// Guards the services it wraps with a [`Dependency`]; made by
/// [`Dependency::layer`].
#[derive(Clone)]
pub struct GuardLayer<C = HttpStatus> {
    dependency: Dependency,
    classify: C,
}

impl Dependency {
    /// A tower layer that guards an HTTP client service with this
    /// dependency's policy, reading answers as [`HttpStatus`] does; see
    /// [`Guarded`]. A request whose extensions hold a
    /// [`Criticality`](stormguard_core::policy::Criticality) is a call of
    /// that class: a route's handler, or a layer above, names it.
    pub fn layer(&self) -> GuardLayer {
        GuardLayer {
            dependency: self.clone(),
            classify: HttpStatus,
        }
    }
}

impl<C> GuardLayer<C> {
    /// The same layer, reading answers and errors with `classify` (such as
    /// [`GrpcStatus`](crate::GrpcStatus) for a gRPC channel).
    pub fn classify<D>(self, classify: D) -> GuardLayer<D> {
        GuardLayer {
            dependency: self.dependency,
            classify,
        }
    }
}

impl<S, C: Clone> Layer<S> for GuardLayer<C> {
    type Service = Guarded<S, C>;

    fn layer(&self, inner: S) -> Guarded<S, C> {
        Guarded {
            inner,
            dependency: self.dependency.clone(),
            classify: self.classify.clone(),
        }
    }
}

/// An HTTP client service guarded by a [`Dependency`]: each request is one
/// call, under the dependency's current policy (breaker, send gate, budget,
/// retries with backoff and jitter, per-try timeout, hedging), reported
/// under its URI's path.
///
/// The answer is the last attempt's response, whatever its status, as the
/// service gave it: a 503 the policy stopped retrying is returned as the
/// 503. The error ([`RetryError`]) comes only when no attempt was answered:
/// the breaker refused the call, the gate had no turn for it, or every
/// attempt ended in the service's error or timed out. The request's body is
/// read into memory once so that it can be sent again. The per-try timeout
/// bounds the wait for a response's head, not its body. A gRPC request's
/// `grpc-timeout` bounds the call: no retry starts after it.
///
/// Each attempt waits for its own clone of the inner service to be ready,
/// so the guarded service is always ready.
#[derive(Clone)]
pub struct Guarded<S, C = HttpStatus> {
    inner: S,
    dependency: Dependency,
    classify: C,
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl<S, C, B, R> Service<http::Request<B>> for Guarded<S, C>
where
    S: Service<http::Request<B>, Response = http::Response<R>> + Clone + Send + Sync + 'static,
    S::Future: Send,
    S::Error: Send,
    C: Classify<http::Response<R>, S::Error> + Clone + Send + Sync + 'static,
    B: ResendBody + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    R: Send + 'static,
{
    type Response = http::Response<R>;
    type Error = GuardError<S::Error>;
    type Future = BoxFuture<Result<http::Response<R>, GuardError<S::Error>>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let (inner, dependency, classify) =
            (self.inner.clone(), self.dependency.clone(), self.classify.clone());
        Box::pin(async move {
            let deadline = grpc_deadline(request.headers());
            let class = request.extensions().get::<Criticality>().copied();
            let (head, body) = request.into_parts();
            let body = body
                .collect()
                .await
                .map_err(|error| GuardError::Body(error.into()))?
                .to_bytes();
            let head = http::Request::from_parts(head, ());
            let endpoint = head.uri().path().to_owned();
            let attempt = |_| {
                let request = head.clone().map(|()| B::from_bytes(body.clone()));
                let (mut inner, classify) = (inner.clone(), classify.clone());
                async move {
                    let answer = match poll_fn(|cx| inner.poll_ready(cx)).await {
                        Ok(()) => inner.call(request).await,
                        Err(error) => Err(error),
                    };
                    match answer {
                        Ok(response) => match classify.response(&response) {
                            None => Ok(response),
                            Some(failure) => Err(Sent::Answered(response, failure)),
                        },
                        Err(error) => {
                            let failure = classify.error(&error);
                            Err(Sent::Failed(error, failure))
                        }
                    }
                }
            };
            dependency
                .send(&endpoint, attempt, true, deadline, class)
                .await
                .map_err(GuardError::Call)
        })
    }
}

/// Why a guarded service gave no response.
#[derive(Debug)]
pub enum GuardError<E> {
    /// The request's body could not be read, so nothing was sent.
    Body(Box<dyn std::error::Error + Send + Sync>),
    /// The call got no response: why it gave up, and the last attempt's
    /// error if it had one.
    Call(RetryError<E>),
}

impl<E> GuardError<E> {
    /// Why the call gave up, if it was sent.
    pub fn gave_up(&self) -> Option<GaveUp> {
        match self {
            GuardError::Body(_) => None,
            GuardError::Call(error) => Some(error.gave_up),
        }
    }

    /// The inner service's error on the last attempt, if it ended in one.
    pub fn last_error(&self) -> Option<&E> {
        match self {
            GuardError::Call(RetryError {
                last: Cause::Error(error),
                ..
            }) => Some(error),
            _ => None,
        }
    }
}

impl<E: std::fmt::Display> std::fmt::Display for GuardError<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            GuardError::Body(error) => write!(f, "the request's body could not be read: {error}"),
            GuardError::Call(error) => error.fmt(f),
        }
    }
}

impl<E: std::error::Error + 'static> std::error::Error for GuardError<E> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            GuardError::Body(error) => Some(&**error),
            GuardError::Call(error) => match &error.last {
                Cause::Error(error) => Some(error),
                _ => None,
            },
        }
    }
}

/// The instant a gRPC request's `grpc-timeout` ends: up to 8 digits and a
/// unit (`H`, `M`, `S`, `m`, `u`, `n`), as gRPC's HTTP/2 protocol writes it.
fn grpc_deadline(headers: &http::HeaderMap) -> Option<Instant> {
    let value = headers.get("grpc-timeout")?.to_str().ok()?;
    let (digits, unit) = value.split_at(value.len().checked_sub(1)?);
    if digits.is_empty() || digits.len() > 8 {
        return None;
    }
    let amount: u64 = digits.parse().ok()?;
    let timeout = match unit {
        "H" => Duration::from_secs(amount * 3600),
        "M" => Duration::from_secs(amount * 60),
        "S" => Duration::from_secs(amount),
        "m" => Duration::from_millis(amount),
        "u" => Duration::from_micros(amount),
        "n" => Duration::from_nanos(amount),
        _ => return None,
    };
    Instant::now().checked_add(timeout)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn deadline_in(value: &str) -> Option<Duration> {
        let mut headers = http::HeaderMap::new();
        headers.insert("grpc-timeout", value.parse().unwrap());
        let now = Instant::now();
        grpc_deadline(&headers).map(|at| at - now)
    }

    #[tokio::test(start_paused = true)]
    async fn a_grpc_timeout_is_read_in_each_unit() {
        assert_eq!(deadline_in("2S"), Some(Duration::from_secs(2)));
        assert_eq!(deadline_in("1H"), Some(Duration::from_secs(3600)));
        assert_eq!(deadline_in("3M"), Some(Duration::from_secs(180)));
        assert_eq!(deadline_in("250m"), Some(Duration::from_millis(250)));
        assert_eq!(deadline_in("7u"), Some(Duration::from_micros(7)));
        assert_eq!(deadline_in("9n"), Some(Duration::from_nanos(9)));
        assert_eq!(deadline_in("123456789S"), None, "more than 8 digits");
        assert_eq!(deadline_in("5s"), None, "no such unit");
        assert_eq!(deadline_in("S"), None);
        assert_eq!(grpc_deadline(&http::HeaderMap::new()), None);
    }
}
