//! The client library inside the stacks services call with, against the
//! real daemon and a real dependency on loopback: a hyper client and a
//! tonic channel through the tower layer, a reqwest client through
//! reqwest-middleware; each request one call, retried as the policy says,
//! answered with the last response, and reported.

mod common;

#[path = "../crates/client/examples/grpc_health.rs"]
mod grpc_health;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{StatusCode, Uri};
use common::{eventually, metrics, sample, ConfigMapDir, Daemon};
use http_body_util::{BodyExt, Full};
use stormguard_client::stormguard_core::retry::GaveUp;
use stormguard_client::{reqwest_middleware, GrpcStatus, Stormguard};
use tower::{Service, ServiceExt};
use tower_layer::Layer;

const POLICY: &str = "\
defaults:
  maxRetries: 3
  initialDelay: 1ms
  maxDelay: 5ms
services:
  payments: {}
  ledger: {}
  inventory:
    gate:
      enabled: true
";

/// A dependency on loopback that answers each request with the next of
/// its statuses, then 200, echoing the body; what it was sent, in order.
struct Dependency {
    base: String,
    sent: Arc<Mutex<Vec<(String, Bytes)>>>,
}

struct Script {
    statuses: Mutex<std::collections::VecDeque<u16>>,
    sent: Arc<Mutex<Vec<(String, Bytes)>>>,
}

async fn answer(State(script): State<Arc<Script>>, uri: Uri, body: Bytes) -> (StatusCode, Bytes) {
    script
        .sent
        .lock()
        .unwrap()
        .push((uri.path().to_owned(), body.clone()));
    let status = script.statuses.lock().unwrap().pop_front().unwrap_or(200);
    (StatusCode::from_u16(status).unwrap(), body)
}

async fn dependency(statuses: &[u16]) -> Dependency {
    let sent = Arc::new(Mutex::new(Vec::new()));
    let script = Arc::new(Script {
        statuses: Mutex::new(statuses.iter().copied().collect()),
        sent: sent.clone(),
    });
    let app = axum::Router::new().fallback(answer).with_state(script);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    Dependency { base, sent }
}

impl Dependency {
    fn sent(&self) -> Vec<(String, Bytes)> {
        self.sent.lock().unwrap().clone()
    }
}

fn daemon() -> (ConfigMapDir, Daemon) {
    let configmap = ConfigMapDir::new(POLICY);
    let daemon = Daemon::start(&configmap.policy(), &[]);
    (configmap, daemon)
}

/// `daemon`'s counts of `service`'s attempts at `endpoint` that ended in
/// each of `statuses`.
async fn reported(daemon: &Daemon, service: &str, endpoint: &str, statuses: &[&str]) -> Vec<Option<f64>> {
    let mut counts = Vec::new();
    for status in statuses {
        let series = format!(
            r#"http_client_requests_total{{endpoint="{endpoint}",service="{service}",status="{status}"}}"#
        );
        counts.push(
            eventually(Duration::from_secs(5), || async {
                sample(&metrics(daemon).await, &series)
            })
            .await,
        );
    }
    counts
}

type Hyper =
    hyper_util::client::legacy::Client<hyper_util::client::legacy::connect::HttpConnector, Full<Bytes>>;

fn hyper_client() -> Hyper {
    hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new()).build_http()
}

fn post(url: String, body: &'static str) -> axum::http::Request<Full<Bytes>> {
    axum::http::Request::post(url)
        .body(Full::new(Bytes::from(body)))
        .unwrap()
}

