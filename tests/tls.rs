//! HTTPS on the daemon's listeners, end to end: the real binary, real TLS
//! over loopback with certificates the test makes, client certificates,
//! and a certificate rotated the way cert-manager and the kubelet rotate
//! one, under load, without a failed request.

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::certs::{Ca, Pair};
use common::{eventually, sample, ConfigMapDir, Daemon};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use serde_json::json;

const POLICY: &str = "defaults:\n  maxRetries: 3\nservices:\n  payments:\n    maxRetries: 5\n";

struct Setup {
    _policy: tempfile::TempDir,
    secret: ConfigMapDir,
    daemon: Daemon,
    ca: Ca,
}

fn secret_files(pair: &Pair) -> [(&'static str, &str); 2] {
    [("tls.crt", &pair.cert), ("tls.key", &pair.key)]
}

/// A daemon serving HTTPS with a certificate from a fresh CA, mounted as a
/// kubelet mounts a Secret, plus `extra` flags.
fn start(extra: &[&str], client_ca: Option<&Ca>) -> Setup {
    let ca = Ca::new("stormguard test CA");
    let policy = tempfile::tempdir().unwrap();
    std::fs::write(policy.path().join("policy.yaml"), POLICY).unwrap();
    let secret = ConfigMapDir::with_files(&secret_files(&ca.server()));
    let client_ca_file = policy.path().join("client-ca.crt");
    let mut flags = vec![
        "--tls-cert".to_string(),
        secret.root().join("tls.crt").display().to_string(),
        "--tls-key".to_string(),
        secret.root().join("tls.key").display().to_string(),
    ];
    if let Some(client_ca) = client_ca {
        std::fs::write(&client_ca_file, client_ca.pem()).unwrap();
        flags.extend([
            "--tls-client-ca".to_string(),
            client_ca_file.display().to_string(),
        ]);
    }
    flags.extend(extra.iter().map(|s| s.to_string()));
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let daemon = Daemon::start(&policy.path().join("policy.yaml"), &flags);
    Setup {
        _policy: policy,
        secret,
        daemon,
        ca,
    }
}

/// A client that trusts only `ca`, connecting to `localhost` (a name the
/// daemon's certificate has).
fn client(ca: &Ca, identity: Option<&Pair>, pooled: bool) -> reqwest::Client {
    let mut builder = reqwest::Client::builder()
        .tls_built_in_root_certs(false)
        .add_root_certificate(reqwest::Certificate::from_pem(ca.pem().as_bytes()).unwrap())
        .timeout(Duration::from_secs(5));
    if let Some(pair) = identity {
        let pem = format!("{}{}", pair.cert, pair.key);
        builder = builder.identity(reqwest::Identity::from_pem(pem.as_bytes()).unwrap());
    }
    if !pooled {
        builder = builder.pool_max_idle_per_host(0);
    }
    builder.build().unwrap()
}

fn https(daemon: &Daemon, path: &str) -> String {
    let port = daemon.base.rsplit(':').next().unwrap();
    assert!(daemon.base.starts_with("https://"), "{}", daemon.base);
    format!("https://localhost:{port}{path}")
}

async fn metrics(daemon: &Daemon, ca: &Ca) -> String {
    let answer = client(ca, None, true)
        .get(https(daemon, "/metrics"))
        .send()
        .await
        .unwrap();
    answer.text().await.unwrap()
}

/// A TLS connection to the daemon, its handshake done, trusting `ca`.
async fn handshake(daemon: &Daemon, ca: &Ca) -> tokio_rustls::client::TlsStream<tokio::net::TcpStream> {
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_slice(ca.pem().as_bytes()).unwrap())
        .unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let address = daemon.base.trim_start_matches("https://");
    let tcp = tokio::net::TcpStream::connect(address).await.unwrap();
    tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
        .unwrap()
}

/// The certificate a new connection is served, DER.
async fn served_certificate(daemon: &Daemon, ca: &Ca) -> Vec<u8> {
    let tls = handshake(daemon, ca).await;
    tls.get_ref().1.peer_certificates().unwrap()[0].to_vec()
}

fn der(pair: &Pair) -> Vec<u8> {
    CertificateDer::from_pem_slice(pair.cert.as_bytes())
        .unwrap()
        .to_vec()
}

