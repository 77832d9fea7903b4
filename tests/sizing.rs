//! The shipped Deployment's memory limit holds the watchers its
//! `--max-long-polls` lets in: plain HTTP (deploy/base) and HTTPS (the
//! secure overlay, deploy/components/secure). Each is measured on the real
//! binary: a few thousand long-polls parked, the daemon's RSS and the
//! kernel's TCP memory before and after, projected to the shipped count.
//!
//! The test binary is a debug build, whose futures are larger than a release
//! build's: the projection errs on the safe side.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::certs::Ca;
use common::{ConfigMapDir, Daemon, SEED_POLICY};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use serde_yaml::Value;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

/// Watchers parked for the measurement.
const PARKED: usize = 2_000;

/// The shipped container's `--max-long-polls` and memory limit (bytes), from
/// the base Deployment with `patch` (a strategic-merge patch of it) applied
/// to the container's resources.
fn shipped(patch: Option<&str>) -> (usize, u64) {
    let read = |path: &str| -> Value {
        let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"));
        serde_yaml::from_str(&text).unwrap()
    };
    let container = |deployment: &Value| deployment["spec"]["template"]["spec"]["containers"][0].clone();
    let base = container(&read("deploy/base/deployment.yaml"));
    let max_long_polls = base["args"]
        .as_sequence()
        .unwrap()
        .iter()
        .find_map(|arg| arg.as_str()?.strip_prefix("--max-long-polls="))
        .expect("the base Deployment sets --max-long-polls")
        .parse()
        .unwrap();
    let limit = patch
        .map(|path| container(&read(path))["resources"]["limits"]["memory"].clone())
        .filter(|limit| !limit.is_null())
        .unwrap_or_else(|| base["resources"]["limits"]["memory"].clone());
    (max_long_polls, mebibytes(limit.as_str().unwrap()))
}

/// `256Mi` in bytes.
fn mebibytes(quantity: &str) -> u64 {
    let number = quantity
        .strip_suffix("Mi")
        .unwrap_or_else(|| panic!("memory limit {quantity:?} is not in Mi"));
    number.parse::<u64>().unwrap() << 20
}

/// The kernel's TCP buffer memory, in bytes (`/proc/net/sockstat`).
fn tcp_memory() -> u64 {
    let sockstat = std::fs::read_to_string("/proc/net/sockstat").unwrap();
    let pages: u64 = sockstat
        .lines()
        .find_map(|line| line.strip_prefix("TCP: "))
        .and_then(|fields| fields.split_whitespace().skip_while(|f| *f != "mem").nth(1))
        .and_then(|pages| pages.parse().ok())
        .expect("TCP mem in /proc/net/sockstat");
    pages * 4096
}

/// What parking costs, per watcher, and the daemon's RSS before.
struct Cost {
    before: u64,
    rss_per_watcher: f64,
    kernel_per_watcher: f64,
}

impl Cost {
    fn projected(&self, watchers: usize) -> u64 {
        let each = self.rss_per_watcher + self.kernel_per_watcher;
        self.before + (each * watchers as f64) as u64
    }
}

