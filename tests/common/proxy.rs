//! A loopback HTTP proxy in front of the daemon that can lose, hold or
//! garble answers, and counts what passes through it. In front of several
//! replicas, it deals report batches to them in turn, as a Service may.

use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use hyper_util::rt::TokioIo;

/// What the proxy does to the requests passing through it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Trick {
    /// Forward everything and answer everything.
    None,
    /// Forward report batch number `nth` (from 1), so the daemon counts it,
    /// and close its connection without an answer.
    LoseAnswer { nth: usize },
    /// Hold report batch number `nth` for `hold` before forwarding it and answering.
    Hold { nth: usize, hold: Duration },
    /// Forward policy requests and close the connections of the next
    /// `count` without an answer.
    LosePolicyAnswers { count: usize },
    /// Forward policy requests and answer each 200 with a body that is not JSON.
    GarblePolicies,
    /// Answer the first pace ask, without forwarding it, with a grant of
    /// `rate` for `lease_ms`, and every later one 503.
    GrantOnce { rate: f64, lease_ms: u64 },
    /// Answer the first report batch, without forwarding it, 202 with
    /// `per_second` of `service`'s fleet-scoped budget among `processes`,
    /// and every later one 503.
    FloorOnce {
        service: &'static str,
        per_second: f64,
        processes: u64,
    },
}

/// What becomes of one request's answer.
enum Fate {
    Answer,
    Close,
    Garble,
}

struct Inner {
    /// The daemons behind it: report batches go to each in turn, everything else to the first.
    targets: Vec<String>,
    http: reqwest::Client,
    trick: Mutex<Trick>,
    reports: AtomicUsize,
    /// When each request came, and its path and query, in order.
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
        Self::balance(&[target], trick).await
    }

    /// A proxy in front of several replicas: report batch `n` (from 1)
    /// goes to `targets[(n - 1) % len]`, everything else to the first.
    pub async fn balance(targets: &[&str], trick: Trick) -> Proxy {
        let inner = Arc::new(Inner {
            targets: targets.iter().map(|t| t.to_string()).collect(),
            http: reqwest::Client::new(),
            trick: Mutex::new(trick),
            reports: AtomicUsize::new(0),
            seen: Mutex::default(),
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(accept(listener, inner.clone()));
        Proxy { inner, base }
    }

    /// Changes what the proxy does from the next request on.
    pub fn set(&self, trick: Trick) {
        *self.inner.trick.lock().unwrap() = trick;
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

/// Serves each connection with hyper directly: a service that fails makes
/// hyper close the connection without an answer, which is how a lost
/// answer looks to a client.
async fn accept(listener: tokio::net::TcpListener, inner: Arc<Inner>) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            return;
        };
        let inner = inner.clone();
        let service = hyper::service::service_fn(move |request| {
            let inner = inner.clone();
            async move { forward(&inner, request).await }
        });
        tokio::spawn(async move {
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

async fn forward(
    inner: &Inner,
    request: hyper::Request<hyper::body::Incoming>,
) -> Result<Response, std::io::Error> {
    let (parts, body) = request.into_parts();
    let body = axum::body::to_bytes(Body::new(body), usize::MAX)
        .await
        .unwrap_or_default();
    let path = parts.uri.path_and_query().map_or("/", |p| p.as_str()).to_string();
    inner
        .seen
        .lock()
        .unwrap()
        .push((tokio::time::Instant::now(), path.clone()));
    if parts.method == Method::POST && path == "/v1/pace" {
        if let Some(answer) = pace_answer(inner) {
            return Ok(answer);
        }
    }
    let report = parts.method == Method::POST && path == "/v1/reports";
    if report {
        if let Some(answer) = floor_answer(inner) {
            return Ok(answer);
        }
    }
    let (fate, target) = if report {
        report_fate(inner).await
    } else {
        (Fate::Answer, &inner.targets[0])
    };
    let answer = send(inner, target, parts.method, &parts.uri, parts.headers, body).await;
    // A policy answer's fate is decided when it comes back, so a long-poll
    // already waiting when the trick changes gets the new trick.
    let fate = if path.starts_with("/v1/policies") {
        policy_fate(inner)
    } else {
        fate
    };
    match fate {
        Fate::Answer => Ok(answer),
        Fate::Close => Err(std::io::Error::other("the proxy loses this answer")),
        Fate::Garble => Ok((StatusCode::OK, "<html>not a policy</html>").into_response()),
    }
}

/// What becomes of report batch number n's answer, and where it goes.
async fn report_fate(inner: &Inner) -> (Fate, &String) {
    let nth = inner.reports.fetch_add(1, SeqCst) + 1;
    let target = &inner.targets[(nth - 1) % inner.targets.len()];
    let trick = *inner.trick.lock().unwrap();
    let fate = match trick {
        Trick::LoseAnswer { nth: n } if n == nth => Fate::Close,
        Trick::Hold { nth: n, hold } if n == nth => {
            tokio::time::sleep(hold).await;
            Fate::Answer
        }
        _ => Fate::Answer,
    };
    (fate, target)
}

/// The proxy's own answer to a pace ask, if its trick makes one.
fn pace_answer(inner: &Inner) -> Option<Response> {
    let mut trick = inner.trick.lock().unwrap();
    match *trick {
        Trick::GrantOnce { rate, lease_ms } if rate > 0.0 => {
            *trick = Trick::GrantOnce { rate: 0.0, lease_ms };
            let grant = serde_json::json!({"rate": rate, "leaseMs": lease_ms, "askEveryMs": 100});
            Some((StatusCode::OK, axum::Json(grant)).into_response())
        }
        Trick::GrantOnce { .. } => Some(StatusCode::SERVICE_UNAVAILABLE.into_response()),
        _ => None,
    }
}

/// The proxy's own answer to a report batch, if its trick makes one.
fn floor_answer(inner: &Inner) -> Option<Response> {
    let Trick::FloorOnce {
        service,
        per_second,
        processes,
    } = *inner.trick.lock().unwrap()
    else {
        return None;
    };
    if inner.reports.fetch_add(1, SeqCst) > 0 {
        return Some(StatusCode::SERVICE_UNAVAILABLE.into_response());
    }
    let part = serde_json::json!({"minRetriesPerSecond": per_second, "processes": processes});
    let answer = serde_json::json!({"accepted": 1, "fleetBudgets": {service: part}});
    Some((StatusCode::ACCEPTED, axum::Json(answer)).into_response())
}

fn policy_fate(inner: &Inner) -> Fate {
    let mut trick = inner.trick.lock().unwrap();
    match *trick {
        Trick::LosePolicyAnswers { count } if count > 0 => {
            *trick = Trick::LosePolicyAnswers { count: count - 1 };
            Fate::Close
        }
        Trick::GarblePolicies => Fate::Garble,
        _ => Fate::Answer,
    }
}

async fn send(
    inner: &Inner,
    target: &str,
    method: Method,
    uri: &Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let url = format!("{}{}", target, uri.path_and_query().map_or("/", |p| p.as_str()));
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