#[tokio::test]
async fn both_listeners_speak_https_only_to_clients_that_trust_the_ca() {
    let Setup { daemon, ca, .. } = start(&["--admin-listen", "127.0.0.1:0"], None);
    let trusting = client(&ca, None, true);
    let answer = trusting
        .get(https(&daemon, "/v1/policies/payments"))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 200);
    assert_eq!(answer.version(), reqwest::Version::HTTP_2, "ALPN offers h2");
    let policy: serde_json::Value = answer.json().await.unwrap();
    assert_eq!(policy["policy"]["maxRetries"], 5);
    let admin_port = daemon.admin_base.as_deref().unwrap().rsplit(':').next().unwrap();
    let health = trusting
        .get(format!("https://localhost:{admin_port}/healthz"))
        .send()
        .await
        .unwrap();
    assert_eq!(health.status(), 200, "the admin listener speaks HTTPS too");

    let stranger = client(&Ca::new("another CA"), None, true);
    let refused = stranger.get(https(&daemon, "/healthz")).send().await;
    assert!(
        refused.is_err(),
        "a client that does not trust the CA gets nothing"
    );
    let plain = reqwest::get(daemon.url("/healthz").replace("https://", "http://")).await;
    assert!(plain.is_err(), "plain HTTP gets no answer: {plain:?}");
    let probe = tokio::net::TcpStream::connect(daemon.base.trim_start_matches("https://")).await;
    drop(probe.expect("a TCP probe connects"));
    tokio::time::sleep(Duration::from_millis(200)).await;
    let exposition = metrics(&daemon, &ca).await;
    assert_eq!(
        sample(&exposition, "stormguard_tls_handshake_failures_total"),
        Some(2.0),
        "the stranger and plain HTTP, not the TCP probe: {exposition}"
    );
}

#[tokio::test]
async fn a_connection_that_says_nothing_after_its_handshake_is_closed_at_the_header_read_timeout() {
    use tokio::io::AsyncReadExt;
    let Setup { daemon, ca, .. } = start(&["--header-read-timeout", "1s"], None);
    let mut quiet = handshake(&daemon, &ca).await;
    let mut byte = [0u8; 1];
    let closed = tokio::time::timeout(Duration::from_secs(5), quiet.read(&mut byte)).await;
    assert!(
        matches!(closed, Ok(Ok(0)) | Ok(Err(_))),
        "a silent connection is not held open: {closed:?}"
    );
}

#[tokio::test]
async fn with_a_client_ca_only_clients_with_its_certificates_are_served() {
    let clients_ca = Ca::new("clients CA");
    let Setup { daemon, ca, .. } = start(&[], Some(&clients_ca));
    let signed = client(&ca, Some(&clients_ca.client("checkout")), true);
    let answer = signed
        .get(https(&daemon, "/v1/policies/payments"))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 200);

    let anonymous = client(&ca, None, true);
    let refused = anonymous
        .get(https(&daemon, "/v1/policies/payments"))
        .send()
        .await;
    assert!(refused.is_err(), "no client certificate: {refused:?}");
    let impostor = client(&ca, Some(&Ca::new("another CA").client("checkout")), true);
    let refused = impostor.get(https(&daemon, "/v1/policies/payments")).send().await;
    assert!(refused.is_err(), "a certificate from another CA: {refused:?}");
}

#[test]
fn a_daemon_given_unusable_tls_files_refuses_to_start_and_names_them() {
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("policy.yaml");
    std::fs::write(&policy, POLICY).unwrap();
    let ca = Ca::new("test CA");
    let (one, other) = (ca.server(), ca.server());
    let (cert, key) = (dir.path().join("tls.crt"), dir.path().join("tls.key"));
    std::fs::write(&cert, &one.cert).unwrap();
    std::fs::write(&key, &other.key).unwrap();
    let refused = |tls: &[&std::path::Path]| {
        let flags = ["--tls-cert", "--tls-key"].into_iter().zip(tls);
        let output = std::process::Command::new(env!("CARGO_BIN_EXE_stormguard"))
            .args(["serve", "--listen", "127.0.0.1:0", "--policy"])
            .arg(&policy)
            .args(flags.flat_map(|(flag, file)| [flag.as_ref(), file.as_os_str()]))
            .output()
            .unwrap();
        assert!(!output.status.success());
        String::from_utf8_lossy(&output.stderr).into_owned()
    };
    let stderr = refused(&[&cert, &key]);
    assert!(
        stderr.contains("tls.crt with") && stderr.contains("tls.key"),
        "{stderr}"
    );
    let stderr = refused(&[&cert]);
    assert!(
        stderr.contains("--tls-key"),
        "a certificate needs its key: {stderr}"
    );
}