/// Parks [`PARKED`] long-polls on `daemon` through `connect` and measures.
async fn cost<S, F, Fut>(daemon: &Daemon, connect: F) -> Cost
where
    S: AsyncRead + AsyncWrite + Unpin,
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = S>,
{
    let (_, hard) = rlimit::Resource::NOFILE.get().unwrap();
    rlimit::Resource::NOFILE.set(hard, hard).unwrap();
    let mut first = connect().await;
    first
        .write_all(b"GET /v1/policies/payment-service HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let etag = etag(&mut first).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (before, kernel_before) = (daemon.rss_kib() * 1024, tcp_memory());
    let poll = format!(
        "GET /v1/policies/payment-service?wait=300s HTTP/1.1\r\nHost: x\r\nIf-None-Match: {etag}\r\n\r\n"
    );
    let mut parked = Vec::with_capacity(PARKED);
    for _ in 0..PARKED {
        let mut stream = connect().await;
        stream.write_all(poll.as_bytes()).await.unwrap();
        stream.flush().await.unwrap();
        parked.push(stream);
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (after, kernel_after) = (daemon.rss_kib() * 1024, tcp_memory());
    Cost {
        before,
        rss_per_watcher: after.saturating_sub(before) as f64 / PARKED as f64,
        kernel_per_watcher: kernel_after.saturating_sub(kernel_before) as f64 / PARKED as f64,
    }
}

/// The ETag of the answer being read from `stream`.
async fn etag<S: AsyncRead + Unpin>(stream: &mut S) -> String {
    use tokio::io::AsyncReadExt;
    let mut head = Vec::new();
    let mut chunk = [0u8; 4096];
    while common::raw::find(&head, b"\r\n\r\n").is_none() {
        let n = stream.read(&mut chunk).await.unwrap();
        assert!(n > 0);
        head.extend_from_slice(&chunk[..n]);
    }
    let head = String::from_utf8_lossy(&head).into_owned();
    head.lines()
        .find(|line| line.to_lowercase().starts_with("etag:"))
        .map(|line| line["etag:".len()..].trim().to_owned())
        .expect("an ETag")
}

fn report(what: &str, cost: &Cost, watchers: usize, limit: u64) {
    let mib = |bytes: u64| bytes as f64 / f64::from(1 << 20);
    println!(
        "{what}: {:.1} KiB RSS + {:.1} KiB kernel per watcher; {watchers} watchers: {:.0} MiB of the {:.0} MiB limit",
        cost.rss_per_watcher / 1024.0,
        cost.kernel_per_watcher / 1024.0,
        mib(cost.projected(watchers)),
        mib(limit)
    );
    assert!(
        cost.projected(watchers) <= limit,
        "{what}: {watchers} watchers need {:.0} MiB, past the {:.0} MiB limit",
        mib(cost.projected(watchers)),
        mib(limit)
    );
}

#[tokio::test]
async fn the_base_deployment_holds_its_long_polls_in_its_memory_limit() {
    let (watchers, limit) = shipped(None);
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("policy.yaml");
    std::fs::write(&policy, SEED_POLICY).unwrap();
    let max = watchers.to_string();
    let daemon = Daemon::start(&policy, &["--max-long-polls", &max]);
    let address = daemon.base.trim_start_matches("http://").to_string();
    let cost = cost(&daemon, || {
        let address = address.clone();
        async move { TcpStream::connect(address).await.unwrap() }
    })
    .await;
    report("plain HTTP", &cost, watchers, limit);
}

#[tokio::test]
async fn the_secure_overlay_holds_its_long_polls_in_its_memory_limit() {
    let (watchers, limit) = shipped(Some("deploy/components/secure/deployment-patch.yaml"));
    let ca = Ca::new("sizing CA");
    let pair = ca.server();
    let secret = ConfigMapDir::with_files(&[("tls.crt", &pair.cert), ("tls.key", &pair.key)]);
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("policy.yaml");
    std::fs::write(&policy, SEED_POLICY).unwrap();
    let (cert, key) = (secret.root().join("tls.crt"), secret.root().join("tls.key"));
    let max = watchers.to_string();
    let flags = [
        "--max-long-polls",
        &max,
        "--tls-cert",
        cert.to_str().unwrap(),
        "--tls-key",
        key.to_str().unwrap(),
    ];
    let daemon = Daemon::start(&policy, &flags);
    let address = daemon.base.trim_start_matches("https://").to_string();
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_slice(ca.pem().as_bytes()).unwrap())
        .unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    // As the project's clients speak: HTTP/1.1 over TLS.
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let cost = cost(&daemon, || {
        let (connector, address) = (connector.clone(), address.clone());
        async move {
            let tcp = TcpStream::connect(address).await.unwrap();
            connector
                .connect(ServerName::try_from("localhost").unwrap(), tcp)
                .await
                .unwrap()
        }
    })
    .await;
    report("HTTPS", &cost, watchers, limit);
}