#[tokio::test]
async fn a_hyper_client_through_the_layer_is_retried_with_its_body_and_reported() {
    let (_configmap, daemon) = daemon();
    let payments = dependency(&[503, 503]).await;
    let stormguard = Stormguard::start(&daemon.base, ["payments"]).await.unwrap();
    let guard = stormguard.dependency("payments").unwrap().layer();

    let mut client = guard.layer(hyper_client());
    let response = client
        .ready()
        .await
        .unwrap()
        .call(post(format!("{}/charge", payments.base), "42 EUR"))
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let body = response.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(body, "42 EUR", "the answer of the third attempt");
    let sent = payments.sent();
    assert_eq!(sent.len(), 3, "two 503s retried");
    assert!(
        sent.iter()
            .all(|(path, body)| path == "/charge" && body == "42 EUR"),
        "each attempt sends the body again: {sent:?}"
    );

    stormguard.shutdown().await;
    assert_eq!(
        reported(&daemon, "payments", "/charge", &["server_error", "success"]).await,
        [Some(2.0), Some(1.0)]
    );
}

#[tokio::test]
async fn a_500_is_an_error_the_send_gate_counts_as_answered_and_a_503_an_overload() {
    let (_configmap, daemon) = daemon();
    let stormguard = Stormguard::start(&daemon.base, ["inventory"]).await.unwrap();
    let inventory = stormguard.dependency("inventory").unwrap();
    // Heard as overload: under the default overloadWhen (most-refused) a
    // refusal from a dependency that accepts starts the gate watching.
    let gate_on = || {
        let policy = inventory.policy();
        let guard = policy.guard();
        let gate = guard.gate().expect("the policy's gate");
        gate.is_on() || gate.is_watching()
    };
    let mut client = inventory.layer().layer(hyper_client());
    for (statuses, paced) in [(&[500, 500][..], false), (&[503][..], true)] {
        let server = dependency(statuses).await;
        let response = client
            .ready()
            .await
            .unwrap()
            .call(post(format!("{}/stock", server.base), "sku-7"))
            .await
            .unwrap();
        assert_eq!(response.status(), 200, "{statuses:?} retried");
        assert_eq!(server.sent().len(), statuses.len() + 1);
        assert_eq!(
            gate_on(),
            paced,
            "after {statuses:?}: the default gate.overloadOn hears 503, not 500"
        );
    }
    stormguard.shutdown().await;
}

#[tokio::test]
async fn the_last_response_is_the_answer_and_a_status_retry_on_leaves_out_is_not_retried() {
    let (_configmap, daemon) = daemon();
    let stormguard = Stormguard::start(&daemon.base, ["payments"]).await.unwrap();
    let mut client = stormguard
        .dependency("payments")
        .unwrap()
        .layer()
        .layer(hyper_client());

    let down = dependency(&[503; 10]).await;
    let response = client
        .ready()
        .await
        .unwrap()
        .call(post(down.base.clone(), ""))
        .await
        .unwrap();
    assert_eq!(response.status(), 503, "the 503 the policy stopped retrying");
    assert_eq!(down.sent().len(), 4, "maxRetries 3: four attempts");

    let missing = dependency(&[404]).await;
    let response = client
        .ready()
        .await
        .unwrap()
        .call(post(missing.base.clone(), ""))
        .await
        .unwrap();
    assert_eq!(response.status(), 404);
    assert_eq!(missing.sent().len(), 1, "retryOn leaves 404 out");
    stormguard.shutdown().await;
}

#[tokio::test]
async fn no_answer_at_all_is_the_guards_error_with_the_clients_as_its_cause() {
    let (_configmap, daemon) = daemon();
    let stormguard = Stormguard::start(&daemon.base, ["payments"]).await.unwrap();
    let mut client = stormguard
        .dependency("payments")
        .unwrap()
        .layer()
        .layer(hyper_client());
    let reserved = common::Reserved::new();
    let nobody = format!("{}/charge", reserved.url());
    let error = client
        .ready()
        .await
        .unwrap()
        .call(post(nobody, ""))
        .await
        .unwrap_err();
    assert_eq!(
        error.gave_up(),
        Some(GaveUp::Exhausted),
        "refused connections are retried: {error}"
    );
    assert!(error.last_error().is_some_and(|e| e.is_connect()), "{error}");
    stormguard.shutdown().await;
    assert_eq!(
        reported(&daemon, "payments", "/charge", &["error"]).await,
        [Some(4.0)]
    );
}

