//! Per-route request metrics as a tower layer.
//!
//! Each route gets its own layer holding its metric handles, resolved once
//! when the router is built: counting a request is then a few atomic adds,
//! with no label hashing and no route lookup on the hot path.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::Instant;

use axum::http::{Request, StatusCode};
use axum::response::Response;
use prometheus::{Histogram, IntCounter};
use tower::{Layer, Service};

use crate::metrics::DaemonMetrics;

/// The statuses a route's counters are resolved for up front; others are
/// looked up by label when they happen.
const COMMON: [StatusCode; 6] = [
    StatusCode::OK,
    StatusCode::NOT_MODIFIED,
    StatusCode::BAD_REQUEST,
    StatusCode::UNAUTHORIZED,
    StatusCode::NOT_FOUND,
    StatusCode::SERVICE_UNAVAILABLE,
];

/// One route label's handles.
struct Handles {
    metrics: Arc<DaemonMetrics>,
    route: String,
    duration: Histogram,
    common: [IntCounter; COMMON.len()],
}

impl Handles {
    fn new(metrics: Arc<DaemonMetrics>, route: String) -> Self {
        Self {
            duration: metrics.http_duration(&route),
            common: COMMON.map(|status| metrics.http_requests(&route, status)),
            route,
            metrics,
        }
    }

    fn record(&self, status: StatusCode, start: Instant) {
        match COMMON.iter().position(|s| *s == status) {
            Some(i) => self.common[i].inc(),
            None => self.metrics.http_requests(&self.route, status).inc(),
        }
        self.duration.observe(start.elapsed().as_secs_f64());
    }
}

/// Records requests to one route; long-polls (`?wait=`) under `<route>?wait`.
#[derive(Clone)]
pub struct TrackLayer {
    plain: Arc<Handles>,
    long_poll: Arc<Handles>,
}

impl TrackLayer {
    /// A layer for the route labelled `route`.
    pub fn new(metrics: Arc<DaemonMetrics>, route: &str) -> Self {
        Self {
            plain: Arc::new(Handles::new(metrics.clone(), route.to_owned())),
            long_poll: Arc::new(Handles::new(metrics, format!("{route}?wait"))),
        }
    }
}

impl<S> Layer<S> for TrackLayer {
    type Service = Track<S>;

    fn layer(&self, inner: S) -> Track<S> {
        Track {
            inner,
            layer: self.clone(),
        }
    }
}

/// The service [`TrackLayer`] wraps a route in.
#[derive(Clone)]
pub struct Track<S> {
    inner: S,
    layer: TrackLayer,
}

impl<S, B> Service<Request<B>> for Track<S>
where
    S: Service<Request<B>, Response = Response>,
{
    type Response = Response;
    type Error = S::Error;
    type Future = Tracked<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let start = Instant::now();
        let long_poll = request.uri().query().is_some_and(|q| q.contains("wait="));
        let handles = if long_poll {
            &self.layer.long_poll
        } else {
            &self.layer.plain
        }
        .clone();
        Tracked {
            answer: self.inner.call(request),
            handles,
            start,
        }
    }
}

pin_project_lite::pin_project! {
    /// A route's answer, recorded when it is ready.
    pub struct Tracked<F> {
        #[pin]
        answer: F,
        handles: Arc<Handles>,
        start: Instant,
    }
}

impl<F, E> Future for Tracked<F>
where
    F: Future<Output = Result<Response, E>>,
{
    type Output = Result<Response, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let response = ready!(this.answer.poll(cx))?;
        this.handles.record(response.status(), *this.start);
        Poll::Ready(Ok(response))
    }
}
