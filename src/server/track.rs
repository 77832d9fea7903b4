//! Per-route request metrics as a tower layer.
//!
//! Each route gets its own layer holding its metric handles, resolved once
//! when the router is built: counting a request is then a few atomic adds,
//! with no label hashing and no route lookup on the hot path.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
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
    route: String,
    duration: Histogram,
    common: [IntCounter; COMMON.len()],
}

impl Handles {
    fn new(metrics: &DaemonMetrics, route: String) -> Self {
        Self {
            duration: metrics.http_duration(&route),
            common: COMMON.map(|status| metrics.http_requests(&route, status)),
            route,
        }
    }

    fn record(&self, metrics: &DaemonMetrics, status: StatusCode, start: Instant) {
        match COMMON.iter().position(|s| *s == status) {
            Some(i) => self.common[i].inc(),
            None => metrics.http_requests(&self.route, status).inc(),
        }
        self.duration.observe(start.elapsed().as_secs_f64());
    }
}

/// Records requests to one route; long-polls (`?wait=`) under `<route>?wait`.
#[derive(Clone)]
pub struct TrackLayer {
    metrics: Arc<DaemonMetrics>,
    plain: Arc<Handles>,
    long_poll: Arc<Handles>,
}

impl TrackLayer {
    /// A layer for the route labelled `route`.
    pub fn new(metrics: Arc<DaemonMetrics>, route: &str) -> Self {
        Self {
            plain: Arc::new(Handles::new(&metrics, route.to_owned())),
            long_poll: Arc::new(Handles::new(&metrics, format!("{route}?wait"))),
            metrics,
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
    S::Future: Send + 'static,
{
    type Response = Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Response, S::Error>> + Send>>;

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
        let metrics = self.layer.metrics.clone();
        let response = self.inner.call(request);
        Box::pin(async move {
            let response = response.await?;
            handles.record(&metrics, response.status(), start);
            Ok(response)
        })
    }
}
