//! Load shedding for servers: a tower [`Layer`] that caps the requests in
//! flight and answers the excess at once with `503 Service Unavailable`.
//!
//! Each refusal carries a `Retry-After` drawn uniformly from a range, so the
//! clients shed in one burst come back spread out instead of in lock-step:
//! a fixed `Retry-After` would rebuild the very herd it turned away.
//!
//! ```
//! use std::time::Duration;
//! use stormguard_core::shed::LoadShedLayer;
//!
//! let shed = LoadShedLayer::new(512, Duration::from_secs(1)..=Duration::from_secs(5))?;
//! let stats = shed.stats();
//! // let app = axum::Router::new().route(...).layer(shed);
//! assert_eq!(stats.shed(), 0);
//! # Ok::<_, stormguard_core::shed::ShedConfigError>(())
//! ```

use std::future::Future;
use std::ops::RangeInclusive;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use http::{header, HeaderValue, Request, Response, StatusCode};
use rand::Rng;
use tower_layer::Layer;
use tower_service::Service;

/// A bad load-shedding setting.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ShedConfigError {
    /// A limit of zero would refuse every request.
    #[error("the concurrency limit must be at least 1")]
    ZeroLimit,
    /// The `Retry-After` range is empty.
    #[error("the Retry-After range is empty: {min:?} is more than {max:?}")]
    EmptyRange {
        /// The range's start.
        min: Duration,
        /// The range's end.
        max: Duration,
    },
}

/// Counts of a load shedder, shared with every service the layer made.
#[derive(Debug, Default)]
pub struct ShedStats {
    in_flight: AtomicUsize,
    shed: AtomicU64,
}

impl ShedStats {
    /// Requests being served now.
    pub fn in_flight(&self) -> usize {
        self.in_flight.load(Relaxed)
    }

    /// Requests refused since the layer was made.
    pub fn shed(&self) -> u64 {
        self.shed.load(Relaxed)
    }
}

/// Caps requests in flight across every service it wraps; see the [module docs](self).
#[derive(Debug, Clone)]
pub struct LoadShedLayer {
    limit: usize,
    /// `Retry-After` bounds in whole seconds, as the header is written.
    retry_after: RangeInclusive<u64>,
    stats: Arc<ShedStats>,
}

impl LoadShedLayer {
    /// At most `max_in_flight` requests at once (at least 1); refusals say to
    /// come back after a whole number of seconds drawn from `retry_after`
    /// (its ends rounded up to seconds).
    pub fn new(max_in_flight: usize, retry_after: RangeInclusive<Duration>) -> Result<Self, ShedConfigError> {
        let (min, max) = retry_after.into_inner();
        if max_in_flight == 0 {
            return Err(ShedConfigError::ZeroLimit);
        }
        if min > max {
            return Err(ShedConfigError::EmptyRange { min, max });
        }
        let whole_seconds = |d: Duration| d.as_secs() + u64::from(d.subsec_nanos() > 0);
        Ok(Self {
            limit: max_in_flight,
            retry_after: whole_seconds(min)..=whole_seconds(max),
            stats: Arc::default(),
        })
    }

    /// The shared counts, for metrics.
    pub fn stats(&self) -> Arc<ShedStats> {
        self.stats.clone()
    }
}

impl<S> Layer<S> for LoadShedLayer {
    type Service = LoadShed<S>;

    fn layer(&self, inner: S) -> LoadShed<S> {
        LoadShed {
            inner,
            shed: self.clone(),
        }
    }
}

/// The service [`LoadShedLayer`] makes.
#[derive(Debug, Clone)]
pub struct LoadShed<S> {
    inner: S,
    shed: LoadShedLayer,
}

/// A request's place among those in flight, given back when dropped (its
/// response is done, or the request was abandoned).
#[derive(Debug)]
pub struct InFlight(Arc<ShedStats>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Relaxed);
    }
}

impl LoadShedLayer {
    /// A place in flight, or `None` (counted as shed) when all are taken. For
    /// handlers that decide themselves which requests count (long-polls).
    pub fn admit(&self) -> Option<InFlight> {
        let admitted = self
            .stats
            .in_flight
            .fetch_update(Relaxed, Relaxed, |n| (n < self.limit).then_some(n + 1))
            .is_ok();
        if admitted {
            Some(InFlight(self.stats.clone()))
        } else {
            self.stats.shed.fetch_add(1, Relaxed);
            None
        }
    }

    /// A `Retry-After` in whole seconds, drawn from the layer's range, for a refusal.
    pub fn retry_after_seconds(&self) -> u64 {
        rand::rng().random_range(self.retry_after.clone())
    }

    fn refusal<B: Default>(&self) -> Response<B> {
        let seconds = self.retry_after_seconds();
        let mut response = Response::new(B::default());
        *response.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        response
    }
}

impl<S, ReqBody, ResBody> Service<Request<ReqBody>> for LoadShed<S>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>>,
    ResBody: Default,
{
    type Response = Response<ResBody>;
    type Error = S::Error;
    type Future = ResponseFuture<S::Future, ResBody>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<ReqBody>) -> Self::Future {
        let state = match self.shed.admit() {
            Some(in_flight) => State::Admitted {
                inner: self.inner.call(request),
                in_flight,
            },
            None => State::Shed {
                response: Some(self.shed.refusal()),
            },
        };
        ResponseFuture { state }
    }
}

