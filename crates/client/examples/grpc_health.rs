//! A tonic gRPC client guarded by stormguard, against a gRPC server on
//! loopback that is restarting: it answers its first two health checks
//! `UNAVAILABLE`, which the policy's `5xx` retries (see `GrpcStatus`).
//!
//! Start the daemon (`cargo run -- serve --policy policies/retry-policy.yaml`),
//! then:
//!
//! ```sh
//! cargo run -p stormguard-client --features tonic --example grpc_health -- http://127.0.0.1:8080
//! ```

use std::sync::atomic::{AtomicU32, Ordering::Relaxed};
use std::sync::Arc;

use stormguard_client::{GrpcStatus, Stormguard};
use tonic::transport::server::TcpIncoming;
use tonic::transport::{Channel, Server};
use tonic::Status;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::health_server::HealthServer;
use tonic_health::pb::HealthCheckRequest;
use tonic_health::server::{health_reporter, HealthService};
use tower::ServiceBuilder;

/// How the guarded health check went.
#[derive(Debug, PartialEq, Eq)]
pub struct Checked {
    /// The status the server answered in the end.
    pub status: ServingStatus,
    /// The checks the server was asked, retries included.
    pub asked: u32,
}

/// Starts the restarting server, checks `ledger`'s health through a
/// channel guarded by the daemon's policy at `daemon`, and reports there.
pub async fn run(daemon: &str) -> Result<Checked, Box<dyn std::error::Error>> {
    let (address, asked) = restarting_server().await?;

    let stormguard = Stormguard::start(daemon, ["ledger"]).await?;
    let ledger = stormguard
        .dependency("ledger")
        .expect("watched")
        .layer()
        .classify(GrpcStatus);
    let channel = Channel::from_shared(format!("http://{address}"))?
        .connect()
        .await?;
    let mut client = HealthClient::new(ServiceBuilder::new().layer(ledger).service(channel));
    let answer = client
        .check(HealthCheckRequest {
            service: "ledger".into(),
        })
        .await?;
    stormguard.shutdown().await;

    Ok(Checked {
        status: answer.into_inner().status(),
        asked: asked.load(Relaxed),
    })
}

/// A health server on a free loopback port whose first two checks are
/// answered `UNAVAILABLE`; its address, and the count of checks it was asked.
pub async fn restarting_server() -> std::io::Result<(std::net::SocketAddr, Arc<AtomicU32>)> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let address = listener.local_addr()?;
    let (reporter, _) = health_reporter();
    reporter
        .set_service_status("ledger", tonic_health::ServingStatus::Serving)
        .await;
    let asked = Arc::new(AtomicU32::new(0));
    let counted = asked.clone();
    let health =
        HealthServer::with_interceptor(HealthService::from_health_reporter(reporter), move |request| {
            match counted.fetch_add(1, Relaxed) {
                0 | 1 => Err(Status::unavailable("restarting")),
                _ => Ok(request),
            }
        });
    let server = Server::builder().add_service(health);
    tokio::spawn(server.serve_with_incoming(TcpIncoming::from(listener)));
    Ok((address, asked))
}

#[tokio::main(flavor = "current_thread")]
#[allow(dead_code)] // the tests run `run`, not `main`
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let daemon = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "http://127.0.0.1:8080".into());
    let checked = run(&daemon).await?;
    println!("ledger is {:?}, after {} checks", checked.status, checked.asked);
    Ok(())
}