/// Requests from `clients` until `stop`, half of them on new connections
/// (each a new handshake); every failure is kept.
struct Load {
    done: Arc<AtomicU64>,
    failures: Arc<Mutex<Vec<String>>>,
    stop: Arc<AtomicBool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Load {
    fn start(daemon: &Daemon, ca: &Ca) -> Self {
        let (done, failures, stop) = (Arc::default(), Arc::default(), Arc::new(AtomicBool::new(false)));
        let tasks = (0..4)
            .map(|i| {
                let http = client(ca, None, i % 2 == 0);
                let (policy, reports) = (
                    https(daemon, "/v1/policies/payments"),
                    https(daemon, "/v1/reports"),
                );
                let (done, failures, stop): (Arc<AtomicU64>, Arc<Mutex<Vec<String>>>, Arc<AtomicBool>) =
                    (Arc::clone(&done), Arc::clone(&failures), stop.clone());
                tokio::spawn(async move {
                    let report = json!({"service": "payments", "instance": format!("pod-{i}"),
                        "endpoints": [{"endpoint": "/charge", "requests": {"success": 1}}]});
                    while !stop.load(Relaxed) {
                        let fetched = http.get(&policy).send().await.map(|a| a.status().as_u16());
                        let sent = http
                            .post(&reports)
                            .json(&report)
                            .send()
                            .await
                            .map(|a| a.status().as_u16());
                        for (what, outcome, due) in [("policy", fetched, 200), ("report", sent, 202)] {
                            match outcome {
                                Ok(status) if status == due => {
                                    done.fetch_add(1, Relaxed);
                                }
                                other => failures.lock().unwrap().push(format!("{what}: {other:?}")),
                            }
                        }
                    }
                })
            })
            .collect();
        Self {
            done,
            failures,
            stop,
            tasks,
        }
    }

    async fn stop(self) -> (u64, Vec<String>) {
        self.stop.store(true, Relaxed);
        for task in self.tasks {
            task.await.unwrap();
        }
        let failures = self.failures.lock().unwrap().clone();
        (self.done.load(Relaxed), failures)
    }
}

#[tokio::test]
async fn a_certificate_rotated_under_load_fails_no_request() {
    let Setup {
        daemon,
        ca,
        mut secret,
        ..
    } = start(&["--workers", "2"], None);
    let first = std::fs::read_to_string(secret.root().join("tls.crt")).unwrap();
    assert_eq!(
        served_certificate(&daemon, &ca).await,
        CertificateDer::from_pem_slice(first.as_bytes()).unwrap().to_vec()
    );
    let load = Load::start(&daemon, &ca);
    tokio::time::sleep(Duration::from_millis(300)).await;

    // A renewal whose key is not its certificate's: the pair in use stays.
    let (renewed, stray) = (ca.server(), ca.server());
    secret.update_files(&[("tls.crt", &renewed.cert), ("tls.key", &stray.key)]);
    let failed = eventually(Duration::from_secs(10), || async {
        let exposition = metrics(&daemon, &ca).await;
        sample(&exposition, r#"stormguard_tls_reloads_total{result="failure"}"#).filter(|n| *n > 0.0)
    })
    .await;
    assert_eq!(failed, Some(1.0), "the mismatched pair is refused once");
    assert_eq!(
        served_certificate(&daemon, &ca).await,
        CertificateDer::from_pem_slice(first.as_bytes()).unwrap().to_vec()
    );

    let next = ca.server();
    secret.update_files(&secret_files(&next));
    let rotated = eventually(Duration::from_secs(10), || async {
        (served_certificate(&daemon, &ca).await == der(&next)).then_some(())
    })
    .await;
    assert!(rotated.is_some(), "the renewed certificate is served");
    tokio::time::sleep(Duration::from_millis(300)).await;

    let (done, failures) = load.stop().await;
    assert!(failures.is_empty(), "{} failed: {failures:?}", failures.len());
    eprintln!("{done} requests during the rotation, none failed");
    assert!(done > 100, "only {done} requests: not a load");
    let exposition = metrics(&daemon, &ca).await;
    assert_eq!(
        sample(&exposition, r#"stormguard_tls_reloads_total{result="success"}"#),
        Some(1.0)
    );
}
