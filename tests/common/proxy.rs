//! A loopback HTTP proxy in front of the daemon that can lose or hold the
//! answer to report batches, and counts what passes through it.

use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};

/// What the proxy does to the report batch whose number (from 1) is `nth`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trick {
    /// Forward everything and answer everything.
    None,
    /// Forward the batch, so the daemon counts it, and never answer it.
    LoseAnswer { nth: usize },
    /// Hold the batch for `hold` before forwarding it and answering.
    Hold { nth: usize, hold: Duration },
}

struct Inner {
    target: String,
    http: reqwest::Client,
    trick: Mutex<Trick>,
    reports: AtomicUsize,
    /// (path and query, whether it was a long-poll) of each request, in order.
    seen: Mutex<Vec<(tokio::time::Instant, String)>>,
}

/// The proxy; dropping it leaves the server running until the test ends.
#[derive(Clone)]
pub struct Proxy {
    inner: Arc<Inner>,
    /// Its base URL.
    pub base: String,
}

impl Proxy {
    pub async fn start(target: &str, trick: Trick) -> Proxy {
        let inner = Arc::new(Inner {
            target: target.to_string(),
            http: reqwest::Client::new(),
            trick: Mutex::new(trick),
            reports: AtomicUsize::new(0),
            seen: Mutex::default(),
        });
        let app = axum::Router::new().fallback(forward).with_state(inner.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Proxy { inner, base }
    }

    /// Report batches that reached the proxy so far.
    pub fn reports(&self) -> usize {
        self.inner.reports.load(SeqCst)
    }

    /// Requests whose path starts with `prefix` since `since`.
    pub fn requests_since(&self, prefix: &str, since: tokio::time::Instant) -> usize {
        let seen = self.inner.seen.lock().unwrap();
        seen.iter()
            .filter(|(at, path)| *at >= since && path.starts_with(prefix))
            .count()
    }
}

async fn forward(State(inner): State<Arc<Inner>>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let body = axum::body::to_bytes(body, usize::MAX).await.unwrap_or_default();
    let path = parts.uri.path_and_query().map_or("/", |p| p.as_str()).to_string();
    inner
        .seen
        .lock()
        .unwrap()
        .push((tokio::time::Instant::now(), path.clone()));
    let mut lose = false;
    if parts.method == Method::POST && path == "/v1/reports" {
        let nth = inner.reports.fetch_add(1, SeqCst) + 1;
        let trick = *inner.trick.lock().unwrap();
        match trick {
            Trick::LoseAnswer { nth: n } if n == nth => lose = true,
            Trick::Hold { nth: n, hold } if n == nth => tokio::time::sleep(hold).await,
            _ => {}
        }
    }
    let answer = send(&inner, parts.method, &parts.uri, parts.headers, body).await;
    if lose {
        std::future::pending::<()>().await;
    }
    answer
}

async fn send(inner: &Inner, method: Method, uri: &Uri, headers: HeaderMap, body: Bytes) -> Response {
    let url = format!(
        "{}{}",
        inner.target,
        uri.path_and_query().map_or("/", |p| p.as_str())
    );
    let mut request = inner.http.request(method, url).body(body);
    for (name, value) in &headers {
        if name != "host" && name != "content-length" {
            request = request.header(name, value);
        }
    }
    match request.send().await {
        Ok(response) => {
            let status = response.status();
            let headers = response.headers().clone();
            let body = response.bytes().await.unwrap_or_default();
            let mut answer = (status, body).into_response();
            for (name, value) in &headers {
                if name != "content-length" && name != "transfer-encoding" {
                    answer.headers_mut().insert(name, value.clone());
                }
            }
            answer
        }
        Err(_) => StatusCode::BAD_GATEWAY.into_response(),
    }
}