#[tokio::test]
async fn a_reqwest_client_through_the_middleware_is_retried_and_a_stream_is_sent_once() {
    let (_configmap, daemon) = daemon();
    let payments = dependency(&[503, 429]).await;
    let stormguard = Stormguard::start(&daemon.base, ["payments"]).await.unwrap();
    let guarded = stormguard.dependency("payments").unwrap();
    let http = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
        .with(guarded)
        .build();

    let response = http
        .post(format!("{}/charge", payments.base))
        .body("42 EUR")
        .send()
        .await
        .unwrap();
    assert_eq!(
        (response.status().as_u16(), response.text().await.unwrap()),
        (200, "42 EUR".to_owned())
    );
    assert_eq!(payments.sent().len(), 3, "a 503 and a 429 retried");

    let streaming = dependency(&[503]).await;
    let chunks = futures_util::stream::iter([Ok::<_, std::io::Error>(Bytes::from("42 EUR"))]);
    let response = http
        .post(format!("{}/charge", streaming.base))
        .body(reqwest::Body::wrap_stream(chunks))
        .send()
        .await
        .unwrap();
    assert_eq!(
        response.status(),
        503,
        "a stream cannot be sent again: its 503 is the answer"
    );
    assert_eq!(streaming.sent().len(), 1);

    let reserved = common::Reserved::new();
    let nobody = format!("{}/charge", reserved.url());
    let error = http.get(nobody).send().await.unwrap_err();
    assert!(error.to_string().contains("every attempt failed"), "{error}");
    stormguard.shutdown().await;
    assert_eq!(
        reported(&daemon, "payments", "/charge", &["server_error"]).await,
        [Some(2.0)]
    );
}

#[tokio::test]
async fn the_grpc_example_retries_unavailable_through_a_tonic_channel() {
    let (_configmap, daemon) = daemon();
    let checked = grpc_health::run(&daemon.base).await.unwrap();
    assert_eq!(
        checked,
        grpc_health::Checked {
            status: tonic_health::pb::health_check_response::ServingStatus::Serving,
            asked: 3,
        },
        "two UNAVAILABLE answers retried"
    );
    let endpoint = "/grpc.health.v1.Health/Check";
    assert_eq!(
        reported(&daemon, "ledger", endpoint, &["server_error", "success"]).await,
        [Some(2.0), Some(1.0)]
    );
}

#[tokio::test]
async fn a_grpc_timeout_ends_the_call_before_a_retry_would_start() {
    let configmap = ConfigMapDir::new(&POLICY.replace(
        "  ledger: {}\n",
        "  ledger:\n    initialDelay: 2s\n    maxDelay: 2s\n    jitter: none\n",
    ));
    let daemon = Daemon::start(&configmap.policy(), &[]);
    let (address, asked) = grpc_health::restarting_server().await.unwrap();
    let stormguard = Stormguard::start(&daemon.base, ["ledger"]).await.unwrap();
    let ledger = stormguard
        .dependency("ledger")
        .unwrap()
        .layer()
        .classify(GrpcStatus);
    let channel = tonic::transport::Channel::from_shared(format!("http://{address}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut client = tonic_health::pb::health_client::HealthClient::new(ledger.layer(channel));
    let mut request = tonic::Request::new(tonic_health::pb::HealthCheckRequest {
        service: "ledger".into(),
    });
    request.set_timeout(Duration::from_millis(300));
    let status = client.check(request).await.unwrap_err();
    assert_eq!(
        (status.code(), asked.load(std::sync::atomic::Ordering::Relaxed)),
        (tonic::Code::Unavailable, 1),
        "a retry 2 s later would pass the request's 300 ms: the first answer is the call's"
    );
    stormguard.shutdown().await;
}