pin_project_lite::pin_project! {
    /// The response of a [`LoadShed`] service: the inner service's, or a 503.
    pub struct ResponseFuture<F, B> {
        #[pin]
        state: State<F, B>,
    }
}

pin_project_lite::pin_project! {
    #[project = StateProjection]
    enum State<F, B> {
        Admitted { #[pin] inner: F, in_flight: InFlight },
        Shed { response: Option<Response<B>> },
    }
}

impl<F, B, E> Future for ResponseFuture<F, B>
where
    F: Future<Output = Result<Response<B>, E>>,
{
    type Output = Result<Response<B>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().state.project() {
            StateProjection::Admitted { inner, .. } => inner.poll(cx),
            StateProjection::Shed { response } => {
                Poll::Ready(Ok(response.take().expect("polled after completion")))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;
    use std::convert::Infallible;
    use std::future::poll_fn;
    use tokio::sync::oneshot;

    /// A service whose responses wait for the test to release them.
    #[derive(Clone)]
    struct Held;

    impl Service<Request<oneshot::Receiver<()>>> for Held {
        type Response = Response<String>;
        type Error = Infallible;
        type Future = Pin<Box<dyn Future<Output = Result<Response<String>, Infallible>> + Send>>;

        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
            Poll::Ready(Ok(()))
        }

        fn call(&mut self, request: Request<oneshot::Receiver<()>>) -> Self::Future {
            Box::pin(async move {
                let _ = request.into_body().await;
                Ok(Response::new("served".to_string()))
            })
        }
    }

    fn layer(limit: usize) -> LoadShedLayer {
        LoadShedLayer::new(limit, Duration::from_secs(1)..=Duration::from_secs(30)).unwrap()
    }

    fn held_request() -> (oneshot::Sender<()>, Request<oneshot::Receiver<()>>) {
        let (release, held) = oneshot::channel();
        (release, Request::new(held))
    }

    async fn send(
        service: &mut LoadShed<Held>,
        request: Request<oneshot::Receiver<()>>,
    ) -> ResponseFuture<<Held as Service<Request<oneshot::Receiver<()>>>>::Future, String> {
        poll_fn(|cx| service.poll_ready(cx)).await.unwrap();
        service.call(request)
    }

    #[tokio::test]
    async fn requests_over_the_limit_get_503_with_a_jittered_retry_after() {
        let shed = layer(2);
        let stats = shed.stats();
        let mut service = shed.layer(Held);
        let (release_a, a) = held_request();
        let (_release_b, b) = held_request();
        let first = send(&mut service, a).await;
        let _second = send(&mut service, b).await;
        assert_eq!(stats.in_flight(), 2);

        let mut waits = BTreeSet::new();
        for _ in 0..200 {
            let response = send(&mut service, held_request().1).await.await.unwrap();
            assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
            let seconds: u64 = response.headers()[header::RETRY_AFTER]
                .to_str()
                .unwrap()
                .parse()
                .unwrap();
            assert!((1..=30).contains(&seconds), "Retry-After {seconds}");
            waits.insert(seconds);
        }
        assert!(
            waits.len() > 10,
            "shed clients are told different waits: {waits:?}"
        );
        assert_eq!(stats.shed(), 200);

        release_a.send(()).unwrap();
        assert_eq!(first.await.unwrap().into_body(), "served");
        assert_eq!(stats.in_flight(), 1);
        let (release_c, c) = held_request();
        let third = send(&mut service, c).await;
        release_c.send(()).unwrap();
        assert_eq!(
            third.await.unwrap().status(),
            StatusCode::OK,
            "a place was free again"
        );
    }

    #[tokio::test]
    async fn a_dropped_response_frees_its_place() {
        let shed = layer(1);
        let stats = shed.stats();
        let mut service = shed.layer(Held);
        let (_release, a) = held_request();
        let abandoned = send(&mut service, a).await;
        drop(abandoned);
        assert_eq!(stats.in_flight(), 0);
        let (release, b) = held_request();
        let admitted = send(&mut service, b).await;
        release.send(()).unwrap();
        assert_eq!(admitted.await.unwrap().status(), StatusCode::OK);
    }

    #[test]
    fn bad_settings_are_errors_not_panics() {
        assert_eq!(
            LoadShedLayer::new(0, Duration::ZERO..=Duration::ZERO).unwrap_err(),
            ShedConfigError::ZeroLimit
        );
        let inverted = LoadShedLayer::new(1, Duration::from_secs(5)..=Duration::from_secs(1));
        assert!(matches!(inverted, Err(ShedConfigError::EmptyRange { .. })));
        let rounded =
            LoadShedLayer::new(1, Duration::from_millis(1500)..=Duration::from_millis(1500)).unwrap();
        assert_eq!(
            rounded.retry_after,
            2..=2,
            "Retry-After is whole seconds, rounded up"
        );
    }
}
